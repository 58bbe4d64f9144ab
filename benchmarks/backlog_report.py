"""The backlog benchmark's table (``benchmarks/backlog.py``): one column per broker, targets beside.

Memory is in MB of 10^6 bytes, as the targets are written (1.5 GB = 1,500 MB; 100 bytes per message).
The targets are ottermq's, for the 10M-message backlog: a smaller run shows whether the trend is there,
not whether they are met, so only ottermq's column of a run that held 10M is marked (met / missed), and
a smaller run's peak RSS when it already passed 1.5 GB.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backlog_sampling import Phase, Result

PEAK_RSS_TARGET = 1.5e9
BYTES_PER_MESSAGE_TARGET = 100.0
DRAIN_TARGET = 50_000.0


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:,.0f}"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _phase_attr(name: str, attr: str) -> Callable[[Result], Any]:
    def get(r: Result) -> Any:
        phase = r.phase(name)
        return None if phase is None else getattr(phase, attr)

    return get


def _us_per_message(name: str, count: str) -> Callable[[Result], float | None]:
    def get(r: Result) -> float | None:
        phase, n = r.phase(name), getattr(r, count)
        if phase is None or phase.broker_cpu_s is None or not n:
            return None
        return 1e6 * phase.broker_cpu_s / float(n)

    return get


def _count_at(r: Result, t: float) -> int | None:
    """Messages confirmed when ``t`` happened (the generator's last progress line before it)."""
    before = [p for p in r.progress if p["t"] <= t]
    if not before:
        return None
    return int(before[-1]["confirmed"] if before[-1]["phase"] == "publish" else before[-1]["delivered"])


def _when(r: Result, t: float) -> str:
    """``publish +12.3 s (1.2M confirmed)``: the phase an instant fell in and how far into it."""
    phase: Phase | None = next((p for p in r.phases if p.start <= t <= (p.end or t)), None)
    if phase is None:
        return f"t={t:.1f}"
    count = _count_at(r, t) if phase.name in ("publish", "drain") else None
    done = "confirmed" if phase.name == "publish" else "delivered"
    shown = f" ({count:,} {done})" if count is not None else ""
    return f"{phase.name} +{t - phase.start:.1f} s{shown}"


def blocked_text(r: Result) -> str:
    """``connection.blocked`` as the generator's connections saw it: per connection (those alike
    merged), the reason, when first, how often and for how long; a connection still blocked when its
    phase ended (the generator gone) says so."""
    if not r.blocked_events:
        return "never"
    described: dict[str, list[str]] = {}
    for conn in dict.fromkeys(e["conn"] for e in r.blocked_events):
        events = sorted((e for e in r.blocked_events if e["conn"] == conn), key=lambda e: float(e["t"]))
        phase = r.phase(events[0]["phase"])
        end = phase.end if phase is not None else float(events[-1]["t"])
        reasons = "/".join(dict.fromkeys(f"'{e['reason']}'" for e in events if e["blocked"])) or "unblocked"
        spans, still = _spans([(float(e["t"]), bool(e["blocked"])) for e in events], end)
        if not spans:
            described.setdefault(f"{reasons} only", []).append(conn)
            continue
        total = sum(b - a for a, b in spans)
        text = f"{reasons} from {_when(r, spans[0][0])}, {len(spans)}x, {total:.1f} s"
        text += ", still blocked when its phase ended" if still else ""
        described.setdefault(text, []).append(conn)
    return "; ".join(f"{', '.join(conns)}: {text}" for text, conns in described.items())


def alarm_text(r: Result, key: str) -> str:
    """The broker's own alarm (``mem_alarm`` / ``disk_free_alarm`` in ``/api/nodes``), polled each second."""
    if not r.alarms:
        return "n/a"
    end = r.samples[-1][0] if r.samples else float(r.alarms[-1]["t"])
    spans, still = _spans([(float(a["t"]), bool(a[key])) for a in r.alarms], end)
    if not spans:
        return "never"
    total = sum(b - a for a, b in spans)
    return f"from {_when(r, spans[0][0])}, {len(spans)}x, {total:.0f} s" + (
        ", still on at the end" if still else ""
    )


def _spans(states: list[tuple[float, bool]], end: float) -> tuple[list[tuple[float, float]], bool]:
    """On/off transitions as ``(start, end)`` spans, and whether the last one was still on at ``end``
    (where it is cut)."""
    spans: list[tuple[float, float]] = []
    since: float | None = None
    for t, on in sorted(states):
        if on and since is None:
            since = t
        elif not on and since is not None:
            spans.append((since, t))
            since = None
    if since is not None:
        spans.append((since, max(end, since)))
    return spans, since is not None


def _others(r: Result) -> str:
    """Other users of the broker seen at the phase ends: most connections (ours included: none between
    phases) and most messages in other queues (the management API's statistics, up to 5 s old)."""
    if not r.totals:
        return "n/a"
    conns = max(((t.get("object_totals") or {}).get("connections") or 0) for t in r.totals.values())
    other = max((t.get("other_messages") or 0) for t in r.totals.values())
    return f"{conns} conns, {other:,} msgs"


TARGET_MESSAGES = 10_000_000


def _mark(r: Result, value: float | None, ok: Callable[[float], bool], lower_bound: bool = False) -> str:
    """``(met)`` / ``(missed)`` on ottermq's column once it held a backlog of the targets' size (a smaller
    one meets the peak trivially and drains from memory). ``lower_bound``: the value can only grow with
    the backlog (peak RSS), so a smaller run that already misses is marked too."""
    if value is None or not r.label.lower().startswith("ottermq"):
        return ""
    if (r.held or 0) >= TARGET_MESSAGES:
        return " (met)" if ok(value) else " (missed)"
    return " (missed)" if lower_bound and not ok(value) else ""


Row = tuple[str, str, Callable[["Result"], str]]


def rows() -> list[Row]:
    def peak(r: Result) -> str:
        return _mb(r.peak_rss) + _mark(r, r.peak_rss, lambda v: v < PEAK_RSS_TARGET, lower_bound=True)

    def per_message(r: Result) -> str:
        v = r.bytes_per_message
        return _num(v) + _mark(r, v, lambda x: x <= BYTES_PER_MESSAGE_TARGET)

    def drain(r: Result) -> str:
        return _num(r.drain_msgs_s) + _mark(r, r.drain_msgs_s, lambda x: x >= DRAIN_TARGET)

    def pct(get: Callable[[Result], Any]) -> Callable[[Result], str]:
        return lambda r: _num(get(r), 1)

    def seconds(name: str) -> Callable[[Result], str]:
        return lambda r: _num(_phase_attr(name, "seconds")(r), 1)

    def others_pct(r: Result) -> str:
        got = [_phase_attr(n, "others_pct")(r) for n in ("publish", "drain")]
        return " / ".join(_num(v, 0) for v in got)

    return [
        ("messages confirmed / held / drained / left", "", lambda r: _counts(r)),
        ("idle RSS, MB", "", lambda r: _mb(r.idle_rss)),
        ("peak RSS, MB", "< 1,500", peak),
        ("RSS at end of publish, MB", "", lambda r: _mb(_phase_attr("publish", "rss_end")(r))),
        ("RSS with the backlog held (end of hold), MB", "", lambda r: _mb(_phase_attr("hold", "rss_end")(r))),
        (
            "of the held RSS, file-backed or shared (mmap); peak, MB",
            "",
            lambda r: f"{_mb(_phase_attr('hold', 'rss_file_end')(r))}; {_mb(r.peak_rss_file)}",
        ),
        ("RSS at end of drain, MB", "", lambda r: _mb(_phase_attr("drain", "rss_end")(r))),
        ("RSS after the drain (+hold s), MB", "", lambda r: _mb(_phase_attr("settle", "rss_end")(r))),
        ("broker memory per message held, bytes", "<= 100", per_message),
        ("publish, msg/s (persistent, confirms)", "", lambda r: _num(r.publish_msgs_s)),
        ("drain from disk, msg/s", ">= 50,000", drain),
        ("drain: first delivery after basic.consume, s", "", lambda r: _num(r.drain_first_s, 3)),
        ("connection.blocked (generator side)", "", blocked_text),
        ("memory alarm (broker, /api/nodes)", "", lambda r: alarm_text(r, "mem_alarm")),
        ("disk alarm (broker, /api/nodes)", "", lambda r: alarm_text(r, "disk_free_alarm")),
        (
            "broker CPU idle / while holding, % of a core",
            "",
            lambda r: f"{pct(lambda x: x.idle_cpu_pct)(r)} / {pct(lambda x: x.hold_cpu_pct)(r)}",
        ),
        (
            "broker CPU per message publish / drain, µs",
            "",
            lambda r: (
                f"{_num(_us_per_message('publish', 'published')(r), 1)}"
                f" / {_num(_us_per_message('drain', 'drained')(r), 1)}"
            ),
        ),
        ("disk per message held, bytes", "", lambda r: _num(r.disk_per_message)),
        ("publish / drain time, s", "", lambda r: f"{seconds('publish')(r)} / {seconds('drain')(r)}"),
        (
            "generator CPU publish / drain, % of a core",
            "",
            lambda r: f"{_num(r.publish_gen_cpu_pct, 1)} / {_num(r.drain_gen_cpu_pct, 1)}",
        ),
        ("other processes' CPU publish / drain, % of a core", "", others_pct),
        ("other users of the broker (max at phase ends)", "", _others),
        ("processes in the broker's tree (RSS summed)", "", lambda r: str(r.processes or 1)),
    ]


def _counts(r: Result) -> str:
    return " / ".join(_num(v) for v in (r.published, r.held, r.drained, r.left))


def markdown_table(results: list[Result], args: argparse.Namespace) -> str:
    """The results side by side, then the set-up and every note."""
    head = ["", "target (ottermq, 10M)", *[r.label for r in results]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, target, get in rows():
        lines.append("| " + " | ".join([name, target, *[get(r) for r in results]]) + " |")
    args_text = ", ".join(f"{k}: {v}" for k, v in (results[0].arguments if results else {}).items()) or "none"
    ack = "no-ack" if args.ack_every == 0 else f"multiple ack every {args.ack_every}"
    lines += [
        "",
        f"{args.messages:,} x {args.size} B persistent messages into one durable queue ({args_text}); "
        f"{args.publishers} publisher connection(s), <= {args.window} unconfirmed each; one consumer, "
        f"prefetch {args.prefetch}, {ack}; hold {args.hold:g} s. RSS of the broker's process tree, sampled "
        f"every {args.interval:g} s; MB = 10^6 bytes.",
    ]
    for r in results:
        lines += [f"- {r.label}: {note}" for note in r.notes]
        lines.append(f"- {r.label}: run took {r.wall_s:,.0f} s")
    return "\n".join(lines)
