"""Turn the report's collected tables into summary.json, report.md, PNG charts and a console summary.

Plain Python over lists of row dicts (Spark is not used here). matplotlib is imported only by :func:`charts`
and is optional: without it the charts are skipped with a warning.
"""

from __future__ import annotations

import datetime
import io
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ottermq.spark_jobs.schema import REASONS, SCHEMA_VERSION

__all__ = [
    "TREND_MIN_DEATHS",
    "TREND_MIN_SPAN_MS",
    "charts",
    "console",
    "findings",
    "format_ms",
    "html",
    "markdown",
    "summary",
]

log = logging.getLogger(__name__)

Rows = list[dict[str, Any]]


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_ms(ms: float | None) -> str:
    """A duration in ms for people: ``850 ms``, ``1.5 s``, ``2.0 min``, ``3.2 h``, ``1.1 d``."""
    if ms is None:
        return "–"
    sign, value = ("-" if ms < 0 else ""), abs(float(ms))
    for limit, unit, div in (
        (1_000, "ms", 1),
        (60_000, "s", 1_000),
        (3_600_000, "min", 60_000),
        (86_400_000, "h", 3_600_000),
    ):
        if value < limit:
            return f"{sign}{value / div:.0f} {unit}" if unit == "ms" else f"{sign}{value / div:.1f} {unit}"
    return f"{sign}{value / 86_400_000:.1f} d"


def _first(rows: Rows) -> dict[str, Any]:
    return rows[0] if rows else {}


def _percentiles(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: row.get(k)
        for k in ("count", "measurable", "early", "p50_ms", "p90_ms", "p99_ms", "max_ms")
        if k in row
    }


# -- findings -------------------------------------------------------------------------------------------

#: A cause needs this many deaths, and the archive this long a time span, for a trend.
TREND_MIN_DEATHS = 20
TREND_MIN_SPAN_MS = 10 * 60_000
#: Rising when the recent rate is at least this many times the earlier one; falling at most 1/this.
TREND_FACTOR = 1.5
#: How many causes the findings name.
TOP_CAUSES = 5

_UNITS = {
    "message-ttl": "ms",
    "expiration": "ms",
    "max-length": "messages",
    "max-length-bytes": "bytes",
    "delivery-limit": "deliveries",
}
_NO_LIMIT = {
    "rejected": "rejected by a consumer (basic.reject or basic.nack without requeue)",
    "expired": "expired (no limit recorded)",
    "maxlen": "overflowed a length limit (none recorded)",
    "delivery_limit": "reached a delivery limit (none recorded)",
}


def trend(earlier: int, recent: int, span_ms: int | None) -> str | None:
    """``rising``, ``falling``, ``steady`` or ``new``: the deaths of the archive's last quarter (its time
    span's) per hour against those of the three quarters before; None when there are too few."""
    if span_ms is None or span_ms < TREND_MIN_SPAN_MS or earlier + recent < TREND_MIN_DEATHS:
        return None
    if earlier == 0:
        return "new"
    ratio = 3 * recent / earlier  # rates: recent over a quarter of the span, earlier over three
    if ratio >= TREND_FACTOR:
        return "rising"
    if ratio <= 1 / TREND_FACTOR:
        return "falling"
    return "steady"


def _share(part: int, total: int) -> str:
    pct = 100 * part / total if total else 0.0
    return f"{pct:.0f}%" if pct >= 10 or pct == 0 else f"{pct:.1f}%"


