"""The fault runner: brokers and clients in network namespaces, a schedule of faults, the checker's verdict.

Two scenarios, sharing nothing but the :class:`~net.Topology` (hosts ``db``, ``a``, ``b``, ``s``, ``c1``,
``c2``), run one after the other:

* **postgresql**: PostgreSQL on ``db`` (fsync on) behind one delaying proxy per broker (in ``db``'s
  namespace, so one broker's link alone can be slowed); brokers ``a`` and ``b`` share one schema (lease
  :data:`LEASE_SHORT` s for the short schedule, :data:`LEASE_LONG` s for the long one, standby poll
  0.1 s), each under a :class:`~clock.Clock`; clients on ``c1`` and ``c2``, each a publisher and a
  consumer of one queue and its dead-letter queue with the URLs of both brokers (``c1``'s publisher sets
  a 300 ms TTL on every 5th message, ``c2``'s consumer rejects every 7th).
* **sqlite**: broker ``s`` with ``OTTERMQ_WORKERS=2``, its data directory on a 64 MiB
  :class:`~disk.SmallDisk` (disk alarm off, so writes meet ENOSPC), vhosts ``v1`` and ``v2`` each with a
  publisher and a consumer (the same TTL and reject pattern).

A :class:`~cluster.Supervisor` restarts any broker that exits (as systemd would) and records the epochs.
The schedule (:func:`plan`): ``short`` runs each fault class once with short holds; ``long`` runs rounds of
every fault class in a random order with holds of 1-30 s and random gaps for ``CHAOS_MINUTES`` (split
between the scenarios by their number of fault classes). Before a fault the runner waits for an active
broker, every other broker waiting as a standby and confirms from every publisher; after the heal, until
every publisher has a confirm again.

Then: publishers stopped, consumers left to catch up, a ``drain`` of every queue, brokers stopped, the
checker run on each scenario's records, and ``report.md`` (:mod:`report`) written with everything else
into the results directory (``CHAOS_RESULTS``, default a new temp dir).

Run it: ``e2e/test_chaos.py`` (``make chaos`` for the long schedule), or
``PYTHONPATH=. python -m e2e.chaos.runner --schedule short`` from the repository root (root only).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import checker
from .clock import Clock
from .cluster import BrokerSpec, Clients, EventLog, Progress, Supervisor, open_log, write_json
from .disk import SmallDisk
from .faults import PG_FAULTS, SQLITE_FAULTS, Fault, FaultError
from .net import Host, Topology
from .pg import PgServer
from .proxy import ProxyControl, proxy_command
from .report import FaultRun, ScenarioResult, stored_after_nack, write_report

log = logging.getLogger(__name__)

LEASE_SHORT = 2.0
LEASE_LONG = 5.0
QUEUE = "chaos.orders"
USER = "chaos"
RATE = 60  # messages a second per publisher
SETTLE = 3.0  # the checker's window after a heal (the next fault waits for its end)
WARMUP = 3.0  # seconds of steady load before the first fault
LISTENING = re.compile(r"^(?!.*\[worker \d+\]).*OtterMQ \S+ listening on")


@dataclass
class Schedule:
    """What to run: ``name`` short or long; ``minutes`` for long; ``seed`` for the random draws."""

    name: str = "short"
    minutes: float = 60.0
    seed: int = 0
    lease: float = LEASE_SHORT

    @classmethod
    def from_env(cls) -> Schedule:
        """``CHAOS_SCHEDULE`` (short), ``CHAOS_MINUTES`` (60), ``CHAOS_SEED`` (random), ``CHAOS_LEASE``."""
        name = os.environ.get("CHAOS_SCHEDULE", "short")
        if name not in ("short", "long"):
            raise ValueError(f"CHAOS_SCHEDULE must be short or long, not {name!r}")
        seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
        default_lease = LEASE_SHORT if name == "short" else LEASE_LONG
        lease = float(os.environ.get("CHAOS_LEASE") or default_lease)
        return cls(name, float(os.environ.get("CHAOS_MINUTES") or 60), seed, lease)


def results_dir() -> Path:
    """``CHAOS_RESULTS`` (created), or a new temp dir."""
    chosen = os.environ.get("CHAOS_RESULTS")
    if chosen:
        path = Path(chosen).absolute()
        path.mkdir(parents=True, exist_ok=True)
        return path
    return Path(tempfile.mkdtemp(prefix="chaos-results-"))


def broker_env(host: Host, data_dir: Path, **settings: str) -> dict[str, str]:
    """A broker's environment: this process's minus every ``OTTERMQ_*``, plus the runner's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTTERMQ_", "TEST_POSTGRES"))}
    env.update(
        OTTERMQ_BROKER_HOST=host.ip,
        OTTERMQ_BROKER_PORT="5672",
        OTTERMQ_WEB_PORT="15672",
        OTTERMQ_PROMETHEUS_PORT="15692",
        OTTERMQ_DATA_DIR=str(data_dir),
        OTTERMQ_USERNAME=USER,
        OTTERMQ_PASSWORD=USER,
        LOG_LEVEL="INFO",
        PYTHONSAFEPATH="1",
    )
    env.update({f"OTTERMQ_{k.upper()}": v for k, v in settings.items()})
    return env


