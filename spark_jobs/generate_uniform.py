"""The ``uniform`` shape of the synthetic archives: every record drawn on its own (schema 1).

The generator's first shape, kept for comparisons: :func:`uniform_record` draws one dead letter of
a queue of :data:`~ottermq.spark_jobs.generate_queues.QUEUES` at its place in the time span, with a
message id from a pool of ``n / 3`` (so ids repeat at random, across queues too), a geometric
``death_count`` unrelated to the other deaths of the same id, and an expiry at the message's
``expiration`` plus a small lateness or at the queue's TTL. :mod:`ottermq.spark_jobs.generate` calls
it record by record with each chunk's seeded ``random.Random``. Pure Python, no Spark.
"""

from __future__ import annotations

import math
import random
from typing import Any

from ottermq.spark_jobs.generate_queues import (
    BODY_LIMIT,
    CONTENT_TYPES,
    QUEUE_WEIGHTS,
    QUEUES,
    draw_body,
    draw_headers,
    draw_routing_keys,
    pick,
)

__all__ = ["uniform_record"]


def uniform_record(rng: random.Random, index: int, n: int, start_ms: int, span_ms: int) -> dict[str, Any]:
    """Record ``index`` of an ``n``-record archive of the uniform shape, at its place in the span."""
    queue = rng.choices(QUEUES, QUEUE_WEIGHTS)[0]
    time_ms = start_ms + (index * span_ms) // max(n, 1) + rng.randrange(0, max(span_ms // max(n, 1), 1))
    reason = pick(rng, queue.reasons)
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
    drop_reason = pick(rng, queue.outcome)
    death_count = 1
    while death_count < 25 and rng.random() < (0.55 if queue.name.endswith("retry") else 0.3):
        death_count += 1
    message_id: str | None = f"msg-{rng.randrange(0, max(n // 3, 10)):08d}" if rng.random() < 0.9 else None
    headers = draw_headers(rng, queue, reason, time_ms - in_queue, death_count, first_death_x_death=0.3)
    if headers is not None:
        headers["priority-hint"] = {"t": "b", "v": rng.randrange(-3, 4)}
    body_size, body_b64 = draw_body(rng)
    truncated = body_size > BODY_LIMIT
    keys = draw_routing_keys(rng, queue)
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
        "content_type": pick(rng, CONTENT_TYPES),
        "headers": headers,
        "body_size": body_size,
        "body_b64": body_b64,
        "body_truncated": truncated and body_b64 is not None,
    }