def cause_text(cause: Mapping[str, Any]) -> str:
    """A cause in words: ``expired by the queue's message-ttl of 60000 ms (policy ttl-60s) in queue
    orders``."""
    limit, value, source = cause.get("limit"), cause.get("limit_value"), cause.get("limit_source")
    reason = str(cause.get("reason"))
    if limit is None:
        what = _NO_LIMIT.get(reason, reason)
    else:
        unit = _UNITS.get(limit, "")
        amount = f"{value} {unit}".strip() if value is not None else "unknown value"
        what = {
            "message-ttl": f"expired by the queue's message-ttl of {amount}",
            "expiration": f"expired by the message's own expiration of {amount}",
            "max-length": f"overflowed the queue's max-length of {amount}",
            "max-length-bytes": f"overflowed the queue's max-length-bytes of {amount}",
            "delivery-limit": f"reached the queue's delivery-limit of {amount}",
        }.get(limit, f"{reason} by {limit} {amount}")
        if source == "policy":
            what += f" (policy {cause['policy']})" if cause.get("policy") else " (a policy)"
        elif source == "operator-policy":
            what += " (operator policy)"
        elif source == "argument":
            what += " (queue argument)"
    where = f"queue {cause.get('queue')}"
    if cause.get("vhost") not in (None, "/"):
        where += f" in vhost {cause.get('vhost')}"
    return f"{what} in {where}"


def findings(
    causes: Rows,
    results: Mapping[str, Rows],
    *,
    first_ms: int | None,
    last_ms: int | None,
    cut_ms: int | None,
    retry_threshold: int = 3,
    loops: int | None = None,
) -> dict[str, Any]:
    """Why the messages died, in words: the :data:`TOP_CAUSES` biggest causes (a queue, reason and
    limit) with their share of the dead letters and trend, then drops and retry loops.

    Returns:
        ``{"text": [sentences], "causes": [the causes named, with counts, share and trend],
        "recent_from": ISO time of the cut}``.
    """
    total = sum(c["count"] for c in causes)
    span = None if first_ms is None or last_ms is None else last_ms - first_ms
    named = []
    text = []
    for cause in causes[:TOP_CAUSES]:
        direction = trend(cause["earlier"], cause["recent"], span)
        words = f"{_share(cause['count'], total)} {cause_text(cause)}"
        words += f", {direction}" if direction else ""
        if direction == "new":
            words = words.removesuffix(", new") + ", new: only in the last quarter of the time span"
        text.append(words)
        named.append(
            {
                **{k: cause[k] for k in ("vhost", "queue", "reason", "limit", "limit_value", "limit_source")},
                "policy": cause.get("policy"),
                "count": cause["count"],
                "share": round(cause["count"] / total, 4) if total else 0.0,
                "earlier": cause["earlier"],
                "recent": cause["recent"],
                "trend": direction,
                "text": words,
            }
        )
    dropped: dict[str, int] = {}
    for row in results.get("by_outcome", []):
        if row["outcome"] == "dropped":
            dropped[str(row["drop_reason"])] = dropped.get(str(row["drop_reason"]), 0) + row["count"]
    if dropped and total:
        why = ", ".join(f"{k} {_share(v, total)}" for k, v in sorted(dropped.items(), key=lambda kv: -kv[1]))
        text.append(
            f"{_share(sum(dropped.values()), total)} were dropped instead of being routed to a dead-letter "
            f"exchange ({why})"
        )
    worst = [r for r in results.get("retry_loops", []) if r.get("message_id") is not None][:1]
    if worst:
        w = worst[0]
        count = f"{loops:,} retry loops" if loops is not None else "Retry loops"
        text.append(
            f"{count} (a message dying {retry_threshold}+ times in one queue); the worst, {w['message_id']}, "
            f"died {w['deaths']} times in queue {w['queue']} (death_count up to {w['max_death_count']})"
        )
    if not text:
        text.append("No dead letters.")
    return {"text": text, "causes": named, "recent_from": _iso(cut_ms)}


