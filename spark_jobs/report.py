"""Dead-letter analytics: pure ``DataFrame -> DataFrame`` tables and the ``report`` job.

Each table function takes good archive records (see :mod:`ottermq.spark_jobs.io`) and returns
a small, deterministically ordered DataFrame. :func:`run_report` computes them all over one
cached read of the archive, writes each as Parquet and CSV, and renders ``summary.json``,
``report.md`` and PNG charts (:mod:`ottermq.spark_jobs.render`).

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

import argparse
import csv
import io
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from ottermq.spark_jobs import parquet
from ottermq.spark_jobs.fused import (
    FUSED_TABLES,
    ID_TABLES,
    TABLE_SCHEMAS,
    fused_count_rows,
    fused_digest_rows,
    fused_routing_rows,
    percentile_tables,
    timeline_bucket,
    trend_cut,
)
from ottermq.spark_jobs.fused_ids import id_aggregation, id_counts, loops_table, top_ids_table
from ottermq.spark_jobs.io import Format, account, open_archive
from ottermq.spark_jobs.schema import DAY_MS, HOUR_MS, REASONS, headers_map, hour_label
from ottermq.spark_jobs.session import (
    add_spark_arguments,
    configure_logging,
    fit_shuffle_partitions,
    parse_conf,
    spark_session,
)
from ottermq.spark_jobs.storage import (
    detect_format,
    inspect_inputs,
    is_local,
    join,
    local_path,
    move_single_file,
    open_output,
    write_bytes,
)
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

__all__ = [
    "HISTOGRAM_BUCKETS",
    "count_by_exchange",
    "count_by_hour",
    "count_by_limit",
    "count_by_outcome",
    "count_by_policy",
    "count_by_queue",
    "count_by_reason",
    "count_by_routing_key",
    "expiry_lateness",
    "main",
    "overview",
    "retry_loops",
    "run_report",
    "time_in_queue",
    "time_in_queue_histogram",
    "top_content_types",
    "top_header_values",
    "top_message_ids",
]

log = logging.getLogger(__name__)

PERCENTILES = (0.5, 0.9, 0.99)
ACCURACY = 10_000

#: Columns the report reads (``headers`` is added when ``--type-header`` asks for it).
REPORT_COLUMNS = (
    "time_ms",
    "reason",
    "vhost",
    "queue",
    "exchange",
    "routing_keys",
    "policy",
    "outcome",
    "drop_reason",
    "death_count",
    "original_expiration",
    "enqueued_ms",
    "message_id",
    "content_type",
    "body_size",
    "limit",
    "limit_value",
    "limit_source",
)

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


# --------------------------------------------------------------------------------------------- job


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


def _csv_value(value: Any) -> Any:
    if isinstance(value, list):
        return ";".join("" if v is None else str(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def write_csv(spark: SparkSession, uri: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """One CSV file with a header row; arrays joined with ``;``, null as an empty field."""
    with open_output(spark, uri) as stream:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_csv_value(v) for v in row])
            if buf.tell() > 1 << 20:
                stream.write(buf.getvalue().encode())
                buf.seek(0)
                buf.truncate()
        stream.write(buf.getvalue().encode())


def spark_csv(spark: SparkSession, table: DataFrame, uri: str) -> bool:
    """Write a big table as one CSV file with Spark, byte for byte as :func:`write_csv` would (header,
    ``;``-joined arrays, empty fields for null and "", RFC 4180 quoting, ``\n`` lines). Tables with
    floating-point columns are left to :func:`write_csv` (Python and Spark print them differently).

    Returns:
        Whether it wrote the file.
    """
    from pyspark.sql.types import ArrayType, DoubleType, FloatType

    if any(isinstance(f.dataType, DoubleType | FloatType) for f in table.schema.fields):
        return False
    columns = [
        F.array_join(F.col(f.name).cast("array<string>"), ";", "").alias(f.name)
        if isinstance(f.dataType, ArrayType)
        else F.col(f.name)
        for f in table.schema.fields
    ]
    staging = uri + ".spark"
    (
        table.select(*columns)
        .coalesce(1)
        .write.mode("overwrite")
        .option("header", True)
        .option("nullValue", "")
        .option("emptyValue", "")
        .option("quote", '"')
        .option("escape", '"')
        .option("lineSep", "\n")
        .option("ignoreLeadingWhiteSpace", False)
        .option("ignoreTrailingWhiteSpace", False)
        .csv(staging)
    )
    move_single_file(spark, staging, ".csv", uri)
    return True


#: Tables report.md and the charts need in full (everything else is shown up to --top rows).
_FULL_TABLES = frozenset(
    {
        "overview",
        "by_reason",
        "by_outcome",
        "by_hour",
        "time_in_queue",
        "time_in_queue_histogram",
        "expiry_lateness",
    }
)


#: Tables with at most this many rows are collected once and written from the driver.
COLLECT_LIMIT = 200_000
#: Up to this many rows a collected table is sent back to Spark to be written as Parquet (as one JSON
#: literal, see :func:`local_frame`; above it, Spark computes the table again to write it). Only for
#: an output Spark has to write (a Hadoop URI): a local one gets every collected table from
#: :mod:`~ottermq.spark_jobs.parquet`.
SEND_BACK_LIMIT = 5_000


def _materialise(
    spark: SparkSession, table: Table, records: DataFrame, out: str, top: int
) -> tuple[list[dict[str, Any]], int]:
    """Write ``table`` as Parquet and CSV under ``out/tables``; return the rows to show and the row count."""
    result = table.compute(records)
    head = result.limit(COLLECT_LIMIT + 1).collect()
    parquet_dir = join(out, "tables", table.name + ".parquet")
    csv_uri = join(out, "tables", table.name + ".csv")
    csv_rows: Iterable[Sequence[Any]] | None = None  # None: written already
    if len(head) <= SEND_BACK_LIMIT or (len(head) <= COLLECT_LIMIT and _python_parquet(out, result.schema)):
        # the usual case: no recomputation, one small file each
        total = len(head)
        _write_small(spark, table.name, head, result.schema, out)
    elif len(head) <= COLLECT_LIMIT:  # computing it again beats sending this many rows back to the JVM
        total = len(head)
        result.coalesce(1).write.mode("overwrite").parquet(parquet_dir)
        csv_rows = head
    else:
        result.write.mode("overwrite").parquet(parquet_dir)
        source = spark.read.parquet(parquet_dir)
        total = source.count()
        if not spark_csv(spark, source, csv_uri):  # a few partitions streamed to the driver (one job each)
            csv_rows = source.coalesce(4).toLocalIterator(prefetchPartitions=True)
    if csv_rows is not None:
        write_csv(spark, csv_uri, result.columns, csv_rows)
    shown = head if table.name in _FULL_TABLES else head[:top]
    return [row.asDict(recursive=True) for row in shown], total


def _write_rows(
    spark: SparkSession, table: Table, records: DataFrame, rows: list[dict[str, Any]], out: str, top: int
) -> tuple[list[dict[str, Any]], int]:
    """Write rows computed by :mod:`~ottermq.spark_jobs.fused` as the table's Parquet and CSV (the
    schema is the reference function's, planned but not run)."""
    schema = TABLE_SCHEMAS.get(table.name) or table.compute(records).schema  # (planning one costs ~0.1 s)
    names = schema.fieldNames()
    _write_small(spark, table.name, [tuple(row[name] for name in names) for row in rows], schema, out)
    shown = rows if table.name in _FULL_TABLES else rows[:top]
    return [dict(row) for row in shown], len(rows)


