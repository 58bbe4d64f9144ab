"""A shovel's definition validated as RabbitMQ 3.10.8 validates it (``broker/shovel/definition.py``).

``rabbitmq_validation.json`` holds what RabbitMQ 3.10.8 answered to ``PUT
/api/parameters/shovel/%2F/v`` (user ``guest``, who has permissions in ``/`` only) for each value:
the 400 reason (HTML-escaped by the management plugin, as ottermq's API escapes it), or null for a
201. Values RabbitMQ answered with a 500 are not in it (ottermq refuses them with a 400, tested
below); two answers ottermq does not give on purpose are listed in ``DIFFERENT``.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest
from ottermq.broker.shovel.definition import ShovelSpec, spec_of, validate

CASES = json.loads((Path(__file__).with_name("rabbitmq_validation.json")).read_text())
# RabbitMQ prints a stack trace for a port that is not a number, and has AMQP 1.0 shovels
DIFFERENT = {
    "amqp://h:abc": 'Validation failed\n\n"amqp://h:abc" not a valid URI: {{unable_to_parse_uri,\n'
    '                                  {malformed_uri,"amqp://h:abc",\n'
    "                                   {'EXIT',badarg}}},\n"
    '                                 "amqp://h:abc"}\n',
    "amqp10": "Validation failed\n\nsrc-protocol amqp10 (AMQP 1.0) is not supported by ottermq\n",
}


def answer(value: Any) -> str | None:
    problems = validate("v", value, lambda vhost: vhost == "/", "guest")
    if not problems:
        return None
    return html.escape("Validation failed\n\n" + "".join(f"{p}\n" for p in problems), quote=False)


def key(value: Any) -> str | None:
    if isinstance(value, dict):
        if value.get("src-uri") == "amqp://h:abc":
            return "amqp://h:abc"
        if value.get("src-protocol") == "amqp10":
            return "amqp10"
    return None


@pytest.mark.parametrize("case", CASES, ids=[json.dumps(c["value"])[:80] for c in CASES])
def test_each_value_gets_rabbitmqs_answer(case: dict[str, Any]) -> None:
    expected = case["reason"]
    different = key(case["value"])
    if different is not None:
        expected = html.escape(DIFFERENT[different], quote=False)
    assert answer(case["value"]) == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("a string", 'v not a list <<"a string">>'),
        (5, "v not a list 5"),
        (
            {"src-protocol": "foo", "src-queue": "a"},
            'src-protocol should be one of [<<"amqp10">>,<<"amqp091">>], actually was <<"foo">>',
        ),
        (
            {"src-uri": "amqp://", "src-queue": "q", "dest-uri": "amqp://", "src-queue-args": 5},
            "src-queue-args not a list 5",
        ),
    ],
)
def test_what_rabbitmq_answers_with_a_500_is_a_400(value: Any, reason: str) -> None:
    assert validate("v", value) == [reason]


def test_the_spec_takes_rabbitmqs_defaults_and_the_legacy_names() -> None:
    spec = spec_of(
        {"src-uri": ["amqp://a", ["amqp://b"]], "src-queue": "q", "dest-uri": "amqp://", "dest-queue": "d"}
    )
    assert spec == ShovelSpec(
        src_uris=("amqp://a", "amqp://b"), dest_uris=("amqp://",), src_queue="q", dest_queue="d"
    )
    assert (spec.ack_mode, spec.prefetch, spec.delete_after, spec.reconnect_delay) == (
        "on-confirm",
        1000,
        "never",
        5,
    )
    legacy = spec_of(
        {
            "src-uri": "amqp://",
            "src-exchange": "x",
            "dest-uri": "amqp://",
            "prefetch-count": 10,
            "delete-after": "queue-length",
            "add-forward-headers": True,
            "add-timestamp-header": True,
            "publish-properties": {"delivery_mode": 2},
        }
    )
    assert (
        legacy.prefetch,
        legacy.delete_after,
        legacy.add_forward_headers,
        legacy.add_timestamp_header,
    ) == (
        10,
        "queue-length",
        True,
        True,
    )
    assert legacy.publish_properties == {"delivery_mode": 2} and legacy.src_exchange_key == ""


@pytest.mark.parametrize(("delay", "restarts"), [(5, True), (1, True), (0, False), (1.5, False), (-1, False)])
def test_only_a_whole_positive_reconnect_delay_restarts(delay: float, restarts: bool) -> None:
    spec = spec_of({"src-uri": "amqp://", "src-queue": "q", "dest-uri": "amqp://", "reconnect-delay": delay})
    assert spec.restarts is restarts


def test_the_broker_acting_is_not_checked_for_vhost_access() -> None:
    value = {"src-uri": "amqp:///elsewhere", "src-queue": "q", "dest-uri": "amqp://"}
    assert validate("v", value) == []
    assert validate("v", value, lambda vhost: vhost == "/", "bob") == [
        'user "bob" may not connect to vhost "elsewhere"'
    ]
