"""How the report writes a table: ``out/tables/<name>.parquet`` (one file) and ``<name>.csv``.

A table of up to :data:`COLLECT_LIMIT` rows is collected once; its Parquet file is written in plain
Python by :mod:`ottermq.spark_jobs.parquet` for a local output, else by Spark from the rows sent
back as one JSON literal (:func:`local_frame`, up to :data:`SEND_BACK_LIMIT` rows; above that Spark
computes the table again), and its CSV by :func:`write_csv`. A bigger table is written by Spark and
read back for its CSV (:func:`spark_csv`, or :func:`write_csv` streaming it where it has
floating-point columns). :func:`materialise` computes a reference table
(:mod:`ottermq.spark_jobs.report_tables`) and writes it; :func:`write_rows` writes the rows a fused
aggregation (:mod:`ottermq.spark_jobs.fused`) gave. Both return the rows report.md and the summary
show (all of them for the tables those need whole, else up to ``--top``) and the table's row count.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any

from ottermq.spark_jobs import parquet
from ottermq.spark_jobs.fused import TABLE_SCHEMAS
from ottermq.spark_jobs.report_tables import Table
from ottermq.spark_jobs.storage import is_local, join, local_path, move_single_file, open_output
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

__all__ = [
    "COLLECT_LIMIT",
    "SEND_BACK_LIMIT",
    "local_frame",
    "materialise",
    "spark_csv",
    "write_csv",
    "write_rows",
]


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


def materialise(
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


def write_rows(
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
