"""``persistence.arguments``: stored arguments are AMQP field tables unless a key needs the wide form.

Cases: every AMQP type round-trips with its tag in both forms; keys that fit give the field table
itself (what earlier versions stored, so old rows and stored bindings are found again); a key over 255
octets, at any depth, gives the wide form, deterministically; malformed wide octets are a FrameError.
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from ottermq.amqp.errors import FrameError
from ottermq.amqp.table import (
    Float,
    Long,
    LongStr,
    Octet,
    Short,
    ShortShort,
    Timestamp,
    ULong,
    UShort,
    decode_table,
    encode_table,
)
from ottermq.persistence.arguments import WIDE, decode_arguments, encode_arguments

EVERY_TYPE: dict[str, Any] = {
    "bool": True,
    "b": ShortShort(-2),
    "B": Octet(200),
    "s": Short(-300),
    "u": UShort(60000),
    "I": Long(-70000),
    "i": ULong(4_000_000_000),
    "l": 2**62,
    "T": Timestamp(1_700_000_000),
    "f": Float(1.5),
    "d": 2.25,
    "D": Decimal("12.50"),
    "S": "text ü",
    "S-bytes": LongStr(b"\xff\xfe"),
    "x": b"\x00\x01",
    "V": None,
    "A": [1, "two", [Long(3)], {"k": Short(4)}],
    "F": {"inner": {"deeper": True}},
}


def _tags(value: Any) -> Any:
    """``value`` with each scalar's type name beside it, to compare types as well as values (a plain
    ``int`` is written as ``l`` and read back as ``LongLong``)."""
    if isinstance(value, dict):
        return {k: _tags(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_tags(v) for v in value]
    return ("LongLong" if type(value) is int else type(value).__name__, value)


def test_keys_that_fit_are_stored_as_the_field_table_itself():
    raw = encode_arguments(EVERY_TYPE)
    assert raw == encode_table(EVERY_TYPE)
    assert _tags(decode_arguments(raw)) == _tags(EVERY_TYPE)
    assert encode_arguments({}) == b"\x00\x00\x00\x00"
    assert encode_arguments({"k" * 255: 1}) == encode_table({"k" * 255: 1})  # 255 octets still fit


def test_rows_written_by_earlier_versions_read_as_before():
    old = encode_table({"x-max-length": 5, "x-dead-letter-exchange": "dlx", "nested": [{"a": Long(1)}]})
    assert decode_arguments(old) == decode_table(old)[0]


@pytest.mark.parametrize(
    "arguments",
    [
        {"k" * 256: 1},
        {"k" * 300: "v", **EVERY_TYPE},
        {"nested": {"n" * 260: [1, {"m" * 70_000: "deep"}]}},
        {"in an array": [{"é" * 128: Timestamp(5)}]},  # 256 octets of UTF-8
    ],
)
def test_a_longer_key_at_any_depth_takes_the_wide_form(arguments: dict[str, Any]):
    raw = encode_arguments(arguments)
    assert raw[0] == WIDE
    assert _tags(decode_arguments(raw)) == _tags(arguments)
    assert encode_arguments(dict(arguments)) == raw  # deterministic: a stored binding is found again
    with pytest.raises(ValueError):
        encode_table(arguments)  # what made durable declares fail before


def test_a_field_table_can_never_start_like_the_wide_form():
    """A table's first octet is the top octet of its 32-bit length: 0xFF would mean 4 GiB or more."""
    raw = encode_table({"k": "v" * 1000})
    assert raw[0] == 0 and raw[0] != WIDE


def test_a_key_that_is_not_utf8_keeps_its_octets():
    arguments = {b"\xff".decode("utf-8", "surrogateescape") + "k" * 300: 1}
    assert decode_arguments(encode_arguments(arguments)) == arguments


@pytest.mark.parametrize(
    "raw",
    [
        bytes([WIDE]),  # no table
        bytes([WIDE]) + b"\x00\x00\x00\x09\x00\x00\x01\x2c",  # a key longer than the table
        bytes([WIDE]) + b"\x00\x00\x00\x06\x00\x00\x00\x01kZ",  # unknown field type
        bytes([WIDE]) + b"\x00\x00\x00\x06\x00\x00\x00\x01kI",  # truncated value
        bytes([WIDE]) + b"\x00\x00\x00\x00extra",  # octets after the table
    ],
)
def test_malformed_wide_octets_are_a_frame_error(raw: bytes):
    with pytest.raises(FrameError):
        decode_arguments(raw)


def test_values_the_codec_refuses_are_refused_in_the_wide_form_too():
    with pytest.raises(ValueError):
        encode_arguments({"k" * 300: Octet(300)})
    with pytest.raises(TypeError):
        encode_arguments({"k" * 300: object()})
    assert decode_arguments(encode_arguments({"k" * 300: datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)}))
