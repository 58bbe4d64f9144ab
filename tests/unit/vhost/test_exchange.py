"""Exchanges: binding bookkeeping, routing per type, declare/redeclare errors. Every error text was
read back from RabbitMQ 3.10.8 with pika."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from ottermq.amqp.errors import CommandInvalid, PreconditionFailed
from ottermq.vhost.exchange import (
    EXCHANGE_TYPES,
    DirectExchange,
    Exchange,
    FanoutExchange,
    HeadersExchange,
    TopicExchange,
    check_exchange_type,
    equivalent,
    make_exchange,
)

# installed (compiled by mypyc) and pure-Python modules, the same expectations (tests/conftest.py)
pytestmark = pytest.mark.hot_path

Q1, Q2, Q3 = ("queue", "q1"), ("queue", "q2"), ("queue", "q3")
X1 = ("exchange", "x1")


@pytest.mark.parametrize(
    ("type_", "cls"),
    [
        ("direct", DirectExchange),
        ("fanout", FanoutExchange),
        ("topic", TopicExchange),
        ("headers", HeadersExchange),
    ],
)
def test_make_exchange(type_: str, cls: type[Exchange]) -> None:
    exchange = make_exchange("x", type_, durable=True, auto_delete=True, internal=True, arguments={"a": 1})
    assert type(exchange) is cls
    assert (exchange.name, exchange.type, exchange.durable, exchange.auto_delete, exchange.internal) == (
        "x",
        type_,
        True,
        True,
        True,
    )
    assert exchange.arguments == {"a": 1}
    assert exchange.alternate_exchange is None
    assert exchange.bindings == 0 and not exchange.has_bindings()
    assert not hasattr(exchange, "__dict__")


# the types whose binding keys are free text (x-consistent-hash's are weights: test_chash.py)
KEYED_TYPES = [t for t in EXCHANGE_TYPES if t != "x-consistent-hash"]
# the plugins' types need arguments of their own
TYPE_ARGS = {
    "x-delayed-message": {"x-delayed-type": "direct"},
    "x-message-deduplication": {"x-cache-size": 10},
}


def test_exchange_types() -> None:
    assert EXCHANGE_TYPES == (
        "direct",
        "fanout",
        "topic",
        "headers",
        "x-delayed-message",
        "x-message-deduplication",
        "x-consistent-hash",
    )


def test_alternate_exchange() -> None:
    assert make_exchange("x", "direct", arguments={"alternate-exchange": "ae"}).alternate_exchange == "ae"
    assert make_exchange("x", "direct", arguments={"alternate-exchange": ""}).alternate_exchange == ""
    assert make_exchange("x", "fanout", arguments={"alternate-exchange": "x"}).alternate_exchange == "x"


@pytest.mark.parametrize(
    ("value", "type_name"), [(5, "signedint"), (b"ae", "binary"), (None, "void"), (True, "bool")]
)
def test_alternate_exchange_type_checked_on_create(value: object, type_name: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        make_exchange("probe-x", "direct", arguments={"alternate-exchange": value}, vhost="v")
    assert (
        info.value.text
        == f"invalid type '{type_name}' for arg 'alternate-exchange' in exchange 'probe-x' in vhost 'v'"
    )


@pytest.mark.parametrize(
    ("type_", "text"),
    [
        ("foo", "invalid exchange type 'foo'"),
        ("", "invalid exchange type ''"),
        ("bar", "invalid exchange type 'bar'"),
        ("x-delayed-messages", "unknown exchange type 'x-delayed-messages'"),
        ("x-recent-history", "unknown exchange type 'x-recent-history'"),
        ("x-random", "unknown exchange type 'x-random'"),
        ("DIRECT", "unknown exchange type 'DIRECT'"),
        ("Topic", "unknown exchange type 'Topic'"),
        ("baz", "unknown exchange type 'baz'"),
        ("é", "unknown exchange type 'é'"),
    ],
)
def test_unknown_exchange_type(type_: str, text: str) -> None:
    for call in (
        lambda: check_exchange_type(type_),
        lambda: make_exchange("x", type_),
        lambda: equivalent(make_exchange("x", "direct"), type_, False, False, False, {}),
    ):
        with pytest.raises(CommandInvalid) as info:
            call()
        assert info.value.text == text
        assert info.value.reply_code == 503


# ---------------------------------------------------------------------------------------------
# bindings
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("type_", KEYED_TYPES)
def test_binding_identity(type_: str) -> None:
    x = make_exchange("x", type_, arguments=TYPE_ARGS.get(type_))
    assert x.bind("k", Q1, {})
    assert not x.bind("k", Q1, {})
    assert not x.bind("k", Q1, None)  # None and {} are the same (empty) table
    assert x.bind("k", Q2, {})
    assert x.bind("k2", Q1, {})
    assert x.bind("k", Q1, {"a": 1, "b": "x"})
    assert not x.bind("k", Q1, {"b": "x", "a": 1})  # top-level key order does not matter
    assert x.bind("k", Q1, {"a": True, "b": "x"})  # but value kinds do
    assert x.bind("k", Q1, {"a": "1", "b": "x"})
    assert x.bind("k", Q1, {"a": 1.0, "b": "x"})
    assert x.bind("k", Q1, {"a": b"1", "b": "x"})
    assert x.bindings == 8
    assert x.unbind("k", Q1, {"a": 1, "b": "x"})
    assert not x.unbind("k", Q1, {"a": 1, "b": "x"})
    assert not x.unbind("nope", Q1, {})
    assert not x.unbind("k", Q3, {})
    assert x.bindings == 7


@pytest.mark.parametrize("type_", KEYED_TYPES)
def test_binding_listing_and_removal(type_: str) -> None:
    x = make_exchange("x", type_, arguments=TYPE_ARGS.get(type_))
    x.bind("a", Q1, {})
    x.bind("b", Q2, {"x-match": "any"})
    x.bind("c", Q1, {"z": [1, {"k": None}]})
    x.bind("d", X1, {})
    assert x.bindings_list() == [
        ("a", Q1, {}),
        ("b", Q2, {"x-match": "any"}),
        ("c", Q1, {"z": [1, {"k": None}]}),
        ("d", X1, {}),
    ]
    assert x.destinations() == {Q1, Q2, X1}
    assert x.remove_destination(Q1) == 2
    assert x.remove_destination(Q1) == 0
    assert x.remove_destination(Q3) == 0
    assert x.destinations() == {Q2, X1}
    assert x.remove_destination(Q2) == 1 and x.remove_destination(X1) == 1
    assert not x.has_bindings() and x.bindings == 0
    assert x.route("a", {}) == set()


def test_bytearray_and_nested_arguments_are_hashable() -> None:
    x = make_exchange("x", "direct")
    assert x.bind("k", Q1, {"a": bytearray(b"1"), "t": {"n": [1, 2]}})
    assert not x.bind("k", Q1, {"t": {"n": [1, 2]}, "a": bytearray(b"1")})


# ---------------------------------------------------------------------------------------------
# routing
# ---------------------------------------------------------------------------------------------
def test_direct_routing() -> None:
    x = make_exchange("x", "direct")
    x.bind("k", Q1, {})
    x.bind("k", Q2, {})
    x.bind("other", Q3, {})
    x.bind("", X1, {})
    assert x.route("k", None) == {Q1, Q2}
    assert x.route("k", None) is x.route("k", None)  # a lookup, no allocation
    assert x.route("", None) == {X1}
    assert x.route("K", None) == set()
    assert x.route("missing", None) is x.route("also missing", None)


def test_direct_duplicate_bindings_are_counted() -> None:
    x = make_exchange("x", "direct")
    x.bind("k", Q1, {})
    x.bind("k", Q1, {"a": 1})
    x.unbind("k", Q1, {})
    assert x.route("k", None) == {Q1}
    x.unbind("k", Q1, {"a": 1})
    assert x.route("k", None) == set()


def test_fanout_routing() -> None:
    x = make_exchange("x", "fanout")
    assert x.route("k", None) == set()
    x.bind("", Q1, {})
    x.bind("ignored", Q2, {})
    x.bind("also", Q1, {})
    assert x.route("anything", None) == {Q1, Q2}
    assert x.route("a", None) is x.route("b", None)
    x.unbind("", Q1, {})
    assert x.route("k", None) == {Q1, Q2}  # still bound with key "also"
    x.unbind("also", Q1, {})
    assert x.route("k", None) == {Q2}


def test_topic_routing_and_cache_invalidation() -> None:
    x = make_exchange("x", "topic")
    assert x.route("a.b", None) == set()
    x.bind("a.*", Q1, {})
    x.bind("#", Q2, {})
    assert x.route("a.b", None) == {Q1, Q2}
    assert x.route("a.b", None) is x.route("a.b", None)  # cached
    assert x.route("a", None) == {Q2}
    x.bind("a.b", Q3, {})
    assert x.route("a.b", None) == {Q1, Q2, Q3}
    x.unbind("#", Q2, {})
    assert x.route("a.b", None) == {Q1, Q3}
    x.bind("a.*", Q1, {"dup": 1})
    x.unbind("a.*", Q1, {})
    assert x.route("a.z", None) == {Q1}
    assert x.remove_destination(Q1) == 1
    assert x.route("a.z", None) == set()


def test_topic_cache_is_bounded() -> None:
    x = make_exchange("x", "topic")
    assert isinstance(x, TopicExchange)
    x.bind("#", Q1, {})
    for i in range(TopicExchange.CACHE_SIZE * 2 + 5):
        assert x.route(f"k{i}", None) == {Q1}
    assert len(x._cache) <= TopicExchange.CACHE_SIZE


def test_headers_routing() -> None:
    x = make_exchange("x", "headers")
    x.bind("", Q1, {"x-match": "all", "a": 1, "b": "x"})
    x.bind("", Q2, {"x-match": "any", "a": 1, "b": "x"})
    x.bind("", Q3, {})
    x.bind("", Q2, {"c": None})
    assert x.route("", {"a": 1, "b": "x"}) == {Q1, Q2, Q3}
    assert x.route("", {"a": 1}) == {Q2, Q3}
    assert x.route("", {"c": 5}) == {Q2, Q3}
    assert x.route("", None) == {Q3}
    x.unbind("", Q3, {})
    assert x.route("", {"z": 1}) == set()
    x.unbind("", Q2, {"x-match": "any", "a": 1, "b": "x"})
    assert x.route("", {"a": 1}) == set()
    assert x.route("", {"c": 1}) == {Q2}


def test_headers_bind_validates_x_match() -> None:
    x = make_exchange("x", "headers")
    with pytest.raises(PreconditionFailed) as info:
        x.bind("", Q1, {"x-match": "foo"})
    assert (
        info.value.text
        == 'Invalid x-match field value <<"foo">>; expected all, any, all-with-x, or any-with-x'
    )
    assert not x.has_bindings()
    assert not x.unbind("", Q1, {"x-match": "foo"})  # unbind does not validate (RabbitMQ: unbind-ok)


def test_other_types_do_not_validate_x_match() -> None:
    for type_ in ("direct", "fanout", "topic"):
        assert make_exchange("x", type_).bind("", Q1, {"x-match": "foo"})


# ---------------------------------------------------------------------------------------------
# redeclare equivalence
# ---------------------------------------------------------------------------------------------
def _x(**kw: Any) -> Exchange:
    kw.setdefault("type", "direct")
    return make_exchange("probe-x", **kw)


def _ineq(what: str, rest: str) -> str:
    return f"inequivalent arg '{what}' for exchange 'probe-x' in vhost '/': {rest}"


# (existing, redeclared (type, durable, auto_delete, internal, arguments), expected text or None)
EQUIV_CASES: list[tuple[dict[str, Any], tuple[str, bool, bool, bool, dict[str, Any]], str | None]] = [
    ({}, ("direct", False, False, False, {}), None),
    ({}, ("fanout", False, False, False, {}), _ineq("type", "received 'fanout' but current is 'direct'")),
    (
        {"type": "topic"},
        ("headers", False, False, False, {}),
        _ineq("type", "received 'headers' but current is 'topic'"),
    ),
    ({}, ("direct", True, False, False, {}), _ineq("durable", "received 'true' but current is 'false'")),
    (
        {"durable": True},
        ("direct", False, False, False, {}),
        _ineq("durable", "received 'false' but current is 'true'"),
    ),
    ({}, ("direct", False, True, False, {}), _ineq("auto_delete", "received 'true' but current is 'false'")),
    ({}, ("direct", False, False, True, {}), _ineq("internal", "received 'true' but current is 'false'")),
    (
        {"internal": True},
        ("direct", False, False, False, {}),
        _ineq("internal", "received 'false' but current is 'true'"),
    ),
    (
        {},
        ("fanout", True, True, True, {"alternate-exchange": "ae"}),
        _ineq("type", "received 'fanout' but current is 'direct'"),
    ),
    ({}, ("direct", True, True, True, {}), _ineq("durable", "received 'true' but current is 'false'")),
    ({}, ("direct", False, True, True, {}), _ineq("auto_delete", "received 'true' but current is 'false'")),
    (
        {},
        ("direct", False, False, False, {"alternate-exchange": "ae"}),
        _ineq("alternate-exchange", "received the value 'ae' of type 'longstr' but current is none"),
    ),
    (
        {"arguments": {"alternate-exchange": "ae"}},
        ("direct", False, False, False, {}),
        _ineq("alternate-exchange", "received none but current is the value 'ae' of type 'longstr'"),
    ),
    (
        {"arguments": {"alternate-exchange": "ae"}},
        ("direct", False, False, False, {"alternate-exchange": "ae2"}),
        _ineq("alternate-exchange", "received 'ae2' but current is 'ae'"),
    ),
    (
        {"arguments": {"alternate-exchange": "ae"}},
        ("direct", False, False, False, {"alternate-exchange": "ae"}),
        None,
    ),
    (
        {"arguments": {"alternate-exchange": "ae"}},
        ("direct", False, False, False, {"alternate-exchange": b"ae"}),
        None,
    ),
    (
        {},
        ("direct", False, False, False, {"alternate-exchange": 5}),
        _ineq("alternate-exchange", "received the value '5' of type 'signedint' but current is none"),
    ),
    ({"arguments": {"x-foo": 1}}, ("direct", False, False, False, {"x-foo": 2}), None),
    ({}, ("direct", False, False, False, {"x-foo": 2}), None),
    ({"type": "headers"}, ("headers", False, False, False, {"x-match": "any"}), None),
    (
        {"type": "topic"},
        ("topic", False, False, False, {"alternate-exchange": "ae"}),
        _ineq("alternate-exchange", "received the value 'ae' of type 'longstr' but current is none"),
    ),
]


@pytest.mark.parametrize(("existing", "declared", "text"), EQUIV_CASES)
def test_equivalence_like_rabbitmq(
    existing: dict[str, Any], declared: tuple[str, bool, bool, bool, dict[str, Any]], text: str | None
) -> None:
    x = _x(**existing)
    if text is None:
        equivalent(x, *declared)
        return
    with pytest.raises(PreconditionFailed) as info:
        equivalent(x, *declared)
    assert info.value.text == text


def test_equivalence_vhost_in_text() -> None:
    x = make_exchange("e", "direct", vhost="prod")
    with pytest.raises(PreconditionFailed) as info:
        equivalent(x, "fanout", False, False, False, None)
    assert info.value.text == (
        "inequivalent arg 'type' for exchange 'e' in vhost 'prod': received 'fanout' but current is 'direct'"
    )
    with pytest.raises(PreconditionFailed) as info:
        equivalent(x, "fanout", False, False, False, None, vhost="other")
    assert "in vhost 'other'" in info.value.text


class Long(int):
    tag: ClassVar[bytes] = b"I"


class LongLong(int):
    tag: ClassVar[bytes] = b"l"


def test_binding_identity_uses_wire_types() -> None:
    x = make_exchange("x", "headers")
    assert x.bind("", Q1, {"a": Long(1)})
    assert not x.bind("", Q1, {"a": 1})  # a plain int is a signedint, like Long
    assert x.bind("", Q1, {"a": LongLong(1)})  # RabbitMQ keeps {long,1} and {signedint,1} apart
    assert x.route("", {"a": LongLong(1)}) == {Q1}
