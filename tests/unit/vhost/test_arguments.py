"""Queue/exchange argument validation and equivalence: every expected text below is the reply
RabbitMQ 3.10.8 sent to pika for the same declare (minus the ``PRECONDITION_FAILED - `` prefix).

Values are written as they arrive decoded; where RabbitMQ names a wire type that a decoded value
cannot show (``unsignedbyte``, ``float``, ...) the case passes it through ``types``.
"""

from __future__ import annotations

import datetime
import itertools
from decimal import Decimal
from typing import Any, ClassVar

import pytest
from ottermq.amqp.errors import PreconditionFailed
from ottermq.vhost.arguments import (
    EQUIVALENCE_KEYS,
    MAX_EXPIRY,
    QueueArgs,
    amqp_type_name,
    check_args_equivalence,
    check_flag_equivalence,
    erl_binary,
    erl_equal,
    erl_term,
    parse_exchange_args,
    parse_queue_args,
)

TS = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)


def _invalid(key: str, term: str) -> str:
    return f"invalid arg '{key}' for queue 'q' in vhost '/': {term}"


def _other_type(key: str) -> str:
    return f"invalid arg '{key}' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"


def _dlx_type(type_name: str) -> str:
    return f"invalid type '{type_name}' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'"


TTL = "x-message-ttl"
EXP = "x-expires"

