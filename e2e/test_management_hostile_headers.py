"""Messages whose headers no listing expects, shown by the management API without a 500 (issue 38).

Headers nested 2,000 deep: RabbitMQ 3.10.8 takes such a message and its HTTP ``/get`` shows all 2,000
levels (measured). ottermq's table codec reads ``MAX_DEPTH`` (64) levels and keeps what is below as
octets, forwarded unchanged; the API shows those 64 levels and, below them, a text naming what is not
shown. Either way the answer is 200 with the message's other properties: the shared test. The dead-letter
views (ottermq's) and headers that do not decode at all (a raw client's table with an unknown field
type: RabbitMQ closes that publisher's connection, ottermq keeps the message) are extensions.
"""

from __future__ import annotations

import contextlib
import struct
import sys
from collections.abc import Iterator
from typing import Any

import pamqp.commands
import pika
import pytest

from .polling import poll_until
from .test_management_write import call, q

LEVELS = 2000
GET = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}


@contextlib.contextmanager
def deep_recursion() -> Iterator[None]:
    """pika encodes, and ``json`` decodes, nested tables recursively: 2,000 levels need room."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20 * LEVELS))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def deep_headers() -> dict[str, Any]:
    value: Any = "leaf"
    for _ in range(LEVELS):
        value = {"a": value}
    return {"d": value}


def nested_levels(value: Any) -> int:
    n = 0
    while isinstance(value, dict) and "a" in value:
        value, n = value["a"], n + 1
    return n


def publish_deep(channel, routing_key: str) -> None:
    props = pika.BasicProperties(headers=deep_headers(), delivery_mode=2)
    with deep_recursion():
        channel.basic_publish("", routing_key, b"deep", props)


def get_one(broker, queue: str) -> dict[str, Any]:
    with deep_recursion():
        status, _, got = call(broker, f"/api/queues/{q(broker.vhost)}/{q(queue)}/get", "POST", GET)
    assert status == 200, got
    [message] = got
    return dict(message)


def test_headers_nested_2000_deep_are_shown_by_http_get(broker, channel, declare):
    queue = declare(channel, "deep")
    publish_deep(channel, queue)
    message = get_one(broker, queue)
    assert (message["payload"], message["properties"]["delivery_mode"]) == ("deep", 2)
    assert nested_levels(message["properties"]["headers"]["d"]) >= 64  # RabbitMQ: 2,000; ottermq: 64
    with deep_recursion():  # and the message goes on as it came
        _method, props, body = channel.basic_get(queue, auto_ack=True)
        assert body == b"deep" and nested_levels(props.headers["d"]) == LEVELS


@pytest.mark.extension
def test_deep_headers_in_the_dead_letter_views(broker, channel, with_dlq):
    work, dlq = with_dlq(channel, **{"x-message-ttl": 1})
    publish_deep(channel, work)
    vh = q(broker.vhost)

    def listed() -> list[Any]:
        status, _, found = call(broker, "/api/dead-letters")
        assert status == 200, found
        return [item for item in found if item["name"] == dlq]

    [entry] = poll_until(listed, timeout=10)
    assert entry["reasons"] == {"expired": 1}
    status, _, page = call(broker, f"/api/dead-letters/{vh}/{q(dlq)}")
    assert status == 200, page
    [shown] = page["messages"]
    assert shown["deaths"][0]["reason"] == "expired" and shown["properties"]["delivery_mode"] == 2
    chain = shown["properties"]["headers"]["d"]
    assert nested_levels(chain) == 64
    bottom = chain
    while isinstance(bottom, dict):
        bottom = bottom["a"]
    assert bottom.startswith("(table nested too deep to show: "), bottom
    assert get_one(broker, dlq)["properties"]["headers"]["d"] == chain


def _frame(kind: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


@pytest.mark.extension
def test_headers_that_do_not_decode_break_no_listing(broker, raw_connect, declare, channel):
    """A raw client's headers table with an unknown field type ``Z`` (RabbitMQ closes that publisher's
    connection; ottermq keeps the message and forwards its octets as they came)."""
    queue = declare(channel, "malformed")
    conn = raw_connect(vhost=broker.vhost)
    conn.open_channel(1)
    table = b"\x01kZ\x00"  # key "k", field type "Z"
    stamp = 1_700_000_000
    props = (
        struct.pack(">HI", 0x2000 | 0x1000 | 0x0040, len(table)) + table + b"\x02" + struct.pack(">Q", stamp)
    )
    conn.send_frame(1, pamqp.commands.Basic.Publish(exchange="", routing_key=queue))
    conn.send(_frame(2, 1, struct.pack(">HHQ", 60, 0, 1) + props) + _frame(3, 1, b"x"))
    ok = conn.rpc(1, pamqp.commands.Queue.Declare(queue=queue, passive=True), pamqp.commands.Queue.DeclareOk)
    assert ok.message_count == 1
    vh = q(broker.vhost)
    for path in ("/api/queues", f"/api/queues/{vh}", "/api/dead-letters"):
        assert call(broker, path)[0] == 200, path
    status, _, shown = call(broker, f"/api/queues/{vh}/{q(queue)}")
    assert (status, shown["head_message_timestamp"]) == (200, stamp)
    status, _, page = call(broker, f"/api/dead-letters/{vh}/{q(queue)}")
    assert (status, page["dead_lettered"], page["messages"][0]["deaths"]) == (200, 0, [])
    properties = get_one(broker, queue)["properties"]
    assert (properties["delivery_mode"], properties["timestamp"]) == (2, stamp)
    assert properties["headers"].startswith("(headers not shown: malformed field table: unknown field type")
