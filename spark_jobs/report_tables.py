"""The report's tables as pure ``DataFrame -> DataFrame`` functions, and the list of them in report order.

Each function takes good archive records (see :mod:`ottermq.spark_jobs.io`) and returns a small,
deterministically ordered DataFrame; :func:`tables` names them with their titles in report.md.
They are the reference: :mod:`ottermq.spark_jobs.report` computes most of them through the fused
aggregations of :mod:`ottermq.spark_jobs.fused` and :mod:`ottermq.spark_jobs.fused_ids`, which give
the same rows (``tests/spark/test_fused.py``), and runs the rest as they are.

Definitions:

- *time in queue* = ``time_ms - enqueued_ms`` (records without ``enqueued_ms`` are left out);
- *expiry lateness* (``reason = expired`` only) = ``time_ms - (enqueued_ms + original_expiration)``.
  Lateness is measured only where the message carried an expiration (schema-1 records name no
  queue TTL; schema-2 records name the TTL that killed them as their ``limit``); a negative value
  means the queue's TTL was shorter and killed it first: such records are counted as ``early`` and
  left out of the percentiles, as are expiries with no ``original_expiration`` (queue TTL only);
- *retry loop*: a message (``message_id``) that died in a queue with a ``death_count`` (the
  ``x-death`` count for that queue and reason) that reached the threshold (default 3); its row
  counts **all** its deaths in that queue (a message that died with counts 1, 2 and 3 shows 3
  deaths). Deaths without a ``message_id`` cannot be told apart: per queue, one row with a null id
  counts those whose ``death_count`` reached the threshold;
- *cause* of a death: ``limit`` (the limit that killed it, archive schema 2), or ``reason`` when
  ``limit`` is null (``rejected``, schema-1 records); see :mod:`ottermq.spark_jobs.render` for the
  findings built from them.

Percentiles use Spark's ``percentile_approx`` (accuracy 10 000: the value returned has a rank
within 0.01 % of the exact one; exact below 10 000 values). Hours are UTC.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ottermq.spark_jobs.schema import DAY_MS, HOUR_MS, REASONS, headers_map, hour_label
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

__all__ = [
    "HISTOGRAM_BUCKETS",
    "Table",
    "count_by_exchange",
    "count_by_hour",
    "count_by_limit",
    "count_by_outcome",
    "count_by_policy",
    "count_by_queue",
    "count_by_reason",
    "count_by_routing_key",
    "expiry_lateness",
    "overview",
    "retry_loops",
    "tables",
    "time_in_queue",
    "time_in_queue_histogram",
    "top_content_types",
    "top_header_values",
    "top_message_ids",
]

PERCENTILES = (0.5, 0.9, 0.99)
ACCURACY = 10_000

#: Time-in-queue histogram buckets: label and [lower, upper) in ms (None = unbounded).
HISTOGRAM_BUCKETS: tuple[tuple[str, int | None, int | None], ...] = (
    ("<0", None, 0),
    ("0-10ms", 0, 10),
    ("10-100ms", 10, 100),
    ("0.1-1s", 100, 1_000),
    ("1-10s", 1_000, 10_000),
    ("10s-1m", 10_000, 60_000),
    ("1-10m", 60_000, 600_000),
    ("10m-1h", 600_000, HOUR_MS),
    ("1h-1d", HOUR_MS, DAY_MS),
    (">=1d", DAY_MS, None),
)


def _count() -> Column:
    return F.count(F.lit(1)).alias("count")


def _reason_counts() -> list[Column]:
    return [F.sum(F.when(F.col("reason") == r, 1).otherwise(0)).cast("long").alias(r) for r in REASONS]


def count_by_reason(df: DataFrame) -> DataFrame:
    """``reason, count``, most frequent first."""
    return df.groupBy("reason").agg(_count()).orderBy(F.desc("count"), "reason")


def count_by_queue(df: DataFrame) -> DataFrame:
    """``vhost, queue, count``, one column per reason, and ``dropped``; most frequent first."""
    dropped = F.sum(F.when(F.col("outcome") == "dropped", 1).otherwise(0)).cast("long").alias("dropped")
    return (
        df.groupBy("vhost", "queue")
        .agg(_count(), *_reason_counts(), dropped)
        .orderBy(F.desc("count"), "vhost", "queue")
    )


def count_by_policy(df: DataFrame) -> DataFrame:
    """``vhost, policy, count``, one column per reason: which policy set the dead-lettering (``policy``
    null: the queues' own arguments, or records from before policies), most frequent first."""
    return (
        df.groupBy("vhost", "policy")
        .agg(_count(), *_reason_counts())
        .orderBy(F.desc("count"), "vhost", F.asc_nulls_first("policy"))
    )


def count_by_limit(df: DataFrame) -> DataFrame:
    """``cause, limit_value, limit_source, reason, count``: which limit killed the messages (``cause`` is
    ``limit``, or ``reason`` where the record names no limit: ``rejected``, schema-1 records), most
    frequent first."""
    cause = F.coalesce(F.col("limit"), F.col("reason"))
    return (
        df.groupBy(cause.alias("cause"), "limit_value", "limit_source", "reason")
        .agg(_count())
        .orderBy(F.desc("count"), "cause", "limit_value", "limit_source", "reason")
    )


def count_by_exchange(df: DataFrame) -> DataFrame:
    """``vhost, exchange, count`` (the exchange the message was published to; ``""`` = default)."""
    return df.groupBy("vhost", "exchange").agg(_count()).orderBy(F.desc("count"), "vhost", "exchange")


def count_by_routing_key(df: DataFrame) -> DataFrame:
    """``vhost, exchange, routing_key, count``: a message with several routing keys counts once per key."""
    keys = df.select("vhost", "exchange", F.explode("routing_keys").alias("routing_key"))
    return (
        keys.groupBy("vhost", "exchange", "routing_key")
        .agg(_count())
        .orderBy(F.desc("count"), "vhost", "exchange", "routing_key")
    )


def count_by_hour(df: DataFrame) -> DataFrame:
    """``hour, reason, count`` with ``hour`` as ``YYYY-MM-DDTHH:00Z`` (UTC), in time order."""
    return (
        df.groupBy(hour_label(F.col("time_ms")).alias("hour"), "reason")
        .agg(_count())
        .orderBy("hour", "reason")
    )


def count_by_outcome(df: DataFrame) -> DataFrame:
    """``outcome, drop_reason, count`` (``drop_reason`` null for routed), most frequent first."""
    return (
        df.groupBy("outcome", "drop_reason")
        .agg(_count())
        .orderBy(F.desc("count"), "outcome", F.asc_nulls_first("drop_reason"))
    )


def _percentiles(value: Column) -> list[Column]:
    approx = F.percentile_approx(value, list(PERCENTILES), ACCURACY)
    names = [f"p{round(p * 100)}_ms" for p in PERCENTILES]
    return [approx[i].alias(name) for i, name in enumerate(names)]


def _percentile_table(values: DataFrame, by: Sequence[str], extra: Sequence[Column] = ()) -> DataFrame:
    aggs = [_count(), *extra, *_percentiles(F.col("value")), F.max("value").alias("max_ms")]
    if not by:
        return values.agg(*aggs)
    return values.groupBy(*by).agg(*aggs).orderBy(F.desc("count"), *by)


def time_in_queue(df: DataFrame, by: Sequence[str] = ()) -> DataFrame:
    """``[by...], count, p50_ms, p90_ms, p99_ms, max_ms`` of ``time_ms - enqueued_ms``.

    Only records with ``enqueued_ms``; without ``by`` a single row (count 0 and nulls when empty).
    """
    values = df.filter(F.col("enqueued_ms").isNotNull()).select(
        *by, (F.col("time_ms") - F.col("enqueued_ms")).alias("value")
    )
    return _percentile_table(values, by)


def time_in_queue_histogram(df: DataFrame) -> DataFrame:
    """``bucket, label, lower_ms, upper_ms, count`` over :data:`HISTOGRAM_BUCKETS` (empty ones too)."""
    value = F.col("time_ms") - F.col("enqueued_ms")
    bucket: Column = F.lit(None)
    for index, (_, lower, upper) in reversed(list(enumerate(HISTOGRAM_BUCKETS))):
        cond = F.lit(True)
        if lower is not None:
            cond = cond & (value >= lower)
        if upper is not None:
            cond = cond & (value < upper)
        bucket = F.when(cond, F.lit(index)).otherwise(bucket)
    buckets = df.filter(F.col("enqueued_ms").isNotNull()).select(bucket.alias("bucket"))
    wide = buckets.agg(
        *[F.count(F.when(F.col("bucket") == i, 1)).alias(f"b{i}") for i in range(len(HISTOGRAM_BUCKETS))]
    )
    entries = [
        F.struct(
            F.lit(i).alias("bucket"),
            F.lit(label).alias("label"),
            F.lit(lower).cast("long").alias("lower_ms"),
            F.lit(upper).cast("long").alias("upper_ms"),
            F.col(f"b{i}").alias("count"),
        )
        for i, (label, lower, upper) in enumerate(HISTOGRAM_BUCKETS)
    ]
    return wide.select(F.inline(F.array(*entries)))  # one row per bucket, in bucket order


def expiry_lateness(df: DataFrame, by: Sequence[str] = ()) -> DataFrame:
    """``[by...], count, measurable, early, p50_ms, p90_ms, p99_ms, max_ms`` for ``reason = expired``.

    ``count`` is every expiry, ``measurable`` those with ``enqueued_ms`` and a numeric
    ``original_expiration``, ``early`` the measurable ones that died before their own expiration
    (the queue TTL was shorter); percentiles are over the measurable, non-early ones.
    """
    expiration = F.expr("try_cast(original_expiration AS BIGINT)")
    lateness = F.col("time_ms") - (F.col("enqueued_ms") + expiration)
    values = df.filter(F.col("reason") == "expired").select(*by, lateness.alias("lateness"))
    measurable = F.col("lateness").isNotNull()
    early = measurable & (F.col("lateness") < 0)
    on_time = F.when(measurable & ~early, F.col("lateness"))
    aggs = [
        _count(),
        F.count(F.col("lateness")).alias("measurable"),
        F.sum(F.when(early, 1).otherwise(0)).cast("long").alias("early"),
        *_percentiles(on_time),
        F.max(on_time).alias("max_ms"),
    ]
    if not by:
        return values.agg(*aggs)
    return values.groupBy(*by).agg(*aggs).orderBy(F.desc("count"), *by)


def retry_loops(df: DataFrame, threshold: int = 3) -> DataFrame:
    """Messages dead-lettered again and again in one queue: those with a death there whose
    ``death_count`` reached ``threshold``, with every death of theirs in that queue.

    Returns ``vhost, queue, message_id, deaths, max_death_count, reasons, first_ms, last_ms``,
    worst first. ``deaths`` counts all the message's deaths in the queue (``death_count`` 1, 2, 3
    gives 3). Deaths without an id cannot be linked: per queue, the row with ``message_id`` null
    counts those whose ``death_count`` reached ``threshold``.
    """
    keyed = df.filter(F.col("message_id").isNotNull() | (F.col("death_count") >= threshold))
    return (
        keyed.groupBy("vhost", "queue", "message_id")
        .agg(
            _count().alias("deaths"),
            F.max("death_count").alias("max_death_count"),
            F.array_sort(F.collect_set("reason")).alias("reasons"),
            F.min("time_ms").alias("first_ms"),
            F.max("time_ms").alias("last_ms"),
        )
        .filter(F.col("max_death_count") >= threshold)
        .orderBy(
            F.desc("max_death_count"), F.desc("deaths"), "vhost", "queue", F.asc_nulls_last("message_id")
        )
    )


def top_message_ids(df: DataFrame, n: int = 20) -> DataFrame:
    """``message_id, count, queues, max_death_count``: the ``n`` ids seen most (null ids left out)."""
    # per (id, queue) first, then per id: the same numbers as countDistinct without its expand step
    per_queue = (
        df.filter(F.col("message_id").isNotNull())
        .groupBy("message_id", "vhost", "queue")
        .agg(_count(), F.max("death_count").alias("max_death_count"))
    )
    return (
        per_queue.groupBy("message_id")
        .agg(
            F.sum("count").alias("count"),
            F.count(F.lit(1)).alias("queues"),
            F.max("max_death_count").alias("max_death_count"),
        )
        .orderBy(F.desc("count"), "message_id")
        .limit(n)
    )


def top_content_types(df: DataFrame, n: int = 20) -> DataFrame:
    """``content_type, count, body_bytes``: the ``n`` most common (null = no content type)."""
    return (
        df.groupBy("content_type")
        .agg(_count(), F.sum("body_size").alias("body_bytes"))
        .orderBy(F.desc("count"), F.asc_nulls_last("content_type"))
        .limit(n)
    )


def top_header_values(df: DataFrame, key: str, n: int = 20) -> DataFrame:
    """``value, count``: the ``n`` most common values of header ``key`` (its JSON text; null = absent)."""
    value = headers_map("headers").getItem(key).getField("v")
    return (
        df.groupBy(value.alias("value"))
        .agg(_count())
        .orderBy(F.desc("count"), F.asc_nulls_last("value"))
        .limit(n)
    )


def overview(df: DataFrame) -> DataFrame:
    """One row: ``records, first_ms, last_ms, vhosts, queues, routed, dropped, body_bytes``."""
    return df.agg(
        _count().alias("records"),
        F.min("time_ms").alias("first_ms"),
        F.max("time_ms").alias("last_ms"),
        F.countDistinct("vhost").alias("vhosts"),
        F.countDistinct("vhost", "queue").alias("queues"),
        F.sum(F.when(F.col("outcome") == "routed", 1).otherwise(0)).cast("long").alias("routed"),
        F.sum(F.when(F.col("outcome") == "dropped", 1).otherwise(0)).cast("long").alias("dropped"),
        F.coalesce(F.sum("body_size"), F.lit(0)).alias("body_bytes"),
    )


@dataclass(frozen=True)
class Table:
    """One report table: its name, a title for report.md, and how to compute it."""

    name: str
    title: str
    compute: Callable[[DataFrame], DataFrame]


def tables(retry_threshold: int = 3, top: int = 20, type_header: str | None = None) -> list[Table]:
    """The report's tables, in report order."""
    out = [
        Table("overview", "Overview", overview),
        Table("by_reason", "Deaths by reason", count_by_reason),
        Table("by_limit", "Deaths by limit (the reason where no limit is recorded)", count_by_limit),
        Table("by_outcome", "Outcome", count_by_outcome),
        Table("by_queue", "Deaths by queue", count_by_queue),
        Table("by_policy", "Deaths by policy", count_by_policy),
        Table("by_exchange", "Deaths by exchange", count_by_exchange),
        Table("by_routing_key", "Deaths by routing key", count_by_routing_key),
        Table("by_hour", "Deaths per hour (UTC)", count_by_hour),
        Table("time_in_queue", "Time in queue", time_in_queue),
        Table(
            "time_in_queue_by_queue",
            "Time in queue by queue",
            lambda df: time_in_queue(df, ["vhost", "queue"]),
        ),
        Table("time_in_queue_histogram", "Time in queue histogram", time_in_queue_histogram),
        Table("expiry_lateness", "Expiry lateness", expiry_lateness),
        Table(
            "expiry_lateness_by_queue",
            "Expiry lateness by queue",
            lambda df: expiry_lateness(df, ["vhost", "queue"]),
        ),
        Table(
            "retry_loops",
            f"Retry loops (death_count >= {retry_threshold})",
            lambda df: retry_loops(df, retry_threshold),
        ),
        Table("top_message_ids", "Top message ids", lambda df: top_message_ids(df, top)),
        Table("top_content_types", "Top content types", lambda df: top_content_types(df, top)),
    ]
    if type_header:
        out.append(
            Table(
                "top_header_values",
                f"Top values of header {type_header!r}",
                lambda df: top_header_values(df, type_header, top),
            )
        )
    return out
