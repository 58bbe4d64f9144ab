"""AMQP 0-8 and 0-9 clients, read and answered as RabbitMQ 3.x does.

RabbitMQ accepts four protocol headers (``rabbit_reader:handshake``): 0-9-1, 0-9 (``AMQP 1 1 0 9``, served
with the 0-9-1 framing and ``connection.start`` version 0-9), and 0-8 (``AMQP 1 1 8 0``, and
``AMQP 1 1 9 1`` as some 0-8 libraries send it, served with its 0-8 framing and version 8-0). The .NET
client bundled with Mono (Debian's ``libmono-rabbitmq4.0-cil``) speaks 0-8 by default.

The 0-8 framing differs from 0-9-1 in what such a client uses in three places only, so a 0-8 connection
is served by the 0-9-1 code with its method frames translated at the edge (nothing changes for 0-9-1):

* ``connection.close`` / ``close-ok`` are methods 60 / 61 of class 10 (0-9-1: 50 / 51; 0-9-1's 60 / 61
  are RabbitMQ's ``connection.blocked`` / ``unblocked``, sent only to clients that ask for them);
* ``channel.open-ok`` has no field (0-9-1: a reserved long string);
* ``basic.consume`` has no ``arguments`` table (0-9-1 added it), read as an empty table.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["PROTOCOL_0_9_1", "Dialect", "dialect_of", "is_header_prefix", "to_0_8", "from_0_8"]

PROTOCOL_0_9_1 = b"AMQP\x00\x00\x09\x01"


@dataclass(frozen=True)
class Dialect:
    """How a connection that sent one header is served: ``connection.start``'s version, and whether its
    method frames go through the 0-8 translation."""

    name: str
    version: tuple[int, int]
    framing_0_8: bool


DIALECTS = {
    PROTOCOL_0_9_1: Dialect("0-9-1", (0, 9), False),
    b"AMQP\x01\x01\x00\x09": Dialect("0-9", (0, 9), False),
    b"AMQP\x01\x01\x08\x00": Dialect("0-8", (8, 0), True),
    b"AMQP\x01\x01\x09\x01": Dialect("0-8", (8, 0), True),
}


def dialect_of(header: bytes) -> Dialect | None:
    """The dialect of an 8-octet protocol header, or None for one RabbitMQ refuses."""
    return DIALECTS.get(header)


def is_header_prefix(head: bytes) -> bool:
    """Whether ``head`` (under 8 octets) can still become an accepted header."""
    return any(header.startswith(head) for header in DIALECTS)


_CONNECTION, _CHANNEL, _BASIC = 10, 20, 60
_IDS = struct.Struct(">HH")
# 0-8 connection.close / close-ok <-> 0-9-1's (method ids of class 10)
_CLOSE_IN = {60: 50, 61: 51}
_CLOSE_OUT = {50: 60, 51: 61}
_FRAME_END = b"\xce"


def from_0_8(payload: bytes) -> bytes:
    """A 0-8 client's method frame payload (class and method ids first) as 0-9-1 reads it."""
    class_id, method_id = _IDS.unpack_from(payload)  # the reader only yields payloads of 4+ octets
    if class_id == _CONNECTION and method_id in _CLOSE_IN:
        return _IDS.pack(class_id, _CLOSE_IN[method_id]) + payload[4:]
    if class_id == _CONNECTION and method_id == 50:  # 0-8 connection.redirect is the server's method
        return _IDS.pack(class_id, 0xFFFF) + payload[4:]  # unknown here: refused as any unknown method
    if class_id == _BASIC and method_id == 20 and _consume_without_arguments(payload):
        return payload + b"\x00\x00\x00\x00"
    return payload


def _consume_without_arguments(payload: bytes) -> bool:
    """A 0-8 ``basic.consume`` (ticket, queue, consumer tag, flags) ends where 0-9-1's table starts."""
    pos = 6  # ids, ticket
    for _ in range(2):  # queue, consumer tag: short strings
        if pos >= len(payload):
            return False
        pos += 1 + payload[pos]
    return pos + 1 == len(payload)


def to_0_8(frame: bytes) -> bytes:
    """One encoded 0-9-1 method frame (header to frame-end) as a 0-8 client reads it."""
    channel = frame[1:3]
    class_id, method_id = _IDS.unpack_from(frame, 7)
    if class_id == _CONNECTION and method_id in _CLOSE_OUT:
        return frame[:7] + _IDS.pack(class_id, _CLOSE_OUT[method_id]) + frame[11:]
    if class_id == _CHANNEL and method_id == 11:  # channel.open-ok: no field in 0-8
        return b"\x01" + channel + b"\x00\x00\x00\x04" + _IDS.pack(_CHANNEL, 11) + _FRAME_END
    return frame
