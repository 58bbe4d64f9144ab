"""Exchanges: declare/delete rules, predeclared exchanges, and routing of every type.

Routing checks publish and then basic.get on the same channel: a broker must process a channel's commands in
order, so a message routed by a publish is visible to a later get on that channel. One case per rule runs here
against both brokers; the variants are protocol tests (tests/protocol/test_exchanges.py,
test_declare_arguments.py).
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

VHOST = "vhost '/'"


@pytest.mark.parametrize("kind", ["headers"])  # every type: tests/protocol/test_exchanges.py
def test_declare_each_type_and_passive_redeclare(channel, unique, kind):
    x = unique(kind)
    channel.exchange_declare(x, kind, auto_delete=False)
    channel.exchange_declare(x, kind)  # equivalent redeclare is fine
    channel.exchange_declare(x, passive=True)
    channel.exchange_declare(
        x, "fanout" if kind != "fanout" else "direct", passive=True
    )  # passive ignores type
    channel.exchange_delete(x)


def test_unknown_exchange_type_is_503_connection_error(connect, unique):
    conn = connect()
    ch = conn.channel()
    x = unique("x")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        ch.exchange_declare(x, "no-such-type")
    assert (info.value.reply_code, info.value.reply_text) == (
        503,
        "COMMAND_INVALID - unknown exchange type 'no-such-type'",
    )


def test_passive_declare_missing_is_404_and_connection_survives(connect, unique, channel_error):
    conn = connect()
    ch = conn.channel()
    x = unique("missing")
    channel_error(
        lambda: ch.exchange_declare(x, passive=True), 404, f"NOT_FOUND - no exchange '{x}' in {VHOST}"
    )
    assert not ch.is_open
    assert conn.is_open
    conn.channel().exchange_declare("amq.direct", passive=True)


def test_redeclare_with_different_type_is_406(channel, unique, channel_error):
    x = unique("x")
    channel.exchange_declare(x, "direct")
    channel_error(
        lambda: channel.exchange_declare(x, "fanout"),
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{x}' in {VHOST}: "
        "received 'fanout' but current is 'direct'",
    )


def test_declare_amq_prefix_is_403(channel, channel_error):
    channel_error(
        lambda: channel.exchange_declare("amq.foo", "direct"),
        403,
        "ACCESS_REFUSED - exchange name 'amq.foo' contains reserved prefix 'amq.*'",
    )


@pytest.mark.parametrize(
    "name,kind",
    [("amq.topic", "topic"), ("amq.match", "headers")],  # all five: tests/protocol/test_exchanges.py
)
def test_predeclared_exchanges_exist(channel, name, kind):
    channel.exchange_declare(name, passive=True)
    channel.exchange_declare(name, kind, durable=True)  # equivalent: durable, not auto-delete, not internal


def test_delete_and_delete_missing_is_ok(channel, unique, channel_error):
    x = unique("x")
    channel.exchange_declare(x, "fanout")
    channel.exchange_delete(x)
    channel.exchange_delete(x)  # RabbitMQ 3.x: deleting a missing exchange is not an error
    channel_error(
        lambda: channel.exchange_declare(x, passive=True), 404, f"NOT_FOUND - no exchange '{x}' in {VHOST}"
    )


def test_delete_if_unused(connect, unique, channel_error):
    conn = connect()
    ch = conn.channel()
    x, q = unique("x"), unique("q")
    ch.exchange_declare(x, "fanout")
    ch.queue_declare(q, exclusive=True)
    ch.queue_bind(q, x)
    channel_error(
        lambda: ch.exchange_delete(x, if_unused=True),
        406,
        f"PRECONDITION_FAILED - exchange '{x}' in {VHOST} in use",
    )
    ch = conn.channel()
    ch.queue_unbind(q, x)
    ch.exchange_delete(x, if_unused=True)
    channel_error(
        lambda: ch.exchange_declare(x, passive=True), 404, f"NOT_FOUND - no exchange '{x}' in {VHOST}"
    )


def test_auto_delete_exchange_goes_when_last_binding_goes(connect, unique, channel_error):
    ch = connect().channel()
    x, q = unique("x"), unique("q")
    ch.exchange_declare(x, "fanout", auto_delete=True)
    ch.queue_declare(q, exclusive=True)
    ch.queue_bind(q, x)
    ch.queue_unbind(q, x)
    channel_error(
        lambda: ch.exchange_declare(x, passive=True), 404, f"NOT_FOUND - no exchange '{x}' in {VHOST}"
    )


# ---------------------------------------------------------------------------------------------------------
# default exchange
# ---------------------------------------------------------------------------------------------------------
def test_default_exchange_routes_by_queue_name(channel, unique, drain):
    q = unique("q")
    channel.queue_declare(q, exclusive=True)
    channel.basic_publish("", q, b"hello")
    channel.basic_publish("", unique("nobody"), b"lost")
    assert drain(channel, q) == [b"hello"]


def test_default_exchange_cannot_be_bound(channel, unique, channel_error):
    q = unique("q")
    channel.queue_declare(q, exclusive=True)
    channel_error(
        lambda: channel.queue_bind(q, "", routing_key="k"),
        403,
        "ACCESS_REFUSED - operation not permitted on the default exchange",
    )


def test_publish_to_missing_exchange_is_404(connect, unique, channel_error):
    conn = connect()
    ch = conn.channel()
    x = unique("missing")
    ch.basic_publish(x, "k", b"body")
    channel_error(
        lambda: ch.queue_declare("", exclusive=True), 404, f"NOT_FOUND - no exchange '{x}' in {VHOST}"
    )
    assert conn.is_open


# ---------------------------------------------------------------------------------------------------------
# routing
# ---------------------------------------------------------------------------------------------------------
def test_direct_routing(channel, unique, drain):
    x, qa, qb = unique("x"), unique("a"), unique("b")
    channel.exchange_declare(x, "direct")
    for q in (qa, qb):
        channel.queue_declare(q, exclusive=True)
    channel.queue_bind(qa, x, "red")
    channel.queue_bind(qa, x, "green")
    channel.queue_bind(qb, x, "green")
    for key in ("red", "green", "blue"):
        channel.basic_publish(x, key, key.encode())
    assert drain(channel, qa) == [b"red", b"green"]
    assert drain(channel, qb) == [b"green"]


def test_fanout_ignores_routing_key(channel, unique, drain):
    x, qa, qb = unique("x"), unique("a"), unique("b")
    channel.exchange_declare(x, "fanout")
    for q in (qa, qb):
        channel.queue_declare(q, exclusive=True)
        channel.queue_bind(q, x, "whatever")
    channel.basic_publish(x, "other", b"m")
    assert drain(channel, qa) == [b"m"]
    assert drain(channel, qb) == [b"m"]


def test_same_queue_bound_twice_gets_one_copy(channel, unique, drain):
    x, q = unique("x"), unique("q")
    channel.exchange_declare(x, "topic")
    channel.queue_declare(q, exclusive=True)
    channel.queue_bind(q, x, "a.*")
    channel.queue_bind(q, x, "*.b")
    channel.basic_publish(x, "a.b", b"once")
    assert drain(channel, q) == [b"once"]


@pytest.mark.parametrize(
    "pattern,matches,misses",
    # the full table of patterns: tests/protocol/test_exchanges.py
    [
        ("a.*.c", ["a.b.c", "a..c"], ["a.c", "a.b.b.c", "a.b.c.d"]),
        ("a.#.c", ["a.c", "a.b.c", "a.b.b.c"], ["a.b", "b.c"]),
        ("*", ["a"], ["a.b", ""]),  # RabbitMQ: "*" does not match the empty key (but "*.*" matches ".")
    ],
)
def test_topic_routing(channel, unique, pattern, matches, misses, drain):
    x, q = unique("x"), unique("q")
    channel.exchange_declare(x, "topic")
    channel.queue_declare(q, exclusive=True)
    channel.queue_bind(q, x, pattern)
    for key in matches + misses:
        channel.basic_publish(x, key, key.encode())
    assert drain(channel, q) == [k.encode() for k in matches]


def test_headers_exchange_x_match(channel, unique, drain):
    x, q_all, q_any, q_default = unique("x"), unique("all"), unique("any"), unique("default")
    channel.exchange_declare(x, "headers")
    for q in (q_all, q_any, q_default):
        channel.queue_declare(q, exclusive=True)
    channel.queue_bind(q_all, x, arguments={"x-match": "all", "format": "pdf", "type": "report"})
    channel.queue_bind(q_any, x, arguments={"x-match": "any", "format": "pdf", "type": "report"})
    channel.queue_bind(q_default, x, arguments={"format": "pdf", "type": "report"})  # default is all

    def pub(body: bytes, headers: dict | None) -> None:
        channel.basic_publish(x, "ignored", body, pika.BasicProperties(headers=headers))

    pub(b"both", {"format": "pdf", "type": "report", "extra": 1})
    pub(b"format", {"format": "pdf"})
    pub(b"wrong", {"format": "zip", "type": "log"})
    pub(b"none", None)
    pub(b"type-only", {"type": "report"})
    assert drain(channel, q_all) == [b"both"]
    assert drain(channel, q_default) == [b"both"]
    assert drain(channel, q_any) == [b"both", b"format", b"type-only"]


def test_exchange_to_exchange_binding_routes(channel, unique, drain):
    src, dst, q = unique("src"), unique("dst"), unique("q")
    channel.exchange_declare(src, "topic")
    channel.exchange_declare(dst, "fanout")
    channel.queue_declare(q, exclusive=True)
    channel.exchange_bind(dst, src, "a.*")
    channel.queue_bind(q, dst)
    channel.basic_publish(src, "a.b", b"routed")
    channel.basic_publish(src, "b.b", b"dropped")
    assert drain(channel, q) == [b"routed"]
    channel.exchange_unbind(dst, src, "a.*")
    channel.basic_publish(src, "a.b", b"after-unbind")
    assert drain(channel, q) == []


def test_internal_exchange_cannot_be_published_to(connect, unique, channel_error, drain):
    ch = connect().channel()
    internal, front, q = unique("internal"), unique("front"), unique("q")
    ch.exchange_declare(internal, "fanout", internal=True)
    ch.exchange_declare(front, "fanout")
    ch.queue_declare(q, exclusive=True)
    ch.queue_bind(q, internal)
    ch.exchange_bind(internal, front)
    ch.basic_publish(front, "", b"via-front")  # routing through an internal exchange is fine
    assert drain(ch, q) == [b"via-front"]
    ch.basic_publish(internal, "", b"direct")
    channel_error(
        lambda: ch.queue_declare("", exclusive=True),
        403,
        f"ACCESS_REFUSED - cannot publish to internal exchange '{internal}' in {VHOST}",
    )


def test_alternate_exchange_receives_unroutable(connect, unique, drain):
    ch = connect().channel()
    main, ae, q_main, q_ae = unique("main"), unique("ae"), unique("qmain"), unique("qae")
    ch.exchange_declare(ae, "fanout")
    ch.exchange_declare(main, "direct", arguments={"alternate-exchange": ae})
    ch.queue_declare(q_main, exclusive=True)
    ch.queue_declare(q_ae, exclusive=True)
    ch.queue_bind(q_main, main, "known")
    ch.queue_bind(q_ae, ae)
    returned = []
    ch.add_on_return_callback(lambda *args: returned.append(args))
    ch.basic_publish(main, "known", b"routed")
    ch.basic_publish(main, "unknown", b"unroutable", mandatory=True)
    assert drain(ch, q_main) == [b"routed"]
    assert drain(ch, q_ae) == [b"unroutable"]
    ch.connection.process_data_events(time_limit=0)
    assert returned == []  # routed via the AE counts as routed: no basic.return
