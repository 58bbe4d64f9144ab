"""Fast-path decoders reject garbage with FrameError; encoders reject impossible input."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from ottermq.amqp import fastpath
from ottermq.amqp.errors import FrameError
from pamqp import commands as spec
from pamqp import encode as pamqp_encode
from pamqp import frame as pframe

# installed (compiled by mypyc) and pure-Python modules, the same expectations (tests/conftest.py)
pytestmark = pytest.mark.hot_path


def publish_payload(exchange: bytes = b"ex", routing_key: bytes = b"rk", bits: int = 0) -> bytes:
    return (
        struct.pack(">IH", fastpath.BASIC_PUBLISH, 0)
        + bytes([len(exchange)])
        + exchange
        + bytes([len(routing_key)])
        + routing_key
        + bytes([bits])
    )


def test_method_key() -> None:
    assert fastpath.method_key(b"\x00\x3c\x00\x28rest") == 0x003C0028
    for short in (b"", b"\x00", b"\x00\x3c\x00"):
        with pytest.raises(FrameError):
            fastpath.method_key(short)


def test_decode_publish_bits() -> None:
    assert fastpath.decode_publish(publish_payload(bits=3)) == ("ex", "rk", True, True)
    assert fastpath.decode_publish(publish_payload(b"", b"", 0)) == ("", "", False, False)


def test_decode_publish_every_truncation() -> None:
    payload = publish_payload(b"exchange", b"key")
    for cut in range(len(payload)):
        with pytest.raises(FrameError):
            fastpath.decode_publish(payload[:cut])


def test_decode_publish_trailing_octets() -> None:
    with pytest.raises(FrameError):
        fastpath.decode_publish(publish_payload() + b"\x00")


@pytest.mark.parametrize("bad", [(b"\xff", b"rk"), (b"ex", b"\xc3\x28")])
def test_decode_publish_invalid_utf8(bad: tuple[bytes, bytes]) -> None:
    with pytest.raises(FrameError):
        fastpath.decode_publish(publish_payload(*bad))


@pytest.mark.parametrize("decoder", [fastpath.decode_ack, fastpath.decode_reject, fastpath.decode_nack])
@pytest.mark.parametrize("size", [0, 4, 12, 14])
def test_tag_decoders_reject_wrong_sizes(decoder: object, size: int) -> None:
    with pytest.raises(FrameError):
        decoder(b"\x00" * size)  # type: ignore[operator]


def test_decode_header_needs_flags() -> None:
    with pytest.raises(FrameError):
        fastpath.decode_header(b"\x00\x3c\x00\x00" + b"\x00" * 9)
    assert fastpath.decode_header(b"\x00\x3c\x00\x00" + struct.pack(">Q", 3) + b"\x00\x00") == (
        60,
        3,
        b"\x00\x00",
    )


def test_decode_method_unknown_ids_are_named() -> None:
    with pytest.raises(FrameError) as info:
        fastpath.decode_method(struct.pack(">HH", 99, 10))
    assert "99" in info.value.text and "10" in info.value.text


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x32\x00\x0a",  # queue.declare with no arguments at all
        b"\x00\x32\x00\x0a\x00\x00\x01",  # truncated queue name
        b"\x00\x32\x00\x0a\x00\x00\x01q\x00\x00\x00\x00\x09",  # table length beyond payload
        b"\x00\x28\x00\x0a\x00\x00\x02\xff\xfe",  # exchange.declare with invalid UTF-8 name
        b"",
    ],
)
def test_decode_method_garbage_is_frame_error(payload: bytes) -> None:
    with pytest.raises(FrameError):
        fastpath.decode_method(payload)


def test_decode_method_basic_publish_via_pamqp_too() -> None:
    method = fastpath.decode_method(publish_payload(b"e", b"r", 1))
    assert isinstance(method, spec.Basic.Publish)
    assert (method.exchange, method.routing_key, method.mandatory) == ("e", "r", True)


def test_encoders_reject_names_over_255_octets() -> None:
    long_name = "é" * 128  # 256 octets
    with pytest.raises(ValueError):
        fastpath.encode_deliver(1, long_name, 1, False, "", "", b"\x00\x00", b"", 0)
    with pytest.raises(ValueError):
        fastpath.encode_get_ok(1, 1, False, "", long_name, 0, b"\x00\x00", b"", 0)
    with pytest.raises(ValueError):
        fastpath.encode_return(1, 312, long_name, "", "", b"\x00\x00", b"", 0)


def test_frame_max_too_small_for_a_body() -> None:
    with pytest.raises(ValueError):
        fastpath.encode_content(1, b"\x00\x00", b"abc", 8)


def test_body_may_be_any_buffer() -> None:
    body = bytearray(b"z" * 10_000)
    got = fastpath.encode_content(1, b"\x00\x00", memoryview(body), 4096)
    assert got == fastpath.encode_content(1, b"\x00\x00", bytes(body), 4096)


@pytest.mark.parametrize(
    "method",
    [
        spec.Queue.Declare(queue="q", durable=True),
        spec.Exchange.Declare(exchange="x", exchange_type="topic", internal=True),
        spec.Queue.Bind(queue="q", exchange="x", routing_key="k"),
        spec.Queue.Unbind(queue="q", exchange="x", routing_key="k"),
        spec.Exchange.Bind(destination="d", source="s", routing_key="k"),
        spec.Exchange.Unbind(destination="d", source="s", routing_key="k"),
        spec.Basic.Consume(queue="q", consumer_tag="t", exclusive=True),
    ],
    ids=lambda m: m.name,
)
def test_of_an_argument_given_twice_the_first_counts(method: Any) -> None:
    """pamqp keeps the last of two equal keys, RabbitMQ the first: ``decode_method`` reads the table
    (each of these methods' last field) again; the other fields stay pamqp's."""
    method.arguments = {"x-max-length": 10, "x-other": "o"}
    payload = bytearray(pframe.marshal(method, 1)[7:-1])
    start = len(payload) - len(pamqp_encode.field_table(method.arguments))  # the table's length prefix
    extra = bytes([12]) + b"x-max-length" + b"I" + struct.pack(">i", 20)
    struct.pack_into(">I", payload, start, struct.unpack_from(">I", payload, start)[0] + len(extra))
    decoded = fastpath.decode_method(bytes(payload) + extra)
    assert decoded.arguments == {"x-max-length": 10, "x-other": "o"}
    for name in (
        "queue",
        "exchange",
        "routing_key",
        "destination",
        "source",
        "consumer_tag",
        "exchange_type",
    ):
        assert getattr(decoded, name, None) == getattr(method, name, None)
    assert [getattr(decoded, f, None) for f in ("durable", "internal", "exclusive")] == [
        getattr(method, f, None) for f in ("durable", "internal", "exclusive")
    ]


@pytest.mark.parametrize("tag", [b"F", b"A"])
def test_arguments_nested_as_deep_as_a_frame_holds_decode_to_max_depth(tag: bytes) -> None:
    """RabbitMQ accepts a queue.declare whose arguments nest 15,000 deep (measured); pamqp's decoder
    recursed past Python's limit (a 501 here). Read to MAX_DEPTH, the rest kept as its octets."""
    from ottermq.amqp.table import MAX_DEPTH, RawField, encode_table

    inner = b"S" + struct.pack(">I", 1) + b"x"
    for _ in range(15_000):
        body = (b"\x01a" if tag == b"F" else b"") + inner
        inner = tag + struct.pack(">I", len(body)) + body
    table = b"\x06x-junk" + inner
    method = spec.Queue.Declare(queue="q", durable=True)
    payload = bytearray(pframe.marshal(method, 1)[7:-1])
    payload[-4:] = struct.pack(">I", len(table))
    decoded = fastpath.decode_method(bytes(payload) + table)
    assert (decoded.queue, decoded.durable) == ("q", True)
    value = decoded.arguments["x-junk"]
    for _ in range(MAX_DEPTH):
        value = value["a"] if tag == b"F" else value[0]
    assert isinstance(value, RawField)
    assert encode_table(decoded.arguments) == struct.pack(">I", len(table)) + table


def test_a_truncated_arguments_table_is_a_frame_error() -> None:
    payload = bytearray(pframe.marshal(spec.Queue.Declare(queue="q", arguments={"a": "b"}), 1)[7:-1])
    with pytest.raises(FrameError, match="cannot decode Queue.Declare"):
        fastpath.decode_method(bytes(payload[:-1]))
