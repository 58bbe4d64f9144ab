"""The report's tables from a few aggregations instead of one Spark job each.

:mod:`ottermq.spark_jobs.report_tables` defines every table as a small ``DataFrame -> DataFrame``
function; run one by one they cost a scan, a plan and a job each. Here the count tables come from one
``GROUP BY GROUPING SETS`` over the cached records and the percentile tables from a second one;
the rows are split per table and ordered on the driver exactly as the reference functions order
them (:mod:`ottermq.spark_jobs.ordering`: Spark's ordering). ``tests/spark/test_fused.py`` checks
that both give the same rows on an archive with every record shape.

Tables covered: ``overview``, ``by_reason``, ``by_outcome``, ``by_queue``, ``by_policy``,
``by_limit``, ``by_exchange``, ``by_hour``, ``top_content_types``, ``time_in_queue``,
``time_in_queue_by_queue``, ``time_in_queue_histogram``, ``expiry_lateness``,
``expiry_lateness_by_queue``; the count aggregation also gives the findings' causes (``_causes``:
deaths per queue, reason and limit, before and after a cut in time) and the timeline chart's points
(``_timeline``). ``by_routing_key`` counts per routing-key *list* and explodes the few lists on the
driver. ``top_message_ids`` and ``retry_loops`` (:data:`ID_TABLES`) come from their own
aggregations in :mod:`ottermq.spark_jobs.fused_ids`; :func:`fused_rows` gives every covered table.
Header values stay one job: they parse every record's headers.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any

from ottermq.spark_jobs.fused_ids import fused_id_rows
from ottermq.spark_jobs.ordering import asc, asc_nulls_last, desc, ordered
from ottermq.spark_jobs.schema import REASONS, hour_label
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

__all__ = [
    "FUSED_TABLES",
    "ID_TABLES",
    "TABLE_SCHEMAS",
    "fused_count_rows",
    "fused_digest_rows",
    "fused_percentile_rows",
    "fused_routing_rows",
    "fused_rows",
    "percentile_tables",
    "timeline_bucket",
    "trend_cut",
]

PERCENTILES = (0.5, 0.9, 0.99)
ACCURACY = 10_000

FUSED_TABLES = frozenset(
    {
        "overview",
        "by_reason",
        "by_outcome",
        "by_queue",
        "by_policy",
        "by_limit",
        "by_exchange",
        "by_routing_key",
        "by_hour",
        "top_content_types",
        "time_in_queue",
        "time_in_queue_by_queue",
        "time_in_queue_histogram",
        "expiry_lateness",
        "expiry_lateness_by_queue",
    }
)
ID_TABLES = frozenset({"retry_loops", "top_message_ids"})


def _schema(spec: str) -> StructType:
    """``"name type, name type!"`` (``!``: not nullable) as a StructType."""
    types = {"long": LongType(), "string": StringType(), "int": IntegerType()}
    fields = []
    for item in spec.split(","):
        name, kind = item.split()
        fields.append(StructField(name, types[kind.rstrip("!")], not kind.endswith("!")))
    return StructType(fields)


_REASON_COUNTS = ", ".join(f"{r} long" for r in REASONS)
_PERCENTILES = "p50_ms long, p90_ms long, p99_ms long, max_ms long"
#: The schemas of the reference functions' results for the tables built here (what Spark's analysis of
#: them gives, nullability included: ``tests/spark/test_fused.py`` checks), so that writing the rows
#: does not need the reference plans.
TABLE_SCHEMAS: dict[str, StructType] = {
    "overview": _schema(
        "records long!, first_ms long, last_ms long, vhosts long!, queues long!, routed long, dropped long, "
        "body_bytes long!"
    ),
    "by_reason": _schema("reason string, count long!"),
    "by_limit": _schema("cause string, limit_value long, limit_source string, reason string, count long!"),
    "by_outcome": _schema("outcome string, drop_reason string, count long!"),
    "by_queue": _schema(f"vhost string, queue string, count long!, {_REASON_COUNTS}, dropped long"),
    "by_policy": _schema(f"vhost string, policy string, count long!, {_REASON_COUNTS}"),
    "by_exchange": _schema("vhost string, exchange string, count long!"),
    "by_routing_key": _schema("vhost string, exchange string, routing_key string, count long!"),
    "by_hour": _schema("hour string, reason string, count long!"),
    "time_in_queue": _schema(f"count long!, {_PERCENTILES}"),
    "time_in_queue_by_queue": _schema(f"vhost string, queue string, count long!, {_PERCENTILES}"),
    "time_in_queue_histogram": _schema(
        "bucket int!, label string!, lower_ms long, upper_ms long, count long!"
    ),
    "expiry_lateness": _schema(f"count long!, measurable long!, early long, {_PERCENTILES}"),
    "expiry_lateness_by_queue": _schema(
        f"vhost string, queue string, count long!, measurable long!, early long, {_PERCENTILES}"
    ),
    "top_content_types": _schema("content_type string, count long!, body_bytes long"),
}

# grouping sets of the count aggregation: name -> its columns
_COUNT_SETS: dict[str, tuple[str, ...]] = {
    "by_reason": ("reason",),
    "by_outcome": ("outcome", "drop_reason"),
    "by_queue": ("vhost", "queue"),
    "by_policy": ("vhost", "policy"),
    "by_limit": ("limit", "limit_value", "limit_source", "reason"),
    "by_exchange": ("vhost", "exchange"),
    "by_hour": ("hour", "reason"),
    "top_content_types": ("content_type",),
    "overview": (),
    "_timeline": ("bucket", "reason"),
    "_causes": ("vhost", "queue", "reason", "limit", "limit_value", "limit_source", "policy", "recent"),
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
    "limit",
    "limit_value",
    "limit_source",
    "recent",
)
MINUTE_MS, HOUR_MS, DAY_MS = 60_000, 3_600_000, 86_400_000
Buckets = Sequence[tuple[str, int | None, int | None]]


def timeline_bucket(first_ms: int | None, last_ms: int | None) -> int:
    """The deaths-over-time chart's bucket for a time range: minutes up to 6 hours, hours up to 10
    days, days beyond (so a 10-minute incident shows as one, and a year stays a few hundred bars)."""
    span = (last_ms - first_ms) if first_ms is not None and last_ms is not None else 0
    if span <= 6 * HOUR_MS:
        return MINUTE_MS
    if span <= 10 * DAY_MS:
        return HOUR_MS
    return DAY_MS


def trend_cut(first_ms: int | None, last_ms: int | None) -> int | None:
    """Where the findings' *recent* part of an archive starts: the last quarter of its time span."""
    if first_ms is None or last_ms is None:
        return None
    return first_ms + (last_ms - first_ms) * 3 // 4


