"""A throwaway PostgreSQL server for the tests and benchmarks: initdb in a temp dir, a free port, stopped
at the end. Debian's ``postgresql`` package provides the binaries (``.ci/install-postgresql.sh``).

    python .ci/postgres.py run -- CMD ARGS...   start one, run CMD with TEST_POSTGRES_URL set,
                                                stop it, exit with CMD's status
    python .ci/postgres.py start [--fsync] [DIR]
                                                start one in DIR (default: a new temp dir; as root, every
                                                directory above DIR must be open to the postgres user),
                                                kept running; print its URL, then DIR. --fsync: commits
                                                are flushed to disk, as in production (the benchmarks)
    python .ci/postgres.py stop DIR             stop the one in DIR and delete DIR

Imported by the test fixtures (``tests/unit/persistence/conftest.py``, ``e2e/conftest.py``) and the
benchmarks when TEST_POSTGRES_URL is not set, so a single test file runs on its own too.

initdb and the server refuse to run as root: as root, the data directory is given to Debian's
``postgres`` user and the binaries run as that user (``runuser``). The server listens on 127.0.0.1 and
on a Unix socket in its own directory, trusts local connections (user ``ottermq``, database
``postgres``) and, with ``fast=True`` (the tests), does not fsync: a test kills brokers, never the
machine. The benchmarks start it with fsync on, as in production.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

USER = "ottermq"
INSTALL = "bash .ci/install-postgresql.sh (Debian's postgresql package)"


def binaries() -> Path:
    """The directory holding initdb and pg_ctl (Debian: /usr/lib/postgresql/<major>/bin).

    Raises:
        FileNotFoundError: PostgreSQL is not installed.
    """
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name))
    if found:
        return found[-1].parent
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        return Path(pg_ctl).parent
    raise FileNotFoundError(f"PostgreSQL's initdb/pg_ctl not found: install them with {INSTALL}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_owner(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@dataclass
class Server:
    directory: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"

    def stop(self, remove: bool = True) -> None:
        pg_ctl = str(binaries() / "pg_ctl")
        subprocess.run(
            _as_owner([pg_ctl, "-D", str(self.directory / "data"), "-m", "immediate", "-w", "stop"]),
            capture_output=True,
            check=False,
        )
        if remove:
            shutil.rmtree(self.directory, ignore_errors=True)


def start(directory: Path | None = None, *, fast: bool = True) -> Server:
    """Start a new server in ``directory`` (default: a new temp dir) on a free port.

    Raises:
        FileNotFoundError: PostgreSQL is not installed.
        RuntimeError: initdb or the server failed (its log is in the message).
    """
    bin_dir = binaries()
    directory = Path(directory or tempfile.mkdtemp(prefix="ottermq-pg-"))
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    data, log = directory / "data", directory / "server.log"
    init = subprocess.run(
        _as_owner(
            [str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", USER, "-E", "UTF8", "--no-sync"]
        ),
        capture_output=True,
        text=True,
        check=False,
    )
    if init.returncode:
        raise RuntimeError(f"initdb failed ({init.returncode}):\n{init.stdout}\n{init.stderr}")
    port = _free_port()
    options = [f"-p {port}", f"-k {directory}", "-c listen_addresses=127.0.0.1", "-c max_connections=300"]
    if fast:
        options += ["-c fsync=off", "-c full_page_writes=off", "-c synchronous_commit=off"]
    run = subprocess.run(
        _as_owner(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                " ".join(options),
                "-l",
                str(log),
                "-w",
                "-t",
                "60",
                "start",
            ]
        ),
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode:
        text = log.read_text() if log.exists() else ""
        raise RuntimeError(
            f"PostgreSQL did not start ({run.returncode}):\n{run.stdout}\n{run.stderr}\n{text}"
        )
    return Server(directory, port)


@contextlib.contextmanager
def running(fast: bool = True):  # type: ignore[no-untyped-def]
    server = start(fast=fast)
    try:
        yield server
    finally:
        server.stop()


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "run" and argv[1] == "--":
        with running() as server:
            env = dict(os.environ, TEST_POSTGRES_URL=server.url)
            print(f"postgres.py: PostgreSQL on {server.url} (data in {server.directory})", flush=True)
            return subprocess.run(argv[2:], env=env, check=False).returncode
    if argv[:1] == ["start"]:
        fsync = "--fsync" in argv  # as in production (the benchmarks); the tests run without
        rest = [a for a in argv[1:] if a != "--fsync"]
        if len(rest) > 1:
            print(__doc__, file=sys.stderr)
            return 2
        server = start(Path(rest[0]) if rest else None, fast=not fsync)
        print(server.url)
        print(server.directory)
        return 0
    if len(argv) == 2 and argv[0] == "stop":
        directory = Path(argv[1])
        Server(directory, 0).stop()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    started = time.monotonic()
    sys.exit(main(sys.argv[1:]))
