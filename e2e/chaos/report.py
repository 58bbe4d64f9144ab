"""The fault runner's report: the checker's verdict per scenario, and per fault what the brokers did.

``report.md`` holds, for each scenario: the checker's summary and its per-fault table (its window: from
the injection to the heal plus the settle time; lost, duplicated, longest without a confirm, first
confirm after heal), then one row per fault: its target and hold; whether a failover happened (the
active's epoch at the injection and once confirms flowed again); how long the target took to log
``leadership lost``; the duplicates of its window by category; and, counted from its injection to the
next fault's, the broker processes that exited with their status, the nacks, the nacked ids delivered
anyway (``nacked_but_stored``: all, and those delivered after the nack) and the notable broker log lines
(:data:`cluster.NOTABLE`). Then the findings: every expectation a fault broke (:func:`findings`).
``report.json`` holds the same for programs.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .checker import CATEGORIES, FaultWindow, Report

if TYPE_CHECKING:
    from .cluster import Supervisor
    from .runner import Schedule

log = logging.getLogger(__name__)

NACK_TOLERANCE = 0.5  # seconds a consumer may record a delivery after the nack (its own backlog)
CUT_OFF = ("db-partition", "asym-db-in", "asym-db-out")  # the active cannot renew its lease
STOP_MARGIN = 0.15  # seconds past the lease an active cut off may take to say so (the runner's polling)


def stored_after_nack(records: list[dict[str, Any]], tolerance: float = NACK_TOLERANCE) -> dict[str, str]:
    """Nacked ids that were still delivered after the nack (by more than ``tolerance`` s, or in the
    drain): a nack must mean the message was not stored. A delivery *before* the nack is the documented
    exception (docs/durability.md: taken back out of its queues "unless a consumer already has it").

    Returns:
        id -> what shows it was stored.
    """
    nacked = {
        str(r["id"]): float(r["t"])
        for r in records
        if r.get("op") == "publish" and r.get("outcome") == "nacked"
    }
    found: dict[str, str] = {}
    for r in records:
        message_id = str(r.get("id"))
        if r.get("op") != "deliver" or message_id not in nacked or message_id in found:
            continue
        lag = float(r["t"]) - nacked[message_id]
        if lag > tolerance or r.get("phase") == "drain":
            found[message_id] = (
                f"delivered {lag:.3f} s after the nack from {r.get('queue')} ({r.get('phase')},"
                f" redelivered={r.get('redelivered')})"
            )
    return found


@dataclass
class FaultRun:
    """One fault as the runner ran it (times are ``time.time()``; ``inject`` 0 when it was not injected)."""

    name: str
    hold: float
    ready_before: bool = True
    inject: float = 0.0
    heal: float = 0.0
    settled: bool = False
    settle: float = 0.0
    epoch_before: tuple[str, int | None] | None = None
    epoch_after: tuple[str, int | None] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def failover(self) -> bool:
        """Whether the active's epoch changed between the injection and the settle."""
        before = self.epoch_before[1] if self.epoch_before else None
        after = self.epoch_after[1] if self.epoch_after else None
        return before != after


@dataclass
class Exit:
    """A broker process that exited."""

    broker: str
    t: float
    code: int | None
    epoch: int | None


@dataclass
class Active:
    """A broker process that became active: its epoch, when, and when it exited (None: it did not)."""

    broker: str
    epoch: int
    since: float
    exited: float | None


def early_takeovers(actives: list[Active], lease: float, slack: float = 0.2) -> list[str]:
    """Take-overs of a leadership less than ``lease`` old whose holder was still running: its lease
    cannot have run out, and a live holder keeps its lock, so no standby may take over (``slack``: the
    runner reads the logs every 50 ms)."""
    found = []
    for old, new in zip(actives, actives[1:], strict=False):
        age = new.since - old.since
        alive = old.exited is None or old.exited > new.since
        if new.epoch == old.epoch + 1 and age < lease - slack and alive:
            found.append(
                f"{new.broker} took epoch {new.epoch} over {age:.3f} s after {old.broker} took epoch"
                f" {old.epoch} (lease {lease:g} s), while {old.broker} was running"
            )
    return found


