"""Hostile headers and arguments through every broker-side path that reads or rewrites them (issue 38,
item 7; ``make attack`` runs it longer).

A Hypothesis generator (``e2e/hostile.py``) draws headers tables of extreme integers of every AMQP
type, special floats and decimals, tables and arrays nested up to what fits in one frame (15,000+
levels), thousands of keys, odd strings and keys (NUL, invalid UTF-8, 255 octets) and malformed
``x-death`` (counts at 2^63-1 and -2^63 for the very queue and reason the message dies in, counts of
the wrong type, entries that are no table or lack ``queue``/``reason``, hundreds of deaths). Each
example publishes one hostile message with publisher confirms over a raw socket (no client library
could encode it), then ``ORDINARY`` ordinary ones, and sends them down one path:

    expired_message   per-message ``expiration`` into a dead-letter queue
    expired_queue     ``x-message-ttl``
    rejected          ``basic.reject`` requeue=false, one by one
    nacked            ``basic.nack`` multiple=true requeue=false
    drop_head         ``x-max-length`` 1, ``drop-head``, hostile message at the head
    reject_publish    ``x-max-length`` 1, ``reject-publish-dlx`` (the publisher is nacked; the
                      refused messages are dead-lettered, and are owed at most once)
    delivery_limit    a quorum queue's ``x-delivery-limit``
    headers_exchange  routed by a headers exchange matching on the message's headers
    consistent_hash   routed by an ``x-consistent-hash`` exchange hashing one of its headers
    requeued          ``basic.nack`` requeue=true, back into the queue
    (extension)       delayed_retry (``x-delayed-retry-*``), moves (``POST
                      /api/dead-letters/{vhost}/{queue}/moves`` back to a queue), dropped (a
                      dead-letter exchange without bindings: the archive must hold them),
                      delayed_exchange (``x-delayed-message``)

After each example the invariant of ``e2e/attack_case.py``: every confirmed message once in a
queue, consumed or archived as dropped; no 5xx from the management reads (queue, ``/get``, the
dead-letter views, definitions export, Prometheus); the pinger's worst round trip under 250 ms (and
the broker's ``ottermq_event_loop_lag_seconds`` when it has it); no 541.

Two tests per path: the unmarked one draws only values RabbitMQ 3.10.8 survives (``rabbit_safe``,
see ``e2e/hostile.py``: RabbitMQ itself loses a queue's messages on some malformed ``x-death``) and
passes there too; the ``extension`` one draws everything. Both always try the two known stalls of
the issue first (``x-death`` count 2^63-1 for this queue and reason; a table nested 15,000 deep).
A value that breaks the invariant is a finding: kept, not raised, so one run reports each path's
failures; they are written to ``ATTACK_FINDINGS`` when set and the test fails at the end.

Settings: ``ATTACK_EXAMPLES`` drawn examples per test (default 3, CI), ``ATTACK_SEED`` (default 0;
``random`` for a new one), ``ATTACK_ORDINARY`` ordinary messages per example (default 5),
``ATTACK_LAG_LIMIT_MS`` (250).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator

import pytest

from .attack_case import Case, Findings, Target, open_target
from .attack_checks import http
from .attack_paths import PATHS, BrokerPath, argument_examples, run_examples
from .hostile import deep_chain


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with open_target(tmp_path_factory.mktemp("attack")) as t:
        yield t


@pytest.mark.parametrize("path", [p for p in PATHS if p.rabbitmq], ids=lambda p: p.name)
def test_hostile_headers_keep_every_message(target: Target, path: BrokerPath) -> None:
    run_examples(target, path, True, Findings(f"headers/{path.name}"), [])


def test_hostile_arguments_are_kept_listed_and_exported(target: Target) -> None:
    argument_examples(target, True, deep_chain(2_000))


@pytest.mark.parametrize("length", [255, 256, 300])
def test_long_keys_over_http_are_kept(target: Target, length: int) -> None:
    """A key of 255, 256 or 300 characters in an HTTP queue, exchange and binding argument: RabbitMQ
    answers 201, lists the key and exports it. A published header of 255 characters goes through and
    comes back over HTTP. (A longer header key cannot cross AMQP: RabbitMQ accepts such an HTTP
    publish and then closes with 541 every connection handed the message; ottermq refuses the publish
    with 400, an extension tested in test_long_argument_keys.py, so that length is not asserted here.)"""
    b = target.broker
    case = Case(target, f"{length}-character keys over HTTP")
    key = "k" * length
    v = urllib.parse.quote(b.vhost, safe="")
    name = case.name("q")
    case.queues.append(name)
    case.exchanges.append(name)
    args = {key: 1}
    assert (
        http(b.management_url, f"/api/queues/{v}/{name}", "PUT", {"durable": True, "arguments": args})[0]
        == 201
    )
    exchange = {"type": "direct", "durable": True, "arguments": args}
    assert http(b.management_url, f"/api/exchanges/{v}/{name}", "PUT", exchange)[0] == 201
    binding = {"routing_key": "r", "arguments": args}
    assert http(b.management_url, f"/api/bindings/{v}/e/{name}/q/{name}", "POST", binding)[0] == 201
    for path in (f"/api/queues/{v}/{name}", f"/api/exchanges/{v}/{name}"):
        status, answer = http(b.management_url, path)
        assert status == 200 and json.loads(answer)["arguments"] == args, (path, status, answer[:200])
    status, answer = http(b.management_url, f"/api/bindings/{v}/e/{name}/q/{name}")
    assert status == 200 and [x["arguments"] for x in json.loads(answer)] == [args]
    message = {
        "properties": {"headers": {key: "v"}},
        "routing_key": "r",
        "payload": "m",
        "payload_encoding": "string",
    }
    if length <= 255:
        status, answer = http(b.management_url, f"/api/exchanges/{v}/{name}/publish", "POST", message)
        assert (status, json.loads(answer)) == (200, {"routed": True})
        take = {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}
        status, answer = http(b.management_url, f"/api/queues/{v}/{name}/get", "POST", take)
        assert status == 200 and [m["properties"]["headers"] for m in json.loads(answer)] == [{key: "v"}]
    status, answer = http(b.management_url, f"/api/definitions/{v}")
    assert status == 200 and [q["arguments"] for q in json.loads(answer)["queues"] if q["name"] == name] == [
        args
    ]
    assert case.verdict() == []