def summary(
    counts: Mapping[str, Any],
    results: Mapping[str, Rows],
    *,
    archive: str | Sequence[str],
    retry_threshold: int,
    top: int,
    findings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON summary of a report run: the findings (sentences) first, then the figures."""
    ov = _first(results.get("overview", []))
    by_outcome: dict[str, int] = {}
    by_drop: dict[str, int] = {}
    for row in results.get("by_outcome", []):
        by_outcome[row["outcome"]] = by_outcome.get(row["outcome"], 0) + row["count"]
        if row["drop_reason"] is not None:
            by_drop[row["drop_reason"]] = by_drop.get(row["drop_reason"], 0) + row["count"]

    def top_rows(name: str) -> Rows:
        return list(results.get(name, []))[:top]

    found = findings or {}
    return {
        "findings": list(found.get("text", [])),
        "causes": list(found.get("causes", [])),
        "recent_from": found.get("recent_from"),
        "archive_schema": SCHEMA_VERSION,
        "generated_at": _iso(int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)),
        "archive": archive if isinstance(archive, str) else list(archive),
        "input": dict(counts),
        "records": ov.get("records", 0),
        "bad_lines": counts.get("bad", 0),
        "first_death": _iso(ov.get("first_ms")),
        "last_death": _iso(ov.get("last_ms")),
        "vhosts": ov.get("vhosts", 0),
        "queues": ov.get("queues", 0),
        "by_reason": {row["reason"]: row["count"] for row in results.get("by_reason", [])},
        "by_limit": top_rows("by_limit"),
        "by_outcome": by_outcome,
        "by_drop_reason": by_drop,
        "time_in_queue_ms": _percentiles(_first(results.get("time_in_queue", []))),
        "expiry_lateness_ms": _percentiles(_first(results.get("expiry_lateness", []))),
        "retry_threshold": retry_threshold,
        "top": {
            "queues": top_rows("by_queue"),
            "exchanges": top_rows("by_exchange"),
            "routing_keys": top_rows("by_routing_key"),
            "message_ids": top_rows("top_message_ids"),
            "content_types": top_rows("top_content_types"),
            "retry_loops": top_rows("retry_loops"),
            "time_in_queue_by_queue": top_rows("time_in_queue_by_queue"),
            "header_values": top_rows("top_header_values"),
        },
    }


def _cell(name: str, value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if name in ("first_ms", "last_ms"):
        return str(_iso(value))  # a moment: shown as UTC time (the column is renamed, see _header)
    if name.endswith("_ms") and isinstance(value, int | float):
        return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"  # a duration, in ms
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3f}"
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text if text else '`""`'


def _header(name: str) -> str:
    return {"first_ms": "first (UTC)", "last_ms": "last (UTC)"}.get(name, name)


def _table(rows: Rows, limit: int | None = None, total: int | None = None) -> str:
    if not rows:
        return "_none_\n"
    names = list(rows[0])
    lines = ["| " + " | ".join(_header(n) for n in names) + " |", "|" + "---|" * len(names)]
    shown = rows[:limit]
    for row in shown:
        lines.append("| " + " | ".join(_cell(n, row[n]) for n in names) + " |")
    more = max(len(rows), total or 0) - len(shown)
    if more > 0:
        lines.append(f"\n_{more:,} more rows in the CSV/Parquet table._")
    return "\n".join(lines) + "\n"


_CHART_AFTER = {
    "by_queue": ("deaths_by_queue.png", "Deaths by queue"),
    "by_hour": ("deaths_per_hour.png", "Deaths over time by reason"),
    "time_in_queue_histogram": ("time_in_queue.png", "Time in queue"),
}


def _section(name: str, rows: Rows, top: int) -> tuple[str | None, int | None]:
    """How report.md and report.html show a table: a note instead of it (or None), and how many of
    its rows (None: all)."""
    if name == "by_hour" and len(rows) > 48:
        return f"{len(rows)} hour/reason rows: see the chart and `tables/by_hour.csv`.", None
    if name == "top_message_ids" and rows and all(row.get("count") == 1 for row in rows):
        return (
            "Every message id was dead-lettered once: no id stands out (see Retry loops for the "
            "most-retried messages)."
        ), None
    return None, None if name in ("by_reason", "by_outcome", "time_in_queue_histogram") else top


_TREND_NOTE = (
    "_Shares are of all dead letters; a cause is a queue, a reason and the limit behind it. Trend: the "
    "cause's deaths per hour in the last quarter of the archive's time span (from {since}) against the "
    "three quarters before: rising at 1.5 times or more, falling at 2/3 or less, steady in between, new "
    "when it only appears in the last quarter; none with fewer than 20 deaths or a span under 10 minutes._"
)


def markdown(
    summary: Mapping[str, Any],
    results: Mapping[str, Rows],
    titles: Mapping[str, str],
    chart_files: Mapping[str, str],
    top: int = 20,
) -> str:
    """report.md: the input accounting, then every table (long ones cut to ``--top`` rows)."""
    inp = summary["input"]
    out = [
        "# Dead-letter report",
        "",
        "## Findings",
        "",
        *[f"- {line}" for line in summary.get("findings", [])],
        "",
        _TREND_NOTE.format(since=summary.get("recent_from") or "–"),
        "",
        "## Archive",
        "",
        f"Archive `{summary['archive']}` ({inp.get('format')}), generated {summary['generated_at']}.",
        "",
        f"- **{summary['records']:,}** dead letters from {summary['first_death'] or '–'} to "
        f"{summary['last_death'] or '–'} (UTC), {summary['queues']} queues in {summary['vhosts']} vhosts",
        f"- {inp.get('lines', 0):,} lines read, **{inp.get('bad', 0):,} skipped**: "
        f"{inp.get('corrupt', 0):,} corrupt, {inp.get('unsupported', 0):,} unsupported schema, "
        f"{inp.get('invalid', 0):,} missing required fields",
        "- time in queue = death time − enqueue time; expiry lateness = death time − (enqueue time + the "
        "message's own `expiration`), only where the message had one; `early` = killed before its own "
        "expiration by a shorter queue TTL (schema-2 records name that TTL as their limit: see Deaths by "
        "limit)",
        "",
    ]
    if inp.get("bad_files"):
        out += ["## Skipped lines", "", _table(inp["bad_files"], 20)]
    for name, rows in results.items():
        if name == "overview":
            continue
        out += [f"## {titles.get(name, name)}", ""]
        chart = _CHART_AFTER.get(name)
        if chart and chart[0] in chart_files:
            out += [f"![{chart[1]}]({chart_files[chart[0]]})", ""]
        note, limit = _section(name, rows, top)
        if note is not None:
            out += [f"_{note}_", ""]
            continue
        out.append(_table(rows, limit, summary.get("table_rows", {}).get(name)))
    return "\n".join(out)


_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}img{max-width:100%}
.muted{color:#777}
"""


def html(
    summary: Mapping[str, Any],
    results: Mapping[str, Rows],
    titles: Mapping[str, str],
    pngs: Mapping[str, bytes],
    top: int = 20,
) -> str:
    """report.html: report.md's content in one self-contained file (tables, charts inlined as data URIs)."""
    import base64
    from html import escape

    inp = summary["input"]

    def table(rows: Rows, limit: int | None = None, total: int | None = None) -> str:
        if not rows:
            return "<p class=muted>none</p>"
        names = list(rows[0])
        head = "".join(f"<th>{escape(_header(n))}</th>" for n in names)
        body = []
        for row in rows[:limit]:
            cells = []
            for n in names:
                value = row[n]
                numeric = isinstance(value, int | float) and not isinstance(value, bool)
                cells.append(f"<td{' class=n' if numeric else ''}>{escape(_cell(n, value))}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        more = max(len(rows), total or 0) - len(rows[:limit])
        tail = f"<p class=muted>{more:,} more rows in the CSV/Parquet table.</p>" if more > 0 else ""
        return f"<table><tr>{head}</tr>{''.join(body)}</table>{tail}"

    def image(name: str, alt: str) -> str:
        data = pngs.get(name)
        if not data:
            return ""
        encoded = base64.b64encode(data).decode()
        return f'<p><img alt="{escape(alt)}" src="data:image/png;base64,{encoded}"></p>'

    since = summary.get("recent_from") or "–"
    parts = [
        "<!doctype html><html><head><meta charset=utf-8><title>Dead-letter report</title>",
        f"<style>{_STYLE}</style></head><body><h1>Dead-letter report</h1>",
        "<h2>Findings</h2><ul>",
        *[f"<li>{escape(line)}</li>" for line in summary.get("findings", [])],
        "</ul>",
        f"<p class=muted>{escape(_TREND_NOTE.format(since=since).strip('_'))}</p>",
        "<h2>Archive</h2>",
        f"<p>Archive <code>{escape(str(summary['archive']))}</code> ({escape(str(inp.get('format')))}), "
        f"generated {escape(str(summary['generated_at']))}.</p><ul>",
        f"<li><b>{summary['records']:,}</b> dead letters from "
        f"{escape(str(summary['first_death'] or '–'))} to "
        f"{escape(str(summary['last_death'] or '–'))} (UTC), {summary['queues']} queues in "
        f"{summary['vhosts']} vhosts</li>",
        f"<li>{inp.get('lines', 0):,} lines read, <b>{inp.get('bad', 0):,} skipped</b>: "
        f"{inp.get('corrupt', 0):,} corrupt, {inp.get('unsupported', 0):,} unsupported schema, "
        f"{inp.get('invalid', 0):,} missing required fields</li></ul>",
    ]
    if inp.get("bad_files"):
        parts += ["<h2>Skipped lines</h2>", table(inp["bad_files"], 20)]
    for name, rows in results.items():
        if name == "overview":
            continue
        parts.append(f"<h2>{escape(titles.get(name, name))}</h2>")
        chart = _CHART_AFTER.get(name)
        if chart:
            parts.append(image(chart[0], chart[1]))
        note, limit = _section(name, rows, top)
        if note is not None:
            parts.append(f"<p class=muted>{escape(note.replace('`', ''))}</p>")
            continue
        parts.append(table(rows, limit, summary.get("table_rows", {}).get(name)))
    parts.append("</body></html>\n")
    return "".join(parts)


def console(summary: Mapping[str, Any], out_dir: str) -> str:
    """A few lines for the terminal."""
    tiq = summary.get("time_in_queue_ms", {})
    reasons = ", ".join(f"{k} {v:,}" for k, v in summary.get("by_reason", {}).items()) or "none"
    outcome = ", ".join(f"{k} {v:,}" for k, v in summary.get("by_outcome", {}).items()) or "none"
    queues = ", ".join(f"{q['queue']} ({q['count']:,})" for q in summary["top"]["queues"][:5]) or "none"
    loops = summary.get("table_rows", {}).get("retry_loops", len(summary["top"]["retry_loops"]))
    lines = [
        *[f"finding:      {line}" for line in summary.get("findings", [])],
        f"dead letters: {summary['records']:,} ({summary['bad_lines']:,} lines skipped)"
        f"  {summary['first_death'] or '–'} .. {summary['last_death'] or '–'}",
        f"by reason:    {reasons}",
        f"outcome:      {outcome}",
        f"top queues:   {queues}",
        f"time in queue p50 {format_ms(tiq.get('p50_ms'))}, p99 {format_ms(tiq.get('p99_ms'))}, "
        f"max {format_ms(tiq.get('max_ms'))}",
        f"retry loops:  {loops:,} (queue, message id) with death_count >= {summary['retry_threshold']}",
        f"report:       {out_dir.rstrip('/')}/report.md",
    ]
    return "\n".join(lines) + "\n"


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


_BUCKET_NAMES = {60_000: "minute", 3_600_000: "hour", 86_400_000: "day"}


def _hours_as_timeline(hours: Rows) -> tuple[Rows, int]:
    """``by_hour`` rows as timeline points (when no finer timeline was computed)."""
    points = [
        {
            "bucket": int(
                datetime.datetime.strptime(row["hour"], "%Y-%m-%dT%H:00Z")
                .replace(tzinfo=datetime.UTC)
                .timestamp()
                * 1000
            ),
            "reason": row["reason"],
            "count": row["count"],
        }
        for row in hours
    ]
    return points, 3_600_000


def _timeline_chart(plt: Any, points: Rows, bucket_ms: int, colours: Mapping[str, str]) -> bytes:
    """Dead letters per minute, hour or day (whichever the time range asks for), stacked by reason."""
    per_reason: dict[str, dict[int, int]] = {}
    for row in points:
        per_reason.setdefault(row["reason"], {})[row["bucket"]] = row["count"]
    first = min(min(v) for v in per_reason.values())
    last = max(max(v) for v in per_reason.values())
    span = (last - first) // bucket_ms + 1
    xs = [first + i * bucket_ms for i in range(span)]
    fig, ax = plt.subplots(figsize=(11, 4))
    bottom = [0] * span
    ordered = [r for r in REASONS if r in per_reason] + sorted(set(per_reason) - set(REASONS))
    for reason in ordered:
        heights = [per_reason[reason].get(x, 0) for x in xs]
        ax.bar(
            range(span),
            heights,
            width=1.0,
            bottom=bottom,
            align="edge",
            label=reason,
            color=colours.get(reason),
        )
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    unit = _BUCKET_NAMES.get(bucket_ms, f"{bucket_ms} ms")
    fmt = {"minute": "%H:%M", "hour": "%m-%d %H:00", "day": "%Y-%m-%d"}.get(unit, "%m-%d %H:%M")
    step = max(1, span // 10)
    ticks = list(range(0, span, step))
    labels = [datetime.datetime.fromtimestamp(xs[i] / 1000, tz=datetime.UTC).strftime(fmt) for i in ticks]
    ax.set_xticks(ticks, labels, rotation=30, ha="right")
    day = datetime.datetime.fromtimestamp(first / 1000, tz=datetime.UTC).strftime("%Y-%m-%d")
    when = f" on {day}" if unit == "minute" else ""
    ax.set_title(f"Dead letters per {unit} (UTC{when}) by reason")
    ax.set_ylabel(f"dead letters per {unit}")
    ax.legend(loc="upper left", fontsize="small")
    png = _png(fig)
    plt.close(fig)
    return png


def charts(
    results: Mapping[str, Rows], top: int = 20, timeline: tuple[Rows, int] | None = None
) -> dict[str, bytes]:
    """PNG bytes by file name: deaths over time stacked by reason (``deaths_per_hour.png``; per
    minute, hour or day from ``timeline``'s points and bucket, else per hour), deaths by queue, and
    the time-in-queue histogram."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no charts (pip install 'ottermq[spark]')")
        return {}
    out: dict[str, bytes] = {}
    colours = {"expired": "#f2a541", "rejected": "#d1495b", "maxlen": "#00798c", "delivery_limit": "#30638e"}

    points, bucket_ms = timeline if timeline is not None else _hours_as_timeline(results.get("by_hour", []))
    if points:
        out["deaths_per_hour.png"] = _timeline_chart(plt, points, bucket_ms, colours)

    queues = results.get("by_queue", [])[:top]
    if queues:
        fig, ax = plt.subplots(figsize=(9, 0.35 * len(queues) + 1.5))
        labels = [q["queue"] if q["vhost"] == "/" else f"{q['vhost']}/{q['queue']}" for q in queues][::-1]
        left = [0] * len(queues)
        for reason in REASONS:
            widths = [q.get(reason) or 0 for q in queues][::-1]
            ax.barh(labels, widths, left=left, label=reason, color=colours.get(reason))
            left = [a + b for a, b in zip(left, widths, strict=True)]
        ax.set_title(f"Dead letters by queue (top {len(queues)})")
        ax.set_xlabel("dead letters")
        ax.legend(loc="lower right", fontsize="small")
        out["deaths_by_queue.png"] = _png(fig)
        plt.close(fig)

    histogram = results.get("time_in_queue_histogram", [])
    if histogram and any(row["count"] for row in histogram):
        fig, ax = plt.subplots(figsize=(9, 4))
        ax.bar([row["label"] for row in histogram], [row["count"] for row in histogram], color="#30638e")
        ax.set_title("Time in queue before death")
        ax.set_ylabel("dead letters")
        out["time_in_queue.png"] = _png(fig)
        plt.close(fig)
    return out