def local_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], schema: StructType) -> DataFrame:
    """``rows`` (values in ``schema``'s order) as a DataFrame of exactly ``schema``, built in the JVM.

    ``spark.createDataFrame(rows)`` runs a Python worker for every job over its result (PySpark
    re-serialises the rows in Python): ~0.4 s per table where writing the rows takes ~0.15 s. Here
    the rows travel as one JSON Lines literal that ``from_json`` parses with the schema's types
    (64-bit integers and strings exactly, floats by their shortest round-trip text), and the JVM
    applies the schema itself, nullability included, so the Parquet files are the same as before.
    """
    names = schema.fieldNames()
    text = "\n".join(json.dumps(dict(zip(names, row, strict=True)), separators=(",", ":")) for row in rows)
    lines = spark.range(1).select(F.explode(F.split(F.lit(text), "\n")).alias("line"))
    parsed = (
        lines.filter(F.col("line") != "").select(F.from_json("line", schema).alias("row")).select("row.*")
    )
    jspark = spark._jsparkSession
    jdf = jspark.createDataFrame(parsed._jdf.javaRDD(), jspark.parseDataType(schema.json()))
    return DataFrame(jdf, spark)


def _python_parquet(out: str, schema: StructType) -> bool:
    """Whether a table of ``schema`` goes to ``out`` through :mod:`~ottermq.spark_jobs.parquet` (no job)."""
    return is_local(out) and parquet.supports(schema)


def _write_small(
    spark: SparkSession, name: str, rows: Sequence[Sequence[Any]], schema: StructType, out: str
) -> None:
    """A table collected on the driver as ``out/tables/<name>.parquet`` (one file) and ``.csv``: written
    here in Python for a local ``out``, else by Spark from the rows sent back (:func:`local_frame`)."""
    parquet_dir = join(out, "tables", name + ".parquet")
    if _python_parquet(out, schema):
        parquet.write_table(local_path(parquet_dir), rows, schema)
    else:
        local_frame(spark, rows, schema).coalesce(1).write.mode("overwrite").parquet(parquet_dir)
    write_csv(spark, join(out, "tables", name + ".csv"), schema.fieldNames(), rows)


