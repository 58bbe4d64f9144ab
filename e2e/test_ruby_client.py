"""Bunny (Debian's ``ruby-bunny`` 2.19, the Ruby client) against the broker under test.

The client program is ``e2e/ruby/otter_e2e.rb`` (one scenario per run, JSON on stdout; see its header);
without Ruby or Bunny the tests fail with the command to run (``make clients`` runs ``.ci/install-ruby.sh``).
Reference values are RabbitMQ 3.10's as Bunny decodes them; ottermq's extra ``x-last-death-*`` headers are
left out of the shared test and asserted by ``test_x_last_death_headers`` (an extension).
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

PROGRAM = Path(__file__).parent / "ruby" / "otter_e2e.rb"
LAST_DEATH = {"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason"}


@pytest.fixture(scope="session")
def ruby_client() -> list[str]:
    ruby = shutil.which("ruby")
    found = (
        ruby is not None
        and subprocess.run([ruby, "-e", 'require "bunny"'], capture_output=True).returncode == 0
    )
    if not found:
        pytest.fail("Ruby client tests need ruby and Bunny: run `make clients` (or bash .ci/install-ruby.sh)")
    assert ruby is not None
    return [ruby, str(PROGRAM)]


@pytest.fixture
def run_ruby(ruby_client: list[str], broker: Any) -> Callable[..., ProgramRun]:
    def run(scenario: str, prefix: str) -> ProgramRun:
        return programs.run([*ruby_client, scenario, broker.url, prefix], scenario)

    return run


def typed(type_: str, value: Any) -> dict[str, Any]:
    return {"type": type_, "value": value}


def test_confirms_typed_headers_and_a_manual_ack_consumer(
    run_ruby: Callable[..., ProgramRun], unique: Any
) -> None:
    run = run_ruby("pubsub", unique("ruby-pubsub"))
    data = run.data
    assert (data["confirmed"], data["nacked"], data["consumed"], data["in_order"]) == (True, 0, 200, True)
    assert (data["first_message_id"], data["first_delivery_mode"]) == ("m0", 2)
    assert data["headers"] == {
        "int": typed("Integer", 42),
        "long": typed("Integer", 1 << 40),
        "string": typed("String", "otter"),
        "bool": typed("TrueClass", True),
        "float": typed("Float", 1.5),
        "list": typed("Array", [typed("String", "a"), typed("Integer", 1)]),
        "table": typed("Hash", {"nested": typed("String", "yes")}),
    }
    run.self_check()


def test_ttl_dead_letters_with_x_death_as_bunny_reads_it(
    run_ruby: Callable[..., ProgramRun], unique: Any
) -> None:
    prefix = unique("ruby-ttl")
    run = run_ruby("ttl-dlx", prefix)
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
        assert death["x_death_entries"] == 1 and death["expiration_after"] is None
        fields = death["x_death"]
        assert fields.pop("time")["type"] == "Time"
        expected = {
            "count": typed("Integer", 1),
            "exchange": typed("String", ""),
            "queue": typed("String", queue),
            "reason": typed("String", "expired"),
            "routing-keys": typed("Array", [typed("String", queue)]),
        }
        if body == "message-ttl":
            expected["original-expiration"] = typed("String", "60")
        assert fields == expected
    run.self_check()


@pytest.mark.extension
def test_x_last_death_headers(run_ruby: Callable[..., ProgramRun], unique: Any) -> None:
    run = run_ruby("ttl-dlx", unique("ruby-last"))
    for death in run.data["deaths"]:
        assert LAST_DEATH <= set(death["header_names"])
    run.self_check()


def test_rpc_over_direct_reply_to(run_ruby: Callable[..., ProgramRun], unique: Any) -> None:
    run = run_ruby("rpc", unique("ruby-rpc"))
    assert run.data == {"reply_to_seen": True, "answers": ["OTTER", "BEAVER", "MINK"]}
    run.self_check()


def test_a_channel_error_is_bunny_not_found(
    run_ruby: Callable[..., ProgramRun], unique: Any, broker: Any
) -> None:
    run = run_ruby("channel-error", unique("ruby-error"))
    missing = run.data["missing_queue"]
    assert run.data == {
        "missing_queue": missing,
        "exception": "Bunny::NotFound",
        "reply_code": 404,
        "reply_text": f"NOT_FOUND - no queue '{missing}' in vhost '{broker.vhost}'",
        "class_method": [50, 10],
        "channel_open": False,
        "connection_open": True,
        "new_channel_ok": True,
    }
    run.self_check()


def test_automatic_recovery_across_a_broker_restart(
    ruby_client: list[str], restartable: Any, unique: Any
) -> None:
    """Bunny reconnects and recovers its exchange, transient queue, binding and consumer by itself."""
    b, restart = restartable("sigterm")
    run = programs.run_across_restart([*ruby_client, "recovery", b.url, unique("ruby-recovery")], restart)
    assert run.data == {"after": "after"}
    run.self_check()
