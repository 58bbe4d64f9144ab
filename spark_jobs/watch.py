"""``ottermq dlq watch ARCHIVE --out DIR``: per-minute dead-letter aggregates while the broker runs.

A Spark Structured Streaming job over the archive directory. It reads only complete files
(``*.jsonl``, which the broker creates by renaming a finished ``.part`` file, so a file is never
seen half written), keeps its progress in a checkpoint (``--checkpoint``, default
``OUT/_checkpoint``), and after every micro-batch:

- rewrites ``OUT/minutes`` (Parquet): deaths per UTC minute by reason, vhost, queue and exchange,
  with the expiry-lateness p50/p99 (ms) of the expired ones, and ``OUT/drops`` (Parquet): dropped
  dead letters per minute by drop reason. The aggregation runs in complete mode, so each rewrite
  holds the totals of every file read so far: a restart continues from the checkpoint and never
  counts a file twice (Spark's file source records the files each batch took);
- prints the latest minutes as a console table;
- checks the ``--alert`` rules, e.g. ``--alert 'reason=expired,queue=orders,rate>100/min'`` (keys
  ``reason``, ``vhost``, ``queue``, ``exchange``; the threshold is deaths per minute, ``>`` or
  ``>=``): a minute over a threshold is logged at WARNING once and written to ``OUT/alerts.jsonl``
  (rewritten from the totals, so it holds each alert once).

It runs until stopped (``--once`` processes what is there and exits: for tests and cron), locally
or unchanged through ``spark-submit`` on a cluster, like the batch jobs.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ottermq.spark_jobs.io import is_good, json_reader
from ottermq.spark_jobs.session import (
    add_spark_arguments,
    configure_logging,
    fit_shuffle_partitions,
    parse_conf,
    spark_session,
)
from ottermq.spark_jobs.storage import is_local, join, local_path, preflight, write_bytes
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

__all__ = ["AlertRule", "build_parser", "main", "parse_alert", "start_watch"]

log = logging.getLogger(__name__)

MINUTE_MS = 60_000
ALERT_KEYS = ("reason", "vhost", "queue", "exchange")
_RATE = re.compile(r"^rate\s*(>=|>)\s*(\d+(?:\.\d+)?)\s*/\s*min$")


@dataclass(frozen=True)
class AlertRule:
    """``reason=expired,queue=orders,rate>100/min``: the deaths of one minute matching every key."""

    text: str
    match: tuple[tuple[str, str], ...]
    threshold: float
    inclusive: bool

    def fires(self, count: int) -> bool:
        return count >= self.threshold if self.inclusive else count > self.threshold


def parse_alert(text: str) -> AlertRule:
    """Parse an ``--alert`` rule.

    Raises:
        ValueError: an unknown key, a missing or malformed ``rate`` part.
    """
    match: list[tuple[str, str]] = []
    rate: tuple[float, bool] | None = None
    for part in (p.strip() for p in text.split(",") if p.strip()):
        found = _RATE.match(part)
        if found:
            rate = (float(found.group(2)), found.group(1) == ">=")
            continue
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ALERT_KEYS:
            keys = ", ".join(ALERT_KEYS)
            raise ValueError(f"--alert {text!r}: {part!r} is not KEY=VALUE with KEY in {keys} or rate>N/min")
        match.append((key.strip(), value.strip()))
    if rate is None:
        raise ValueError(f"--alert {text!r}: needs a rate, e.g. rate>100/min")
    return AlertRule(text, tuple(match), rate[0], rate[1])


def _stream(spark: SparkSession, archive: str, max_files: int) -> DataFrame:
    """The archive's good records as a stream (complete ``*.jsonl`` files only, in any hour folder)."""
    source = json_reader(spark.readStream).option("maxFilesPerTrigger", max_files)
    return source.json(join(archive, "*", "*", "*.jsonl")).filter(is_good())


