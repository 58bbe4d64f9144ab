"""Queue length limits: ``x-max-length``, ``x-max-length-bytes`` and the three ``x-overflow`` modes.

RabbitMQ 3.10 rules pinned here:
    * Only ready messages count; ``x-max-length-bytes`` counts body bytes only (not properties/headers).
    * ``drop-head`` (default) drops from the head -- dead-lettered as ``maxlen`` when the queue has a DLX,
      discarded otherwise. A message bigger than the byte limit pushes everything out, itself included.
      Requeueing into a full queue drops the head, which is the requeued message itself.
    * ``reject-publish`` refuses the new message: a confirming publisher gets ``basic.nack``, anyone else
      loses it silently; never dead-lettered, even with a DLX. When a fanout also reaches a queue with
      room, that queue gets the message and the publisher still gets a nack.
    * ``reject-publish-dlx`` nacks the new message *and* dead-letters it as ``maxlen``.

One case per rule runs here against both brokers; the variants are protocol tests
(tests/protocol/test_length_limits.py).
"""

from __future__ import annotations

import time

import pika
import pika.exceptions
import pytest

VHOST = "vhost '/'"


def dead_letters(ch, dlq: str, poll_until, n: int) -> list[tuple[bytes, list[tuple]]]:
    """Wait for ``n`` dead letters in ``dlq``, then check that no more follow for a short while."""
    got: list[tuple] = []

    def collect() -> bool:
        method, props, body = ch.basic_get(dlq, auto_ack=True)
        if method is not None:
            got.append((body, [(d["queue"], d["reason"], d["count"]) for d in props.headers["x-death"]]))
        return len(got) >= n

    if n:
        poll_until(collect, timeout=3)
    deadline = time.monotonic() + 0.05
    while time.monotonic() < deadline:
        assert ch.basic_get(dlq, auto_ack=True)[0] is None, "more dead letters than expected"
        time.sleep(0.01)
    return got


@pytest.fixture
def confirmed(channel):
    """The ``channel`` fixture in confirm mode: every publish is a round trip that reports nacks."""
    channel.confirm_delivery()
    return channel


def publish_all(ch, q: str, bodies: list[bytes], **props) -> list[str]:
    """Publish each body; on a confirming channel report ``ack``/``nack`` per message."""
    outcomes = []
    for body in bodies:
        try:
            ch.basic_publish("", q, body, pika.BasicProperties(**props))
            outcomes.append("ack")
        except pika.exceptions.NackError:
            outcomes.append("nack")
    return outcomes


# ---------------------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arguments, term",
    # every argument and type: tests/protocol/test_length_limits.py
    [({"x-max-length": -1}, "{value_negative,-1}"), ({"x-overflow": "bogus"}, "invalid_overflow")],
    ids=["max-length-negative", "overflow-bogus"],
)
def test_invalid_length_arguments_are_406(channel, unique, channel_error, arguments, term):
    q = unique("q")
    (key,) = arguments
    channel_error(
        lambda: channel.queue_declare(q, arguments=arguments),
        406,
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{q}' in {VHOST}: {term}",
    )


# ---------------------------------------------------------------------------------------------------------
# drop-head
# ---------------------------------------------------------------------------------------------------------
def test_max_length_drops_the_head_without_dlx(confirmed, declare, drain):
    q = declare(confirmed, **{"x-max-length": 2})
    assert publish_all(confirmed, q, [b"1", b"2", b"3"]) == ["ack"] * 3
    assert drain(confirmed, q) == [b"2", b"3"]


def test_drop_head_dead_letters_the_head_as_maxlen(confirmed, poll_until, with_dlq, drain):
    q, dlq = with_dlq(confirmed, **{"x-max-length": 2, "x-overflow": "drop-head"})
    publish_all(confirmed, q, [b"1", b"2", b"3", b"4"], expiration="60000")
    assert drain(confirmed, q) == [b"3", b"4"]
    dead = []
    for _ in range(2):
        _, props, body = poll_until(lambda: (got := confirmed.basic_get(dlq, auto_ack=True))[0] and got)
        dead.append((body, props.headers["x-death"][0]["reason"], props.headers["x-first-death-reason"]))
        assert props.expiration is None
        assert props.headers["x-death"][0]["original-expiration"] == "60000"
    assert dead == [(b"1", "maxlen", "maxlen"), (b"2", "maxlen", "maxlen")]


def test_max_length_bytes_counts_body_bytes_only(confirmed, poll_until, with_dlq, drain):
    q, dlq = with_dlq(confirmed, **{"x-max-length-bytes": 10})
    big_headers = {"h": "x" * 500}  # properties don't count
    publish_all(confirmed, q, [b"aaaa", b"bbbb", b"cc"], headers=big_headers)
    assert dead_letters(confirmed, dlq, poll_until, 0) == []  # exactly 10 bytes: fits
    publish_all(confirmed, q, [b"d"], headers=big_headers)
    assert drain(confirmed, q) == [b"bbbb", b"cc", b"d"]
    assert dead_letters(confirmed, dlq, poll_until, 1) == [(b"aaaa", [(q, "maxlen", 1)])]


def test_unacked_messages_do_not_count(confirmed, poll_until, with_dlq, drain):
    q, dlq = with_dlq(confirmed, **{"x-max-length": 1})
    publish_all(confirmed, q, [b"A"])
    method, _, _ = confirmed.basic_get(q)
    publish_all(confirmed, q, [b"B"])  # A is out for delivery: B fits
    assert confirmed.queue_declare(q, passive=True).method.message_count == 1
    assert dead_letters(confirmed, dlq, poll_until, 0) == []
    # requeueing A into the full queue puts it back at the head and drops the head: A itself
    confirmed.basic_nack(method.delivery_tag, requeue=True)
    assert dead_letters(confirmed, dlq, poll_until, 1) == [(b"A", [(q, "maxlen", 1)])]
    assert drain(confirmed, q) == [b"B"]


# ---------------------------------------------------------------------------------------------------------
# reject-publish / reject-publish-dlx
# ---------------------------------------------------------------------------------------------------------
def test_reject_publish_nacks_the_confirming_publisher(confirmed, poll_until, with_dlq, drain):
    q, dlq = with_dlq(confirmed, **{"x-max-length": 1, "x-overflow": "reject-publish"})
    assert publish_all(confirmed, q, [b"1", b"2", b"3"]) == ["ack", "nack", "nack"]
    assert drain(confirmed, q) == [b"1"]
    assert dead_letters(confirmed, dlq, poll_until, 0) == []  # never dead-lettered


def test_reject_publish_dlx_nacks_and_dead_letters_the_new_message(confirmed, poll_until, with_dlq, drain):
    q, dlq = with_dlq(confirmed, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    assert publish_all(confirmed, q, [b"1", b"2"]) == ["ack", "nack"]
    assert drain(confirmed, q) == [b"1"]
    assert dead_letters(confirmed, dlq, poll_until, 1) == [(b"2", [(q, "maxlen", 1)])]
