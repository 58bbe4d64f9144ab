"""Value bounds (vhost/bounds.py) and where they are applied: policies, limits."""

from __future__ import annotations

import pytest
from ottermq.broker.node.limits import LimitError, validate
from ottermq.vhost.bounds import (
    INT64_MAX,
    MAX_DURATION,
    OutOfBounds,
    check_duration,
    check_int64,
    field_table,
)
from ottermq.vhost.policy import PolicyError, make_policy


def test_int64_and_durations() -> None:
    assert check_int64(INT64_MAX, "x") == INT64_MAX
    assert check_int64("text", "x") == "text"
    with pytest.raises(OutOfBounds, match="priority 9223372036854775808 is out of range"):
        check_int64(2**63, "priority")
    assert check_duration(MAX_DURATION, "message-ttl") == MAX_DURATION
    with pytest.raises(OutOfBounds, match=r"message-ttl .* \(ten years"):
        check_duration(MAX_DURATION + 1, "message-ttl")
    with pytest.raises(OutOfBounds, match="of 401 digits"):
        check_duration(10**400, "expires")


def test_field_table_from_json() -> None:
    table = {"a": 1, "b": [1.5, {"c": None}], "d": True}
    assert field_table(table) == table
    with pytest.raises(OutOfBounds, match="arguments 'x-big' 18446744073709551616 is out of range"):
        field_table({"x-big": 2**64})
    with pytest.raises(OutOfBounds, match="not a finite number"):
        field_table({"x": float("inf")})
    deep: list[object] = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(OutOfBounds, match="nested"):
        field_table({"x": deep})


@pytest.mark.parametrize(
    ("definition", "priority", "text"),
    [
        ({"max-length": 1}, 2**63, "priority 9223372036854775808 is out of range"),
        ({"message-ttl": 10**30}, 0, "message-ttl 1000000000000000000000000000000 is out of range"),
        ({"expires": 10**400}, 0, "expires of 401 digits is out of range"),
        ({"max-length-bytes": 2**64}, 0, "max-length-bytes 18446744073709551616 is out of range"),
        ({"cache-ttl": MAX_DURATION + 1}, 0, "cache-ttl"),
    ],
)
def test_policy_values_are_bounded(definition: dict[str, object], priority: int, text: str) -> None:
    with pytest.raises(PolicyError, match=text):
        make_policy("/", "p", ".*", definition, "all", priority)
    make_policy("/", "p", ".*", {"message-ttl": MAX_DURATION, "max-length": INT64_MAX}, "all", INT64_MAX)


def test_limits_are_bounded() -> None:
    assert validate("vhost", "max-queues", INT64_MAX) == INT64_MAX
    with pytest.raises(LimitError, match="max-queues 9223372036854775808 is out of range"):
        validate("vhost", "max-queues", 2**63)


def test_argument_durations_are_bounded() -> None:
    from ottermq.amqp.errors import PreconditionFailed
    from ottermq.vhost.arguments import parse_queue_args
    from ottermq.vhost.dedup import dedup_settings, message_ttl_override
    from ottermq.vhost.policy import consumer_timeout

    with pytest.raises(PreconditionFailed, match="x-cache-ttl.*ten years"):
        dedup_settings(
            {"x-message-deduplication": True, "x-cache-ttl": MAX_DURATION + 1},
            {},
            durable=False,
            always=False,
            resource="queue 'q' in vhost '/'",
        )
    assert message_ttl_override({"x-cache-ttl": INT64_MAX}) == MAX_DURATION
    with pytest.raises(PreconditionFailed, match="x-delayed-retry-max.*value_too_large"):
        parse_queue_args({"x-delayed-retry-max": INT64_MAX}, "q", "/", 255)
    args = parse_queue_args({"x-consumer-timeout": INT64_MAX}, "q", "/", 255)
    assert consumer_timeout(args, {}, None) == MAX_DURATION
