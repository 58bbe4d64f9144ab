"""The shovel's transport tap (``broker/shovel/tap.py``): property octets kept aside on the way in,
put back in place of a placeholder on the way out, every other frame unchanged."""

from __future__ import annotations

import asyncio
import struct

import pamqp.frame
from ottermq.amqp.table import LongLong, Short, encode_table
from ottermq.broker.shovel.tap import Tap, TapReader, TapWriter
from pamqp import commands
from pamqp.header import ContentHeader

HEADERS = encode_table({"count": LongLong(1), "small": Short(2), "f": 1.5})
RAW = struct.pack(">H", 0x2000 | 0x1000) + HEADERS + b"\x02"  # headers + delivery-mode 2


def frames(*items: tuple[int, object]) -> bytes:
    return b"".join(pamqp.frame.marshal(frame, channel) for channel, frame in items)  # type: ignore[arg-type]


def raw_header(channel: int, body_size: int, props: bytes) -> bytes:
    payload = struct.pack(">HHQ", 60, 0, body_size) + props
    return struct.pack(">BHI", 2, channel, len(payload)) + payload + b"\xce"


class Sink:
    """A stream writer that keeps what is written."""

    transport = None

    def __init__(self, written: list[bytes]) -> None:
        self.written = written

    def write(self, data: bytes) -> None:
        self.written.append(data)


def test_a_delivered_messages_properties_are_kept_and_aiormq_gets_none() -> None:
    tap = Tap()
    deliver = frames((1, commands.Basic.Deliver("ctag", 7, False, "ex", "key")))
    wire = deliver + raw_header(1, 2, RAW) + frames((1, pamqp.body.ContentBody(b"hi")))

    async def main() -> bytes:
        reader = asyncio.StreamReader()
        reader.feed_data(wire)
        reader.feed_eof()
        tapped = TapReader(reader, tap)
        out = b""
        while not tapped.at_eof():
            out += await tapped.readexactly(7)
            size = struct.unpack(">I", out[-4:])[0]
            out += await tapped.readexactly(size + 1)
        return out

    seen = asyncio.run(main())
    decoded = []
    while seen:
        consumed, channel, frame = pamqp.frame.unmarshal(seen)
        decoded.append(frame)
        seen = seen[consumed:]
    assert isinstance(decoded[1], ContentHeader)
    assert decoded[1].properties == commands.Basic.Properties() and decoded[1].body_size == 2
    assert tap.take(1, 7) == RAW
    assert tap.take(1, 7) == b"\x00\x00"  # taken once


def test_a_placeholder_is_replaced_by_the_registered_octets_on_the_way_out() -> None:
    tap = Tap()
    placeholder = tap.placeholder(RAW)
    header = ContentHeader(0, 5, placeholder)
    written: list[bytes] = []
    writer = TapWriter(Sink(written), tap)  # type: ignore[arg-type]
    other = frames((1, commands.Basic.Publish(exchange="", routing_key="q")))
    writer.write(other + pamqp.frame.marshal(header, 1) + frames((1, pamqp.body.ContentBody(b"hello"))))
    data = b"".join(written)
    _, _, publish = pamqp.frame.unmarshal(data)
    assert data.startswith(other) and isinstance(publish, commands.Basic.Publish)
    rest = data[len(other) :]
    kind, channel, size = struct.unpack(">BHI", rest[:7])
    assert (kind, channel) == (2, 1) and rest[7 + 12 : 7 + size] == RAW
    assert not tap.publishing  # used once


def test_writes_without_a_placeholder_pass_untouched() -> None:
    tap = Tap()
    written: list[bytes] = []
    writer = TapWriter(Sink(written), tap)  # type: ignore[arg-type]
    data = frames((0, commands.Connection.CloseOk()))
    writer.write(data)
    tap.placeholder(RAW)  # pending, but this header is not a placeholder
    other = pamqp.frame.marshal(ContentHeader(0, 1, commands.Basic.Properties(message_id="x")), 3)
    writer.write(other)
    assert written == [data, other]
