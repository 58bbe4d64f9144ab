"""The ``report`` job: every table of a dead-letter archive, plus summary, report and charts.

:func:`run_report` opens the archive once (JSON Lines parsed into a cache, Parquet read again by
each job for its own columns), computes the tables of :mod:`ottermq.spark_jobs.report_tables` (most
of them through the fused aggregations of :mod:`ottermq.spark_jobs.fused` and
:mod:`ottermq.spark_jobs.fused_ids`, a few jobs at once), writes each as Parquet and CSV
(:mod:`ottermq.spark_jobs.table_files`), and renders ``summary.json``, ``report.md``,
``report.html`` and PNG charts (:mod:`ottermq.spark_jobs.render`). :func:`main` is ``ottermq dlq
report`` and runs unchanged under ``spark-submit``. The table functions are re-exported here; what
they measure (time in queue, expiry lateness, retry loops, causes) is defined in
:mod:`ottermq.spark_jobs.report_tables`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from ottermq.spark_jobs.fused import (
    FUSED_TABLES,
    ID_TABLES,
    fused_count_rows,
    fused_digest_rows,
    fused_routing_rows,
    percentile_tables,
    timeline_bucket,
    trend_cut,
)
from ottermq.spark_jobs.fused_ids import id_aggregation, id_counts, loops_table, top_ids_table
from ottermq.spark_jobs.io import Format, account, open_archive
from ottermq.spark_jobs.open_files import include_open_files
from ottermq.spark_jobs.report_tables import (
    HISTOGRAM_BUCKETS,
    Table,
    count_by_exchange,
    count_by_hour,
    count_by_limit,
    count_by_outcome,
    count_by_policy,
    count_by_queue,
    count_by_reason,
    count_by_routing_key,
    expiry_lateness,
    overview,
    retry_loops,
    tables,
    time_in_queue,
    time_in_queue_histogram,
    top_content_types,
    top_header_values,
    top_message_ids,
)
from ottermq.spark_jobs.schema import REASONS
from ottermq.spark_jobs.session import (
    add_spark_arguments,
    command_seconds,
    configure_logging,
    fit_shuffle_partitions,
    parse_conf,
    spark_session,
)
from ottermq.spark_jobs.storage import detect_format, inspect_inputs, join, write_bytes
from ottermq.spark_jobs.table_files import materialise, write_rows
from pyspark.sql import DataFrame, SparkSession

# the table functions (ottermq.spark_jobs.report_tables) stay importable from here, where they began
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
    files: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Compute every table over ``archive`` and write them plus the summary, report and charts to ``out``.
    With ``files``, those are read instead (``archive`` is what the report names: ``main`` lists an
    archive being written that way, ``open_files``).

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
            files=files,
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
    files: Sequence[str] | None,
) -> dict[str, Any]:
    from ottermq.spark_jobs import render  # matplotlib is imported only when charts are drawn

    columns = [*REPORT_COLUMNS, *(("headers",) if type_header else ())]
    paths = list(files) if files else [archive] if isinstance(archive, str) else list(archive)
    used: Format = detect_format(spark, paths[0]) if fmt == "auto" else fmt
    # JSON is parsed once into a cache for every job; Parquet is read again by each job instead
    # (a handful of them, each reading only its columns: cheaper than building the cache)
    opened = open_archive(spark, paths, fmt=used, columns=columns, persist=used == "json")
    records = opened.records
    todo = tables(retry_threshold, top, type_header)
    results: dict[str, list[dict[str, Any]]] = {}
    table_rows: dict[str, int] = {}
    done = 0

    def run(table: Table) -> tuple[list[dict[str, Any]], int]:
        nonlocal done
        log.info("table %s: computing", table.name)
        shown, total = materialise(spark, table, records, out, top)
        done += 1
        log.info("table %s: %d rows (%d/%d tables done)", table.name, total, done, len(todo))
        return shown, total

    try:
        # The count tables and the findings' causes come from one grouping-set aggregation, the
        # percentile tables from a second, top ids from a third, retry loops from a fourth, routing
        # keys from a fifth (spark_jobs/fused.py, the id tables spark_jobs/fused_ids.py); header values
        # are one job. Jobs run a few at once, so the executors stay busy while the driver plans and
        # writes; tables are written as their aggregation finishes (spark_jobs/table_files.py: by
        # spark_jobs/parquet.py for a local output, no job each).
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
                result = write_rows(spark, table, records, fused[table.name], out, top)
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
    parser.add_argument(
        "--complete-only",
        action="store_true",
        help="read closed archive files only, not the complete lines of those the broker is still writing"
        " (*.jsonl.part)",
    )
    add_spark_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``ottermq dlq report ARCHIVE --out DIR``: returns the exit status (0 ok, 2 bad input)."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    from ottermq.spark_jobs import render
    from pyspark.errors import AnalysisException

    archive = list(args.archive)
    ok, size = inspect_inputs(archive, log, open_files=not args.complete_only)  # before Spark starts
    if not ok:
        return 2
    with tempfile.TemporaryDirectory(prefix="ottermq-report-") as copies:
        found = None if args.complete_only else include_open_files(archive, Path(copies))
        if found is not None:
            log.info(
                "%d archive file(s) still being written: their %d complete line(s) so far are read too"
                " (--complete-only leaves them out)",
                found.files,
                found.lines,
            )
            if not found.paths:
                log.error("%s: no complete line in the archive yet", " ".join(archive))
                return 2
            size = (size or 0) + found.bytes
        conf = parse_conf(args.conf)
        with spark_session("ottermq-dlq-report", args.master, conf, args.verbose, input_bytes=size) as spark:
            if found is not None and not str(spark.sparkContext.master).startswith("local"):
                log.info(  # the copies are on this machine only: a cluster's executors read the archive
                    "%d .jsonl.part file(s) still being written are skipped (a cluster cannot read this"
                    " machine's copies of them)",
                    found.files,
                )
                found = None
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
                    files=None if found is None else found.paths,
                )
            except AnalysisException as exc:
                log.error("cannot read %s: %s", " ".join(args.archive), str(exc).splitlines()[0])
                return 2
    log.info("report written to %s in %.1f s", args.out, command_seconds())  # the whole command
    sys.stdout.write(render.console(summary, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
