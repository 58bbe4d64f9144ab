"""amqplib (the Node.js client most RabbitMQ users run) against the broker under test.

The client program is ``e2e/node/ottermq-e2e.js`` (one CLI, one subcommand per scenario under
``e2e/node/scenarios/``, JSON on stdout, the same shape and exit codes as the Go harness in ``e2e/go``).
amqplib is pinned in ``e2e/node/package.json`` and locked in ``package-lock.json``; ``.ci/install-node.sh``
runs ``npm ci`` (the npm registry is the only network it needs). Without node or the installed amqplib the
tests fail with the command to run (``make test`` installs both through ``make clients``).

Each test runs one scenario against ``broker.url`` and asserts on its JSON. The program also checks itself
(``failures``), so a failure shows both what we expected here and what the client saw.

Header values are printed as amqplib decodes them, with their JavaScript types (``e2e/node/lib/typed.js``):
every integer width is a ``number``, a timestamp ``{'!': 'timestamp', value: <seconds>}``, a table a plain
object. Reference values are RabbitMQ 3.10's: ``x-death`` entries hold exactly count/reason/queue/time/
exchange/routing-keys (+ original-expiration for per-message TTL), and dead-lettering adds only
``x-first-death-{exchange,queue,reason}`` besides. ottermq also writes ``x-last-death-*`` as RabbitMQ 3.13+
does: the shared tests leave those three out (``without_last_death``) and the extension test
``test_dead_letter_x_last_death_headers`` asserts them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pytest

from .polling import poll_until

NODE_DIR = Path(__file__).parent / "node"
CLI = NODE_DIR / "ottermq-e2e.js"
MIN_NODE_MAJOR = 18  # amqplib 2.x
RUN_TIMEOUT = 15  # the program's own deadline is SCENARIO_TIMEOUT_MS, its watchdog fires 2 s later
SCENARIO_TIMEOUT_MS = "5000"

DEAD_LETTER_HEADERS = ["x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason"]
LAST_DEATH_HEADERS = ["x-last-death-exchange", "x-last-death-queue", "x-last-death-reason"]


@pytest.fixture(scope="session")
def node_client() -> list[str]:
    """``[node, ottermq-e2e.js]``, once node and the locked amqplib are known to be installed."""
    node = shutil.which("node")
    problem = None
    if node is None:
        problem = "the node command (Node.js >= 18)"
    else:
        major = subprocess.run(
            [node, "-p", "process.versions.node.split('.')[0]"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        lock = json.loads((NODE_DIR / "package-lock.json").read_text())
        want = lock["packages"]["node_modules/amqplib"]["version"]
        installed = NODE_DIR / "node_modules/amqplib/package.json"
        have = json.loads(installed.read_text())["version"] if installed.exists() else None
        if not major.isdigit() or int(major) < MIN_NODE_MAJOR:
            problem = f"Node.js >= {MIN_NODE_MAJOR} (found {major or 'nothing'} at {node})"
        elif have != want:
            problem = f"amqplib {want} in {NODE_DIR / 'node_modules'} (found {have or 'none'})"
    if problem is not None:
        # never a silent skip: `make test` installs it (make clients)
        pytest.fail(f"Node client tests need {problem}; run `make clients` (or bash .ci/install-node.sh)")
    assert node is not None
    return [node, str(CLI)]


@dataclass
class NodeRun:
    """One scenario's outcome: the JSON's ``data`` plus what is needed for the final self-check."""

    data: dict[str, Any]
    failures: list[str]
    ok: bool
    returncode: int
    dump: str

    def self_check(self) -> None:
        """The program's own checks passed and it exited 0 (asserted after the tests' specific asserts)."""
        assert self.failures == [], self.dump
        assert self.returncode == 0 and self.ok, self.dump


@pytest.fixture
def run_node(node_client: list[str], broker: Any) -> Callable[..., NodeRun]:
    """``run_node(scenario, prefix, *flags) -> NodeRun``; fails the test on a client error or timeout."""

    def _run(scenario: str, prefix: str, *flags: str) -> NodeRun:
        argv = [*node_client, scenario, "--url", broker.url, "--prefix", prefix]
        argv += ["--timeout", SCENARIO_TIMEOUT_MS, *flags]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{scenario} did not exit within {RUN_TIMEOUT} s; stdout: {exc.stdout!r}")
        try:
            result: dict[str, Any] = json.loads(proc.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"{scenario} exited {proc.returncode} without JSON:\n{proc.stdout}\n{proc.stderr}")
        dump = json.dumps(result, indent=1, sort_keys=True)
        if result.get("error"):
            pytest.fail(f"{scenario}: {result['error']} (step: {result['step']})\n{dump}\n{proc.stderr}")
        return NodeRun(result["data"], result["failures"], result["ok"], proc.returncode, dump)

    return _run


def js(type_: str, value: Any) -> dict[str, Any]:
    """A value the way the Node program prints it: ``{"type": <JavaScript type>, "value": ...}``."""
    return {"type": type_, "value": value}


def num(value: float) -> dict[str, Any]:
    return js("number", value)


def string(value: str) -> dict[str, Any]:
    return js("string", value)


def timestamp(value: int) -> dict[str, Any]:
    """amqplib's decoding of a 'T' field: ``{'!': 'timestamp', value: <Unix seconds>}``."""
    return {"type": "object", "!": "timestamp", "value": value}