def amqp_url(host: Host, vhost: str = "/") -> str:
    """The AMQP URL of a broker on ``host``."""
    return f"amqp://{USER}:{USER}@{host.ip}:5672/{'%2F' if vhost == '/' else vhost}"


class Scenario:
    """Brokers, clients and faults of one store; subclasses build them in :meth:`start`.

    Attributes (the faults' :class:`~faults.Context`): ``supervisor``, ``lease``, ``hosts``, ``pg``,
    ``proxies``, ``clocks``, ``disk``, ``data_dir``, ``busy_vhosts``, ``client_hosts``.
    """

    name = ""
    fault_classes: tuple[type[Fault], ...] = ()

    def __init__(self, topo: Topology, results: Path, work: Path, schedule: Schedule) -> None:
        self.topo = topo
        self.hosts = topo.hosts
        self.results = results / self.name
        self.results.mkdir(parents=True, exist_ok=True)
        self.work = work / self.name
        self.work.mkdir(parents=True, exist_ok=True)
        self.work.chmod(0o711)
        self.schedule = schedule
        self.lease = schedule.lease
        self.events = EventLog(self.results / "events.jsonl")
        self.supervisor = Supervisor(self.results, self.events)
        self.clients = Clients(self.results)
        self.progress = Progress()
        self.pg: PgServer | None = None
        self.proxies: dict[str, ProxyControl] = {}
        self.clocks: dict[str, Clock] = {}
        self.disk: SmallDisk | None = None
        self.data_dir: Path | None = None
        self.busy_vhosts: list[str] = []
        self.client_hosts = ["c1", "c2"]
        self.drains: list[tuple[str, list[str], list[str]]] = []  # (host, urls, queues) to drain
        self.helpers: list[subprocess.Popen[bytes]] = []
        self.runs: list[FaultRun] = []
        self.timings: dict[str, float] = {}
        self.finished = 0.0

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the store, the brokers and the clients; return once every publisher has a confirm."""
        raise NotImplementedError

    def start_client(self, name: str, role: str, host: str, urls: list[str], *args: str) -> None:
        client = self.clients.start(name, role, self.hosts[host], urls, *args)
        self.progress.watch(name, client.out)

    def wait_confirms(self, since: float, timeout: float) -> bool:
        """Whether every running publisher recorded a confirm after ``since`` within ``timeout`` s."""
        names = [c.name for c in self.clients.publishers()]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.progress.confirmed_since(names, since):
                return True
            time.sleep(0.05)
        return False

    def ready(self, timeout: float) -> bool:
        """An active broker, every other broker running, and confirms from every publisher."""
        deadline = time.monotonic() + timeout
        if self.supervisor.wait_active(timeout) is None:
            return False
        while not all(b.alive and (b.epoch or b.standby) for b in self.supervisor.current.values()):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return self.wait_confirms(time.time() - 0.5, max(deadline - time.monotonic(), 1.0))

    def finish(self) -> None:
        """Stop publishers, let consumers catch up, drain every queue, stop the brokers."""
        began = time.monotonic()
        self.finished = time.time()
        publishers = [c.name for c in self.clients.publishers()]
        codes = self.clients.stop(publishers)
        consumers = [n for n, c in self.clients.running.items() if c.role == "consume"]
        deadline = time.monotonic() + 30
        while not self.progress.quiet_for(consumers, 2.0) and time.monotonic() < deadline:
            time.sleep(0.1)
        codes.update(self.clients.stop(consumers))
        for i, (host, urls, queues) in enumerate(self.drains):
            name = f"{self.name}-drain{i + 1}"
            self.start_client(name, "drain", host, urls, "--queues", ",".join(queues), "--quiet", "2")
            codes[name] = self.clients.wait(name, 120)
        self.timings["drain"] = time.monotonic() - began
        self.client_codes = codes
        self.supervisor.stop()

    def close(self) -> None:
        """Stop whatever still runs and release the store, disk and clocks (idempotent)."""
        self.clients.stop()
        self.supervisor.stop()
        for proc in self.helpers:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self.pg is not None:
            self.pg.close()
            if self.pg.log_file.exists():
                shutil.copy(self.pg.log_file, self.results / "postgresql.log")
        for clock in self.clocks.values():
            clock.close()
        if self.disk is not None:
            self.disk.close()
        self.events.close()

    # -- faults ------------------------------------------------------------------------------------
    def run_fault(self, fault: Fault, hold: float) -> FaultRun:
        """Inject, hold, heal and settle one fault; what happened."""
        settle_timeout = 60.0 if self.schedule.name == "short" else 120.0
        ready = self.ready(settle_timeout)
        active = self.supervisor.active()
        run = FaultRun(fault.name, hold, ready_before=ready)
        run.epoch_before = (active.name, active.epoch) if active else None
        run.inject = self.events.write("fault", name=fault.name, phase="inject")["t"]
        try:
            run.details.update(fault.inject(self))
        except FaultError as exc:
            log.error("%s: not injected: %s", fault.name, exc)
            self.events.write("fault", name=fault.name, phase="heal")
            run.details["error"] = str(exc)
            return run
        log.info("%s injected (hold %.1f s): %s", fault.name, hold, run.details)
        run.details.update(fault.hold(self, hold))
        heal_began = time.time()
        run.details.update(fault.heal(self))
        run.heal = self.events.write("fault", name=fault.name, phase="heal", began=heal_began)["t"]
        run.settled = self.wait_confirms(run.heal, settle_timeout)
        run.settle = time.time() - run.heal
        run.details.update(fault.after(self))
        active = self.supervisor.wait_active(5)
        run.epoch_after = (active.name, active.epoch) if active else None
        log.info("%s healed; confirms again after %.1f s: %s", fault.name, run.settle, run.settled)
        return run

    def run_schedule(self, rng: random.Random, seconds: float) -> None:
        """The faults of :func:`plan`, one after the other."""
        for fault, hold, gap in plan(self.fault_classes, self.schedule, rng, seconds):
            run = self.run_fault(fault, hold)
            self.runs.append(run)
            time.sleep(max(gap, run.heal + SETTLE - time.time()))  # fault windows do not overlap

    def result(self) -> ScenarioResult:
        """The checker's report on this scenario's records, with the fault runs."""
        files = [self.events.path, *self.clients.files]
        records = checker.load([f for f in files if f.exists()])
        report = checker.check(records, settle=SETTLE)
        nacked = {
            str(r["id"]): float(r["t"])
            for r in records
            if r.get("op") == "publish" and r.get("outcome") == "nacked"
        }
        stored = stored_after_nack(records)
        return ScenarioResult(
            self.name,
            self.lease,
            report,
            self.runs,
            self.supervisor,
            self.timings,
            nacked,
            stored,
            self.finished,
        )


class PgScenario(Scenario):
    """Two brokers on one PostgreSQL (see the module docstring)."""

    name = "postgresql"
    fault_classes = PG_FAULTS

    def start(self) -> None:
        began = time.monotonic()
        db = self.hosts["db"]
        self.pg = PgServer(db, 5432, data_dir=self.work / "pg")
        self.pg.start()
        urls = []
        for i, key in enumerate(("a", "b")):
            control = ProxyControl(self.work / f"proxy-{key}.json")
            ready = self.work / f"proxy-{key}.ready"
            port = 6001 + i
            argv = proxy_command(f"{db.ip}:{port}", f"127.0.0.1:{self.pg.port}", control.path, ready=ready)
            with open_log(self.results / f"proxy-{key}.log") as out:
                self.helpers.append(db.popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL))
            self.proxies[key] = control
            self.clocks[key] = Clock(self.work / f"clock-{key}")
            host = self.hosts[key]
            data = self.work / f"data-{key}"
            data.mkdir()
            env = broker_env(
                host,
                data,
                store="postgresql",
                postgres_url=self.pg.url(via=(db.ip, port)),
                postgres_schema="chaos",
                lease_seconds=f"{self.lease:g}",
                standby_poll_seconds="0.1",
                workers="1",
            )
            urls.append(amqp_url(host))
            deadline = time.monotonic() + 10
            while not ready.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"proxy {key} did not start")
                time.sleep(0.02)
            spec = BrokerSpec(key, host, env, urls[-1], data, clock=self.clocks[key])
            self.supervisor.add(spec)
        self.supervisor.start()
        if self.supervisor.wait_active(60) is None:
            raise RuntimeError("no broker became active within 60 s")
        self.clients.setup(self.hosts["c1"], urls, QUEUE)
        queues = [QUEUE, f"{QUEUE}.dlq"]
        self.start_client(
            "c1-pub", "publish", "c1", urls, "--queue", QUEUE, "--rate", str(RATE), "--ttl-every", "5"
        )
        self.start_client("c2-pub", "publish", "c2", urls, "--queue", QUEUE, "--rate", str(RATE))
        self.start_client("c1-con", "consume", "c1", urls, "--queues", ",".join(queues))
        self.start_client(
            "c2-con", "consume", "c2", urls, "--queues", ",".join(queues), "--reject-every", "7"
        )
        self.drains = [("c1", urls, queues)]
        if not self.ready(60):
            raise RuntimeError("no confirms within 60 s of the start")
        self.timings["start"] = time.monotonic() - began


class SqliteScenario(Scenario):
    """One SQLite broker with two workers on a small disk (see the module docstring)."""

    name = "sqlite"
    fault_classes = SQLITE_FAULTS
    disk_mb = 64

    def start(self) -> None:
        began = time.monotonic()
        host = self.hosts["s"]
        self.disk = SmallDisk(self.work / "disk", self.disk_mb)
        self.data_dir = self.disk.path / "data"
        self.busy_vhosts = ["v1", "v2"]
        env = broker_env(
            host, self.data_dir, store="sqlite", workers="2", vhosts="v1,v2", disk_free_limit="0"
        )
        spec = BrokerSpec("s", host, env, amqp_url(host), self.work, active_line=LISTENING)
        self.supervisor.add(spec)
        self.supervisor.start()
        if self.supervisor.wait_active(60) is None:
            raise RuntimeError("the SQLite broker did not start within 60 s")
        for i, vhost in enumerate(self.busy_vhosts, 1):
            urls = [amqp_url(host, vhost)]
            queues = [QUEUE, f"{QUEUE}.dlq"]
            self.clients.setup(self.hosts[f"c{i}"], urls, QUEUE)
            extra = ("--ttl-every", "5") if i == 1 else ()
            reject = ("--reject-every", "7") if i == 2 else ()
            self.start_client(
                f"{vhost}-pub", "publish", f"c{i}", urls, "--queue", QUEUE, "--rate", str(RATE), *extra
            )
            self.start_client(f"{vhost}-con", "consume", f"c{i}", urls, "--queues", ",".join(queues), *reject)
            self.drains.append((f"c{i}", urls, queues))
        if not self.ready(60):
            raise RuntimeError("no confirms within 60 s of the start")
        self.timings["start"] = time.monotonic() - began


def plan(
    classes: tuple[type[Fault], ...], schedule: Schedule, rng: random.Random, seconds: float
) -> Iterator[tuple[Fault, float, float]]:
    """``(fault, hold, gap)`` triples. Short: each class once, in order. Long: rounds of every class in a
    random order, for ``seconds`` (the round under way is finished, so every class runs at least once).
    """
    if schedule.name == "short":
        for cls in classes:
            fault = cls()
            low, high = fault.hold_range("short", schedule.lease)
            yield fault, rng.uniform(low, high), rng.uniform(0.3, 1.0)
        return
    deadline = time.monotonic() + seconds
    bag: list[type[Fault]] = []
    rounds = 0
    while bag or not rounds or time.monotonic() < deadline:
        if not bag:
            bag = list(classes)
            rng.shuffle(bag)
            rounds += 1
        fault = bag.pop()()
        low, high = fault.hold_range("long", schedule.lease)
        yield fault, rng.uniform(low, high), rng.uniform(1.0, 20.0)


@dataclass
class RunResult:
    """A whole run: its directory, report file, schedule and each scenario's result."""

    results: Path
    report_path: Path
    schedule: Schedule
    scenarios: dict[str, ScenarioResult] = field(default_factory=dict)
    wall: float = 0.0

    @property
    def ok(self) -> bool:
        """Every scenario's checker report is ok."""
        return all(s.report.ok for s in self.scenarios.values())

    def summary(self) -> str:
        """The checker summaries, one block per scenario."""
        return "\n\n".join(f"[{name}]\n{s.report.summary()}" for name, s in self.scenarios.items())


