"""The consistent-hash exchange ``x-consistent-hash`` with pika: what RabbitMQ 3.10.8's
``rabbitmq_consistent_hash_exchange`` plugin does (``make conformance`` enables it; every unmarked test
here passes against it), and what ottermq adds (``extension``: placement that survives a restart and
does not depend on the order of the bindings, weights RabbitMQ cannot hold in memory).

Queues are bound in the order of their names: RabbitMQ lays its ring out in binding order, ottermq in
(natural) name order (``vhost/chash.py`` rule 5), so the same keys land in the same queues on both.
"""

from __future__ import annotations

import uuid
from typing import Any

import pika
import pytest

from .polling import poll_until
from .test_management_write import q

CH = "x-consistent-hash"
KEYS = [f"key-{k}" for k in range(4000)]


def counts(ch: Any, queues: list[str]) -> list[int]:
    return [ch.queue_declare(queue, passive=True).method.message_count for queue in queues]


def ring(ch: Any, unique: Any, weights: tuple[str, ...], **arguments: Any) -> tuple[str, list[str]]:
    """A consistent-hash exchange and one queue per weight, bound in name order."""
    x = unique("chx")
    ch.exchange_declare(x, CH, arguments=arguments or None)
    queues = [unique(f"q{i}") for i in range(len(weights))]  # q0, q1, ...: the ring's order too
    for queue, weight in zip(queues, weights, strict=True):
        ch.queue_declare(queue)
        ch.queue_bind(queue, x, weight)
    return x, queues


def publish_all(ch: Any, x: str, queues: list[str], keys: list[str]) -> list[int]:
    for key in keys:
        ch.basic_publish(x, key, b"")

    def routed() -> list[int] | None:
        got = counts(ch, queues)
        return got if sum(got) == len(keys) else None

    return poll_until(routed, what="every message routed")


def landing(ch: Any, x: str, queues: list[str], key: str = "k", props: Any = None) -> int:
    """Which queue one message went to (the queues are emptied again)."""
    ch.basic_publish(x, key, b"", props)
    found = poll_until(lambda: [i for i, c in enumerate(counts(ch, queues)) if c], what="the message routed")
    assert len(found) == 1
    for queue in queues:
        ch.queue_purge(queue)
    return int(found[0])


# ---------------------------------------------------------------------------------------------
# placement
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("weights", "rabbitmq"),
    [
        (("1", "1", "1", "1"), [978, 1029, 1008, 985]),
        (("1", "2", "1", "1"), [776, 1636, 788, 800]),
    ],
)
def test_keys_spread_by_weight(channel, unique, weights, rabbitmq):
    """Each queue gets its weight's share of 4,000 distinct keys, within 6% (RabbitMQ's own counts,
    shown, are within 4%)."""
    x, queues = ring(channel, unique, weights)
    got = publish_all(channel, x, queues, KEYS)
    total = sum(int(w) for w in weights)
    for count, weight, theirs in zip(got, weights, rabbitmq, strict=True):
        share = len(KEYS) * int(weight) / total
        assert abs(count - share) <= 0.06 * share, (got, rabbitmq)
        assert abs(theirs - share) <= 0.06 * share


@pytest.mark.parametrize("weights", [("1", "1", "1", "1"), ("1", "2", "1", "1")])
def test_placement_is_the_plugins(channel, unique, weights):
    """The same ring puts the same keys in the same queues: erlang:phash2 and the jump hash, not an
    approximation (RabbitMQ's counts, queue by queue)."""
    expected = {("1", "1", "1", "1"): [978, 1029, 1008, 985], ("1", "2", "1", "1"): [776, 1636, 788, 800]}
    x, queues = ring(channel, unique, weights)
    assert publish_all(channel, x, queues, KEYS) == expected[weights]


def test_a_key_always_lands_in_the_same_queue(channel, unique):
    x, queues = ring(channel, unique, ("1", "1", "1"))
    for key in ("orders.42", "customer-7", ""):
        first = landing(channel, x, queues, key)
        assert {landing(channel, x, queues, key) for _ in range(5)} == {first}


def test_cc_keys_do_not_add_destinations(channel, unique):
    """Only the first routing key is hashed: one queue, whatever the CC header adds."""
    x, queues = ring(channel, unique, ("1", "1", "1", "1"))
    cc = pika.BasicProperties(headers={"CC": [f"z{i}" for i in range(10)]})
    for key in ("k1", "k2", "k3"):
        assert landing(channel, x, queues, key, cc) == landing(channel, x, queues, key)


