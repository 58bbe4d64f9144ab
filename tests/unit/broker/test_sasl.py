"""SASL responses as RabbitMQ 3.10 reads them (a malformed one is a protocol error, not a login): the
user and password octets exactly as sent, for the node's one login check to judge."""

from __future__ import annotations

import pytest
from ottermq.amqp.table import LongStr, encode_table
from ottermq.broker.node.sasl import MECHANISMS, credentials, server_properties


@pytest.mark.parametrize(
    "response,expected",
    [
        ("\0guest\0guest", (b"guest", b"guest")),
        ("\0user\0", (b"user", b"")),  # parsed; the login check refuses the empty password
        ("\0\0pw", (b"", b"pw")),
        ("authz\0guest\0guest", (None, None)),  # rabbit_auth_mechanism_plain: must start with NUL
        ("guestguest", (None, None)),
        ("\0guest", (None, None)),
        ("\0a\0b\0c", (None, None)),  # a NUL in the password: PLAIN cannot carry it
        (b"\0\xc3\xa9\0x", (b"\xc3\xa9", b"x")),
        (b"\0u\0\xff\xfe", (b"u", b"\xff\xfe")),  # not UTF-8: kept as sent, never replaced by U+FFFD
    ],
)
def test_plain(response, expected):
    assert credentials("PLAIN", response) == expected


def test_amqplain():
    table = encode_table({"LOGIN": "guest", "PASSWORD": "secret"})[4:]  # a table without its length
    assert credentials("AMQPLAIN", table) == (b"guest", b"secret")
    raw = encode_table({"LOGIN": "u", "PASSWORD": LongStr(b"a\x00\xff")})[4:]  # NUL and non-UTF-8
    assert credentials("AMQPLAIN", raw) == (b"u", b"a\x00\xff")
    raw = encode_table({"LOGIN": b"u", "PASSWORD": b"pw"})[4:]  # byte arrays ('x'): RabbitMQ takes them
    assert credentials("AMQPLAIN", raw) == (b"u", b"pw")
    assert credentials("AMQPLAIN", encode_table({"LOGIN": "guest"})[4:]) == (None, None)
    assert credentials("AMQPLAIN", b"\x7f\x7f\x7f") == (None, None)
    assert credentials("AMQPLAIN", encode_table({"LOGIN": 1, "PASSWORD": 2})[4:]) == (None, None)


def test_unknown_mechanism_and_the_offer():
    assert credentials("EXTERNAL", "x") == (None, None)
    assert MECHANISMS == ("PLAIN", "AMQPLAIN")
    assert server_properties("9")["capabilities"]["direct_reply_to"] is True