# (arguments, types, expected error text or None when RabbitMQ accepts the declare)
DECLARE_CASES: list[tuple[dict[str, Any], dict[str, str] | None, str | None]] = [
    ({TTL: -1}, None, _invalid(TTL, "{value_negative,-1}")),
    ({TTL: "1000"}, None, _invalid(TTL, '"expected integer, got longstr"')),
    ({TTL: True}, None, _invalid(TTL, '"expected integer, got bool"')),
    ({TTL: 1.5}, None, _invalid(TTL, '"expected integer, got double"')),
    ({TTL: 1.0}, {TTL: "float"}, _invalid(TTL, '"expected integer, got float"')),
    ({TTL: Decimal("1.5")}, None, _invalid(TTL, '"expected integer, got decimal"')),
    ({TTL: Decimal("15")}, None, _invalid(TTL, '"expected integer, got decimal"')),
    ({TTL: TS}, None, _invalid(TTL, '"expected integer, got timestamp"')),
    ({TTL: b"1000"}, None, _invalid(TTL, '"expected integer, got binary"')),
    ({TTL: None}, None, _invalid(TTL, '"expected integer, got void"')),
    ({TTL: {"a": 1}}, None, _invalid(TTL, '"expected integer, got table"')),
    ({TTL: [1]}, None, _invalid(TTL, '"expected integer, got array"')),
    ({TTL: 2**40}, None, _invalid(TTL, "{value_too_large,1099511627776}")),
    ({TTL: 2**63 - 1}, None, _invalid(TTL, "{value_too_large,9223372036854775807}")),
    ({TTL: 315360000001}, None, _invalid(TTL, "{value_too_large,315360000001}")),
    ({TTL: -5}, {TTL: "byte"}, _invalid(TTL, "{value_negative,-5}")),
    ({TTL: 315360000000}, None, None),
    ({TTL: 4294967296}, None, None),
    ({TTL: 0}, None, None),
    ({TTL: 5}, {TTL: "unsignedbyte"}, None),
    ({TTL: 5}, {TTL: "short"}, None),
    ({TTL: 5}, {TTL: "unsignedint"}, None),
    ({EXP: 0}, None, _invalid(EXP, "{value_zero,0}")),
    ({EXP: -1}, None, _invalid(EXP, "{value_negative,-1}")),
    ({EXP: "1"}, None, _invalid(EXP, '"expected integer, got longstr"')),
    ({EXP: 5.0}, None, _invalid(EXP, '"expected integer, got double"')),
    ({EXP: 2**40}, None, _invalid(EXP, "{value_too_large,1099511627776}")),
    ({EXP: 315360000001}, None, _invalid(EXP, "{value_too_large,315360000001}")),
    ({EXP: 315360000000}, None, None),
    ({"x-max-length": -1}, None, _invalid("x-max-length", "{value_negative,-1}")),
    ({"x-max-length": "1"}, None, _invalid("x-max-length", '"expected integer, got longstr"')),
    ({"x-max-length": 5.0}, None, _invalid("x-max-length", '"expected integer, got double"')),
    ({"x-max-length": 0}, None, None),
    ({"x-max-length": 2**62}, None, None),
    ({"x-max-length-bytes": -1}, None, _invalid("x-max-length-bytes", "{value_negative,-1}")),
    ({"x-max-length-bytes": "5"}, None, _invalid("x-max-length-bytes", '"expected integer, got longstr"')),
    ({"x-overflow": "foo"}, None, _invalid("x-overflow", "invalid_overflow")),
    ({"x-overflow": 1}, None, _invalid("x-overflow", "{unacceptable_type,signedint}")),
    ({"x-overflow": b"drop-head"}, None, _invalid("x-overflow", "{unacceptable_type,binary}")),
    ({"x-overflow": None}, None, _invalid("x-overflow", "{unacceptable_type,void}")),
    ({"x-overflow": "reject-publish"}, None, None),
    ({"x-overflow": "reject-publish-dlx"}, None, None),
    ({"x-overflow": "drop-head"}, None, None),
    (
        {"x-dead-letter-routing-key": "rk"},
        None,
        _invalid("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined"),
    ),
    (
        {"x-dead-letter-routing-key": 1, "x-dead-letter-exchange": "dlx"},
        None,
        _invalid("x-dead-letter-routing-key", "{unacceptable_type,signedint}"),
    ),
    (
        {"x-dead-letter-routing-key": 1},
        None,
        _invalid("x-dead-letter-routing-key", "{unacceptable_type,signedint}"),
    ),
    (
        {"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": b"rk"},
        None,
        _invalid("x-dead-letter-routing-key", "{unacceptable_type,binary}"),
    ),
    (
        {"x-dead-letter-exchange": "d", "x-dead-letter-routing-key": None},
        None,
        _invalid("x-dead-letter-routing-key", "{unacceptable_type,void}"),
    ),
    ({"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "rk"}, None, None),
    ({"x-dead-letter-exchange": 1}, None, _dlx_type("signedint")),
    ({"x-dead-letter-exchange": b"dlx"}, None, _dlx_type("binary")),
    ({"x-dead-letter-exchange": True}, None, _dlx_type("bool")),
    ({"x-dead-letter-exchange": {"a": 1}}, None, _dlx_type("table")),
    ({"x-dead-letter-exchange": None, "x-dead-letter-routing-key": "rk"}, None, _dlx_type("void")),
    ({"x-dead-letter-exchange": ""}, None, None),
    ({"x-dead-letter-exchange": "does-not-exist"}, None, None),
    ({"x-dead-letter-exchange": "amq.foo"}, None, None),
    ({"x-max-priority": 256}, None, _invalid("x-max-priority", "{max_value_exceeded,256}")),
    ({"x-max-priority": 2**40}, None, _invalid("x-max-priority", "{max_value_exceeded,1099511627776}")),
    ({"x-max-priority": -1}, None, _invalid("x-max-priority", "{value_negative,-1}")),
    ({"x-max-priority": "5"}, None, _invalid("x-max-priority", '"expected integer, got longstr"')),
    ({"x-max-priority": 5.0}, None, _invalid("x-max-priority", '"expected integer, got double"')),
    ({"x-max-priority": 0}, None, None),
    ({"x-max-priority": 255}, {"x-max-priority": "unsignedbyte"}, None),
    ({"x-queue-type": "foo"}, None, _invalid("x-queue-type", "\"unsupported queue type 'foo'\"")),
    ({"x-queue-type": ""}, None, _invalid("x-queue-type", "\"unsupported queue type ''\"")),
    ({"x-queue-type": "Classic"}, None, _invalid("x-queue-type", "\"unsupported queue type 'Classic'\"")),
    ({"x-queue-type": 1}, None, _invalid("x-queue-type", "{unacceptable_type,signedint}")),
    ({"x-queue-type": b"classic"}, None, _invalid("x-queue-type", "{unacceptable_type,binary}")),
    ({"x-queue-type": "classic"}, None, None),
    (
        {"x-single-active-consumer": "true"},
        None,
        _invalid("x-single-active-consumer", "{unacceptable_type,longstr}"),
    ),
    (
        {"x-single-active-consumer": 1},
        None,
        _invalid("x-single-active-consumer", "{unacceptable_type,signedint}"),
    ),
    (
        {"x-single-active-consumer": None},
        None,
        _invalid("x-single-active-consumer", "{unacceptable_type,void}"),
    ),
    ({"x-single-active-consumer": True}, None, None),
    ({"x-single-active-consumer": False}, None, None),
    ({"x-queue-mode": "foo"}, None, _invalid("x-queue-mode", "\"unsupported queue mode 'foo'\"")),
    ({"x-queue-mode": 1}, None, _invalid("x-queue-mode", "{unacceptable_type,signedint}")),
    ({"x-queue-mode": "lazy"}, None, None),
    ({"x-queue-mode": "default"}, None, None),
    ({"x-queue-version": 3}, None, _invalid("x-queue-version", "\"unsupported queue version '3'\"")),
    ({"x-queue-version": 0}, None, _invalid("x-queue-version", "\"unsupported queue version '0'\"")),
    ({"x-queue-version": -1}, None, _invalid("x-queue-version", "{value_negative,-1}")),
    ({"x-queue-version": "2"}, None, _invalid("x-queue-version", '"expected integer, got longstr"')),
    ({"x-queue-version": 2.0}, None, _invalid("x-queue-version", '"expected integer, got double"')),
    ({"x-queue-version": True}, None, _invalid("x-queue-version", '"expected integer, got bool"')),
    ({"x-queue-version": 1}, None, None),
    ({"x-queue-version": 2}, {"x-queue-version": "unsignedbyte"}, None),
    ({"x-max-age": "1D"}, None, _other_type("x-max-age")),
    ({"x-max-age": 1}, None, _other_type("x-max-age")),
    ({"x-max-in-memory-length": -1}, None, _other_type("x-max-in-memory-length")),
    ({"x-max-in-memory-bytes": 5}, None, _other_type("x-max-in-memory-bytes")),
    ({"x-dead-letter-strategy": "at-least-once"}, None, _other_type("x-dead-letter-strategy")),
    ({"x-quorum-initial-group-size": 0}, None, _other_type("x-quorum-initial-group-size")),
    ({"x-initial-cluster-size": 0}, None, _other_type("x-initial-cluster-size")),
    ({"x-queue-leader-locator": "foo"}, None, _other_type("x-queue-leader-locator")),
    ({"x-stream-max-segment-size-bytes": 5}, None, _other_type("x-stream-max-segment-size-bytes")),
    ({"x-max-segment-size": -1}, None, None),
    ({"x-stream-filter-size-bytes": 5}, None, None),
    ({"x-queue-master-locator": "min-masters"}, None, None),
    ({"x-priority": "abc"}, None, None),
    ({"x-foo": "bar"}, None, None),
    # first failure wins: DLX type, x-queue-type, declare_args order, other queue types' args
    ({TTL: -1, EXP: 0}, None, _invalid(EXP, "{value_zero,0}")),
    ({EXP: 0, TTL: -1}, None, _invalid(EXP, "{value_zero,0}")),
    ({"x-max-length": -1, TTL: -1}, None, _invalid(TTL, "{value_negative,-1}")),
    ({"x-queue-type": "foo", TTL: -1}, None, _invalid("x-queue-type", "\"unsupported queue type 'foo'\"")),
    ({EXP: 0, "x-queue-type": "foo"}, None, _invalid("x-queue-type", "\"unsupported queue type 'foo'\"")),
    ({"x-queue-type": 1, TTL: -1}, None, _invalid("x-queue-type", "{unacceptable_type,signedint}")),
    ({"x-dead-letter-exchange": 1, "x-queue-type": "foo"}, None, _dlx_type("signedint")),
    ({TTL: -1, "x-max-age": "1D"}, None, _invalid(TTL, "{value_negative,-1}")),
    ({TTL: -1, "x-delivery-limit": 5}, None, _invalid(TTL, "{value_negative,-1}")),
    (
        {"x-max-in-memory-length": 1, "x-quorum-initial-group-size": 5},
        None,
        _other_type("x-max-in-memory-length"),
    ),
    (
        {"x-quorum-initial-group-size": 5, "x-max-in-memory-length": 1},
        None,
        _other_type("x-quorum-initial-group-size"),
    ),
]


@pytest.mark.parametrize(("arguments", "types", "text"), DECLARE_CASES)
def test_declare_validation_like_rabbitmq(
    arguments: dict[str, Any], types: dict[str, str] | None, text: str | None
) -> None:
    if text is None:
        parse_queue_args(arguments, "q", "/", types=types)
        return
    with pytest.raises(PreconditionFailed) as info:
        parse_queue_args(arguments, "q", "/", types=types)
    assert info.value.text == text
    assert info.value.reply_code == 406


# RabbitMQ's check order, found by declaring every pair of invalid values in both table orders
DECLARE_ORDER = [
    ("x-dead-letter-exchange", 1),
    ("x-expires", 0),
    ("x-message-ttl", -1),
    ("x-dead-letter-routing-key", 1),
    ("x-max-length", -1),
    ("x-max-length-bytes", -1),
    ("x-max-priority", -1),
    ("x-overflow", "foo"),
    ("x-queue-mode", "foo"),
    ("x-queue-version", 3),
    ("x-single-active-consumer", 1),
]


@pytest.mark.parametrize(
    ("first", "second"),
    list(itertools.combinations(DECLARE_ORDER, 2)),
    ids=lambda pair: pair[0],
)
def test_declare_check_order(first: tuple[str, object], second: tuple[str, object]) -> None:
    for table in (dict([first, second]), dict([second, first])):
        with pytest.raises(PreconditionFailed) as info:
            parse_queue_args(table, "q")
        assert f"'{first[0]}'" in info.value.text


def test_parsed_values() -> None:
    raw = {
        "x-message-ttl": 1000,
        "x-expires": 60000,
        "x-max-length": 10,
        "x-max-length-bytes": 1024,
        "x-overflow": "reject-publish-dlx",
        "x-dead-letter-exchange": "dlx",
        "x-dead-letter-routing-key": "dead",
        "x-max-priority": 9,
        "x-single-active-consumer": True,
        "x-queue-type": "classic",
        "x-foo": [1, 2],
    }
    args = parse_queue_args(raw, "q")
    assert args == QueueArgs(
        message_ttl=1000,
        expires=60000,
        max_length=10,
        max_length_bytes=1024,
        overflow="reject-publish-dlx",
        dead_letter_exchange="dlx",
        dead_letter_routing_key="dead",
        max_priority=9,
        single_active_consumer=True,
    )
    assert args.raw == raw and args.raw is not raw


def test_defaults() -> None:
    empties: tuple[dict[str, Any] | None, ...] = (None, {})
    for empty in empties:
        args = parse_queue_args(empty, "q")
        assert args == QueueArgs()
        assert args.overflow == "drop-head" and args.queue_type == "classic"
        assert args.dead_letter_exchange is None and not args.exact_ttl and args.delivery_limit is None


def test_empty_dlx_is_the_default_exchange() -> None:
    assert parse_queue_args({"x-dead-letter-exchange": ""}, "q").dead_letter_exchange == ""


def test_error_text_uses_queue_and_vhost() -> None:
    with pytest.raises(PreconditionFailed) as info:
        parse_queue_args({"x-expires": 0}, "orders", "prod")
    assert info.value.text == "invalid arg 'x-expires' for queue 'orders' in vhost 'prod': {value_zero,0}"


def test_max_priority_cap() -> None:
    assert parse_queue_args({"x-max-priority": 10}, "q", "/", 10).max_priority == 10
    with pytest.raises(PreconditionFailed) as info:
        parse_queue_args({"x-max-priority": 11}, "q", "/", 10)
    assert info.value.text == _invalid("x-max-priority", "{max_value_exceeded,11}")


def test_types_override_inference() -> None:
    with pytest.raises(PreconditionFailed) as info:
        parse_queue_args({TTL: 5}, "q", types={TTL: "timestamp"})
    assert info.value.text == _invalid(TTL, '"expected integer, got timestamp"')


@pytest.mark.extension
class TestOttermqExtensions:
    """RabbitMQ 3.10 refuses x-delivery-limit on classic queues ("... of queue type
    rabbit_classic_queue") and ignores x-ottermq-exact-ttl; ottermq implements both."""

    def test_delivery_limit(self) -> None:
        assert parse_queue_args({"x-delivery-limit": 5}, "q").delivery_limit == 5
        assert parse_queue_args({"x-delivery-limit": 0}, "q").delivery_limit == 0
        with pytest.raises(PreconditionFailed) as info:
            parse_queue_args({"x-delivery-limit": -1}, "q")
        assert info.value.text == _invalid("x-delivery-limit", "{value_negative,-1}")
        with pytest.raises(PreconditionFailed) as info:
            parse_queue_args({"x-delivery-limit": "foo"}, "q")
        assert info.value.text == _invalid("x-delivery-limit", '"expected integer, got longstr"')

    def test_exact_ttl(self) -> None:
        assert parse_queue_args({"x-ottermq-exact-ttl": True}, "q").exact_ttl is True
        assert parse_queue_args({"x-ottermq-exact-ttl": False}, "q").exact_ttl is False
        with pytest.raises(PreconditionFailed) as info:
            parse_queue_args({"x-ottermq-exact-ttl": "yes"}, "q")
        assert info.value.text == _invalid("x-ottermq-exact-ttl", "{unacceptable_type,longstr}")

    def test_streams_refused(self) -> None:
        """RabbitMQ 3.10.8 declares a stream; ottermq has none and says so."""
        with pytest.raises(PreconditionFailed) as info:
            parse_queue_args({"x-queue-type": "stream"}, "q")
        assert info.value.text == _invalid(
            "x-queue-type", "\"unsupported queue type 'stream'\" (ottermq does not implement streams)"
        )


# ---------------------------------------------------------------------------------------------
# redeclare equivalence
# ---------------------------------------------------------------------------------------------
def _ineq(key: str, rest: str) -> str:
    return f"inequivalent arg '{key}' for queue 'q' in vhost '/': {rest}"


# (existing, new, new types, expected text or None)
EQUIV_CASES: list[tuple[dict[str, Any], dict[str, Any], dict[str, str] | None, str | None]] = [
    ({}, {TTL: 2000}, None, _ineq(TTL, "received the value '2000' of type 'signedint' but current is none")),
    ({TTL: 2000}, {}, None, _ineq(TTL, "received none but current is the value '2000' of type 'signedint'")),
    ({TTL: 1000}, {TTL: 2000}, None, _ineq(TTL, "received '2000' but current is '1000'")),
    ({TTL: 1000}, {TTL: 1000}, {TTL: "long"}, None),
    ({TTL: 1000}, {TTL: 1000}, {TTL: "unsignedshort"}, None),
    ({TTL: 100}, {TTL: 100}, {TTL: "byte"}, None),
    (
        {},
        {TTL: 2000},
        {TTL: "long"},
        _ineq(TTL, "received the value '2000' of type 'long' but current is none"),
    ),
    (
        {},
        {TTL: 20},
        {TTL: "unsignedbyte"},
        _ineq(TTL, "received the value '20' of type 'unsignedbyte' but current is none"),
    ),
    (
        {},
        {TTL: 2**32},
        None,
        _ineq(TTL, "received the value '4294967296' of type 'long' but current is none"),
    ),
    ({}, {TTL: -1}, None, _ineq(TTL, "received the value '-1' of type 'signedint' but current is none")),
    ({TTL: 1000}, {TTL: -1}, None, _ineq(TTL, "received '-1' but current is '1000'")),
    ({TTL: 1000}, {TTL: "1000"}, None, _ineq(TTL, "received '1000' but current is '1000'")),
    ({TTL: 1}, {TTL: 1.0}, None, _ineq(TTL, "received '1.0' but current is '1'")),
    ({TTL: 1}, {TTL: datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=datetime.UTC)}, None, None),
    ({TTL: 1}, {TTL: None}, None, _ineq(TTL, "received none but current is '1'")),
    (
        {TTL: 1},
        {TTL: {"a": 1, "b": "x"}},
        None,
        _ineq(TTL, 'received \'[{<<"a">>,signedint,1},{<<"b">>,longstr,<<"x">>}]\' but current is \'1\''),
    ),
    ({}, {TTL: 1e20}, None, _ineq(TTL, "received the value '1.0e20' of type 'double' but current is none")),
    ({}, {TTL: 0.1}, None, _ineq(TTL, "received the value '0.1' of type 'double' but current is none")),
    ({}, {TTL: 1e-7}, None, _ineq(TTL, "received the value '1.0e-7' of type 'double' but current is none")),
    (
        {},
        {TTL: 123456789012345678.0},
        None,
        _ineq(TTL, "received the value '1.2345678901234568e17' of type 'double' but current is none"),
    ),
    ({}, {TTL: 1e15}, None, _ineq(TTL, "received the value '1.0e15' of type 'double' but current is none")),
    (
        {},
        {TTL: 0.10000000149011612},
        {TTL: "float"},
        _ineq(TTL, "received the value '0.10000000149011612' of type 'float' but current is none"),
    ),
    (
        {},
        {TTL: Decimal("1.55")},
        None,
        _ineq(TTL, "received the value '{2,155}' of type 'decimal' but current is none"),
    ),
    (
        {},
        {TTL: datetime.datetime(1970, 1, 1, 0, 0, 7, tzinfo=datetime.UTC)},
        None,
        _ineq(TTL, "received the value '7' of type 'timestamp' but current is none"),
    ),
    ({}, {TTL: 7}, {TTL: "byte"}, _ineq(TTL, "received the value '7' of type 'byte' but current is none")),
    ({}, {TTL: 7}, {TTL: "short"}, _ineq(TTL, "received the value '7' of type 'short' but current is none")),
    (
        {},
        {TTL: 7},
        {TTL: "unsignedint"},
        _ineq(TTL, "received the value '7' of type 'unsignedint' but current is none"),
    ),
    ({}, {TTL: -7}, None, _ineq(TTL, "received the value '-7' of type 'signedint' but current is none")),
    (
        {},
        {TTL: {"é": "é"}},
        None,
        _ineq(
            TTL, "received the value '[{<<\"é\">>,longstr,<<\"é\">>}]' of type 'table' but current is none"
        ),
    ),
    (
        {},
        {"x-dead-letter-exchange": "dlx"},
        None,
        _ineq("x-dead-letter-exchange", "received the value 'dlx' of type 'longstr' but current is none"),
    ),
    (
        {"x-dead-letter-exchange": "a"},
        {"x-dead-letter-exchange": "b"},
        None,
        _ineq("x-dead-letter-exchange", "received 'b' but current is 'a'"),
    ),
    (
        {"x-dead-letter-exchange": "a"},
        {},
        None,
        _ineq("x-dead-letter-exchange", "received none but current is the value 'a' of type 'longstr'"),
    ),
    ({"x-dead-letter-exchange": "a"}, {"x-dead-letter-exchange": b"a"}, None, None),
    (
        {},
        {"x-dead-letter-exchange": b"ab"},
        None,
        _ineq("x-dead-letter-exchange", "received the value 'ab' of type 'binary' but current is none"),
    ),
    (
        {},
        {"x-dead-letter-exchange": "é"},
        None,
        _ineq("x-dead-letter-exchange", "received the value 'é' of type 'longstr' but current is none"),
    ),
    (
        {"x-dead-letter-exchange": "a"},
        {"x-dead-letter-exchange": "é"},
        None,
        _ineq("x-dead-letter-exchange", "received 'é' but current is 'a'"),
    ),
    (
        {},
        {"x-dead-letter-exchange": None},
        None,
        _ineq("x-dead-letter-exchange", "received the value 'undefined' of type 'void' but current is none"),
    ),
    (
        {},
        {"x-dead-letter-exchange": 1},
        None,
        _ineq("x-dead-letter-exchange", "received the value '1' of type 'signedint' but current is none"),
    ),
    (
        {"x-dead-letter-exchange": "a", "x-dead-letter-routing-key": "r1"},
        {"x-dead-letter-exchange": "a", "x-dead-letter-routing-key": "r2"},
        None,
        _ineq("x-dead-letter-routing-key", "received 'r2' but current is 'r1'"),
    ),
    (
        {"x-single-active-consumer": True},
        {"x-single-active-consumer": False},
        None,
        _ineq("x-single-active-consumer", "received 'false' but current is 'true'"),
    ),
    (
        {},
        {"x-single-active-consumer": False},
        None,
        _ineq("x-single-active-consumer", "received the value 'false' of type 'bool' but current is none"),
    ),
    (
        {"x-single-active-consumer": True},
        {"x-single-active-consumer": 1},
        None,
        _ineq("x-single-active-consumer", "received '1' but current is 'true'"),
    ),
    ({"x-single-active-consumer": True}, {"x-single-active-consumer": True}, None, None),
    ({}, {"x-queue-type": "classic"}, None, None),
    ({"x-queue-type": "classic"}, {}, None, None),
    ({"x-queue-type": "classic"}, {"x-queue-type": b"classic"}, None, None),
    (
        {},
        {"x-queue-type": b"classic"},
        None,
        _ineq("x-queue-type", "received the value 'classic' of type 'binary' but current is none"),
    ),
    (
        {},
        {"x-queue-type": "quorum"},
        None,
        _ineq("x-queue-type", "received the value 'quorum' of type 'longstr' but current is none"),
    ),
    (
        {},
        {"x-queue-type": "foo"},
        None,
        _ineq("x-queue-type", "received the value 'foo' of type 'longstr' but current is none"),
    ),
    (
        {},
        {"x-queue-type": 1},
        None,
        _ineq("x-queue-type", "received the value '1' of type 'signedint' but current is none"),
    ),
    (
        {},
        {"x-queue-mode": "lazy"},
        None,
        _ineq("x-queue-mode", "received the value 'lazy' of type 'longstr' but current is none"),
    ),
    (
        {},
        {"x-queue-mode": "default"},
        None,
        _ineq("x-queue-mode", "received the value 'default' of type 'longstr' but current is none"),
    ),
    (
        {},
        {"x-queue-version": 1},
        None,
        _ineq("x-queue-version", "received the value '1' of type 'signedint' but current is none"),
    ),
    (
        {},
        {"x-max-priority": 10},
        None,
        _ineq("x-max-priority", "received the value '10' of type 'signedint' but current is none"),
    ),
    (
        {"x-max-priority": 5},
        {"x-max-priority": 10},
        None,
        _ineq("x-max-priority", "received '10' but current is '5'"),
    ),
    (
        {},
        {"x-overflow": "drop-head"},
        None,
        _ineq("x-overflow", "received the value 'drop-head' of type 'longstr' but current is none"),
    ),
    (
        {},
        {"x-max-length": 10},
        None,
        _ineq("x-max-length", "received the value '10' of type 'signedint' but current is none"),
    ),
    (
        {},
        {"x-max-length-bytes": 10},
        None,
        _ineq("x-max-length-bytes", "received the value '10' of type 'signedint' but current is none"),
    ),
    (
        {},
        {EXP: 10000},
        None,
        _ineq(EXP, "received the value '10000' of type 'signedint' but current is none"),
    ),
    (
        {},
        {"x-queue-master-locator": "min-masters"},
        None,
        _ineq(
            "x-queue-master-locator", "received the value 'min-masters' of type 'longstr' but current is none"
        ),
    ),
    (
        {"x-queue-master-locator": "min-masters"},
        {"x-queue-master-locator": "random"},
        None,
        _ineq("x-queue-master-locator", "received 'random' but current is 'min-masters'"),
    ),
    # not compared on redeclare
    ({}, {"x-foo": "bar"}, None, None),
    ({"x-foo": "a"}, {"x-foo": "b"}, None, None),
    ({}, {"x-ottermq-exact-ttl": True}, None, None),
    ({}, {"x-delivery-limit": 1}, None, None),
    ({}, {"x-max-age": "1D"}, None, None),
    ({}, {"x-max-segment-size": 5}, None, None),
    ({}, {"x-max-in-memory-length": 1}, None, None),
    ({}, {"x-priority": 1}, None, None),
    # first difference in RabbitMQ's key order wins
    (
        {TTL: 1000, EXP: 1000},
        {TTL: 2000, EXP: 2000},
        None,
        _ineq(EXP, "received '2000' but current is '1000'"),
    ),
    (
        {TTL: 1000, "x-dead-letter-exchange": "a"},
        {"x-dead-letter-exchange": "b", TTL: 2000},
        None,
        _ineq(TTL, "received '2000' but current is '1000'"),
    ),
]


@pytest.mark.parametrize(("existing", "new", "new_types", "text"), EQUIV_CASES)
def test_equivalence_like_rabbitmq(
    existing: dict[str, Any], new: dict[str, Any], new_types: dict[str, str] | None, text: str | None
) -> None:
    if text is None:
        check_args_equivalence(existing, new, "q", "/", new_types=new_types)
        return
    with pytest.raises(PreconditionFailed) as info:
        check_args_equivalence(existing, new, "q", "/", new_types=new_types)
    assert info.value.text == text


def test_equivalence_key_order_pairs() -> None:
    values = {
        "x-expires": 5,
        TTL: 5,
        "x-dead-letter-exchange": "b",
        "x-dead-letter-routing-key": "a",
        "x-max-length": 1,
        "x-max-length-bytes": 1,
        "x-max-priority": 2,
        "x-overflow": "drop-head",
        "x-queue-mode": "lazy",
        "x-queue-version": 2,
        "x-single-active-consumer": True,
        "x-queue-type": "foo",
        "x-queue-master-locator": "min-masters",
    }
    assert list(values) == list(EQUIVALENCE_KEYS)
    keys = list(values)
    for i, first in enumerate(keys):
        for second in keys[i + 1 :]:
            with pytest.raises(PreconditionFailed) as info:
                check_args_equivalence({}, {second: values[second], first: values[first]}, "q", "/")
            assert info.value.text.startswith(f"inequivalent arg '{first}'")


def test_equivalence_accepts_none_tables() -> None:
    check_args_equivalence(None, None, "q", "/")
    check_args_equivalence({"x-foo": 1}, None, "q")


@pytest.mark.parametrize(
    ("flag", "received", "current", "shown"),
    [
        ("durable", True, False, "received 'true' but current is 'false'"),
        ("durable", False, True, "received 'false' but current is 'true'"),
        ("auto_delete", True, False, "received 'true' but current is 'false'"),
        ("auto_delete", False, True, "received 'false' but current is 'true'"),
    ],
)
def test_flag_equivalence(flag: str, received: bool, current: bool, shown: str) -> None:
    check_flag_equivalence("q", flag, current, current, "/")
    with pytest.raises(PreconditionFailed) as info:
        check_flag_equivalence("q", flag, received, current, "/")
    assert info.value.text == f"inequivalent arg '{flag}' for queue 'q' in vhost '/': {shown}"


# ---------------------------------------------------------------------------------------------
# exchange arguments
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "type_name"),
    [(5, "signedint"), (b"ae", "binary"), (None, "void"), (True, "bool"), ({"a": 1}, "table")],
)
def test_alternate_exchange_must_be_a_string(value: object, type_name: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        parse_exchange_args({"alternate-exchange": value}, "x", "/")
    assert info.value.text == (
        f"invalid type '{type_name}' for arg 'alternate-exchange' in exchange 'x' in vhost '/'"
    )


@pytest.mark.parametrize("name", ["", "nope", "x"])
def test_alternate_exchange_any_name(name: str) -> None:
    assert parse_exchange_args({"alternate-exchange": name}, "x") == name


def test_other_exchange_arguments_ignored() -> None:
    assert parse_exchange_args({"x-foo": [1]}, "x") is None
    assert parse_exchange_args(None, "x") is None


# ---------------------------------------------------------------------------------------------
# value helpers
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "name"),
    [
        (True, "bool"),
        (0, "signedint"),
        (2**31 - 1, "signedint"),
        (-(2**31), "signedint"),
        (2**31, "long"),
        ("s", "longstr"),
        (b"s", "binary"),
        (bytearray(b"s"), "binary"),
        (1.0, "double"),
        (Decimal("1.5"), "decimal"),
        (TS, "timestamp"),
        ({}, "table"),
        ([], "array"),
        (None, "void"),
    ],
)
def test_amqp_type_name(value: object, name: str) -> None:
    assert amqp_type_name(value) == name


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0"),
        (1.5, "1.5"),
        (-1.5, "-1.5"),
        (100.0, "100.0"),
        (1e20, "1.0e20"),
        (0.1, "0.1"),
        (0.001, "0.001"),
        (1e-7, "1.0e-7"),
        (1e15, "1.0e15"),
        (1e16, "1.0e16"),
        (123456789012345678.0, "1.2345678901234568e17"),
        (0.10000000149011612, "0.10000000149011612"),
        (Decimal("1.55"), "{2,155}"),
        (Decimal("15"), "{0,15}"),
        (None, "undefined"),
        (False, "false"),
        (
            [1, "x", b"y", None, True],
            '[{signedint,1},{longstr,<<"x">>},{binary,<<"y">>},{void,undefined},{bool,true}]',
        ),
    ],
)
def test_erl_term(value: object, text: str) -> None:
    assert erl_term(value) == text


