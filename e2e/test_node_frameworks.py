"""rascal and amqp-connection-manager, two Node.js frameworks built on amqplib, against the broker under test.

The client program is ``e2e/node/ottermq-e2e.js`` (the CLI of ``e2e/test_node_client.py``); the scenarios
are ``e2e/node/scenarios/rascal-*.js`` and ``acm-restart.js``, each described at its top. rascal 21 and
amqp-connection-manager 5 are pinned beside amqplib in ``e2e/node/package.json`` and locked in
``package-lock.json``; ``.ci/install-node.sh`` installs all three (``make clients``). Without them the tests
fail with that command.

rascal declares its own topology from config and layers recovery on top of the broker's features:

* redelivery limits: rascal counts deliveries the broker flags ``redelivered`` (a counter keyed
  ``<subscription>/<message id>``); a handler that nacks with requeue sees the message limit+1 times, then
  rascal's ``redeliveries_exceeded`` recovery forwards it to a dead-letter exchange;
* delayed retries (rascal's documented loop): a forward to a wait queue with ``x-message-ttl`` and
  ``x-dead-letter-exchange`` routes back to the work queue by the CC routing key rascal adds; the broker
  dead-letters with every routing key, CC included, and counts repeated deaths in one ``x-death`` entry;
* a DLX from queue options: ``nack`` without requeue, and "republish with immediate nack", whose replay from
  the DLQ only works if rascal reads back the ``x-death`` count the broker wrote.

amqp-connection-manager reconnects by itself: the test restarts the broker (``restartable``: a private
ottermq process stopped with SIGTERM, or the local RabbitMQ via ``rabbitmqctl stop_app``/``start_app``)
while the program waits, then checks that it reconnected once, re-ran its setup, re-consumed, and got every
message published after the restart exactly once.

Reference values are RabbitMQ 3.10's: a nack with requeue comes back with ``redelivered`` set; ``x-death``
entries hold count/reason/queue/time/exchange/routing-keys, newest first, and a second death from the same
queue for the same reason increments that entry's ``count`` and moves it first (its other fields stay);
``x-first-death-*`` name the first death; dead letters keep their ``CC`` header and routing keys; a broker
stopping closes connections with 320 ``CONNECTION_FORCED - broker forced connection closure with reason
'shutdown'``. ottermq's ``x-last-death-*`` (RabbitMQ 3.13's) are left out here (``without_last_death``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from . import client_programs as programs
from .test_node_client import (  # noqa: F401 - node_client: the session fixture (node + the locked amqplib)
    DEAD_LETTER_HEADERS,
    NODE_DIR,
    NodeRun,
    assert_header_names,
    assert_x_death,
    expected_death_headers,
    js,
    node_client,
    num,
    run_node,
    string,
    without_last_death,
)

FRAMEWORKS = ("rascal", "amqp-connection-manager")
RESTART_TIMEOUT_MS = "60000"  # the acm-restart program's deadline, restart included (rabbitmqctl is slow)
SHUTDOWN_CLOSE = (
    "Connection closed: 320 (CONNECTION-FORCED) with message "
    "\"CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'\""
)


@pytest.fixture(scope="session")
def node_frameworks(node_client: list[str]) -> list[str]:  # noqa: F811
    """``[node, ottermq-e2e.js]``, once rascal and amqp-connection-manager are installed as locked."""
    lock = json.loads((NODE_DIR / "package-lock.json").read_text())
    for package in FRAMEWORKS:
        want = lock["packages"][f"node_modules/{package}"]["version"]
        installed = NODE_DIR / "node_modules" / package / "package.json"
        have = json.loads(installed.read_text())["version"] if installed.exists() else None
        if have != want:
            pytest.fail(
                f"Node framework tests need {package} {want} in {NODE_DIR / 'node_modules'} (found "
                f"{have or 'none'}); run `make clients` (or bash .ci/install-node.sh)"
            )
    return node_client


@pytest.fixture
def run_framework(node_frameworks: list[str], run_node: Callable[..., NodeRun]) -> Callable[..., NodeRun]:  # noqa: F811
    """``run_node`` (test_node_client.py) once the frameworks are known to be installed."""
    return run_node


def entries(x_death: dict[str, Any]) -> list[dict[str, Any]]:
    """x-death as amqplib gives it (an Array of plain objects), each entry's fields as printed."""
    assert x_death["type"] == "Array", x_death
    for entry in x_death["value"]:
        assert entry["type"] == "object" and "!" not in entry, entry
    return [dict(entry["value"]) for entry in x_death["value"]]


