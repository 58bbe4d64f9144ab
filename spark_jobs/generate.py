"""Deterministic synthetic dead-letter archives (schema v1) for tests and benchmarks.

``write_archive(root, n)`` writes ``n`` records in the broker's layout,
``root/YYYY-MM-DD/HH/deadletters-<chunk>-<seq>.jsonl``, spread evenly over ``span_hours``
from ``start_ms``. The same ``(n, seed, ...)`` always gives byte-identical files, whatever
``workers`` is: records are generated in fixed chunks of :data:`CHUNK` each seeded from
``(seed, chunk)``.

Distributions (loosely modelled on a service mesh with a retry topology): a dozen queues in two
vhosts with Zipf-like volumes, each with its own mix of reasons and dead-letter set-up
(routed, or dropped for ``no_dlx``/``dlx_missing``/``no_route``/``cycle``); log-normal
time in queue; expiries at the message's ``expiration`` plus a small lateness, or at the queue's
TTL (then ``original_expiration`` is null); geometric ``death_count``; a pool of message ids
so that some ids die repeatedly; typed headers with ``x-death``; bodies of a few hundred bytes,
cut to 1 KiB in the archive above that.

Pure Python, no Spark: ``python -m ottermq.spark_jobs.generate OUT --records N``.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import logging
import math
import multiprocessing
import os
import random
import sys
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ottermq.spark_jobs.headers import encode_headers

__all__ = ["CHUNK", "DEFAULT_START_MS", "generate_records", "main", "write_archive", "write_jsonl"]

log = logging.getLogger(__name__)

CHUNK = 100_000
DEFAULT_START_MS = 1_714_521_600_000  # 2024-05-01T00:00:00Z
BODY_LIMIT = 1024
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class _Queue:
    vhost: str
    name: str
    exchange: str
    keys: tuple[str, ...]
    weight: float
    reasons: tuple[tuple[str, float], ...]
    dlx: str | None
    outcome: tuple[tuple[str | None, float], ...]  # drop_reason (None = routed) and weight
    ttl_ms: int


_QUEUES = (
    _Queue(
        "/",
        "orders",
        "orders",
        ("order.created", "order.updated"),
        30,
        (("rejected", 6), ("expired", 3), ("delivery_limit", 1)),
        "dlx",
        ((None, 95), ("no_route", 5)),
        60_000,
    ),
    _Queue(
        "/",
        "orders.retry",
        "retry",
        ("order.created",),
        18,
        (("expired", 8), ("delivery_limit", 2)),
        "orders",
        ((None, 97), ("cycle", 3)),
        5_000,
    ),
    _Queue(
        "/",
        "payments",
        "payments",
        ("payment.authorised", "payment.captured"),
        12,
        (("rejected", 5), ("delivery_limit", 3), ("expired", 2)),
        "dlx",
        ((None, 100),),
        120_000,
    ),
    _Queue(
        "/",
        "notifications.email",
        "notify",
        ("email.send",),
        9,
        (("expired", 9), ("rejected", 1)),
        "dlx",
        ((None, 90), ("no_route", 10)),
        30_000,
    ),
    _Queue(
        "/",
        "notifications.sms",
        "notify",
        ("sms.send",),
        6,
        (("expired", 7), ("maxlen", 3)),
        None,
        (("no_dlx", 100),),
        30_000,
    ),
    _Queue(
        "/",
        "events.buffer",
        "amq.topic",
        ("events.click", "events.view", "events.scroll"),
        8,
        (("maxlen", 9), ("expired", 1)),
        "dlx",
        ((None, 80), ("dlx_disabled", 20)),
        10_000,
    ),
    _Queue("/", "audit", "", ("audit",), 3, (("rejected", 1),), "audit-dlx", (("dlx_missing", 100),), 0),
    _Queue(
        "/",
        "search.index",
        "search",
        ("index.update",),
        4,
        (("rejected", 4), ("expired", 6)),
        "dlx",
        ((None, 100),),
        15_000,
    ),
    _Queue(
        "tenant-a",
        "jobs",
        "jobs",
        ("job.run",),
        5,
        (("delivery_limit", 5), ("rejected", 5)),
        "dlx",
        ((None, 100),),
        300_000,
    ),
    _Queue(
        "tenant-a",
        "jobs.slow",
        "jobs",
        ("job.run.slow",),
        2,
        (("expired", 10),),
        "dlx",
        ((None, 100),),
        900_000,
    ),
    _Queue(
        "tenant-b",
        "ingest",
        "ingest",
        ("ingest.csv", "ingest.json"),
        2,
        (("maxlen", 6), ("rejected", 4)),
        None,
        (("no_dlx", 100),),
        0,
    ),
    _Queue(
        "tenant-b",
        "reports",
        "reports",
        ("report.build",),
        1,
        (("expired", 5), ("rejected", 5)),
        "dlx",
        ((None, 100),),
        60_000,
    ),
)
_QUEUE_WEIGHTS = [q.weight for q in _QUEUES]
_CONTENT_TYPES = (("application/json", 60), ("text/plain", 15), ("application/octet-stream", 10), (None, 15))
_TYPES = (
    "OrderCreated",
    "OrderUpdated",
    "PaymentCaptured",
    "EmailRequested",
    "SmsRequested",
    "Click",
    "JobRun",
)


def _pick(rng: random.Random, weighted: Sequence[tuple[Any, float]]) -> Any:
    return rng.choices([v for v, _ in weighted], [w for _, w in weighted])[0]


def _record(rng: random.Random, index: int, n: int, start_ms: int, span_ms: int) -> dict[str, Any]:
    queue = rng.choices(_QUEUES, _QUEUE_WEIGHTS)[0]
    time_ms = start_ms + (index * span_ms) // max(n, 1) + rng.randrange(0, max(span_ms // max(n, 1), 1))
    reason = _pick(rng, queue.reasons)
    original_expiration: str | None = None
    if reason == "expired":
        if queue.ttl_ms and rng.random() < 0.5:
            in_queue = queue.ttl_ms + int(rng.expovariate(1 / 40))  # queue TTL, a few ms late
        else:
            expiration = rng.choice((1_000, 5_000, 30_000))
            original_expiration = str(expiration)
            in_queue = (
                expiration
                + int(rng.expovariate(1 / 25))
                + (rng.randrange(0, 5_000) if rng.random() < 0.02 else 0)
            )
    else:
        in_queue = int(math.exp(rng.gauss(6.5, 1.8)))  # median ~ 0.7 s, long tail
    enqueued_ms: int | None = time_ms - in_queue if rng.random() < 0.97 else None
    drop_reason = _pick(rng, queue.outcome)
    death_count = 1
    while death_count < 25 and rng.random() < (0.55 if queue.name.endswith("retry") else 0.3):
        death_count += 1
    message_id: str | None = f"msg-{rng.randrange(0, max(n // 3, 10)):08d}" if rng.random() < 0.9 else None
    headers: dict[str, Any] | None = None
    if rng.random() < 0.75:
        plain: dict[str, Any] = {
            "x-message-type": rng.choice(_TYPES),
            "tenant": queue.vhost.strip("/") or "default",
            "attempt": death_count,
        }
        if death_count > 1 or rng.random() < 0.3:
            plain["x-death"] = [
                {
                    "count": death_count - 1 or 1,
                    "reason": reason,
                    "queue": queue.name,
                    "time": datetime.datetime.fromtimestamp((time_ms - in_queue) // 1000, tz=datetime.UTC),
                    "exchange": queue.exchange,
                    "routing-keys": [queue.keys[0]],
                }
            ]
        headers = encode_headers(plain)
        headers["priority-hint"] = {"t": "b", "v": rng.randrange(-3, 4)}
    body_size = int(math.exp(rng.gauss(5.0, 1.0)))
    truncated = body_size > BODY_LIMIT
    body_b64: str | None = None
    if rng.random() < 0.98:
        body_b64 = base64.b64encode(rng.randbytes(min(body_size, BODY_LIMIT))).decode("ascii")
    keys = [rng.choice(queue.keys)]
    if rng.random() < 0.05:
        keys.append("audit")
    return {
        "schema": 1,
        "time_ms": time_ms,
        "reason": reason,
        "vhost": queue.vhost,
        "queue": queue.name,
        "exchange": queue.exchange,
        "routing_keys": keys,
        "dlx": queue.dlx,
        "dlx_routing_key": None if queue.dlx is None or rng.random() < 0.5 else "dead",
        "policy": None if queue.dlx is None or rng.random() < 0.5 else "dead-lettering",
        "outcome": "routed" if drop_reason is None else "dropped",
        "drop_reason": drop_reason,
        "death_count": death_count,
        "original_expiration": original_expiration,
        "enqueued_ms": enqueued_ms,
        "message_id": message_id,
        "correlation_id": f"corr-{rng.randrange(1 << 32):08x}" if rng.random() < 0.5 else None,
        "content_type": _pick(rng, _CONTENT_TYPES),
        "headers": headers,
        "body_size": body_size,
        "body_b64": body_b64,
        "body_truncated": truncated and body_b64 is not None,
    }


def generate_records(
    n: int,
    *,
    seed: int = 7,
    start_ms: int = DEFAULT_START_MS,
    span_hours: float = 24.0,
    first: int = 0,
    last: int | None = None,
    chunk_size: int = CHUNK,
) -> Iterator[dict[str, Any]]:
    """Records ``first`` to ``last`` (default ``n``) of an ``n``-record archive, in time order.

    The stream depends on ``(n, seed, start_ms, span_hours, chunk_size)`` only.
    """
    span_ms = int(span_hours * HOUR_MS)
    stop = n if last is None else min(last, n)
    index = first
    while index < stop:
        chunk = index // chunk_size
        rng = random.Random(seed * 1_000_003 + chunk)
        for skip in range(chunk * chunk_size, index):  # keep the stream identical when starting mid-chunk
            _record(rng, skip, n, start_ms, span_ms)
        for i in range(index, min((chunk + 1) * chunk_size, stop)):
            yield _record(rng, i, n, start_ms, span_ms)
        index = (chunk + 1) * chunk_size


def _hour_dir(time_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(time_ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d/%H")


def write_jsonl(path: Path, records: Iterable[dict[str, Any] | str]) -> int:
    """Write records (dicts, or raw lines written as given) to one JSON Lines file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(record if isinstance(record, str) else json.dumps(record, separators=(",", ":")))
            out.write("\n")
            count += 1
    return count


