"""Message TTL: ``expiration`` and ``x-message-ttl`` validation, deadlines, requeue and expiry timing.

RabbitMQ 3.10 rules pinned here:
    * A message's deadline is fixed when it is enqueued: ``min(x-message-ttl, expiration)`` from then on.
      Requeueing (nack/reject/channel close) keeps it; a message requeued after its deadline is
      dead-lettered as ``expired`` instead of being redelivered. Delivered-but-unacked messages never expire.
    * TTL 0 means "deliver now or never": a waiting consumer gets the message, otherwise it expires at once.
    * Only the head of a queue is watched: the head is dead-lettered on time even with no consumer, but a
      short-lived message behind a longer-lived head waits until it reaches the head.
      (``x-ottermq-exact-ttl: true`` is ottermq's opt-in to expire every message at its own deadline.)

Timing: ``t0`` is taken *before* a publish, so a deadline is never earlier than ``t0 + TTL`` and lower
bounds are strict (a TTL that is ignored or cut short fails them). Upper bounds are generous (seconds: a
loaded 2-core machine must not fail them) or relative to another observable moment; where the difference
to catch is "on time" vs "much later", the later alternative is made many seconds long. Windows in which
something must *not* happen are bounded waits that end well before anything may happen.

One case per rule runs here against both brokers; the variants are protocol tests with fake time where
time matters (tests/protocol/test_ttl.py).
"""

from __future__ import annotations

import time
from datetime import datetime

import pika
import pytest

from .polling import poll_until

VHOST = "vhost '/'"


# ---------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------
def death(props) -> tuple:
    d = props.headers["x-death"][0]
    return d["queue"], d["reason"], d["count"]


def publish(ch, q: str, body: bytes, expiration: str | None = None, **props) -> float:
    """Publish; returns ``time.monotonic()`` taken just before (the deadline is at least TTL later)."""
    t0 = time.monotonic()
    ch.basic_publish("", q, body, pika.BasicProperties(expiration=expiration, **props))
    return t0


# ---------------------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "expiration, term",
    # every form: tests/protocol/test_ttl.py
    [("-1", "{value_negative,-1}"), ("1.5", '{leftover_string,".5"}'), ("", "no_integer")],
    ids=["negative", "fractional", "empty"],
)
def test_invalid_expiration_closes_channel_406(channel, channel_error, expiration, term, declare):
    q = declare(channel)
    channel_error(
        lambda: (publish(channel, q, b"m", expiration), channel.queue_declare(q, passive=True)),
        406,
        f"PRECONDITION_FAILED - invalid expiration '{expiration}': {term}",
    )


@pytest.mark.parametrize("expiration", ["+60000"])  # "007", the maximum: tests/protocol/test_ttl.py
def test_unusual_but_valid_expirations_are_accepted(channel, expiration, declare):
    q = declare(channel)
    publish(channel, q, b"m", expiration)
    method, props, body = channel.basic_get(q, auto_ack=True)
    assert (body, props.expiration) == (b"m", expiration)  # forwarded verbatim


@pytest.mark.parametrize(
    "value, term",
    # decimal, too large: tests/protocol/test_ttl.py
    [(-1, "{value_negative,-1}"), ("100", '"expected integer, got longstr"')],
    ids=["negative", "string"],
)
def test_invalid_x_message_ttl_is_406_at_declare(channel, unique, channel_error, value, term):
    q = unique("q")
    channel_error(
        lambda: channel.queue_declare(q, arguments={"x-message-ttl": value}),
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue '{q}' in {VHOST}: {term}",
    )


# ---------------------------------------------------------------------------------------------------------
# effective TTL and expiry timing
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "queue_ttl, expiration",
    [(100, "10000"), (10000, "100")],
    ids=["queue-ttl-lower", "message-expiration-lower"],
)
def test_effective_ttl_is_the_lower_of_queue_ttl_and_expiration(
    channel, queue_ttl, expiration, with_dlq, expect_message
):
    q, dlq = with_dlq(channel, **{"x-message-ttl": queue_ttl})
    t0 = publish(channel, q, b"m", expiration)
    _, props, body = expect_message(channel, dlq, timeout=5)
    elapsed = time.monotonic() - t0
    assert body == b"m" and death(props) == (q, "expired", 1)
    assert 0.095 <= elapsed < 5  # ~100 ms, nowhere near 10 s
    assert props.expiration is None
    assert props.headers["x-death"][0]["original-expiration"] == expiration


