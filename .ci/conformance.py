#!/usr/bin/env python3
"""Which end-to-end files must run against RabbitMQ again: the conformance ledger (e2e/conformance.lock).

`make conformance` runs every e2e file against a real RabbitMQ; a test that fails there is a wrong test.
What that proves depends only on the test file, the e2e helpers it runs with (conftest.py, the client
programs, every other file under e2e/ that is not a test file) and RabbitMQ's version. So after a green
run each file's key (a SHA-256 of those) is recorded, and CI (`make conformance-changed`) runs only the
files whose key differs from the recorded one, plus one file that always runs (e2e/test_basic.py: the
RabbitMQ under test answers, and the set is never empty). A change to a helper or to RabbitMQ's
version changes every key: everything runs again.

    conformance.py changed [--ignore=e2e/test_x.py ...]   # the files to run, one per line
    conformance.py record [FILE ...] [--ignore=...]        # after a green run: their keys (no FILE: all)
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
E2E = ROOT / "e2e"
LOCK = E2E / "conformance.lock"
ALWAYS = "e2e/test_basic.py"


def rabbitmq_version() -> str:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def tracked() -> list[str]:
    """The files under e2e/ that git tracks (build output and node_modules never count)."""
    out = subprocess.run(["git", "ls-files", "-z", "e2e"], cwd=ROOT, capture_output=True, check=True)
    return sorted(name for name in out.stdout.decode().split("\0") if name)


def helpers_digest() -> str:
    """Every tracked file under e2e/ that is not a test file (nor the ledger)."""
    digest = hashlib.sha256()
    for name in tracked():
        path = ROOT / name
        if path == LOCK or (path.parent == E2E and path.name.startswith("test_") and path.suffix == ".py"):
            continue
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def keys(ignored: set[str]) -> dict[str, str]:
    shared = helpers_digest() + rabbitmq_version()
    found = {}
    for name in tracked():
        path = ROOT / name
        if (
            path.parent == E2E
            and path.name.startswith("test_")
            and path.suffix == ".py"
            and name not in ignored
        ):
            found[name] = hashlib.sha256(shared.encode() + path.read_bytes()).hexdigest()
    return found


def recorded() -> dict[str, str]:
    try:
        data = json.loads(LOCK.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("changed", "record"):
        print(__doc__, file=sys.stderr)
        return 2
    ignored = {a.removeprefix("--ignore=") for a in argv[1:] if a.startswith("--ignore=")}
    files = [a for a in argv[1:] if not a.startswith("--ignore=")]
    current = keys(ignored)
    if argv[0] == "changed":
        old = recorded()
        stale = [name for name, key in current.items() if old.get(name) != key]
        print("\n".join(sorted({ALWAYS, *stale})))
        return 0
    ledger = recorded()
    for name in files or list(current):
        if name in current:
            ledger[name] = current[name]
    LOCK.write_text(
        json.dumps({"rabbitmq": rabbitmq_version(), "files": dict(sorted(ledger.items()))}, indent=1) + "\n",
        encoding="utf-8",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
