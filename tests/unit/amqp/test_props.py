"""Property access on raw content-header octets and RabbitMQ-exact expiration validation."""

from __future__ import annotations

import datetime
import struct

import pytest
from ottermq.amqp.errors import FrameError, PreconditionFailed
from ottermq.amqp.props import (
    MAX_EXPIRATION_MS,
    decode_properties,
    get_headers,
    parse_expiration,
    quick_props,
)
from ottermq.amqp.table import LongLong, Timestamp, encode_table
from pamqp import commands

# installed (compiled by mypyc) and pure-Python modules, the same expectations (tests/conftest.py)
pytestmark = pytest.mark.hot_path

FULL = commands.Basic.Properties(
    content_type="application/json",
    content_encoding="gzip",
    headers={"x-match": "all", "n": 1, "nested": {"a": [1, "b"]}},
    delivery_mode=2,
    priority=7,
    correlation_id="corr",
    reply_to="amq.rabbitmq.reply-to",
    expiration="60000",
    message_id="mid",
    timestamp=datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC),
    message_type="type",
    user_id="guest",
    app_id="app",
)


def full_with_cluster_id() -> bytes:
    props = commands.Basic.Properties(**{k: getattr(FULL, k) for k in FULL.__slots__ if k != "cluster_id"})
    props.cluster_id = "cluster"  # pamqp's constructor refuses it; marshal does not
    return props.marshal()


def shortstr(value: str) -> bytes:
    raw = value.encode()
    return bytes([len(raw)]) + raw


def test_no_properties() -> None:
    assert quick_props(b"\x00\x00") == (0, None, None, None)
    assert get_headers(b"\x00\x00") is None


def test_every_property_set() -> None:
    raw = FULL.marshal()
    assert quick_props(raw) == (2, 7, "60000", "guest")
    assert quick_props(full_with_cluster_id()) == (2, 7, "60000", "guest")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"delivery_mode": 1}, (1, None, None, None)),
        ({"priority": 0}, (0, 0, None, None)),
        ({"expiration": "5"}, (0, None, "5", None)),
        ({"user_id": "ü"}, (0, None, None, "ü")),
        ({"content_type": "t", "expiration": "10", "app_id": "a"}, (0, None, "10", None)),
        (
            {"headers": {"a": "b"}, "priority": 9, "timestamp": datetime.datetime(2000, 1, 1)},
            (0, 9, None, None),
        ),
        ({"message_id": "m", "message_type": "t", "user_id": "u"}, (0, None, None, "u")),
    ],
)
def test_selected_properties(kwargs: dict[str, object], expected: tuple[object, ...]) -> None:
    assert quick_props(commands.Basic.Properties(**kwargs).marshal()) == expected  # type: ignore[arg-type]


def test_empty_expiration_and_user_id_are_present_not_none() -> None:
    raw = struct.pack(">H", 0x0100 | 0x0010) + shortstr("") + shortstr("")
    assert quick_props(raw) == (0, None, "", "")


def test_continuation_flag_words_are_skipped() -> None:
    raw = struct.pack(">HH", 0x0100 | 0x0001, 0x0000) + shortstr("42")
    assert quick_props(raw) == (0, None, "42", None)


@pytest.mark.parametrize("cut", [0, 1, 3, 10, 40, 100])
def test_truncated_property_lists_raise_frame_error(cut: int) -> None:
    raw = FULL.marshal()
    with pytest.raises(FrameError):
        quick_props(raw[:cut])


def test_truncated_trailing_shortstr_is_detected() -> None:
    raw = full_with_cluster_id()
    with pytest.raises(FrameError):
        quick_props(raw[:-1])


def test_truncated_continuation_word() -> None:
    with pytest.raises(FrameError):
        quick_props(b"\x00\x01\x00")


def test_invalid_utf8_expiration_is_a_frame_error() -> None:
    with pytest.raises(FrameError):
        quick_props(struct.pack(">H", 0x0100) + b"\x01\xff")


