"""SASL responses as RabbitMQ 3.10 reads them (a malformed one is a protocol error, not a login)."""

from __future__ import annotations

import pytest
from ottermq.amqp.table import encode_table
from ottermq.broker.node.sasl import MECHANISMS, credentials, server_properties


@pytest.mark.parametrize(
    "response,expected",
    [
        ("\0guest\0guest", ("guest", "guest")),
        ("\0user\0", ("user", "")),
        ("\0\0pw", ("", "pw")),
        ("authz\0guest\0guest", (None, None)),  # rabbit_auth_mechanism_plain: must start with NUL
        ("guestguest", (None, None)),
        ("\0guest", (None, None)),
        ("\0a\0b\0c", (None, None)),
        (b"\0\xc3\xa9\0x", ("\u00e9", "x")),
    ],
)
def test_plain(response, expected):
    assert credentials("PLAIN", response) == expected


def test_amqplain():
    table = encode_table({"LOGIN": "guest", "PASSWORD": "secret"})[4:]  # a table without its length
    assert credentials("AMQPLAIN", table) == ("guest", "secret")
    assert credentials("AMQPLAIN", encode_table({"LOGIN": "guest"})[4:]) == (None, None)
    assert credentials("AMQPLAIN", b"\x7f\x7f\x7f") == (None, None)
    assert credentials("AMQPLAIN", encode_table({"LOGIN": 1, "PASSWORD": 2})[4:]) == (None, None)


def test_unknown_mechanism_and_the_offer():
    assert credentials("EXTERNAL", "x") == (None, None)
    assert MECHANISMS == ("PLAIN", "AMQPLAIN")
    assert server_properties("9")["capabilities"]["direct_reply_to"] is True
