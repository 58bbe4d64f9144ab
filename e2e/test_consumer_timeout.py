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

pytestmark = pytest.mark.extension

TEXT = (
    "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: {} ms. "
    "This timeout value can be configured, see consumers doc guide to learn more"
)


def wait_closed(conn: Any, channel: Any, within: float) -> pika.exceptions.ChannelClosedByBroker:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            conn.process_data_events(0.1)
        except pika.exceptions.ChannelClosedByBroker as exc:
            return exc
        if not channel.is_open:
            break
    reason = getattr(channel, "_closing_reason", None)
    if isinstance(reason, pika.exceptions.ChannelClosedByBroker):
        return reason
    pytest.fail(f"channel not closed by the broker within {within} s")


def held_delivery(b: Any, queue: str, arguments: dict[str, Any] | None = None) -> tuple[Any, Any, list[Any]]:
    """A connection whose channel 1 consumes one message from ``queue`` and never acks it."""
    conn = pika.BlockingConnection(b.params())
    channel = conn.channel()
    channel.queue_declare(queue, arguments=arguments)
    channel.basic_publish("", queue, b"slow")
    got: list[Any] = []
    channel.basic_consume(queue, lambda ch, m, p, body: got.append(m))
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    assert got
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