HEADER_CASES = [  # header value (as pika encodes it) -> the queue RabbitMQ chose among four
    (None, 1),
    ({"x": "1"}, 1),
    ({"h": "abc"}, 0),
    ({"h": 7}, 0),
    ({"h": -123456789012}, 2),
    ({"h": True}, 0),
    ({"h": b"\x00\x01"}, 0),
    ({"h": None}, 0),
    ({"h": [7, "a"]}, 2),
    ({"h": {"k": "v", "n": 2}}, 1),
    ({"h": []}, 0),
]


def test_hash_header(channel, unique):
    """The header's typed value is hashed; a message without it hashes like every other one without it."""
    x, queues = ring(channel, unique, ("1", "1", "1", "1"), **{"hash-header": "h"})
    for headers, expected in HEADER_CASES:
        for key in ("a", "b"):
            props = pika.BasicProperties(headers=headers)
            assert landing(channel, x, queues, key, props) == expected, headers


@pytest.mark.parametrize(
    ("prop", "values"),
    [
        ("message_id", [(None, 1), ("x1", 0), ("hello world", 1)]),
        ("correlation_id", [(None, 1), ("x1", 0), ("hello world", 1)]),
        ("timestamp", [(None, 1), (1234567, 0), (99, 2)]),
    ],
)
def test_hash_property(channel, unique, prop, values):
    x, queues = ring(channel, unique, ("1", "1", "1", "1"), **{"hash-property": prop})
    for value, expected in values:
        props = pika.BasicProperties(**({prop: value} if value is not None else {}))
        assert landing(channel, x, queues, "a", props) == landing(channel, x, queues, "b", props) == expected


def test_a_destination_bound_twice_keeps_its_first_weight(channel, unique):
    x, queues = ring(channel, unique, ("1", "1", "1", "1"))
    channel.queue_bind(queues[0], x, "5")  # a binding, but the queue is on the ring once
    assert publish_all(channel, x, queues, KEYS[:400]) == [100, 94, 110, 96]  # as with one binding


def test_deleting_a_queue_takes_it_off_the_ring(channel, unique):
    x, queues = ring(channel, unique, ("1", "1", "1", "1"))
    channel.queue_delete(queues[1])
    rest = [queues[0], queues[2], queues[3]]
    got = publish_all(channel, x, rest, KEYS[:300])
    assert all(c > 60 for c in got), got


def test_no_binding_returns_a_mandatory_message(channel, unique):
    x = unique("chx")
    channel.exchange_declare(x, CH)
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish(x, "k", b"", mandatory=True)


def test_exchange_to_exchange(channel, unique):
    """A consistent-hash exchange may be bound to, and bind, other exchanges (weights there too)."""
    x, queues = ring(channel, unique, ("1", "1"))
    front, fan = unique("topic"), unique("fan")
    channel.exchange_declare(front, "topic")
    channel.exchange_bind(x, front, "#")
    channel.exchange_declare(fan, "fanout")
    spare = unique("spare")
    channel.queue_declare(spare)
    channel.queue_bind(spare, fan)
    channel.exchange_bind(fan, x, "1")  # a third destination: the fanout and what it feeds
    got = publish_all(channel, front, [*queues, spare], KEYS[:300])
    assert all(c > 50 for c in got), got


def test_every_way_in_hashes_alike(broker, channel, unique):
    """A message published over HTTP, and a dead letter routed with its dead-letter routing key, land
    where an AMQP publish with that key lands."""
    x, queues = ring(channel, unique, ("1", "1", "1", "1"))
    body = {"properties": {}, "routing_key": "orders-42", "payload": "p", "payload_encoding": "string"}
    path = f"/api/exchanges/{q(broker.vhost)}/{q(x)}/publish"
    for key in ("orders-42", "orders-43", "k"):
        assert broker.api(path, "POST", {**body, "routing_key": key}) == (200, {"routed": True})
        over_http = poll_until(lambda: [i for i, c in enumerate(counts(channel, queues)) if c])
        for queue in queues:
            channel.queue_purge(queue)
        assert over_http == [landing(channel, x, queues, key)]
    src = unique("src")
    arguments = {"x-dead-letter-exchange": x, "x-dead-letter-routing-key": "orders-42"}
    channel.queue_declare(src, arguments=arguments)
    channel.basic_publish("", src, b"dead")
    method = poll_until(lambda: channel.basic_get(src)[0], what="the message in the source queue")
    channel.basic_reject(method.delivery_tag, requeue=False)
    dead = poll_until(lambda: [i for i, c in enumerate(counts(channel, queues)) if c], what="the dead letter")
    assert dead == [landing(channel, x, queues, "orders-42")]


