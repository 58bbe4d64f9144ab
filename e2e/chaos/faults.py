"""The fault classes of the runner: each injects one fault into a running scenario and heals it.

A fault's life, driven by ``runner.py``: :meth:`Fault.inject` (the runner then writes the ``fault``
``inject`` event), :meth:`Fault.hold` for a duration drawn from :meth:`Fault.hold_range`,
:meth:`Fault.heal` (then the ``heal`` event), the runner waits until every publisher has a confirm
again, and :meth:`Fault.after` gathers what can only be known later (the exit status of a paused active).
Each method returns a dict of details for the report. The target is the broker that is ACTIVE at the
injection (its host for network faults); a fault instance is used by one scenario thread at a time.

PostgreSQL scenario (brokers ``a`` and ``b``, database host ``db`` with one proxy per broker):

=================  =====================================================================================
db-partition       the active's host and ``db`` drop each other's packets (silent, both ways)
client-partition   the active's host and both client hosts drop each other's packets
asym-db-in         the active can send to ``db`` but hears nothing from it
asym-db-out        the active hears ``db`` but nothing it sends arrives
slow-lossy-db      the active's proxy delays 200 ms each way, and its link to ``db`` loses 30% of packets
pg-kill9           PostgreSQL killed with SIGKILL (every process), started again after the hold
pg-restart         PostgreSQL stopped (fast shutdown), started again after the hold
sigstop-active     the active broker paused (SIGSTOP) for longer than its lease, then SIGCONT: it must
                   find itself fenced and exit with status 3
clock-jump         the active's wall clock +1 h and the standby's -1 h, then the other way round
                   halfway through the hold, then both back (libfaketime)
=================  =====================================================================================

SQLite scenario (broker ``s`` with two worker processes, its data directory on a small disk):

=================  =====================================================================================
disk-full          the data directory's disk filled to the last byte, freed after the hold
worker-kill        SIGKILL of the worker process (not worker 0) owning a busy vhost; worker 0 starts it
                   again
=================  =====================================================================================
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .cluster import BrokerProc, Supervisor, children, cmdline

if TYPE_CHECKING:
    from .clock import Clock
    from .disk import SmallDisk
    from .net import Host
    from .pg import PgServer
    from .proxy import ProxyControl

log = logging.getLogger(__name__)

Details = dict[str, Any]


class FaultError(RuntimeError):
    """A fault could not be injected (no active broker, no worker to kill...)."""


class Context(Protocol):
    """What a fault needs from its scenario (``runner.PgScenario`` / ``runner.SqliteScenario``)."""

    supervisor: Supervisor
    lease: float
    hosts: dict[str, Host]
    pg: PgServer | None
    proxies: dict[str, ProxyControl]
    clocks: dict[str, Clock]
    disk: SmallDisk | None
    data_dir: Path | None
    busy_vhosts: list[str]
    client_hosts: list[str]


def _active(ctx: Context) -> BrokerProc:
    broker = ctx.supervisor.wait_active(30)
    if broker is None:
        raise FaultError("no active broker")
    return broker


class Fault:
    """One class of fault (see the module docstring); subclasses set ``name`` and override the steps."""

    name = ""
    scenario = "pg"

    def __init__(self) -> None:
        self.target: BrokerProc | None = None

    def hold_range(self, schedule: str, lease: float) -> tuple[float, float]:
        """Seconds the fault is held: drawn uniformly from this range."""
        return (1.0, 4.0) if schedule == "short" else (1.0, 30.0)

    def inject(self, ctx: Context) -> Details:
        """Inject the fault; details for the report.

        Raises:
            FaultError: it cannot be injected now.
        """
        raise NotImplementedError

    def hold(self, ctx: Context, seconds: float) -> Details:
        """Keep the fault for ``seconds`` (a fault may change something halfway)."""
        time.sleep(seconds)
        return {}

    def heal(self, ctx: Context) -> Details:
        """Undo the fault."""
        raise NotImplementedError

    def after(self, ctx: Context) -> Details:
        """Facts known once confirms flow again."""
        return {}


class NetworkFault(Fault):
    """Packet drops on the active's host (nft); healed by removing the host's rules."""

    peers: tuple[str, ...] = ("db",)
    direction = "both"

    def targets(self, ctx: Context) -> list[str]:
        return list(self.peers)

    def inject(self, ctx: Context) -> Details:
        self.target = _active(ctx)
        host = self.target.spec.host
        peers = self.targets(ctx)
        for peer in peers:
            host.block(ctx.hosts[peer], self.direction)  # type: ignore[arg-type]
        return {"target": self.target.name, "epoch": self.target.epoch, "peers": peers}

    def heal(self, ctx: Context) -> Details:
        assert self.target is not None
        self.target.spec.host.heal()
        return {}


class DbPartition(NetworkFault):
    name = "db-partition"


class ClientPartition(NetworkFault):
    name = "client-partition"

    def targets(self, ctx: Context) -> list[str]:
        return list(ctx.client_hosts)


class AsymDbIn(NetworkFault):
    name = "asym-db-in"
    direction = "in"


class AsymDbOut(NetworkFault):
    name = "asym-db-out"
    direction = "out"


class SlowLossyDb(Fault):
    name = "slow-lossy-db"
    delay = 0.2
    percent = 30.0

    def inject(self, ctx: Context) -> Details:
        self.target = _active(ctx)
        key = self.target.spec.key
        ctx.proxies[key].set(delay=self.delay)
        self.target.spec.host.loss(ctx.hosts["db"], self.percent)
        return {
            "target": self.target.name,
            "epoch": self.target.epoch,
            "delay": self.delay,
            "loss": self.percent,
        }

    def heal(self, ctx: Context) -> Details:
        assert self.target is not None
        ctx.proxies[self.target.spec.key].set(delay=0.0)
        self.target.spec.host.heal()
        return {}


class PgOutage(Fault):
    """PostgreSQL down for the hold; ``outage`` is from the stop to the server's being ready again."""

    def hold_range(self, schedule: str, lease: float) -> tuple[float, float]:
        # short: an outage (hold + restart) below the lease, which must not be a failover
        return (0.3, 1.0) if schedule == "short" else (1.0, 30.0)

    def down(self, pg: PgServer) -> None:
        raise NotImplementedError

    def inject(self, ctx: Context) -> Details:
        assert ctx.pg is not None
        self.target = _active(ctx)
        self.began = time.time()
        self.down(ctx.pg)
        return {
            "active": self.target.name,
            "epoch": self.target.epoch,
            "stopped_in": round(time.time() - self.began, 3),
        }

    def heal(self, ctx: Context) -> Details:
        assert ctx.pg is not None
        started = time.time()
        ctx.pg.start()
        ready = time.time()
        return {"start_took": round(ready - started, 3), "outage": round(ready - self.began, 3)}


