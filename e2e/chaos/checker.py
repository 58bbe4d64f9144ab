"""The chaos harness's checker: what a queue promised, judged from the clients' and the runner's records.

Pure and standard-library only, importable by the tests and the runner. A queue is checked in Jepsen's
"total queue" sense: every confirmed message comes out (from its queue, or dead-lettered from its
dead-letter queue) at least once, nothing comes out that was never published, and two brokers never act
as the active one for the same epoch.

Input records (JSON lines, see ``workload.py`` for the clients' ``connect``, ``disconnect``, ``send``,
``publish`` and ``deliver``) plus the runner's own events::

    {"op": "epoch", "broker": "a", "url": "amqp://...", "epoch": 7, "t": ...}   broker a is active, epoch 7
    {"op": "fault", "name": "db-partition", "phase": "inject" | "heal", "t": ...}

A broker name is one process (a restarted process is a new name, ``a#2``) and holds one epoch.

Rules:

- An id is *attempted* if a ``send`` or ``publish`` record has it; its outcome is its ``publish`` record's
  (``confirmed`` wins over ``nacked`` over ``unknown`` should a client ever write two), ``unknown`` when
  only the ``send`` exists (the client was killed before the outcome).
- A delivery is a *dead-letter* delivery when it carries ``x-death`` entries, else a main-queue one.
- An id is *accounted for* once it was delivered from its main queue and acked, delivered from a
  dead-letter queue (whatever was done with it), or delivered during the drain.
- ``lost``: confirmed ids not accounted for. MUST be empty. ``lost_unknown``/``lost_nacked``: the same for
  unknown and nacked publishes, informative only (such a publish may or may not have been stored).
- ``rejected_not_dead_lettered``: ids rejected on the main queue that never reached the dead-letter
  queue nor were acked later (a reject that did not arrive makes them come back). A confirmed one is
  also in ``lost`` (a move to a dead-letter queue loses nothing, docs/durability.md); an unconfirmed one
  is informative: ottermq delivers a message before its publish is committed, and a broker whose commit
  is refused (a paused active resuming after its lease: fenced) drops it, so a consumer may have seen,
  and rejected, a message that was never stored.
- ``phantoms``: delivered ids that no publish attempt had. MUST be empty.
- ``nacked_but_stored``: nacked ids that were delivered, each with ``"delivered 0.004 s before the nack"``
  (the documented case: a nacked publish is taken back out of its queues unless a consumer already has
  it) or ``"... after the nack"``. The times are the clients' records: a consumer records a delivery when
  it handles it, which lags its arrival by the handling of the deliveries before it, so "after" by a few
  milliseconds is no proof; "after" by more than the consumer's backlog means the nack's promise broke.
- ``acked_and_dead_lettered``: ids acked on the main queue that were also dead-lettered, with the
  dead-letter reasons: an ack lost in a crash whose message then expired or was rejected again.
- Duplicates: every delivery of an (id, queue) after its first, in the first category that fits:

  ``redelivered``       the later delivery had the redelivered flag: at-least-once, as promised
                        (an ack that did not reach the broker, a connection that dropped);
  ``dead-letter copy``  a dead-letter delivery with the same x-death (queue, reason, count) as an
                        earlier one of the same id: the move to the dead-letter queue happened twice
                        (its source was still there after a crash or fail-over);
  ``after failover``    no flag, but an epoch began between the two deliveries: the new active did not
                        know the first delivery (its mark had not reached the database);
  ``unexplained``       none of these: the broker delivered a message twice with nothing to excuse it.

- ``split_brain``, only what is certainly wrong: two brokers reporting the same epoch; one broker
  reporting two epochs; a confirm or a delivery from an address (host:port) that no broker ever reported
  as active while some did. Timing alone is never flagged: a confirm may reach the client after the
  next epoch began (the old active committed before the take-over, which waits for its fence lock).
- Fault windows: from a fault's ``inject`` to its ``heal`` plus ``settle`` seconds (the window of an
  unhealed fault ends with the records). ``longest_no_confirm``: the longest time without a confirm
  inside the window, counted from the inject, up to the window's end or the publishers' last record
  if that is earlier; ``first_confirm_after_heal``: seconds from the heal to the next confirm (None if
  none ever came); ``lost`` and ``duplicates``: those of ids whose publish was sent (``t0``) in the window.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

OUTCOME_RANK = {"unknown": 0, "nacked": 1, "confirmed": 2}
CATEGORIES = ("redelivered", "dead-letter copy", "after failover", "unexplained")
Record = dict[str, Any]


def load(paths: Iterable[str | Path]) -> list[Record]:
    """Read JSON-lines files into one list of records sorted by ``t``.

    Args:
        paths: the clients' output files and the runner's event file.

    Returns:
        Every record of every file; a line that is not a JSON object (the last line of a client
        killed while writing it) is skipped with a warning.
    """
    records: list[Record] = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    log.warning("%s:%d: not JSON, skipped: %.80r", path, number, line)
                    continue
                if isinstance(record, dict):
                    records.append(record)
    records.sort(key=lambda r: float(r.get("t", 0.0)))
    return records


def address(url: str | None) -> str:
    """``host:port`` of an AMQP URL (credentials and vhost left out), to match clients and the runner."""
    if not url:
        return ""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.hostname or ''}:{parts.port or 5672}"


@dataclass(frozen=True)
class Duplicate:
    """One delivery of an (id, queue) after its first."""

    id: str
    queue: str
    category: str  # one of CATEGORIES
    t: float  # when this delivery was recorded
    previous_t: float  # when the delivery before it was
    detail: str = ""


@dataclass
class FaultWindow:
    """What one fault (inject → heal → heal + settle) did to the confirms and to the messages sent in it."""

    name: str
    inject: float
    heal: float | None
    end: float
    confirms: int  # confirms received in the window
    longest_no_confirm: float
    first_confirm_after_heal: float | None
    lost: list[str] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)


@dataclass
class Report:
    """The verdict on a history; the id lists are sorted, ``ok`` is the pass/fail."""

    published: int  # publish attempts
    confirmed: int
    nacked: int
    unknown: int
    delivered: int  # distinct ids delivered
    deliveries: int  # delivery records
    lost: list[str]
    lost_unknown: list[str]
    lost_nacked: list[str]
    rejected_not_dead_lettered: list[str]
    phantoms: list[str]
    nacked_but_stored: dict[str, str]
    acked_and_dead_lettered: dict[str, list[str]]
    dead_lettered: dict[str, list[str]]  # reason -> ids delivered from a dead-letter queue
    duplicates: list[Duplicate]
    split_brain: list[str]
    epochs: dict[int, list[str]]  # epoch -> brokers that reported it
    windows: list[FaultWindow]
    start: float  # the first record's t (the table's times are relative to it)

    @property
    def ok(self) -> bool:
        """Nothing confirmed was lost, no phantom, no split brain."""
        return not (self.lost or self.phantoms or self.split_brain)

    @property
    def duplicate_counts(self) -> dict[str, int]:
        """Duplicates per category (every category present, zeros included)."""
        counts = Counter(d.category for d in self.duplicates)
        return {category: counts.get(category, 0) for category in CATEGORIES}

    def table(self) -> str:
        """A Markdown table, one row per fault window."""
        rows = [
            "| fault | lost | duplicated | longest without a confirm | first confirm after heal |",
            "|---|---:|---:|---:|---:|",
        ]
        for w in self.windows:
            heal = "not healed" if w.heal is None else f"healed +{w.heal - self.start:.1f} s"
            first = "none" if w.first_confirm_after_heal is None else f"{w.first_confirm_after_heal:.2f} s"
            rows.append(
                f"| {w.name} (+{w.inject - self.start:.1f} s, {heal}) | {len(w.lost)} | "
                f"{len(w.duplicates)} | {w.longest_no_confirm:.2f} s | {first} |"
            )
        return "\n".join(rows)

    def summary(self) -> str:
        """A few lines for a log or an assertion message."""

        def some(ids: Iterable[str]) -> str:
            items = list(ids)
            return f"{len(items)}" + (f" (e.g. {', '.join(items[:5])})" if items else "")

        lines = [
            f"{'OK' if self.ok else 'FAILED'}: {self.published} attempts, {self.confirmed} confirmed, "
            f"{self.nacked} nacked, {self.unknown} unknown; {self.delivered} ids in {self.deliveries} "
            "deliveries",
            f"lost {some(self.lost)}; rejected, not dead-lettered {some(self.rejected_not_dead_lettered)}; "
            f"phantoms {some(self.phantoms)}",
            f"unknown never seen {len(self.lost_unknown)}, nacked never seen {len(self.lost_nacked)}, "
            f"nacked but stored {some(self.nacked_but_stored)}",
            "duplicates " + ", ".join(f"{k}: {v}" for k, v in self.duplicate_counts.items()),
            "dead-lettered " + ", ".join(f"{k}: {len(v)}" for k, v in sorted(self.dead_lettered.items())),
        ]
        lines += [f"split brain: {problem}" for problem in self.split_brain]
        lines += [f"unexplained duplicate: {d}" for d in self.duplicates if d.category == "unexplained"][:5]
        return "\n".join(lines)


@dataclass
class _Attempt:
    id: str
    t0: float
    outcome: str = "unknown"
    decided: float | None = None  # when the outcome was recorded


def _attempts(records: list[Record]) -> dict[str, _Attempt]:
    attempts: dict[str, _Attempt] = {}
    for r in records:
        if r.get("op") not in ("send", "publish") or "id" not in r:
            continue
        found = attempts.setdefault(r["id"], _Attempt(r["id"], float(r["t0"] if "t0" in r else r["t"])))
        if r["op"] == "publish":
            outcome = str(r.get("outcome", "unknown"))
            if found.decided is None or OUTCOME_RANK.get(outcome, 0) > OUTCOME_RANK[found.outcome]:
                found.outcome, found.decided = outcome, float(r["t"])
    return attempts


def _death_key(delivery: Record) -> tuple[tuple[str, str, int], ...]:
    deaths = delivery.get("xdeath") or []
    return tuple(
        sorted((str(d.get("queue")), str(d.get("reason")), int(d.get("count") or 0)) for d in deaths)
    )


def _classify(group: list[Record], epochs: list[Record]) -> list[Duplicate]:
    """The duplicates among one (id, queue)'s deliveries, in time order."""
    found = []
    for i in range(1, len(group)):
        d, previous = group[i], group[i - 1]
        t, prev_t = float(d["t"]), float(previous["t"])
        between = [e for e in epochs if prev_t < float(e["t"]) <= t]
        if d.get("redelivered"):
            category, detail = "redelivered", "redelivered flag set"
        elif d.get("xdeath") and any(_death_key(p) == _death_key(d) for p in group[:i]):
            category, detail = "dead-letter copy", f"same x-death {list(_death_key(d))}"
        elif between:
            category = "after failover"
            detail = ", ".join(f"epoch {e.get('epoch')} ({e.get('broker')})" for e in between) + " began"
        else:
            category, detail = "unexplained", f"no flag, no epoch change since {prev_t:.3f}"
        found.append(Duplicate(str(d["id"]), str(d["queue"]), category, t, prev_t, detail))
    return found


