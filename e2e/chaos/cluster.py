"""The fault runner's processes: brokers under a supervisor, workload clients, and what they record.

* :class:`EventLog`: the runner's own JSON-lines file (``epoch`` and ``fault`` events the checker reads,
  ``exit`` events it ignores), thread-safe, every record stamped with this process's ``time.time()``.
* :class:`Supervisor`: a thread that keeps one broker process per :class:`BrokerSpec` running, as a
  service manager would: a process that exits (status 3 after losing the leadership, a crash) is started
  again after :data:`RESTART_DELAY` under a new name (``a``, then ``a#2``, ``a#3``...). Every 50 ms it
  reads the new lines of every broker's log: ``active: took the leadership over (epoch N`` becomes an
  ``epoch`` event, and every line matching :data:`NOTABLE` a :class:`Note` (kept for the report, with the
  runner's time of reading: a broker on a stepped :class:`~clock.Clock` logs a wrong wall time).
* :class:`Clients`: workload processes (``workload.py``) inside client hosts, each writing its own
  records file, stopped with SIGTERM; :class:`Tail` reads the confirms of publishers while they run.

Logs and records go straight into the results directory, so a run killed half-way still leaves them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .clock import Clock
from .net import Host

log = logging.getLogger(__name__)

WORKLOAD = Path(__file__).with_name("workload.py")
RESTART_DELAY = 0.1  # seconds between an exit and the restart (systemd's RestartSec=100ms)
POLL = 0.05
EPOCH_LINE = re.compile(r"active: took the leadership over \(epoch (\d+)")
STANDBY_LINE = re.compile(r"standby: .* is active; waiting to take over")

# What a report counts, per fault window: a short key and the pattern of the log line.
NOTABLE: dict[str, re.Pattern[str]] = {
    key: re.compile(pattern)
    for key, pattern in {
        "took the leadership over": r"took the leadership over",
        "leadership lost": r"active: leadership lost",
        "could not be renewed": r"could not be renewed|was not renewed",
        "renewing the lease failed": r"renewing the lease failed",
        "lease ran out (standby)": r"standby: the lease of .* ran out",
        "database restart (standby waits)": r"leadership lock is free but",
        "standby: PostgreSQL unreachable": r"standby: PostgreSQL unreachable",
        "PostgreSQL connection lost": r"PostgreSQL connection lost",
        "no answer: connection dropped": r"PostgreSQL did not answer .* within",
        "asyncpg internal error": r"InternalClientError",
        "confirms wait": r"confirms wait",
        "had committed after all": r"had committed after all",
        "withheld (may have committed)": r"may or may not have committed",
        "still unreachable": r"database is still unreachable",
        "batch rolled back (nack)": r"failed and was rolled back",
        "batch not written": r"ops of the failed batch are not written|is not written:",
        "fence still held": r"still hold the fence",
        "waiting for the port": r"waiting for the old active to let go",
        "worker exited": r"worker \d+ \(pid \d+\) exited",
        "disk alarm": r"disk alarm",
        "event loop stalled": r"event loop has not come back|held the event loop",
        "traceback": r"Traceback \(most recent call last\)",
    }.items()
}


class EventLog:
    """The runner's records file: ``write(op, **fields)`` appends one JSON line with ``t`` and ``op``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, op: str, **fields: Any) -> dict[str, Any]:
        """Append a record (``t`` defaults to now); returns it."""
        record = {"t": time.time(), "op": op, **fields}
        with self._lock:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._file.flush()
        return record

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._file.close()


@dataclass(frozen=True)
class Note:
    """A notable broker log line, stamped with the runner's time when it was read."""

    t: float
    broker: str
    key: str
    line: str


@dataclass
class BrokerSpec:
    """How to start one broker (a host, its environment, an optional clock); ``key`` names its host."""

    key: str
    host: Host
    env: dict[str, str]
    url: str
    cwd: Path
    clock: Clock | None = None
    argv: Sequence[str] = ()
    active_line: re.Pattern[str] | None = None  # no lease (SQLite): this line makes it active, epoch = n


@dataclass
class BrokerProc:
    """One broker process: ``name`` is ``key`` for the first, ``key#n`` for the n-th."""

    name: str
    spec: BrokerSpec
    proc: subprocess.Popen[bytes]
    log_path: Path
    started: float
    number: int = 1
    epoch: int | None = None
    standby: bool = False  # it said it waits as the standby
    became_active: float | None = None
    exited: float | None = None
    code: int | None = None
    stopped: bool = False  # SIGSTOPped by a fault
    _offset: int = 0
    _partial: str = ""

    @property
    def alive(self) -> bool:
        """Whether the process still runs (possibly stopped)."""
        return self.exited is None and self.proc.poll() is None


