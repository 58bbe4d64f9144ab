"""Exchanges over the mock transport: declare/delete rules, the default and predeclared exchanges,
exchange-to-exchange bindings, internal and alternate exchanges, and routing of every type.

Codes and texts are RabbitMQ 3.10's (e2e/test_exchanges.py keeps one case of each rule against
both brokers)."""

from __future__ import annotations

import pytest
from pamqp import commands as spec
from pamqp import header as pheader

VHOST = "vhost '/'"
DEFAULT_403 = "ACCESS_REFUSED - operation not permitted on the default exchange"


def ok(c, method, reply, channel=1):
    c.send(channel, method)
    return c.expect(reply, channel)


def refused(c, method, channel=1):
    """Send ``method``; the broker must close the channel: ``(code, text, (class, method))``."""
    c.send(channel, method)
    close = c.expect(spec.Channel.Close, channel)
    return close.reply_code, close.reply_text, (close.class_id, close.method_id)


def x_declare(c, name, kind="direct", **kw):
    return ok(c, spec.Exchange.Declare(exchange=name, exchange_type=kind, **kw), spec.Exchange.DeclareOk)


def q_declare(c, name, **kw):
    return ok(c, spec.Queue.Declare(queue=name, **kw), spec.Queue.DeclareOk)


def bind(c, queue, exchange, key="", arguments=None):
    ok(
        c,
        spec.Queue.Bind(queue=queue, exchange=exchange, routing_key=key, arguments=arguments),
        spec.Queue.BindOk,
    )


def x_bind(c, destination, source, key="", arguments=None):
    method = spec.Exchange.Bind(destination=destination, source=source, routing_key=key, arguments=arguments)
    ok(c, method, spec.Exchange.BindOk)


def drain(c, queue, channel=1):
    """Every message now in ``queue`` (no-ack gets), as bodies."""
    bodies = []
    while True:
        c.send(channel, spec.Basic.Get(queue=queue, no_ack=True))
        frames = [f for _, f in c.methods()]
        if isinstance(frames[0], spec.Basic.GetEmpty):
            return bodies
        assert isinstance(frames[0], spec.Basic.GetOk), frames
        bodies.append(frames[2].value if len(frames) > 2 else b"")


def publish(c, exchange, key, body, headers=None, mandatory=False):
    c.publish(1, exchange, key, body, spec.Basic.Properties(headers=headers), mandatory=mandatory)


# -- declare ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["direct", "fanout", "topic", "headers"])
def test_declare_each_type_then_equivalent_and_passive_redeclare(client, kind):
    x_declare(client, "x", kind)
    x_declare(client, "x", kind)
    other = "fanout" if kind != "fanout" else "direct"
    x_declare(client, "x", other, passive=True)  # passive ignores the type
    ok(client, spec.Exchange.Delete(exchange="x"), spec.Exchange.DeleteOk)


def test_unknown_exchange_type_closes_the_connection_503(client):
    client.send(1, spec.Exchange.Declare(exchange="x", exchange_type="no-such-type"))
    close = client.expect(spec.Connection.Close, 0)
    assert (close.reply_code, close.reply_text) == (
        503,
        "COMMAND_INVALID - unknown exchange type 'no-such-type'",
    )
    assert (close.class_id, close.method_id) == (40, 10)


def test_passive_declare_of_a_missing_exchange_is_404_and_the_connection_survives(client):
    assert refused(client, spec.Exchange.Declare(exchange="missing", passive=True)) == (
        404,
        f"NOT_FOUND - no exchange 'missing' in {VHOST}",
        (40, 10),
    )
    client.open_channel(2)
    ok(client, spec.Exchange.Declare(exchange="amq.direct", passive=True), spec.Exchange.DeclareOk, 2)


def test_redeclare_with_another_type_is_406(client):
    x_declare(client, "x", "direct")
    assert refused(client, spec.Exchange.Declare(exchange="x", exchange_type="fanout")) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'x' in {VHOST}: "
        "received 'fanout' but current is 'direct'",
        (40, 10),
    )


def test_redeclare_with_another_durable_flag_is_406(client):
    x_declare(client, "x", "direct", durable=False)
    assert refused(client, spec.Exchange.Declare(exchange="x", exchange_type="direct", durable=True))[:2] == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'x' in {VHOST}: "
        "received 'true' but current is 'false'",
    )


