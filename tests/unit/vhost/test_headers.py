"""Headers matching and x-match validation, tables read back from RabbitMQ 3.10.8 with pika.

Values are written as pamqp decodes them: every AMQP integer width is an ``int``, ``f``/``d``
floats are ``float``, ``D`` is a ``Decimal`` with the wire scale, ``T`` an aware ``datetime``, ``x``
a ``bytearray`` and ``V`` is ``None``.
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any, ClassVar

import pytest
from ottermq.amqp.errors import PreconditionFailed
from ottermq.vhost.headers import HeadersMatcher, headers_match, validate_binding_args

TS1 = datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=datetime.UTC)

# label -> message headers property (None = no headers)
MESSAGES: list[tuple[str, dict[str, Any] | None]] = [
    ("none", None),
    ("{}", {}),
    ("a=1", {"a": 1}),
    ("a=1,b=x", {"a": 1, "b": "x"}),
    ("a=2", {"a": 2}),
    ("b=x", {"b": "x"}),
    ("a=long1", {"a": 1}),  # sent as 'l'
    ("a='1'", {"a": "1"}),
    ("a=true", {"a": True}),
    ("a=1.0d", {"a": 1.0}),
    ("a=dec(0,1)", {"a": Decimal("1")}),
    ("a=ts1", {"a": TS1}),
    ("a=bin1", {"a": bytearray(b"1")}),
    ("a=void", {"a": None}),
    ("x-foo=1", {"x-foo": 1}),
    ("x-foo=1,a=1", {"x-foo": 1, "a": 1}),
    ("a={k:1}", {"a": {"k": 1}}),
    ("a=[1,2]", {"a": [1, 2]}),
    ("a=f32 1.0", {"a": 1.0}),
    ("a=dec(1,10)", {"a": Decimal("1.0")}),
    ("a=x,b=x", {"a": "x", "b": "x"}),
    ("a=1.5d", {"a": 1.5}),
    ("a=dec(1,15)", {"a": Decimal("1.5")}),
    ("a=1,x-match=any", {"a": 1, "x-match": "any"}),
    ("a=u8 1", {"a": 1}),
    ("a=false", {"a": False}),
    ("a=0", {"a": 0}),
    ("A=1", {"A": 1}),
    ("a=f32 1.5", {"a": 1.5}),
    ("a={}", {"a": {}}),
    ("a=[]", {"a": []}),
    ("a=''", {"a": ""}),
    ("a=bin''", {"a": bytearray()}),
    ("a=[2,1]", {"a": [2, 1]}),
    ("a={k:1,j:2}", {"a": {"k": 1, "j": 2}}),
    ("a={j:2,k:1}", {"a": {"j": 2, "k": 1}}),
    ("x-match2=y", {"x-match2": "y"}),
    ("a=1,b=void", {"a": 1, "b": None}),
]

BINDINGS: dict[str, dict[str, Any]] = {
    "empty": {},
    "any-only": {"x-match": "any"},
    "a=1": {"a": 1},
    "a=1,b=x": {"a": 1, "b": "x"},
    "any a=1,b=x": {"x-match": "any", "a": 1, "b": "x"},
    "a=void": {"a": None},
    "any a=void": {"x-match": "any", "a": None},
    "x-foo=1": {"x-foo": 1},
    "allx x-foo=1": {"x-match": "all-with-x", "x-foo": 1},
    "anyx x-foo=1,a=2": {"x-match": "any-with-x", "x-foo": 1, "a": 2},
    "a='1'": {"a": "1"},
    "a=true": {"a": True},
    "a=1.0d": {"a": 1.0},
    "a=dec(0,1)": {"a": Decimal("1")},
    "a=ts1": {"a": TS1},
    "a=bin1": {"a": bytearray(b"1")},
    "a={k:1}": {"a": {"k": 1}},
    "a=[1,2]": {"a": [1, 2]},
    "any x-foo=1": {"x-match": "any", "x-foo": 1},
    "a=1,x-foo=2": {"a": 1, "x-foo": 2},
    "allx a=1": {"x-match": "all-with-x", "a": 1},
    "A=1": {"A": 1},
    "a=1.5d": {"a": 1.5},
    "a=dec(1,15)": {"a": Decimal("1.5")},
    "a=dec(1,10)": {"a": Decimal("1.0")},
    "allx x-match only": {"x-match": "all-with-x"},
    "anyx only": {"x-match": "any-with-x"},
    "anyx a=void": {"x-match": "any-with-x", "a": None},
    "a=false": {"a": False},
    "a=0": {"a": 0},
    "a=1,b=void": {"a": 1, "b": None},
    "any a=9,b=void": {"x-match": "any", "a": 9, "b": None},
    "a={}": {"a": {}},
    "a=[]": {"a": []},
    "a=''": {"a": ""},
    "allx x-match-hdr": {"x-match": "all-with-x", "x-match2": "y"},
}

ALL = [label for label, _ in MESSAGES]
A_PRESENT = [label for label, h in MESSAGES if h and "a" in h]
# RabbitMQ compares with Erlang ==: int widths, floats and timestamps are all numbers
NUM_ONE = [
    "a=1",
    "a=1,b=x",
    "a=long1",
    "a=1.0d",
    "a=ts1",
    "x-foo=1,a=1",
    "a=f32 1.0",
    "a=1,x-match=any",
    "a=u8 1",
    "a=1,b=void",
]

# binding -> messages RabbitMQ 3.10.8 delivered through it
EXPECTED: dict[str, list[str]] = {
    "empty": ALL,
    "any-only": [],
    "a=1": NUM_ONE,
    "a=1,b=x": ["a=1,b=x"],
    "any a=1,b=x": NUM_ONE + ["b=x", "a=x,b=x"],
    "a=void": A_PRESENT,
    "any a=void": A_PRESENT,
    "x-foo=1": ALL,
    "allx x-foo=1": ["x-foo=1", "x-foo=1,a=1"],
    "anyx x-foo=1,a=2": ["a=2", "x-foo=1", "x-foo=1,a=1"],
    "a='1'": ["a='1'", "a=bin1"],
    "a=true": ["a=true"],
    "a=1.0d": NUM_ONE,
    "a=dec(0,1)": ["a=dec(0,1)"],
    "a=ts1": NUM_ONE,
    "a=bin1": ["a='1'", "a=bin1"],
    "a={k:1}": ["a={k:1}"],
    "a=[1,2]": ["a=[1,2]"],
    "any x-foo=1": [],
    "a=1,x-foo=2": NUM_ONE,
    "allx a=1": NUM_ONE,
    "A=1": ["A=1"],
    "a=1.5d": ["a=1.5d", "a=f32 1.5"],
    "a=dec(1,15)": ["a=dec(1,15)"],
    "a=dec(1,10)": ["a=dec(1,10)"],
    "allx x-match only": ALL,
    "anyx only": [],
    "anyx a=void": A_PRESENT,
    "a=false": ["a=false"],
    "a=0": ["a=0"],
    "a=1,b=void": ["a=1,b=x", "a=1,b=void"],
    "any a=9,b=void": ["a=1,b=x", "b=x", "a=x,b=x", "a=1,b=void"],
    "a={}": ["a={}", "a=[]"],
    "a=[]": ["a={}", "a=[]"],
    "a=''": ["a=''", "a=bin''"],
    "allx x-match-hdr": ["x-match2=y"],
}


@pytest.mark.parametrize("binding", list(BINDINGS))
def test_matches_like_rabbitmq(binding: str) -> None:
    args = BINDINGS[binding]
    got = [label for label, headers in MESSAGES if headers_match(args, headers)]
    assert sorted(got) == sorted(EXPECTED[binding])


def test_matcher_is_reusable_and_ignores_header_order() -> None:
    matcher = HeadersMatcher({"x-match": "all", "b": "x", "a": 1})
    assert matcher.matches({"a": 1, "b": "x"})
    assert matcher.matches({"b": "x", "z": 0, "a": 1})
    assert not matcher.matches({"a": 1})


def test_nested_values_compare_in_order_and_kind() -> None:
    assert headers_match({"a": {"k": 1, "j": 2}}, {"a": {"k": 1, "j": 2}})
    assert not headers_match({"a": {"k": 1, "j": 2}}, {"a": {"j": 2, "k": 1}})
    assert not headers_match({"a": [1]}, {"a": [True]})
    assert not headers_match({"a": ["1"]}, {"a": [b"1"]})  # longstr vs binary inside an array
    assert headers_match({"a": [1, [2, {"x": "y"}]]}, {"a": [1, [2, {"x": "y"}]]})


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("foo", 'Invalid x-match field value <<"foo">>; expected all, any, all-with-x, or any-with-x'),
        ("ANY", 'Invalid x-match field value <<"ANY">>; expected all, any, all-with-x, or any-with-x'),
        ("", "Invalid x-match field value <<>>; expected all, any, all-with-x, or any-with-x"),
        ("é", 'Invalid x-match field value <<"é">>; expected all, any, all-with-x, or any-with-x'),
        ('a"b', 'Invalid x-match field value <<"a\\"b">>; expected all, any, all-with-x, or any-with-x'),
        ("a\\b", 'Invalid x-match field value <<"a\\\\b">>; expected all, any, all-with-x, or any-with-x'),
        ("a\nb", 'Invalid x-match field value <<"a\\nb">>; expected all, any, all-with-x, or any-with-x'),
        ("a\x1bb", 'Invalid x-match field value <<"a\\eb">>; expected all, any, all-with-x, or any-with-x'),
        ("a\x01b", "Invalid x-match field value <<97,1,98>>; expected all, any, all-with-x, or any-with-x"),
        ("a\x7fb", "Invalid x-match field value <<97,127,98>>; expected all, any, all-with-x, or any-with-x"),
        (
            "\u00a0x",
            'Invalid x-match field value <<"\u00a0x">>; expected all, any, all-with-x, or any-with-x',
        ),
        ("Ā", "Invalid x-match field value <<196,128>>; expected all, any, all-with-x, or any-with-x"),
        (
            "é😀",
            "Invalid x-match field value <<195,169,240,159,152,128>>; "
            "expected all, any, all-with-x, or any-with-x",
        ),
        (1, "Invalid x-match field type signedint (value 1); expected longstr"),
        (2**40, "Invalid x-match field type long (value 1099511627776); expected longstr"),
        (b"any", 'Invalid x-match field type binary (value <<"any">>); expected longstr'),
        (None, "Invalid x-match field type void (value undefined); expected longstr"),
        (True, "Invalid x-match field type bool (value true); expected longstr"),
        (1.5, "Invalid x-match field type double (value 1.5); expected longstr"),
        (Decimal("1.5"), "Invalid x-match field type decimal (value {1,15}); expected longstr"),
        (
            datetime.datetime(1970, 1, 1, 0, 0, 5, tzinfo=datetime.UTC),
            "Invalid x-match field type timestamp (value 5); expected longstr",
        ),
        ({"a": 1}, 'Invalid x-match field type table (value [{<<"a">>,signedint,1}]); expected longstr'),
        (["any"], 'Invalid x-match field type array (value [{longstr,<<"any">>}]); expected longstr'),
    ],
)
def test_invalid_x_match_texts(value: object, text: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        validate_binding_args({"x-match": value, "a": 1})
    assert info.value.text == text
    assert info.value.reply_code == 406


@pytest.mark.parametrize("mode", ["all", "any", "all-with-x", "any-with-x"])
def test_valid_x_match(mode: str) -> None:
    validate_binding_args({"x-match": mode})


def test_no_x_match_is_valid() -> None:
    validate_binding_args({})
    validate_binding_args(None)
    validate_binding_args({"a": 1})


class LongStr(bytes):
    tag: ClassVar[bytes] = b"S"


def test_invalid_utf8_x_match_is_a_bad_value_not_a_bad_type() -> None:
    with pytest.raises(PreconditionFailed) as info:
        validate_binding_args({"x-match": LongStr(b"a\xffb")})
    # RabbitMQ sends the raw 0xff byte; a Python str can only show it as U+00FF
    assert info.value.text == (
        'Invalid x-match field value <<"a\u00ffb">>; expected all, any, all-with-x, or any-with-x'
    )
