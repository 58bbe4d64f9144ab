"""Read a dead-letter archive (JSON Lines as the broker writes it, or Parquet from compact).

Every line ends up in exactly one bucket, and nothing in the input makes the read fail:

- ``ok``: a schema-1 or schema-2 record with every required field (``time_ms``, ``reason``,
  ``vhost``, ``queue``, ``outcome``); schema 1 has no ``limit``, ``limit_value`` and
  ``limit_source``: they read as null (as they do from Parquet compacted before schema 2);
- ``corrupt``: not JSON, cut short (a crash mid-write), or a field of the wrong JSON type (read
  in Spark's ``PERMISSIVE`` mode, the raw line lands in ``_corrupt_record``);
- ``unsupported``: valid JSON whose ``schema`` is missing or neither 1 nor 2;
- ``invalid``: a supported schema but a required field is null.

Only ``ok`` rows reach the analytics; the rest are counted per file with one sample line each
and reported. Spark parses only the columns a query needs, and a type error in a column it does
not parse goes unnoticed, so every reader here references all columns: the counts are the same
whichever job reads the archive.

Inputs are local paths or Hadoop URIs, files, directories (walked recursively; only
``*.jsonl`` and ``*.jsonl.gz`` are read, so ``*.jsonl.part`` files still being written are
skipped) or globs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from ottermq.spark_jobs.schema import ARCHIVE_SCHEMA, CORRUPT_COLUMN, FIELDS, SCHEMA_VERSIONS
from ottermq.spark_jobs.storage import detect_format
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.readwriter import DataStreamReader
from pyspark.sql.types import StringType, StructField, StructType

__all__ = [
    "REQUIRED_FIELDS",
    "ArchiveScan",
    "BadFile",
    "OpenArchive",
    "account",
    "classify",
    "is_good",
    "json_reader",
    "load_raw",
    "open_archive",
    "read_archive",
    "scan_archive",
]

log = logging.getLogger(__name__)

Format = Literal["auto", "json", "parquet"]
Reader = TypeVar("Reader", DataFrameReader, DataStreamReader)

#: Fields a record must have (non-null) to be analysed.
REQUIRED_FIELDS = ("time_ms", "reason", "vhost", "queue", "outcome")

STATUS_COLUMN = "_status"
FILE_COLUMN = "_file"
SAMPLE_COLUMN = "_sample"
OK, CORRUPT, UNSUPPORTED, INVALID = "ok", "corrupt", "unsupported", "invalid"
_SAMPLE_CHARS = 300
_MAX_BAD_FILES = 1000

_JSON_READ_SCHEMA = StructType([*ARCHIVE_SCHEMA.fields, StructField(CORRUPT_COLUMN, StringType())])


@dataclass(frozen=True)
class BadFile:
    """Lines of one status in one file, with one of them as a sample."""

    status: str
    file: str
    count: int
    sample: str | None


@dataclass(frozen=True)
class ArchiveScan:
    """An archive's good records plus the accounting of everything else."""

    records: DataFrame
    format: str
    valid: int
    corrupt: int
    unsupported: int
    invalid: int
    bad_files: list[BadFile] = field(default_factory=list)
    first_ms: int | None = None  # earliest and latest time_ms of the good records
    last_ms: int | None = None

    @property
    def bad(self) -> int:
        """Lines that are not analysed: corrupt + unsupported + invalid."""
        return self.corrupt + self.unsupported + self.invalid

    @property
    def total(self) -> int:
        """Every line (or Parquet row) read."""
        return self.valid + self.bad

    def counts(self) -> dict[str, object]:
        """JSON-ready accounting for summaries and manifests."""
        return {
            "format": self.format,
            "lines": self.total,
            "records": self.valid,
            "bad": self.bad,
            "corrupt": self.corrupt,
            "unsupported": self.unsupported,
            "invalid": self.invalid,
            "bad_files": [
                {"status": b.status, "file": b.file, "count": b.count, "sample": b.sample}
                for b in self.bad_files
            ],
        }


