"""PHP clients against the broker under test: php-amqplib (Debian's ``php-amqplib`` 3.x, pure PHP) and the
php-amqp extension (Debian's ``php-amqp`` 1.11, on librabbitmq-c).

The client programs are ``e2e/php/amqplib_e2e.php`` and ``e2e/php/ext_e2e.php`` (one scenario per run, JSON
on stdout; see their headers); without PHP or a library the tests fail with the command to run
(``make clients`` runs ``.ci/install-php.sh``). Reference values are RabbitMQ 3.10's as each library decodes
them; ottermq's extra ``x-last-death-*`` headers are left out of the shared tests and asserted by an
extension test.
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

AMQPLIB = Path(__file__).parent / "php" / "amqplib_e2e.php"
EXTENSION = Path(__file__).parent / "php" / "ext_e2e.php"
AUTOLOAD = Path("/usr/share/php/PhpAmqpLib/autoload.php")


@pytest.fixture(scope="session")
def php() -> str:
    found = shutil.which("php")
    if found is None or not AUTOLOAD.exists():
        pytest.fail("PHP client tests need php and php-amqplib: run `make clients` (bash .ci/install-php.sh)")
    return found


@pytest.fixture
def run_amqplib(php: str, broker: Any) -> Callable[..., ProgramRun]:
    def run(scenario: str, prefix: str) -> ProgramRun:
        return programs.run([php, str(AMQPLIB), scenario, broker.url, prefix], scenario)

    return run


@pytest.fixture
def run_extension(php: str, broker: Any) -> Callable[..., ProgramRun]:
    has_extension = subprocess.run([php, "-r", "exit(extension_loaded('amqp') ? 0 : 1);"]).returncode == 0
    if not has_extension:
        pytest.fail("the php-amqp extension is not loaded: run `make clients` (bash .ci/install-php.sh)")

    def run(scenario: str, prefix: str) -> ProgramRun:
        return programs.run([php, str(EXTENSION), scenario, broker.url, prefix], scenario)

    return run


def typed(type_: str, value: Any) -> dict[str, Any]:
    return {"type": type_, "value": value}


def decoded(time_type: str) -> programs.Decoded:
    """How both PHP libraries decode header values; only the class of a timestamp differs."""
    return programs.Decoded(
        string=lambda value: typed("string", value),
        array=lambda values: typed("list", values),
        count_one=typed("integer", 1),
        time_type=time_type,
    )


def test_amqplib_confirms_typed_headers_and_a_manual_ack_consumer(
    run_amqplib: Callable[..., ProgramRun], unique: Any
) -> None:
    run = run_amqplib("pubsub", unique("php-pubsub"))
    data = run.data
    assert (data["confirmed"], data["nacked"], data["consumed"], data["in_order"]) == (200, 0, 200, True)
    assert (data["first_message_id"], data["first_delivery_mode"]) == ("m0", 2)
    assert data["headers"] == {
        "int": typed("integer", 42),
        "long": typed("integer", 1 << 40),
        "string": typed("string", "otter"),
        "bool": typed("boolean", True),
        "float": typed("string", "1.5"),  # php-amqplib sends a float as a decimal and reads it as a string
        "list": typed("list", [typed("string", "a"), typed("integer", 1)]),
        "table": typed("table", {"nested": typed("string", "yes")}),
    }
    run.self_check()


def test_amqplib_ttl_dead_letters_with_x_death(run_amqplib: Callable[..., ProgramRun], unique: Any) -> None:
    prefix = unique("php-ttl")
    run = run_amqplib("ttl-dlx", prefix)
    programs.check_ttl_deaths(run, prefix, decoded("DateTime"))
    run.self_check()


@pytest.mark.extension
def test_amqplib_sees_x_last_death_headers(run_amqplib: Callable[..., ProgramRun], unique: Any) -> None:
    run = run_amqplib("ttl-dlx", unique("php-last"))
    programs.check_last_death_headers(run)
    run.self_check()


@pytest.mark.parametrize("library", ["amqplib", "extension"])
def test_rpc_over_direct_reply_to(request: pytest.FixtureRequest, library: str, unique: Any) -> None:
    run = request.getfixturevalue(f"run_{library}")("rpc", unique(f"php-rpc-{library}"))
    assert run.data == {"reply_to_seen": True, "answers": ["OTTER", "BEAVER", "MINK"]}
    run.self_check()


def test_amqplib_channel_error(run_amqplib: Callable[..., ProgramRun], unique: Any, broker: Any) -> None:
    run = run_amqplib("channel-error", unique("php-error"))
    assert run.data == programs.channel_error(
        run, broker.vhost, exception="AMQPProtocolChannelException", class_method=[50, 10]
    )
    run.self_check()


# -- the php-amqp extension --------------------------------------------------------------------------------
def test_extension_confirms_typed_headers_and_a_manual_ack_consumer(
    run_extension: Callable[..., ProgramRun], unique: Any
) -> None:
    run = run_extension("pubsub", unique("phpext-pubsub"))
    data = run.data
    assert (data["confirmed"], data["nacked"], data["consumed"], data["in_order"]) == (200, 0, 200, True)
    assert (data["first_message_id"], data["first_delivery_mode"]) == ("m0", 2)
    assert data["headers"] == {
        "int": typed("integer", 42),
        "long": typed("integer", 1 << 40),
        "string": typed("string", "otter"),
        "bool": typed("boolean", True),
        "float": typed("double", 1.5),
        "list": typed("list", [typed("string", "a")]),  # the extension sends only an array's strings
        "table": typed("table", {"nested": typed("string", "yes")}),
    }
    run.self_check()


def test_extension_ttl_dead_letters_with_x_death(
    run_extension: Callable[..., ProgramRun], unique: Any
) -> None:
    prefix = unique("phpext-ttl")
    run = run_extension("ttl-dlx", prefix)
    programs.check_ttl_deaths(run, prefix, decoded("AMQPTimestamp"))
    run.self_check()


def test_extension_channel_error(run_extension: Callable[..., ProgramRun], unique: Any, broker: Any) -> None:
    run = run_extension("channel-error", unique("phpext-error"))
    assert run.data == programs.channel_error(
        run, broker.vhost, "Server channel error: 404, message: ", exception="AMQPQueueException"
    )
    run.self_check()