# ---------------------------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("abc", 'The binding key must be an integer: <<"abc">>'),
        ("", "The binding key must be an integer: <<>>"),
        ("1.5", 'The binding key must be an integer: <<"1.5">>'),
        ("a\x01b", "The binding key must be an integer: <<97,1,98>>"),
        ("0", "The binding key must be greater than 0"),
        ("-1", "The binding key must be greater than 0"),
    ],
)
def test_a_binding_key_that_is_not_a_weight_is_406(broker, connect, unique, channel_error, key, text):
    conn = connect()
    ch = conn.channel()
    x, (queue,) = ring(ch, unique, ("2",))
    channel_error(lambda: ch.queue_bind(queue, x, key), 406, "PRECONDITION_FAILED - " + text)
    ch = conn.channel()  # the connection serves on
    channel_error(lambda: ch.exchange_bind("amq.fanout", x, key), 406, "PRECONDITION_FAILED - " + text)
    ch = conn.channel()
    ch.queue_unbind(queue, x, key)  # unbinding checks nothing
    status, bindings = broker.api(f"/api/exchanges/{q(broker.vhost)}/{q(x)}/bindings/source")
    assert [b["routing_key"] for b in bindings] == ["2"]


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        (
            {"hash-header": "h", "hash-property": "message_id"},
            "hash-header and hash-property are mutually exclusive",
        ),
        ({"hash-property": "app_id"}, "Unsupported property: app_id"),
        ({"hash-property": "é"}, "Unsupported property: é"),
    ],
)
def test_refused_arguments_are_406(connect, unique, channel_error, arguments, text):
    conn = connect()
    x = unique("chx")
    channel_error(
        lambda: conn.channel().exchange_declare(x, CH, arguments=arguments),
        406,
        "PRECONDITION_FAILED - " + text,
    )
    channel_error(
        lambda: conn.channel().exchange_declare(x, passive=True),
        404,
        f"NOT_FOUND - no exchange '{x}' in vhost '/'",
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {"hash-header": 5},
        {"hash-property": 5},
        {"hash-header": True},
        {"hash-header": "h", "hash-property": 1},
    ],
)
def test_an_argument_that_is_not_a_string_closes_the_connection_with_541(
    connect, unique, connection_error, channel_error, arguments
):
    x = unique("chx")
    connection_error(
        lambda: connect().channel().exchange_declare(x, CH, arguments=arguments), 541, "INTERNAL_ERROR"
    )
    ch = connect().channel()  # the broker serves on; the exchange was not made
    channel_error(
        lambda: ch.exchange_declare(x, passive=True), 404, f"NOT_FOUND - no exchange '{x}' in vhost '/'"
    )


def test_redeclare_compares_no_hash_argument(connect, unique, channel_error):
    conn = connect()
    ch = conn.channel()
    x = unique("chx")
    ch.exchange_declare(x, CH, arguments={"hash-header": "h"})
    for arguments in ({}, {"hash-header": "other"}, {"hash-property": "app_id"}, {"hash-header": 5}):
        ch.exchange_declare(x, CH, arguments=arguments)
    channel_error(
        lambda: ch.exchange_declare(x, "direct"),
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{x}' in vhost '/': "
        "received 'direct' but current is ''x-consistent-hash''",
    )


# ---------------------------------------------------------------------------------------------
# management API and definitions
# ---------------------------------------------------------------------------------------------
def test_management_api_lists_the_type_and_its_bindings(broker, channel, unique):
    status, overview = broker.api("/api/overview")
    assert status == 200
    assert {"name": CH, "description": "Consistent Hashing Exchange", "enabled": True} in overview[
        "exchange_types"
    ]
    x, queues = ring(channel, unique, ("3", "1"), **{"hash-header": "h"})
    vh = q(broker.vhost)
    status, exchange = broker.api(f"/api/exchanges/{vh}/{q(x)}")
    assert status == 200
    assert {k: exchange[k] for k in ("name", "type", "durable", "auto_delete", "internal", "arguments")} == {
        "name": x,
        "type": CH,
        "durable": False,
        "auto_delete": False,
        "internal": False,
        "arguments": {"hash-header": "h"},
    }
    status, bindings = broker.api(f"/api/exchanges/{vh}/{q(x)}/bindings/source")
    assert [(b["destination"], b["routing_key"], b["properties_key"]) for b in bindings] == [
        (queues[0], "3", "3"),
        (queues[1], "1", "1"),
    ]


