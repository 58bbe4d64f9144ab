"""The report's tables from two aggregations instead of one Spark job each (issue 20).

:mod:`ottermq.spark_jobs.report` defines every table as a small ``DataFrame -> DataFrame`` function;
run one by one they cost a scan, a plan and a job each. Here the count tables come from one
``GROUP BY GROUPING SETS`` over the cached records and the percentile tables from a second one;
the rows are split per table and ordered on the driver exactly as the reference functions order
them (Spark's ordering: ascending puts nulls first, descending puts them last; strings by code
point). ``tests/spark/test_fused.py`` checks that both give the same rows on an archive with every
record shape.

Tables covered: ``overview``, ``by_reason``, ``by_outcome``, ``by_queue``, ``by_policy``,
``by_exchange``, ``by_hour``, ``top_content_types``, ``time_in_queue``, ``time_in_queue_by_queue``,
``time_in_queue_histogram``, ``expiry_lateness``, ``expiry_lateness_by_queue``. The others
(routing keys, retry loops, top ids and header values) stay one job each: they explode or filter.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from functools import cmp_to_key
from typing import Any

from ottermq.spark_jobs.schema import REASONS, hour_label
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

__all__ = ["FUSED_TABLES", "fused_count_rows", "fused_percentile_rows", "fused_rows", "timeline_bucket"]

PERCENTILES = (0.5, 0.9, 0.99)
ACCURACY = 10_000

FUSED_TABLES = frozenset(
    {
        "overview",
        "by_reason",
        "by_outcome",
        "by_queue",
        "by_policy",
        "by_exchange",
        "by_hour",
        "top_content_types",
        "time_in_queue",
        "time_in_queue_by_queue",
        "time_in_queue_histogram",
        "expiry_lateness",
        "expiry_lateness_by_queue",
    }
)

# grouping sets of the count aggregation: name -> its columns
_COUNT_SETS: dict[str, tuple[str, ...]] = {
    "by_reason": ("reason",),
    "by_outcome": ("outcome", "drop_reason"),
    "by_queue": ("vhost", "queue"),
    "by_policy": ("vhost", "policy"),
    "by_exchange": ("vhost", "exchange"),
    "by_hour": ("hour", "reason"),
    "top_content_types": ("content_type",),
    "overview": (),
    "_timeline": ("bucket", "reason"),
}
_COUNT_COLUMNS = (
    "reason",
    "outcome",
    "drop_reason",
    "vhost",
    "queue",
    "policy",
    "exchange",
    "hour",
    "content_type",
    "bucket",
)
MINUTE_MS, HOUR_MS, DAY_MS = 60_000, 3_600_000, 86_400_000


def timeline_bucket(first_ms: int | None, last_ms: int | None) -> int:
    """The deaths-over-time chart's bucket for a time range: minutes up to 6 hours, hours up to 10
    days, days beyond (so a 10-minute incident shows as one, and a year stays a few hundred bars)."""
    span = (last_ms - first_ms) if first_ms is not None and last_ms is not None else 0
    if span <= 6 * HOUR_MS:
        return MINUTE_MS
    if span <= 10 * DAY_MS:
        return HOUR_MS
    return DAY_MS


def _gid(columns: Sequence[str], present: Sequence[str]) -> int:
    """Spark's ``grouping_id()`` for a set: bit (n-1-i) is 1 when column i is aggregated away."""
    n = len(columns)
    return sum(1 << (n - 1 - i) for i, c in enumerate(columns) if c not in present)


def _count_aggregation(df: DataFrame, bucket_ms: int) -> DataFrame:
    """Two steps: one plain aggregation of the records by every column a count table groups by (a
    few thousand groups at most for an archive), then the grouping sets over that small result, so
    the grouping sets' row expansion never touches the records themselves."""
    fine = df.groupBy(
        "reason",
        "outcome",
        "drop_reason",
        "vhost",
        "queue",
        "policy",
        "exchange",
        hour_label(F.col("time_ms")).alias("hour"),
        "content_type",
        (F.floor(F.col("time_ms") / bucket_ms) * bucket_ms).cast("long").alias("bucket"),
    ).agg(
        F.count(F.lit(1)).alias("n"),
        F.sum("body_size").alias("bytes"),
        F.min("time_ms").alias("first"),
        F.max("time_ms").alias("last"),
    )
    sets = ", ".join("(" + ", ".join(cols) + ")" for cols in _COUNT_SETS.values())
    reason_sums = ", ".join(
        f"CAST(sum(CASE WHEN reason = '{r}' THEN n ELSE 0 END) AS BIGINT) AS `{r}`" for r in REASONS
    )
    view = f"_ottermq_fused_{uuid.uuid4().hex}"  # no DataFrame API for grouping sets before Spark 4
    fine.createOrReplaceTempView(view)
    return fine.sparkSession.sql(
        f"SELECT {', '.join(_COUNT_COLUMNS)}, grouping_id() AS gid, CAST(sum(n) AS BIGINT) AS count, "
        f"{reason_sums}, "
        "CAST(sum(CASE WHEN outcome = 'dropped' THEN n ELSE 0 END) AS BIGINT) AS dropped, "
        "CAST(sum(CASE WHEN outcome = 'routed' THEN n ELSE 0 END) AS BIGINT) AS routed, "
        "sum(bytes) AS body_bytes, min(first) AS first_ms, max(last) AS last_ms "
        f"FROM {view} GROUP BY {', '.join(_COUNT_COLUMNS)} GROUPING SETS ({sets})"
    )


