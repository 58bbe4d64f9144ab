"""The ``retry-loops`` shape of the synthetic archives (the default): messages that die again and again.

Each message has its own id (10 % have none) and most die once, but ~8 % are in a retry loop: they
die 2 to 6 times in the same queue with ``death_count`` 1, 2, ... k and gaps of seconds to minutes
(a loop through ``orders`` also dies in ``orders.retry`` each time, by its 5 s TTL), and ~5 % are
fanned out to 2 or 3 queues of their vhost. The reason mix of ``orders`` and ``payments`` drifts
over the span, and each death's ``limit``, ``limit_value`` and ``limit_source`` (schema 2) agree
with its reason and with its queue's settings here (argument, policy or operator policy).
:func:`loop_chunk` gives one chunk's records in time order; :mod:`ottermq.spark_jobs.generate`
seeds and writes them. Pure Python, no Spark.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from ottermq.spark_jobs.generate_queues import (
    BODY_LIMIT,
    CONTENT_TYPES,
    QUEUE_WEIGHTS,
    QUEUES,
    Queue,
    draw_body,
    draw_headers,
    draw_routing_keys,
    pick,
)

__all__ = ["loop_chunk"]


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
_BY_NAME = {q.name: q for q in QUEUES}
_BY_VHOST = {v: [q for q in QUEUES if q.vhost == v] for v in dict.fromkeys(q.vhost for q in QUEUES)}
_LOOP_SHARE, _FANOUT_SHARE = 0.08, 0.05


def _reasons_at(queue: Queue, frac: float) -> tuple[tuple[str, float], ...]:
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
    queue: Queue,
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
    drop_reason = pick(rng, queue.outcome)
    headers = draw_headers(rng, queue, reason, time_ms - in_queue, death_count)
    body_size, body_b64 = draw_body(rng)
    keys = draw_routing_keys(rng, queue)
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
        "content_type": pick(rng, CONTENT_TYPES),
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
) -> list[tuple[Queue, str, int, int]]:
    """One message's deaths as ``(queue, reason, time_ms, death_count)``, inside ``window``."""
    queue = rng.choices(QUEUES, QUEUE_WEIGHTS)[0]
    w0, w1 = window
    draw = rng.random()
    # offsets from the first death: (queue, reason or None = draw at that time, offset, death_count)
    plan: list[tuple[Queue, str | None, int, int]] = []
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
                chosen[q.name] = pick(rng, _reasons_at(q, (time_ms - start_ms) / max(span_ms, 1)))
            reason = chosen[q.name]
        out.append((q, reason, time_ms, count))
    return out


def loop_chunk(
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
