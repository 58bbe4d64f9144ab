"""Expired messages at the head and the counts replies carry (RabbitMQ 3.10 ``drop_expired_msgs``).

RabbitMQ 3.10 rules pinned here:
    * Only the head is watched, but every operation that changes the head drops the expired messages it
      exposes there and then: ``basic.get`` (its get-ok ``message_count`` never includes them), a delivery
      to a consumer, a ``drop-head`` overflow (``maxlen`` dead letters first, then ``expired``), a requeue.
      With a DLX they are dead-lettered at that moment.
    * ``queue.declare`` (passive), ``queue.purge`` and ``queue.delete`` run no such check: a message that
      expired behind a live head is still counted by declare-ok, purge-ok and delete-ok; purge never
      dead-letters.
    * A message requeued past its deadline behind a live head stays (counted) until it reaches the head.
    * A priority queue expires in delivery order: an expired low-priority message behind a live
      high-priority head waits.

Waiting for a deadline without sleeping: after the messages under test, a probe with the same TTL goes to
a queue of its own and ``poll_until`` watches that queue empty (its head timer fired), so every earlier
deadline has passed too. Publishes are confirmed: on RabbitMQ ``queue.declare`` is prioritised over
unconfirmed publishes and could overtake them.

One case per rule runs here against both brokers; the variants are protocol tests with fake time where
time matters (tests/protocol/test_ttl.py).
"""

from __future__ import annotations

import pika


def publish(ch, q: str, body: bytes, expiration: str | None = None, priority: int | None = None) -> None:
    ch.basic_publish("", q, body, pika.BasicProperties(expiration=expiration, priority=priority))


def count(ch, q: str) -> int:
    return ch.queue_declare(q, passive=True).method.message_count


def past_deadline(ch, declare, poll_until, expiration: str = "50") -> None:
    """Return once a message published now with ``expiration`` has expired (see module docstring)."""
    probe = declare(ch, "probe")
    publish(ch, probe, b"probe", expiration)
    poll_until(lambda: count(ch, probe) == 0, timeout=3)


def death_reason(props) -> str:
    return props.headers["x-death"][0]["reason"]


def test_get_ok_count_excludes_expired_messages_behind_the_head(channel, poll_until, declare):
    channel.confirm_delivery()
    q = declare(channel)
    publish(channel, q, b"m1")
    publish(channel, q, b"m2", "50")
    past_deadline(channel, declare, poll_until)
    assert count(channel, q) == 2  # declare-ok drops nothing
    method, _, body = channel.basic_get(q, auto_ack=True)
    assert (body, method.message_count) == (b"m1", 0)
    assert channel.basic_get(q, auto_ack=True)[0] is None


def test_expired_message_is_dead_lettered_when_get_exposes_it(
    channel, poll_until, declare, with_dlq, expect_message
):
    channel.confirm_delivery()
    q, dlq = with_dlq(channel)
    publish(channel, q, b"m1")
    publish(channel, q, b"m2", "50")
    past_deadline(channel, declare, poll_until)
    assert (count(channel, q), count(channel, dlq)) == (2, 0)  # waiting behind the live head
    method, _, body = channel.basic_get(q, auto_ack=True)
    assert (body, method.message_count) == (b"m1", 0)
    _, props, body = expect_message(channel, dlq)
    assert (body, death_reason(props)) == (b"m2", "expired")
    assert props.headers["x-death"][0]["original-expiration"] == "50"


def test_purge_and_delete_count_expired_messages_behind_a_live_head(channel, poll_until, declare, with_dlq):
    channel.confirm_delivery()
    q, dlq = with_dlq(channel)
    for name in ("purge", "delete"):
        publish(channel, q, b"m1")
        publish(channel, q, b"m2", "50")
        past_deadline(channel, declare, poll_until)
        if name == "purge":
            assert channel.queue_purge(q).method.message_count == 2
        else:
            assert channel.queue_delete(q).method.message_count == 2
    assert count(channel, dlq) == 0  # neither dead-letters


def test_priority_queue_expires_in_delivery_order(channel, poll_until, declare, with_dlq, expect_message):
    channel.confirm_delivery()
    q, dlq = with_dlq(channel, **{"x-max-priority": 5})
    publish(channel, q, b"p0", "50", priority=0)
    publish(channel, q, b"p5", priority=5)  # the head now; p0's timer finds it live
    past_deadline(channel, declare, poll_until)
    assert (count(channel, q), count(channel, dlq)) == (2, 0)
    method, _, body = channel.basic_get(q, auto_ack=True)
    assert (body, method.message_count) == (b"p5", 0)
    _, props, body = expect_message(channel, dlq)
    assert (body, death_reason(props)) == (b"p0", "expired")
