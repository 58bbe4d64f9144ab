"""Type-preserving field-table codec: byte-exact round trips and pamqp compatibility."""

from __future__ import annotations

import datetime
import math
import struct
from decimal import Decimal

import pytest
from ottermq.amqp.errors import FrameError
from ottermq.amqp.table import (
    MAX_DEPTH,
    Float,
    Long,
    LongLong,
    LongStr,
    Octet,
    RawField,
    Short,
    ShortShort,
    Timestamp,
    ULong,
    UShort,
    decode_array,
    decode_table,
    encode_table,
    field_type,
)
from pamqp import decode as pamqp_decode
from pamqp import encode as pamqp_encode


def table_bytes(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack(">I", len(body)) + body


def entry(key: str, tag: bytes, value: bytes) -> bytes:
    raw = key.encode()
    return bytes([len(raw)]) + raw + tag + value


def long_bytes(raw: bytes) -> bytes:
    return struct.pack(">I", len(raw)) + raw


# One entry per tag RabbitMQ and amqp091-go send, with edge values.
TAGGED_ENTRIES = [
    entry("t1", b"t", b"\x01"),
    entry("t0", b"t", b"\x00"),
    entry("b", b"b", struct.pack(">b", -128)),
    entry("B", b"B", struct.pack(">B", 255)),
    entry("s", b"s", struct.pack(">h", -32768)),
    entry("u", b"u", struct.pack(">H", 65535)),
    entry("I", b"I", struct.pack(">i", -(2**31))),
    entry("i", b"i", struct.pack(">I", 2**32 - 1)),
    entry("l", b"l", struct.pack(">q", -(2**63))),
    entry("l-small", b"l", struct.pack(">q", 1)),
    entry("f", b"f", struct.pack(">f", 1.5)),
    entry("d", b"d", struct.pack(">d", 0.1)),
    entry("D", b"D", struct.pack(">BI", 2, 12345)),
    entry("D0", b"D", struct.pack(">BI", 3, 0)),
    entry("S", b"S", long_bytes("héllo wörld".encode())),
    entry("S-empty", b"S", long_bytes(b"")),
    entry("T", b"T", struct.pack(">Q", 1_700_000_000)),
    entry("V", b"V", b""),
    entry("x", b"x", long_bytes(b"\x00\xff\x10")),
]


@pytest.mark.parametrize("raw_entry", TAGGED_ENTRIES, ids=lambda e: e[1 : 1 + e[0]].decode())
def test_every_tag_round_trips_byte_for_byte(raw_entry: bytes) -> None:
    data = table_bytes(raw_entry)
    table, end = decode_table(data)
    assert end == len(data)
    assert encode_table(table) == data


def test_whole_table_with_every_tag_round_trips() -> None:
    data = table_bytes(*TAGGED_ENTRIES)
    table, _ = decode_table(data)
    assert encode_table(table) == data


def test_decoded_values_are_plain_python_values() -> None:
    table, _ = decode_table(table_bytes(*TAGGED_ENTRIES))
    assert table["t1"] is True and table["t0"] is False
    assert table["b"] == -128 and type(table["b"]) is ShortShort
    assert table["B"] == 255 and type(table["B"]) is Octet
    assert table["s"] == -32768 and type(table["s"]) is Short
    assert table["u"] == 65535 and type(table["u"]) is UShort
    assert table["I"] == -(2**31) and type(table["I"]) is Long
    assert table["i"] == 2**32 - 1 and type(table["i"]) is ULong
    assert table["l"] == -(2**63) and type(table["l"]) is LongLong
    assert table["f"] == 1.5 and type(table["f"]) is Float
    assert table["d"] == 0.1 and type(table["d"]) is float
    assert table["D"] == Decimal("123.45")
    assert table["S"] == "héllo wörld" and type(table["S"]) is str
    assert table["T"] == 1_700_000_000 and type(table["T"]) is Timestamp
    assert table["V"] is None
    assert table["x"] == b"\x00\xff\x10" and type(table["x"]) is bytes


def test_tagged_values_behave_like_builtins() -> None:
    assert Long(5) + 1 == 6
    assert {3: "a"}[LongLong(3)] == "a"
    assert Float(0.5) * 2 == 1.0
    assert Timestamp(0).to_datetime() == datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def test_nested_arrays_and_tables_round_trip() -> None:
    inner_table = table_bytes(entry("count", b"l", struct.pack(">q", 3)), entry("q", b"S", long_bytes(b"q1")))
    array = long_bytes(
        b"S"
        + long_bytes(b"rk1")
        + b"I"
        + struct.pack(">i", 7)
        + b"F"
        + inner_table
        + b"A"
        + long_bytes(b"t\x01" + b"V")
        + b"T"
        + struct.pack(">Q", 42)
    )
    data = table_bytes(entry("x-death", b"A", array), entry("nested", b"F", inner_table))
    table, _ = decode_table(data)
    assert encode_table(table) == data
    x_death = table["x-death"]
    assert isinstance(x_death, list)
    assert x_death[0] == "rk1" and x_death[2] == {"count": 3, "q": "q1"} and x_death[3] == [True, None]


def test_x_death_style_table_from_plain_values() -> None:
    """Plain Python values encode with RabbitMQ's defaults: int -> l, datetime -> T, list -> A."""
    when = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    data = encode_table(
        {
            "count": 1,
            "reason": "expired",
            "queue": "q",
            "time": when,
            "routing-keys": ["rk"],
            "original-expiration": "100",
        }
    )
    table, _ = decode_table(data)
    assert type(table["count"]) is LongLong
    assert table["time"] == int(when.timestamp()) and type(table["time"]) is Timestamp
    assert table["routing-keys"] == ["rk"]
    assert encode_table(table) == data
    assert data[4:].startswith(b"\x05countl" + struct.pack(">q", 1))


@pytest.mark.parametrize(
    ("value", "tag", "packed"),
    [
        (True, b"t", b"\x01"),
        (False, b"t", b"\x00"),
        (7, b"l", struct.pack(">q", 7)),
        (-(2**63), b"l", struct.pack(">q", -(2**63))),
        (0.25, b"d", struct.pack(">d", 0.25)),
        ("ü", b"S", long_bytes("ü".encode())),
        (b"\x01", b"x", long_bytes(b"\x01")),
        (bytearray(b"\x02"), b"x", long_bytes(b"\x02")),
        (None, b"V", b""),
        (Decimal("1.5"), b"D", struct.pack(">BI", 1, 15)),
        (Decimal("-1.5"), b"D", struct.pack(">Bi", 1, -15)),
        (Decimal("1E+2"), b"D", struct.pack(">BI", 0, 100)),
        (datetime.datetime(1970, 1, 1, 0, 0, 10), b"T", struct.pack(">Q", 10)),
        ({}, b"F", struct.pack(">I", 0)),
        ([], b"A", struct.pack(">I", 0)),
        ((1,), b"A", long_bytes(b"l" + struct.pack(">q", 1))),
        (Octet(1), b"B", b"\x01"),
        (ShortShort(-1), b"b", b"\xff"),
        (Short(-2), b"s", struct.pack(">h", -2)),
        (UShort(2), b"u", struct.pack(">H", 2)),
        (Long(-3), b"I", struct.pack(">i", -3)),
        (ULong(3), b"i", struct.pack(">I", 3)),
        (LongLong(4), b"l", struct.pack(">q", 4)),
        (Float(2.0), b"f", struct.pack(">f", 2.0)),
        (Timestamp(9), b"T", struct.pack(">Q", 9)),
        (LongStr(b"\xff\xfe"), b"S", long_bytes(b"\xff\xfe")),
    ],
)
def test_encode_defaults_and_tags(value: object, tag: bytes, packed: bytes) -> None:
    assert encode_table({"k": value}) == table_bytes(entry("k", tag, packed))


def test_nan_double_round_trips() -> None:
    data = table_bytes(entry("n", b"d", struct.pack(">d", math.nan)))
    table, _ = decode_table(data)
    assert encode_table(table) == data


def test_l_upper_decodes_as_signed_64_and_reencodes_as_l_like_rabbitmq() -> None:
    table, _ = decode_table(table_bytes(entry("L", b"L", struct.pack(">q", -5))))
    assert table == {"L": -5} and type(table["L"]) is LongLong
    assert encode_table(table) == table_bytes(entry("L", b"l", struct.pack(">q", -5)))


def test_boolean_nonzero_octet_is_true_and_reencodes_as_one() -> None:
    table, _ = decode_table(table_bytes(entry("t", b"t", b"\x02")))
    assert table == {"t": True}
    assert encode_table(table) == table_bytes(entry("t", b"t", b"\x01"))


def test_invalid_utf8_string_and_key_keep_their_bytes() -> None:
    data = table_bytes(b"\x02\xff\xfe" + b"S" + long_bytes(b"\xc3\x28"))
    table, _ = decode_table(data)
    (key,) = table
    assert isinstance(table[key], LongStr) and table[key] == b"\xc3\x28"
    assert encode_table(table) == data


def test_decode_at_offset_and_limit() -> None:
    data = b"junk" + table_bytes(entry("a", b"V", b"")) + b"tail"
    table, end = decode_table(data, 4)
    assert table == {"a": None} and data[end:] == b"tail"
    with pytest.raises(FrameError):
        decode_table(data, 4, limit=8)


def test_decode_array_directly() -> None:
    data = long_bytes(b"b\x01B\x02")
    values, end = decode_array(data)
    assert values == [1, 2] and end == len(data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\x00",
        struct.pack(">I", 10) + b"\x01a",  # length exceeds data
        table_bytes(b"\x05ab"),  # key overruns table
        table_bytes(b"\x01a"),  # key without value
        table_bytes(b"\x01aZ"),  # unknown tag
        table_bytes(b"\x01aI\x00\x00"),  # truncated int
        table_bytes(b"\x01aS\x00\x00\x00\x09abc"),  # string overruns table
        table_bytes(b"\x01aF" + struct.pack(">I", 3) + b"\x01"),  # nested table overruns
        table_bytes(b"\x01aD\x02"),  # truncated decimal
        table_bytes(b"\x01at"),  # truncated boolean
        table_bytes(b"\x01aA" + struct.pack(">I", 1) + b"Z"),  # bad array item
    ],
)
def test_malformed_tables_raise_frame_error(data: bytes) -> None:
    with pytest.raises(FrameError):
        decode_table(data)


