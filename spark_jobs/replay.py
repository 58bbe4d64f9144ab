"""Replay dead letters: select a replay set from an archive, then republish it over AMQP.

``ottermq dlq select ARCHIVE --out SET [filters]`` writes a *replay set*::

    SET/manifest.json          filters, source, counts
    SET/data/*.parquet         the selected records (every schema field) plus ``replay_id``
    SET/replay-<UTC time>.jsonl   one log per publish run (written by ``ottermq dlq replay``)

Filters combine with AND; a repeated option matches any of its values. ``--header KEY=VALUE``
compares the header's value as JSON text (strings without quotes: ``--header tenant=acme``,
numbers and booleans as written: ``--header attempt=3``, ``--header urgent=true``);
``--header KEY`` only asks for the header to be there.

``ottermq dlq replay SET --url AMQP_URL --exchange X`` publishes each record in death order with
publisher confirms and ``mandatory`` set, rebuilding ``message_id``, ``correlation_id``,
``content_type`` and the headers (typed JSON decoded to pika values, see
:mod:`ottermq.spark_jobs.headers`); ``delivery_mode`` is 2 (persistent) unless ``--transient``.
Records without a body, or whose archived body was truncated, are skipped and counted. Every
record gets a log line (``confirmed``, ``nacked``, ``returned``, ``skipped_*``, ``failed``);
``--resume`` skips records an earlier run of the same set confirmed. ``replay_id`` is a hash of
the record, so it is stable across runs.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from ottermq.spark_jobs.headers import decode_headers
from ottermq.spark_jobs.io import Format, scan_archive
from ottermq.spark_jobs.schema import FIELDS, OUTCOMES, REASONS, SCHEMA_VERSION, headers_map
from ottermq.spark_jobs.session import add_spark_arguments, configure_logging, parse_conf, spark_session
from ottermq.spark_jobs.storage import (
    check_inputs,
    is_local,
    join,
    list_files,
    local_path,
    read_bytes,
    write_bytes,
)
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

__all__ = [
    "ReplayStats",
    "Selection",
    "message_properties",
    "parse_time",
    "publish_main",
    "publish_records",
    "select_main",
    "select_records",
    "with_replay_id",
    "write_replay_set",
]

log = logging.getLogger(__name__)

DEATH_HEADERS = frozenset(
    ["x-death"]
    + [f"x-{when}-death-{what}" for when in ("first", "last") for what in ("queue", "reason", "exchange")]
)


def parse_time(text: str) -> int:
    """Epoch ms from ``1714557600000`` or ISO 8601 (``2024-05-01``, ``2024-05-01T10:00:00+02:00``).

    A time without a zone is UTC.

    Raises:
        ValueError: neither form.
    """
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class Selection:
    """Which dead letters to replay; empty fields do not filter."""

    reasons: tuple[str, ...] = ()
    vhosts: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    outcomes: tuple[str, ...] = ()
    since_ms: int | None = None
    until_ms: int | None = None
    headers: tuple[tuple[str, str | None], ...] = ()
    where: str | None = None
    limit: int | None = None

    def condition(self) -> Column:
        """The filter as one Column (``True`` when nothing is set)."""
        cond = F.lit(True)
        by_value = {
            "reason": self.reasons,
            "vhost": self.vhosts,
            "queue": self.queues,
            "outcome": self.outcomes,
        }
        for name, values in by_value.items():
            if values:
                cond = cond & F.col(name).isin(list(values))
        if self.since_ms is not None:
            cond = cond & (F.col("time_ms") >= self.since_ms)
        if self.until_ms is not None:
            cond = cond & (F.col("time_ms") < self.until_ms)
        for key, value in self.headers:
            entry = headers_map("headers").getItem(key)
            cond = cond & (entry.isNotNull() if value is None else (entry.getField("v") == value))
        if self.where:
            cond = cond & F.expr(self.where)
        return F.coalesce(cond, F.lit(False))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready description for the manifest."""
        out = asdict(self)
        out["headers"] = [{"key": k, "value": v} for k, v in self.headers]
        for name in ("since_ms", "until_ms"):
            if out[name] is not None:
                moment = datetime.datetime.fromtimestamp(out[name] / 1000, tz=datetime.UTC)
                out[name.replace("_ms", "")] = moment.isoformat(timespec="milliseconds")
        return out


