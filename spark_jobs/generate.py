"""Deterministic synthetic dead-letter archives for tests and benchmarks.

``write_archive(root, n)`` writes ``n`` records in the broker's layout,
``root/YYYY-MM-DD/HH/deadletters-<chunk>-<seq>.jsonl``, spread evenly over ``span_hours``
from ``start_ms``. The same ``(n, seed, shape, schema, ...)`` always gives byte-identical files,
whatever ``workers`` is: records are generated in fixed chunks of :data:`CHUNK` each seeded from
``(seed, chunk)``, and each chunk's records lie in its own slice of the time span.

Distributions (loosely modelled on a service mesh with a retry topology): a dozen queues in two
vhosts with Zipf-like volumes, each with its own mix of reasons and dead-letter set-up
(routed, or dropped for ``no_dlx``/``dlx_missing``/``no_route``/``cycle``); log-normal
time in queue; expiries at the message's ``expiration`` plus a small lateness, or at the queue's
TTL; typed headers with ``x-death``; bodies of a few hundred bytes, cut to 1 KiB in the archive
above that.

Two shapes:

- ``retry-loops`` (the default, what real archives look like): each message has its own id (10 %
  have none) and most die once, but ~8 % are in a retry loop: they die 2 to 6 times in the same
  queue with ``death_count`` 1, 2, ... k and gaps of seconds to minutes between deaths (a loop
  through ``orders`` also dies in ``orders.retry`` each time, by its 5 s TTL), and ~5 % are
  fanned out: the same id dies in 2 or 3 queues of its vhost. A few single deaths carry a
  ``death_count`` above 1 (their earlier deaths predate the archive). The reason mix moves over
  the span: ``orders`` expires more and more (rising), ``payments`` hits its delivery limit less
  and less (falling). Schema 2 by default: ``limit``, ``limit_value`` and ``limit_source`` name
  the limit that killed each message, consistent with ``reason`` and with the queue's own
  settings (argument, policy or operator policy; a message's own ``expiration`` when it is the
  lower of the two TTLs); ``schema=1`` writes the same records without those three fields.
- ``uniform`` (the generator's first shape, kept for comparisons): schema 1, records drawn
  independently: ids from a pool of ``n / 3`` (so ids repeat at random, across queues too) and a
  geometric ``death_count`` unrelated to the other deaths of the same id.

Pure Python, no Spark: ``python -m ottermq.spark_jobs.generate OUT --records N [--shape uniform]``.
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

__all__ = ["CHUNK", "DEFAULT_START_MS", "SHAPES", "generate_records", "main", "write_archive", "write_jsonl"]

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


def _headers(
    rng: random.Random,
    queue: _Queue,
    reason: str,
    enqueued_ms: int,
    death_count: int,
    *,
    first_death_x_death: float = 0.0,
) -> dict[str, Any] | None:
    """A dead letter's encoded headers (three in four carry some): an ``x-death`` entry from its
    previous deaths, and on a first death with the chance ``first_death_x_death`` (a stale one)."""
    if rng.random() >= 0.75:
        return None
    plain: dict[str, Any] = {
        "x-message-type": rng.choice(_TYPES),
        "tenant": queue.vhost.strip("/") or "default",
        "attempt": death_count,
    }
    if death_count > 1 or (first_death_x_death and rng.random() < first_death_x_death):
        plain["x-death"] = [
            {
                "count": death_count - 1 or 1,
                "reason": reason,
                "queue": queue.name,
                "time": datetime.datetime.fromtimestamp(enqueued_ms // 1000, tz=datetime.UTC),
                "exchange": queue.exchange,
                "routing-keys": [queue.keys[0]],
            }
        ]
    return encode_headers(plain)


def _body(rng: random.Random) -> tuple[int, str | None]:
    """``(body_size, body_b64)``: a log-normal size, the body kept (up to the limit) for 98 in 100."""
    body_size = int(math.exp(rng.gauss(5.0, 1.0)))
    body_b64: str | None = None
    if rng.random() < 0.98:
        body_b64 = base64.b64encode(rng.randbytes(min(body_size, BODY_LIMIT))).decode("ascii")
    return body_size, body_b64


def _routing_keys(rng: random.Random, queue: _Queue) -> list[str]:
    keys = [rng.choice(queue.keys)]
    if rng.random() < 0.05:
        keys.append("audit")
    return keys


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
    headers = _headers(rng, queue, reason, time_ms - in_queue, death_count, first_death_x_death=0.3)
    if headers is not None:
        headers["priority-hint"] = {"t": "b", "v": rng.randrange(-3, 4)}
    body_size, body_b64 = _body(rng)
    truncated = body_size > BODY_LIMIT
    keys = _routing_keys(rng, queue)
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


# --- the retry-loops shape ----------------------------------------------------------------------------

SHAPES = ("retry-loops", "uniform")


@dataclass(frozen=True)
class _Limits:
    """A queue's limits in the retry-loops shape: where its TTL comes from, its length and delivery
    limits (``None``: none set), and the policy named in its records' ``policy`` field."""

    ttl_source: str
    maxlen: tuple[str, int, str] | None = None  # (max-length | max-length-bytes, value, source)
    delivery: tuple[int, str] | None = None  # (value, source)
    policy: str | None = None