def death(count: int, reason: str, queue: str, exchange: str, routing_keys: list[str]) -> dict[str, Any]:
    """One x-death entry without its ``time``, as amqplib prints it."""
    return {
        "count": num(count),
        "reason": string(reason),
        "queue": string(queue),
        "exchange": string(exchange),
        "routing-keys": js("Array", [string(key) for key in routing_keys]),
    }


def without_time(entry: dict[str, Any], now_unix: int) -> dict[str, Any]:
    """``entry`` less its ``time``, which must be an AMQP timestamp within 30 s of ``now_unix``."""
    entry = dict(entry)
    time = entry.pop("time")
    assert time["type"] == "object" and time["!"] == "timestamp", time
    assert isinstance(time["value"], int) and abs(time["value"] - now_unix) <= 30, time
    return entry


# --------------------------------------------------------------------------------------------------------
# rascal
# --------------------------------------------------------------------------------------------------------
def test_rascal_redelivery_limit_forwards_to_a_dead_letter_exchange(
    run_framework: Callable[..., NodeRun], unique: Any
) -> None:
    limit = 3
    run = run_framework("rascal-redeliveries", unique("rascal-redeliveries"), "--limit", str(limit))
    data = run.data
    names = data["names"]

    def attempts(message_id: str) -> list[tuple[int, bool]]:
        return [
            (a["redeliveries"], a["redelivered"]) for a in data["attempts"] if a["message_id"] == message_id
        ]

    # every nack+requeue comes back flagged redelivered, and only those are counted
    assert attempts("m1") == [(0, False)] + [(n, True) for n in range(1, limit + 1)]
    assert attempts("m2") == [(0, False), (1, True)]
    assert {a["body"] for a in data["attempts"]} == {"m1 body", "m2 body"}
    exceeded = f"Message m1 has exceeded {limit} redeliveries"
    assert data["exceeded"] == [
        {"message_id": "m1", "redeliveries": limit + 1, "redelivered": True, "error": exceeded}
    ]
    # the counter is asked once per redelivery, keyed "<subscription>/<message id>"
    counted = [("work/m1", n) for n in range(1, limit + 2)] + [("work/m2", 1)]
    assert sorted(map(tuple, data["counter"])) == counted
    assert data["acked"] == ["m2"]

    (dead,) = data["dead"]
    assert (dead["exchange"], dead["routing_key"], dead["body"], dead["redelivered"]) == (
        names["dead"],
        "task",
        "m1 body",
        False,
    )
    props = dead["properties"]
    assert (props["message_id"], props["content_type"], props["delivery_mode"]) == ("m1", "text/plain", 2)
    # rascal's forward adds the CC "<queue>.<routing key>"; the broker keeps the CC header on the message
    assert dead["headers"] == {"CC": js("Array", [string(f"{names['work']}.task")])}
    table = dead["rascal"]
    assert table["error"] == {"message": exceeded}
    assert table["recovery"] == {names["work"]: {"forwarded": 1}}
    assert (table["originalExchange"], table["originalRoutingKey"]) == (names["x"], "task")
    assert data["ready_after"] == {names["work"]: 0, names["dlq"]: 0}
    run.self_check()


def test_rascal_delayed_retry_through_a_ttl_wait_queue(
    run_framework: Callable[..., NodeRun], unique: Any
) -> None:
    delay_ms, attempts = 200, 3
    prefix = unique("rascal-delayed-retry")
    run = run_framework("rascal-delayed-retry", prefix, "--delay", str(delay_ms), "--attempts", str(attempts))
    data = run.data
    names = data["names"]
    work, wait = names["work"], names["wait"]
    # the message's routing keys: its own, then the CCs (the publication's, then rascal's)
    keys = ["task", "delay", f"{work}.task"]
    now = data["now_unix"]

    calls = data["calls"]
    assert [(c["message_id"], c["forwarded"]) for c in calls] == [("r1", n) for n in range(attempts + 1)]
    assert len(data["gaps_ms"]) == attempts
    assert all(gap >= delay_ms for gap in data["gaps_ms"]), data["gaps_ms"]
    assert calls[0]["x_death"] == {"type": "undefined", "value": None}
    for n, call in enumerate(calls[1:], start=1):
        (entry,) = entries(call["x_death"])
        assert without_time(entry, now) == death(n, "expired", wait, names["delay"], keys), n

    (dead,) = data["dead"]
    assert (dead["body"], dead["properties"]["message_id"]) == ("retry me", "r1")
    headers = without_last_death(dead["headers"])
    assert_header_names(headers, ["CC", *DEAD_LETTER_HEADERS])
    assert headers["CC"] == js("Array", [string("delay"), string(f"{work}.task")])
    rejected, expired = entries(headers["x-death"])
    # newest first: the final nack from the work queue (reached through the retry exchange), then the
    # wait queue's entry counting every expiry
    assert without_time(rejected, now) == death(1, "rejected", work, names["retry"], keys)
    assert without_time(expired, now) == death(attempts, "expired", wait, names["delay"], keys)
    assert {k: v for k, v in headers.items() if k.startswith("x-first-death")} == expected_death_headers(
        "x-first-death", wait, "expired", names["delay"]
    )
    table = dead["rascal"]
    assert table["recovery"] == {work: {"forwarded": attempts}}
    assert table["error"] == {"message": f"attempt {attempts} failed"}
    assert data["ready_after"] == {work: 0, wait: 0, names["dlq"]: 0}
    run.self_check()


