#!/usr/bin/env bash
# Make sure the fault harness's tools are on this machine (e2e/chaos, e2e/test_chaos*.py): iproute2's
# `ip` (network namespaces, veth, a bridge), nftables' `nft` (silent and one-way partitions, packet
# loss) and Debian's libfaketime (`faketime`: wall-clock steps). The harness also needs root and gcc
# (a small shim for libfaketime, built once). Idempotent: does nothing when all three are there.
set -euo pipefail
missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-chaos: ip, nft and faketime present"
  exit 0
fi
bash "$(dirname "$0")/apt-install.sh" install-chaos "${missing[@]}"
command -v nft >/dev/null 2>&1 && command -v faketime >/dev/null 2>&1 \
  || { echo "install-chaos: nft or faketime missing after apt-get install" >&2; exit 1; }
