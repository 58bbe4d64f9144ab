#!/usr/bin/env bash
# Make sure a JDK (javac) and RabbitMQ's Java client are present for e2e/test_java_client.py: Debian's
# librabbitmq-client-java (amqp-client 5.x, with libslf4j-java) and default-jdk-headless. Idempotent: does
# nothing when both are there.
set -euo pipefail
JAR=/usr/share/java/amqp-client.jar
PACKAGES=()
command -v javac >/dev/null 2>&1 || PACKAGES+=(default-jdk-headless)
[ -f "$JAR" ] || PACKAGES+=(librabbitmq-client-java)
if [ ${#PACKAGES[@]} -eq 0 ]; then
  echo "install-java: javac and $JAR already present"
  exit 0
fi
bash "$(dirname "$0")/apt-install.sh" install-java "${PACKAGES[@]}"
command -v javac >/dev/null 2>&1 && [ -f "$JAR" ] || { echo "install-java: still missing javac or $JAR" >&2; exit 1; }
echo "install-java: installed ${PACKAGES[*]}"
