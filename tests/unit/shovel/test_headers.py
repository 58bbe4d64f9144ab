"""What a shovel changes in a message's properties (``broker/shovel/headers.py``)."""

from __future__ import annotations

import struct

import pytest
from ottermq.amqp.props import HEADERS_BIT, split_props
from ottermq.amqp.table import Long, LongLong, Short, decode_table, encode_table
from ottermq.broker.shovel.headers import HeaderError, rewrite

FORWARD = [("shovelled-by", "n"), ("shovel-type", "dynamic"), ("shovel-name", "s"), ("shovel-vhost", "/")]


def props(headers: dict[str, object] | None = None, delivery_mode: int | None = None) -> bytes:
    flags, fields = 0, b""
    if headers is not None:
        flags |= 0x2000
        fields += encode_table(headers)
    if delivery_mode is not None:
        flags |= 0x1000
        fields += bytes((delivery_mode,))
    return struct.pack(">H", flags) + fields


def headers_of(raw: bytes) -> bytes:
    return split_props(raw)[1][HEADERS_BIT]


def test_nothing_asked_nothing_changed() -> None:
    raw = props({"b": Short(1)}, 2)
    assert rewrite(raw, {}, None, None) is raw


def test_forward_headers_are_an_array_of_one_table_of_long_strings_and_the_table_is_sorted() -> None:
    raw = props({"z": Short(1), "a": Long(2)}, 2)
    out = rewrite(raw, {}, FORWARD, None)
    table = headers_of(out)
    # a, x-shovelled, z: sorted by key; the other values keep their types (s, I)
    expected = encode_table({"a": Long(2), "x-shovelled": [dict(FORWARD)], "z": Short(1)})
    assert table == expected
    assert b"S\x00\x00\x00\x07dynamic" in table and split_props(out)[1][0x1000] == b"\x02"


def test_an_existing_array_follows_the_new_table_and_another_value_moves_to_x_invalid_headers() -> None:
    prior = [{"shovel-name": "first"}]
    out = decode_table(headers_of(rewrite(props({"x-shovelled": prior}), {}, FORWARD, None)))[0]
    assert out["x-shovelled"] == [dict(FORWARD), *prior]
    out = decode_table(headers_of(rewrite(props({"x-shovelled": "odd"}), {}, FORWARD, None)))[0]
    assert out["x-shovelled"] == [dict(FORWARD)] and out["x-invalid-headers"] == {"x-shovelled": ["odd"]}


def test_the_timestamp_header_is_a_signed_64_bit_integer_of_seconds() -> None:
    table = headers_of(rewrite(props(), {}, None, 1_700_000_000))
    assert table == encode_table({"x-shovelled-timestamp": LongLong(1_700_000_000)})
    assert table[4 + 1 + len("x-shovelled-timestamp")] == ord("l")


def test_publish_properties_replace_the_messages() -> None:
    out = split_props(
        rewrite(props(None, 1), {"delivery_mode": 2, "content_type": "text/plain"}, None, None)
    )[1]
    assert out[0x1000] == b"\x02" and out[0x8000] == b"\x0atext/plain"


@pytest.mark.parametrize(
    "bad", [{"delivery_mode": 300}, {"priority": 1.5}, {"timestamp": -1}, {"message_id": "x" * 300}]
)
def test_a_value_that_does_not_fit_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(HeaderError):
        rewrite(props(), bad, None, None)


def test_malformed_properties_are_refused() -> None:
    with pytest.raises(HeaderError):
        rewrite(b"\x20\x00\x00\x00\x00\x09", {}, FORWARD, None)