def test_declare_with_the_reserved_amq_prefix_is_403(client):
    assert refused(client, spec.Exchange.Declare(exchange="amq.foo", exchange_type="direct")) == (
        403,
        "ACCESS_REFUSED - exchange name 'amq.foo' contains reserved prefix 'amq.*'",
        (40, 10),
    )


def test_redeclaring_an_existing_amq_exchange_is_allowed(client):
    # the amq.* check applies only when the exchange does not exist yet
    x_declare(client, "amq.direct", "direct", durable=True)
    x_declare(client, "amq.topic", "topic", durable=True)


def test_deleting_a_system_exchange_is_403(client):
    assert refused(client, spec.Exchange.Delete(exchange="amq.direct")) == (
        403,
        f"ACCESS_REFUSED - deletion of system exchange 'amq.direct' in {VHOST} not allowed",
        (40, 20),
    )


@pytest.mark.parametrize(
    "name,kind",
    [
        ("amq.direct", "direct"),
        ("amq.fanout", "fanout"),
        ("amq.topic", "topic"),
        ("amq.headers", "headers"),
        ("amq.match", "headers"),
    ],
)
def test_predeclared_exchanges_exist_durable(client, name, kind):
    x_declare(client, name, passive=True)
    x_declare(client, name, kind, durable=True)  # equivalent: durable, not auto-delete, not internal


def test_predeclared_exchange_redeclared_transient_is_406(client):
    assert refused(client, spec.Exchange.Declare(exchange="amq.fanout", exchange_type="fanout"))[:2] == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'amq.fanout' in {VHOST}: "
        "received 'false' but current is 'true'",
    )


def test_delete_then_delete_again_is_ok_and_the_exchange_is_gone(client):
    x_declare(client, "x", "fanout")
    ok(client, spec.Exchange.Delete(exchange="x"), spec.Exchange.DeleteOk)
    ok(client, spec.Exchange.Delete(exchange="x"), spec.Exchange.DeleteOk)  # missing: still ok
    assert refused(client, spec.Exchange.Declare(exchange="x", passive=True))[:2] == (
        404,
        f"NOT_FOUND - no exchange 'x' in {VHOST}",
    )


def test_delete_if_unused_refuses_a_bound_exchange_406(client):
    x_declare(client, "x", "fanout")
    q_declare(client, "q")
    bind(client, "q", "x")
    assert refused(client, spec.Exchange.Delete(exchange="x", if_unused=True)) == (
        406,
        f"PRECONDITION_FAILED - exchange 'x' in {VHOST} in use",
        (40, 20),
    )


def test_delete_if_unused_deletes_once_unbound(client):
    x_declare(client, "x", "fanout")
    q_declare(client, "q")
    bind(client, "q", "x")
    ok(client, spec.Queue.Unbind(queue="q", exchange="x"), spec.Queue.UnbindOk)
    ok(client, spec.Exchange.Delete(exchange="x", if_unused=True), spec.Exchange.DeleteOk)
    assert refused(client, spec.Exchange.Declare(exchange="x", passive=True))[0] == 404


def test_delete_if_unused_counts_a_binding_to_another_exchange_as_use(client):
    x_declare(client, "src", "fanout")
    x_declare(client, "dst", "fanout")
    x_bind(client, "dst", "src")
    assert refused(client, spec.Exchange.Delete(exchange="src", if_unused=True))[:2] == (
        406,
        f"PRECONDITION_FAILED - exchange 'src' in {VHOST} in use",
    )


def test_deleting_an_exchange_removes_its_bindings(client):
    q_declare(client, "q")
    x_declare(client, "x", "fanout")
    bind(client, "q", "x")
    ok(client, spec.Exchange.Delete(exchange="x"), spec.Exchange.DeleteOk)
    x_declare(client, "x", "fanout")
    publish(client, "x", "", b"after")
    assert drain(client, "q") == []


def test_auto_delete_exchange_goes_with_its_last_queue_binding(client):
    x_declare(client, "x", "fanout", auto_delete=True)
    q_declare(client, "q")
    bind(client, "q", "x")
    ok(client, spec.Queue.Unbind(queue="q", exchange="x"), spec.Queue.UnbindOk)
    assert refused(client, spec.Exchange.Declare(exchange="x", passive=True))[:2] == (
        404,
        f"NOT_FOUND - no exchange 'x' in {VHOST}",
    )


