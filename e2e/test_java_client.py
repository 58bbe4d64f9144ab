"""RabbitMQ's Java client (amqp-client 5.x, Debian's ``librabbitmq-client-java``) against the broker.

The client program is ``e2e/java/OtterE2E.java`` (one scenario per run, JSON on stdout; see its header).
It is compiled once per session with the JDK's ``javac`` against ``/usr/share/java/amqp-client.jar``;
without them the tests fail with the command to run (``make clients`` runs ``.ci/install-java.sh``).

Reference values are RabbitMQ 3.10's, as the Java client decodes them: long strings arrive as
``LongString``, ``x-death`` ``count`` as ``Long``, ``time`` as ``Date``. ottermq also writes
``x-last-death-{exchange,queue,reason}`` (as RabbitMQ 3.13+ does): the shared test leaves those names out and
``test_x_last_death_headers`` (an extension) asserts them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SOURCE = Path(__file__).parent / "java" / "OtterE2E.java"
JARS = [Path("/usr/share/java/amqp-client.jar"), Path("/usr/share/java/slf4j-api.jar")]
RUN_TIMEOUT = 30
LAST_DEATH = {"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason"}


@dataclass
class JavaRun:
    data: dict[str, Any]
    failures: list[str]
    ok: bool

    def self_check(self) -> None:
        assert self.ok and self.failures == [], self.failures


@pytest.fixture(scope="session")
def java_client(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """``java -cp ... OtterE2E``, compiled once per session."""
    javac, java = shutil.which("javac"), shutil.which("java")
    missing = [str(j) for j in JARS if not j.exists()]
    if javac is None or java is None or missing:
        pytest.fail(
            "Java client tests need a JDK (javac) and "
            f"{', '.join(missing) or 'the client jars'}: run `make clients` (or bash .ci/install-java.sh)"
        )
    assert javac is not None and java is not None
    out = tmp_path_factory.mktemp("java-client")
    classpath = ":".join(str(j) for j in JARS)
    proc = subprocess.run(
        [javac, "-d", str(out), "-cp", classpath, str(SOURCE)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"javac failed:\n{proc.stdout}\n{proc.stderr}"
    return [java, "-cp", f"{out}:{classpath}", "OtterE2E"]


def _parse(scenario: str, stdout: str, stderr: str) -> JavaRun:
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    try:
        result: dict[str, Any] = json.loads(line)
    except json.JSONDecodeError:
        pytest.fail(f"{scenario} printed no JSON:\n{stdout}\n{stderr[-3000:]}")
    if result.get("error"):
        pytest.fail(f"{scenario}: {result['error']}\n{json.dumps(result, indent=1)}\n{stderr[-3000:]}")
    return JavaRun(result["data"], result["failures"], result["ok"])


@pytest.fixture
def run_java(java_client: list[str], broker: Any) -> Callable[..., JavaRun]:
    """``run_java(scenario, prefix, url=None) -> JavaRun``; fails the test on a client error or timeout."""

    def run(scenario: str, prefix: str, url: str | None = None) -> JavaRun:
        try:
            proc = subprocess.run(
                [*java_client, scenario, url or broker.url, prefix],
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{scenario} did not exit within {RUN_TIMEOUT} s; stdout: {exc.stdout!r}")
        return _parse(scenario, proc.stdout, proc.stderr)

    return run


def string(value: str) -> dict[str, Any]:
    return {"type": "ByteArrayLongString", "value": value}


def test_confirms_typed_headers_and_a_manual_ack_consumer(
    run_java: Callable[..., JavaRun], unique: Any
) -> None:
    run = run_java("pubsub", unique("java-pubsub"))
    data = run.data
    assert (data["confirmed_by_listener"], data["nacked"]) == (200, 0)
    assert (data["consumed"], data["in_order"]) == (200, True)
    assert (data["first_message_id"], data["first_content_type"], data["first_delivery_mode"]) == (
        "m0",
        "text/plain",
        2,
    )
    assert data["headers"] == {
        "int": {"type": "Integer", "value": 42},
        "long": {"type": "Long", "value": 1 << 40},
        "string": string("otter"),
        "bool": {"type": "Boolean", "value": True},
        "double": {"type": "Double", "value": 1.5},
        "list": {"type": "ArrayList", "value": [string("a"), {"type": "Integer", "value": 1}]},
        "table": {"type": "HashMap", "value": {"nested": string("yes")}},
    }
    run.self_check()


def test_ttl_dead_letters_with_x_death_as_the_java_client_reads_it(
    run_java: Callable[..., JavaRun], unique: Any
) -> None:
    prefix = unique("java-ttl")
    run = run_java("ttl-dlx", prefix)
    by_body = {d["body"]: d for d in run.data["deaths"]}
    assert set(by_body) == {"message-ttl", "queue-ttl"}
    for body, queue in (("message-ttl", f"{prefix}.plain"), ("queue-ttl", f"{prefix}.work")):
        death = by_body[body]
        assert set(death["header_names"]) - LAST_DEATH == {
            "x-death",
            "x-first-death-exchange",
            "x-first-death-queue",
            "x-first-death-reason",
        }
        assert death["x_death_entries"] == 1 and death["x_first_death_reason"] == "expired"
        assert death["expiration_after"] is None  # the per-message expiration is removed
        fields = death["x_death"]
        assert fields["time"]["type"] == "Date" and fields["time"]["value"] > 0
        expected = {
            "count": {"type": "Long", "value": 1},
            "exchange": string(""),
            "queue": string(queue),
            "reason": string("expired"),
            "routing-keys": {"type": "ArrayList", "value": [string(queue)]},
        }
        if body == "message-ttl":
            expected["original-expiration"] = string("60")
        assert {k: v for k, v in fields.items() if k != "time"} == expected
    run.self_check()


@pytest.mark.extension
def test_x_last_death_headers(run_java: Callable[..., JavaRun], unique: Any) -> None:
    """ottermq writes x-last-death-* beside x-first-death-* (as RabbitMQ 3.13+ does; 3.10 does not)."""
    run = run_java("ttl-dlx", unique("java-last"))
    for death in run.data["deaths"]:
        assert LAST_DEATH <= set(death["header_names"])
    run.self_check()


def test_rpc_over_direct_reply_to(run_java: Callable[..., JavaRun], unique: Any) -> None:
    run = run_java("rpc", unique("java-rpc"))
    assert run.data == {"reply_to_seen": True, "answers": ["OTTER", "BEAVER", "MINK"]}
    run.self_check()


def test_a_channel_error_reaches_the_shutdown_listener(
    run_java: Callable[..., JavaRun], unique: Any, broker: Any
) -> None:
    run = run_java("channel-error", unique("java-error"))
    data = run.data
    missing = data["missing_queue"]
    assert data == {
        "missing_queue": missing,
        "exception_cause": "ShutdownSignalException",
        "hard_error": False,
        "initiated_by_application": False,
        "reply_code": 404,
        "reply_text": f"NOT_FOUND - no queue '{missing}' in vhost '{broker.vhost}'",
        "class_method": [50, 10],
        "channel_open": False,
        "connection_open": True,
        "new_channel_ok": True,
    }
    run.self_check()


def test_automatic_recovery_across_a_broker_restart(
    java_client: list[str], restartable: Any, unique: Any
) -> None:
    """The connection, its exchange, transient queue, binding and consumer come back by themselves after the
    broker restarts (SIGTERM: the broker closes the connection with 320 first)."""
    b, restart = restartable("sigterm")
    proc = subprocess.Popen(
        [*java_client, "recovery", b.url, unique("java-recovery")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        first = proc.stdout.readline()
        if first.strip() != "ready":
            proc.kill()
            out, err = proc.communicate(timeout=10)
            pytest.fail(f"recovery did not get ready: {first}{out}\n{err[-3000:]}")
        restart()
        out, err = proc.communicate("restarted\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    run = _parse("recovery", out, err)
    data = run.data
    assert data["after"] == "after"
    assert data["events"][-1] == "recovered"
    assert data["shutdown"] == "320"  # CONNECTION_FORCED, as RabbitMQ closes connections when it stops
    run.self_check()
