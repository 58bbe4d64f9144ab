#!/usr/bin/env bash
# Make sure Node.js, npm and the pinned packages (amqplib, rascal, amqp-connection-manager) are present for
# e2e/test_node_client.py, e2e/test_node_frameworks.py and e2e/test_mixed_clients.py. Idempotent: does
# nothing when e2e/node/node_modules already holds every package e2e/node/package-lock.json pins.
#
# Node: the machine's own `node` and `npm` are used when present (amqplib 2.x needs Node >= 18). Only when
# one is missing are Debian's packages installed: bookworm ships nodejs 18.20 and npm 9.2. Debian's npm
# conflicts with NodeSource's nodejs (which bundles its own npm), so npm is never added beside a node
# that is not Debian's.
# Packages: `npm ci` from the committed lockfile, through the npm registry only (no install scripts).
set -euo pipefail
cd "$(dirname "$0")/.."
NODE_DIR=e2e/node
MIN_NODE_MAJOR=18

node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
apt_install() { bash .ci/apt-install.sh install-node "$@"; }

if ! command -v node >/dev/null 2>&1; then
  echo "install-node: node not found"
  apt_install nodejs npm
elif ! command -v npm >/dev/null 2>&1; then
  if [[ "$(dpkg-query -W -f='${Version}' nodejs 2>/dev/null)" == *nodesource* ]]; then
    echo "install-node: NodeSource's nodejs is installed without npm; reinstall it (it bundles npm)" >&2
    exit 1
  fi
  echo "install-node: npm not found"
  apt_install npm
fi
if [ "$(node_major)" -lt "$MIN_NODE_MAJOR" ]; then
  echo "install-node: node $(node --version) is older than $MIN_NODE_MAJOR (amqplib's minimum)" >&2
  exit 1
fi

# "name@version ..." for each direct dependency (package.json's, sorted) as the lockfile pins it ("lock")
# or as node_modules holds it ("installed"; "name@none" when missing)
versions() {
  node -e '
    const [dir, from] = process.argv.slice(1);
    const lock = require(`./${dir}/package-lock.json`);
    const names = Object.keys(lock.packages[""].dependencies).sort();
    console.log(names.map((name) => {
      let version = "";
      try {
        version = from === "lock"
          ? lock.packages[`node_modules/${name}`].version
          : require(`./${dir}/node_modules/${name}/package.json`).version;
      } catch {}
      return `${name}@${version || "none"}`;
    }).join(" "));
  ' "$NODE_DIR" "$1"
}
want=$(versions lock)
have=$(versions installed)
if [ "$have" = "$want" ] && [ "$NODE_DIR/node_modules/.package-lock.json" -nt "$NODE_DIR/package-lock.json" ]; then
  echo "install-node: node $(node --version), npm $(npm --version 2>/dev/null), $have already installed"
  exit 0
fi
echo "install-node: npm ci in $NODE_DIR ($want; installed: $have)"
npm ci --prefix "$NODE_DIR" --ignore-scripts --no-audit --no-fund --loglevel=error
echo "install-node: node $(node --version), npm $(npm --version 2>/dev/null), $(versions installed) installed"