def test_auto_delete_exchange_goes_when_its_bound_queue_is_deleted(client):
    x_declare(client, "x", "fanout", auto_delete=True)
    q_declare(client, "q")
    bind(client, "q", "x")
    ok(client, spec.Queue.Delete(queue="q"), spec.Queue.DeleteOk)
    assert refused(client, spec.Exchange.Declare(exchange="x", passive=True))[0] == 404


def test_auto_delete_exchange_without_bindings_stays(client):
    x_declare(client, "x", "fanout", auto_delete=True)
    x_declare(client, "x", passive=True)


# -- the default exchange ---------------------------------------------------------------------------------
def test_default_exchange_routes_by_queue_name(client):
    q_declare(client, "q")
    publish(client, "", "q", b"hello")
    publish(client, "", "nobody", b"lost")
    assert drain(client, "q") == [b"hello"]


@pytest.mark.parametrize(
    "method,ids",
    [
        (spec.Queue.Bind(queue="q", exchange="", routing_key="k"), (50, 20)),
        (spec.Queue.Unbind(queue="q", exchange="", routing_key="q"), (50, 50)),
        (spec.Exchange.Declare(exchange="", exchange_type="direct"), (40, 10)),
        (spec.Exchange.Delete(exchange=""), (40, 20)),
        (spec.Exchange.Bind(destination="x", source="", routing_key="k"), (40, 30)),
    ],
    ids=["queue.bind", "queue.unbind", "exchange.declare", "exchange.delete", "exchange.bind"],
)
def test_default_exchange_cannot_be_changed_403(client, method, ids):
    q_declare(client, "q")
    x_declare(client, "x", "fanout")
    assert refused(client, method) == (403, DEFAULT_403, ids)


def test_default_exchange_cannot_be_a_binding_destination(client):
    x_declare(client, "x", "fanout")
    method = spec.Exchange.Bind(destination="", source="x", routing_key="k")
    assert refused(client, method) == (403, DEFAULT_403, (40, 30))


def test_passive_declare_of_the_default_exchange_is_403_too(client):
    assert refused(client, spec.Exchange.Declare(exchange="", passive=True)) == (403, DEFAULT_403, (40, 10))


def test_amq_default_is_only_a_display_name_publishing_to_it_is_404(client):
    q_declare(client, "q")
    publish(client, "amq.default", "q", b"x")
    close = client.expect(spec.Channel.Close, 1)
    assert (close.reply_code, close.reply_text) == (404, f"NOT_FOUND - no exchange 'amq.default' in {VHOST}")


def test_publish_to_a_missing_exchange_closes_the_channel_404(client):
    publish(client, "missing", "k", b"body")
    assert client.expect(spec.Channel.Close, 1).reply_code == 404
    # the close answers the publish: class 60, method 40
    client.send(1, spec.Channel.CloseOk())
    client.open_channel(1)
    publish(client, "missing", "k", b"body")
    close = client.expect(spec.Channel.Close, 1)
    assert (close.reply_text, close.class_id, close.method_id) == (
        f"NOT_FOUND - no exchange 'missing' in {VHOST}",
        60,
        40,
    )
    assert not client.transport.closed


# -- routing ----------------------------------------------------------------------------------------------
def test_direct_exchange_routes_by_exact_key(client):
    x_declare(client, "x", "direct")
    for q in ("a", "b"):
        q_declare(client, q)
    bind(client, "a", "x", "red")
    bind(client, "a", "x", "green")
    bind(client, "b", "x", "green")
    for key in ("red", "green", "blue"):
        publish(client, "x", key, key.encode())
    assert drain(client, "a") == [b"red", b"green"]
    assert drain(client, "b") == [b"green"]


def test_fanout_exchange_ignores_the_routing_key(client):
    x_declare(client, "x", "fanout")
    for q in ("a", "b"):
        q_declare(client, q)
        bind(client, q, "x", "whatever")
    publish(client, "x", "other", b"m")
    assert drain(client, "a") == [b"m"]
    assert drain(client, "b") == [b"m"]


def test_a_queue_bound_twice_gets_one_copy(client):
    x_declare(client, "x", "topic")
    q_declare(client, "q")
    bind(client, "q", "x", "a.*")
    bind(client, "q", "x", "*.b")
    publish(client, "x", "a.b", b"once")
    assert drain(client, "q") == [b"once"]


