"""Queue expiry (``x-expires``): unused queues are deleted after the period.

RabbitMQ 3.10 rules pinned here:
    * "Unused" means no consumers and no ``basic.get``/``queue.declare`` (passive or not) for the period;
      each of those restarts the timer, publishing does not, and unacknowledged messages from a
      ``basic.get`` do not keep the queue alive.
    * While it has consumers the queue never expires; the timer starts again when the last one goes.
    * An expiring queue's messages are discarded, never dead-lettered.

Whether the queue still exists is probed with a mandatory publish on a confirming channel (an unroutable
message comes back as ``basic.return``): a publish is the one operation that does not restart the timer,
whereas a passive declare would.

One case per rule runs here against both brokers; the variants are protocol tests with fake time where
time matters (tests/protocol/test_queue_expiry.py).
"""

from __future__ import annotations

import time

import pika
import pika.exceptions
import pytest

VHOST = "vhost '/'"


@pytest.fixture
def exists(connect):
    """``exists(queue) -> bool`` without touching the queue's expiry timer."""
    ch = connect().channel()
    ch.confirm_delivery()

    def _exists(queue: str) -> bool:
        try:
            ch.basic_publish("", queue, b"probe", mandatory=True)
        except pika.exceptions.UnroutableError:
            return False
        return True

    return _exists


def expire_time(exists, queue: str, poll_until, t0: float, timeout: float = 3) -> float:
    """Seconds from ``t0`` until ``queue`` is gone."""
    poll_until(lambda: not exists(queue), timeout=timeout, interval=0.02)
    return time.monotonic() - t0


def keep_touching(seconds: float, interval: float, touch, alive) -> None:
    """Call ``touch()`` every ``interval`` for ``seconds``; ``alive()`` must hold throughout."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        touch()
        assert alive()
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, term",
    # negative, too large: tests/protocol/test_queue_expiry.py
    [(0, "{value_zero,0}"), ("100", '"expected integer, got longstr"')],
    ids=["zero", "string"],
)
def test_invalid_x_expires_is_406(channel, unique, channel_error, value, term):
    q = unique("q")
    channel_error(
        lambda: channel.queue_declare(q, arguments={"x-expires": value}),
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-expires' for queue '{q}' in {VHOST}: {term}",
    )


# ---------------------------------------------------------------------------------------------------------
# what counts as use
# ---------------------------------------------------------------------------------------------------------
def test_unused_queue_is_deleted_after_the_period(channel, unique, poll_until, exists):
    q = unique("q")
    t0 = time.monotonic()
    channel.queue_declare(q, arguments={"x-expires": 200})
    assert 0.18 <= expire_time(exists, q, poll_until, t0) <= 1.2


@pytest.mark.parametrize("touch", ["basic.get"])  # declares too: tests/protocol/test_queue_expiry.py
def test_get_and_redeclare_restart_the_timer(channel, unique, poll_until, exists, touch):
    q = unique("q")
    args = {"x-expires": 500}  # touched every 50 ms: 450 ms of slack for a loaded machine
    channel.queue_declare(q, arguments=args)
    ops = {
        "basic.get": lambda: channel.basic_get(q, auto_ack=True),
        "passive declare": lambda: channel.queue_declare(q, passive=True),
        "declare": lambda: channel.queue_declare(q, arguments=args),
    }
    keep_touching(1.1, 0.05, ops[touch], lambda: exists(q))  # more than twice the period
    t0 = time.monotonic()
    assert 0.25 <= expire_time(exists, q, poll_until, t0) <= 2.5


def test_consumers_keep_the_queue_alive(connect, unique, poll_until, exists):
    conn = connect()
    ch = conn.channel()
    q = unique("q")
    ch.queue_declare(q, arguments={"x-expires": 100})
    tag = ch.basic_consume(q, lambda c, m, p, b: c.basic_ack(m.delivery_tag))
    deadline = time.monotonic() + 0.35
    while time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.02)
    assert exists(q)
    t0 = time.monotonic()
    ch.basic_cancel(tag)  # the period starts again now
    assert 0.08 <= expire_time(exists, q, poll_until, t0) <= 1.1


# ---------------------------------------------------------------------------------------------------------
# what happens to the messages
# ---------------------------------------------------------------------------------------------------------
def test_messages_of_an_expired_queue_are_not_dead_lettered(channel, unique, poll_until, exists, nothing_for):
    dlq = unique("dlq")
    channel.queue_declare(dlq)
    q = unique("q")
    channel.queue_declare(
        q, arguments={"x-expires": 150, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
    )
    channel.confirm_delivery()
    for i in range(3):
        channel.basic_publish("", q, b"m%d" % i)
    expire_time(exists, q, poll_until, time.monotonic())
    nothing_for(channel, dlq, 0.2)
    assert channel.queue_declare(dlq, passive=True).method.message_count == 0
