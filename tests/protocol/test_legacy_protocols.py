"""AMQP 0-8 and 0-9 clients, as RabbitMQ 3.10 serves them (``rabbit_reader:handshake``; checked side by side
with Mono's RabbitMQ.Client, which speaks both, in ``e2e/test_dotnet_client.py``).

0-9 is served with the 0-9-1 framing; 0-8 with its own, which differs in what a client uses in three
places: ``connection.close``/``close-ok`` are methods 10/60 and 10/61, ``channel.open-ok`` has no field,
and ``basic.consume`` has no arguments table.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp import header as pheader

from .test_handshake import OPEN, raw_frame, start_ok, tune_ok

HEADERS = {
    "0-9-1": (b"AMQP\x00\x00\x09\x01", (0, 9)),
    "0-9": (b"AMQP\x01\x01\x00\x09", (0, 9)),
    "0-8": (b"AMQP\x01\x01\x08\x00", (8, 0)),
    "0-8 as on the AMQP web site": (b"AMQP\x01\x01\x09\x01", (8, 0)),
}


def method_0_8(channel: int, class_id: int, method_id: int, fields: bytes = b"") -> bytes:
    return raw_frame(1, channel, struct.pack(">HH", class_id, method_id) + fields)


def shortstr(text: str) -> bytes:
    return bytes([len(text)]) + text.encode()


def raw_methods(client: Any) -> list[tuple[int, int, int, bytes]]:
    """``(channel, class, method, fields)`` of every method frame the broker wrote (the 0-8 ones too,
    which pamqp cannot read), heartbeats and content frames left out."""
    data = bytes(client.transport.buffer)
    client.transport.buffer.clear()
    out, pos = [], 0
    while pos + 7 <= len(data):
        frame_type, channel, size = struct.unpack_from(">BHI", data, pos)
        payload = data[pos + 7 : pos + 7 + size]
        assert data[pos + 7 + size] == 0xCE
        if frame_type == 1:
            class_id, method_id = struct.unpack_from(">HH", payload)
            out.append((channel, class_id, method_id, payload[4:]))
        pos += size + 8
    return out


@pytest.mark.parametrize("name", HEADERS)
def test_each_header_rabbitmq_accepts_gets_its_start(make_client, name):
    header, version = HEADERS[name]
    c = make_client()
    c.send_raw(header)
    start = c.expect(spec.Connection.Start)
    assert (start.version_major, start.version_minor) == version


@pytest.mark.parametrize(
    "header", [b"AMQP\x01\x01\x00\x0a", b"AMQP\x00\x00\x09\x00", b"AMQP\x01\x01\x08\x01"]
)
def test_other_headers_get_the_0_9_1_header_and_close(make_client, header):
    c = make_client()
    c.send_raw(header)
    assert c.frames() == [(-1, b"AMQP\x00\x00\x09\x01")]
    assert c.transport.closed


def opened(make_client: Any, dialect: str) -> Any:
    """A client that sent ``dialect``'s header, logged in, tuned and sent ``connection.open``."""
    c = make_client()
    c.send_raw(HEADERS[dialect][0])
    c.expect(spec.Connection.Start)
    c.send_raw(start_ok())
    c.expect(spec.Connection.Tune)
    c.send_raw(tune_ok() + OPEN)
    return c


@pytest.fixture
def client_0_8(make_client):
    c = opened(make_client, "0-8")
    assert raw_methods(c) == [(0, 10, 41, b"\x00")]  # open-ok: known-hosts, as 0-9-1's reserved field
    c.send_raw(method_0_8(1, 20, 10, shortstr("")))
    assert raw_methods(c) == [(1, 20, 11, b"")]  # channel.open-ok without 0-9-1's long string
    return c


def test_0_8_consume_without_arguments_then_deliveries(client_0_8):
    c = client_0_8
    c.send(1, spec.Queue.Declare(queue="legacy.q", auto_delete=True))
    c.send_raw(method_0_8(1, 60, 20, b"\x00\x00" + shortstr("legacy.q") + shortstr("tag08") + b"\x02"))
    assert raw_methods(c)[-1] == (1, 60, 21, shortstr("tag08"))
    c.send_raw(
        pframe.marshal(spec.Basic.Publish(routing_key="legacy.q"), 1)
        + pframe.marshal(pheader.ContentHeader(0, 2, spec.Basic.Properties()), 1)
        + raw_frame(3, 1, b"hi")
    )
    (deliver,) = [m for m in raw_methods(c) if m[1:3] == (60, 60)]
    assert deliver[3].startswith(shortstr("tag08"))


def test_0_8_client_close_gets_close_ok_as_10_61(client_0_8):
    c = client_0_8
    c.send_raw(method_0_8(0, 10, 60, struct.pack(">H", 200) + shortstr("bye") + b"\x00" * 4))
    assert raw_methods(c) == [(0, 10, 61, b"")]


def test_0_8_connection_error_is_closed_with_10_60_and_ended_by_10_61(client_0_8, loop):
    c = client_0_8
    c.send_raw(raw_frame(3, 0, b"body on channel 0"))
    ((channel, class_id, method_id, fields),) = raw_methods(c)
    assert (channel, class_id, method_id) == (0, 10, 60)
    assert struct.unpack_from(">H", fields)[0] == 505
    c.send_raw(method_0_8(0, 10, 61))
    assert c.transport.closed


def test_0_8_channel_close_is_unchanged(client_0_8):
    c = client_0_8
    c.send(1, spec.Queue.Declare(queue="legacy.missing", passive=True))
    ((channel, class_id, method_id, fields),) = raw_methods(c)
    assert (channel, class_id, method_id) == (1, 20, 40)
    assert struct.unpack_from(">H", fields)[0] == 404


def test_0_9_is_served_with_the_0_9_1_framing(make_client):
    c = opened(make_client, "0-9")
    c.expect(spec.Connection.OpenOk)
    c.open_channel(1)
    c.send(0, spec.Connection.Close(200, "bye", 0, 0))
    c.expect(spec.Connection.CloseOk)
