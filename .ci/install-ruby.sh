#!/usr/bin/env bash
# Make sure Ruby and Bunny are present for e2e/test_ruby_client.py (Debian's ruby and ruby-bunny).
# Idempotent: does nothing when `ruby -e 'require "bunny"'` works.
set -euo pipefail
if command -v ruby >/dev/null 2>&1 && ruby -e 'require "bunny"' >/dev/null 2>&1; then
  echo "install-ruby: ruby and bunny already present"
  exit 0
fi
bash "$(dirname "$0")/apt-install.sh" install-ruby ruby ruby-bunny
ruby -e 'require "bunny"' || { echo "install-ruby: bunny still missing" >&2; exit 1; }