def test_head_expires_promptly_without_consumer(channel, with_dlq, drain, expect_message):
    q, dlq = with_dlq(channel, **{"x-message-ttl": 200})
    t0 = publish(channel, q, b"m")
    _, props, _ = expect_message(channel, dlq, timeout=4)  # a timer, not a lazy check
    elapsed = time.monotonic() - t0
    assert elapsed >= 0.195
    assert "original-expiration" not in props.headers["x-death"][0]
    assert drain(channel, q) == []


def test_short_ttl_behind_longer_head_waits_for_the_head(channel, with_dlq, expect_message, nothing_for):
    """RabbitMQ only expires from the head: the 50 ms message leaves with the 1 s head."""
    q, dlq = with_dlq(channel)
    t0 = publish(channel, q, b"long", "1000")
    publish(channel, q, b"short", "50")
    nothing_for(channel, dlq, 0.3)  # "short" is long past its deadline, but not at the head
    _, _, first = expect_message(channel, dlq)
    _, _, second = expect_message(channel, dlq)
    assert (first, second) == (b"long", b"short")
    assert time.monotonic() - t0 >= 0.995


@pytest.mark.extension
def test_exact_ttl_expires_every_message_at_its_own_deadline(channel, with_dlq, expect_message):
    """ottermq's ``x-ottermq-exact-ttl``: a message expires on time wherever it sits in the queue."""
    q, dlq = with_dlq(channel, **{"x-ottermq-exact-ttl": True})
    t0 = publish(channel, q, b"long", "10000")
    publish(channel, q, b"short", "50")
    _, props, body = expect_message(channel, dlq, timeout=5)
    assert body == b"short" and death(props) == (q, "expired", 1)
    assert 0.045 <= time.monotonic() - t0 < 5  # on time, not with the 10 s head
    assert channel.queue_declare(q, passive=True).method.message_count == 1  # "long" is still there


# ---------------------------------------------------------------------------------------------------------
# deadlines across delivery and requeue
# ---------------------------------------------------------------------------------------------------------
def test_unacked_messages_never_expire(channel, with_dlq, drain, nothing_for):
    q, dlq = with_dlq(channel, **{"x-message-ttl": 100})
    publish(channel, q, b"m")
    method, _, _ = channel.basic_get(q)
    nothing_for(channel, dlq, 0.3)  # three TTLs later, still ours
    channel.basic_ack(method.delivery_tag)
    nothing_for(channel, dlq, 0.05)
    assert drain(channel, q) == []


@pytest.mark.parametrize("op", ["reject", "close"])  # nack, recover: tests/protocol/test_ttl.py
def test_message_requeued_after_its_deadline_is_dead_lettered_as_expired(
    connect, op, with_dlq, drain, expect_message, nothing_for
):
    conn = connect()
    ch = conn.channel()
    q, dlq = with_dlq(ch, **{"x-message-ttl": 100})
    ch.confirm_delivery()  # in the queue before the other channel's basic.get
    publish(ch, q, b"m")
    holder = conn.channel()
    method, _, _ = holder.basic_get(q)
    nothing_for(ch, dlq, 0.2)  # past the deadline while unacked
    if op == "close":
        holder.close()
    else:
        getattr(holder, f"basic_{op}")(method.delivery_tag, requeue=True)
    _, props, body = expect_message(ch, dlq)
    assert body == b"m" and death(props) == (q, "expired", 1)
    assert drain(ch, q) == []  # never redelivered


