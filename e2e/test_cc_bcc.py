"""Sender-selected distribution: ``CC``/``BCC`` headers add routing keys (RabbitMQ 3.10 ``header_routes``).

RabbitMQ 3.10 rules pinned here:
    * ``CC`` and ``BCC`` (exact, case-sensitive names) must be arrays; the long strings in them are extra
      routing keys, any other element is ignored (an array of ints routes by the routing key alone).
      ``BCC`` is removed from the headers the consumers see.
    * Any other field type closes the channel at the publish itself, also in a tx channel (not at commit):
      ``406 PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"CC",longstr}``, class 60
      method 40, the type named as ``rabbit_binary_parser`` names it. ``CC`` is checked before ``BCC``.
    * A missing exchange (404) and an invalid ``expiration`` (406) are reported before a bad ``CC``.

Header values are written byte by byte, so each test controls the exact AMQP type tag on the wire.
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
WRONG_TYPES = [
    (longstr("a"), "longstr"),
    (b"S" + struct.pack(">I", 1) + b"\xff", "longstr"),  # not UTF-8: still a longstr
    (b"I" + struct.pack(">i", 1), "signedint"),
    (b"i" + struct.pack(">I", 1), "unsignedint"),
    (b"l" + struct.pack(">q", 1), "long"),
    (b"L" + struct.pack(">q", 1), "long"),
    (b"b\x01", "byte"),
    (b"B\x01", "unsignedbyte"),
    (b"s" + struct.pack(">h", 1), "short"),
    (b"u" + struct.pack(">H", 1), "unsignedshort"),
    (b"T" + struct.pack(">Q", 1), "timestamp"),
    (b"f" + struct.pack(">f", 1.0), "float"),
    (b"d" + struct.pack(">d", 1.0), "double"),
    (b"D" + struct.pack(">BI", 1, 15), "decimal"),
    (b"t\x01", "bool"),
    (b"F" + struct.pack(">I", 0), "table"),
    (b"x" + struct.pack(">I", 1) + b"a", "binary"),
    (b"V", "void"),
]


@pytest.mark.parametrize("name", ["CC", "BCC"])
@pytest.mark.parametrize(
    "value, type_name",
    WRONG_TYPES,
    ids=[
        "longstr",
        "longstr-not-utf8",
        "signedint",
        "unsignedint",
        "long",
        "long-L",
        "byte",
        "unsignedbyte",
        "short",
        "unsignedshort",
        "timestamp",
        "float",
        "double",
        "decimal",
        "bool",
        "table",
        "binary",
        "void",
    ],
)
def test_cc_or_bcc_that_is_not_an_array_is_406_at_publish(raw_connect, name, value, type_name):
    conn = raw_connect()
    conn.open_channel(1)
    publish_raw(conn, [field(name, value)])
    assert_closed(conn, 406, invalid(name, type_name))


def test_cc_is_reported_before_bcc(raw_connect):
    conn = raw_connect()
    conn.open_channel(1)
    publish_raw(conn, [field("BCC", b"I" + struct.pack(">i", 1)), field("CC", longstr("a"))])
    assert_closed(conn, 406, invalid("CC", "longstr"))


def test_bad_bcc_after_a_good_cc(raw_connect):
    conn = raw_connect()
    conn.open_channel(1)
    publish_raw(conn, [field("CC", array(longstr("a"))), field("BCC", b"I" + struct.pack(">i", 1))])
    assert_closed(conn, 406, invalid("BCC", "signedint"))


def test_tx_channel_fails_at_the_publish_not_at_commit(raw_connect):
    conn = raw_connect()
    conn.open_channel(1)
    conn.rpc(1, spec.Tx.Select(), spec.Tx.SelectOk)
    publish_raw(conn, [field("CC", longstr("a"))])  # no tx.commit: the close answers the publish
    assert_closed(conn, 406, invalid("CC", "longstr"))


def test_missing_exchange_is_reported_before_a_bad_cc(raw_connect, unique):
    conn = raw_connect()
    conn.open_channel(1)
    x = unique("missing")
    publish_raw(conn, [field("CC", longstr("a"))], exchange=x)
    assert_closed(conn, 404, f"NOT_FOUND - no exchange '{x}' in {VHOST}")


def test_invalid_expiration_is_reported_before_a_bad_cc(raw_connect):
    conn = raw_connect()
    conn.open_channel(1)
    publish_raw(conn, [field("CC", longstr("a"))], expiration="abc")
    assert_closed(conn, 406, "PRECONDITION_FAILED - invalid expiration 'abc': no_integer")


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


def test_array_elements_that_are_not_strings_are_ignored(raw_connect, channel, unique, drain):
    main, other = unique("main"), unique("other")
    channel.queue_declare(main)
    channel.queue_declare(other)
    conn = raw_connect()
    conn.open_channel(1)
    ints = array(b"I" + struct.pack(">i", 1), b"l" + struct.pack(">q", 2))
    publish_raw(conn, [field("CC", ints), field("BCC", array(b"t\x01", longstr(other)))], routing_key=main)
    publish_raw(conn, [field("CC", array())], routing_key=main)  # an empty array is fine too
    conn.rpc(1, spec.Basic.Qos(), spec.Basic.QosOk)  # both publishes were accepted
    assert drain(channel, main) == [b"x", b"x"]
    assert drain(channel, other) == [b"x"]


def test_lowercase_cc_is_an_ordinary_header(raw_connect, channel, unique):
    main = unique("main")
    channel.queue_declare(main)
    conn = raw_connect()
    conn.open_channel(1)
    lowercase = [field("cc", longstr("a")), field("bcc", b"I" + struct.pack(">i", 1))]
    publish_raw(conn, lowercase, routing_key=main)
    conn.rpc(1, spec.Basic.Qos(), spec.Basic.QosOk)
    _, props, body = channel.basic_get(main, auto_ack=True)
    assert body == b"x" and props.headers == {"cc": "a", "bcc": 1}