class Supervisor(threading.Thread):
    """Keeps a broker process per :class:`BrokerSpec` running; records epochs, exits and notable lines.

    Args:
        logs: the directory the broker logs go to (``broker-<name>.log``, ``#`` written as ``-``).
        events: where ``epoch`` and ``exit`` events go.
    """

    def __init__(self, logs: Path, events: EventLog) -> None:
        super().__init__(name="chaos-supervisor", daemon=True)
        self.logs = logs
        self.events = events
        self.specs: dict[str, BrokerSpec] = {}
        self.current: dict[str, BrokerProc] = {}
        self.history: list[BrokerProc] = []
        self.notes: list[Note] = []
        self.restart = True
        self._counts: dict[str, int] = {}
        self._lock = threading.RLock()
        self._halt = threading.Event()

    # -- processes -------------------------------------------------------------------------------
    def add(self, spec: BrokerSpec) -> BrokerProc:
        """Start a broker for ``spec`` (and restart it whenever it exits)."""
        with self._lock:
            self.specs[spec.key] = spec
            return self._launch(spec)

    def _launch(self, spec: BrokerSpec) -> BrokerProc:
        n = self._counts[spec.key] = self._counts.get(spec.key, 0) + 1
        name = spec.key if n == 1 else f"{spec.key}#{n}"
        log_path = self.logs / f"broker-{name.replace('#', '-')}.log"
        argv = list(spec.argv) or [sys.executable, "-m", "ottermq.broker"]
        with open(log_path, "ab") as out:
            proc = spec.host.popen(
                argv,
                env=spec.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                clock=spec.clock,
                cwd=spec.cwd,
                start_new_session=True,
            )
        broker = BrokerProc(name, spec, proc, log_path, time.time(), number=n)
        self.current[spec.key] = broker
        self.history.append(broker)
        log.info("started broker %s (pid %d) on %s", name, proc.pid, spec.host.name)
        return broker

    def run(self) -> None:
        while not self._halt.wait(POLL):
            self.poll()

    def poll(self) -> None:
        """Read new log lines of every broker; restart the ones that exited."""
        with self._lock:
            for broker in list(self.current.values()):
                self._read(broker)
                if broker.exited is None and broker.proc.poll() is not None:
                    self._read(broker)
                    broker.exited, broker.code = time.time(), broker.proc.returncode
                    self.events.write("exit", broker=broker.name, code=broker.code, epoch=broker.epoch)
                    log.info("broker %s exited with %s", broker.name, broker.code)
                    if self.restart:
                        time.sleep(RESTART_DELAY)
                        self._launch(broker.spec)

    def _read(self, broker: BrokerProc) -> None:
        try:
            with open(broker.log_path, "rb") as handle:
                handle.seek(broker._offset)
                data = handle.read()
        except FileNotFoundError:
            return
        if not data:
            return
        broker._offset += len(data)
        text = broker._partial + data.decode("utf-8", "replace")
        *lines, broker._partial = text.split("\n")
        now = time.time()
        for line in lines:
            match = EPOCH_LINE.search(line)
            epoch = int(match.group(1)) if match else None
            if epoch is None and broker.spec.active_line is not None and broker.spec.active_line.search(line):
                epoch = broker.number
            if STANDBY_LINE.search(line):
                broker.standby = True
            if epoch is not None and broker.epoch is None:
                broker.epoch, broker.became_active = epoch, now
                self.events.write("epoch", broker=broker.name, url=broker.spec.url, epoch=broker.epoch)
                log.info("broker %s is active (epoch %d)", broker.name, broker.epoch)
            for key, pattern in NOTABLE.items():
                if pattern.search(line):
                    self.notes.append(Note(now, broker.name, key, line.strip()[:400]))

    def active(self) -> BrokerProc | None:
        """The live broker holding the highest epoch seen, or None."""
        with self._lock:
            live = [b for b in self.current.values() if b.alive and b.epoch is not None]
            return max(live, key=lambda b: b.epoch or 0, default=None)

    def standbys(self) -> list[BrokerProc]:
        """The live brokers that are not active."""
        active = self.active()
        with self._lock:
            return [b for b in self.current.values() if b.alive and b is not active]

    def wait_active(self, timeout: float) -> BrokerProc | None:
        """The active broker once there is one (and it is not stopped), or None after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            broker = self.active()
            if broker is not None and not broker.stopped:
                return broker
            time.sleep(POLL)
        return None

    def signal(self, broker: BrokerProc, signum: int) -> None:
        """Send ``signum`` to a broker process (SIGSTOP/SIGCONT are remembered)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(broker.proc.pid, signum)
        if signum == signal.SIGSTOP:
            broker.stopped = True
        elif signum == signal.SIGCONT:
            broker.stopped = False

    def stop(self, timeout: float = 15.0) -> None:
        """Stop restarting, end every broker (SIGCONT, SIGTERM, then SIGKILL) and the thread."""
        with self._lock:
            self.restart = False
            brokers = [b for b in self.current.values() if b.alive]
            for broker in brokers:
                self.signal(broker, signal.SIGCONT)
                with contextlib.suppress(ProcessLookupError):
                    broker.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for broker in brokers:
            try:
                broker.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                log.warning("broker %s did not stop within %s s; killing it", broker.name, timeout)
                broker.proc.kill()
                broker.proc.wait()
        self.poll()
        self._halt.set()
        if self.is_alive():
            self.join(5)

    def notes_between(self, start: float, end: float) -> list[Note]:
        """The notes read in ``[start, end)``."""
        with self._lock:
            return [n for n in self.notes if start <= n.t < end]


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (from ``/proc/*/stat``)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, IndexError, ProcessLookupError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def cmdline(pid: int) -> list[str]:
    """The argv of ``pid`` (empty when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


# ----------------------------------------------------------------------------------------------------
# clients
# ----------------------------------------------------------------------------------------------------
@dataclass
class Client:
    """One workload process: ``name`` is also its records file's stem."""

    name: str
    role: str  # publish | consume | drain
    host: Host
    out: Path
    proc: subprocess.Popen[bytes]


@dataclass
class Clients:
    """The workload processes of one scenario, their records in ``directory``."""

    directory: Path
    python: str = sys.executable
    running: dict[str, Client] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTTERMQ_")}
        env["PYTHONSAFEPATH"] = "1"
        return env

    def command(self, command: str, urls: Sequence[str], *args: str) -> list[str]:
        return [self.python, str(WORKLOAD), command, "--urls", ",".join(urls), *args]

    def setup(self, host: Host, urls: Sequence[str], queue: str, timeout: float = 60) -> None:
        """Declare ``queue`` and its dead-letter queue (retrying over ``urls``).

        Raises:
            RuntimeError: it did not succeed within ``timeout``.
        """
        done = host.run(
            self.command("setup", urls, "--queue", queue, "--timeout", str(timeout)),
            check=False,
            timeout=timeout + 10,
            env=self.env(),
        )
        if done.returncode:
            raise RuntimeError(f"workload setup of {queue} failed: {done.stderr.strip()}")

    def start(self, name: str, role: str, host: Host, urls: Sequence[str], *args: str) -> Client:
        """Start a ``publish``, ``consume`` or ``drain`` client called ``name`` on ``host``."""
        out = self.directory / f"{name}.jsonl"
        argv = self.command(role, urls, "--client", name, "--out", str(out), *args)
        with open(self.directory / f"{name}.stderr", "ab") as err:
            proc = host.popen(argv, env=self.env(), stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        client = Client(name, role, host, out, proc)
        self.running[name] = client
        if out not in self.files:
            self.files.append(out)
        return client

    def stop(self, names: Sequence[str] | None = None, timeout: float = 15.0) -> dict[str, int | None]:
        """SIGTERM some clients (default: all) and wait; their exit codes (None: killed)."""
        chosen = [self.running[n] for n in (names if names is not None else list(self.running))]
        for client in chosen:
            if client.proc.poll() is None:
                client.proc.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for client in chosen:
            try:
                codes[client.name] = client.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                client.proc.kill()
                client.proc.wait()
                codes[client.name] = None
            self.running.pop(client.name, None)
        return codes

    def wait(self, name: str, timeout: float) -> int | None:
        """Wait for a client to end by itself; its exit code (None: killed after ``timeout``)."""
        client = self.running.pop(name)
        try:
            return client.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            client.proc.kill()
            client.proc.wait()
            return None

    def publishers(self) -> list[Client]:
        """The running publishers."""
        return [c for c in self.running.values() if c.role == "publish"]


class Tail:
    """Reads a growing JSON-lines file from where the last :meth:`poll` stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def poll(self) -> list[dict[str, Any]]:
        """The complete records appended since the last call."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        records = []
        for line in lines:
            with contextlib.suppress(ValueError):
                records.append(json.loads(line))
        return records


class Progress:
    """The last confirm and the last delivery seen in each client's records (polled on demand)."""

    def __init__(self) -> None:
        self.tails: dict[str, Tail] = {}
        self.last_confirm: dict[str, float] = {}
        self.last_delivery: dict[str, float] = {}

    def watch(self, name: str, path: Path) -> None:
        """Follow the records of client ``name``."""
        self.tails[name] = Tail(path)

    def poll(self) -> None:
        """Read what the clients wrote since the last call."""
        for name, tail in self.tails.items():
            for record in tail.poll():
                if record.get("op") == "publish" and record.get("outcome") == "confirmed":
                    self.last_confirm[name] = float(record["t"])
                elif record.get("op") == "deliver":
                    self.last_delivery[name] = float(record["t"])

    def confirmed_since(self, names: Sequence[str], since: float) -> bool:
        """Whether every publisher in ``names`` has a confirm recorded after ``since``."""
        self.poll()
        return all(self.last_confirm.get(n, 0.0) > since for n in names)

    def quiet_for(self, names: Sequence[str], seconds: float) -> bool:
        """Whether none of the consumers in ``names`` recorded a delivery for ``seconds``."""
        self.poll()
        newest = max((self.last_delivery.get(n, 0.0) for n in names), default=0.0)
        return time.time() - newest >= seconds


def write_json(path: Path, data: Mapping[str, Any] | Sequence[Any]) -> None:
    """Write ``data`` as indented JSON."""
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def open_log(path: Path) -> IO[bytes]:
    """A log file for a helper process, opened for appending."""
    return open(path, "ab")  # noqa: SIM115 - the caller closes it
