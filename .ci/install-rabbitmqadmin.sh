#!/usr/bin/env bash
# Make sure RabbitMQ's own `rabbitmqadmin` script is on this machine for e2e/test_rabbitmqadmin.py.
# It ships inside Debian's rabbitmq-server package (the management plugin's priv/www/cli/rabbitmqadmin,
# the file RabbitMQ serves at /cli/rabbitmqadmin). Idempotent: does nothing when the file is there or
# when RABBITMQADMIN names an existing file. Installing the package does not need the server running.
set -euo pipefail
GLOB=/usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbitmq_management-*/priv/www/cli/rabbitmqadmin

found() { compgen -G "$GLOB" >/dev/null || { [ -n "${RABBITMQADMIN:-}" ] && [ -f "$RABBITMQADMIN" ]; }; }

if found; then
  echo "install-rabbitmqadmin: $(compgen -G "$GLOB" | head -1 || echo "$RABBITMQADMIN") present"
  exit 0
fi
echo "install-rabbitmqadmin: rabbitmq-server is needed for its rabbitmqadmin script"
bash "$(dirname "$0")/apt-install.sh" install-rabbitmqadmin rabbitmq-server
if ! found; then
  echo "install-rabbitmqadmin: no $GLOB after apt-get install rabbitmq-server" >&2
  exit 1
fi
