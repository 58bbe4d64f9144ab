"""Erlang term printing: each term kind, with texts RabbitMQ 3.10.8 (Erlang/OTP 25) sent.

Where a text comes from a golden test of a caller, the test is named in a comment.
"""

from __future__ import annotations

import pytest
from ottermq.amqp.erlang import (
    Atom,
    Charlist,
    binary_text,
    float_text,
    format_term,
    indentation,
    pretty_term,
    to_wire,
)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("no_integer", "no_integer"),  # test_props: invalid expiration 'abc': no_integer
        ("unknown_frame", "unknown_frame"),  # test_reader
        ("routing_key_but_no_dlx_defined", "routing_key_but_no_dlx_defined"),  # test_arguments
        ("node@host", "node@host"),
        ("Upper", "'Upper'"),
        ("a b", "'a b'"),
        ("", "''"),
        ("it's", "'it\\'s'"),
        ("and", "'and'"),  # reserved word
        ("é", "é"),  # a Latin-1 lowercase letter may start an atom
    ],
)
def test_atoms(name: str, text: str) -> None:
    assert format_term(Atom(name)) == text


def test_booleans_undefined_and_integers() -> None:
    assert format_term(True) == "true"  # test_arguments: received 'true' but current is 'false'
    assert format_term(False) == "false"
    assert format_term(None) == "undefined"
    assert format_term(-1) == "-1"
    assert format_term(315360000001) == "315360000001"
    assert format_term(99999999999999999999) == "99999999999999999999"


@pytest.mark.parametrize(
    ("value", "text"),
    [  # test_arguments: "received the value '1.0e20' of type 'double'", ...
        (1.5, "1.5"),
        (-1.5, "-1.5"),
        (1e20, "1.0e20"),
        (1e15, "1.0e15"),
        (0.1, "0.1"),
        (1e-7, "1.0e-7"),
        (0.10000000149011612, "0.10000000149011612"),  # a 32-bit float 0.1 as RabbitMQ shows it
        (100.0, "100.0"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
    ],
)
def test_floats(value: float, text: str) -> None:
    assert float_text(value) == text
    assert format_term(value) == text


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"", "<<>>"),  # UNEXPECTED_FRAME - type 8, all octets = <<>>
        (b"abc", '<<"abc">>'),  # UNEXPECTED_FRAME - type 3, all octets = <<"abc">>
        (b"abcdefghijklmnop", '<<"abcdefghijklmnop">>'),
        (b"\x00\x14\x00\x0a\x01\x30", "<<0,20,0,10,1,48>>"),  # channel.open on channel 1, unexpected
        (b"a\x1bb", '<<"a\\eb">>'),  # test_headers: Invalid x-match field value <<"a\eb">>
        (b"a\x01b", "<<97,1,98>>"),
        (b"a\x7fb", "<<97,127,98>>"),
        (b'q"\\', '<<"q\\"\\\\">>'),
        (b"\t\n\r\x0b\x08\x0c", '<<"\\t\\n\\r\\v\\b\\f">>'),
    ],
)
def test_binaries(data: bytes, text: str) -> None:
    assert format_term(data) == text
    assert format_term(bytearray(data)) == text
    assert format_term(memoryview(data)) == text
    assert binary_text(data) == text


def test_binary_octets_are_latin1_characters_sent_back_as_octets() -> None:
    # RabbitMQ: UNEXPECTED_FRAME - type 3, all octets = <<"é">> for a body of the octets c3 a9
    assert format_term("é".encode()) == '<<"\u00c3\u00a9">>'
    assert binary_text("é".encode()) == '<<"é">>'
    assert binary_text("é") == '<<"é">>'  # a str is its UTF-8 octets
    assert binary_text(b"a\xffb") == '<<"a\u00ffb">>'  # not UTF-8: the octet stays its Latin-1 character


def test_binaries_with_tp() -> None:
    # test_arguments / test_headers (~tp): printable only when every character is printable Latin-1
    assert binary_text("é", unicode=True) == '<<"é">>'
    assert format_term("é", unicode=True) == '<<"é">>'
    assert binary_text("😀", unicode=True) == "<<240,159,152,128>>"
    assert binary_text(b"a\xffb", unicode=True) == '<<"a\u00ffb">>'


@pytest.mark.parametrize(
    ("chars", "text"),
    [  # test_props: invalid expiration '1.5': {leftover_string,".5"} and its neighbours
        (".5", '".5"'),
        (" ", '" "'),
        ("\n", '"\\n"'),
        ('"2', '"\\"2"'),
        ("\\2", '"\\\\2"'),
        ("\u00c3\u00a9", '"\u00c3\u00a9"'),  # 'é' as octets: sent back as c3 a9
        ("\u00e2\u0082\u00ac", "[226,130,172]"),  # '€' as octets: 0x82 is not printable
        ("\n\x01aaaaa", "[10,1,97,97,97,97,97]"),
        ("", '""'),
    ],
)
def test_charlists(chars: str, text: str) -> None:
    assert format_term(Charlist(chars)) == text


