"""Sender-selected distribution: ``CC``/``BCC`` headers add routing keys (RabbitMQ 3.10 ``header_routes``).

RabbitMQ 3.10 rules pinned here:
    * ``CC`` and ``BCC`` (exact, case-sensitive names) must be arrays; the long strings in them are extra
      routing keys, any other element is ignored (an array of ints routes by the routing key alone).
      ``BCC`` is removed from the headers the consumers see.
    * Any other field type closes the channel at the publish itself, also in a tx channel (not at commit):
      ``406 PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"CC",longstr}``, class 60
      method 40, the type named as ``rabbit_binary_parser`` names it. ``CC`` is checked before ``BCC``.
    * A missing exchange (404) and an invalid ``expiration`` (406) are reported before a bad ``CC``.

Header values are written byte by byte, so each test controls the exact AMQP type tag on the wire. One case
per rule runs here against both brokers; every type and the check order are protocol tests
(tests/protocol/test_cc_bcc.py).
"""

from __future__ import annotations

import struct

import pamqp.commands as spec
import pika
import pytest

VHOST = "vhost '/'"


# ---------------------------------------------------------------------------------------------------------
# raw helpers
# ---------------------------------------------------------------------------------------------------------
def field(key: str, value: bytes) -> bytes:
    """One field-table entry; ``value`` starts with its type tag."""
    raw = key.encode()
    return bytes([len(raw)]) + raw + value


def longstr(s: str) -> bytes:
    raw = s.encode()
    return b"S" + struct.pack(">I", len(raw)) + raw


def array(*values: bytes) -> bytes:
    body = b"".join(values)
    return b"A" + struct.pack(">I", len(body)) + body


def publish_raw(
    conn, fields: list[bytes], exchange: str = "", routing_key: str = "k", expiration: str | None = None
) -> None:
    """basic.publish with a one-octet body and exactly these header fields (and ``expiration``)."""
    conn.send_frame(1, spec.Basic.Publish(exchange=exchange, routing_key=routing_key))
    table = b"".join(fields)
    flags = 0x2000  # headers
    props = struct.pack(">I", len(table)) + table
    if expiration is not None:
        flags |= 0x0100
        props += bytes([len(expiration)]) + expiration.encode()
    payload = struct.pack(">HHQH", 60, 0, 1, flags) + props
    conn.send(struct.pack(">BHI", 2, 1, len(payload)) + payload + b"\xce")
    conn.send(struct.pack(">BHI", 3, 1, 1) + b"x\xce")


def invalid(name: str, type_name: str) -> str:
    return f'PRECONDITION_FAILED - invalid message: {{unacceptable_type_in_header,"{name}",{type_name}}}'


def assert_closed(conn, code: int, text: str, class_method: tuple[int, int] = (60, 40)) -> None:
    close = conn.expect_close()
    assert (close.reply_code, close.reply_text) == (code, text)
    assert (close.class_id, close.method_id) == class_method
    conn.open_channel(2)  # the connection survives a channel error


# ---------------------------------------------------------------------------------------------------------
# wrong types
# ---------------------------------------------------------------------------------------------------------
# every AMQP type: tests/protocol/test_cc_bcc.py
WRONG_TYPES = [
    (longstr("a"), "longstr"),
    (b"I" + struct.pack(">i", 1), "signedint"),
    (b"F" + struct.pack(">I", 0), "table"),
]


@pytest.mark.parametrize("name", ["CC", "BCC"])
@pytest.mark.parametrize("value, type_name", WRONG_TYPES, ids=["longstr", "signedint", "table"])
def test_cc_or_bcc_that_is_not_an_array_is_406_at_publish(raw_connect, name, value, type_name):
    conn = raw_connect()
    conn.open_channel(1)
    publish_raw(conn, [field(name, value)])
    assert_closed(conn, 406, invalid(name, type_name))


# ---------------------------------------------------------------------------------------------------------
# arrays route
# ---------------------------------------------------------------------------------------------------------
def test_cc_and_bcc_arrays_add_routing_keys_and_bcc_is_hidden(channel, unique):
    main, cc, bcc = unique("main"), unique("cc"), unique("bcc")
    for q in (main, cc, bcc):
        channel.queue_declare(q)
    channel.confirm_delivery()
    channel.basic_publish("", main, b"m", pika.BasicProperties(headers={"CC": [cc], "BCC": [bcc], "n": 1}))
    for q in (main, cc, bcc):
        _, props, body = channel.basic_get(q, auto_ack=True)
        assert body == b"m" and props.headers == {"CC": [cc], "n": 1}


# ---------------------------------------------------------------------------------------------------------
# a header twice
# ---------------------------------------------------------------------------------------------------------
def test_of_two_cc_headers_the_first_counts(raw_connect, channel, unique):
    """RabbitMQ reads the first of two equal keys (rabbit_misc:table_lookup): an array ``CC`` first and
    a long-string ``CC`` after it is a valid publish that routes by the array."""
    main, cc = unique("main"), unique("cc")
    for q in (main, cc):
        channel.queue_declare(q)
    conn = raw_connect()
    conn.open_channel(1)
    conn.rpc(1, spec.Confirm.Select(), spec.Confirm.SelectOk)
    publish_raw(conn, [field("CC", array(longstr(cc))), field("CC", longstr("x"))], routing_key=main)
    _, ack = conn.expect(spec.Basic.Ack)
    assert ack.delivery_tag == 1
    for q in (main, cc):
        assert channel.queue_declare(q, passive=True).method.message_count == 1
