"""Pure helpers of the management API's write side: binding ``properties_key`` and message JSON."""

from __future__ import annotations

import pytest
from ottermq.broker.management.bindings import properties_key
from ottermq.broker.management.messages import encode_properties, payload_json, properties_json


@pytest.mark.parametrize(
    ("routing_key", "expected"),
    [
        ("", "~"),  # RabbitMQ 3.10, checked against its API
        ("rk", "rk"),
        ("a b~c/d", "a+b%7Ec%2Fd"),
        ("x.*.#", "x.%2A.%23"),
    ],
)
def test_properties_key_without_arguments_is_rabbitmqs(routing_key: str, expected: str) -> None:
    assert properties_key(routing_key, {}) == expected


def test_properties_key_with_arguments_is_stable_and_distinct() -> None:
    one = properties_key("", {"x-match": "all", "a": 1})
    assert one.startswith("~") and len(one) > 1
    assert one == properties_key("", {"a": 1, "x-match": "all"})
    assert one != properties_key("", {"x-match": "any", "a": 1})
    assert properties_key("k", {"a": 1}).startswith("k~")


@pytest.mark.parametrize(
    ("body", "encoding", "truncate", "expected"),
    [
        (b"hello", "auto", None, ("hello", "string")),
        (b"hello", "auto", 2, ("he", "string")),
        (b"hello", "base64", None, ("aGVsbG8=", "base64")),
        (b"\xff\x00", "auto", None, ("/wA=", "base64")),
    ],
)
def test_payload_json(body: bytes, encoding: str, truncate: int | None, expected: tuple[str, str]) -> None:
    assert payload_json(body, encoding, truncate) == expected


def test_properties_round_trip_and_empty_list() -> None:
    props = {"content_type": "text/plain", "delivery_mode": 2, "headers": {"k": "v", "n": 1}}
    assert properties_json(encode_properties(props)) == props
    assert properties_json(encode_properties({})) == []
    assert properties_json(encode_properties([])) == []


def test_unknown_property_is_a_bad_request() -> None:
    with pytest.raises(Exception) as info:
        encode_properties({"colour": "red"})
    assert getattr(info.value, "status", None) == 400