def test_erl_binary_modes() -> None:
    assert erl_binary("é", unicode=True) == '<<"é">>'
    assert erl_binary("é") == '<<"é">>'  # printable as Latin-1 bytes too, original bytes kept
    assert erl_binary("😀", unicode=True) == "<<240,159,152,128>>"
    assert erl_binary(b"a\xffb", unicode=True) == '<<"a\u00ffb">>'
    assert erl_binary(b"") == "<<>>"


@pytest.mark.parametrize(
    ("a", "b", "equal", "exact"),
    [
        (1, 1, True, True),
        (1, 1.0, True, False),
        (1, True, False, False),
        (0, False, False, False),
        ("1", b"1", True, True),
        ("1", bytearray(b"1"), True, True),
        ("1", 1, False, False),
        (Decimal("1"), 1, False, False),
        (Decimal("1.0"), Decimal("1"), False, False),
        (Decimal("1.5"), Decimal("1.5"), True, True),
        (datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=datetime.UTC), 1, True, True),
        ({}, [], True, True),
        ({"a": 1}, {"a": 1}, True, True),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, False, False),
        ([1, 2], [2, 1], False, False),
        (None, None, True, True),
        (None, 0, False, False),
    ],
)
def test_erl_equal(a: object, b: object, equal: bool, exact: bool) -> None:
    assert erl_equal(a, b) is equal
    assert erl_equal(b, a) is equal
    assert erl_equal(a, b, exact=True) is exact