def test_get_headers_keeps_types() -> None:
    table = {"count": LongLong(3), "time": Timestamp(5), "s": "v"}
    raw = struct.pack(">H", 0x8000 | 0x4000 | 0x2000 | 0x1000) + shortstr("ct") + shortstr("ce")
    raw += encode_table(table) + b"\x02"
    headers = get_headers(raw)
    assert headers == table
    assert headers is not None and type(headers["time"]) is Timestamp
    assert quick_props(raw) == (2, None, None, None)


def test_get_headers_from_pamqp() -> None:
    assert get_headers(FULL.marshal()) == {"x-match": "all", "n": 1, "nested": {"a": [1, "b"]}}


def test_get_headers_malformed() -> None:
    with pytest.raises(FrameError):
        get_headers(struct.pack(">H", 0x2000) + b"\x00\x00\x00\x09ab")
    with pytest.raises(FrameError):
        get_headers(struct.pack(">H", 0xA000))


def test_decode_properties_full() -> None:
    assert decode_properties(FULL.marshal()) == FULL


def test_decode_properties_malformed() -> None:
    with pytest.raises(FrameError):
        decode_properties(FULL.marshal()[:20])
    with pytest.raises(FrameError):
        decode_properties(b"\x00")


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("0", 0),
        ("60000", 60000),
        ("007", 7),
        ("+5", 5),
        ("-0", 0),
        (str(MAX_EXPIRATION_MS), MAX_EXPIRATION_MS),
    ],
)
def test_valid_expirations(value: str, ms: int) -> None:
    assert parse_expiration(value) == ms


