"""Sender-selected distribution over the mock transport: ``CC``/``BCC`` headers add routing keys
(RabbitMQ 3.10 ``header_routes``).

Rules: ``CC`` and ``BCC`` (exact names) must be arrays; their long strings are extra routing keys, other
elements are ignored; ``BCC`` is removed from what consumers see. Any other field type closes the
channel at the publish itself (also in a tx channel) with ``406 PRECONDITION_FAILED - invalid message:
{unacceptable_type_in_header,"CC",longstr}``, the type named as ``rabbit_binary_parser`` names it; ``CC``
is checked before ``BCC``; a missing exchange (404) and an invalid ``expiration`` (406) come first.
Header values are written byte by byte, so each test controls the AMQP type tag on the wire.
"""

from __future__ import annotations

import struct

import pytest
from pamqp import commands as spec

VHOST = "vhost '/'"


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


def publish_raw(c, fields, exchange="", routing_key="k", expiration=None, channel=1):
    """basic.publish with a one-octet body and exactly these header fields (and ``expiration``)."""
    c.send(channel, spec.Basic.Publish(exchange=exchange, routing_key=routing_key))
    table = b"".join(fields)
    flags = 0x2000  # headers
    props = struct.pack(">I", len(table)) + table
    if expiration is not None:
        flags |= 0x0100
        props += bytes([len(expiration)]) + expiration.encode()
    payload = struct.pack(">HHQH", 60, 0, 1, flags) + props
    c.send_raw(struct.pack(">BHI", 2, channel, len(payload)) + payload + b"\xce")
    c.send_raw(struct.pack(">BHI", 3, channel, 1) + b"x\xce")


def invalid(name: str, type_name: str) -> str:
    return f'PRECONDITION_FAILED - invalid message: {{unacceptable_type_in_header,"{name}",{type_name}}}'


def closed(c, channel=1):
    close = c.expect(spec.Channel.Close, channel)
    return close.reply_code, close.reply_text, (close.class_id, close.method_id)


def declare(c, *names):
    for name in names:
        c.rpc(1, spec.Queue.Declare(queue=name), spec.Queue.DeclareOk)


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
IDS = [
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
]


@pytest.mark.parametrize("value, type_name", WRONG_TYPES, ids=IDS)
def test_cc_that_is_not_an_array_is_406_at_the_publish(client, value, type_name):
    publish_raw(client, [field("CC", value)])
    assert closed(client) == (406, invalid("CC", type_name), (60, 40))


@pytest.mark.parametrize("value, type_name", WRONG_TYPES, ids=IDS)
def test_bcc_that_is_not_an_array_is_406_at_the_publish(client, value, type_name):
    publish_raw(client, [field("BCC", value)])
    assert closed(client) == (406, invalid("BCC", type_name), (60, 40))


def test_the_connection_survives_a_bad_cc(client):
    publish_raw(client, [field("CC", longstr("a"))])
    closed(client)
    client.open_channel(2)
    client.rpc(2, spec.Queue.Declare(queue="after"), spec.Queue.DeclareOk)


def test_cc_is_reported_before_bcc(client):
    publish_raw(client, [field("BCC", b"I" + struct.pack(">i", 1)), field("CC", longstr("a"))])
    assert closed(client)[:2] == (406, invalid("CC", "longstr"))


def test_a_bad_bcc_after_a_good_cc(client):
    publish_raw(client, [field("CC", array(longstr("a"))), field("BCC", b"I" + struct.pack(">i", 1))])
    assert closed(client)[:2] == (406, invalid("BCC", "signedint"))


def test_a_tx_channel_fails_at_the_publish_not_at_commit(client):
    client.rpc(1, spec.Tx.Select(), spec.Tx.SelectOk)
    publish_raw(client, [field("CC", longstr("a"))])  # no tx.commit: the close answers the publish
    assert closed(client) == (406, invalid("CC", "longstr"), (60, 40))


def test_a_missing_exchange_is_reported_before_a_bad_cc(client):
    publish_raw(client, [field("CC", longstr("a"))], exchange="missing")
    assert closed(client) == (404, f"NOT_FOUND - no exchange 'missing' in {VHOST}", (60, 40))


