"""Hand-rolled codecs for the frames on the message hot path; pamqp for everything else.

Decoders take a method or header frame *payload* (what :class:`~ottermq.amqp.reader.FrameReader`
returns, without the 7-octet frame header and the frame-end octet). Encoders return complete wire
octets: every frame of the command concatenated into one ``bytes`` object, so a delivery of a
small message costs one ``bytes.join``. A body over ``LARGE_BODY`` octets is not copied: the
content encoders return the frames as a list of parts (``Encoded``), the body's frames as
``memoryview`` slices of it, for ``transport.writelines``. Properties travel as ``raw_props``
(property flags + property list) exactly as the publisher sent them.

Every decoder raises :class:`~ottermq.amqp.errors.FrameError` on truncated or garbage input;
no ``struct.error``, ``IndexError`` or ``UnicodeDecodeError`` escapes. The byte layouts are
golden-tested against pamqp's ``frame.marshal`` in ``tests/protocol/test_fastpath_golden.py``.
"""

from __future__ import annotations

import struct
from typing import Final, TypeAlias

from pamqp import base, commands, decode, frame

from .errors import FrameError
from .table import MAX_DEPTH, RawField

__all__ = [
    "BASIC_ACK",
    "BASIC_DELIVER",
    "BASIC_GET_OK",
    "BASIC_NACK",
    "BASIC_PUBLISH",
    "BASIC_REJECT",
    "BASIC_RETURN",
    "FRAME_BODY",
    "FRAME_END",
    "FRAME_HEADER",
    "FRAME_HEARTBEAT",
    "FRAME_METHOD",
    "HEARTBEAT",
    "LARGE_BODY",
    "Encoded",
    "decode_ack",
    "decode_header",
    "decode_method",
    "decode_nack",
    "decode_publish",
    "decode_reject",
    "encode_ack",
    "encode_content",
    "encode_deliver",
    "encode_get_ok",
    "encode_method",
    "encode_nack",
    "encode_return",
    "method_key",
]

# Final: compiled by mypyc, a Final module constant is a C global (else a module dict lookup per use)
FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = 0xCE
HEARTBEAT: Final = b"\x08\x00\x00\x00\x00\x00\x00\xce"
LARGE_BODY: Final = 1 << 20
"""Bodies over this many octets are neither joined on receipt nor on delivery: one copy of 100 MB
into fresh memory takes 0.25 s on a 2-core VM (page faults), all of it in one event-loop turn."""
Encoded: TypeAlias = bytes | list[bytes | memoryview]
"""What the content encoders return: one ``bytes``, or for a body over ``LARGE_BODY`` the frames'
parts in order (``b"".join`` of them is the same octets)."""

BASIC_PUBLISH: Final = 0x003C0028
BASIC_RETURN: Final = 0x003C0032
BASIC_DELIVER: Final = 0x003C003C
BASIC_GET_OK: Final = 0x003C0047
BASIC_ACK: Final = 0x003C0050
BASIC_REJECT: Final = 0x003C005A
BASIC_NACK: Final = 0x003C0078

_BASIC_CLASS: Final = 60
_END: Final = b"\xce"
_BYTE: Final = tuple(bytes((i,)) for i in range(256))

_KEY: Final = struct.Struct(">I")
_TAG_BITS: Final = struct.Struct(">QB")
_HEADER_PAYLOAD: Final = struct.Struct(">HHQ")
# A content header frame's first 19 octets: type, channel, size, class, weight, body size.
_HEADER_FRAME: Final = struct.Struct(">BHIHHQ")
# Frame end of the previous frame + the content header frame's first 19 octets.
_END_HEADER_FRAME: Final = struct.Struct(">BBHIHHQ")
# Frame end of the previous frame + a body frame's 7-octet header.
_END_BODY_FRAME: Final = struct.Struct(">BBHI")
# basic.deliver: frame header + method key + consumer-tag length | delivery-tag, bits, exchange length
_DELIVER_HEAD: Final = struct.Struct(">BHIIB")
_DELIVER_MID: Final = struct.Struct(">QBB")
# basic.get-ok: frame header + key + delivery-tag + bits + exchange length
_GET_OK_HEAD: Final = struct.Struct(">BHIIQBB")
# basic.get-ok: message-count + frame end + content header frame start
_GET_OK_TAIL: Final = struct.Struct(">IBBHIHHQ")
# basic.return: frame header + key + reply-code + reply-text length
_RETURN_HEAD: Final = struct.Struct(">BHIIHB")
# basic.ack / basic.nack: a whole 21-octet frame
_ACK_FRAME: Final = struct.Struct(">BHIIQBB")

