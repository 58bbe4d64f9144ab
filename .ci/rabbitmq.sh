#!/usr/bin/env bash
# Make sure a RabbitMQ answers at the given AMQP URL's port (default 5672) for `make conformance`.
# Reuses one that is already running (e.g. from an earlier CI run); otherwise starts Debian's
# rabbitmq-server detached and waits until it accepts AMQP connections.
set -euo pipefail
check_only=0
if [ "${1:-}" = "--check" ]; then check_only=1; shift; fi   # only report whether one answers
url="${1:-amqp://guest:guest@127.0.0.1:5672/%2F}"
port=$(python3 -c 'import sys,urllib.parse as u; print(u.urlparse(sys.argv[1]).port or 5672)' "$url")
answers() {
  python3 - "$port" <<'PY'
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
    s.sendall(b"AMQP\x00\x00\x09\x01")
    s.settimeout(5)
    data = s.recv(8)
    sys.exit(0 if data[:1] == b"\x01" else 1)
except OSError:
    sys.exit(1)
PY
}
# The management API (15672) and Prometheus metrics (15692) for e2e/test_management_api.py, the
# consistent-hash exchange type for e2e/test_consistent_hash.py, dynamic shovels with their API
# (/api/shovels) for e2e/test_shovel*.py, and for e2e/test_definitions_everything.py every plugin whose
# objects a definitions export can hold (shovel and federation parameters; the random, JMS topic,
# recent-history and sharding exchange types); enabling is idempotent and works on a running node
# (rabbitmq-plugins talks to it) or an offline one.
PLUGINS="rabbitmq_management rabbitmq_prometheus rabbitmq_consistent_hash_exchange rabbitmq_shovel
  rabbitmq_shovel_management rabbitmq_federation rabbitmq_random_exchange rabbitmq_jms_topic_exchange
  rabbitmq_recent_history_exchange rabbitmq_sharding"
management() {
  if [ "$check_only" = 1 ]; then return 0; fi
  # shellcheck disable=SC2086 # a list of plugin names
  rabbitmq-plugins enable $PLUGINS >/dev/null 2>&1 \
    || rabbitmq-plugins --offline enable $PLUGINS >/dev/null 2>&1 || true
  for _ in $(seq 1 60); do
    if python3 -c 'import urllib.request as u, urllib.error as e, sys
try: u.urlopen("http://127.0.0.1:15672/api/overview", timeout=2)
except e.HTTPError: sys.exit(0)
except OSError: sys.exit(1)' ; then echo "RabbitMQ management answering on 15672"; return 0; fi
    sleep 1
  done
  echo "RabbitMQ management did not answer on 15672 within 60 s" >&2
  return 1
}
if answers; then echo "RabbitMQ already answering on port $port"; management; exit 0; fi
if [ "$check_only" = 1 ]; then echo "no broker answering on port $port"; exit 1; fi
if ! command -v rabbitmq-server >/dev/null 2>&1; then
  echo "rabbitmq-server is not installed: apt-get install rabbitmq-server (CI does this in .ci/run)" >&2
  exit 1
fi
echo "starting rabbitmq-server -detached"
# as many sockets as the benchmark's 1000 idle connections need (the default 1024 descriptors
# give RabbitMQ ~830 client sockets)
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
rabbitmq-server -detached || true
for _ in $(seq 1 120); do
  if answers; then echo "RabbitMQ is up on port $port"; management; exit 0; fi
  sleep 1
done
echo "RabbitMQ did not come up on port $port within 120 s" >&2
exit 1
