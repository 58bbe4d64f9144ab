"""The backlog benchmark's measurements (``benchmarks/backlog.py``): what a run records, the broker's RSS and
alarms sampled while it runs, and the C generator's phases read line by line.

- ``Phase`` / ``Result``: the figures of one broker's run; the JSON output is ``Result`` whole.
- ``Monitor``: the broker's process-tree RSS every 0.5 s (the tree itself re-read every 5 s) and its
  ``/api/nodes`` alarm flags every second, on the running loop; an RSS past ``limit`` sets ``exceeded``.
- ``run_generator``: one ``ottermq-cgen backlog-*`` run; progress lines are logged and kept, the generator
  is killed when ``exceeded`` is set.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procinfo import descendants, rss_split

log = logging.getLogger("backlog")
GIB = 1024**3


@dataclass
class Phase:
    """One phase of a run: its wall-clock span (``time.monotonic``), RSS and CPU over it."""

    name: str
    start: float
    end: float = 0.0
    rss_end: int | None = None
    rss_peak: int | None = None
    rss_file_end: int | None = None  # of rss_end, file-backed or shared (RssFile + RssShmem)
    broker_cpu_s: float | None = None
    machine_busy_s: float | None = None  # every process on every core
    gen_cpu_s: float | None = None  # the generator's whole process
    own_cpu_s: float | None = None  # this harness (sampler, management polls)

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def others_pct(self) -> float | None:
        """CPU of everything else on the machine over the phase, in % of one core."""
        if self.machine_busy_s is None or self.broker_cpu_s is None or self.seconds <= 0:
            return None
        rest = self.machine_busy_s - self.broker_cpu_s - (self.gen_cpu_s or 0) - (self.own_cpu_s or 0)
        return max(0.0, 100 * rest / self.seconds)


@dataclass
class Result:
    """Everything measured on one broker (the JSON holds it whole, samples included)."""

    label: str
    url: str
    pid: int | None
    queue: str
    arguments: dict[str, Any]
    messages: int
    size: int
    publishers: int
    window: int
    prefetch: int
    ack_every: int
    processes: int = 0  # the most processes in the broker's tree at one sample
    peak_rss_file: int | None = None  # the most file-backed + shared RSS at one sample
    idle_rss: int | None = None
    idle_cpu_pct: float | None = None
    published: int = 0  # confirmed
    nacked: int = 0
    held: int | None = None  # queue depth at the end of the hold
    drained: int = 0
    left: int | None = None  # depth after the drain
    publish_msgs_s: float | None = None
    drain_msgs_s: float | None = None
    publish_gen_cpu_pct: float | None = None
    drain_gen_cpu_pct: float | None = None
    drain_first_s: float | None = None  # basic.consume to the first delivery
    hold_cpu_pct: float | None = None
    disk_idle: int | None = None
    disk_held: int | None = None
    phases: list[Phase] = field(default_factory=list)
    blocked_events: list[dict[str, Any]] = field(default_factory=list)  # connection.blocked, generator side
    alarms: list[dict[str, Any]] = field(default_factory=list)  # /api/nodes transitions, broker side
    totals: dict[str, Any] = field(default_factory=dict)  # /api/overview at phase ends (other users)
    notes: list[str] = field(default_factory=list)
    samples: list[tuple[float, int, str]] = field(default_factory=list)  # (t, RSS, phase)
    progress: list[dict[str, Any]] = field(default_factory=list)  # the generator's progress lines
    wall_s: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        """A result from its JSON form (``--json``), for ``--table``."""
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["phases"] = [Phase(**p) for p in fields.get("phases", [])]
        fields["samples"] = [tuple(s) for s in fields.get("samples", [])]
        return cls(**fields)

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)

    @property
    def peak_rss(self) -> int | None:
        return max((s[1] for s in self.samples), default=None)

    @property
    def bytes_per_message(self) -> float | None:
        hold = self.phase("hold")
        if not self.held or hold is None or hold.rss_end is None or self.idle_rss is None:
            return None
        return (hold.rss_end - self.idle_rss) / self.held

    @property
    def disk_per_message(self) -> float | None:
        if not self.held or self.disk_held is None or self.disk_idle is None:
            return None
        return (self.disk_held - self.disk_idle) / self.held


# ------------------------------------------------------------------------------------------------
# sampling
# ------------------------------------------------------------------------------------------------
class Management:
    """The broker's management HTTP API (RabbitMQ's, or ottermq's, which answers the same paths)."""

    def __init__(self, base: str, user: str, password: str) -> None:
        self.base = base.rstrip("/")
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def get(self, path: str) -> Any:
        """GET ``path`` as JSON.

        Raises:
            OSError: no answer within 5 s, or an HTTP error.
        """
        request = urllib.request.Request(self.base + path, headers={"Authorization": self.auth})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())