def run_report(
    spark: SparkSession,
    archive: str | Sequence[str],
    out: str,
    *,
    retry_threshold: int = 3,
    top: int = 20,
    type_header: str | None = None,
    fmt: Format = "auto",
    charts: bool = True,
    parallel: int = 8,
) -> dict[str, Any]:
    """Compute every table over ``archive`` and write them plus the summary, report and charts to ``out``.

    Returns:
        The summary (also written to ``out/summary.json``).

    Raises:
        pyspark.errors.AnalysisException: the archive path does not exist.
    """
    started = time.monotonic()
    restore = fit_shuffle_partitions(spark)
    try:
        return _run_report(
            spark,
            archive,
            out,
            started,
            retry_threshold=retry_threshold,
            top=top,
            type_header=type_header,
            fmt=fmt,
            charts=charts,
            parallel=parallel,
        )
    finally:
        restore()


def _run_report(
    spark: SparkSession,
    archive: str | Sequence[str],
    out: str,
    started: float,
    *,
    retry_threshold: int,
    top: int,
    type_header: str | None,
    fmt: Format,
    charts: bool,
    parallel: int,
) -> dict[str, Any]:
    from ottermq.spark_jobs import render  # matplotlib is imported only when charts are drawn

    columns = [*REPORT_COLUMNS, *(("headers",) if type_header else ())]
    paths = [archive] if isinstance(archive, str) else list(archive)
    used: Format = detect_format(spark, paths[0]) if fmt == "auto" else fmt
    # JSON is parsed once into a cache for every job; Parquet is read again by each job instead
    # (a handful of them, each reading only its columns: cheaper than building the cache)
    opened = open_archive(spark, archive, fmt=used, columns=columns, persist=used == "json")
    records = opened.records
    todo = tables(retry_threshold, top, type_header)
    results: dict[str, list[dict[str, Any]]] = {}
    table_rows: dict[str, int] = {}
    done = 0

    def run(table: Table) -> tuple[list[dict[str, Any]], int]:
        nonlocal done
        log.info("table %s: computing", table.name)
        shown, total = _materialise(spark, table, records, out, top)
        done += 1
        log.info("table %s: %d rows (%d/%d tables done)", table.name, total, done, len(todo))
        return shown, total

    try:
        # The count tables and the findings' causes come from one grouping-set aggregation, the
        # percentile tables from a second, top ids from a third, retry loops from a fourth, routing
        # keys from a fifth (spark_jobs/fused.py, the id tables spark_jobs/fused_ids.py); header values
        # are one job. Jobs run a few at once,
        # so the executors stay busy while the driver plans and writes; tables are written as their
        # aggregation finishes (by spark_jobs/parquet.py for a local output: no job each).
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            # The accounting job first (Spark runs jobs first come, first served, and adaptive
            # execution submits each job's later stages as new jobs, behind everything already
            # submitted); for JSON alone, as it fills the cache the others read. Parquet has no cache
            # to fill: the jobs that need no time span start beside it and keep both cores busy. The
            # count tables' job needs the span (and its tables are most of the writing).
            cached = opened.classified.is_cached
            scanning = pool.submit(account, opened)
            if cached:
                scanning.result()

            def loops_rows(_: DataFrame) -> DataFrame:
                # one sorted partition, kept: a table over the collect limit is written from it
                return loops_table(
                    id_aggregation(records, retry_threshold), retry_threshold
                ).localCheckpoint()

            def top_ids() -> dict[str, list[dict[str, Any]]]:
                rows = top_ids_table(id_counts(records), top).collect()
                return {"top_message_ids": [r.asDict() for r in rows]}

            ids = pool.submit(top_ids)
            loops = pool.submit(run, Table("retry_loops", "", loops_rows))
            digests = pool.submit(fused_digest_rows, records)
            routing = pool.submit(fused_routing_rows, records)
            scan = scanning.result()
            bucket_ms = timeline_bucket(scan.first_ms, scan.last_ms)
            cut_ms = trend_cut(scan.first_ms, scan.last_ms)
            counts = pool.submit(fused_count_rows, records, top, bucket_ms, cut_ms, HISTOGRAM_BUCKETS)

            others = {t.name: pool.submit(run, t) for t in todo if t.name not in FUSED_TABLES | ID_TABLES}
            fused: dict[str, list[dict[str, Any]]] = {}
            written: dict[str, Future[tuple[list[dict[str, Any]], int]]] = {}

            def write(table: Table) -> tuple[list[dict[str, Any]], int]:
                nonlocal done
                result = _write_rows(spark, table, records, fused[table.name], out, top)
                done += 1
                return result

            waiting: list[Future[Any]] = [counts, digests, ids, routing]
            for future in as_completed(waiting):
                found: dict[str, list[dict[str, Any]]] = {} if future is digests else future.result()
                if future in (counts, digests) and counts.done() and digests.done():
                    # the percentile tables: digests from one aggregation, counts from the other
                    found = {
                        **found,
                        **percentile_tables(counts.result(), digests.result(), HISTOGRAM_BUCKETS),
                    }
                fused.update(found)
                written.update({t.name: pool.submit(write, t) for t in todo if t.name in found})
            log.info("tables %s: computed in six aggregations", ", ".join(sorted(written)))
            if any(r["reason"] not in REASONS for r in fused["by_reason"]):
                # loops_table's reasons know only the broker's four: the reference, as a rule
                loops.result()
                loops = pool.submit(run, next(t for t in todo if t.name == "retry_loops"))
            others["retry_loops"] = loops
            for table in todo:
                shown, total = (written.get(table.name) or others[table.name]).result()
                results[table.name] = shown
                table_rows[table.name] = total
        log.info("%d tables written", len(todo))
    finally:  # (the checkpoint's blocks go with its RDD)
        opened.classified.unpersist()
    findings = render.findings(
        fused["_causes"],
        results,
        first_ms=scan.first_ms,
        last_ms=scan.last_ms,
        cut_ms=cut_ms,
        retry_threshold=retry_threshold,
        loops=table_rows.get("retry_loops"),
    )
    summary = render.summary(
        scan.counts(), results, archive=archive, retry_threshold=retry_threshold, top=top, findings=findings
    )
    summary["table_rows"] = table_rows
    summary["seconds"] = round(time.monotonic() - started, 3)
    chart_files: dict[str, str] = {}
    pngs: dict[str, bytes] = {}
    if charts:
        log.info("drawing charts")
        timeline = (fused.get("_timeline", []), bucket_ms)
        pngs = render.charts(results, top=top, timeline=timeline)
        for name, png in pngs.items():
            write_bytes(spark, join(out, "charts", name), png)
            chart_files[name] = "charts/" + name
    summary["charts"] = sorted(chart_files.values())
    write_bytes(spark, join(out, "summary.json"), json.dumps(summary, indent=2, sort_keys=False).encode())
    titles = {t.name: t.title for t in todo}
    write_bytes(
        spark, join(out, "report.md"), render.markdown(summary, results, titles, chart_files, top).encode()
    )
    write_bytes(spark, join(out, "report.html"), render.html(summary, results, titles, pngs, top).encode())
    log.info("report written to %s in %.1f s", out, summary["seconds"])
    return summary


