#!/usr/bin/env bash
# Make sure the Go toolchain and the amqp091-go client sources are present for e2e/test_go_client.py.
# Idempotent: does nothing when both are there. Installs Debian's packages otherwise (no Go module proxy
# is used: the e2e Go program is built in GOPATH mode against /usr/share/gocode, see e2e/go/README.md).
set -euo pipefail
AMQP091_SRC=/usr/share/gocode/src/github.com/rabbitmq/amqp091-go
PACKAGES=(golang-go golang-github-rabbitmq-amqp091-go-dev)

have_go() { command -v go >/dev/null 2>&1 || [ -x /usr/lib/go/bin/go ]; }
have_src() { [ -f "$AMQP091_SRC/channel.go" ]; }

if have_go && have_src; then
  echo "install-go: go ($(go version 2>/dev/null || /usr/lib/go/bin/go version)) and amqp091-go sources already present"
  exit 0
fi
have_go || echo "install-go: go not found"
have_src || echo "install-go: amqp091-go sources not found in $AMQP091_SRC"
bash "$(dirname "$0")/apt-install.sh" install-go "${PACKAGES[@]}"
if ! have_go || ! have_src; then
  echo "install-go: still missing go or amqp091-go sources after apt-get install" >&2
  exit 1
fi
echo "install-go: installed $(go version 2>/dev/null || /usr/lib/go/bin/go version)"