def _gid(columns: Sequence[str], present: Sequence[str]) -> int:
    """Spark's ``grouping_id()`` for a set: bit (n-1-i) is 1 when column i is aggregated away."""
    n = len(columns)
    return sum(1 << (n - 1 - i) for i, c in enumerate(columns) if c not in present)


def _count_aggregation(df: DataFrame, bucket_ms: int, cut_ms: int | None, buckets: Buckets) -> DataFrame:
    """Two steps: one plain aggregation of the records by every column a count table groups by (a
    few thousand groups at most for an archive), then the grouping sets over that small result, so
    the grouping sets' row expansion never touches the records themselves."""
    recent = F.lit(False) if cut_ms is None else F.col("time_ms") >= F.lit(cut_ms)
    fine = df.groupBy(
        "reason",
        "outcome",
        "drop_reason",
        "vhost",
        "queue",
        "policy",
        "exchange",
        (F.floor(F.col("time_ms") / HOUR_MS) * HOUR_MS).cast("long").alias("hour_ms"),  # labelled below
        "content_type",
        (F.floor(F.col("time_ms") / bucket_ms) * bucket_ms).cast("long").alias("bucket"),
        "limit",
        "limit_value",
        "limit_source",
        recent.alias("recent"),
    ).agg(
        F.count(F.lit(1)).alias("n"),
        F.sum("body_size").alias("bytes"),
        F.min("time_ms").alias("first"),
        F.max("time_ms").alias("last"),
        *_measure_aggregates(buckets),
    )
    sets = ", ".join("(" + ", ".join(f"`{c}`" for c in cols) + ")" for cols in _COUNT_SETS.values())
    reason_sums = ", ".join(
        f"CAST(sum(CASE WHEN reason = '{r}' THEN n ELSE 0 END) AS BIGINT) AS `{r}`" for r in REASONS
    )
    columns = ", ".join(f"`{c}`" for c in _COUNT_COLUMNS)
    # the hour's label from the few fine rows, not from every record (the same label: it depends on
    # the hour alone)
    fine = fine.withColumn("hour", hour_label(F.col("hour_ms"))).drop("hour_ms")
    view = f"_ottermq_fused_{uuid.uuid4().hex}"  # no DataFrame API for grouping sets before Spark 4
    fine.createOrReplaceTempView(view)
    try:
        return fine.sparkSession.sql(
            f"SELECT {columns}, grouping_id() AS gid, CAST(sum(n) AS BIGINT) AS count, "
            f"{reason_sums}, "
            "CAST(sum(CASE WHEN outcome = 'dropped' THEN n ELSE 0 END) AS BIGINT) AS dropped, "
            "CAST(sum(CASE WHEN outcome = 'routed' THEN n ELSE 0 END) AS BIGINT) AS routed, "
            "sum(bytes) AS body_bytes, min(first) AS first_ms, max(last) AS last_ms, "
            "CAST(sum(_tiq_n) AS BIGINT) AS tiq_count, max(_tiq_max) AS tiq_max, "
            "CAST(sum(_late_n) AS BIGINT) AS measurable, CAST(sum(_early_n) AS BIGINT) AS early, "
            "max(_late_max) AS late_max, "
            + ", ".join(f"CAST(sum(_b{i}) AS BIGINT) AS b{i}" for i in range(len(buckets)))
            + f" FROM {view} GROUP BY {columns} GROUPING SETS ({sets})"
        )
    finally:
        fine.sparkSession.catalog.dropTempView(view)


