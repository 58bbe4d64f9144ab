"""A PostgreSQL server living on one host of a :class:`~net.Topology`, for the fault runner.

``PgServer(host, data_dir=...)`` initialises ``data_dir`` once (``initdb`` as Debian's ``postgres`` user,
superuser ``ottermq``) and runs the server inside ``host``'s namespace, listening on ``host.ip`` and on
``127.0.0.1`` there, trusting the topology's /24 and local connections. Durability is production's:
``fsync``, ``synchronous_commit`` and ``full_page_writes`` on, so :meth:`PgServer.kill9` loses no commit.

The postmaster is started without ``pg_ctl``, as a direct child of the calling process (see
:meth:`PgServer.start`), its output appended to ``data_dir/server.log``. The binaries and the ``runuser``
wrapper for ``initdb`` come from the project's ``.ci/postgres.py`` (imported by path).
As root every directory above ``data_dir`` must be traversable by ``postgres`` (``tempfile.mkdtemp`` makes
0700 directories: ``chmod 0o711`` the parent; pytest's ``tmp_path`` is not usable).

The Unix socket is in ``data_dir``; a Unix socket is reachable across network namespaces, so clients under
test use :meth:`PgServer.url` (TCP) and only the harness uses the socket.
"""

from __future__ import annotations

import contextlib
import importlib.util
import ipaddress
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .net import Host

log = logging.getLogger(__name__)

CI_POSTGRES = Path(__file__).resolve().parents[2] / ".ci" / "postgres.py"


def _ci_postgres() -> ModuleType:
    """The project's ``.ci/postgres.py``, imported by path (once)."""
    name = "ottermq_ci_postgres"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, CI_POSTGRES)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}


class PgError(RuntimeError):
    """initdb, pg_ctl or the server failed; the message holds their output and the log's tail."""