class Monitor:
    """Samples the broker's tree RSS every ``interval`` s and its alarms (``/api/nodes``) every second.

    ``limit``: an RSS above it sets ``exceeded`` (the publish phase stops there).
    """

    def __init__(self, result: Result, pid: int, mgmt: Management | None, limit: int | None) -> None:
        self.result = result
        self.pid = pid
        self.mgmt = mgmt
        self.limit = limit
        self.phase = "idle"
        self.exceeded = asyncio.Event()
        self.gone = False
        self.file_backed = 0  # of the last sample: RssFile + RssShmem
        self._pids = [pid]
        self._tree_at = 0.0
        self._alarm_state: tuple[bool, bool] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def rss(self) -> int | None:
        """The tree's RSS now (the tree re-read every 5 s: a /proc scan is not free)."""
        now = time.monotonic()
        if now - self._tree_at > 5:
            self._pids = [self.pid, *descendants(self.pid)]
            self._tree_at = now
            self.result.processes = max(self.result.processes, len(self._pids))
        values = [rss_split(p) for p in self._pids]
        if values[0] is None:
            return None  # the broker is gone
        self.file_backed = sum(v[1] for v in values if v is not None)
        return sum(v[0] for v in values if v is not None)

    def sample(self) -> int | None:
        rss = self.rss()
        if rss is None and not self.gone:
            self.gone = True
            self.result.notes.append(f"the broker's pid {self.pid} exited during {self.phase}")
        if rss is not None:
            self.result.samples.append((round(time.monotonic(), 3), rss, self.phase))
            self.result.peak_rss_file = max(self.result.peak_rss_file or 0, self.file_backed)
            if self.limit is not None and rss > self.limit:
                self.exceeded.set()
        return rss

    async def _rss_loop(self, interval: float) -> None:
        while True:
            self.sample()
            await asyncio.sleep(interval)

    async def _alarm_loop(self) -> None:
        assert self.mgmt is not None
        while True:
            try:
                nodes = await asyncio.to_thread(self.mgmt.get, "/api/nodes")
                node = nodes[0]
            except (OSError, ValueError, IndexError, KeyError) as err:
                log.debug("/api/nodes: %s", err)
            else:
                state = (bool(node.get("mem_alarm")), bool(node.get("disk_free_alarm")))
                if state != self._alarm_state:
                    self._alarm_state = state
                    self.result.alarms.append(
                        {
                            "t": round(time.monotonic(), 3),
                            "phase": self.phase,
                            "mem_alarm": state[0],
                            "disk_free_alarm": state[1],
                            **{
                                k: node.get(k)
                                for k in ("mem_used", "mem_limit", "disk_free", "disk_free_limit")
                            },
                        }
                    )
            await asyncio.sleep(1.0)

    def start(self, interval: float) -> None:
        self._tasks.append(asyncio.ensure_future(self._rss_loop(interval)))
        if self.mgmt is not None:
            self._tasks.append(asyncio.ensure_future(self._alarm_loop()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def disk_usage(path: Path | None) -> int | None:
    """Bytes allocated under ``path`` (``du``), None without one."""
    if path is None or not path.exists():
        return None
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


def own_cpu() -> float:
    """This process's CPU seconds (not its children's: the generator is counted apart)."""
    t = os.times()
    return t.user + t.system


# ------------------------------------------------------------------------------------------------
# the generator
# ------------------------------------------------------------------------------------------------
async def run_generator(
    argv: list[str], result: Result, monitor: Monitor, stop_on_limit: bool = False
) -> dict[str, Any]:
    """Run one ``ottermq-cgen backlog-*`` command; its result line. With ``stop_on_limit``, an RSS past
    the monitor's limit stops the generator (SIGTERM: it prints its counts so far), and ``error`` says
    so."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    final: dict[str, Any] = {}
    last_log = 0.0

    async def read_stdout() -> None:
        nonlocal last_log, final
        assert proc.stdout is not None
        async for raw in proc.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if not line.get("progress"):
                final = line
                continue
            line["phase"] = monitor.phase
            result.progress.append(line)
            if line["t"] - last_log >= 10:
                last_log = line["t"]
                rss = result.samples[-1][1] if result.samples else None
                log.info(
                    "%s %s: %s confirmed, %s delivered, broker RSS %s MB",
                    result.label,
                    monitor.phase,
                    f"{line['confirmed']:,}",
                    f"{line['delivered']:,}",
                    f"{rss / 1e6:,.0f}" if rss else "?",
                )

    reader = asyncio.ensure_future(read_stdout())
    errors = asyncio.ensure_future(proc.stderr.read())
    guard = asyncio.ensure_future(monitor.exceeded.wait() if stop_on_limit else asyncio.Event().wait())
    done, _ = await asyncio.wait({reader, guard}, return_when=asyncio.FIRST_COMPLETED)
    if guard in done and reader not in done:
        log.warning(
            "%s: broker RSS passed %.2f GiB; stopping the generator", result.label, (monitor.limit or 0) / GIB
        )
        proc.terminate()  # the generator ends the phase and prints its exact counts
        try:
            await asyncio.wait_for(asyncio.shield(reader), 15)
        except TimeoutError:  # no result line: the last progress line's counts
            proc.kill()
            await reader
            ours = [p for p in result.progress if p["phase"] == monitor.phase]
            if ours and not final:
                final = {"delivered": ours[-1]["confirmed"], "t_first": ours[0]["t"], "t_last": ours[-1]["t"]}
        reason = f"stopped: broker RSS passed --max-rss {(monitor.limit or 0) / GIB:.2f} GiB"
        final = dict(final, error=reason) if final else {"error": reason}
    guard.cancel()
    await proc.wait()
    stderr = (await errors).decode(errors="replace")
    if not final:
        final = {"error": f"no result (exit {proc.returncode}): {stderr.strip()[-300:]}"}
    return final
