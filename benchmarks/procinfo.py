"""Broker processes for the benchmarks: find a pid, read its CPU time and RSS, run our own broker.

Everything here reads ``/proc`` (Linux); on other systems the readers return ``None`` and the
benchmarks report "n/a" instead of CPU and memory figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds ``pid`` has used (``/proc/<pid>/stat`` utime + stime)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a broker's worker processes)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_bytes()
        except OSError:
            continue
        if int(text[text.rfind(b")") + 2 :].split()[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def descendants(pid: int) -> list[int]:
    """``pid``'s children, their children and so on (one scan of ``/proc``)."""
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_bytes()
        except OSError:
            continue
        kids.setdefault(int(text[text.rfind(b")") + 2 :].split()[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def machine_busy_seconds() -> float | None:
    """CPU seconds all cores spent busy since boot (``/proc/stat``: everything but idle and iowait)."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(fields) - fields[3] - fields[4]) / _TICKS


def tree_cpu_seconds(pid: int | None) -> float | None:
    """CPU seconds of ``pid`` and of its children now running (ottermq's workers)."""
    own = cpu_seconds(pid)
    if pid is None or own is None:
        return own
    return own + sum(cpu_seconds(child) or 0.0 for child in children(pid))


def wait_quiet(
    pids: list[int | None], idle: float = 0.05, window: float = 0.5, max_wait: float = 20.0
) -> float:
    """Wait until the brokers ``pids`` (with their workers) are idle: less than ``idle`` of a core over
    ``window`` seconds. Brokers measured in turns share the cores, and one still busy after its own run
    (RabbitMQ collects garbage and emits stats for a few seconds) would take a core from the next; at most
    ``max_wait`` seconds. The seconds waited."""
    start = time.perf_counter()
    known = [pid for pid in pids if pid is not None]
    while True:
        before = [tree_cpu_seconds(pid) or 0.0 for pid in known]
        time.sleep(window)
        after = [tree_cpu_seconds(pid) or 0.0 for pid in known]
        busy = max((b - a for a, b in zip(before, after, strict=True)), default=0.0) / window
        waited = time.perf_counter() - start
        if busy < idle or waited >= max_wait:
            return waited


def rss_bytes(pid: int | None) -> int | None:
    """Resident set size of ``pid`` (``VmRSS`` in ``/proc/<pid>/status``)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_split(pid: int | None) -> tuple[int, int] | None:
    """``(VmRSS, RssFile + RssShmem)`` of ``pid`` in bytes: all resident memory, and the part of it that
    is file-backed or shared (mapped files such as an mmap'd database, which the kernel can reclaim)."""
    if pid is None:
        return None
    found: dict[bytes, int] = {}
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                key = line.split(b":", 1)[0]
                if key in (b"VmRSS", b"RssFile", b"RssShmem"):
                    found[key] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if b"VmRSS" not in found:
        return None
    return found[b"VmRSS"], found.get(b"RssFile", 0) + found.get(b"RssShmem", 0)


def listening_pid(port: int) -> int | None:
    """The process holding a listening TCP socket on ``port`` (needs permission to read its fds)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(fd.path) in wanted:
                        return int(entry.name)
    return None


def find_broker_pid(host: str, port: int) -> int | None:
    """The pid of a broker on this machine: the listener on ``port``, else the oldest ``beam.smp``."""
    if host not in ("127.0.0.1", "localhost", "::1") and not host.startswith("127."):
        return None
    pid = listening_pid(port)
    if pid is not None:
        return pid
    try:
        out = subprocess.run(["pgrep", "-o", "-f", "beam.smp"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return int(out.stdout.split()[0]) if out.stdout.split() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raise_fd_limit() -> int:
    """Lift this process's open-file soft limit to the hard limit (1000-connection scenarios)."""
    try:
        import resource
    except ImportError:  # pragma: no cover
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 65536 if hard == resource.RLIM_INFINITY else hard
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
    return soft


class RssSampler:
    """Polls a pid's RSS every ``interval`` seconds on the running loop and keeps the peak."""

    def __init__(self, pid: int | None, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.peak: int | None = None
        self._task: asyncio.Task[None] | None = None

    def _sample(self) -> None:
        rss = rss_bytes(self.pid)
        if rss is not None and (self.peak is None or rss > self.peak):
            self.peak = rss

    async def _run(self) -> None:
        while True:
            self._sample()
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        if self.pid is not None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> int | None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._sample()
        return self.peak


def overlay(src: Path, site: Path) -> Path:
    """A ``site/ottermq/<pkg>`` symlink tree over another checkout's folders (its pyproject's
    ``package-dir``), so ``python -m ottermq.broker`` with ``PYTHONPATH=site`` runs that code
    instead of the installed editable tree (``ottermq`` is a namespace package).

    Raises:
        FileNotFoundError: ``src`` has no pyproject.toml.
    """
    import tomllib

    with open(src / "pyproject.toml", "rb") as f:
        mapping = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    (site / "ottermq").mkdir(parents=True)
    for package, folder in mapping.items():
        if package.startswith("ottermq."):
            (site / "ottermq" / package.split(".", 1)[1]).symlink_to((src / folder).resolve())
    return site


class OtterMQProcess:
    """Our broker as a child process on a free port with a throw-away data dir.

    Use as a context manager; ``restart()`` gives a fresh process (memory scenarios) and
    ``ensure_running()`` revives one that died. Its output goes to ``log_path``.
    """

    def __init__(
        self,
        src: Path | None = None,
        python: str = sys.executable,
        log_level: str = "WARNING",
        env: dict[str, str] | None = None,
    ) -> None:
        self.repo = src or REPO
        self.extra_env = dict(env or {})  # more OTTERMQ_* settings (OTTERMQ_WORKERS)
        self.web_port = 0
        self.python = python
        self.log_level = log_level
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.workdir = Path(tempfile.mkdtemp(prefix="ottermq-bench-"))
        self.pythonpath = overlay(src, self.workdir / "site") if src is not None else None
        self.log_path = self.workdir / "broker.log"
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 20.0) -> None:
        """Start the broker and wait until it accepts TCP connections.

        Raises:
            RuntimeError: it exited or did not listen within ``timeout``.
        """
        self.port = free_port()
        data_dir = self.workdir / f"data{self.starts}"
        data_dir.mkdir()
        self.starts += 1
        env = dict(os.environ)
        env.update(
            OTTERMQ_BROKER_PORT=str(self.port),
            OTTERMQ_BROKER_HOST="127.0.0.1",
            OTTERMQ_DATA_DIR=str(data_dir),
            # the management API and metrics on, as in production, on free ports (15672 and 15692 are
            # RabbitMQ's); OTTERMQ_ENABLE_WEB_API / OTTERMQ_ENABLE_PROMETHEUS=false in the environment
            # turn them off to measure what they cost
            OTTERMQ_ENABLE_WEB_API=os.environ.get("OTTERMQ_ENABLE_WEB_API", "true"),
            OTTERMQ_WEB_PORT=str(self._web_port()),
            OTTERMQ_ENABLE_PROMETHEUS=os.environ.get("OTTERMQ_ENABLE_PROMETHEUS", "true"),
            OTTERMQ_PROMETHEUS_PORT=str(free_port()),
            PYTHONSAFEPATH="1",
            LOG_LEVEL=self.log_level,
        )
        env.update(self.extra_env)
        if self.pythonpath is not None:
            env["PYTHONPATH"] = str(self.pythonpath)
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [self.python, "-m", "ottermq.broker"],
                cwd=self.repo,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise RuntimeError(f"ottermq exited with {self.proc.returncode}; see {self.log_path}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                log.info("ottermq pid %s listening on 127.0.0.1:%d", self.pid, self.port)
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"ottermq did not listen on {self.port} within {timeout}s; see {self.log_path}")

    def _web_port(self) -> int:
        self.web_port = free_port()
        return self.web_port

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("ottermq pid %d ignored SIGTERM; killing it", proc.pid)
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def ensure_running(self) -> bool:
        """Start the broker again if it died; returns True if it had to."""
        if self.alive:
            return False
        code = self.proc.returncode if self.proc is not None else None
        log.warning("ottermq is not running (exit code %s); restarting. Log: %s", code, self.log_path)
        self.start()
        return True

    def __enter__(self) -> OtterMQProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        keep = self.log_path.exists() and b"Traceback" in self.log_path.read_bytes()
        if keep:
            log.warning("ottermq logged tracebacks; keeping %s", self.log_path)
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