_unpack_key: Final = _KEY.unpack_from
_unpack_tag_bits: Final = _TAG_BITS.unpack_from


# --- decoding ---------------------------------------------------------------------------------


def method_key(payload: bytes) -> int:
    """Return ``(class_id << 16) | method_id`` of a method frame payload.

    Raises:
        FrameError: the payload is shorter than 4 octets.
    """
    try:
        key: int = _unpack_key(payload)[0]
    except struct.error:
        raise FrameError(f"method frame payload of {len(payload)} octets has no method id") from None
    return key


def decode_publish(payload: bytes) -> tuple[str, str, bool, bool]:
    """Decode a ``basic.publish`` payload.

    Returns:
        ``(exchange, routing_key, mandatory, immediate)``.

    Raises:
        FrameError: truncated, trailing octets, or a name that is not valid UTF-8.
    """
    try:
        n = payload[6]
        p = 7 + n
        exchange = payload[7:p].decode("utf-8") if n else ""
        n = payload[p]
        q = p + 1 + n
        routing_key = payload[p + 1 : q].decode("utf-8") if n else ""
        bits = payload[q]
    except IndexError:
        raise FrameError("basic.publish frame is truncated") from None
    except UnicodeDecodeError:
        raise FrameError("basic.publish exchange or routing key is not valid UTF-8") from None
    if len(payload) != q + 1:
        raise FrameError("basic.publish frame has trailing octets")
    return exchange, routing_key, bool(bits & 1), bool(bits & 2)


def _tag_bits(payload: bytes, name: str) -> tuple[int, int]:
    if len(payload) != 13:
        raise FrameError(f"{name} frame payload has {len(payload)} octets, expected 13")
    tag, bits = _unpack_tag_bits(payload, 4)
    return tag, bits


def decode_ack(payload: bytes) -> tuple[int, bool]:
    """Decode a ``basic.ack`` payload into ``(delivery_tag, multiple)``.

    Raises:
        FrameError: wrong payload size.
    """
    tag, bits = _tag_bits(payload, "basic.ack")
    return tag, bool(bits & 1)


def decode_reject(payload: bytes) -> tuple[int, bool]:
    """Decode a ``basic.reject`` payload into ``(delivery_tag, requeue)``.

    Raises:
        FrameError: wrong payload size.
    """
    tag, bits = _tag_bits(payload, "basic.reject")
    return tag, bool(bits & 1)


def decode_nack(payload: bytes) -> tuple[int, bool, bool]:
    """Decode a ``basic.nack`` payload into ``(delivery_tag, multiple, requeue)``.

    Raises:
        FrameError: wrong payload size.
    """
    tag, bits = _tag_bits(payload, "basic.nack")
    return tag, bool(bits & 1), bool(bits & 2)


def decode_header(payload: bytes) -> tuple[int, int, bytes]:
    """Decode a content header payload into ``(class_id, body_size, raw_props)``.

    ``raw_props`` is ``payload[12:]`` (property flags + property list), kept byte for byte; it
    is only checked to hold the 2-octet flags (see :mod:`ottermq.amqp.props`).

    Raises:
        FrameError: shorter than 14 octets.
    """
    if len(payload) < 14:
        raise FrameError(f"content header frame payload of {len(payload)} octets is truncated")
    class_id, _weight, body_size = _HEADER_PAYLOAD.unpack_from(payload)
    return class_id, body_size, payload[12:]