def run(schedule: Schedule | None = None, results: Path | None = None) -> RunResult:
    """Run both scenarios with ``schedule`` (default: from the environment); the report is in ``results``.

    Raises:
        RuntimeError: a scenario could not be started, or ``results`` is not empty.
    """
    schedule = schedule or Schedule.from_env()
    results = results or results_dir()
    if any(results.iterdir()):  # its logs and records would mix with this run's (epochs included)
        raise RuntimeError(f"the results directory {results} holds an earlier run: choose an empty one")
    began = time.monotonic()
    outcome = RunResult(results, results / "report.md", schedule)
    handler = logging.FileHandler(results / "runner.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    package = logging.getLogger(__package__ or "chaos")
    package.addHandler(handler)
    package.setLevel(logging.INFO)
    rng = random.Random(schedule.seed)
    work = Path(tempfile.mkdtemp(prefix="otc-chaos-"))
    work.chmod(0o711)
    total = len(PG_FAULTS) + len(SQLITE_FAULTS)
    log.info("chaos run: schedule %s, seed %d, lease %g s, results in %s", schedule.name, schedule.seed,
             schedule.lease, results)  # fmt: skip
    try:
        with Topology(["db", "a", "b", "s", "c1", "c2"]) as topo:
            for cls in (PgScenario, SqliteScenario):
                scenario = cls(topo, results, work, schedule)
                try:
                    scenario.start()
                    time.sleep(WARMUP)
                    share = len(cls.fault_classes) / total
                    scenario.run_schedule(rng, schedule.minutes * 60 * share)
                    scenario.finish()
                finally:
                    scenario.close()
                outcome.scenarios[scenario.name] = scenario.result()
                write_json(scenario.results / "client-exits.json", getattr(scenario, "client_codes", {}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        outcome.wall = time.monotonic() - began
        if outcome.scenarios:
            write_report(outcome.report_path, schedule, outcome.scenarios, outcome.wall, results)
        package.removeHandler(handler)
        handler.close()
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedule", choices=("short", "long"), default=None)
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for key, value in (
        ("CHAOS_SCHEDULE", args.schedule),
        ("CHAOS_MINUTES", args.minutes),
        ("CHAOS_SEED", args.seed),
    ):
        if value is not None:
            os.environ[key] = str(value)
    outcome = run()
    logging.getLogger(__name__).info("report: %s\n%s", outcome.report_path, outcome.summary())
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