class PgKill9(PgOutage):
    name = "pg-kill9"

    def down(self, pg: PgServer) -> None:
        pg.kill9()


class PgRestart(PgOutage):
    name = "pg-restart"

    def down(self, pg: PgServer) -> None:
        pg.stop("fast")


class SigstopActive(Fault):
    name = "sigstop-active"

    def hold_range(self, schedule: str, lease: float) -> tuple[float, float]:
        return (lease + 1.0, lease + 2.0) if schedule == "short" else (lease + 1.0, max(lease + 2.0, 30.0))

    def inject(self, ctx: Context) -> Details:
        self.target = _active(ctx)
        ctx.supervisor.signal(self.target, signal.SIGSTOP)
        return {"target": self.target.name, "epoch": self.target.epoch, "pid": self.target.proc.pid}

    def heal(self, ctx: Context) -> Details:
        assert self.target is not None
        ctx.supervisor.signal(self.target, signal.SIGCONT)
        return {}

    def after(self, ctx: Context) -> Details:
        assert self.target is not None
        try:
            code: int | str = self.target.proc.wait(2 * ctx.lease + 10)
        except subprocess.TimeoutExpired:
            code = "still running"
        return {"exit_code": code}


class ClockJump(Fault):
    name = "clock-jump"
    step = 3600.0

    def inject(self, ctx: Context) -> Details:
        self.target = _active(ctx)
        self.others = [b.spec.key for b in ctx.supervisor.standbys() if b.spec.key in ctx.clocks]
        ctx.clocks[self.target.spec.key].set(self.step)
        for key in self.others:
            ctx.clocks[key].set(-self.step)
        return {
            "active": self.target.name,
            "epoch": self.target.epoch,
            "active_clock": "+1 h",
            "standby_clock": "-1 h",
        }

    def hold(self, ctx: Context, seconds: float) -> Details:
        assert self.target is not None
        time.sleep(seconds / 2)
        ctx.clocks[self.target.spec.key].set(-self.step)
        for key in self.others:
            ctx.clocks[key].set(self.step)
        time.sleep(seconds / 2)
        return {"swapped_after": round(seconds / 2, 2)}

    def heal(self, ctx: Context) -> Details:
        for clock in ctx.clocks.values():
            clock.set(0.0)
        return {}


class DiskFull(Fault):
    name = "disk-full"
    scenario = "sqlite"

    def inject(self, ctx: Context) -> Details:
        assert ctx.disk is not None
        written = ctx.disk.fill()
        return {"filled_bytes": written, "free_when_full": ctx.disk.available()}

    def heal(self, ctx: Context) -> Details:
        assert ctx.disk is not None
        ctx.disk.free()
        return {"free_when_healed": ctx.disk.available()}


def worker_pids(broker_pid: int) -> dict[int, int]:
    """Worker index -> pid of the processes ``python -m ottermq.broker.workers INDEX ...`` under a broker."""
    found = {}
    for pid in children(broker_pid):
        argv = cmdline(pid)
        if "ottermq.broker.workers" in argv:
            found[int(argv[argv.index("ottermq.broker.workers") + 1])] = pid
    return found


class WorkerKill(Fault):
    name = "worker-kill"
    scenario = "sqlite"

    def inject(self, ctx: Context) -> Details:
        assert ctx.data_dir is not None
        self.target = _active(ctx)
        owners = json.loads((ctx.data_dir / "workers.json").read_text()).get("vhosts", {})
        pids = worker_pids(self.target.proc.pid)
        busy = [(v, int(owners[v])) for v in ctx.busy_vhosts if int(owners.get(v, 0)) in pids]
        if not busy:
            raise FaultError(f"no worker process owns a busy vhost: owners {owners}, workers {pids}")
        self.vhost, self.index = busy[0]
        self.killed = pids[self.index]
        self.began = time.time()
        os.kill(self.killed, signal.SIGKILL)
        return {"vhost": self.vhost, "worker": self.index, "pid": self.killed}

    def heal(self, ctx: Context) -> Details:
        assert self.target is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pid = worker_pids(self.target.proc.pid).get(self.index)
            if pid is not None and pid != self.killed:
                return {"new_pid": pid, "back_after": round(time.time() - self.began, 3)}
            time.sleep(0.05)
        return {"new_pid": None}


PG_FAULTS: tuple[type[Fault], ...] = (
    DbPartition,
    ClientPartition,
    AsymDbIn,
    AsymDbOut,
    SlowLossyDb,
    PgKill9,
    PgRestart,
    SigstopActive,
    ClockJump,
)
SQLITE_FAULTS: tuple[type[Fault], ...] = (DiskFull, WorkerKill)
