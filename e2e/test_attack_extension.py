"""The adversarial suite beyond what RabbitMQ survives (ottermq extension; issue 38, item 7).

The same paths and invariant as ``e2e/test_attack_headers.py`` (see there and ``e2e/attack_paths.py``),
on every path including ottermq's own (delayed retry, dead-letter moves, dropped dead letters in the
archive, the delayed-message exchange), with every hostile value ``e2e/hostile.py`` draws: also NaN
and infinite floats, ``x-death`` entries for this queue and reason whose count is no integer,
``x-death`` arrays holding scalars or nested 20,000 deep, and binding arguments nested 15,000 deep.
RabbitMQ 3.10.8 closes the publisher's connection (541), crashes the queue and loses its messages,
or dies (a segfault) on those: ottermq must keep every confirmed message whatever a header holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from .attack_case import Findings, Target, open_target
from .attack_checks import http
from .attack_paths import ARRAY_DEATH, PATHS, BrokerPath, argument_examples, run_examples
from .hostile import deep_chain

pytestmark = pytest.mark.extension


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with open_target(tmp_path_factory.mktemp("attack")) as t:
        yield t


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_hostile_headers_beyond_rabbitmq_keep_every_message(target: Target, path: BrokerPath) -> None:
    """What RabbitMQ itself does not survive (see ``e2e/hostile.py``), on every path."""
    run_examples(target, path, False, Findings(f"headers+/{path.name}"), [ARRAY_DEATH])


def test_hostile_arguments_beyond_rabbitmq_are_kept_listed_and_exported(target: Target) -> None:
    """A binding argument nested 15,000 deep kills RabbitMQ 3.10.8's VM (segfault): not here."""
    argument_examples(target, False, deep_chain(15_000))


def test_what_the_api_made_with_long_keys_survives_a_restart(broker_process) -> None:  # type: ignore[no-untyped-def]
    """A durable queue, exchange and binding made over HTTP with a 300-character argument key: after a
    restart the broker has exactly what it answered it made (today: 500, yet all three were kept in
    memory and not in the store, so they vanish on restart)."""
    process = broker_process()
    b = process.start()
    key = "k" * 300
    made = {
        "/api/queues/%2F/attack.long": ("PUT", {"durable": True, "arguments": {key: 1}}),
        "/api/exchanges/%2F/attack.long": ("PUT", {"type": "direct", "durable": True, "arguments": {key: 1}}),
        "/api/bindings/%2F/e/attack.long/q/attack.long": (
            "POST",
            {"routing_key": "r", "arguments": {key: 1}},
        ),
    }
    answers = {path: http(b.management_url, path, method, body)[0] for path, (method, body) in made.items()}
    assert process.stop() == 0
    process.start()
    for path, status in answers.items():
        found, answer = http(b.management_url, path)
        assert status < 500, (path, status)
        if status == 201:
            kept = json.loads(answer)
            arguments = [x["arguments"] for x in kept] if isinstance(kept, list) else [kept["arguments"]]
            assert (found, arguments) == (200, [{key: 1}]), path
        else:  # refused: nothing of it, in memory or in the store
            assert found == 404 or json.loads(answer) == [], (path, found)
