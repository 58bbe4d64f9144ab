"""The simulated broker behind the synthetic archives, and the parts of a dead letter both shapes draw alike.

A dozen queues in two vhosts (:data:`QUEUES`, loosely a service mesh with a retry topology), each
with its exchange and routing keys, a Zipf-like volume (:data:`QUEUE_WEIGHTS`), its own mix of
reasons, its dead-letter set-up (routed, or dropped for ``no_dlx``/``dlx_missing``/``no_route``/
``cycle``) and its TTL; and the draws every record makes from a seeded ``random.Random``: a weighted
choice (:func:`pick`), typed headers with ``x-death`` (:func:`draw_headers`), a log-normal body cut
to :data:`BODY_LIMIT` in the archive (:func:`draw_body`), routing keys (:func:`draw_routing_keys`)
and a content type (:data:`CONTENT_TYPES`). The shapes are in :mod:`ottermq.spark_jobs.generate_loops`
and :mod:`ottermq.spark_jobs.generate_uniform`; :mod:`ottermq.spark_jobs.generate` writes the archive.
Pure Python, no Spark.
"""

from __future__ import annotations

import base64
import datetime
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ottermq.spark_jobs.headers import encode_headers

__all__ = [
    "BODY_LIMIT",
    "CONTENT_TYPES",
    "QUEUES",
    "QUEUE_WEIGHTS",
    "Queue",
    "draw_body",
    "draw_headers",
    "draw_routing_keys",
    "pick",
]

BODY_LIMIT = 1024


@dataclass(frozen=True)
class Queue:
    """A simulated queue: its vhost and name, the exchange and routing keys its messages came by, its
    share of the deaths (``weight``), why they die (``reasons``, weighted), its dead-letter exchange
    and what becomes of its dead letters (``outcome``), and its TTL in ms (0: none)."""

    vhost: str
    name: str
    exchange: str
    keys: tuple[str, ...]
    weight: float
    reasons: tuple[tuple[str, float], ...]
    dlx: str | None
    outcome: tuple[tuple[str | None, float], ...]  # drop_reason (None = routed) and weight
    ttl_ms: int


QUEUES = (
    Queue(
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
    Queue(
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
    Queue(
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
    Queue(
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
    Queue(
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
    Queue(
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
    Queue("/", "audit", "", ("audit",), 3, (("rejected", 1),), "audit-dlx", (("dlx_missing", 100),), 0),
    Queue(
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
    Queue(
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
    Queue(
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
    Queue(
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
    Queue(
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
QUEUE_WEIGHTS = [q.weight for q in QUEUES]
CONTENT_TYPES = (("application/json", 60), ("text/plain", 15), ("application/octet-stream", 10), (None, 15))
_TYPES = (
    "OrderCreated",
    "OrderUpdated",
    "PaymentCaptured",
    "EmailRequested",
    "SmsRequested",
    "Click",
    "JobRun",
)


def pick(rng: random.Random, weighted: Sequence[tuple[Any, float]]) -> Any:
    """One value of ``(value, weight)`` pairs, drawn by weight."""
    return rng.choices([v for v, _ in weighted], [w for _, w in weighted])[0]


def draw_headers(
    rng: random.Random,
    queue: Queue,
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


def draw_body(rng: random.Random) -> tuple[int, str | None]:
    """``(body_size, body_b64)``: a log-normal size, the body kept (up to the limit) for 98 in 100."""
    body_size = int(math.exp(rng.gauss(5.0, 1.0)))
    body_b64: str | None = None
    if rng.random() < 0.98:
        body_b64 = base64.b64encode(rng.randbytes(min(body_size, BODY_LIMIT))).decode("ascii")
    return body_size, body_b64


def draw_routing_keys(rng: random.Random, queue: Queue) -> list[str]:
    """One of the queue's routing keys, and ``audit`` (a CC) beside it for 5 in 100."""
    keys = [rng.choice(queue.keys)]
    if rng.random() < 0.05:
        keys.append("audit")
    return keys