def load_raw(spark: SparkSession, path: str | Sequence[str], fmt: Format = "auto") -> tuple[DataFrame, str]:
    """The archive as read, before classification: schema fields plus ``_corrupt_record``.

    Args:
        spark: the session.
        path: a path, URI, directory or glob (or several).
        fmt: ``json``, ``parquet`` or ``auto`` (see :func:`~ottermq.spark_jobs.storage.detect_format`).

    Returns:
        The DataFrame and the format actually used.

    Raises:
        pyspark.errors.AnalysisException: the path does not exist.
    """
    paths = [path] if isinstance(path, str) else list(path)
    if fmt == "auto":
        fmt = detect_format(spark, paths[0])
    if fmt == "parquet":
        # the archive schema given, not inferred: no footer to read before the query, and a column
        # missing from a file (limit* in Parquet compacted from schema-1 lines) reads as null
        df = spark.read.schema(ARCHIVE_SCHEMA).parquet(*paths)
        return df.select(*FIELDS, F.lit(None).cast("string").alias(CORRUPT_COLUMN)), fmt
    reader = (
        json_reader(spark.read)
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.{jsonl,jsonl.gz}")
    )
    return reader.json(paths), fmt


def json_reader(reader: Reader) -> Reader:
    """A batch or streaming reader set up for archive lines: the schema, and a line that does not
    parse kept in ``_corrupt_record`` instead of failing the read."""
    return (
        reader.schema(_JSON_READ_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
    )


def required_missing() -> Column:
    """True for a line missing one of :data:`REQUIRED_FIELDS`."""
    missing: Column = F.lit(False)
    for name in REQUIRED_FIELDS:
        missing = missing | F.col(name).isNull()
    return missing


def is_good() -> Column:
    """True for an ``ok`` line (what :func:`classify` marks ``ok``), for readers that only filter."""
    return F.col(CORRUPT_COLUMN).isNull() & F.col("schema").isin(*SCHEMA_VERSIONS) & ~required_missing()


def classify(raw: DataFrame) -> DataFrame:
    """Add ``_status`` (ok/corrupt/unsupported/invalid), and ``_file``/``_sample`` for non-ok rows."""
    status = (
        F.when(F.col(CORRUPT_COLUMN).isNotNull(), F.lit(CORRUPT))
        .when(F.col("schema").isNull() | ~F.col("schema").isin(*SCHEMA_VERSIONS), F.lit(UNSUPPORTED))
        .when(required_missing(), F.lit(INVALID))
        .otherwise(F.lit(OK))
    )
    sample = F.coalesce(
        F.substring(F.col(CORRUPT_COLUMN), 1, _SAMPLE_CHARS),
        F.substring(F.to_json(F.struct(*[F.col(n) for n in ("schema", *REQUIRED_FIELDS)])), 1, _SAMPLE_CHARS),
    )
    bad = F.col(STATUS_COLUMN) != OK
    return (
        raw.withColumn(STATUS_COLUMN, status)
        .withColumn(FILE_COLUMN, F.when(bad, F.col("_metadata.file_path")))
        .withColumn(SAMPLE_COLUMN, F.when(bad, sample))
    )


def _touch_all(columns: Sequence[str]) -> list[Column]:
    """Cheap derived columns that make Spark parse every field the projection leaves out."""
    return [F.col(name).isNull().alias(f"_null_{name}") for name in FIELDS if name not in columns]


@dataclass(frozen=True)
class OpenArchive:
    """An archive ready to read (nothing run yet): its good records and what :func:`account` needs."""

    records: DataFrame
    classified: DataFrame
    format: str
    path: str | Sequence[str]
    span: bool  # whether the records have time_ms (for first_ms/last_ms)


def open_archive(
    spark: SparkSession,
    path: str | Sequence[str],
    *,
    fmt: Format = "auto",
    columns: Sequence[str] | None = None,
    persist: bool = False,
) -> OpenArchive:
    """The lazy half of :func:`scan_archive`: the good records as a DataFrame, no job run yet.

    Raises:
        pyspark.errors.AnalysisException: the path does not exist.
    """
    raw, used = load_raw(spark, path, fmt)
    keep = list(columns) if columns is not None else list(FIELDS)
    classified = classify(raw).select(
        # Parquet columns are typed (written by compact): nothing to catch in the ones not kept, so
        # only the kept ones are read; JSON text must be parsed whole to find every type error.
        *keep,
        *(_touch_all(keep) if used == "json" else ()),
        F.col(STATUS_COLUMN),
        F.col(FILE_COLUMN),
        F.col(SAMPLE_COLUMN),
    )
    if persist:
        classified = classified.persist(StorageLevel.MEMORY_AND_DISK)
    if used == "parquet" and not persist:
        # the same rows without classify's file name column: a query over the records then reads
        # only its own columns (a Parquet line is never corrupt; is_good is classify's "ok")
        records = raw.filter(is_good()).select(*keep)
    else:
        records = classified.filter(F.col(STATUS_COLUMN) == OK).select(*keep)
    return OpenArchive(records, classified, used, path, "time_ms" in keep)


def account(archive: OpenArchive) -> ArchiveScan:
    """Run the accounting job over an :func:`open_archive`: every line's status, per file, and the
    good records' time span (the job that fills the cache when the archive was opened with persist)."""
    log.info("reading %s archive %s", archive.format, archive.path)
    span_aggs = [F.min("time_ms").alias("first"), F.max("time_ms").alias("last")] if archive.span else []
    rows = (
        archive.classified.groupBy(STATUS_COLUMN, FILE_COLUMN)
        .agg(
            F.count(F.lit(1)).alias("n"), F.first(SAMPLE_COLUMN, ignorenulls=True).alias("sample"), *span_aggs
        )
        .collect()
    )
    totals = {OK: 0, CORRUPT: 0, UNSUPPORTED: 0, INVALID: 0}
    bad_files: list[BadFile] = []
    span: list[int] = []
    for row in rows:
        totals[row[STATUS_COLUMN]] += row["n"]
        if row[STATUS_COLUMN] == OK and "first" in row and row["first"] is not None:
            span += [row["first"], row["last"]]
        if row[STATUS_COLUMN] != OK:
            bad_files.append(BadFile(row[STATUS_COLUMN], row[FILE_COLUMN], row["n"], row["sample"]))
    bad_files.sort(key=lambda b: (-b.count, b.file, b.status))
    scan = ArchiveScan(
        records=archive.records,
        format=archive.format,
        valid=totals[OK],
        corrupt=totals[CORRUPT],
        unsupported=totals[UNSUPPORTED],
        invalid=totals[INVALID],
        bad_files=bad_files[:_MAX_BAD_FILES],
        first_ms=min(span) if span else None,
        last_ms=max(span) if span else None,
    )
    if scan.bad:
        log.warning(
            "%d of %d lines skipped: %d corrupt, %d unsupported schema, %d missing required fields",
            scan.bad,
            scan.total,
            scan.corrupt,
            scan.unsupported,
            scan.invalid,
        )
        for bad in scan.bad_files[:5]:
            log.warning("  %s: %d %s, e.g. %s", bad.file, bad.count, bad.status, bad.sample)
    log.info("%d records", scan.valid)
    return scan


def scan_archive(
    spark: SparkSession,
    path: str | Sequence[str],
    *,
    fmt: Format = "auto",
    columns: Sequence[str] | None = None,
    persist: bool = False,
) -> ArchiveScan:
    """Read an archive and account for every line (:func:`open_archive`, then :func:`account`).

    Args:
        spark: the session.
        path: a path, URI, directory or glob (or several).
        fmt: ``json``, ``parquet`` or ``auto``.
        columns: the fields to keep (all of them by default); the others are still parsed.
        persist: cache the projection (``MEMORY_AND_DISK``) so the input is parsed once for
            the counts and every later query; call ``records.unpersist()`` when done.

    Returns:
        The good records (``columns`` only) and the counts of the rest.

    Raises:
        pyspark.errors.AnalysisException: the path does not exist.
    """
    return account(open_archive(spark, path, fmt=fmt, columns=columns, persist=persist))


def read_archive(
    spark: SparkSession, path: str | Sequence[str], *, fmt: Format = "auto"
) -> tuple[DataFrame, int]:
    """The archive's good records (all schema fields) and the number of lines skipped.

    Skipped lines (corrupt, unsupported schema, missing required fields) are logged with a
    sample; :func:`scan_archive` returns the breakdown.

    Raises:
        pyspark.errors.AnalysisException: the path does not exist.
    """
    scan = scan_archive(spark, path, fmt=fmt)
    return scan.records, scan.bad
