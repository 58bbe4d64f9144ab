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

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from . import client_programs as programs
from .client_programs import ProgramRun

SOURCE = Path(__file__).parent / "java" / "OtterE2E.java"
JARS = [Path("/usr/share/java/amqp-client.jar"), Path("/usr/share/java/slf4j-api.jar")]


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


@pytest.fixture
def run_java(java_client: list[str], broker: Any) -> Callable[..., ProgramRun]:
    """``run_java(scenario, prefix, url=None) -> ProgramRun``; fails the test on a client error or timeout."""

    def run(scenario: str, prefix: str, url: str | None = None) -> ProgramRun:
        return programs.run([*java_client, scenario, url or broker.url, prefix], scenario)

    return run


def string(value: str) -> dict[str, Any]:
    return {"type": "ByteArrayLongString", "value": value}


DECODED = programs.Decoded(
    string=string,
    array=lambda values: {"type": "ArrayList", "value": values},
    count_one={"type": "Long", "value": 1},
    time_type="Date",
)


def test_confirms_typed_headers_and_a_manual_ack_consumer(
    run_java: Callable[..., ProgramRun], unique: Any
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
    run_java: Callable[..., ProgramRun], unique: Any
) -> None:
    prefix = unique("java-ttl")
    run = run_java("ttl-dlx", prefix)
    for death in programs.check_ttl_deaths(run, prefix, DECODED).values():
        assert death["x_first_death_reason"] == "expired"
        assert death["x_death"]["time"]["value"] > 0
    run.self_check()


@pytest.mark.extension
def test_x_last_death_headers(run_java: Callable[..., ProgramRun], unique: Any) -> None:
    run = run_java("ttl-dlx", unique("java-last"))
    programs.check_last_death_headers(run)
    run.self_check()


def test_rpc_over_direct_reply_to(run_java: Callable[..., ProgramRun], unique: Any) -> None:
    run = run_java("rpc", unique("java-rpc"))
    assert run.data == {"reply_to_seen": True, "answers": ["OTTER", "BEAVER", "MINK"]}
    run.self_check()


def test_a_channel_error_reaches_the_shutdown_listener(
    run_java: Callable[..., ProgramRun], unique: Any, broker: Any
) -> None:
    run = run_java("channel-error", unique("java-error"))
    assert run.data == programs.channel_error(
        run,
        broker.vhost,
        exception_cause="ShutdownSignalException",
        hard_error=False,
        initiated_by_application=False,
        class_method=[50, 10],
    )
    run.self_check()


def test_automatic_recovery_across_a_broker_restart(
    java_client: list[str], restartable: Any, unique: Any
) -> None:
    """The connection, its exchange, transient queue, binding and consumer come back by themselves after the
    broker restarts (SIGTERM: the broker closes the connection with 320 first)."""
    b, restart = restartable("sigterm")
    run = programs.run_across_restart([*java_client, "recovery", b.url, unique("java-recovery")], restart)
    data = run.data
    assert data["after"] == "after"
    assert data["events"][-1] == "recovered"
    assert data["shutdown"] == "320"  # CONNECTION_FORCED, as RabbitMQ closes connections when it stops
    run.self_check()
