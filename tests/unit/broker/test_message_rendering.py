"""How the management API shows a message's properties and field values: total, never an exception.

A message reaches a listing from any client: headers nested 2,000 deep (RabbitMQ shows every level),
a headers table that does not decode at all (a raw client's; RabbitMQ closes that publisher's
connection, ottermq keeps and forwards it), values of types JSON has no word for. Each renders as
something, and the other properties of the message are still shown.
"""

from __future__ import annotations

import datetime
import json
import struct
from decimal import Decimal
from typing import Any

import pytest
from ottermq.amqp.table import MAX_DEPTH, Float, Long, LongStr, RawField, Timestamp, encode_table
from ottermq.broker.management.common import MAX_SHOWN_DEPTH, json_value
from ottermq.broker.management.messages import properties_json
from ottermq.broker.management.queues import head_timestamp
from ottermq.vhost.arguments import parse_queue_args
from ottermq.vhost.message import Message
from ottermq.vhost.queue import Queue
from pamqp import commands

HEADERS, DELIVERY_MODE, TIMESTAMP = 0x2000, 0x1000, 0x0040


def deep_table(levels: int) -> bytes:
    """A headers table ``{"d": {"a": {"a": ... "leaf"}}}`` with ``levels`` tables below ``d``, built by
    hand (no encoder recursion)."""
    inner = b"S" + struct.pack(">I", 4) + b"leaf"
    for _ in range(levels):
        body = b"\x01a" + inner
        inner = b"F" + struct.pack(">I", len(body)) + body
    body = b"\x01d" + inner
    return struct.pack(">I", len(body)) + body


def raw_props(flags: int, *fields: bytes) -> bytes:
    return struct.pack(">H", flags) + b"".join(fields)


def depth_of(value: Any) -> int:
    n = 0
    while isinstance(value, dict):
        value, n = value["a"], n + 1
    return n


def test_headers_2000_deep_are_shown_to_the_codecs_depth_and_the_rest_named():
    props = raw_props(HEADERS | DELIVERY_MODE, deep_table(2000), b"\x02")
    shown = properties_json(props)
    assert isinstance(shown, dict) and shown["delivery_mode"] == 2
    chain = shown["headers"]["d"]
    assert depth_of(chain) == MAX_DEPTH  # the tables the codec reads, below the headers table
    bottom = chain
    while isinstance(bottom, dict):
        bottom = bottom["a"]
    assert isinstance(bottom, str) and bottom.startswith("(table nested too deep to show: ")
    json.dumps(shown)  # and the answer can be written


def test_malformed_headers_are_named_and_the_other_properties_still_shown():
    bad_table = b"\x00\x00\x00\x04\x01kZ\x00"  # key "k", unknown field type "Z"
    props = raw_props(
        HEADERS | DELIVERY_MODE | TIMESTAMP, bad_table, b"\x02", struct.pack(">Q", 1_700_000_000)
    )
    shown = properties_json(props)
    assert shown == {
        "headers": "(headers not shown: malformed field table: unknown field type b'Z' at offset 6)",
        "delivery_mode": 2,
        "timestamp": 1_700_000_000,
    }


def test_a_property_list_that_does_not_split_shows_no_properties():
    assert properties_json(raw_props(HEADERS, b"\x00\x00\x10\x00")) == []  # a table longer than the octets


def test_ordinary_properties_are_shown_as_before():
    """What pamqp's decoding showed, field for field (RabbitMQ's names and JSON shapes)."""
    props = commands.Basic.Properties(
        content_type="text/plain",
        content_encoding="gzip",
        headers={"s": "v", "n": 5, "l": [1, "x"], "t": {"k": True}, "f": 1.5, "d": Decimal("1.5")},
        delivery_mode=2,
        priority=3,
        correlation_id="c",
        reply_to="r",
        expiration="100",
        message_id="m",
        timestamp=datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC),
        message_type="ty",
        user_id="u",
        app_id="a",
    ).marshal()
    assert properties_json(props) == {
        "content_type": "text/plain",
        "content_encoding": "gzip",
        "headers": {"s": "v", "n": 5, "l": [1, "x"], "t": {"k": True}, "f": 1.5, "d": 1.5},
        "delivery_mode": 2,
        "priority": 3,
        "correlation_id": "c",
        "reply_to": "r",
        "expiration": "100",
        "message_id": "m",
        "timestamp": int(datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC).timestamp()),
        "type": "ty",
        "user_id": "u",
        "app_id": "a",
    }


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (Long(7), 7),
        (Timestamp(5), 5),
        (Float(1.5), 1.5),
        (Decimal("1.25"), 1.25),
        (Decimal("NaN"), "NaN"),
        (float("nan"), "NaN"),
        (float("-inf"), "-Infinity"),
        (LongStr(b"\xffa"), "\ufffda"),
        (datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), 1704067200),
        (RawField(b"A\x00\x00\x00\x00"), "(array nested too deep to show: 5 octets)"),
        (object.__new__(type("Odd", (), {"__str__": lambda self: 1 / 0})), "(Odd value)"),
    ],
)
def test_json_value_shows_every_value(value: object, shown: Any):
    assert json_value(value) == shown


def test_json_value_is_bounded_for_values_built_in_memory():
    value: Any = "leaf"
    for _ in range(5000):  # deeper than the interpreter's recursion limit
        value = {"a": value}
    shown = json_value(value)
    assert depth_of(shown) == MAX_SHOWN_DEPTH
    json.dumps(shown)


def test_head_timestamp_reads_only_the_timestamp():
    queue = Queue("q", "/", False, False, False, None, parse_queue_args({}, "q"))
    bad_table = b"\x00\x00\x00\x04\x01kZ\x00"
    stamp = struct.pack(">Q", 1_700_000_000)
    queue.enqueue(Message("", "q", raw_props(HEADERS | TIMESTAMP, bad_table, stamp), b"x"))
    assert head_timestamp(queue) == 1_700_000_000  # (before: decoding all of them raised, a 500)
    queue.pop()
    queue.enqueue(Message("", "q", raw_props(HEADERS, encode_table({"k": 1})), b"x"))
    assert head_timestamp(queue) is None