_LIMITS = {
    "orders": _Limits("policy", delivery=(5, "argument"), policy="ttl-60s"),
    "orders.retry": _Limits("argument", delivery=(20, "argument")),
    "payments": _Limits("argument", delivery=(3, "policy"), policy="payments-limits"),
    "notifications.email": _Limits("operator-policy", policy="notify-dlx"),
    "notifications.sms": _Limits("argument", maxlen=("max-length", 10_000, "argument")),
    "events.buffer": _Limits(
        "argument", maxlen=("max-length-bytes", 8_388_608, "policy"), policy="events-cap"
    ),
    "audit": _Limits("argument"),
    "search.index": _Limits("policy", policy="search-ttl"),
    "jobs": _Limits("argument", delivery=(10, "argument")),
    "jobs.slow": _Limits("operator-policy"),
    "ingest": _Limits("argument", maxlen=("max-length", 5_000, "operator-policy")),
    "reports": _Limits("argument"),
}
_BY_NAME = {q.name: q for q in _QUEUES}
_BY_VHOST = {v: [q for q in _QUEUES if q.vhost == v] for v in dict.fromkeys(q.vhost for q in _QUEUES)}
_LOOP_SHARE, _FANOUT_SHARE = 0.08, 0.05


def _reasons_at(queue: _Queue, frac: float) -> tuple[tuple[str, float], ...]:
    """The queue's reason mix at ``frac`` (0..1) of the span: two queues drift, for trends to find."""
    if queue.name == "orders":
        return (("rejected", 6), ("expired", 1 + 8 * frac), ("delivery_limit", 1))
    if queue.name == "payments":
        return (("rejected", 5), ("delivery_limit", 0.5 + 5 * (1 - frac)), ("expired", 2))
    reasons = queue.reasons
    if queue.ttl_ms == 0:  # no TTL: its expiries would need every message to carry an expiration
        reasons = tuple((r, w) for r, w in reasons if r != "expired") or (("rejected", 1.0),)
    return reasons