class ScenarioResult:
    """A scenario's checker report, its fault runs and what its supervisor saw.

    Args:
        name: ``postgresql`` or ``sqlite``.
        lease: the brokers' lease (seconds).
        report: the checker's report on the scenario's records.
        runs: the faults, in order.
        supervisor: its brokers' supervisor (exits and notable log lines are copied from it).
        timings: seconds spent starting and draining.
        nacked: when each nacked id's nack was recorded.
        stored: :func:`stored_after_nack` of the scenario's records.
        finished: when the schedule ended (the last fault's counts stop there).
    """

    def __init__(
        self,
        name: str,
        lease: float,
        report: Report,
        runs: list[FaultRun],
        supervisor: Supervisor,
        timings: dict[str, float],
        nacked: dict[str, float],
        stored: dict[str, str],
        finished: float,
    ) -> None:
        self.nacked = nacked
        self.finished = finished or float("inf")
        self.stored = stored
        self.name = name
        self.lease = lease
        self.report = report
        self.runs = runs
        self.timings = dict(timings)
        self.exits = [
            Exit(b.name, b.exited, b.code, b.epoch) for b in supervisor.history if b.exited is not None
        ]
        self.notes = list(supervisor.notes)
        self.actives = sorted(
            (
                Active(b.name, b.epoch, b.became_active or 0.0, b.exited)
                for b in supervisor.history
                if b.epoch
            ),
            key=lambda a: a.epoch,
        )

    def window(self, run: FaultRun) -> FaultWindow | None:
        """The checker's window of a fault run."""
        for w in self.report.windows:
            if w.name == run.name and abs(w.inject - run.inject) < 1e-3:
                return w
        return None

    def span(self, run: FaultRun) -> tuple[float, float]:
        """From a fault's injection to the next fault's (or the end)."""
        later = [r.inject for r in self.runs if r.inject > run.inject]
        return run.inject, min(later, default=self.finished)

    def note_counts(self, run: FaultRun) -> Counter[str]:
        start, end = self.span(run)
        return Counter(n.key for n in self.notes if start <= n.t < end)

    def exits_in(self, run: FaultRun) -> list[Exit]:
        start, end = self.span(run)
        return [e for e in self.exits if start <= e.t < end]

    def nacked_but_stored(self, run: FaultRun, after_only: bool = False) -> dict[str, str]:
        """The report's ``nacked_but_stored`` ids nacked from this fault's injection to the next one's
        (``after_only``: only those delivered after the nack, :func:`stored_after_nack`)."""
        start, end = self.span(run)
        chosen = self.stored if after_only else self.report.nacked_but_stored
        return {i: why for i, why in chosen.items() if start <= self.nacked.get(i, 0.0) < end}

    def nacks(self, run: FaultRun) -> int:
        """Publishes nacked from this fault's injection to the next one's."""
        start, end = self.span(run)
        return sum(start <= t < end for t in self.nacked.values())

    def successor(self, run: FaultRun) -> Active | None:
        """The first broker that became active after this fault's injection (within its span)."""
        start, end = self.span(run)
        return next((a for a in self.actives if start <= a.since < end), None)

    def leadership_lost_after(self, run: FaultRun) -> float | None:
        """Seconds from the injection to the target's ``active: leadership lost`` line (None: none)."""
        target = run.details.get("target")
        start, end = self.span(run)
        times = [
            n.t
            for n in self.notes
            if n.broker == target and n.key == "leadership lost" and start <= n.t < end
        ]
        return min(times) - run.inject if times else None