def test_tuples_and_lists() -> None:
    assert format_term((Atom("leftover_string"), Charlist(".5"))) == '{leftover_string,".5"}'
    assert format_term((Atom("frame_too_large"), 4097, 4088)) == "{frame_too_large,4097,4088}"
    assert format_term((Atom("value_negative"), -1)) == "{value_negative,-1}"
    assert format_term((2, 155)) == "{2,155}"  # an AMQP decimal 1.55
    assert format_term(()) == "{}"
    assert format_term([]) == "[]"
    # test_arguments: received the value '[{<<"é">>,longstr,<<"é">>}]' of type 'table'
    table = [("é", Atom("longstr"), "é")]
    assert to_wire(format_term(table)) == '[{<<"é">>,longstr,<<"é">>}]'
    assert format_term([(Atom("signedint"), 1), (Atom("bool"), True)]) == "[{signedint,1},{bool,true}]"


def test_not_a_term() -> None:
    with pytest.raises(TypeError):
        format_term(object())


def test_to_wire() -> None:
    assert to_wire("abc") == "abc"
    assert to_wire("\u00c3\u00a9") == "é"
    assert to_wire("\u00e9") == "\u00e9"  # a lone octet e9 is not UTF-8: kept as its character
    assert to_wire("\u00c3\u00a9\u00ff") == "é\u00ff"
    assert to_wire("é😀", unicode=True) == "é😀"


def test_indentation() -> None:
    assert indentation("invalid expiration '-1': ") == 25
    assert indentation("a\tb") == 9
    assert indentation("ab\ncd") == 2
    assert indentation("x", 10) == 11


@pytest.mark.parametrize(
    ("prefix", "term", "text"),
    [  # test_props: the wrapped invalid-expiration texts RabbitMQ sent
        ("invalid expiration '-1': ", (Atom("value_negative"), -1), "{value_negative,-1}"),
        (
            "invalid expiration '99999999999999999999': ",
            (Atom("value_too_large"), 99999999999999999999),
            "{value_too_large,\n" + " " * 44 + "99999999999999999999}",
        ),
        (
            "invalid expiration '12345678901234567890123': ",
            (Atom("value_too_large"), 12345678901234567890123),
            "{value_too_large,\n" + " " * 47 + "12345678901234567890123}",
        ),
        ("invalid expiration 'abc': ", Atom("no_integer"), "no_integer"),
    ],
)
def test_pretty_wraps_like_io_lib_pretty(prefix: str, term: object, text: str) -> None:
    assert pretty_term(term, indentation(prefix) + 1) == text


def test_pretty_short_terms_stay_on_one_line() -> None:
    term = [(Atom("a"), 1, Charlist("x")), (2, 3), [b"b"]]
    assert pretty_term(term) == format_term(term) == '[{a,1,"x"},{2,3},[<<"b">>]]'


def test_pretty_breaks_lists_and_untagged_tuples() -> None:
    items = list(range(1000000, 1000030))
    text = pretty_term(items)
    assert text.replace("\n ", "").replace(" ", "") == format_term(items)
    assert all(len(line) <= 80 for line in text.split("\n"))
    assert text.startswith("[1000000,") and "\n " in text
    text = pretty_term(tuple(items))
    assert text.startswith("{1000000,") and text.endswith("}") and "\n " in text


BINDING_KEY = "The binding key must be an integer: "
ONES = ",".join(["1"] * 20)
BREAK = ",\n" + " " * 38  # continuation lines line up after the "<<"


@pytest.mark.parametrize(
    ("data", "text"),
    [  # the consistent-hash exchange's bind errors, as RabbitMQ 3.10.8 sent them (before the 255-byte cut)
        (b"\x01" * 60, "<<" + ONES + BREAK + ONES + BREAK + ONES + ">>"),
        (b"\x01\x02" * 10 + b"abc", "<<" + ",".join(["1,2"] * 10) + BREAK + "97,98,99>>"),
        (b"a b" * 30, '<<"' + "a b" * 30 + '">>'),  # printable: never broken
    ],
)
def test_pretty_breaks_binaries_between_octets(data: bytes, text: str) -> None:
    assert pretty_term(data, indentation(BINDING_KEY) + 1) == text


def test_pretty_binary_lines_fit_the_column() -> None:
    """io_lib_pretty's pp_binary: octets are packed while they fit before column 80 (read back from
    ``io_lib:format("...~p", [Bin])`` on OTP 25 for random binaries)."""
    data = b"z" * 40 + b"\x01" + b"z" * 40
    text = pretty_term(data, indentation(BINDING_KEY) + 1)
    lines = text.split("\n")
    assert lines[0] == "<<" + ",".join(["122"] * 10) + ","
    assert all(line == " " * 38 + ",".join(["122"] * 10) + "," for line in lines[1:4])
    assert text.replace("\n" + " " * 38, "") == format_term(data)