def _percentiles(value: Column) -> list[Column]:
    approx = F.percentile_approx(value, list(PERCENTILES), ACCURACY)
    return [approx[i] for i in range(len(PERCENTILES))]


def _measures() -> tuple[Column, Column, Column]:
    """Time in queue, expiry lateness (expired only) and on-time lateness (>= 0) of a record."""
    tiq = F.when(F.col("enqueued_ms").isNotNull(), F.col("time_ms") - F.col("enqueued_ms"))
    expiration = F.expr("try_cast(original_expiration AS BIGINT)")
    lateness = F.when(F.col("reason") == "expired", F.col("time_ms") - (F.col("enqueued_ms") + expiration))
    return tiq, lateness, F.when(lateness >= 0, lateness)


def _measure_aggregates(buckets: Buckets) -> list[Column]:
    """The percentile tables' exact figures, per fine row of the count aggregation (summed up there)."""
    tiq, lateness, on_time = _measures()
    histogram = []
    for i, (_, lower, upper) in enumerate(buckets):
        cond = tiq.isNotNull()
        if lower is not None:
            cond = cond & (tiq >= lower)
        if upper is not None:
            cond = cond & (tiq < upper)
        histogram.append(F.count(F.when(cond, 1)).alias(f"_b{i}"))
    return [
        F.count(tiq).alias("_tiq_n"),
        F.max(tiq).alias("_tiq_max"),
        F.count(lateness).alias("_late_n"),
        F.count(F.when(lateness < 0, 1)).alias("_early_n"),
        F.max(on_time).alias("_late_max"),
        *histogram,
    ]


def _digest_aggregation(df: DataFrame) -> DataFrame:
    """Only the percentile digests, per queue and overall: the exact figures beside them (counts,
    maxima, histogram) come from the count aggregation, whose hash aggregation runs them in generated
    code, where Spark's object aggregation (percentile_approx needs one) would interpret them row by row.
    Records without a value are left out (percentile_approx skips nulls: the same digests)."""
    tiq, _, on_time = _measures()
    projected = df.select("vhost", "queue", tiq.alias("tiq"), on_time.alias("on_time")).filter(
        F.col("tiq").isNotNull() | F.col("on_time").isNotNull()
    )
    aggs = [
        F.array(*_percentiles(F.col("tiq"))).alias("tiq_p"),
        F.array(*_percentiles(F.col("on_time"))).alias("late_p"),
    ]
    # per queue and overall, as two aggregations in one job (a rollup would also expand every row
    # for its (vhost) set)
    per_queue = projected.groupBy("vhost", "queue").agg(F.lit(0).cast("long").alias("gid"), *aggs)
    nothing = F.lit(None).cast("string")
    overall = projected.agg(
        nothing.alias("vhost"), nothing.alias("queue"), F.lit(3).cast("long").alias("gid"), *aggs
    )
    return per_queue.unionByName(overall)


