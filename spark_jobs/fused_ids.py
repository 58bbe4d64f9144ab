"""The report's two message-id tables, ``retry_loops`` and ``top_message_ids``, one aggregation each.

:func:`id_counts` aggregates per ``(message_id, vhost, queue)``, shuffled by message id alone so
that :func:`top_ids_table` totals per id with no second shuffle; :func:`id_aggregation` aggregates
only the deaths of the looping ``(message_id, vhost, queue)`` keys, picked out of the records by a
broadcast semi-join (the records themselves are never shuffled), and :func:`loops_table` orders them
as the reference :func:`ottermq.spark_jobs.report_tables.retry_loops` does. :func:`fused_id_rows`
collects both; the report runs the two as separate jobs (:mod:`ottermq.spark_jobs.report`), and
:mod:`ottermq.spark_jobs.fused` covers the other tables.
"""

from __future__ import annotations

from typing import Any

from ottermq.spark_jobs.schema import REASONS
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

__all__ = ["fused_id_rows", "id_aggregation", "id_counts", "loops_table", "top_ids_table"]


def id_aggregation(records: DataFrame, threshold: int) -> DataFrame:
    """Per ``(message_id, vhost, queue)`` of a retry loop: deaths, highest ``death_count``, first and last
    death, and which of :data:`REASONS` (one flag each), for :func:`loops_table`.

    Only the deaths of loops are aggregated: the ``(message_id, vhost, queue)`` keys whose
    ``death_count`` reached ``threshold`` somewhere (a small set, broadcast) pick their deaths out of
    the records with a semi-join, so the records themselves are never shuffled. Deaths without an id
    are kept only where ``death_count`` reached ``threshold`` (they cannot be told apart, so their
    group per queue counts those). Every aggregation buffer is fixed-width (no string min/max, no
    collect_set), so Spark aggregates in a hash map instead of sorting the deaths.
    """
    columns = ("message_id", "vhost", "queue", "death_count", "time_ms", "reason")
    has_id = F.col("message_id").isNotNull()
    reached = F.col("death_count") >= threshold
    looping = records.filter(has_id & reached).select("message_id", "vhost", "queue").distinct()
    # vhost and queue are never null in a good record: plain equality matches like groupBy does
    linked = (
        records.select(*columns)
        .filter(has_id)
        .join(F.broadcast(looping), ["message_id", "vhost", "queue"], "left_semi")
    )
    unlinked = records.select(*columns).filter(~has_id & reached)
    return (
        linked.unionByName(unlinked)
        .groupBy("message_id", "vhost", "queue")
        .agg(
            F.count(F.lit(1)).alias("deaths"),
            F.max("death_count").alias("max_death_count"),
            F.min("time_ms").alias("first_ms"),
            F.max("time_ms").alias("last_ms"),
            *[F.max((F.col("reason") == r).cast("int")).alias(f"_r{i}") for i, r in enumerate(REASONS)],
        )
    )


def id_counts(records: DataFrame) -> DataFrame:
    """Per ``(message_id, vhost, queue)`` with an id: deaths and highest ``death_count``, for
    :func:`top_ids_table`. Shuffled by ``message_id`` alone, so grouping the result by id needs no
    second shuffle."""
    return (
        records.select("message_id", "vhost", "queue", "death_count")
        .filter(F.col("message_id").isNotNull())
        .repartition("message_id")
        .groupBy("message_id", "vhost", "queue")
        .agg(F.count(F.lit(1)).alias("deaths"), F.max("death_count").alias("max_death_count"))
    )


def loops_table(per_queue: DataFrame, threshold: int) -> DataFrame:
    """``retry_loops`` from :func:`id_aggregation`'s result, ordered as the reference orders it.

    Its ``reasons`` know only :data:`REASONS` (all the broker writes): for an archive with any other
    reason (``by_reason`` tells) the caller uses the reference function instead.
    """
    flags = [F.when(F.col(f"_r{i}") == 1, F.lit(r)) for i, r in enumerate(REASONS)]
    found = F.filter(F.array(*flags), lambda x: x.isNotNull())
    return (
        per_queue.filter(F.col("max_death_count") >= threshold)
        .select(
            "vhost",
            "queue",
            "message_id",
            "deaths",
            "max_death_count",
            F.array_sort(found).alias("reasons"),
            "first_ms",
            "last_ms",
        )
        # one sorted partition (the rows are few next to the records): no sampling job and range
        # shuffle as a global orderBy would take, and the same order (no two rows tie)
        .coalesce(1)
        .sortWithinPartitions(
            F.desc("max_death_count"), F.desc("deaths"), "vhost", "queue", F.asc_nulls_last("message_id")
        )
    )


def top_ids_table(per_queue: DataFrame, top: int) -> DataFrame:
    """``top_message_ids`` from :func:`id_counts`' result."""
    return (
        per_queue.filter(F.col("message_id").isNotNull())
        .groupBy("message_id")
        .agg(
            F.sum("deaths").alias("count"),
            F.count(F.lit(1)).alias("queues"),
            F.max("max_death_count").alias("max_death_count"),
        )
        .orderBy(F.desc("count"), "message_id")
        .limit(top)
    )


def fused_id_rows(records: DataFrame, *, threshold: int, top: int) -> dict[str, list[dict[str, Any]]]:
    """``retry_loops`` (:func:`id_aggregation`) and ``top_message_ids`` (:func:`id_counts`) rows."""
    loops = loops_table(id_aggregation(records, threshold), threshold)
    return {
        "retry_loops": [r.asDict(recursive=True) for r in loops.collect()],
        "top_message_ids": [
            r.asDict(recursive=True) for r in top_ids_table(id_counts(records), top).collect()
        ],
    }
