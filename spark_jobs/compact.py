"""Compact a JSON Lines dead-letter archive into Parquet partitioned by UTC date.

``out/date=YYYY-MM-DD/part-*.parquet`` holds the good records with every schema field (the
``headers`` JSON text as is), sorted by ``time_ms`` within each file; skipped lines are counted
as by :func:`~ottermq.spark_jobs.io.scan_archive`. ``out/_ottermq_compact.json`` records each
run (source, mode, counts); the report and replay jobs recognise the directory as Parquet.

Modes: ``overwrite`` replaces ``out``; ``append`` adds files (compacting the same input twice
duplicates it); ``overwrite-dates`` replaces only the dates present in the input (Spark's
dynamic partition overwrite), for re-compacting the last days of a growing archive.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from ottermq.spark_jobs.io import Format, scan_archive
from ottermq.spark_jobs.schema import SCHEMA_VERSION, day_label
from ottermq.spark_jobs.session import add_spark_arguments, configure_logging, parse_conf, spark_session
from ottermq.spark_jobs.storage import COMPACT_MARKER, check_inputs, join, read_bytes, write_bytes
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

__all__ = ["MODES", "compact", "main"]

log = logging.getLogger(__name__)

MODES = ("overwrite", "append", "overwrite-dates")


def _previous_runs(spark: SparkSession, out: str) -> list[Any]:
    try:
        runs = json.loads(read_bytes(spark, join(out, COMPACT_MARKER))).get("runs", [])
    except Exception:  # no marker yet (any filesystem's not-found), or an unreadable one
        return []
    return runs if isinstance(runs, list) else []


def compact(
    spark: SparkSession,
    archive: str | Sequence[str],
    out: str,
    *,
    mode: str = "overwrite",
    fmt: Format = "auto",
) -> dict[str, Any]:
    """Write the archive's good records to ``out`` as date-partitioned Parquet.

    Returns:
        This run's entry of the marker file (source, mode, counts, seconds).

    Raises:
        ValueError: an unknown mode.
        pyspark.errors.AnalysisException: the archive path does not exist.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    started = time.monotonic()
    previous = [] if mode == "overwrite" else _previous_runs(spark, out)
    scan = scan_archive(spark, archive, fmt=fmt)
    log.info("writing %d records to %s (%s)", scan.valid, out, mode)
    records = scan.records.withColumn("date", day_label(F.col("time_ms"))).sortWithinPartitions(
        "date", "time_ms"
    )
    writer = records.write.partitionBy("date")
    if mode == "overwrite-dates":
        writer = writer.mode("overwrite").option("partitionOverwriteMode", "dynamic")
    else:
        writer = writer.mode(mode)
    writer.parquet(out)
    run = {
        "archive": archive if isinstance(archive, str) else list(archive),
        "mode": mode,
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - started, 3),
        **scan.counts(),
    }
    marker = {"kind": "ottermq-dlq-compact", "archive_schema": SCHEMA_VERSION, "runs": [*previous, run]}
    write_bytes(spark, join(out, COMPACT_MARKER), json.dumps(marker, indent=2).encode())
    log.info("compacted %d records (%d lines skipped) in %.1f s", scan.valid, scan.bad, run["seconds"])
    return run


def build_parser() -> argparse.ArgumentParser:
    """The ``ottermq dlq compact`` command line."""
    parser = argparse.ArgumentParser(
        prog="ottermq dlq compact",
        description="Compact a JSON Lines dead-letter archive into Parquet partitioned by date (UTC).",
    )
    parser.add_argument("archive", nargs="+", help="archive path, URI, directory or glob (several allowed)")
    parser.add_argument("--out", required=True, help="output directory (local path or Hadoop URI)")
    parser.add_argument("--mode", choices=MODES, default="overwrite", help="what to do with existing output")
    parser.add_argument("--format", choices=("auto", "json", "parquet"), default="auto", help="input format")
    add_spark_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``ottermq dlq compact ARCHIVE --out DIR``: returns the exit status (0 ok, 2 bad input)."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    from pyspark.errors import AnalysisException

    if not check_inputs(list(args.archive), log):  # before Spark starts
        return 2
    with spark_session("ottermq-dlq-compact", args.master, parse_conf(args.conf), args.verbose) as spark:
        try:
            run = compact(spark, args.archive, args.out, mode=args.mode, fmt=args.format)
        except AnalysisException as exc:
            log.error("cannot read %s: %s", " ".join(args.archive), str(exc).splitlines()[0])
            return 2
    sys.stdout.write(
        f"compacted {run['records']:,} records into {args.out} ({run['bad']:,} lines skipped: "
        f"{run['corrupt']:,} corrupt, {run['unsupported']:,} unsupported, {run['invalid']:,} invalid) "
        f"in {run['seconds']:.1f} s\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