def test_management_api_refusals_are_400(broker, unique):
    vh, x, queue = q(broker.vhost), unique("chx"), unique("q")
    status, body = broker.api(
        f"/api/exchanges/{vh}/{q(x)}", "PUT", {"type": CH, "arguments": {"hash-property": "app_id"}}
    )
    assert (status, body) == (400, {"error": "bad_request", "reason": "Unsupported property: app_id"})
    assert (
        broker.api(f"/api/exchanges/{vh}/{q(x)}", "PUT", {"type": CH, "arguments": {"hash-header": 5}})[0]
        == 400
    )
    assert broker.api(f"/api/exchanges/{vh}/{q(x)}", "PUT", {"type": CH})[0] in (201, 204)
    assert broker.api(f"/api/queues/{vh}/{q(queue)}", "PUT", {})[0] in (201, 204)
    status, body = broker.api(f"/api/bindings/{vh}/e/{q(x)}/q/{q(queue)}", "POST", {"routing_key": "abc"})
    assert (status, body) == (
        400,
        {"error": "bad_request", "reason": 'The binding key must be an integer: <<"abc">>'},
    )
    status, body = broker.api(f"/api/bindings/{vh}/e/{q(x)}/q/{q(queue)}", "POST", {"routing_key": "0"})
    assert (status, body) == (
        400,
        {"error": "bad_request", "reason": "The binding key must be greater than 0"},
    )
    assert broker.api(f"/api/bindings/{vh}/e/{q(x)}/q/{q(queue)}", "POST", {"routing_key": "2"})[0] == 201


@pytest.fixture
def vhost(broker):
    name = f"e2e-chash-{uuid.uuid4().hex[:8]}"
    assert broker.api(f"/api/vhosts/{q(name)}", "PUT", {})[0] in (201, 204)
    yield name
    broker.api(f"/api/vhosts/{q(name)}", "DELETE")


def import_ring(broker: Any, vhost: str) -> list[str]:
    """A durable consistent-hash exchange ``chx`` and four queues weighted 1, 2, 1, 1, imported as
    definitions into ``vhost``; the queue names."""
    queues = [f"q{i}" for i in range(4)]
    body = {
        "exchanges": [
            {
                "name": "chx",
                "type": CH,
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            }
        ],
        "queues": [{"name": n, "durable": True, "auto_delete": False, "arguments": {}} for n in queues],
        "bindings": [
            {
                "source": "chx",
                "destination": n,
                "destination_type": "queue",
                "routing_key": w,
                "arguments": {},
            }
            for n, w in zip(queues, ("1", "2", "1", "1"), strict=True)
        ],
    }
    assert broker.api(f"/api/definitions/{q(vhost)}", "POST", body)[0] in (201, 204)
    return queues


def test_definitions_import_and_export(broker, vhost):
    """RabbitMQ imports bindings concurrently, in no fixed order, so its ring after an import is one
    of several (the keys' shares hold); ottermq's is always the same (the extension test below)."""
    queues = import_ring(broker, vhost)
    conn = pika.BlockingConnection(broker.params(virtual_host=vhost))
    try:
        got = publish_all(conn.channel(), "chx", queues, KEYS)
    finally:
        conn.close()
    for count, share in zip(got, (800, 1600, 800, 800), strict=True):
        assert abs(count - share) <= 0.06 * share, got
    exported = broker.api(f"/api/definitions/{q(vhost)}")[1]
    assert [x for x in exported["exchanges"] if x["name"] == "chx"][0]["type"] == CH
    assert sorted((b["destination"], b["routing_key"]) for b in exported["bindings"]) == [
        ("q0", "1"),
        ("q1", "2"),
        ("q2", "1"),
        ("q3", "1"),
    ]


# ---------------------------------------------------------------------------------------------
# ottermq extensions
# ---------------------------------------------------------------------------------------------
@pytest.mark.extension
def test_placement_does_not_depend_on_the_order_of_bindings(channel, unique):
    """RabbitMQ lays its ring out in binding order (the reversed order moves keys); ottermq's ring is
    sorted by destination, the same whatever the order (and after a restart)."""
    weights = ("1", "2", "1", "1")
    x, queues = ring(channel, unique, weights)
    y = unique("chx")
    channel.exchange_declare(y, CH)
    for queue, weight in reversed(list(zip(queues, weights, strict=True))):
        channel.queue_bind(queue, y, weight)
    first = publish_all(channel, x, queues, KEYS[:1000])
    for queue in queues:
        channel.queue_purge(queue)
    assert publish_all(channel, y, queues, KEYS[:1000]) == first == [187, 405, 195, 213]


@pytest.mark.extension
def test_an_imported_ring_places_keys_as_rabbitmq_bound_in_name_order(broker, vhost):
    queues = import_ring(broker, vhost)
    conn = pika.BlockingConnection(broker.params(virtual_host=vhost))
    try:
        assert publish_all(conn.channel(), "chx", queues, KEYS) == [776, 1636, 788, 800]
    finally:
        conn.close()