def select_records(df: DataFrame, selection: Selection) -> DataFrame:
    """The records matching ``selection`` (first ``limit`` by ``time_ms`` when limited)."""
    selected = df.filter(selection.condition())
    if selection.limit is not None:
        selected = selected.orderBy("time_ms", _record_digest()).limit(selection.limit)
    return selected


def _record_digest() -> Column:
    return F.substring(F.sha2(F.to_json(F.struct(*[F.col(c) for c in FIELDS])), 256), 1, 24)


def with_replay_id(df: DataFrame) -> DataFrame:
    """Add ``replay_id``: 24 hex digits of a SHA-256 over the whole record (stable across runs)."""
    return df.withColumn("replay_id", _record_digest())


def write_replay_set(
    spark: SparkSession,
    archive: str | Sequence[str],
    out: str,
    selection: Selection,
    *,
    fmt: Format = "auto",
) -> dict[str, Any]:
    """Select from ``archive`` into the replay set ``out`` (replaced if it exists).

    Returns:
        The manifest (also written to ``out/manifest.json``).

    Raises:
        pyspark.errors.AnalysisException: the archive path does not exist, or ``--where`` is
            not valid SQL over the archive's columns.
    """
    scan = scan_archive(spark, archive, fmt=fmt)
    chosen = with_replay_id(select_records(scan.records, selection))
    data = join(out, "data")
    chosen.orderBy("time_ms", "replay_id").write.mode("overwrite").parquet(data)
    written = spark.read.parquet(data)
    stats = written.agg(
        F.count(F.lit(1)).alias("records"),
        F.sum(
            F.when(
                F.col("body_b64").isNotNull() & ~F.coalesce(F.col("body_truncated"), F.lit(False)), 1
            ).otherwise(0)
        ).alias("with_body"),
        F.min("time_ms").alias("first_ms"),
        F.max("time_ms").alias("last_ms"),
    ).first()
    assert stats is not None
    manifest = {
        "kind": "ottermq-dlq-replay-set",
        "archive_schema": SCHEMA_VERSION,
        "archive": archive if isinstance(archive, str) else list(archive),
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "filter": selection.as_dict(),
        "count": stats["records"],
        "with_body": stats["with_body"] or 0,
        "first_ms": stats["first_ms"],
        "last_ms": stats["last_ms"],
        "input": {k: v for k, v in scan.counts().items() if k != "bad_files"},
    }
    write_bytes(spark, join(out, "manifest.json"), json.dumps(manifest, indent=2).encode())
    log.info("replay set %s: %d records (%d with a body)", out, manifest["count"], manifest["with_body"])
    return manifest


# ------------------------------------------------------------------------------------------ publish


