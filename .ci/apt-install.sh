#!/usr/bin/env bash
# apt-install.sh WHO PACKAGE...: `apt-get update` then `apt-get install` of the packages, as root or
# through sudo, noninteractive; WHO names the calling script in the log line. The .ci/install-*.sh
# scripts call it when what they check for is missing.
set -euo pipefail
who=$1
shift
if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi
echo "$who: apt-get install $*"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