def _minutes(records: DataFrame) -> DataFrame:
    expiration = F.expr("try_cast(original_expiration AS BIGINT)")
    lateness = F.when(F.col("reason") == "expired", F.col("time_ms") - (F.col("enqueued_ms") + expiration))
    on_time = F.when(lateness >= 0, lateness)
    minute = (F.floor(F.col("time_ms") / MINUTE_MS) * MINUTE_MS).cast("long")
    return (
        records.groupBy(minute.alias("minute_ms"), "reason", "vhost", "queue", "exchange")
        .agg(
            F.count(F.lit(1)).alias("deaths"),
            F.sum(F.when(F.col("outcome") == "dropped", 1).otherwise(0)).cast("long").alias("dropped"),
            F.percentile_approx(on_time, [0.5, 0.99], 1000).alias("lateness"),
        )
        .select(
            "minute_ms",
            "reason",
            "vhost",
            "queue",
            "exchange",
            "deaths",
            "dropped",
            F.col("lateness")[0].alias("lateness_p50_ms"),
            F.col("lateness")[1].alias("lateness_p99_ms"),
        )
    )


def _drops(records: DataFrame) -> DataFrame:
    minute = (F.floor(F.col("time_ms") / MINUTE_MS) * MINUTE_MS).cast("long")
    return (
        records.filter(F.col("outcome") == "dropped")
        .groupBy(minute.alias("minute_ms"), F.coalesce("drop_reason", F.lit("unknown")).alias("drop_reason"))
        .agg(F.count(F.lit(1)).alias("dropped"))
    )


def _minute_label(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(ms / 1000))


def alerts_of(rows: Sequence[dict[str, Any]], rules: Sequence[AlertRule]) -> list[dict[str, Any]]:
    """Every (rule, minute) whose matching deaths are over the rule's rate, oldest first."""
    out: list[dict[str, Any]] = []
    for rule in rules:
        per_minute: dict[int, int] = {}
        for row in rows:
            if all(row.get(key) == value for key, value in rule.match):
                per_minute[row["minute_ms"]] = per_minute.get(row["minute_ms"], 0) + row["deaths"]
        for minute_ms, count in sorted(per_minute.items()):
            if rule.fires(count):
                out.append(
                    {
                        "rule": rule.text,
                        "minute": _minute_label(minute_ms),
                        "minute_ms": minute_ms,
                        "deaths": count,
                        "threshold": rule.threshold,
                    }
                )
    return out


def console_table(rows: Sequence[dict[str, Any]], minutes: int = 5, top: int = 10) -> str:
    """The latest ``minutes`` minutes, most deaths first (``top`` rows each)."""
    if not rows:
        return "no dead letters yet\n"
    latest = sorted({r["minute_ms"] for r in rows})[-minutes:]
    head = f"{'minute (UTC)':<18} {'reason':<15} {'queue':<30} {'deaths':>8} {'dropped':>8} {'late p99':>9}"
    lines = [head]
    for minute_ms in latest:
        shown = sorted((r for r in rows if r["minute_ms"] == minute_ms), key=lambda r: -r["deaths"])[:top]
        for r in shown:
            queue = r["queue"] if r["vhost"] == "/" else f"{r['vhost']}/{r['queue']}"
            late = "" if r["lateness_p99_ms"] is None else f"{r['lateness_p99_ms']} ms"
            lines.append(
                f"{_minute_label(minute_ms):<18} {r['reason']:<15} {queue[:30]:<30} "
                f"{r['deaths']:>8,} {r['dropped']:>8,} {late:>9}"
            )
    return "\n".join(lines) + "\n"