@pytest.mark.parametrize(
    ("value", "exc"),
    [
        (2**63, ValueError),
        (Octet(256), ValueError),
        (Short(40000), ValueError),
        (Decimal("1e-300"), ValueError),
        (Decimal("NaN"), ValueError),
        (object(), TypeError),
        ({1, 2}, TypeError),
    ],
)
def test_unencodable_values(value: object, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        encode_table({"k": value})


def test_key_longer_than_255_octets_is_rejected() -> None:
    with pytest.raises(ValueError):
        encode_table({"k" * 256: 1})


def test_pamqp_decodes_our_encoding_of_common_types() -> None:
    value = {
        "str": "value",
        "int": 123456789012,
        "neg": -1,
        "bool": True,
        "float": 1.25,
        "none": None,
        "dec": Decimal("3.14"),
        "list": ["a", 1, False],
        "table": {"inner": "x"},
        "bytes": b"\x00\x01",
    }
    _, decoded = pamqp_decode.field_table(encode_table(value))
    assert decoded == {**value, "bytes": bytearray(b"\x00\x01")}


def test_we_decode_pamqp_encoding_of_common_types() -> None:
    value = {
        "str": "value",
        "small": 5,
        "short": -300,
        "ushort": 40000,
        "int": -100000,
        "uint": 3_000_000_000,
        "big": 2**40,
        "bool": False,
        "float": 1.25,
        "none": None,
        "dec": Decimal("3.14"),
        "list": ["a", 1, [True]],
        "table": {"inner": {"deeper": "x"}},
        "ts": datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC),
        "bytes": bytearray(b"\x00\x01"),
    }
    raw = pamqp_encode.field_table(value)  # type: ignore[arg-type]
    decoded, end = decode_table(raw)
    assert end == len(raw)
    assert decoded == {**value, "ts": 1577836800, "bytes": b"\x00\x01"}
    assert encode_table(decoded) == raw  # pamqp's integer widths survive a round trip


