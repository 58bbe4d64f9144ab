#!/usr/bin/env bash
# Make sure a C compiler and librabbitmq-c's headers are present for the C load generator of `make bench`
# (benchmarks/cgen, the c:* scenarios of benchmarks/run.py). Idempotent: does nothing when `cc` compiles
# and links a program against librabbitmq; installs Debian's packages otherwise.
set -euo pipefail
PACKAGES=(build-essential librabbitmq-dev pkg-config)

have_cgen() {
  command -v cc >/dev/null 2>&1 || return 1
  local dir
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' RETURN
  printf '#include <amqp.h>\nint main(void){return amqp_version_number()==0;}\n' >"$dir/t.c"
  cc -o "$dir/t" "$dir/t.c" $(pkg-config --cflags --libs librabbitmq 2>/dev/null || echo -lrabbitmq) \
    >/dev/null 2>&1
}

if have_cgen; then
  echo "install-cgen: cc and librabbitmq-dev already present"
  exit 0
fi
echo "install-cgen: cc or librabbitmq-dev not found"
bash "$(dirname "$0")/apt-install.sh" install-cgen "${PACKAGES[@]}"
if ! have_cgen; then
  echo "install-cgen: still cannot build against librabbitmq after apt-get install" >&2
  exit 1
fi
echo "install-cgen: installed $(cc --version | head -n1), librabbitmq $(pkg-config --modversion librabbitmq)"