class _Batches:
    """``foreachBatch`` handler: rewrites the outputs from the complete aggregate of each batch."""

    def __init__(self, spark: SparkSession, out: str, rules: Sequence[AlertRule], quiet: bool) -> None:
        self.spark = spark
        self.out = out
        self.rules = list(rules)
        self.quiet = quiet
        self.alerted: set[tuple[str, int]] = set()
        self.batches = 0

    def minutes(self, batch: DataFrame, batch_id: int) -> None:
        collected = batch.collect()  # one row per minute and group: small
        rows = [r.asDict() for r in collected]
        if collected:
            frame = self.spark.createDataFrame(collected, batch.schema).coalesce(1)
            frame.write.mode("overwrite").parquet(join(self.out, "minutes"))
        found = alerts_of(rows, self.rules)
        for alert in found:
            key = (alert["rule"], alert["minute_ms"])
            if key not in self.alerted:
                self.alerted.add(key)
                log.warning(
                    "ALERT %s: %d deaths in %s (threshold %g/min)",
                    alert["rule"],
                    alert["deaths"],
                    alert["minute"],
                    alert["threshold"],
                )
        if self.rules:
            text = "".join(json.dumps(a, sort_keys=True) + "\n" for a in found)
            write_bytes(self.spark, join(self.out, "alerts.jsonl"), text.encode())
        self.batches += 1
        total = sum(r["deaths"] for r in rows)
        log.info("batch %d: %d dead letters in %d minute groups", batch_id, total, len(rows))
        if not self.quiet:
            sys.stdout.write(console_table(rows))
            sys.stdout.flush()

    def drops(self, batch: DataFrame, batch_id: int) -> None:
        rows = batch.collect()
        if rows:
            self.spark.createDataFrame(rows, batch.schema).coalesce(1).write.mode("overwrite").parquet(
                join(self.out, "drops")
            )


def start_watch(
    spark: SparkSession,
    archive: str,
    out: str,
    *,
    checkpoint: str | None = None,
    rules: Sequence[AlertRule] = (),
    once: bool = False,
    interval: float = 10.0,
    max_files: int = 1000,
    quiet: bool = False,
) -> tuple[list[Any], _Batches]:
    """Start the two streaming queries; returns them (``awaitTermination`` / ``stop``) and the handler."""
    records = _stream(spark, archive, max_files)
    handler = _Batches(spark, out, rules, quiet)
    base = checkpoint or join(out, "_checkpoint")
    queries = []
    restore = fit_shuffle_partitions(spark)  # each query keeps a copy of the session's settings
    try:
        for name, frame, fn in (
            ("minutes", _minutes(records), handler.minutes),
            ("drops", _drops(records), handler.drops),
        ):
            writer = (
                frame.writeStream.outputMode("complete")
                .foreachBatch(fn)
                .option("checkpointLocation", join(base, name))
                .queryName(f"ottermq-dlq-watch-{name}")
            )
            if once:
                writer = writer.trigger(availableNow=True)
            else:
                writer = writer.trigger(processingTime=f"{interval} seconds")
            queries.append(writer.start())
    finally:
        restore()
    return queries, handler


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ottermq dlq watch",
        description="Per-minute dead-letter aggregates over a live archive (Spark Structured Streaming).",
    )
    parser.add_argument("archive", help="archive directory (local path or Hadoop URI)")
    parser.add_argument("--out", required=True, help="output directory: minutes/, drops/, alerts.jsonl")
    parser.add_argument("--checkpoint", help="checkpoint directory (default OUT/_checkpoint)")
    parser.add_argument(
        "--alert",
        action="append",
        default=[],
        metavar="RULE",
        help="e.g. 'reason=expired,queue=orders,rate>100/min' (repeatable)",
    )
    parser.add_argument("--interval", type=float, default=10.0, metavar="S", help="seconds between batches")
    parser.add_argument("--once", action="store_true", help="process the files there now, then exit")
    parser.add_argument("--max-files", type=int, default=1000, metavar="N", help="files per batch at most")
    add_spark_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Returns 0 when stopped (Ctrl-C, or ``--once`` done), 2 on bad input."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        rules = [parse_alert(text) for text in args.alert]
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    if is_local(args.archive) and not local_path(args.archive).is_dir():
        log.error("%s: no such directory", args.archive)  # before Spark starts
        return 2
    found, _ = preflight([args.archive])
    if found is not None and found.parts:
        log.info("%d .jsonl.part file(s) still being written: read once they are complete", found.parts)
    with spark_session("ottermq-dlq-watch", args.master, parse_conf(args.conf), args.verbose) as spark:
        queries, _handler = start_watch(
            spark,
            args.archive,
            args.out,
            checkpoint=args.checkpoint,
            rules=rules,
            once=args.once,
            interval=args.interval,
            max_files=args.max_files,
        )
        try:
            for query in queries:
                query.awaitTermination()
        except KeyboardInterrupt:
            log.info("stopping")
            for query in queries:
                query.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