def test_requeue_keeps_the_original_deadline(channel, with_dlq, expect_message, nothing_for):
    q, dlq = with_dlq(channel, **{"x-message-ttl": 1000})
    t0 = publish(channel, q, b"m")
    method, _, _ = channel.basic_get(q)
    nothing_for(channel, dlq, 0.6)  # unacked: it cannot expire meanwhile, however late this ends
    rejected = time.monotonic()
    channel.basic_reject(method.delivery_tag, requeue=True)  # ~400 ms left, not a fresh 1000
    _, props, body = expect_message(channel, dlq)
    arrived = time.monotonic()
    assert body == b"m" and death(props) == (q, "expired", 1)
    assert arrived - t0 >= 0.995  # not before the original deadline
    assert arrived < rejected + 1.0  # a fresh TTL from the requeue would come after this


@pytest.mark.parametrize("where", ["message"])  # x-message-ttl 0 too: tests/protocol/test_ttl.py
def test_ttl_zero_is_delivered_to_a_waiting_consumer(connect, where, with_dlq, drain):
    conn = connect()
    ch = conn.channel()
    args = {"x-message-ttl": 0} if where == "queue" else {}
    q, dlq = with_dlq(ch, **args)
    got: list[bytes] = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    publish(ch, q, b"now", "0" if where == "message" else None)

    def arrived() -> list[bytes]:
        conn.process_data_events(time_limit=0.02)
        return got

    poll_until(arrived, timeout=3, interval=0, what=f"the delivery from {q}")
    assert got == [b"now"]
    assert drain(ch, dlq) == []


@pytest.mark.parametrize("where", ["queue"])  # expiration "0" too: tests/protocol/test_ttl.py
def test_ttl_zero_without_consumer_expires_at_once(channel, where, with_dlq, drain, expect_message):
    args = {"x-message-ttl": 0} if where == "queue" else {}
    q, dlq = with_dlq(channel, **args)
    t0 = publish(channel, q, b"never", "0" if where == "message" else None)
    _, props, body = expect_message(channel, dlq, timeout=3)
    assert body == b"never" and death(props) == (q, "expired", 1)
    assert time.monotonic() - t0 < 2  # at once: no timer of any length involved
    assert drain(channel, q) == []


# ---------------------------------------------------------------------------------------------------------
# the classic example: a work queue with a TTL and a dead-letter queue
# ---------------------------------------------------------------------------------------------------------
def test_work_queue_ttl_dead_letters_into_dlq(connect, unique):
    """Work queue with x-message-ttl and x-dead-letter-exchange; a consumer on the DLQ reads x-death."""
    conn = connect()
    ch = conn.channel()
    dlx, dlq = unique("dlx"), unique("dlq")
    ch.exchange_declare(dlx, "direct")
    ch.queue_declare(dlq)
    work = unique("work")
    ch.queue_bind(dlq, dlx, routing_key=work)  # no DLRK: the original routing key is used
    ch.queue_declare(work, arguments={"x-message-ttl": 200, "x-dead-letter-exchange": dlx})

    got: list[tuple] = []
    ch.basic_consume(dlq, lambda c, m, p, b: (got.append((m, p, b)), c.basic_ack(m.delivery_tag)))
    ch.basic_publish("", work, b"job-1", pika.BasicProperties(content_type="text/plain", delivery_mode=2))

    def arrived():
        conn.process_data_events(time_limit=0.02)
        return got

    method, props, body = poll_until(arrived, timeout=3)[0]
    assert (body, method.exchange, method.routing_key) == (b"job-1", dlx, work)
    assert (props.content_type, props.delivery_mode) == ("text/plain", 2)
    (entry,) = props.headers["x-death"]
    assert {k: v for k, v in entry.items() if k != "time"} == {
        "count": 1,
        "reason": "expired",
        "queue": work,
        "exchange": "",
        "routing-keys": [work],
    }
    assert isinstance(entry["time"], datetime)
    assert abs(entry["time"].timestamp() - time.time()) < 30
    assert props.headers["x-first-death-queue"] == work
    assert props.headers["x-first-death-reason"] == "expired"
    assert props.headers["x-first-death-exchange"] == ""