@pytest.mark.parametrize(
    "pattern,matches,misses",
    [
        ("a.*.c", ["a.b.c", "a..c"], ["a.c", "a.b.b.c", "a.b.c.d"]),
        ("a.#", ["a", "a.b", "a.b.c"], ["b.a", "ab"]),
        ("#.c", ["c", "a.c", "a.b.c"], ["c.a", "ac"]),
        ("a.#.c", ["a.c", "a.b.c", "a.b.b.c"], ["a.b", "b.c"]),
        ("#", ["", "a", "a.b.c"], []),
        ("*", ["a"], ["a.b", ""]),  # "*" does not match the empty key (but "*.*" matches ".")
        ("*.*", ["a.b", "."], ["a", "a.b.c"]),
        ("a.b", ["a.b"], ["a.b.c", "a", "A.B"]),
        ("#.#", ["", "a", "a.b"], []),
        ("*.#", ["a", "a.b"], [""]),
        ("", [""], ["a"]),
    ],
)
def test_topic_routing(client, pattern, matches, misses):
    x_declare(client, "x", "topic")
    q_declare(client, "q")
    bind(client, "q", "x", pattern)
    for key in matches + misses:
        publish(client, "x", key, key.encode() or b"-")
    assert drain(client, "q") == [k.encode() or b"-" for k in matches]


def test_topic_unbind_removes_only_that_pattern(client):
    x_declare(client, "x", "topic")
    q_declare(client, "q")
    bind(client, "q", "x", "a.#")
    bind(client, "q", "x", "#.z")
    ok(client, spec.Queue.Unbind(queue="q", exchange="x", routing_key="a.#"), spec.Queue.UnbindOk)
    for key in ("a.b", "y.z"):
        publish(client, "x", key, key.encode())
    assert drain(client, "q") == [b"y.z"]


def test_headers_exchange_x_match_all_any_and_the_default(client):
    x_declare(client, "x", "headers")
    for q in ("all", "any", "default"):
        q_declare(client, q)
    bind(client, "all", "x", arguments={"x-match": "all", "format": "pdf", "type": "report"})
    bind(client, "any", "x", arguments={"x-match": "any", "format": "pdf", "type": "report"})
    bind(client, "default", "x", arguments={"format": "pdf", "type": "report"})  # all by default
    publish(client, "x", "ignored", b"both", {"format": "pdf", "type": "report", "extra": 1})
    publish(client, "x", "ignored", b"format", {"format": "pdf"})
    publish(client, "x", "ignored", b"wrong", {"format": "zip", "type": "log"})
    publish(client, "x", "ignored", b"none")
    publish(client, "x", "ignored", b"type-only", {"type": "report"})
    assert drain(client, "all") == [b"both"]
    assert drain(client, "default") == [b"both"]
    assert drain(client, "any") == [b"both", b"format", b"type-only"]


def test_headers_exchange_empty_binding_matches_everything(client):
    x_declare(client, "x", "headers")
    q_declare(client, "q")
    bind(client, "q", "x", arguments={"x-match": "all"})
    publish(client, "x", "", b"with", {"n": 1})
    publish(client, "x", "", b"without")
    assert drain(client, "q") == [b"with", b"without"]


def test_headers_exchange_compares_value_types(client):
    x_declare(client, "x", "headers")
    q_declare(client, "q")
    bind(client, "q", "x", arguments={"n": 1})
    publish(client, "x", "", b"n1", {"n": 1})
    publish(client, "x", "", b"n-str", {"n": "1"})
    assert drain(client, "q") == [b"n1"]


def test_headers_exchange_void_value_only_needs_the_key(client):
    x_declare(client, "x", "headers")
    q_declare(client, "q")
    bind(client, "q", "x", arguments={"flag": None})
    publish(client, "x", "", b"flag", {"flag": "anything"})
    publish(client, "x", "", b"other", {"other": "anything"})
    assert drain(client, "q") == [b"flag"]


def test_exchange_to_exchange_binding_routes_until_unbound(client):
    x_declare(client, "src", "topic")
    x_declare(client, "dst", "fanout")
    q_declare(client, "q")
    x_bind(client, "dst", "src", "a.*")
    bind(client, "q", "dst")
    publish(client, "src", "a.b", b"routed")
    publish(client, "src", "b.b", b"dropped")
    assert drain(client, "q") == [b"routed"]
    method = spec.Exchange.Unbind(destination="dst", source="src", routing_key="a.*")
    ok(client, method, spec.Exchange.UnbindOk)
    publish(client, "src", "a.b", b"after-unbind")
    assert drain(client, "q") == []