def test_max_expiry_is_ten_years() -> None:
    assert MAX_EXPIRY == 10 * 365 * 24 * 3600 * 1000


# ---------------------------------------------------------------------------------------------
# values that carry their wire tag (as ``ottermq.amqp.table`` decodes them)
# ---------------------------------------------------------------------------------------------
class Octet(int):
    tag: ClassVar[bytes] = b"B"


class LongLong(int):
    tag: ClassVar[bytes] = b"l"


class Timestamp(int):
    tag: ClassVar[bytes] = b"T"


class Float(float):
    tag: ClassVar[bytes] = b"f"


class LongStr(bytes):
    tag: ClassVar[bytes] = b"S"


def test_tagged_type_names() -> None:
    assert amqp_type_name(Octet(1)) == "unsignedbyte"
    assert amqp_type_name(LongLong(1)) == "long"
    assert amqp_type_name(Timestamp(1)) == "timestamp"
    assert amqp_type_name(Float(1.0)) == "float"
    assert amqp_type_name(LongStr(b"\xff")) == "longstr"


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({TTL: Octet(5)}, None),
        ({TTL: LongLong(5)}, None),
        ({TTL: Timestamp(5)}, _invalid(TTL, '"expected integer, got timestamp"')),
        ({TTL: Float(1.0)}, _invalid(TTL, '"expected integer, got float"')),
        ({"x-overflow": LongStr(b"\xff")}, _invalid("x-overflow", "invalid_overflow")),
        ({"x-queue-type": LongStr(b"\xff")}, _invalid("x-queue-type", "\"unsupported queue type '\u00ff'\"")),
    ],
)
def test_tagged_declare(arguments: dict[str, Any], text: str | None) -> None:
    if text is None:
        parse_queue_args(arguments, "q")
        return
    with pytest.raises(PreconditionFailed) as info:
        parse_queue_args(arguments, "q")
    assert info.value.text == text