def _split_brain(epochs: list[Record], deliveries: list[Record], confirms: list[Record]) -> list[str]:
    problems = []
    by_epoch: dict[int, set[str]] = defaultdict(set)
    by_broker: dict[str, set[int]] = defaultdict(set)
    for e in epochs:
        by_epoch[int(e["epoch"])].add(str(e.get("broker")))
        by_broker[str(e.get("broker"))].add(int(e["epoch"]))
    for epoch, brokers in sorted(by_epoch.items()):
        if len(brokers) > 1:
            problems.append(f"epoch {epoch} reported by {len(brokers)} brokers: {', '.join(sorted(brokers))}")
    for broker, held in sorted(by_broker.items()):
        if len(held) > 1:
            problems.append(f"broker {broker} reported {len(held)} epochs: {sorted(held)}")
    if epochs:
        known = {address(e.get("url")) for e in epochs}
        strays: dict[str, Counter[str]] = defaultdict(Counter)
        for kind, found in (("confirms", confirms), ("deliveries", deliveries)):
            for r in found:
                where = address(r.get("url"))
                if where not in known:
                    strays[where][kind] += 1
        for where, counts in sorted(strays.items()):
            problems.append(
                f"{counts['confirms']} confirms and {counts['deliveries']} deliveries from {where or '?'}, "
                "an address no broker ever reported as active"
            )
    return problems