def test_exchange_binding_cycle_delivers_once(client):
    x_declare(client, "a", "fanout")
    x_declare(client, "b", "fanout")
    q_declare(client, "q")
    x_bind(client, "b", "a")
    x_bind(client, "a", "b")
    bind(client, "q", "b")
    publish(client, "a", "", b"loop")
    assert drain(client, "q") == [b"loop"]


def test_two_exchange_paths_to_one_queue_deliver_once(client):
    for name in ("src", "left", "right"):
        x_declare(client, name, "fanout")
    q_declare(client, "q")
    x_bind(client, "left", "src")
    x_bind(client, "right", "src")
    bind(client, "q", "left")
    bind(client, "q", "right")
    publish(client, "src", "", b"diamond")
    assert drain(client, "q") == [b"diamond"]


def test_binding_an_exchange_to_a_missing_source_is_404(client):
    x_declare(client, "x", "fanout")
    assert refused(client, spec.Exchange.Bind(destination="x", source="missing")) == (
        404,
        f"NOT_FOUND - no exchange 'missing' in {VHOST}",
        (40, 30),
    )


def test_binding_a_missing_destination_exchange_is_404(client):
    x_declare(client, "x", "fanout")
    assert refused(client, spec.Exchange.Bind(destination="missing", source="x"))[:2] == (
        404,
        f"NOT_FOUND - no exchange 'missing' in {VHOST}",
    )


def test_routing_through_an_internal_exchange_is_fine(client):
    x_declare(client, "internal", "fanout", internal=True)
    x_declare(client, "front", "fanout")
    q_declare(client, "q")
    bind(client, "q", "internal")
    x_bind(client, "internal", "front")
    publish(client, "front", "", b"via-front")
    assert drain(client, "q") == [b"via-front"]


def test_publishing_to_an_internal_exchange_is_403(client):
    x_declare(client, "internal", "fanout", internal=True)
    publish(client, "internal", "", b"direct")
    close = client.expect(spec.Channel.Close, 1)
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        403,
        f"ACCESS_REFUSED - cannot publish to internal exchange 'internal' in {VHOST}",
        60,
        40,
    )


def test_alternate_exchange_takes_the_unroutable_and_no_return_is_sent(client):
    x_declare(client, "ae", "fanout")
    x_declare(client, "main", "direct", arguments={"alternate-exchange": "ae"})
    q_declare(client, "qmain")
    q_declare(client, "qae")
    bind(client, "qmain", "main", "known")
    bind(client, "qae", "ae")
    publish(client, "main", "known", b"routed")
    publish(client, "main", "unknown", b"unroutable", mandatory=True)
    assert not [f for _, f in client.methods() if isinstance(f, spec.Basic.Return)]
    assert drain(client, "qmain") == [b"routed"]
    assert drain(client, "qae") == [b"unroutable"]


def test_missing_alternate_exchange_means_unroutable_312(client):
    x_declare(client, "main", "direct", arguments={"alternate-exchange": "missing-ae"})
    publish(client, "main", "k", b"lost", mandatory=True)
    frames = [f for _, f in client.frames()]
    ret = frames[0]
    assert isinstance(ret, spec.Basic.Return)
    assert (ret.reply_code, ret.reply_text, ret.exchange, ret.routing_key) == (312, "NO_ROUTE", "main", "k")
    assert isinstance(frames[1], pheader.ContentHeader) and frames[2].value == b"lost"


def test_alternate_exchange_chain_is_followed(client):
    x_declare(client, "ae2", "fanout")
    x_declare(client, "ae1", "direct", arguments={"alternate-exchange": "ae2"})
    x_declare(client, "main", "direct", arguments={"alternate-exchange": "ae1"})
    q_declare(client, "last")
    bind(client, "last", "ae2")
    publish(client, "main", "k", b"twice unroutable")
    assert drain(client, "last") == [b"twice unroutable"]


def test_unroutable_without_mandatory_is_dropped_silently(client):
    x_declare(client, "x", "direct")
    publish(client, "x", "nobody", b"dropped")
    assert client.methods() == []


