"""Consumer timeouts (issue 15): a delivery not acknowledged in time closes its channel with RabbitMQ's
406 and its messages are requeued.

RabbitMQ 3.10 (what ``make conformance`` runs) has only the node-wide ``consumer_timeout``, checked once a
minute; the per-queue ``x-consumer-timeout`` argument and ``consumer-timeout`` policy key follow RabbitMQ
3.12's documentation. So these tests start their own ottermq with a short timeout and are extensions; the
close text is RabbitMQ's, byte for byte.

The node-wide timeout runs here end to end; acking in time, the queue argument, the policy, the lowest
timeout winning and the timeout off are protocol tests with fake time
(tests/protocol/test_consumer_timeout.py).
"""

from __future__ import annotations

import time
from typing import Any

import pika
import pytest

from .polling import poll_until

pytestmark = pytest.mark.extension

TEXT = (
    "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: {} ms. "
    "This timeout value can be configured, see consumers doc guide to learn more"
)


def wait_closed(conn: Any, channel: Any, within: float) -> pika.exceptions.ChannelClosedByBroker:
    """The broker's close of ``channel``, awaited for up to ``within`` seconds while driving ``conn``."""

    def closed() -> pika.exceptions.ChannelClosedByBroker | bool:
        try:
            conn.process_data_events(0.1)
        except pika.exceptions.ChannelClosedByBroker as exc:
            return exc
        return not channel.is_open

    got = poll_until(closed, timeout=within, interval=0, what="the broker to close the channel")
    if isinstance(got, pika.exceptions.ChannelClosedByBroker):
        return got
    reason = getattr(channel, "_closing_reason", None)
    if isinstance(reason, pika.exceptions.ChannelClosedByBroker):
        return reason
    pytest.fail(f"the channel was closed, but not by the broker: {reason!r}")


def held_delivery(b: Any, queue: str, arguments: dict[str, Any] | None = None) -> tuple[Any, Any, list[Any]]:
    """A connection whose channel 1 consumes one message from ``queue`` and never acks it."""
    conn = pika.BlockingConnection(b.params())
    channel = conn.channel()
    channel.queue_declare(queue, arguments=arguments)
    channel.basic_publish("", queue, b"slow")
    got: list[Any] = []
    channel.basic_consume(queue, lambda ch, m, p, body: got.append(m))

    def delivered() -> list[Any]:
        conn.process_data_events(0.05)
        return got

    poll_until(delivered, timeout=5, interval=0, what=f"the delivery from {queue}")
    return conn, channel, got


def test_node_timeout_closes_the_channel_and_requeues(broker_process):
    b = broker_process({"OTTERMQ_CONSUMER_TIMEOUT": "2s"}).start()
    conn, channel, _ = held_delivery(b, "ct.node")
    started = time.monotonic()
    closed = wait_closed(conn, channel, 8)
    assert time.monotonic() - started >= 1.0  # not before the timeout (2 s after the delivery)
    assert (closed.reply_code, closed.reply_text) == (406, TEXT.format(2000))
    other = pika.BlockingConnection(b.params()).channel()
    method, _props, body = other.basic_get("ct.node", auto_ack=True)
    assert body == b"slow" and method.redelivered
    conn.close()