def without_last_death(headers: dict[str, Any]) -> dict[str, Any]:
    """``headers`` less RabbitMQ 3.13's x-last-death-* (3.10 does not write them; ottermq does)."""
    return {k: v for k, v in headers.items() if k not in LAST_DEATH_HEADERS}


def assert_header_names(headers: dict[str, Any], expected: list[str]) -> None:
    extra, missing = sorted(set(headers) - set(expected)), sorted(set(expected) - set(headers))
    assert (extra, missing) == ([], []), f"headers {sorted(headers)}: extra {extra}, missing {missing}"


def expected_death_headers(prefix: str, queue: str, reason: str, exchange: str = "") -> dict[str, Any]:
    """``<prefix>-{exchange,queue,reason}`` (``x-first-death`` or ``x-last-death``) as amqplib prints them."""
    return {
        f"{prefix}-exchange": string(exchange),
        f"{prefix}-queue": string(queue),
        f"{prefix}-reason": string(reason),
    }


def assert_x_death(
    x_death: dict[str, Any],
    now_unix: int,
    *,
    queue: str,
    reason: str,
    routing_keys: list[str],
    exchange: str = "",
    original_expiration: str | None = None,
) -> None:
    """x-death as amqplib gives it: an Array of one plain object with RabbitMQ 3.10's fields and types."""
    assert x_death["type"] == "Array" and len(x_death["value"]) == 1, x_death
    entry = x_death["value"][0]
    assert entry["type"] == "object" and "!" not in entry
    death = dict(entry["value"])
    death_time = death.pop("time")
    assert death_time["type"] == "object" and death_time["!"] == "timestamp", death_time
    assert isinstance(death_time["value"], int) and abs(death_time["value"] - now_unix) <= 30, death_time
    expected = {
        "count": num(1),
        "reason": string(reason),
        "queue": string(queue),
        "exchange": string(exchange),
        "routing-keys": js("Array", [string(key) for key in routing_keys]),
    }
    if original_expiration is not None:
        expected["original-expiration"] = string(original_expiration)
    assert death == expected


# --------------------------------------------------------------------------------------------------------
# scenarios
# --------------------------------------------------------------------------------------------------------
def test_callback_api_publish_consume_prefetch(run_node: Callable[..., NodeRun], unique: Any) -> None:
    queue = unique("node-callback")
    run = run_node("callback-pubsub", queue, "--count", "20", "--prefetch", "5")
    data = run.data

    assert data["declare_ok"] == {"queue": queue, "messageCount": 0, "consumerCount": 0}
    assert (data["prefetch_window"], data["extra_in_window"], data["received"]) == (5, 0, 20)
    for position, tag in (("first", 1), ("last", 20)):
        delivery = data[position]
        assert (delivery["delivery_tag"], delivery["body"], delivery["redelivered"]) == (
            tag,
            f"msg-{tag - 1:03d}",
            False,
        )
        assert (delivery["exchange"], delivery["routing_key"], delivery["consumer_tag"]) == (
            "",
            queue,
            "node-e2e-callback",
        )
        props = delivery["properties"]
        assert (props["message_id"], props["content_type"], props["delivery_mode"]) == (
            f"m{tag - 1}",
            "text/plain",
            None,
        )
        assert delivery["headers"] == {"seq": num(tag - 1), "origin": string("node-callback")}
    assert (data["ready_after_acks"], data["consumers_after_acks"]) == (0, 1)
    assert data["cancel_ok"] == {"consumerTag": "node-e2e-callback"}
    assert data["delete_ok"] == {"messageCount": 0}
    run.self_check()