def _count_tables(rows: list[Any], top: int) -> dict[str, list[dict[str, Any]]]:
    by_gid: dict[int, list[Any]] = {}
    for row in rows:
        by_gid.setdefault(row["gid"], []).append(row)
    out: dict[str, list[dict[str, Any]]] = {}

    def rows_of(name: str) -> list[Any]:
        return by_gid.get(_gid(_COUNT_COLUMNS, _COUNT_SETS[name]), [])

    def pick(name: str, *fields: str) -> list[dict[str, Any]]:
        return [{f: r[f] for f in fields} for r in rows_of(name)]

    out["by_reason"] = ordered(pick("by_reason", "reason", "count"), [desc("count"), asc("reason")])
    out["by_outcome"] = ordered(
        pick("by_outcome", "outcome", "drop_reason", "count"),
        [desc("count"), asc("outcome"), asc("drop_reason")],
    )
    out["by_queue"] = ordered(
        pick("by_queue", "vhost", "queue", "count", *REASONS, "dropped"),
        [desc("count"), asc("vhost"), asc("queue")],
    )
    out["by_policy"] = ordered(
        pick("by_policy", "vhost", "policy", "count", *REASONS),
        [desc("count"), asc("vhost"), asc("policy")],
    )
    limits: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows_of("by_limit"):
        cause = r["limit"] if r["limit"] is not None else r["reason"]
        key = (cause, r["limit_value"], r["limit_source"], r["reason"])
        row = limits.setdefault(
            key, dict(zip(("cause", "limit_value", "limit_source", "reason"), key, strict=True), count=0)
        )
        row["count"] += r["count"]
    out["by_limit"] = ordered(
        list(limits.values()),
        [desc("count"), asc("cause"), asc("limit_value"), asc("limit_source"), asc("reason")],
    )
    causes: dict[tuple[Any, ...], dict[str, Any]] = {}
    names = ("vhost", "queue", "reason", "limit", "limit_value", "limit_source", "policy")
    for r in rows_of("_causes"):
        cause = causes.setdefault(
            tuple(r[n] for n in names),
            {
                **{n: r[n] for n in names},
                "count": 0,
                "earlier": 0,
                "recent": 0,
                "first_ms": None,
                "last_ms": None,
            },
        )
        cause["count"] += r["count"]
        cause["recent" if r["recent"] else "earlier"] += r["count"]
        cause["first_ms"] = min(x for x in (cause["first_ms"], r["first_ms"]) if x is not None)
        cause["last_ms"] = max(x for x in (cause["last_ms"], r["last_ms"]) if x is not None)
    out["_causes"] = ordered(list(causes.values()), [desc("count"), *(asc(n) for n in names)])
    out["by_exchange"] = ordered(
        pick("by_exchange", "vhost", "exchange", "count"), [desc("count"), asc("vhost"), asc("exchange")]
    )
    out["by_hour"] = ordered(pick("by_hour", "hour", "reason", "count"), [asc("hour"), asc("reason")])
    out["_timeline"] = ordered(pick("_timeline", "bucket", "reason", "count"), [asc("bucket"), asc("reason")])
    content = [
        {"content_type": r["content_type"], "count": r["count"], "body_bytes": r["body_bytes"]}
        for r in rows_of("top_content_types")
    ]
    out["top_content_types"] = ordered(content, [desc("count"), asc_nulls_last("content_type")])[:top]
    (total,) = rows_of("overview") or [None]
    measures = ("expired", "tiq_count", "tiq_max", "measurable", "early", "late_max")
    hist = [name for name in (total.asDict() if total is not None else {}) if re.fullmatch(r"b\d+", name)]
    out["_stats"] = [
        {"vhost": r["vhost"], "queue": r["queue"], **{m: r[m] for m in measures}} for r in rows_of("by_queue")
    ]
    out["_stats_overall"] = [] if total is None else [{m: total[m] for m in (*measures, *hist)}]
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