def findings(result: ScenarioResult) -> list[str]:
    """Every expectation a fault broke, one line each (empty: none)."""
    found = []
    lease = result.lease
    report = result.report
    found += [f"split brain: {problem}" for problem in report.split_brain]
    if report.lost:
        found.append(f"{len(report.lost)} confirmed messages lost in all: {', '.join(report.lost[:10])}")
    if report.phantoms:
        found.append(f"{len(report.phantoms)} phantom deliveries: {', '.join(report.phantoms[:10])}")
    found += early_takeovers(result.actives, lease)
    found += [f"{e.broker} exited with status {e.code}" for e in result.exits if e.code not in (0, 3)]
    for run in result.runs:
        label = f"{run.name} at +{run.inject - report.start:.1f} s"
        if "error" in run.details:
            found.append(f"{label}: not injected: {run.details['error']}")
            continue
        if not run.ready_before:
            found.append(
                f"{label}: injected without an active, a standby and confirms flowing (wait ran out)"
            )
        w = result.window(run)
        if w is not None and w.lost:
            found.append(f"{label}: {len(w.lost)} confirmed messages LOST: {', '.join(w.lost[:10])}")
        if run.name == "db-partition" and w is not None and w.longest_no_confirm > 2 * lease + 2:
            found.append(
                f"{label}: {w.longest_no_confirm:.2f} s without a confirm, more than 2 x lease + 2 s"
                f" = {2 * lease + 2:g} s (hold {run.hold:.1f} s)"
            )
        outage = run.details.get("outage")
        if run.name in ("pg-kill9", "pg-restart") and outage is not None and outage < lease and run.failover:
            found.append(
                f"{label}: a PostgreSQL outage of {outage:.2f} s (< lease {lease:g} s) was a failover:"
                f" {run.epoch_before} -> {run.epoch_after}"
            )
        if run.name == "sigstop-active" and run.details.get("exit_code") != 3:
            found.append(f"{label}: the paused active exited with {run.details.get('exit_code')}, not 3")
        lost_after = result.leadership_lost_after(run)
        late = lost_after is None and run.hold > lease + STOP_MARGIN
        late = late or lost_after is not None and lost_after > lease + STOP_MARGIN
        if run.name in CUT_OFF and late:
            when = "never" if lost_after is None else f"{lost_after:.2f} s after the injection"
            found.append(
                f"{label}: the active cut off from its database for {run.hold:.1f} s logged 'leadership lost'"
                f" {when}, not within its lease ({lease:g} s)"
            )
        successor = result.successor(run)
        if run.name in CUT_OFF and lost_after is not None and successor is not None:
            overlap = run.inject + lost_after - successor.since
            if overlap > STOP_MARGIN:
                found.append(
                    f"{label}: {run.details.get('target')} logged 'leadership lost' {overlap:.2f} s after"
                    f" {successor.broker} took epoch {successor.epoch} over (two actives at once)"
                )
        if run.name in ("pg-kill9", "pg-restart") and not run.failover and result.nacks(run):
            found.append(
                f"{label}: {result.nacks(run)} publishes nacked through a database restart that was no"
                " failover (their confirms should wait)"
            )
        if not run.settled:
            found.append(f"{label}: no confirm from every publisher within {run.settle:.0f} s of the heal")
        stored = result.nacked_but_stored(run, after_only=True)
        if stored:
            found.append(f"{label}: {len(stored)} nacked messages were stored after all: {_some(stored)}")
        if w is not None:
            odd = [d for d in w.duplicates if d.category == "unexplained"]
            if odd:
                found.append(f"{label}: {len(odd)} unexplained duplicates, e.g. {odd[0]}")
    return found


def _some(items: dict[str, str], n: int = 5) -> str:
    return "; ".join(f"{k} ({v})" for k, v in list(items.items())[:n])


def _fmt_epoch(pair: tuple[str, int | None] | None) -> str:
    return "none" if pair is None else f"{pair[0]}/{pair[1]}"


