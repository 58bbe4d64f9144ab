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


DECODED = programs.Decoded(
    string=lambda value: typed("String", value),
    array=lambda values: typed("Array", values),
    count_one=typed("Integer", 1),
    time_type="Time",
)


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
    programs.check_ttl_deaths(run, prefix, DECODED)
    run.self_check()


@pytest.mark.extension
def test_x_last_death_headers(run_ruby: Callable[..., ProgramRun], unique: Any) -> None:
    run = run_ruby("ttl-dlx", unique("ruby-last"))
    programs.check_last_death_headers(run)
    run.self_check()


def test_rpc_over_direct_reply_to(run_ruby: Callable[..., ProgramRun], unique: Any) -> None:
    run = run_ruby("rpc", unique("ruby-rpc"))
    assert run.data == {"reply_to_seen": True, "answers": ["OTTER", "BEAVER", "MINK"]}
    run.self_check()


def test_a_channel_error_is_bunny_not_found(
    run_ruby: Callable[..., ProgramRun], unique: Any, broker: Any
) -> None:
    run = run_ruby("channel-error", unique("ruby-error"))
    assert run.data == programs.channel_error(
        run, broker.vhost, exception="Bunny::NotFound", class_method=[50, 10]
    )
    run.self_check()


def test_automatic_recovery_across_a_broker_restart(
    ruby_client: list[str], restartable: Any, unique: Any
) -> None:
    """Bunny reconnects and recovers its exchange, transient queue, binding and consumer by itself."""
    b, restart = restartable("sigterm")
    run = programs.run_across_restart([*ruby_client, "recovery", b.url, unique("ruby-recovery")], restart)
    assert run.data == {"after": "after"}
    run.self_check()