# The methods whose last field is the field table ``arguments``: how many short strings and bit
# octets come between the ticket and it.
_ARGUMENTS_AFTER: dict[int, tuple[int, int]] = {
    commands.Exchange.Declare.index: (2, 1),  # exchange, type; passive..no-wait
    commands.Exchange.Bind.index: (3, 1),  # destination, source, routing key; no-wait
    commands.Exchange.Unbind.index: (3, 1),
    commands.Queue.Declare.index: (1, 1),  # queue; passive..no-wait
    commands.Queue.Bind.index: (3, 1),  # queue, exchange, routing key; no-wait
    commands.Queue.Unbind.index: (3, 0),  # queue, exchange, routing key
    commands.Basic.Consume.index: (2, 1),  # queue, consumer tag; no-local..no-wait
}


def _arguments_at(payload: bytes, strings: int, bits: int) -> int:
    """Where the ``arguments`` table (its length prefix) starts in a method ``payload``."""
    pos = 6  # class id, method id, ticket
    for _ in range(strings):
        pos += 1 + payload[pos]
    return pos + bits


def _table_bounds(payload: bytes, pos: int, end: int) -> tuple[int, int]:
    """The content of the table or array whose length prefix is at ``pos``."""
    (length,) = _KEY.unpack_from(payload, pos)
    start = pos + 4
    if start + length > end:
        raise ValueError(f"a field table or array of {length} octets runs past its container")
    return start, start + length


def _arguments_table(payload: bytes, pos: int, end: int, depth: int) -> dict[str, object]:
    """A field table with pamqp's value types, read as RabbitMQ reads it: a key that occurs twice keeps
    its first value (``rabbit_misc:table_lookup``; pamqp keeps the last); nested tables and arrays to
    ``MAX_DEPTH``, deeper ones kept as ``RawField`` octets (RabbitMQ accepts any depth a frame holds;
    pamqp's decoder recursed until Python's limit)."""
    table: dict[str, object] = {}
    while pos < end:
        klen = payload[pos]
        key = payload[pos + 1 : pos + 1 + klen].decode("utf-8")
        value, pos = _argument_value(payload, pos + 1 + klen, end, depth)
        table.setdefault(key, value)
    return table


def _argument_value(payload: bytes, pos: int, end: int, depth: int) -> tuple[object, int]:
    tag = payload[pos]
    if tag == 0x46 or tag == 0x41:  # F, A
        start, stop = _table_bounds(payload, pos + 1, end)
        if depth >= MAX_DEPTH:
            return RawField(payload[pos:stop]), stop
        if tag == 0x46:
            return _arguments_table(payload, start, stop, depth + 1), stop
        values: list[object] = []
        while start < stop:
            value, start = _argument_value(payload, start, stop, depth + 1)
            values.append(value)
        return values, stop
    if tag == 0x53 or tag == 0x78:  # S, x: pamqp reads exactly these octets
        (length,) = _KEY.unpack_from(payload, pos + 1)
        window = payload[pos : pos + 5 + length]
    else:  # a scalar: at most a tag and 8 octets
        window = payload[pos : pos + 9]
    consumed, value = decode.embedded_value(window)
    if pos + consumed > end:
        raise ValueError("a field value runs past its table")
    return value, pos + consumed


def decode_method(payload: bytes) -> base.Frame:
    """Decode any method frame payload with pamqp (the long tail: declares, binds, closes, ...).
    Of an ``arguments`` table with a key twice, the first value counts (RabbitMQ's reading).

    Raises:
        FrameError: unknown class/method id (the text names both) or an undecodable payload.
    """
    key = method_key(payload)
    cls = commands.INDEX_MAPPING.get(key)
    if cls is None:
        raise FrameError(f"unknown method: class id {key >> 16}, method id {key & 0xFFFF}")
    method: base.Frame = cls()
    layout = _ARGUMENTS_AFTER.get(key)
    try:
        if layout is None:
            method.unmarshal(payload[4:])
            return method
        # pamqp reads every field but the arguments, which are read here (_arguments_table)
        at = _arguments_at(payload, *layout)
        start, end = _table_bounds(payload, at, len(payload))
        method.unmarshal(payload[4:at] + b"\x00\x00\x00\x00")
        setattr(method, "arguments", _arguments_table(payload, start, end, 0))  # noqa: B010 (typed Frame)
    except Exception as exc:  # pamqp raises ValueError, struct.error, UnicodeDecodeError, ...
        raise FrameError(f"cannot decode {method.name}: {exc}") from exc
    return method