def _longest_gap(confirm_times: list[float], start: float, end: float) -> float:
    longest, previous = 0.0, start
    for t in confirm_times:
        if t <= start:
            continue
        if t > end:
            break
        longest, previous = max(longest, t - previous), t
    return max(longest, end - previous)


def _windows(
    faults: list[Record],
    confirm_times: list[float],
    settle: float,
    last_t: float,
    publishers_end: float,
    lost_at: dict[str, float],
    duplicates: list[Duplicate],
    attempts: dict[str, _Attempt],
) -> list[FaultWindow]:
    open_faults: dict[str, list[Record]] = defaultdict(list)
    pairs: list[tuple[Record, Record | None]] = []
    for f in faults:
        name = str(f.get("name"))
        if f.get("phase") == "inject":
            open_faults[name].append(f)
        elif f.get("phase") == "heal" and open_faults[name]:
            pairs.append((open_faults[name].pop(0), f))
    pairs += [(f, None) for pending in open_faults.values() for f in pending]
    pairs.sort(key=lambda p: float(p[0]["t"]))
    windows = []
    for inject, heal in pairs:
        start = float(inject["t"])
        healed = None if heal is None else float(heal["t"])
        end = last_t if healed is None else healed + settle
        after = [t for t in confirm_times if healed is not None and t >= healed]
        inside = [t for t in confirm_times if start < t <= end]
        in_window = [d for d in duplicates if d.id in attempts and start <= attempts[d.id].t0 <= end]
        windows.append(
            FaultWindow(
                name=str(inject.get("name")),
                inject=start,
                heal=healed,
                end=end,
                confirms=len(inside),
                longest_no_confirm=_longest_gap(confirm_times, start, max(start, min(end, publishers_end))),
                first_confirm_after_heal=None if not after or healed is None else after[0] - healed,
                lost=sorted(i for i, t0 in lost_at.items() if start <= t0 <= end),
                duplicates=in_window,
            )
        )
    return windows