def percentile_tables(
    counted: dict[str, list[dict[str, Any]]], digests: list[Any], buckets: Buckets
) -> dict[str, list[dict[str, Any]]]:
    """The time-in-queue and lateness tables from the count aggregation's exact figures (``_stats``,
    ``_stats_overall``) and the digest aggregation's percentiles."""
    names = [f"p{round(p * 100)}_ms" for p in PERCENTILES]
    nothing = [None] * len(names)
    overall = counted["_stats_overall"][0] if counted["_stats_overall"] else None
    overall_digest = next((r for r in digests if r["gid"] == 3), None)
    queue_digests = {(r["vhost"], r["queue"]): r for r in digests if r["gid"] == 0}

    def tiq(stats: dict[str, Any] | None, digest: Any, by: dict[str, Any]) -> dict[str, Any]:
        count = stats["tiq_count"] if stats is not None else 0
        p = digest["tiq_p"] if digest is not None and count else nothing
        return {
            **by,
            "count": count,
            **dict(zip(names, p, strict=True)),
            "max_ms": stats["tiq_max"] if stats is not None else None,
        }

    def late(stats: dict[str, Any] | None, digest: Any, by: dict[str, Any]) -> dict[str, Any]:
        expired = stats["expired"] if stats is not None else 0
        p = digest["late_p"] if digest is not None and digest["late_p"] is not None else nothing
        return {
            **by,
            "count": expired,
            "measurable": stats["measurable"] if stats is not None else 0,
            "early": stats["early"] if stats is not None and expired else None,  # sum over no expiry: null
            **dict(zip(names, p, strict=True)),
            "max_ms": stats["late_max"] if stats is not None else None,
        }

    def queue(r: dict[str, Any]) -> dict[str, Any]:
        return {"vhost": r["vhost"], "queue": r["queue"]}

    def digest(r: dict[str, Any]) -> Any:
        return queue_digests.get((r["vhost"], r["queue"]))

    by_key = [desc("count"), asc("vhost"), asc("queue")]
    stats = counted["_stats"]
    return {
        "time_in_queue": [tiq(overall, overall_digest, {})],
        "time_in_queue_by_queue": ordered(
            [tiq(r, digest(r), queue(r)) for r in stats if r["tiq_count"]], by_key
        ),
        "expiry_lateness": [late(overall, overall_digest, {})],
        "expiry_lateness_by_queue": ordered(
            [late(r, digest(r), queue(r)) for r in stats if r["expired"]], by_key
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


def fused_count_rows(
    records: DataFrame,
    top: int,
    bucket_ms: int = HOUR_MS,
    cut_ms: int | None = None,
    buckets: Buckets = (),
) -> dict[str, list[dict[str, Any]]]:
    """The count tables' rows (one Spark job), plus ``_timeline`` (``bucket`` start ms, reason, count;
    not a report table: the deaths-over-time chart's data, ``bucket_ms`` wide), ``_causes`` (deaths
    per vhost, queue, reason, limit, limit value and source, and policy; ``earlier`` before ``cut_ms``,
    ``recent`` from it on: see :func:`trend_cut`) and ``_stats``/``_stats_overall`` (the percentile
    tables' exact figures, per queue and overall, over the time-in-queue histogram's ``buckets``)."""
    return _count_tables(_count_aggregation(records, bucket_ms, cut_ms, buckets).collect(), top)


def fused_routing_rows(records: DataFrame) -> dict[str, list[dict[str, Any]]]:
    """``by_routing_key`` (one Spark job): deaths per vhost, exchange and routing key *list*, each list
    then exploded here (a few hundred rows) instead of every record in Spark; a key twice in one list
    counts twice, as with ``explode``."""
    rows = records.groupBy("vhost", "exchange", "routing_keys").agg(F.count(F.lit(1)).alias("n")).collect()
    counts: dict[tuple[Any, Any, Any], int] = {}
    for r in rows:
        for key in r["routing_keys"] or ():
            counts[(r["vhost"], r["exchange"], key)] = (
                counts.get((r["vhost"], r["exchange"], key), 0) + r["n"]
            )
    table = [{"vhost": v, "exchange": x, "routing_key": k, "count": n} for (v, x, k), n in counts.items()]
    order = [desc("count"), asc("vhost"), asc("exchange"), asc("routing_key")]
    return {"by_routing_key": ordered(table, order)}


def fused_digest_rows(records: DataFrame) -> list[Any]:
    """The percentile digests' rows (one Spark job): give them with :func:`fused_count_rows`' result
    to :func:`percentile_tables`."""
    return _digest_aggregation(records).collect()


def fused_percentile_rows(records: DataFrame, buckets: Buckets) -> dict[str, list[dict[str, Any]]]:
    """The time-in-queue and lateness tables' rows (two Spark jobs)."""
    return percentile_tables(
        fused_count_rows(records, 0, buckets=buckets), fused_digest_rows(records), buckets
    )


def fused_rows(
    records: DataFrame, *, top: int, buckets: Buckets, threshold: int = 3
) -> dict[str, list[dict[str, Any]]]:
    """Every covered table's rows (dicts, in the reference functions' order and limits)."""
    counted = fused_count_rows(records, top, buckets=buckets)
    return {
        **counted,
        **percentile_tables(counted, fused_digest_rows(records), buckets),
        **fused_routing_rows(records),
        **fused_id_rows(records, threshold=threshold, top=top),
    }