# --- encoding ---------------------------------------------------------------------------------


def encode_method(channel: int, method: base.Frame) -> bytes:
    """Marshal any pamqp method as a complete method frame."""
    return frame.marshal(method, channel)


def _check_frame_max(frame_max: int) -> int:
    if frame_max <= 8:
        raise ValueError(f"frame_max {frame_max} leaves no room for a body frame payload")
    return frame_max - 8


def _multi_body(
    head: tuple[bytes, ...], channel: int, body: bytes | bytearray | memoryview, chunk: int
) -> Encoded:
    """Join ``head`` (whose last frame is left open) and body frames of at most ``chunk`` octets;
    over ``LARGE_BODY``, the parts without joining them (the body's as slices, not copied)."""
    parts: list[bytes | memoryview] = list(head)
    view = memoryview(body)
    pack = _END_BODY_FRAME.pack
    for start in range(0, len(body), chunk):
        piece = view[start : start + chunk]
        parts.append(pack(FRAME_END, FRAME_BODY, channel, len(piece)))
        parts.append(piece)
    parts.append(_END)
    if len(body) > LARGE_BODY:
        return parts
    return b"".join(parts)


def encode_content(
    channel: int, raw_props: bytes, body: bytes | bytearray | memoryview, frame_max: int
) -> Encoded:
    """Encode a content header frame (class 60) and the body frames for ``body``.

    Args:
        channel: channel number.
        raw_props: property flags + property list, written verbatim.
        body: message body, any buffer (typed: compiled by mypyc, the types are checked);
            an empty body produces the header frame only.
        frame_max: negotiated frame size limit (whole frame, 0 = unlimited); each body frame
            carries at most ``frame_max - 8`` octets.
    """
    blen = len(body)
    head = _HEADER_FRAME.pack(FRAME_HEADER, channel, 12 + len(raw_props), _BASIC_CLASS, 0, blen)
    if not blen:
        return b"".join((head, raw_props, _END))
    if not frame_max or blen <= frame_max - 8:
        return b"".join(
            (head, raw_props, _END_BODY_FRAME.pack(FRAME_END, FRAME_BODY, channel, blen), body, _END)
        )
    return _multi_body((head, raw_props), channel, body, _check_frame_max(frame_max))


def _finish(parts: tuple[bytes, ...], channel: int, raw_props: bytes, body: bytes, frame_max: int) -> Encoded:
    """Join a method frame (left open), its content header frame and the body frames."""
    blen = len(body)
    if not blen:
        return b"".join((*parts, raw_props, _END))
    if not frame_max or blen <= frame_max - 8:
        return b"".join(
            (*parts, raw_props, _END_BODY_FRAME.pack(FRAME_END, FRAME_BODY, channel, blen), body, _END)
        )
    return _multi_body((*parts, raw_props), channel, body, _check_frame_max(frame_max))