def test_promise_api_topic_get_and_consume(run_node: Callable[..., NodeRun], unique: Any) -> None:
    queue = unique("node-promise")
    run = run_node("promise-pubsub", queue, "--count", "20")
    data = run.data
    exchange = data["exchange"]
    assert exchange == f"{queue}.x"

    assert data["declare_ok"] == {"queue": queue, "messageCount": 0, "consumerCount": 0}
    assert (data["published"], data["routed"]) == (20, 10)
    first = data["get_first"]
    assert (first["exchange"], first["routing_key"], first["delivery_tag"]) == (exchange, "node.0.info", 1)
    assert (first["message_count"], first["consumer_tag"], first["redelivered"]) == (9, None, False)
    assert first["body"] == json.dumps({"i": 0, "key": "node.0.info"}, separators=(",", ":"))
    assert first["properties"]["timestamp"] == 1700000000
    assert first["properties"]["content_type"] == "application/json"
    assert first["headers"] == {
        "i": num(0),
        "origin": string("node-promise"),
        "ratio": num(0.5),
        "tags": js("Array", [string("a"), num(0)]),
    }
    last = data["last"]
    assert (last["routing_key"], last["delivery_tag"], last["consumer_tag"]) == (
        "node.18.info",
        10,
        "node-e2e-promise",
    )
    assert last["headers"]["ratio"] == num(18.5)
    assert data["received"] == 9
    assert data["get_empty"] is False
    assert data["ready_after_acks"] == 0
    assert data["cancel_ok"] == {"consumerTag": "node-e2e-promise"}
    assert data["unbind_ok"] == {}
    assert data["delete_ok"] == {"messageCount": 0}
    run.self_check()


def _acked_tags(frames: list[dict[str, Any]], first: int) -> list[int]:
    """Delivery tags covered by basic.ack/nack frames (``multiple`` covers everything up to its tag)."""
    tags: list[int] = []
    for frame in frames:
        low = (tags[-1] + 1 if tags else first) if frame["multiple"] else frame["deliveryTag"]
        tags.extend(range(low, frame["deliveryTag"] + 1))
    return tags


def test_confirm_channel_wait_for_confirms(run_node: Callable[..., NodeRun], unique: Any) -> None:
    queue = unique("node-confirm")
    unique_full = f"{queue}.full"
    run = run_node("confirm", queue, "--count", "50")
    data = run.data
    assert data["full_queue"] == unique_full

    assert data["confirm_callbacks"] == [None] * 50
    assert data["wait_for_confirms"] == "resolved"
    assert data["broker_nacks"] == []
    assert _acked_tags(data["broker_acks"], 1) == list(range(1, 51))
    assert data["ready_after_confirms"] == 50

    # x-overflow reject-publish: the second message is nacked, which amqplib reports as an Error.
    overflow = data["overflow"]
    assert overflow["callbacks"] == [None, "message nacked"]
    assert overflow["outcome"] == "message nacked"
    assert _acked_tags(overflow["acks"], 51) == [51]
    assert [frame["deliveryTag"] for frame in overflow["nacks"]] == [52]
    assert overflow["ready"] == 1
    run.self_check()


def test_confirm_channel_with_many_messages_in_flight_is_multi_acked(
    run_node: Callable[..., NodeRun], unique: Any
) -> None:
    """amqplib's own "multiple confirms" test: 640 publishes in flight on a ConfirmChannel must provoke
    at least one ``basic.ack multiple=true`` (RabbitMQ acks everything settled together in one frame)."""
    run = run_node("confirm", unique("node-multi"), "--count", "640")
    data = run.data
    assert data["confirm_callbacks"] == [None] * 640
    assert data["wait_for_confirms"] == "resolved"
    assert _acked_tags(data["broker_acks"], 1) == list(range(1, 641))
    multiple = [frame for frame in data["broker_acks"] if frame["multiple"]]
    assert multiple, "no multiple=true ack for 640 messages in flight"
    assert len(data["broker_acks"]) < 640
    run.self_check()