def _percentiles(value: Column) -> list[Column]:
    approx = F.percentile_approx(value, list(PERCENTILES), ACCURACY)
    return [approx[i] for i in range(len(PERCENTILES))]


Buckets = Sequence[tuple[str, int | None, int | None]]


def _percentile_aggregation(df: DataFrame, buckets: Buckets) -> DataFrame:
    tiq = F.when(F.col("enqueued_ms").isNotNull(), F.col("time_ms") - F.col("enqueued_ms"))
    expiration = F.expr("try_cast(original_expiration AS BIGINT)")
    lateness = F.when(F.col("reason") == "expired", F.col("time_ms") - (F.col("enqueued_ms") + expiration))
    projected = df.select(
        "vhost",
        "queue",
        tiq.alias("tiq"),
        lateness.alias("lateness"),
        (F.col("reason") == "expired").cast("int").alias("expired"),
    )
    on_time = F.when(F.col("lateness") >= 0, F.col("lateness"))
    value = F.col("tiq")
    histogram = []
    for i, (_, lower, upper) in enumerate(buckets):
        cond = value.isNotNull()
        if lower is not None:
            cond = cond & (value >= lower)
        if upper is not None:
            cond = cond & (value < upper)
        histogram.append(F.count(F.when(cond, 1)).alias(f"b{i}"))
    aggs = [
        F.count("tiq").alias("tiq_count"),
        F.array(*_percentiles(F.col("tiq"))).alias("tiq_p"),
        F.max("tiq").alias("tiq_max"),
        F.sum("expired").cast("long").alias("expired"),
        F.count("lateness").alias("measurable"),
        F.sum(F.when(F.col("expired") == 1, F.when(F.col("lateness") < 0, 1).otherwise(0)))
        .cast("long")
        .alias("early"),
        F.array(*_percentiles(on_time)).alias("late_p"),
        F.max(on_time).alias("late_max"),
        *histogram,
    ]
    # per queue and overall, as two aggregations in one job (a rollup would also expand every row
    # for its (vhost) set)
    per_queue = projected.groupBy("vhost", "queue").agg(F.lit(0).cast("long").alias("gid"), *aggs)
    nothing = F.lit(None).cast("string")
    overall = projected.agg(
        nothing.alias("vhost"), nothing.alias("queue"), F.lit(3).cast("long").alias("gid"), *aggs
    )
    return per_queue.unionByName(overall)


# -- ordering like Spark's orderBy --------------------------------------------------------------------
Key = tuple[str, bool, bool]  # (column, descending, nulls first)


def _asc(name: str) -> Key:
    return (name, False, True)


def _desc(name: str) -> Key:
    return (name, True, False)


def _asc_nulls_last(name: str) -> Key:
    return (name, False, False)


def _ordered(rows: list[dict[str, Any]], keys: Sequence[Key]) -> list[dict[str, Any]]:
    def compare(a: dict[str, Any], b: dict[str, Any]) -> int:
        for name, descending, nulls_first in keys:
            x, y = a[name], b[name]
            if x == y:
                continue
            if x is None or y is None:
                return (-1 if x is None else 1) * (1 if nulls_first else -1)
            result = -1 if x < y else 1
            return -result if descending else result
        return 0

    return sorted(rows, key=cmp_to_key(compare))