def _death(
    rng: random.Random,
    queue: _Queue,
    reason: str,
    time_ms: int,
    death_count: int,
    message_id: str | None,
    schema: int,
) -> dict[str, Any]:
    """One dead letter of the retry-loops shape, its limit consistent with ``reason`` and the queue."""
    limits = _LIMITS[queue.name]
    original_expiration: str | None = None
    limit: tuple[str, int, str] | None = None
    if reason == "expired":
        own = None if queue.ttl_ms and rng.random() < 0.5 else rng.choice((1_000, 5_000, 30_000, 120_000))
        if own is not None:
            original_expiration = str(own)
        if own is None or (queue.ttl_ms and queue.ttl_ms < own):  # the queue's TTL is the lower one
            limit = ("message-ttl", queue.ttl_ms, limits.ttl_source)
        else:
            limit = ("expiration", own, "message")
        in_queue = (
            limit[1] + int(rng.expovariate(1 / 30)) + (rng.randrange(0, 5_000) if rng.random() < 0.02 else 0)
        )
    else:
        in_queue = int(math.exp(rng.gauss(6.5, 1.8)))
        if reason == "maxlen" and limits.maxlen is not None:
            limit = limits.maxlen
        elif reason == "delivery_limit" and limits.delivery is not None:
            limit = ("delivery-limit", *limits.delivery)
    drop_reason = _pick(rng, queue.outcome)
    headers = _headers(rng, queue, reason, time_ms - in_queue, death_count)
    body_size, body_b64 = _body(rng)
    keys = _routing_keys(rng, queue)
    record: dict[str, Any] = {
        "schema": schema,
        "time_ms": time_ms,
        "reason": reason,
        "vhost": queue.vhost,
        "queue": queue.name,
        "exchange": queue.exchange,
        "routing_keys": keys,
        "dlx": queue.dlx,
        "dlx_routing_key": None if queue.dlx is None or drop_reason is not None else keys[0],
        "policy": limits.policy,
        "outcome": "routed" if drop_reason is None else "dropped",
        "drop_reason": drop_reason,
        "death_count": death_count,
        "original_expiration": original_expiration,
        "enqueued_ms": time_ms - in_queue if rng.random() < 0.97 else None,
        "message_id": message_id,
        "correlation_id": f"corr-{rng.randrange(1 << 32):08x}" if rng.random() < 0.5 else None,
        "content_type": _pick(rng, _CONTENT_TYPES),
        "headers": headers,
        "body_size": body_size,
        "body_b64": body_b64,
        "body_truncated": body_size > BODY_LIMIT and body_b64 is not None,
    }
    if schema >= 2:
        record["limit"], record["limit_value"], record["limit_source"] = limit or (None, None, None)
    return record


