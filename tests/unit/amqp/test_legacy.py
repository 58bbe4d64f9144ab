"""``amqp/legacy.py``: the 0-8 method frames translated to and from 0-9-1."""

from __future__ import annotations

import struct

import pytest
from ottermq.amqp import legacy
from pamqp import commands as spec
from pamqp import frame as pframe


def ids(class_id: int, method_id: int) -> bytes:
    return struct.pack(">HH", class_id, method_id)


def test_headers_and_their_prefixes():
    assert legacy.dialect_of(b"AMQP\x00\x00\x09\x01") == legacy.Dialect("0-9-1", (0, 9), False)
    assert legacy.dialect_of(b"AMQP\x01\x01\x00\x09") == legacy.Dialect("0-9", (0, 9), False)
    assert legacy.dialect_of(b"AMQP\x01\x01\x08\x00") == legacy.Dialect("0-8", (8, 0), True)
    assert legacy.dialect_of(b"AMQP\x01\x01\x09\x01") == legacy.Dialect("0-8", (8, 0), True)
    assert legacy.dialect_of(b"AMQP\x01\x01\x09\x02") is None
    assert legacy.is_header_prefix(b"AMQP\x01") and legacy.is_header_prefix(b"")
    assert not legacy.is_header_prefix(b"AMQP\x02") and not legacy.is_header_prefix(b"GET ")


@pytest.mark.parametrize(("in_0_8", "in_0_9_1"), [((10, 60), (10, 50)), ((10, 61), (10, 51))])
def test_connection_close_ids_both_ways(in_0_8, in_0_9_1):
    fields = b"\x00\xc8\x03bye\x00\x00\x00\x00"
    assert legacy.from_0_8(ids(*in_0_8) + fields) == ids(*in_0_9_1) + fields
    frame = pframe.marshal(spec.Connection.Close(200, "bye", 0, 0), 0)
    if in_0_9_1 == (10, 51):
        frame = pframe.marshal(spec.Connection.CloseOk(), 0)
    translated = legacy.to_0_8(frame)
    assert translated[7:11] == ids(*in_0_8) and translated[11:] == frame[11:] and translated[:7] == frame[:7]


def test_a_redirect_from_the_client_is_an_unknown_method():
    assert legacy.from_0_8(ids(10, 50) + b"\x00") == ids(10, 0xFFFF) + b"\x00"


def test_channel_open_ok_loses_its_field():
    assert (
        legacy.to_0_8(pframe.marshal(spec.Channel.OpenOk(), 7))
        == b"\x01\x00\x07\x00\x00\x00\x04" + ids(20, 11) + b"\xce"
    )


def test_basic_consume_gets_an_empty_arguments_table_only_when_it_has_none():
    old = ids(60, 20) + b"\x00\x00\x01q\x03tag\x02"
    assert legacy.from_0_8(old) == old + b"\x00\x00\x00\x00"
    new = pframe.marshal(spec.Basic.Consume(queue="q", consumer_tag="tag"), 1)[7:-1]
    assert legacy.from_0_8(new) == new
    for truncated in (ids(60, 20), ids(60, 20) + b"\x00\x00\x05q", ids(60, 20) + b"\x00\x00\x01q"):
        assert legacy.from_0_8(truncated) == truncated  # left to the decoder, which refuses it


def test_everything_else_is_the_same_bytes():
    for method in (spec.Basic.Publish(routing_key="k"), spec.Channel.Close(404, "x", 50, 10)):
        frame = pframe.marshal(method, 1)
        assert legacy.to_0_8(frame) == frame and legacy.from_0_8(frame[7:-1]) == frame[7:-1]
    blocked = pframe.marshal(spec.Connection.Blocked("low memory"), 0)
    assert legacy.to_0_8(blocked) == blocked