def test_ttl_and_expiration_dead_letter_x_death(run_node: Callable[..., NodeRun], unique: Any) -> None:
    prefix = unique("node-ttl")
    run = run_node("ttl-dlx", prefix, "--queue-ttl", "200", "--expiration", "100")
    data = run.data
    names = data["names"]
    work = names["work"]

    # id: (x-death original-expiration, minimum time from publish to the dead-letter delivery)
    cases = {"per-message": ("100", 80), "queue-ttl": (None, 180)}
    assert sorted(data["deliveries"]) == sorted(cases)
    for message_id, (original_expiration, min_elapsed_ms) in cases.items():
        got = data["deliveries"][message_id]
        delivery = got["delivery"]
        assert (delivery["exchange"], delivery["routing_key"]) == (names["dlx"], "dead")
        assert delivery["body"] == f"expire me ({message_id})"
        props = delivery["properties"]
        assert (props["message_id"], props["content_type"]) == (message_id, "text/plain")
        assert props["expiration"] is None  # moved into x-death's original-expiration
        assert got["elapsed_ms"] >= min_elapsed_ms, got["elapsed_ms"]

        headers = dict(delivery["headers"])
        x_death = headers.pop("x-death")
        assert x_death == got["x_death"]
        assert_x_death(
            x_death,
            got["now_unix"],
            queue=work,
            reason="expired",
            routing_keys=[work],
            original_expiration=original_expiration,
        )
        published = data["published_headers"]
        assert published == {
            "x-e2e-origin": string("node"),
            "attempt": num(3),
            "trace": js("object", {"id": num(42)}),
        }
        first_death = expected_death_headers("x-first-death", work, "expired")
        assert without_last_death(headers) == published | first_death
    assert data["work_ready_after"] == 0
    run.self_check()


@pytest.mark.extension
def test_dead_letter_x_last_death_headers(run_node: Callable[..., NodeRun], unique: Any) -> None:
    """ottermq writes RabbitMQ 3.13's x-last-death-* besides 3.10's headers: after one death they name
    the same queue, reason and exchange as x-first-death-*, and amqplib reads them as strings."""
    run = run_node("ttl-dlx", unique("node-last-death"), "--queue-ttl", "200", "--expiration", "100")
    work = run.data["names"]["work"]
    for message_id in ("per-message", "queue-ttl"):
        headers = run.data["deliveries"][message_id]["delivery"]["headers"]
        assert {k: v for k, v in headers.items() if k.startswith("x-last-death")} == expected_death_headers(
            "x-last-death", work, "expired"
        ), message_id
    run.self_check()


def test_nack_without_requeue_dead_letters(
    run_node: Callable[..., NodeRun], unique: Any, channel: Any
) -> None:
    """The mixed test's "Node dead-letters" step alone: pika publishes, Node nacks, pika reads the DLQ."""
    work, dlq = unique("node-nack-work"), unique("node-nack-dlq")
    channel.queue_declare(dlq)
    # The default exchange as DLX, the DLQ's name as dead-letter routing key.
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    channel.confirm_delivery()
    for i in range(2):
        channel.basic_publish(
            "",
            work,
            f"reject me {i}".encode(),
            pika.BasicProperties(message_id=f"n{i}", headers={"n": i, "who": "pika", "big": 2**40}),
        )
    run = run_node("dead-letter", work, "--count", "2")
    data = run.data

    assert data["queue"] == work
    assert data["nacked"] == 2
    for i, delivery in enumerate(data["deliveries"]):
        assert (delivery["routing_key"], delivery["delivery_tag"]) == (work, i + 1)
        assert delivery["redelivered"] is False
        assert delivery["properties"]["message_id"] == f"n{i}"
        assert delivery["headers"] == {"n": num(i), "who": string("pika"), "big": num(2**40)}
    assert (data["ready_after"], data["consumers_after"]) == (0, 0)
    run.self_check()

    def get_one() -> Any:
        method, props, body = channel.basic_get(dlq, auto_ack=True)
        return (method, props, body) if method is not None else None

    for i in range(2):
        method, props, body = poll_until(get_one, what=f"dead letter {i} in {dlq}")
        assert (method.exchange, method.routing_key, body) == ("", dlq, f"reject me {i}".encode())
        headers = dict(props.headers)
        assert_header_names(without_last_death(headers), ["n", "who", "big", *DEAD_LETTER_HEADERS])
        assert (headers["n"], headers["who"], headers["big"]) == (i, "pika", 2**40)
        (death,) = headers["x-death"]
        assert abs(death.pop("time").timestamp() - time.time()) <= 30
        assert death == {
            "count": 1,
            "reason": "rejected",
            "queue": work,
            "exchange": "",
            "routing-keys": [work],
        }
        assert headers["x-first-death-reason"] == "rejected"