@dataclass(frozen=True)
class _Job:
    root: str
    chunk: int
    n: int
    seed: int
    start_ms: int
    span_hours: float
    per_file: int
    chunk_size: int


def _write_chunk(job: _Job) -> list[str]:
    files: list[str] = []
    current: tuple[str, Any] | None = None
    written = 0
    seq = 0
    try:
        for record in generate_records(
            job.n,
            seed=job.seed,
            start_ms=job.start_ms,
            span_hours=job.span_hours,
            first=job.chunk * job.chunk_size,
            last=(job.chunk + 1) * job.chunk_size,
            chunk_size=job.chunk_size,
        ):
            hour = _hour_dir(record["time_ms"])
            if current is None or current[0] != hour or written >= job.per_file:
                if current is not None:
                    current[1].close()
                path = Path(job.root) / hour / f"deadletters-{job.chunk:05d}-{seq:04d}.jsonl"
                path.parent.mkdir(parents=True, exist_ok=True)
                current = (hour, path.open("w", encoding="utf-8"))
                files.append(str(path))
                written = 0
                seq += 1
            current[1].write(json.dumps(record, separators=(",", ":")))
            current[1].write("\n")
            written += 1
    finally:
        if current is not None:
            current[1].close()
    return files


def write_archive(
    root: Path | str,
    n: int,
    *,
    seed: int = 7,
    start_ms: int = DEFAULT_START_MS,
    span_hours: float = 24.0,
    records_per_file: int = 50_000,
    workers: int = 1,
    chunk_size: int = CHUNK,
) -> list[Path]:
    """Write an ``n``-record archive under ``root`` in the broker's layout; return its files.

    ``workers`` processes write chunks of ``chunk_size`` records in parallel; the files' content
    does not depend on ``workers``.
    """
    chunks = [
        _Job(str(root), chunk, n, seed, start_ms, span_hours, records_per_file, chunk_size)
        for chunk in range((n + chunk_size - 1) // chunk_size)
    ]
    if workers > 1 and len(chunks) > 1:
        # spawn, not fork: a forked child would share (and at exit, close) the Spark gateway's
        # sockets when a SparkSession is open in this process
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=spawn) as pool:
            results = list(pool.map(_write_chunk, chunks))
    else:
        results = [_write_chunk(chunk) for chunk in chunks]
    return [Path(file) for files in results for file in files]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ottermq.spark_jobs.generate OUT --records N``: write a synthetic archive."""
    parser = argparse.ArgumentParser(
        prog="python -m ottermq.spark_jobs.generate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out", type=Path, help="archive root to create")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--span-hours", type=float, default=24.0)
    parser.add_argument("--records-per-file", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    files = write_archive(
        args.out,
        args.records,
        seed=args.seed,
        span_hours=args.span_hours,
        records_per_file=args.records_per_file,
        workers=args.workers,
    )
    log.info("wrote %d records in %d files under %s", args.records, len(files), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
