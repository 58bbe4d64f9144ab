#!/usr/bin/env bash
# Make sure PHP and its AMQP clients are present for e2e/test_php_clients.py: Debian's php-cli,
# php-amqplib (pure PHP), php-amqp (the librabbitmq-based extension), php-symfony-amqp-messenger and
# php-symfony-event-dispatcher (the Messenger worker's retry and failure listeners; e2e/test_symfony_messenger.py).
# Idempotent: does nothing when they are all there. (The extension is asked for with extension_loaded:
# `php -m | grep -q amqp` under pipefail fails at random, when grep's early exit gets php a SIGPIPE.)
set -euo pipefail
PACKAGES=(php-cli php-amqplib php-amqp php-symfony-amqp-messenger php-symfony-event-dispatcher)
have_all() {
  command -v php >/dev/null 2>&1 && [ -f /usr/share/php/PhpAmqpLib/autoload.php ] \
    && php -r 'exit(extension_loaded("amqp") ? 0 : 1);' 2>/dev/null \
    && [ -f /usr/share/php/Symfony/Component/Messenger/Bridge/Amqp/autoload.php ] \
    && [ -f /usr/share/php/Symfony/Component/EventDispatcher/autoload.php ]
}
if have_all; then
  echo "install-php: php, php-amqplib, php-amqp, Symfony's AMQP messenger and event dispatcher already present"
  exit 0
fi
bash "$(dirname "$0")/apt-install.sh" install-php "${PACKAGES[@]}"
have_all || { echo "install-php: still missing a PHP package" >&2; exit 1; }