def _count_tables(rows: list[Any], top: int) -> dict[str, list[dict[str, Any]]]:
    by_gid: dict[int, list[Any]] = {}
    for row in rows:
        by_gid.setdefault(row["gid"], []).append(row)
    out: dict[str, list[dict[str, Any]]] = {}

    def rows_of(name: str) -> list[Any]:
        return by_gid.get(_gid(_COUNT_COLUMNS, _COUNT_SETS[name]), [])

    def pick(name: str, *fields: str) -> list[dict[str, Any]]:
        return [{f: r[f] for f in fields} for r in rows_of(name)]

    out["by_reason"] = _ordered(pick("by_reason", "reason", "count"), [_desc("count"), _asc("reason")])
    out["by_outcome"] = _ordered(
        pick("by_outcome", "outcome", "drop_reason", "count"),
        [_desc("count"), _asc("outcome"), _asc("drop_reason")],
    )
    out["by_queue"] = _ordered(
        pick("by_queue", "vhost", "queue", "count", *REASONS, "dropped"),
        [_desc("count"), _asc("vhost"), _asc("queue")],
    )
    out["by_policy"] = _ordered(
        pick("by_policy", "vhost", "policy", "count", *REASONS),
        [_desc("count"), _asc("vhost"), _asc("policy")],
    )
    out["by_exchange"] = _ordered(
        pick("by_exchange", "vhost", "exchange", "count"), [_desc("count"), _asc("vhost"), _asc("exchange")]
    )
    out["by_hour"] = _ordered(pick("by_hour", "hour", "reason", "count"), [_asc("hour"), _asc("reason")])
    out["_timeline"] = _ordered(
        pick("_timeline", "bucket", "reason", "count"), [_asc("bucket"), _asc("reason")]
    )
    content = [
        {"content_type": r["content_type"], "count": r["count"], "body_bytes": r["body_bytes"]}
        for r in rows_of("top_content_types")
    ]
    out["top_content_types"] = _ordered(content, [_desc("count"), _asc_nulls_last("content_type")])[:top]
    (total,) = rows_of("overview") or [None]
    queues = out["by_queue"]
    out["overview"] = [
        {
            "records": total["count"] if total is not None else 0,
            "first_ms": total["first_ms"] if total is not None else None,
            "last_ms": total["last_ms"] if total is not None else None,
            "vhosts": len({r["vhost"] for r in queues if r["vhost"] is not None}),
            "queues": sum(1 for r in queues if r["vhost"] is not None and r["queue"] is not None),
            "routed": total["routed"] if total is not None else None,
            "dropped": total["dropped"] if total is not None else None,
            "body_bytes": (total["body_bytes"] if total is not None else None) or 0,
        }
    ]
    return out


def _percentile_tables(rows: list[Any], buckets: Buckets) -> dict[str, list[dict[str, Any]]]:
    names = [f"p{round(p * 100)}_ms" for p in PERCENTILES]
    overall = next((r for r in rows if r["gid"] == 3), None)
    per_queue = [r for r in rows if r["gid"] == 0]

    def tiq(r: Any, by: dict[str, Any]) -> dict[str, Any]:
        p = r["tiq_p"] if r is not None and r["tiq_count"] else [None] * len(names)
        return {
            **by,
            "count": r["tiq_count"] if r is not None else 0,
            **dict(zip(names, p, strict=True)),
            "max_ms": r["tiq_max"] if r is not None else None,
        }

    def late(r: Any, by: dict[str, Any]) -> dict[str, Any]:
        p = r["late_p"] if r is not None and r["late_p"] is not None else [None] * len(names)
        return {
            **by,
            "count": r["expired"] if r is not None and r["expired"] is not None else 0,
            "measurable": r["measurable"] if r is not None else 0,
            "early": (r["early"] if r is not None else None),
            **dict(zip(names, p, strict=True)),
            "max_ms": r["late_max"] if r is not None else None,
        }

    by_key = [_desc("count"), _asc("vhost"), _asc("queue")]
    out = {
        "time_in_queue": [tiq(overall, {})],
        "time_in_queue_by_queue": _ordered(
            [tiq(r, {"vhost": r["vhost"], "queue": r["queue"]}) for r in per_queue if r["tiq_count"]], by_key
        ),
        "expiry_lateness": [late(overall, {})],
        "expiry_lateness_by_queue": _ordered(
            [late(r, {"vhost": r["vhost"], "queue": r["queue"]}) for r in per_queue if r["expired"]], by_key
        ),
        "time_in_queue_histogram": [
            {
                "bucket": i,
                "label": label,
                "lower_ms": lower,
                "upper_ms": upper,
                "count": overall[f"b{i}"] if overall is not None else 0,
            }
            for i, (label, lower, upper) in enumerate(buckets)
        ],
    }
    return out


def fused_count_rows(
    records: DataFrame, top: int, bucket_ms: int = HOUR_MS
) -> dict[str, list[dict[str, Any]]]:
    """The count tables' rows (one Spark job), plus ``_timeline`` (``bucket`` start ms, reason, count;
    not a report table: the deaths-over-time chart's data, ``bucket_ms`` wide)."""
    return _count_tables(_count_aggregation(records, bucket_ms).collect(), top)


def fused_percentile_rows(records: DataFrame, buckets: Buckets) -> dict[str, list[dict[str, Any]]]:
    """The time-in-queue and lateness tables' rows (one Spark job)."""
    return _percentile_tables(_percentile_aggregation(records, buckets).collect(), buckets)


def fused_rows(records: DataFrame, *, top: int, buckets: Buckets) -> dict[str, list[dict[str, Any]]]:
    """Every covered table's rows (dicts, in the reference functions' order and limits)."""
    return {**fused_count_rows(records, top), **fused_percentile_rows(records, buckets)}