def test_an_invalid_expiration_is_reported_before_a_bad_cc(client):
    publish_raw(client, [field("CC", longstr("a"))], expiration="abc")
    assert closed(client)[:2] == (406, "PRECONDITION_FAILED - invalid expiration 'abc': no_integer")


def test_cc_and_bcc_arrays_add_routing_keys_and_bcc_is_hidden(client):
    declare(client, "main", "cc", "bcc")
    headers = {"CC": ["cc"], "BCC": ["bcc"], "n": 1}
    client.publish(1, "", "main", b"m", spec.Basic.Properties(headers=headers))
    for q in ("main", "cc", "bcc"):
        _, props, body = client.get(q)
        assert body == b"m" and props.headers == {"CC": ["cc"], "n": 1}


def test_cc_routes_through_the_exchange_it_was_published_to(client):
    client.rpc(1, spec.Exchange.Declare(exchange="x", exchange_type="direct"), spec.Exchange.DeclareOk)
    declare(client, "red", "green", "blue")
    for q in ("red", "green"):
        client.rpc(1, spec.Queue.Bind(queue=q, exchange="x", routing_key=q), spec.Queue.BindOk)
    client.publish(1, "x", "red", b"m", spec.Basic.Properties(headers={"CC": ["green", "blue"]}))
    assert [client.drain(q) for q in ("red", "green", "blue")] == [[b"m"], [b"m"], []]


def test_a_queue_named_twice_gets_one_copy(client):
    declare(client, "main")
    client.publish(1, "", "main", b"m", spec.Basic.Properties(headers={"CC": ["main"], "BCC": ["main"]}))
    assert client.drain("main") == [b"m"]


def test_a_cc_key_that_routes_nowhere_leaves_the_message_routed(client):
    declare(client, "main")
    client.rpc(1, spec.Confirm.Select(), spec.Confirm.SelectOk)
    client.publish(1, "", "main", b"m", spec.Basic.Properties(headers={"CC": ["nowhere"]}), mandatory=True)
    client.loop.run_soon()
    assert [type(f) for _, f in client.frames()] == [spec.Basic.Ack]


def test_a_message_routed_only_by_cc_is_not_returned(client):
    declare(client, "cc")
    client.publish(1, "", "nowhere", b"m", spec.Basic.Properties(headers={"CC": ["cc"]}), mandatory=True)
    assert client.methods() == []
    assert client.drain("cc") == [b"m"]


def test_array_elements_that_are_not_strings_are_ignored(client):
    declare(client, "main", "other")
    ints = array(b"I" + struct.pack(">i", 1), b"l" + struct.pack(">q", 2))
    publish_raw(
        client, [field("CC", ints), field("BCC", array(b"t\x01", longstr("other")))], routing_key="main"
    )
    publish_raw(client, [field("CC", array())], routing_key="main")  # an empty array is fine too
    assert client.drain("main") == [b"x", b"x"]
    assert client.drain("other") == [b"x"]


def test_lowercase_cc_and_bcc_are_ordinary_headers(client):
    declare(client, "main")
    lowercase = [field("cc", longstr("a")), field("bcc", b"I" + struct.pack(">i", 1))]
    publish_raw(client, lowercase, routing_key="main")
    _, props, body = client.get("main")
    assert body == b"x" and props.headers == {"cc": "a", "bcc": 1}


def test_bcc_alone_routes_and_leaves_an_empty_headers_table(client):
    declare(client, "bcc")
    client.publish(1, "", "nowhere", b"m", spec.Basic.Properties(headers={"BCC": ["bcc"]}))
    got_ok, props, body = client.get("bcc")
    assert (body, got_ok.routing_key, props.headers) == (b"m", "nowhere", {})


def test_a_dead_letter_lists_the_cc_keys_in_x_death_and_drops_cc(client, loop):
    declare(client, "dlq", "main")
    args = {"x-message-ttl": 50, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    client.rpc(1, spec.Queue.Declare(queue="cc", arguments=args), spec.Queue.DeclareOk)
    client.publish(1, "", "main", b"m", spec.Basic.Properties(headers={"CC": ["cc"], "BCC": ["other"]}))
    loop.advance(0.05)
    _, props, body = client.get("dlq")
    assert body == b"m" and props.headers["x-death"][0]["routing-keys"] == ["main", "cc"]
    assert "CC" not in props.headers and "BCC" not in props.headers