def scenario_markdown(result: ScenarioResult) -> str:
    """The report section of one scenario."""
    report = result.report
    lines = [f"## {result.name} (lease {result.lease:g} s)", "", "```", report.summary(), "```", ""]
    lines += [report.table(), ""]
    lines += [
        "| fault | target / details | hold | failover (epoch before -> after) | leadership lost after"
        " | exits | duplicates by category | nacked | nacked but delivered (all / after the nack)"
        " | broker log lines |",
        "|---|---|---:|---|---:|---|---|---:|---:|---|",
    ]
    for run in result.runs:
        w = result.window(run)
        dups = Counter(d.category for d in (w.duplicates if w else []))
        dup_text = ", ".join(f"{c}: {dups[c]}" for c in CATEGORIES if dups[c]) or "0"
        exits = ", ".join(f"{e.broker} -> {e.code}" for e in result.exits_in(run)) or "-"
        notes = ", ".join(f"{k}: {v}" for k, v in sorted(result.note_counts(run).items())) or "-"
        details = ", ".join(f"{k}={v}" for k, v in run.details.items())
        epochs = f"{_fmt_epoch(run.epoch_before)} -> {_fmt_epoch(run.epoch_after)}"
        failover = f"{'yes' if run.failover else 'no'} ({epochs})"
        lost_after = result.leadership_lost_after(run)
        lost_text = "-" if lost_after is None else f"{lost_after:.2f} s"
        delivered = f"{len(result.nacked_but_stored(run))} / {len(result.nacked_but_stored(run, True))}"
        lines.append(
            f"| {run.name} | {details} | {run.hold:.2f} s | {failover} | {lost_text} | {exits} | {dup_text} |"
            f" {result.nacks(run)} | {delivered} | {notes} |"
        )
    found = findings(result)
    lines += ["", "### Findings", ""]
    lines += [f"- {f}" for f in found] or ["- none: every expectation held"]
    if report.nacked_but_stored:
        lines += ["", f"nacked but delivered (all faults): {_some(report.nacked_but_stored, 10)}"]
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items())
    lines += ["", f"Timings: {timings}", ""]
    return "\n".join(lines)


def write_report(
    path: Path, schedule: Schedule, scenarios: dict[str, ScenarioResult], wall: float, results: Path
) -> None:
    """Write ``report.md`` at ``path`` and ``report.json`` beside it."""
    head = [
        "# Chaos run",
        "",
        f"Schedule **{schedule.name}**"
        + (f" ({schedule.minutes:g} min)" if schedule.name == "long" else "")
        + f", seed {schedule.seed}, lease {schedule.lease:g} s, wall time {wall:.1f} s. Results: `{results}`"
        " (records `*/*.jsonl`, runner events `*/events.jsonl`, broker logs `*/broker-*.log`).",
        "",
    ]
    ok = all(s.report.ok for s in scenarios.values())
    head += [f"Verdict: **{'OK' if ok else 'FAILED'}** (0 lost confirmed, no phantom, no split brain)", ""]
    body = [scenario_markdown(s) for s in scenarios.values()]
    path.write_text("\n".join(head + body))
    data = {
        "schedule": asdict(schedule),
        "wall": wall,
        "ok": ok,
        "scenarios": {
            name: {
                "ok": s.report.ok,
                "summary": s.report.summary(),
                "findings": findings(s),
                "runs": [asdict(r) | {"failover": r.failover} for r in s.runs],
                "exits": [asdict(e) for e in s.exits],
                "actives": [asdict(a) for a in s.actives],
                "notes": [asdict(n) for n in s.notes],
                "duplicates": [asdict(d) for d in s.report.duplicates],
                "nacked_but_stored": s.report.nacked_but_stored,
                "stored_after_nack": s.stored,
                "lost": s.report.lost,
            }
            for name, s in scenarios.items()
        },
    }
    path.with_suffix(".json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    log.info("report written to %s", path)