def _message(
    rng: random.Random, window: tuple[int, int], start_ms: int, span_ms: int
) -> list[tuple[_Queue, str, int, int]]:
    """One message's deaths as ``(queue, reason, time_ms, death_count)``, inside ``window``."""
    queue = rng.choices(_QUEUES, _QUEUE_WEIGHTS)[0]
    w0, w1 = window
    draw = rng.random()
    # offsets from the first death: (queue, reason or None = draw at that time, offset, death_count)
    plan: list[tuple[_Queue, str | None, int, int]] = []
    if draw < _LOOP_SHARE:
        k = rng.randint(2, 6)
        reason = None
        offset = 0
        retry = _BY_NAME["orders.retry"]
        for count in range(1, k + 1):
            plan.append((queue, reason, offset, count))
            if queue.name == "orders":  # then it waits out orders.retry's TTL and comes back
                plan.append((retry, "expired", offset + retry.ttl_ms, count))
                offset += retry.ttl_ms + int(math.exp(rng.gauss(6.5, 1.5)))
            else:
                offset += int(rng.expovariate(1 / 60_000)) + 1_000
    elif draw < _LOOP_SHARE + _FANOUT_SHARE:
        others = [q for q in _BY_VHOST[queue.vhost] if q is not queue]
        for i, q in enumerate([queue, *rng.sample(others, min(len(others), rng.randint(1, 2)))]):
            plan.append((q, None, i * rng.randrange(0, 2_000), 1))
    else:
        count = 1 if rng.random() < 0.97 else rng.randint(2, 4)  # earlier deaths before the archive
        plan.append((queue, None, 0, count))
    total = max(offset for _, _, offset, _ in plan)
    room = max(w1 - w0, 1)
    if total > room // 2:  # squeeze the loop into the chunk's slice of time
        plan = [(q, r, offset * (room // 2) // total, c) for q, r, offset, c in plan]
        total = room // 2
    first = w0 + rng.randrange(0, max(room - total, 1))
    out = []
    chosen: dict[str, str] = {}  # a loop dies for the same reason each time (x-death counts per reason)
    for q, reason, offset, count in plan:
        time_ms = first + offset
        if reason is None:
            if q.name not in chosen:
                chosen[q.name] = _pick(rng, _reasons_at(q, (time_ms - start_ms) / max(span_ms, 1)))
            reason = chosen[q.name]
        out.append((q, reason, time_ms, count))
    return out


def _loop_chunk(
    rng: random.Random, chunk: int, first: int, last: int, n: int, start_ms: int, span_ms: int, schema: int
) -> list[dict[str, Any]]:
    """Records ``first`` to ``last`` of an ``n``-record archive of the retry-loops shape (one chunk)."""
    window = (start_ms + first * span_ms // max(n, 1), start_ms + last * span_ms // max(n, 1))
    deaths: list[tuple[int, int, dict[str, Any]]] = []
    seq = 0
    while len(deaths) < last - first:
        message_id = f"msg-{chunk:05d}-{seq:07d}" if rng.random() < 0.9 else None
        for queue, reason, time_ms, count in _message(rng, window, start_ms, span_ms):
            if len(deaths) < last - first:
                deaths.append(
                    (time_ms, len(deaths), _death(rng, queue, reason, time_ms, count, message_id, schema))
                )
        seq += 1
    deaths.sort(key=lambda d: (d[0], d[1]))
    return [record for _, _, record in deaths]


def generate_records(
    n: int,
    *,
    seed: int = 7,
    start_ms: int = DEFAULT_START_MS,
    span_hours: float = 24.0,
    first: int = 0,
    last: int | None = None,
    chunk_size: int = CHUNK,
    shape: str = "retry-loops",
    schema: int = 2,
) -> Iterator[dict[str, Any]]:
    """Records ``first`` to ``last`` (default ``n``) of an ``n``-record archive, in time order.

    The stream depends on ``(n, seed, start_ms, span_hours, chunk_size, shape, schema)`` only
    (``schema`` only for the ``retry-loops`` shape: ``uniform`` is schema 1).

    Raises:
        ValueError: an unknown shape or schema.
    """
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, not {shape!r}")
    if schema not in (1, 2):
        raise ValueError(f"schema must be 1 or 2, not {schema!r}")
    span_ms = int(span_hours * HOUR_MS)
    stop = n if last is None else min(last, n)
    index = first
    while index < stop:
        chunk = index // chunk_size
        rng = random.Random(seed * 1_000_003 + chunk)
        end = min((chunk + 1) * chunk_size, n)
        if shape == "retry-loops":
            records = _loop_chunk(rng, chunk, chunk * chunk_size, end, n, start_ms, span_ms, schema)
            yield from records[index - chunk * chunk_size : min(end, stop) - chunk * chunk_size]
        else:
            for skip in range(chunk * chunk_size, index):  # the same stream when starting mid-chunk
                _record(rng, skip, n, start_ms, span_ms)
            for i in range(index, min(end, stop)):
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
    shape: str
    schema: int


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
            shape=job.shape,
            schema=job.schema,
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
    shape: str = "retry-loops",
    schema: int = 2,
) -> list[Path]:
    """Write an ``n``-record archive under ``root`` in the broker's layout; return its files.

    ``workers`` processes write chunks of ``chunk_size`` records in parallel; the files' content
    does not depend on ``workers``. ``shape`` and ``schema``: see :func:`generate_records`.
    """
    list(generate_records(0, shape=shape, schema=schema))  # checks both before any process starts
    chunks = [
        _Job(str(root), chunk, n, seed, start_ms, span_hours, records_per_file, chunk_size, shape, schema)
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
    parser.add_argument(
        "--shape",
        choices=SHAPES,
        default="retry-loops",
        help="retry-loops: ids that die again and again and in several queues (default); uniform: the "
        "first generator's independent records",
    )
    parser.add_argument(
        "--schema", type=int, choices=(1, 2), default=2, help="archive schema of the retry-loops shape"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    files = write_archive(
        args.out,
        args.records,
        seed=args.seed,
        span_hours=args.span_hours,
        records_per_file=args.records_per_file,
        workers=args.workers,
        shape=args.shape,
        schema=args.schema,
    )
    log.info("wrote %d records in %d files under %s", args.records, len(files), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
