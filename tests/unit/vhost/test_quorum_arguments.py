"""Quorum queues' declare rules and redeclare equivalence: every expected text below is the reply
RabbitMQ 3.10.8 sent to pika for the same declare (minus the ``PRECONDITION_FAILED - `` prefix); the
orders were found by declaring every pair of invalid values in both table orders
(``e2e/test_quorum_queues.py`` keeps cases of each rule against both brokers).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from ottermq.amqp.errors import PreconditionFailed
from ottermq.vhost.arguments import (
    NEVER,
    QUORUM_EQUIVALENCE_KEYS,
    check_args_equivalence,
    check_server_named,
    parse_queue_args,
    queue_type_of,
)
from ottermq.vhost.quorum import QUORUM

Q = {"x-queue-type": "quorum"}


def _invalid(key: str, term: str) -> str:
    return f"invalid arg '{key}' for queue 'q' in vhost '/': {term}"


def _not_quorum(key: str) -> str:
    return f"invalid arg '{key}' for queue 'q' in vhost '/' of queue type rabbit_quorum_queue"


def _ineq(key: str, rest: str) -> str:
    return f"inequivalent arg '{key}' for queue 'q' in vhost '/': {rest}"


# (arguments besides x-queue-type: quorum, expected error text or None when RabbitMQ accepts them)
DECLARE_CASES: list[tuple[dict[str, Any], str | None]] = [
    # a classic queue's and a stream's own arguments
    ({"x-max-priority": 5}, _not_quorum("x-max-priority")),
    ({"x-queue-mode": "lazy"}, _not_quorum("x-queue-mode")),
    ({"x-queue-version": 2}, _not_quorum("x-queue-version")),
    ({"x-queue-master-locator": "min-masters"}, _not_quorum("x-queue-master-locator")),
    ({"x-max-age": "1D"}, _not_quorum("x-max-age")),
    ({"x-stream-max-segment-size-bytes": 1000}, _not_quorum("x-stream-max-segment-size-bytes")),
    ({"x-initial-cluster-size": 1}, _not_quorum("x-initial-cluster-size")),
    # a quorum queue's own
    ({"x-queue-leader-locator": "client-local"}, None),
    ({"x-queue-leader-locator": "balanced"}, None),
    ({"x-queue-leader-locator": "foo"}, _invalid("x-queue-leader-locator", "invalid_queue_locator_arg")),
    ({"x-queue-leader-locator": 1}, _invalid("x-queue-leader-locator", "{unacceptable_type,signedint}")),
    ({"x-max-in-memory-length": 10}, None),
    ({"x-max-in-memory-bytes": 10}, None),
    ({"x-max-in-memory-length": -1}, _invalid("x-max-in-memory-length", "{value_negative,-1}")),
    ({"x-max-in-memory-bytes": "1"}, _invalid("x-max-in-memory-bytes", '"expected integer, got longstr"')),
    ({"x-single-active-consumer": True}, None),
    ({"x-single-active-consumer": 1}, _invalid("x-single-active-consumer", "{unacceptable_type,signedint}")),
    ({"x-overflow": "drop-head"}, None),
    ({"x-overflow": "reject-publish"}, None),
    ({"x-overflow": "reject-publish-dlx"}, None),
    ({"x-overflow": "bogus"}, _invalid("x-overflow", "invalid_overflow")),
    ({"x-dead-letter-strategy": "at-most-once"}, None),
    ({"x-dead-letter-strategy": "at-least-once"}, None),
    ({"x-dead-letter-strategy": "bogus"}, _invalid("x-dead-letter-strategy", "invalid_dlx_strategy")),
    ({"x-dead-letter-strategy": 1}, _invalid("x-dead-letter-strategy", "{unacceptable_type,signedint}")),
    ({"x-delivery-limit": -1}, None),
    ({"x-delivery-limit": 0}, None),
    ({"x-delivery-limit": "5"}, None),
    ({"x-quorum-initial-group-size": 5}, None),
    ({"x-quorum-initial-group-size": 0}, _invalid("x-quorum-initial-group-size", "{value_zero,0}")),
    ({"x-quorum-initial-group-size": -1}, _invalid("x-quorum-initial-group-size", "{value_negative,-1}")),
    (
        {"x-quorum-initial-group-size": "3"},
        _invalid("x-quorum-initial-group-size", '"expected integer, got longstr"'),
    ),
    ({"x-message-ttl": 0}, None),
    ({"x-message-ttl": -1}, _invalid("x-message-ttl", "{value_negative,-1}")),
    ({"x-expires": 10000}, None),
    ({"x-expires": 0}, _invalid("x-expires", "{value_zero,0}")),
    ({"x-max-length": -1}, _invalid("x-max-length", "{value_negative,-1}")),
    ({"x-max-length-bytes": "x"}, _invalid("x-max-length-bytes", '"expected integer, got longstr"')),
    (
        {"x-dead-letter-exchange": 1},
        "invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'",
    ),
    (
        {"x-dead-letter-routing-key": "k"},
        _invalid("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined"),
    ),
    # unknown arguments (ottermq's extensions among them) are accepted, as RabbitMQ does
    ({"x-foo": 1}, None),
    ({"x-ottermq-exact-ttl": True}, None),
    ({"x-consumer-timeout": 1000}, None),
    ({"x-message-deduplication": True}, None),
    ({"x-delayed-retry-type": "all"}, None),
    # first failure wins: value checks before the arguments of other types, in declare_args order
    ({"x-max-priority": 5, "x-queue-mode": "lazy"}, _not_quorum("x-max-priority")),
    ({"x-queue-mode": "lazy", "x-max-priority": 5}, _not_quorum("x-queue-mode")),
    ({"x-max-priority": 5, "x-max-length": -1}, _invalid("x-max-length", "{value_negative,-1}")),
    (
        {"x-max-priority": 5, "x-dead-letter-exchange": 1},
        "invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'",
    ),
    (
        {"x-dead-letter-strategy": "bogus", "x-max-priority": 5},
        _invalid("x-dead-letter-strategy", "invalid_dlx_strategy"),
    ),
    ({"x-delivery-limit": -1, "x-max-length": -1}, _invalid("x-max-length", "{value_negative,-1}")),
]


@pytest.mark.parametrize(("arguments", "text"), DECLARE_CASES)
def test_declare_validation_like_rabbitmq(arguments: dict[str, Any], text: str | None) -> None:
    if text is None:
        assert parse_queue_args({**Q, **arguments}, "q").queue_type == "quorum"
        return
    with pytest.raises(PreconditionFailed) as info:
        parse_queue_args({**Q, **arguments}, "q")
    assert info.value.text == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("QUORUM", "\"unsupported queue type 'QUORUM'\""),
        (1, "{unacceptable_type,signedint}"),
        (b"quorum", "{unacceptable_type,binary}"),
    ],
)
def test_the_type_is_a_longstr_spelled_exactly(value: object, text: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        parse_queue_args({"x-queue-type": value}, "q")
    assert info.value.text == _invalid("x-queue-type", text)


# Every invalid value, in the order RabbitMQ 3.10.8 reports them (each pair, both table orders)
DECLARE_ORDER = [
    ("x-expires", 0),
    ("x-message-ttl", -1),
    ("x-dead-letter-routing-key", 1),
    ("x-dead-letter-strategy", "bogus"),
    ("x-max-length", -1),
    ("x-max-length-bytes", -1),
    ("x-max-in-memory-length", -1),
    ("x-max-in-memory-bytes", -1),
    ("x-overflow", "bogus"),
    ("x-single-active-consumer", 1),
    ("x-quorum-initial-group-size", 0),
    ("x-queue-leader-locator", "bogus"),
]


@pytest.mark.parametrize(("first", "second"), list(itertools.combinations(DECLARE_ORDER, 2)), ids=str)
def test_declare_check_order(first: tuple[str, object], second: tuple[str, object]) -> None:
    for pair in ([first, second], [second, first]):
        table = {**Q, "x-dead-letter-exchange": "dlx", **dict(pair)}
        with pytest.raises(PreconditionFailed) as info:
            parse_queue_args(table, "q")
        assert f"'{first[0]}'" in info.value.text


@pytest.mark.parametrize(
    ("durable", "exclusive", "auto_delete", "prop"),
    [
        (False, False, False, "non-durable"),
        (True, True, False, "exclusive-owner"),
        (True, False, True, "auto-delete"),
        (False, True, True, "auto-delete"),
        (True, True, True, "auto-delete"),
        (False, True, False, "exclusive-owner"),
        (False, False, True, "auto-delete"),
    ],
)
def test_flags_in_rabbitmqs_order(durable: bool, exclusive: bool, auto_delete: bool, prop: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        QUORUM.check_properties("q", durable, exclusive, auto_delete)
    assert info.value.text == f"invalid property '{prop}' for queue 'q' in vhost '/'"
    QUORUM.check_properties("q", True, False, False)


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        (Q, "Cannot declare a server-named queue for type rabbit_quorum_queue"),
        ({"x-queue-type": "stream"}, "Cannot declare a server-named queue for type rabbit_stream_queue"),
        (None, None),
        ({"x-queue-type": "classic"}, None),
        ({"x-queue-type": "bogus"}, None),  # RabbitMQ: 541 INTERNAL_ERROR; here the declare refuses the type
        ({"x-queue-type": 1}, None),
    ],
)
def test_server_named_queues_are_classic(arguments: dict[str, Any] | None, text: str | None) -> None:
    if text is None:
        check_server_named(arguments)
        return
    with pytest.raises(PreconditionFailed) as info:
        check_server_named(arguments)
    assert info.value.text == text


def test_queue_type_of() -> None:
    assert queue_type_of(None) == queue_type_of({}) == "classic"
    assert queue_type_of(Q) == "quorum"
    assert queue_type_of({"x-queue-type": 1}) is None


@pytest.mark.parametrize(
    ("value", "limit"),
    [
        (3, 3),
        (0, 0),
        (-1, -1),
        (2.5, 2),
        (2.0, 2),
        ("5", NEVER),
        (True, NEVER),
        (None, NEVER),
        (float("inf"), NEVER),
    ],
)
def test_delivery_limit_is_compared_as_rabbitmq_compares_it(value: object, limit: int) -> None:
    """A return is over the limit when ``count > limit`` in Erlang's term order: numbers compare as
    numbers, any other term is above every number."""
    assert parse_queue_args({**Q, "x-delivery-limit": value}, "q").delivery_limit == limit


def test_parsed_quorum_args() -> None:
    args = parse_queue_args(
        {**Q, "x-max-length": 5, "x-overflow": "reject-publish", "x-dead-letter-strategy": "at-least-once"},
        "q",
    )
    assert (args.queue_type, args.max_length, args.overflow, args.delivery_limit) == (
        "quorum",
        5,
        "reject-publish",
        None,
    )


# (existing quorum queue's arguments, redeclared ones, expected text or None)
EQUIV_CASES: list[tuple[dict[str, Any], dict[str, Any], str | None]] = [
    ({}, {}, _ineq("x-queue-type", "received none but current is the value 'quorum' of type 'longstr'")),
    ({}, {"x-queue-type": "classic"}, _ineq("x-queue-type", "received 'classic' but current is 'quorum'")),
    ({}, {"x-queue-type": "stream"}, _ineq("x-queue-type", "received 'stream' but current is 'quorum'")),
    ({}, Q, None),
    ({}, {**Q, "x-max-priority": 3}, None),  # not a quorum queue's argument: not compared
    ({}, {**Q, "x-foo": 1}, None),
    (
        {},
        {**Q, "x-delivery-limit": 3},
        _ineq("x-delivery-limit", "received the value '3' of type 'signedint' but current is none"),
    ),
    (
        {},
        {**Q, "x-dead-letter-strategy": "at-least-once"},
        _ineq(
            "x-dead-letter-strategy",
            "received the value 'at-least-once' of type 'longstr' but current is none",
        ),
    ),
    (
        {},
        {**Q, "x-quorum-initial-group-size": 3},
        _ineq(
            "x-quorum-initial-group-size", "received the value '3' of type 'signedint' but current is none"
        ),
    ),
    (
        {},
        {**Q, "x-max-in-memory-length": 3},
        _ineq("x-max-in-memory-length", "received the value '3' of type 'signedint' but current is none"),
    ),
    (
        {},
        {**Q, "x-queue-leader-locator": "balanced"},
        _ineq(
            "x-queue-leader-locator", "received the value 'balanced' of type 'longstr' but current is none"
        ),
    ),
    (
        {},
        {**Q, "x-max-length": -1},
        _ineq("x-max-length", "received the value '-1' of type 'signedint' but current is none"),
    ),
    (
        {},
        {**Q, "x-dead-letter-exchange": 1},
        _ineq("x-dead-letter-exchange", "received the value '1' of type 'signedint' but current is none"),
    ),
    (
        {},
        {**Q, "x-single-active-consumer": True},
        _ineq("x-single-active-consumer", "received the value 'true' of type 'bool' but current is none"),
    ),
    (
        {"x-delivery-limit": 2, "x-max-length": 5},
        {**Q, "x-delivery-limit": 3, "x-max-length": 5},
        _ineq("x-delivery-limit", "received '3' but current is '2'"),
    ),
    (
        {"x-delivery-limit": 2, "x-max-length": 5},
        {**Q, "x-delivery-limit": 2**40, "x-max-length": 5},
        _ineq("x-delivery-limit", "received '1099511627776' but current is '2'"),
    ),
    (
        {"x-delivery-limit": 2, "x-max-length": 5},
        {**Q, "x-max-length": 5},
        _ineq("x-delivery-limit", "received none but current is the value '2' of type 'signedint'"),
    ),
    (
        {"x-delivery-limit": 2, "x-max-length": 5},
        {**Q, "x-delivery-limit": 2, "x-max-length": 6},
        _ineq("x-max-length", "received '6' but current is '5'"),
    ),
    (
        {"x-delivery-limit": 2, "x-max-length": 5},
        {**Q, "x-delivery-limit": 2},
        _ineq("x-max-length", "received none but current is the value '5' of type 'signedint'"),
    ),
]


@pytest.mark.parametrize(("existing", "new", "text"), EQUIV_CASES)
def test_redeclare_equivalence_like_rabbitmq(
    existing: dict[str, Any], new: dict[str, Any], text: str | None
) -> None:
    current = {**Q, **existing}
    if text is None:
        check_args_equivalence(current, new, "q", queue_type="quorum")
        return
    with pytest.raises(PreconditionFailed) as info:
        check_args_equivalence(current, new, "q", queue_type="quorum")
    assert info.value.text == text


def test_a_classic_queue_redeclared_as_quorum() -> None:
    with pytest.raises(PreconditionFailed) as info:
        check_args_equivalence({}, Q, "q")
    assert info.value.text == _ineq(
        "x-queue-type", "received the value 'quorum' of type 'longstr' but current is none"
    )


def test_equivalence_key_order() -> None:
    """The first key of ``rabbit_quorum_queue``'s argument list that differs is reported."""
    values = {key: f"v{i}" for i, key in enumerate(QUORUM_EQUIVALENCE_KEYS) if key != "x-queue-type"}
    for first, second in itertools.combinations(values, 2):
        with pytest.raises(PreconditionFailed) as info:
            check_args_equivalence(
                Q, {**Q, second: values[second], first: values[first]}, "q", queue_type="quorum"
            )
        assert f"'{first}'" in info.value.text