@pytest.mark.parametrize(
    "destination,source",
    [("dst", "missing"), ("missing", "amq.fanout"), ("dst", "amq.fanout")],
    ids=["missing-source", "missing-destination", "not-bound"],
)
def test_exchange_unbind_of_what_does_not_exist_is_ok(client, destination, source):
    x_declare(client, "dst", "fanout")
    method = spec.Exchange.Unbind(destination=destination, source=source, routing_key="k")
    ok(client, method, spec.Exchange.UnbindOk)


def test_auto_delete_exchange_goes_with_its_last_exchange_binding_as_source(client):
    x_declare(client, "ad", "fanout", auto_delete=True)
    x_declare(client, "dst", "fanout")
    x_bind(client, "dst", "ad")
    ok(client, spec.Exchange.Unbind(destination="dst", source="ad"), spec.Exchange.UnbindOk)
    assert refused(client, spec.Exchange.Declare(exchange="ad", passive=True))[0] == 404


def test_auto_delete_exchange_bound_only_as_a_destination_stays(client):
    x_declare(client, "ad", "fanout", auto_delete=True)
    x_bind(client, "ad", "amq.fanout")
    ok(client, spec.Exchange.Unbind(destination="ad", source="amq.fanout"), spec.Exchange.UnbindOk)
    x_declare(client, "ad", passive=True)


def test_delete_if_unused_of_an_exchange_that_is_only_a_destination_is_ok(client):
    x_declare(client, "src", "fanout")
    x_declare(client, "dst", "fanout")
    x_bind(client, "dst", "src")
    ok(client, spec.Exchange.Delete(exchange="dst", if_unused=True), spec.Exchange.DeleteOk)
    assert refused(client, spec.Exchange.Declare(exchange="dst", passive=True))[0] == 404


def test_a_message_routed_via_the_alternate_exchange_keeps_its_exchange_and_key(client):
    x_declare(client, "ae", "fanout")
    x_declare(client, "main", "direct", arguments={"alternate-exchange": "ae"})
    q_declare(client, "q")
    bind(client, "q", "ae")
    publish(client, "main", "k", b"m")
    client.send(1, spec.Basic.Get(queue="q", no_ack=True))
    got_ok = client.expect(spec.Basic.GetOk)
    assert (got_ok.exchange, got_ok.routing_key) == ("main", "k")


def test_a_message_through_an_exchange_binding_keeps_its_exchange_and_key(client):
    x_declare(client, "src", "topic")
    x_declare(client, "dst", "fanout")
    q_declare(client, "q")
    x_bind(client, "dst", "src", "a.*")
    bind(client, "q", "dst")
    publish(client, "src", "a.b", b"m")
    client.send(1, spec.Basic.Get(queue="q", no_ack=True))
    got_ok = client.expect(spec.Basic.GetOk)
    assert (got_ok.exchange, got_ok.routing_key) == ("src", "a.b")


def test_direct_exchange_routes_the_empty_key(client):
    x_declare(client, "x", "direct")
    q_declare(client, "q")
    bind(client, "q", "x", "")
    publish(client, "x", "", b"empty key")
    publish(client, "x", "k", b"other key")
    assert drain(client, "q") == [b"empty key"]


def test_a_passive_declare_of_a_missing_amq_exchange_is_404_not_403(client):
    assert refused(client, spec.Exchange.Declare(exchange="amq.nonexistent", passive=True)) == (
        404,
        f"NOT_FOUND - no exchange 'amq.nonexistent' in {VHOST}",
        (40, 10),
    )


def test_deleting_any_amq_name_is_403_even_when_missing(client):
    assert refused(client, spec.Exchange.Delete(exchange="amq.nonexistent")) == (
        403,
        f"ACCESS_REFUSED - deletion of system exchange 'amq.nonexistent' in {VHOST} not allowed",
        (40, 20),
    )


@pytest.mark.parametrize(
    "method,ids",
    [
        (spec.Queue.Bind(queue="q", exchange="amq.default", routing_key="k"), (50, 20)),
        (spec.Exchange.Bind(destination="x", source="amq.default"), (40, 30)),
    ],
    ids=["queue.bind", "exchange.bind"],
)
def test_amq_default_is_no_exchange_to_bind_to_404(client, method, ids):
    q_declare(client, "q")
    x_declare(client, "x", "fanout")
    assert refused(client, method) == (404, f"NOT_FOUND - no exchange 'amq.default' in {VHOST}", ids)