@pytest.mark.extension
def test_unbinding_one_of_two_bindings_keeps_the_destination(channel, unique):
    """RabbitMQ drops the destination from its ring until it restarts, though a binding remains;
    ottermq's ring follows the bindings: the other binding's weight counts."""
    x, queues = ring(channel, unique, ("1", "1", "1", "1"))
    channel.queue_bind(queues[0], x, "5")
    channel.queue_unbind(queues[0], x, "1")
    got = publish_all(channel, x, queues, KEYS[:800])
    assert got[0] > 400, got  # weight 5 of 8


@pytest.mark.extension
def test_weights_beyond_what_rabbitmq_can_hold(channel, unique):
    """The plugin keeps a map entry per unit of weight: 10^23 exhausted memory and the node was
    killed. ottermq's ring costs one entry per destination, whatever the weight."""
    x, queues = ring(channel, unique, ("1", "99999999999999999999999"))
    assert publish_all(channel, x, queues, KEYS[:200]) == [0, 200]


@pytest.mark.extension
@pytest.mark.parametrize("crash", [False, True], ids=["restart", "kill-9"])
def test_placement_survives_a_restart(broker_process, crash):
    process = broker_process()
    b = process.start()
    conn = pika.BlockingConnection(b.params())
    ch = conn.channel()
    ch.exchange_declare("chx", CH, durable=True, arguments={"hash-header": "h"})
    queues = [f"q{i}" for i in (3, 0, 2, 1)]  # bound out of name order
    for queue, weight in zip(queues, ("1", "3", "1", "2"), strict=True):
        ch.queue_declare(queue, durable=True)
        ch.queue_bind(queue, "chx", weight)
    queues.sort()
    values = [f"customer-{i}" for i in range(60)]

    def placement(channel: Any) -> list[int]:
        return [
            landing(channel, "chx", queues, "any", pika.BasicProperties(headers={"h": v})) for v in values
        ]

    before = placement(ch)
    conn.close()
    if crash:
        process.kill()
    else:
        assert process.stop() == 0
    b = process.start()
    conn = pika.BlockingConnection(b.params())
    try:
        assert placement(conn.channel()) == before
        assert len(set(before)) == 4
    finally:
        conn.close()


def definitions_body(key: str, arguments: dict[str, Any]) -> dict[str, Any]:
    exchange = {"name": "chx", "type": CH, "durable": True, "auto_delete": False, "internal": False}
    return {
        "exchanges": [{**exchange, "arguments": arguments}],
        "queues": [{"name": "q0", "durable": True, "auto_delete": False, "arguments": {}}],
        "bindings": [
            {
                "source": "chx",
                "destination": "q0",
                "destination_type": "queue",
                "routing_key": key,
                "arguments": {},
            }
        ],
    }


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        (
            {"hash-property": "app_id"},
            "Unsupported property: app_id",
        ),  # RabbitMQ: "precondition_failed: " first
        ({"hash-header": 5}, "{case_clause,{long,5}}"),
    ],
)
def test_definitions_with_refused_arguments_are_400(broker, vhost, arguments, reason):
    status, answer = broker.api(f"/api/definitions/{q(vhost)}", "POST", definitions_body("1", arguments))
    assert (status, answer["error"]) == (400, "bad_request") and answer["reason"].endswith(reason)
    assert broker.api(f"/api/exchanges/{q(vhost)}/chx")[0] == 404


@pytest.mark.extension
@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("abc", 'The binding key must be an integer: <<"abc">>'),
        ("0", "The binding key must be greater than 0"),
    ],
)
def test_definitions_with_a_refused_weight_skip_the_binding(broker, vhost, key, reason):
    """RabbitMQ's import skips a binding it refuses (any binding: a bad x-match as well) and answers 204;
    ottermq skips it too, applies the rest, and names it with the reason (200, docs/definitions.md)."""
    status, answer = broker.api(f"/api/definitions/{q(vhost)}", "POST", definitions_body(key, {}))
    names = {
        "vhost": vhost,
        "source": "chx",
        "destination": "q0",
        "destination_type": "queue",
        "routing_key": key,
    }
    assert (status, answer["skipped"]) == (200, [{"section": "bindings", **names, "reason": reason}])
    assert {k: n for k, n in answer["applied"].items() if n} == {"exchanges": 1, "queues": 1}
    assert broker.api(f"/api/exchanges/{q(vhost)}/chx/bindings/source")[1] == []
