#!/usr/bin/env bash
# Make sure Debian's chromium is on this machine for the web UI's browser tests (e2e/test_web_ui.py,
# driven by Playwright for Python with executable_path=/usr/bin/chromium; Playwright's own browser
# download is neither needed nor reachable). Idempotent: does nothing when chromium is there or when
# OTTERMQ_CHROMIUM names an existing file.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || { [ -n "${OTTERMQ_CHROMIUM:-}" ] && [ -x "$OTTERMQ_CHROMIUM" ]; }; then
  echo "install-chromium: $(command -v chromium || echo "$OTTERMQ_CHROMIUM") present"
  exit 0
fi
bash "$(dirname "$0")/apt-install.sh" install-chromium chromium
command -v chromium >/dev/null 2>&1 || { echo "install-chromium: no chromium after apt-get install" >&2; exit 1; }