def test_rascal_dead_letter_queue_from_queue_arguments(
    run_framework: Callable[..., NodeRun], unique: Any
) -> None:
    run = run_framework("rascal-dead-letter", unique("rascal-dead-letter"))
    data = run.data
    names = data["names"]
    work, now = names["work"], data["now_unix"]
    assert [(w["message_id"], w["attempt"]) for w in data["work"]] == [("m1", 1), ("m2", 1), ("m2", 2)]

    m1, m2 = data["dead"]
    # m1: nack without requeue, dead-lettered with its own exchange and routing key
    assert (m1["properties"]["message_id"], m1["exchange"], m1["routing_key"], m1["body"]) == (
        "m1",
        names["dlx"],
        "task",
        "m1 body",
    )
    headers = without_last_death(m1["headers"])
    assert_header_names(headers, ["origin", *DEAD_LETTER_HEADERS])
    assert headers["origin"] == string("rascal")
    assert_x_death(
        headers["x-death"], now, queue=work, reason="rejected", routing_keys=["task"], exchange=names["x"]
    )
    assert {k: v for k, v in headers.items() if k.startswith("x-first-death")} == expected_death_headers(
        "x-first-death", work, "rejected", names["x"]
    )

    # m2: republished to the work queue through the default exchange, nacked there unseen by the handler
    assert (m2["properties"]["message_id"], m2["exchange"], m2["routing_key"], m2["body"]) == (
        "m2",
        names["dlx"],
        work,
        "m2 body",
    )
    headers = without_last_death(m2["headers"])
    assert_header_names(headers, ["origin", *DEAD_LETTER_HEADERS])
    assert_x_death(headers["x-death"], now, queue=work, reason="rejected", routing_keys=[work], exchange="")
    assert {k: v for k, v in headers.items() if k.startswith("x-first-death")} == expected_death_headers(
        "x-first-death", work, "rejected", ""
    )
    table = m2["rascal"]
    assert table["recovery"] == {work: {"immediateNack": True, "xDeath": {"count": 0, "time": {"value": 0}}}}
    assert table["error"] == {"message": "m2 is rejected"}
    assert (table["originalExchange"], table["originalRoutingKey"]) == (names["x"], "task")

    # replayed from the DLQ: rascal saw the broker's x-death count go up and let the handler have it
    replay = data["work"][2]["seen"]
    assert replay["headers"]["x-death"] == m2["headers"]["x-death"]
    assert replay["rascal"]["recovery"] == {work: {}}
    assert data["ready_after"] == {work: 0, names["dlq"]: 0}
    run.self_check()


# --------------------------------------------------------------------------------------------------------
# amqp-connection-manager
# --------------------------------------------------------------------------------------------------------
def test_amqp_connection_manager_reconnects_across_a_broker_restart(
    node_frameworks: list[str], restartable: Any, unique: Any
) -> None:
    b, restart = restartable("sigterm")
    before, after = 5, 5
    argv = [*node_frameworks, "acm-restart", "--url", b.url, "--prefix", unique("acm-restart")]
    argv += ["--timeout", RESTART_TIMEOUT_MS, "--before", str(before), "--after", str(after)]
    run = programs.run_across_restart(argv, restart, timeout=90)
    data = run.data

    assert data["received_before_restart"] == before
    assert data["declare_before"] == {"messageCount": 0, "consumerCount": 1}
    want = [f"before-{i}" for i in range(before)] + [f"after-{i}" for i in range(after)]
    assert data["received"] == [{"body": body, "redelivered": False} for body in want]
    assert data["confirmed_after"] == after
    # one disconnect (the broker's 320 on shutdown), one reconnect, the setup and the consumer again
    assert data["disconnects"] == [{"code": 320, "message": SHUTDOWN_CLOSE}]
    assert (data["connects"], data["setups"], data["wrapper_connects"]) == (2, 2, 2)
    assert data["declare_after"] == {"messageCount": 0, "consumerCount": 1}
    assert data["delete_ok"] == {"messageCount": 0}
    run.self_check()