# Observed on a real RabbitMQ 3.10.8 (Erlang/OTP 25): the expiration property octets and the
# channel.close reply text (None = accepted). Covers Erlang's ~p line wrapping, escapes, octets
# printed as lists, and the 255-octet cut (252 octets + "...").
RABBITMQ_3_10_8_REPLIES: list[tuple[str, str | None]] = [
    (
        "-1",
        "PRECONDITION_FAILED - invalid expiration '-1': {value_negative,-1}",
    ),
    (
        "abc",
        "PRECONDITION_FAILED - invalid expiration 'abc': no_integer",
    ),
    (
        "1.5",
        "PRECONDITION_FAILED - invalid expiration '1.5': {leftover_string,\".5\"}",
    ),
    (
        " 5",
        "PRECONDITION_FAILED - invalid expiration ' 5': no_integer",
    ),
    (
        "",
        "PRECONDITION_FAILED - invalid expiration '': no_integer",
    ),
    (
        "99999999999999999999",
        (
            "PRECONDITION_FAILED - invalid expiration '99999999999999999999': {value_too_large,\n  "
            "                                          99999999999999999999}"
        ),
    ),
    (
        "+5",
        None,
    ),
    (
        "5 ",
        "PRECONDITION_FAILED - invalid expiration '5 ': {leftover_string,\" \"}",
    ),
    (
        "1e3",
        "PRECONDITION_FAILED - invalid expiration '1e3': {leftover_string,\"e3\"}",
    ),
    (
        "0x10",
        "PRECONDITION_FAILED - invalid expiration '0x10': {leftover_string,\"x10\"}",
    ),
    (
        "\t5",
        "PRECONDITION_FAILED - invalid expiration '\t5': no_integer",
    ),
    (
        "--1",
        "PRECONDITION_FAILED - invalid expiration '--1': no_integer",
    ),
    (
        "+-1",
        "PRECONDITION_FAILED - invalid expiration '+-1': no_integer",
    ),
    (
        "-",
        "PRECONDITION_FAILED - invalid expiration '-': no_integer",
    ),
    (
        "+",
        "PRECONDITION_FAILED - invalid expiration '+': no_integer",
    ),
    (
        "1é",
        "PRECONDITION_FAILED - invalid expiration '1é': {leftover_string,\"é\"}",
    ),
    (
        "1€",
        "PRECONDITION_FAILED - invalid expiration '1€': {leftover_string,[226,130,172]}",
    ),
    (
        "1٣",
        "PRECONDITION_FAILED - invalid expiration '1٣': {leftover_string,\"٣\"}",
    ),
    (
        "٣",
        "PRECONDITION_FAILED - invalid expiration '٣': no_integer",
    ),
    (
        "1\n",
        "PRECONDITION_FAILED - invalid expiration '1\n': {leftover_string,\"\\n\"}",
    ),
    (
        '1"2',
        'PRECONDITION_FAILED - invalid expiration \'1"2\': {leftover_string,"\\"2"}',
    ),
    (
        "1\\2",
        "PRECONDITION_FAILED - invalid expiration '1\\2': {leftover_string,\"\\\\2\"}",
    ),
    (
        "315360000000",
        None,
    ),
    (
        "315360000001",
        "PRECONDITION_FAILED - invalid expiration '315360000001': {value_too_large,315360000001}",
    ),
    (
        "-315360000001",
        "PRECONDITION_FAILED - invalid expiration '-315360000001': {value_negative,-315360000001}",
    ),
    (
        "-0",
        None,
    ),
    (
        "007",
        None,
    ),
    (
        "12345678901234567890123",
        (
            "PRECONDITION_FAILED - invalid expiration '12345678901234567890123': {value_too_large,"
            "\n                                               12345678901234567890123}"
        ),
    ),
    (
        "-99999999999999999999",
        (
            "PRECONDITION_FAILED - invalid expiration '-99999999999999999999': {value_negative,\n  "
            "                                           -99999999999999999999}"
        ),
    ),
    (
        "1xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        (
            "PRECONDITION_FAILED - invalid expiration '1xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
            "xxxxxxxxxxxxxxxxxxxxxxxxxxx': {leftover_string,\n                                     "
            '                                                          "xxxxxxxxxxxxxxxxxxxxxx...'
        ),
    ),
    (
        (
            "111111111111\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
        ),
        (
            "PRECONDITION_FAILED - invalid expiration '111111111111\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01': {leftover_string,\n                                                            "
            "      [1,1,1,1,1,\n                                                                   "
            "1,..."
        ),
    ),
    (
        "1\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01",
        (
            "PRECONDITION_FAILED - invalid expiration '1\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01': {leftover_string,\n                        "
            "                     [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,\n                              "
            "                1,1,1,1]}"
        ),
    ),
    (
        (
            "12\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f"
            "\x7f\x7f\x7f\x7f"
        ),
        (
            "PRECONDITION_FAILED - invalid expiration '12\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f"
            "\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f': {leftover_string,\n    "
            "                                               [127,127,127,127,127,127,\n            "
            "                                        127,127,127,127,127,127,\n        ..."
        ),
    ),
    (
        (
            "\n1\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
        ),
        (
            "PRECONDITION_FAILED - invalid expiration '\n1\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01': no_integer"
        ),
    ),
    (
        "\t\t9é€é€é€é€é€é€é€é€é€é€é€é€",
        "PRECONDITION_FAILED - invalid expiration '\t\t9é€é€é€é€é€é€é€é€é€é€é€é€': no_integer",
    ),
    (
        "1\x1b\x0b\x08\x0c\r\t",
        (
            "PRECONDITION_FAILED - invalid expiration '1\x1b\x0b\x08\x0c\r\t': {leftover_string,\""
            '\\e\\v\\b\\f\\r\\t"}'
        ),
    ),
    (
        (
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        ),
        (
            "PRECONDITION_FAILED - invalid expiration 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa': no_integer"
        ),
    ),
    (
        (
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        ),
        (
            "PRECONDITION_FAILED - invalid expiration 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa': no_int..."
        ),
    ),
    (
        "999999999999999999999999999999999999999999999999999999999999ab",
        (
            "PRECONDITION_FAILED - invalid expiration '99999999999999999999999999999999999999999999"
            "9999999999999999ab': {leftover_string,\n                                              "
            '                                        "ab"}'
        ),
    ),
    (
        "-9999999999999999999999999999999999999999999999999999999999999999999999",
        (
            "PRECONDITION_FAILED - invalid expiration '-9999999999999999999999999999999999999999999"
            "999999999999999999999999999': {value_negative,\n                                      "
            "                                                         -99999999999999999999999..."
        ),
    ),
    (
        "\n9999999999999999999999999999999999999999999999999999999999999999999999",
        (
            "PRECONDITION_FAILED - invalid expiration '\n999999999999999999999999999999999999999999"
            "9999999999999999999999999999': no_integer"
        ),
    ),
    (
        '1""""""""""""""""""""""""""""""""""""""""',
        (
            'PRECONDITION_FAILED - invalid expiration \'1""""""""""""""""""""""""""""""""""""""""\''
            ": {leftover_string,\n                                                                 "
            '"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"'
            '\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\"\\""}'
        ),
    ),
    (
        (
            "5\n\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
        ),
        (
            "PRECONDITION_FAILED - invalid expiration '5\n\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01': {le"
            "ftover_string,\n                                     [10,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1"
            ",1,1,1,\n                                      1,1,1,1,1,1,1,1,1,1,1,1]}"
        ),
    ),
    (
        (
            "5\n\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01"
        ),
        (
            "PRECONDITION_FAILED - invalid expiration '5\n\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01': {leftover_string,\n        "
            "                                         [10,1,1,1,1,1,1,1,1,1,1,1,1,\n               "
            "                                   1,1,1,1,1,1,1,..."
        ),
    ),
    (
        "5\n\x01aaaaa",
        ("PRECONDITION_FAILED - invalid expiration '5\n\x01aaaaa': {leftover_string,[10,1,97,97,97,97,97]}"),
    ),
    (
        (
            "5\t\t\x015\t\t\x015\t\t\x015\t\t\x015\t\t\x015\t\t\x015\t\t\x015\t\t\x015\t\t\x015\t\t"
            "\x015\t\t\x015\t\t\x01"
        ),
        (
            "PRECONDITION_FAILED - invalid expiration '5\t\t\x015\t\t\x015\t\t\x015\t\t\x015\t\t"
            "\x015\t\t\x015\t\t\x015\t\t\x015\t\t\x015\t\t\x015\t\t\x015\t\t\x01': {leftover_string"
            ",\n                                                                                   "
            "                                                          ..."
        ),
    ),
    (
        "5\nbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\x01",
        (
            "PRECONDITION_FAILED - invalid expiration '5\nbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
            "bbbbbbbbb\x01': {leftover_string,\n                                                   "
            "    [10,98,98,98,98,98,98,\n                                                        98"
            "..."
        ),
    ),
    (
        "7\n\x82\x82\x82\x82\x82\x82\x82\x82",
        (
            "PRECONDITION_FAILED - invalid expiration '7\n\x82\x82\x82\x82\x82\x82\x82\x82': {lefto"
            "ver_string,[10,194,130,194,130,194,130,194,130,194,\n                                 "
            "    130,194,130,194,130,194,130]}"
        ),
    ),
    (
        (
            "5\nzzzzzzzzzzzzzzzzzzzz\n\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
        ),
        (
            "PRECONDITION_FAILED - invalid expiration '5\nzzzzzzzzzzzzzzzzzzzz\n\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
            "\x01\x01\x01': {leftover_string,\n                                                    "
            "                      [10,\n                 ..."
        ),
    ),
]


@pytest.mark.parametrize(("value", "reply"), RABBITMQ_3_10_8_REPLIES, ids=range(len(RABBITMQ_3_10_8_REPLIES)))
def test_expiration_reply_text_matches_rabbitmq(value: str, reply: str | None) -> None:
    if reply is None:
        parse_expiration(value)
        return
    with pytest.raises(PreconditionFailed) as info:
        parse_expiration(value)
    assert info.value.reply_code == 406
    assert info.value.reply_text == reply