def build_parser() -> argparse.ArgumentParser:
    """The ``ottermq dlq report`` command line."""
    parser = argparse.ArgumentParser(
        prog="ottermq dlq report",
        description="Analyse a dead-letter archive (JSON Lines or compacted Parquet) with Spark.",
    )
    parser.add_argument("archive", nargs="+", help="archive path, URI, directory or glob (several allowed)")
    parser.add_argument("--out", required=True, help="output directory (local path or Hadoop URI)")
    parser.add_argument(
        "--retry-threshold", type=int, default=3, metavar="N", help="death_count of a retry loop"
    )
    parser.add_argument("--top", type=int, default=20, metavar="N", help="rows in top-N lists and report.md")
    parser.add_argument(
        "--type-header", metavar="KEY", help="also rank the values of this header (e.g. type)"
    )
    parser.add_argument("--format", choices=("auto", "json", "parquet"), default="auto", help="input format")
    parser.add_argument("--no-charts", action="store_true", help="skip the PNG charts (no matplotlib needed)")
    add_spark_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``ottermq dlq report ARCHIVE --out DIR``: returns the exit status (0 ok, 2 bad input)."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    from ottermq.spark_jobs import render
    from pyspark.errors import AnalysisException

    ok, size = inspect_inputs(list(args.archive), log)  # before Spark starts
    if not ok:
        return 2
    conf = parse_conf(args.conf)
    with spark_session("ottermq-dlq-report", args.master, conf, args.verbose, input_bytes=size) as spark:
        try:
            summary = run_report(
                spark,
                args.archive,
                args.out,
                retry_threshold=args.retry_threshold,
                top=args.top,
                type_header=args.type_header,
                fmt=args.format,
                charts=not args.no_charts,
            )
        except AnalysisException as exc:
            log.error("cannot read %s: %s", " ".join(args.archive), str(exc).splitlines()[0])
            return 2
    sys.stdout.write(render.console(summary, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