def check(records: list[Record], *, settle: float = 5.0) -> Report:
    """Judge a history (the output of :func:`load`, or records built by hand in any order).

    Args:
        records: client and runner records, as described in the module's docstring.
        settle: seconds after a heal that still belong to its fault window.

    Returns:
        The :class:`Report`.
    """
    records = sorted(records, key=lambda r: float(r.get("t", 0.0)))
    attempts = _attempts(records)
    deliveries = [r for r in records if r.get("op") == "deliver" and "id" in r]
    epochs = [r for r in records if r.get("op") == "epoch"]
    faults = [r for r in records if r.get("op") == "fault"]
    confirms = [r for r in records if r.get("op") == "publish" and r.get("outcome") == "confirmed"]

    outcomes: dict[str, set[str]] = {name: set() for name in OUTCOME_RANK}
    for a in attempts.values():
        outcomes[a.outcome].add(a.id)

    accounted: set[str] = set()
    acked_main: set[str] = set()
    rejected_main: set[str] = set()
    dead_lettered: dict[str, set[str]] = defaultdict(set)
    reasons_of: dict[str, set[str]] = defaultdict(set)
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for d in deliveries:
        message_id = str(d["id"])
        groups[(message_id, str(d.get("queue")))].append(d)
        if d.get("xdeath"):
            accounted.add(message_id)
            for death in d["xdeath"]:
                dead_lettered[str(death.get("reason"))].add(message_id)
                reasons_of[message_id].add(str(death.get("reason")))
        elif d.get("action") == "reject":
            rejected_main.add(message_id)
        else:
            acked_main.add(message_id)
            accounted.add(message_id)
        if d.get("phase") == "drain":
            accounted.add(message_id)

    first_delivery: dict[str, float] = {}
    for d in deliveries:
        first_delivery.setdefault(str(d["id"]), float(d["t"]))
    nacked_but_stored = {}
    for message_id in sorted(outcomes["nacked"] & first_delivery.keys()):
        lag = first_delivery[message_id] - (attempts[message_id].decided or 0.0)
        when = "before" if lag < 0 else "after"
        nacked_but_stored[message_id] = f"delivered {abs(lag):.3f} s {when} the nack"

    duplicates = [dup for group in groups.values() for dup in _classify(group, epochs)]
    duplicates.sort(key=lambda d: d.t)
    lost = sorted(outcomes["confirmed"] - accounted)
    publishers_end = max((float(r["t"]) for r in records if r.get("op") in ("send", "publish")), default=0.0)
    last_t = float(records[-1]["t"]) if records else 0.0
    by_epoch: dict[int, set[str]] = defaultdict(set)
    for e in epochs:
        by_epoch[int(e["epoch"])].add(str(e.get("broker")))

    return Report(
        published=len(attempts),
        confirmed=len(outcomes["confirmed"]),
        nacked=len(outcomes["nacked"]),
        unknown=len(outcomes["unknown"]),
        delivered=len(first_delivery),
        deliveries=len(deliveries),
        lost=lost,
        lost_unknown=sorted(outcomes["unknown"] - accounted),
        lost_nacked=sorted(outcomes["nacked"] - accounted),
        rejected_not_dead_lettered=sorted(rejected_main - accounted),
        phantoms=sorted(first_delivery.keys() - attempts.keys()),
        nacked_but_stored=nacked_but_stored,
        acked_and_dead_lettered={i: sorted(reasons_of[i]) for i in sorted(acked_main & reasons_of.keys())},
        dead_lettered={reason: sorted(ids) for reason, ids in sorted(dead_lettered.items())},
        duplicates=duplicates,
        split_brain=_split_brain(epochs, deliveries, confirms),
        epochs={epoch: sorted(brokers) for epoch, brokers in sorted(by_epoch.items())},
        windows=_windows(
            faults,
            sorted(float(r["t"]) for r in confirms),
            settle,
            last_t,
            publishers_end,
            {i: attempts[i].t0 for i in lost},
            duplicates,
            attempts,
        ),
        start=float(records[0]["t"]) if records else 0.0,
    )


if __name__ == "__main__":  # python checker.py FILE... : the summary and the table; status 1 if not ok
    import sys

    logging.basicConfig(level=logging.WARNING)
    report = check(load(sys.argv[1:]))
    sys.stdout.write(report.summary() + "\n\n" + report.table() + "\n")
    sys.exit(0 if report.ok else 1)