def test_tagged_equivalence() -> None:
    check_args_equivalence({TTL: 1}, {TTL: Timestamp(1)}, "q")
    check_args_equivalence({TTL: 20}, {TTL: Octet(20)}, "q")
    with pytest.raises(PreconditionFailed) as info:
        check_args_equivalence({}, {TTL: Octet(20)}, "q")
    assert info.value.text == _ineq(TTL, "received the value '20' of type 'unsignedbyte' but current is none")
    with pytest.raises(PreconditionFailed) as info:
        check_args_equivalence({}, {TTL: Float(0.5)}, "q")
    assert info.value.text == _ineq(TTL, "received the value '0.5' of type 'float' but current is none")


def test_tagged_longstr_dlx_and_alternate_exchange() -> None:
    assert (
        parse_queue_args({"x-dead-letter-exchange": LongStr(b"d\xff")}, "q").dead_letter_exchange == "d\udcff"
    )
    assert parse_exchange_args({"alternate-exchange": LongStr(b"a\xff")}, "x") == "a\udcff"


def test_nested_values_compare_types() -> None:
    assert erl_equal({"k": 1}, {"k": 1})
    assert erl_equal(LongLong(1), 1)  # top level: Erlang ==
    assert not erl_equal({"k": LongLong(1)}, {"k": 1})  # nested: {long,1} vs {signedint,1}
    assert not erl_equal([Float(1.5)], [1.5])  # {float,1.5} vs {double,1.5}
    assert erl_equal([Float(1.5)], [Float(1.5)])
