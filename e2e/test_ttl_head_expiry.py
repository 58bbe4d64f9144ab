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


def test_get_drops_the_expired_run_after_the_head_and_purge_counts_the_rest(channel, poll_until, declare):
    channel.confirm_delivery()
    q = declare(channel)
    for body, expiration in ((b"m1", None), (b"m2", "50"), (b"m3", "50"), (b"m4", None), (b"m5", "50")):
        publish(channel, q, body, expiration)
    past_deadline(channel, declare, poll_until)
    method, _, body = channel.basic_get(q, auto_ack=True)
    assert (body, method.message_count) == (b"m1", 2)  # m2, m3 dropped; live m4 hides expired m5
    assert channel.queue_purge(q).method.message_count == 2


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


def test_drop_head_overflow_then_dead_letters_the_expired_new_head(
    channel, poll_until, declare, with_dlq, expect_message
):
    channel.confirm_delivery()
    q, dlq = with_dlq(channel, **{"x-max-length": 2})
    publish(channel, q, b"m1")
    publish(channel, q, b"m2", "50")
    past_deadline(channel, declare, poll_until)
    publish(channel, q, b"m3")  # m1 leaves as maxlen, exposing the expired m2
    assert count(channel, q) == 1
    arrived = [expect_message(channel, dlq) for _ in range(2)]
    assert [(body, death_reason(props)) for _, props, body in arrived] == [
        (b"m1", "maxlen"),
        (b"m2", "expired"),
    ]
    method, _, body = channel.basic_get(q, auto_ack=True)
    assert (body, method.message_count) == (b"m3", 0)


def test_delivery_to_a_consumer_dead_letters_the_expired_new_head(
    connect, poll_until, declare, with_dlq, expect_message
):
    conn = connect()
    ch = conn.channel()
    ch.confirm_delivery()
    q, dlq = with_dlq(ch)
    for body, expiration in ((b"m1", None), (b"m2", "50"), (b"m3", None)):
        publish(ch, q, body, expiration)
    past_deadline(ch, declare, poll_until)
    ch.basic_qos(prefetch_count=1)
    got: list[bytes] = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(b))

    def delivered():
        conn.process_data_events(time_limit=0.02)
        return got

    assert poll_until(delivered) == [b"m1"]
    assert count(ch, q) == 1  # m3; m2 left when m1 was delivered
    _, props, body = expect_message(ch, dlq)
    assert (body, death_reason(props)) == (b"m2", "expired")


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


def test_expired_message_requeued_behind_a_live_head_stays_counted(
    connect, poll_until, declare, with_dlq, expect_message
):
    conn = connect()
    ch = conn.channel()
    ch.confirm_delivery()
    q, dlq = with_dlq(ch)
    publish(ch, q, b"m0")
    publish(ch, q, b"m1", "100")
    past = declare(ch, "probe")
    publish(ch, past, b"probe", "100")  # expires after m1 does
    publish(ch, q, b"m2")
    m0, _, _ = ch.basic_get(q)
    m1, _, _ = ch.basic_get(q)
    ch.basic_reject(m0.delivery_tag, requeue=True)  # m0 is the head again
    poll_until(lambda: count(ch, past) == 0, timeout=3)
    ch.basic_reject(m1.delivery_tag, requeue=True)  # expired, back behind m0
    poll_until(lambda: count(ch, q) == 3)
    assert count(ch, dlq) == 0
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert (body, method.message_count, method.redelivered) == (b"m0", 1, True)
    _, props, body = expect_message(ch, dlq)
    assert (body, death_reason(props)) == (b"m1", "expired")
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert (body, method.message_count) == (b"m2", 0)


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