class PgServer:
    """One PostgreSQL cluster in ``data_dir``, served from ``host``'s namespace.

    Args:
        host: the :class:`~net.Host` whose namespace the server runs in.
        port: the TCP port (on ``host.ip`` and ``127.0.0.1`` inside the namespace).
        data_dir: the cluster's directory (created and initialised on first :meth:`start`).
        subnet: the network trusted in ``pg_hba.conf`` (default: ``host.ip``'s /24).
    """

    def __init__(
        self,
        host: Host,
        port: int = 5432,
        *,
        data_dir: str | os.PathLike[str],
        subnet: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.data_dir = Path(data_dir).absolute()
        self.subnet = str(ipaddress.IPv4Network(subnet or f"{host.ip}/24", strict=False))
        self.log_file = self.data_dir / "server.log"
        self.user: str = _ci_postgres().USER
        self._proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"PgServer({self.host.name}, {self.host.ip}:{self.port}, {self.data_dir})"

    # ---- helpers ---------------------------------------------------------------------------------------
    def _bin(self, name: str) -> str:
        return str(_ci_postgres().binaries() / name)

    def _as_owner(self, argv: list[str]) -> list[str]:
        return list(_ci_postgres()._as_owner(argv))

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def url(self, via: tuple[str, int] | None = None, database: str = "postgres") -> str:
        """A ``postgresql://`` URL to the server, or through ``via`` (a proxy's ``(ip, port)``)."""
        ip, port = via if via is not None else (self.host.ip, self.port)
        return f"postgresql://{self.user}@{ip}:{port}/{database}"

    # ---- life cycle ------------------------------------------------------------------------------------
    @property
    def initialised(self) -> bool:
        """Whether ``data_dir`` holds a cluster."""
        return (self.data_dir / "PG_VERSION").exists()

    def init(self) -> None:
        """``initdb`` the cluster unless ``data_dir`` already holds one (synced to disk, as in production).

        Raises:
            PgError: initdb failed or ``postgres`` cannot reach ``data_dir``.
        """
        if self.initialised:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.data_dir, "postgres", "postgres")
            self.data_dir.chmod(0o700)
            reach = subprocess.run(
                ["runuser", "-u", "postgres", "--", "test", "-w", str(self.data_dir)], check=False
            )
            if reach.returncode:
                raise PgError(f"user postgres cannot reach {self.data_dir}: chmod o+x every directory above")
        argv = [self._bin("initdb"), "-D", str(self.data_dir), "-U", self.user, "-A", "trust", "-E", "UTF8"]
        done = subprocess.run(self._as_owner(argv), capture_output=True, text=True, check=False)
        if done.returncode:
            raise PgError(f"initdb failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        log.info("initdb %s done", self.data_dir)

    def _write_hba(self) -> None:
        hba = self.data_dir / "pg_hba.conf"
        hba.write_text(
            "# written by e2e/chaos/pg.py at every start\n"
            "local all all trust\n"
            "host all all 127.0.0.1/32 trust\n"
            f"host all all {self.subnet} trust\n"
        )
        if os.geteuid() == 0:
            shutil.chown(hba, "postgres", "postgres")

    def _options(self) -> list[str]:
        settings = {
            "listen_addresses": f"127.0.0.1,{self.host.ip}",
            "port": str(self.port),
            "unix_socket_directories": str(self.data_dir),
            "fsync": "on",
            "synchronous_commit": "on",
            "full_page_writes": "on",
            "max_connections": "200",
            "logging_collector": "off",
        }
        return [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]

    def _status(self) -> str:
        """The postmaster's status line in ``postmaster.pid`` (``ready``, ``starting``...), or ``""``."""
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
        except (FileNotFoundError, PermissionError):
            return ""
        return lines[7].strip() if len(lines) > 7 else ""

    def start(self, timeout: float = 60) -> None:
        """Start the server in the host's namespace (``initdb`` first when needed); return once it accepts.

        The postmaster is this process's own child (``ip netns exec`` and ``setpriv`` exec, they do not
        fork), so a killed postmaster is reaped here at once: with ``pg_ctl`` it is an orphan that init
        reaps when it gets round to it, and until then its zombie keeps ``postmaster.pid`` "in use".

        Raises:
            PgError: it did not start (the log's tail is in the message).
        """
        if self.running:
            raise PgError(f"{self!r} is already running")
        self.init()
        self._write_hba()
        if not self.pids():
            # left by a SIGKILL: its pid may still be a zombie that init has not reaped (kill(pid, 0)
            # succeeds on a zombie, and PostgreSQL would take the cluster for running)
            (self.data_dir / "postmaster.pid").unlink(missing_ok=True)
        argv = [self._bin("postgres"), "-D", str(self.data_dir), *self._options()]
        if os.geteuid() == 0:
            argv = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *argv]
        with open(self.log_file, "ab") as log_out:
            self._proc = self.host.popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not (self.postmaster_pid() == self._proc.pid and self._status() == "ready"):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                code = self._proc.poll()
                self.kill9()
                raise PgError(f"PostgreSQL did not start ({code}):\n{self._log_tail()}")
            time.sleep(0.02)
        log.info("%r started (pid %s)", self, self._proc.pid)

    def _wait_gone(self, pid: int, timeout: float) -> bool:
        """Wait until ``pid`` (and every process of the cluster) has ended; whether it did in time."""
        deadline = time.monotonic() + timeout
        if self._proc is not None and self._proc.pid == pid:
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
            self._proc = None
        while self.pids():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def stop(self, mode: str = "fast", timeout: float = 30) -> None:
        """Stop the server: ``"fast"`` (sessions end, a clean shutdown), ``"smart"`` or ``"immediate"``
        (no shutdown checkpoint: recovery at the next start); SIGKILL when it outlives ``timeout``.
        No-op when it is not running."""
        pid = self.postmaster_pid()
        if pid is None or not self.running:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, STOP_SIGNALS[mode])
        if not self._wait_gone(pid, timeout):
            log.warning("%r did not stop (%s) within %s s; killing", self, mode, timeout)
            self.kill9()
        log.info("%r stopped (%s)", self, mode)

    def kill9(self, timeout: float = 10) -> list[int]:
        """SIGKILL the postmaster and every other process of this cluster at once; return when all are gone.

        The cluster's processes are those whose working directory is ``data_dir`` (the postmaster and all
        its children chdir there). The postmaster is stopped first (SIGSTOP: it cannot fork, and no child
        sees it die and runs its exit path), then every child is killed, then the postmaster: no process
        outlives the others by more than this loop, as with ``kill -9`` of a whole process tree.

        Returns:
            The pids killed.

        Raises:
            PgError: some process survived ``timeout`` seconds.
        """
        killed: list[int] = []
        postmaster = self.postmaster_pid()
        if postmaster is not None and postmaster in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(postmaster, signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while pids := self.pids():
            children = [pid for pid in pids if pid != postmaster]
            for pid in children or pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    if pid not in killed:
                        killed.append(pid)
            if time.monotonic() > deadline:
                raise PgError(f"processes {pids} of {self.data_dir} survived SIGKILL")
            time.sleep(0.002)  # the stopped postmaster is killed once it is the last one
        if self._proc is not None:
            if self._proc.poll() is None:  # not yet in data_dir (a failed start)
                self._proc.kill()
            self._proc.wait(timeout)
            self._proc = None
        log.info("%r killed with SIGKILL: %s", self, killed)
        return killed

    def restart(self, kill: bool = False) -> None:
        """Stop (or, with ``kill``, :meth:`kill9`) and start again."""
        if kill:
            self.kill9()
        else:
            self.stop()
        self.start()

    def close(self) -> None:
        """Stop the server if it runs (immediate shutdown, then SIGKILL of anything left)."""
        if self.running:
            self.stop(mode="immediate", timeout=10)
        if self.pids():
            self.kill9()

    def __enter__(self) -> PgServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- state -----------------------------------------------------------------------------------------
    def postmaster_pid(self) -> int | None:
        """The pid in ``postmaster.pid`` (possibly stale after a SIGKILL), or None."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
        except (FileNotFoundError, PermissionError):
            return None
        return int(first) if first.strip().isdigit() else None

    def pids(self) -> list[int]:
        """The live processes of this cluster: every process whose working directory is ``data_dir``."""
        target = os.path.realpath(self.data_dir)
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{entry.name}/cwd") == target:
                    found.append(int(entry.name))
            except OSError:  # gone, a zombie, or a kernel thread
                continue
        return found

    @property
    def running(self) -> bool:
        """Whether the postmaster is alive."""
        pid = self.postmaster_pid()
        return pid is not None and pid in self.pids()