# RabbitMQ's type atom for each tag (rabbit_binary_parser), as error texts print it.
FIELD_TYPES = [
    (b"t", b"\x01", "bool"),
    (b"b", b"\x01", "byte"),
    (b"B", b"\x01", "unsignedbyte"),
    (b"s", struct.pack(">h", 1), "short"),
    (b"u", struct.pack(">H", 1), "unsignedshort"),
    (b"I", struct.pack(">i", 1), "signedint"),
    (b"i", struct.pack(">I", 1), "unsignedint"),
    (b"l", struct.pack(">q", 1), "long"),
    (b"L", struct.pack(">q", 1), "long"),
    (b"f", struct.pack(">f", 1), "float"),
    (b"d", struct.pack(">d", 1), "double"),
    (b"D", struct.pack(">BI", 1, 5), "decimal"),
    (b"S", long_bytes(b"a"), "longstr"),
    (b"S", long_bytes(b"\xff"), "longstr"),
    (b"T", struct.pack(">Q", 1), "timestamp"),
    (b"F", long_bytes(b""), "table"),
    (b"A", long_bytes(b""), "array"),
    (b"x", long_bytes(b"a"), "binary"),
    (b"V", b"", "void"),
]


@pytest.mark.parametrize("tag, raw, name", FIELD_TYPES, ids=[f"{t.decode()}-{n}" for t, _, n in FIELD_TYPES])
def test_field_type_names_decoded_values_as_rabbitmq_does(tag: bytes, raw: bytes, name: str) -> None:
    table, _ = decode_table(table_bytes(entry("k", tag, raw)))
    assert field_type(table["k"]) == name


