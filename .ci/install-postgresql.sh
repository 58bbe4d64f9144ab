#!/usr/bin/env bash
# Make sure Debian's postgresql server binaries (initdb, pg_ctl) are on this machine: the tests start a
# throwaway server of their own (.ci/postgres.py: initdb in a temp dir, a free port). The package's own
# cluster is not used; the tests never touch port 5432. Idempotent: does nothing when pg_ctl is there.
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null 2>&1; then
  echo "install-postgresql: $(ls /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | tail -1 || command -v pg_ctl) present"
  exit 0
fi
bash "$(dirname "$0")/apt-install.sh" install-postgresql postgresql
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { echo "install-postgresql: no pg_ctl after apt-get install" >&2; exit 1; }