def encode_deliver(
    channel: int,
    consumer_tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    raw_props: bytes,
    body: bytes,
    frame_max: int,
) -> Encoded:
    """Encode ``basic.deliver`` + content header + body frames as one ``bytes`` (``Encoded``).

    Raises:
        ValueError: a name longer than 255 octets, or ``frame_max`` too small for a body frame.
    """
    ct = consumer_tag.encode("utf-8")
    ex = exchange.encode("utf-8")
    rk = routing_key.encode("utf-8")
    lct, lex, lrk = len(ct), len(ex), len(rk)
    if (lct | lex | lrk) > 255:
        raise ValueError("consumer tag, exchange and routing key are limited to 255 octets")
    blen = len(body)
    if blen and frame_max and blen <= frame_max - 8:  # the common case, inlined
        return b"".join(
            (
                _DELIVER_HEAD.pack(FRAME_METHOD, channel, 16 + lct + lex + lrk, BASIC_DELIVER, lct),
                ct,
                _DELIVER_MID.pack(delivery_tag, redelivered, lex),
                ex,
                _BYTE[lrk],
                rk,
                _END_HEADER_FRAME.pack(
                    FRAME_END, FRAME_HEADER, channel, 12 + len(raw_props), _BASIC_CLASS, 0, blen
                ),
                raw_props,
                _END_BODY_FRAME.pack(FRAME_END, FRAME_BODY, channel, blen),
                body,
                _END,
            )
        )
    parts = (
        _DELIVER_HEAD.pack(FRAME_METHOD, channel, 16 + lct + lex + lrk, BASIC_DELIVER, lct),
        ct,
        _DELIVER_MID.pack(delivery_tag, redelivered, lex),
        ex,
        _BYTE[lrk],
        rk,
        _END_HEADER_FRAME.pack(FRAME_END, FRAME_HEADER, channel, 12 + len(raw_props), _BASIC_CLASS, 0, blen),
    )
    return _finish(parts, channel, raw_props, body, frame_max)


def encode_get_ok(
    channel: int,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    message_count: int,
    raw_props: bytes,
    body: bytes,
    frame_max: int,
) -> Encoded:
    """Encode ``basic.get-ok`` + content header + body frames as one ``bytes`` (``Encoded``).

    Raises:
        ValueError: a name longer than 255 octets, or ``frame_max`` too small for a body frame.
    """
    ex = exchange.encode("utf-8")
    rk = routing_key.encode("utf-8")
    lex, lrk = len(ex), len(rk)
    if (lex | lrk) > 255:
        raise ValueError("exchange and routing key are limited to 255 octets")
    parts = (
        _GET_OK_HEAD.pack(
            FRAME_METHOD, channel, 19 + lex + lrk, BASIC_GET_OK, delivery_tag, redelivered, lex
        ),
        ex,
        _BYTE[lrk],
        rk,
        _GET_OK_TAIL.pack(
            message_count, FRAME_END, FRAME_HEADER, channel, 12 + len(raw_props), _BASIC_CLASS, 0, len(body)
        ),
    )
    return _finish(parts, channel, raw_props, body, frame_max)


def encode_return(
    channel: int,
    reply_code: int,
    reply_text: str,
    exchange: str,
    routing_key: str,
    raw_props: bytes,
    body: bytes,
    frame_max: int,
) -> Encoded:
    """Encode ``basic.return`` + content header + body frames as one ``bytes`` (``Encoded``).

    Raises:
        ValueError: a text or name longer than 255 octets, or ``frame_max`` too small.
    """
    rt = reply_text.encode("utf-8")
    ex = exchange.encode("utf-8")
    rk = routing_key.encode("utf-8")
    lrt, lex, lrk = len(rt), len(ex), len(rk)
    if (lrt | lex | lrk) > 255:
        raise ValueError("reply text, exchange and routing key are limited to 255 octets")
    parts = (
        _RETURN_HEAD.pack(FRAME_METHOD, channel, 9 + lrt + lex + lrk, BASIC_RETURN, reply_code, lrt),
        rt,
        _BYTE[lex],
        ex,
        _BYTE[lrk],
        rk,
        _END_HEADER_FRAME.pack(
            FRAME_END, FRAME_HEADER, channel, 12 + len(raw_props), _BASIC_CLASS, 0, len(body)
        ),
    )
    return _finish(parts, channel, raw_props, body, frame_max)


def encode_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """Encode a complete ``basic.ack`` frame (publisher confirms)."""
    return _ACK_FRAME.pack(FRAME_METHOD, channel, 13, BASIC_ACK, delivery_tag, multiple, FRAME_END)


def encode_nack(channel: int, delivery_tag: int, multiple: bool, requeue: bool = False) -> bytes:
    """Encode a complete ``basic.nack`` frame (publisher confirms)."""
    return _ACK_FRAME.pack(
        FRAME_METHOD, channel, 13, BASIC_NACK, delivery_tag, multiple | (requeue << 1), FRAME_END
    )