def test_field_type_of_plain_python_values_follows_their_encoding() -> None:
    assert [field_type(v) for v in (1, 1.0, "s", b"x", [], {}, None, True, Decimal("1"))] == [
        "long",
        "double",
        "longstr",
        "binary",
        "array",
        "table",
        "void",
        "bool",
        "decimal",
    ]
    with pytest.raises(TypeError):
        field_type(object())


def test_a_key_twice_decodes_to_its_first_value() -> None:
    """RabbitMQ's rabbit_misc:table_lookup reads the first occurrence; the bytes are left alone."""
    entry = lambda key, n: bytes([len(key)]) + key + b"I" + struct.pack(">i", n)  # noqa: E731
    body = entry(b"a", 1) + entry(b"b", 2) + entry(b"a", 3)
    table, end = decode_table(struct.pack(">I", len(body)) + body)
    assert table == {"a": 1, "b": 2} and end == 4 + len(body)


def _nested(levels: int, tag: bytes) -> bytes:
    """A table ``{"v": <levels of tag-nesting around a long string>}``, built without recursion."""
    inner = b"S" + struct.pack(">I", 1) + b"x"
    for _ in range(levels):
        body = (b"\x01a" if tag == b"F" else b"") + inner
        inner = tag + struct.pack(">I", len(body)) + body
    body = b"\x01v" + inner
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize("tag", [b"F", b"A"])
@pytest.mark.parametrize("levels", [1, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 26_000])
def test_nesting_of_any_depth_round_trips_and_is_read_only_to_max_depth(tag: bytes, levels: int) -> None:
    """RabbitMQ accepts headers nested as deep as a frame holds; decoding stops at MAX_DEPTH (no
    unbounded recursion) and keeps the rest as its octets, encoded back unchanged."""
    raw = _nested(levels, tag)
    table, end = decode_table(raw)
    assert end == len(raw) and encode_table(table) == raw
    value = table["v"]
    for _ in range(min(levels, MAX_DEPTH) - 1):
        value = value["a"] if tag == b"F" else value[0]  # type: ignore[index,call-overload]
    if levels > MAX_DEPTH:
        inner = value["a"] if tag == b"F" else value[0]  # type: ignore[index,call-overload]
        assert isinstance(inner, RawField) and field_type(inner) == ("table" if tag == b"F" else "array")
        assert inner == RawField(inner.raw) and hash(inner) == hash(RawField(inner.raw))
    else:
        assert not isinstance(value, RawField)


def test_a_malformed_value_deeper_than_max_depth_is_still_bounded_by_its_length() -> None:
    raw = bytearray(_nested(MAX_DEPTH + 5, b"A"))
    raw[-6] = ord("?")  # an unknown tag inside the part that is not read
    table, _ = decode_table(bytes(raw))
    assert encode_table(table) == bytes(raw)  # forwarded as it came
    with pytest.raises(FrameError):
        decode_table(bytes(raw[:-1]))  # but the lengths still have to add up


def test_decode_only_some_keys_keeps_every_other_value_as_its_octets() -> None:
    table = {
        "a": 1,
        "b": "text",
        "c": {"n": [1, 2.5, None, True]},
        "d": Decimal("1.5"),
        "e": b"\xff",
        "f": Short(3),
        "g": None,
    }
    raw = encode_table(table)
    shallow, end = decode_table(raw, only=frozenset({"b", "c"}))
    assert end == len(raw) and encode_table(shallow) == raw
    assert shallow["b"] == "text" and shallow["c"] == {"n": [1, 2.5, None, True]}
    kinds = {k: field_type(v) for k, v in shallow.items() if isinstance(v, RawField)}
    assert kinds == {"a": "long", "d": "decimal", "e": "binary", "f": "short", "g": "void"}
    with pytest.raises(FrameError):
        decode_table(raw[:-1] + b"?", only=frozenset())  # an unknown field type is refused unread too