@dataclass
class ReplayStats:
    """Counts of one publish run."""

    confirmed: int = 0
    nacked: int = 0
    returned: int = 0
    skipped_no_body: int = 0
    skipped_truncated: int = 0
    skipped_done: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing nacked, returned or failed."""
        return not (self.nacked or self.returned or self.failed)


def message_properties(
    record: Mapping[str, Any], *, strip_death_headers: bool = False, delivery_mode: int = 2
) -> dict[str, Any]:
    """Keyword arguments for ``pika.BasicProperties`` rebuilt from an archive record.

    Raises:
        ValueError: the record's headers are not valid typed JSON.
    """
    headers = decode_headers(record.get("headers"))
    if headers is not None and strip_death_headers:
        headers = {k: v for k, v in headers.items() if k not in DEATH_HEADERS}
    props: dict[str, Any] = {"delivery_mode": delivery_mode}
    for name in ("message_id", "correlation_id", "content_type"):
        if record.get(name) is not None:
            props[name] = record[name]
    if headers is not None:
        props["headers"] = headers
    return props


def _identity(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: record.get(k) for k in ("replay_id", "time_ms", "vhost", "queue", "reason", "message_id")}


def publish_records(
    records: Iterable[Mapping[str, Any]],
    channel: Any,
    *,
    exchange: str,
    routing_key: str | None = None,
    rate: float = 0.0,
    done: frozenset[str] = frozenset(),
    log_file: IO[str] | None = None,
    strip_death_headers: bool = False,
    delivery_mode: int = 2,
    total: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ReplayStats:
    """Publish ``records`` on a pika ``BlockingChannel`` in confirm mode, one log line each.

    Args:
        records: archive records (dicts with ``replay_id``).
        channel: ``pika`` blocking channel with ``confirm_delivery()`` already called.
        exchange: target exchange.
        routing_key: fixed key, or None for each record's first routing key.
        rate: at most this many messages per second (0 = as fast as confirms come back).
        done: ``replay_id`` values to skip (confirmed by an earlier run).
        log_file: where the JSON Lines log goes.
        strip_death_headers: drop ``x-death`` and ``x-first/last-death-*``.
        delivery_mode: 2 persistent, 1 transient.
        total: records expected, for progress messages.
        clock: monotonic clock (tests).
        sleep: sleep function (tests).

    Returns:
        The counts; a connection or channel error stops the run and is counted as ``failed``.
    """
    import pika
    import pika.exceptions

    stats = ReplayStats()
    started = clock()
    last_progress = started
    sent = 0
    for record in records:
        key = routing_key if routing_key is not None else next(iter(record.get("routing_keys") or []), "")
        entry = {**_identity(record), "exchange": exchange, "routing_key": key, "published": False}
        status, error = "confirmed", None
        if record.get("replay_id") in done:
            status = "skipped_done"
        elif record.get("body_b64") is None:
            status = "skipped_no_body"
        elif record.get("body_truncated"):
            status = "skipped_truncated"
        else:
            if rate > 0:
                wait = started + sent / rate - clock()
                if wait > 0:
                    sleep(wait)
            try:
                props = pika.BasicProperties(
                    **message_properties(
                        record, strip_death_headers=strip_death_headers, delivery_mode=delivery_mode
                    )
                )
                body = base64.b64decode(record["body_b64"])
                entry["published"] = True
                sent += 1
                channel.basic_publish(exchange, key, body, props, mandatory=True)
            except ValueError as exc:  # bad headers or body in the record
                entry["published"] = False
                status, error = "failed", f"bad record: {exc}"
            except pika.exceptions.UnroutableError:
                status = "returned"
            except pika.exceptions.NackError:
                status = "nacked"
            except pika.exceptions.AMQPError as exc:
                status, error = "failed", f"{type(exc).__name__}: {exc}"
        setattr(stats, status, getattr(stats, status) + 1)
        entry["status"] = status
        entry["at"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        if error:
            entry["error"] = error
            stats.errors.append(error)
        if log_file is not None:
            log_file.write(json.dumps(entry) + "\n")
            log_file.flush()
        now = clock()
        if now - last_progress >= 2.0:
            last_progress = now
            done_n = sum(getattr(stats, s) for s in ("confirmed", "nacked", "returned", "failed"))
            log.info(
                "replayed %d%s (%.0f msg/s)",
                done_n,
                f"/{total}" if total else "",
                sent / max(now - started, 1e-9),
            )
        if status == "failed" and error and not error.startswith("bad record"):
            log.error("stopping: %s", error)
            break
    return stats


def _done_ids(spark: SparkSession, set_dir: str) -> frozenset[str]:
    done: set[str] = set()
    for file in list_files(spark, set_dir):
        name = file.rsplit("/", 1)[-1]
        if name.startswith("replay-") and name.endswith(".jsonl"):
            for line in read_bytes(spark, file).decode("utf-8", "replace").splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a run killed mid-line
                if entry.get("status") == "confirmed":
                    done.add(entry["replay_id"])
    return frozenset(done)


def _rows(df: DataFrame) -> Iterator[dict[str, Any]]:
    for row in df.orderBy("time_ms", "replay_id").toLocalIterator():
        yield row.asDict(recursive=True)


def select_main(argv: Sequence[str] | None = None) -> int:
    """``ottermq dlq select ARCHIVE --out SET [filters]``: returns the exit status (0 ok, 2 bad input)."""
    parser = argparse.ArgumentParser(
        prog="ottermq dlq select", description="Select dead letters into a replay set."
    )
    parser.add_argument("archive", nargs="+", help="archive path, URI, directory or glob (several allowed)")
    parser.add_argument("--out", required=True, help="replay set directory to create (replaced if it exists)")
    parser.add_argument("--reason", action="append", default=[], choices=REASONS)
    parser.add_argument("--vhost", action="append", default=[])
    parser.add_argument("--queue", action="append", default=[])
    parser.add_argument("--outcome", action="append", default=[], choices=OUTCOMES)
    parser.add_argument("--since", type=parse_time, help="ISO 8601 or epoch ms, inclusive")
    parser.add_argument("--until", type=parse_time, help="ISO 8601 or epoch ms, exclusive")
    parser.add_argument("--header", action="append", default=[], metavar="KEY[=VALUE]")
    parser.add_argument("--where", metavar="SQL", help="extra Spark SQL condition, e.g. 'death_count >= 3'")
    parser.add_argument("--limit", type=int, help="at most N records (the earliest)")
    parser.add_argument("--format", choices=("auto", "json", "parquet"), default="auto", help="input format")
    add_spark_arguments(parser)
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    headers = tuple((k, v if sep else None) for k, sep, v in (h.partition("=") for h in args.header))
    selection = Selection(
        reasons=tuple(args.reason),
        vhosts=tuple(args.vhost),
        queues=tuple(args.queue),
        outcomes=tuple(args.outcome),
        since_ms=args.since,
        until_ms=args.until,
        headers=headers,
        where=args.where,
        limit=args.limit,
    )
    from pyspark.errors import AnalysisException

    if not check_inputs(list(args.archive), log):  # before Spark starts
        return 2
    with spark_session("ottermq-dlq-select", args.master, parse_conf(args.conf), args.verbose) as spark:
        try:
            manifest = write_replay_set(spark, args.archive, args.out, selection, fmt=args.format)
        except AnalysisException as exc:
            log.error("%s", str(exc).splitlines()[0])
            return 2
    sys.stdout.write(
        f"replay set {args.out}: {manifest['count']:,} records, "
        f"{manifest['with_body']:,} with a replayable body\n"
    )
    return 0


def publish_main(argv: Sequence[str] | None = None) -> int:
    """``ottermq dlq replay SET --url URL --exchange X``: 0 all confirmed, 1 some not, 2 bad input."""
    parser = argparse.ArgumentParser(
        prog="ottermq dlq replay", description="Republish a replay set with publisher confirms."
    )
    parser.add_argument("set", help="replay set directory (from `ottermq dlq select`)")
    parser.add_argument("--url", required=True, help="AMQP URL, e.g. amqp://guest:guest@localhost:5672/%%2F")
    parser.add_argument("--exchange", required=True, help='target exchange ("" = default exchange)')
    parser.add_argument("--routing-key", help="fixed routing key (default: each record's first routing key)")
    parser.add_argument(
        "--rate", type=float, default=0.0, metavar="N", help="at most N messages/s (0 = unlimited)"
    )
    parser.add_argument(
        "--resume", action="store_true", help="skip records confirmed by earlier runs of this set"
    )
    parser.add_argument(
        "--strip-death-headers", action="store_true", help="drop x-death and x-*-death-* headers"
    )
    parser.add_argument("--transient", action="store_true", help="publish with delivery_mode 1 (default 2)")
    parser.add_argument("--log", help="replay log path (default SET/replay-<UTC time>.jsonl)")
    add_spark_arguments(parser)
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    try:
        import pika
    except ImportError:
        log.error("replay needs pika: pip install pika")
        return 2
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    log_uri = args.log or (
        join(args.set, f"replay-{stamp}.jsonl") if is_local(args.set) else f"replay-{stamp}.jsonl"
    )
    log_path = local_path(log_uri)
    problem = _check_target(pika, args.url, args.exchange)  # before Spark starts
    if problem is None and is_local(args.set) and not local_path(join(args.set, "manifest.json")).exists():
        problem = f"{args.set} is not a replay set (no manifest.json; make one with `ottermq dlq select`)"
    if problem:
        log.error("%s", problem)
        return 2

    with spark_session("ottermq-dlq-replay", args.master, parse_conf(args.conf), args.verbose) as spark:
        try:
            manifest = json.loads(read_bytes(spark, join(args.set, "manifest.json")))
        except (OSError, ValueError) as exc:
            log.error("%s is not a replay set (no readable manifest.json): %s", args.set, exc)
            return 2
        done = _done_ids(spark, args.set) if args.resume else frozenset()
        if done:
            log.info("resuming: %d records already confirmed", len(done))
        data = spark.read.parquet(join(args.set, "data"))
        try:
            connection = pika.BlockingConnection(pika.URLParameters(args.url))
        except pika.exceptions.AMQPError as exc:
            log.error("cannot connect to %s: %s", args.url, exc)
            return 2
        try:
            channel = connection.channel()
            channel.confirm_delivery()
            log.info(
                "replaying %d records to exchange %r, log %s",
                manifest.get("count", 0),
                args.exchange,
                log_path,
            )
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with log_path.open("a", encoding="utf-8") as log_file:
                stats = publish_records(
                    _rows(data),
                    channel,
                    exchange=args.exchange,
                    routing_key=args.routing_key,
                    rate=args.rate,
                    done=done,
                    log_file=log_file,
                    strip_death_headers=args.strip_death_headers,
                    delivery_mode=1 if args.transient else 2,
                    total=manifest.get("count"),
                )
        finally:
            if connection.is_open:
                connection.close()
    counts = {k: v for k, v in asdict(stats).items() if k != "errors"}
    sys.stdout.write("replay: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()) + f"\nlog: {log_path}\n")
    return 0 if stats.ok else 1


def _check_target(pika: Any, url: str, exchange: str) -> str | None:
    """Why replaying to ``exchange`` at ``url`` cannot work (the broker unreachable, the exchange
    missing), or None; checked with a passive declare before Spark starts."""
    try:
        connection = pika.BlockingConnection(pika.URLParameters(url))
    except pika.exceptions.AMQPError as exc:
        return f"cannot connect to {url}: {exc!r}"
    try:
        if exchange:
            connection.channel().exchange_declare(exchange, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        return f"exchange {exchange!r} cannot be used: {exc.reply_code} {exc.reply_text}"
    finally:
        if connection.is_open:
            connection.close()
    return None


def _main_script() -> int:
    # `spark-submit spark_jobs/replay.py select ...` / `... publish ...`
    argv = sys.argv[1:]
    if argv and argv[0] in ("select", "publish", "replay"):
        return select_main(argv[1:]) if argv[0] == "select" else publish_main(argv[1:])
    sys.stderr.write("usage: replay.py {select|publish} ...\n")
    return 2


if __name__ == "__main__":
    sys.exit(_main_script())
