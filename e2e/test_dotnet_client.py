"""The .NET RabbitMQ.Client that Debian ships, against the broker under test.

Microsoft's .NET SDK and NuGet's RabbitMQ.Client (6.x/7.x) are not in Debian's archive, PyPI or npm, so
they cannot be installed here. What Debian does ship is Mono with the RabbitMQ .NET client of the 1.x line
bundled in its class library (``libmono-rabbitmq4.0-cil``): its API is the ancestor of today's
(``ConnectionFactory``, ``IModel``, ``QueueDeclare``, ``BasicPublish``, ``EventingBasicConsumer``), and it
speaks AMQP 0-8 (its default) and 0-9, never 0-9-1. RabbitMQ 3.x serves both (``rabbit_reader``), and so
does ottermq (``amqp/legacy.py``); every scenario runs with each.

The client program is ``e2e/dotnet/OtterE2E.cs`` (one scenario per run, JSON on stdout; see its header),
compiled once per session with ``mcs``; without Mono the tests fail with the command to run (``make
clients`` runs ``.ci/install-dotnet.sh``). Reference values are RabbitMQ 3.10's as this client decodes
them: long strings arrive as ``Byte[]`` (printed as text), integers as ``Int32``/``Int64``, ``x-death``
``time`` as ``AmqpTimestamp``. ottermq's extra ``x-last-death-*`` headers are left out of the shared
test and asserted by ``test_x_last_death_headers`` (an extension).
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

SOURCE = Path(__file__).parent / "dotnet" / "OtterE2E.cs"
ASSEMBLY = Path("/usr/lib/mono/4.5/RabbitMQ.Client.dll")
PROTOCOLS = ["AMQP_0_8", "AMQP_0_9"]


@pytest.fixture(scope="session")
def dotnet_client(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """``mono OtterE2E.exe``, compiled once per session."""
    mcs, mono = shutil.which("mcs"), shutil.which("mono")
    if mcs is None or mono is None or not ASSEMBLY.exists():
        pytest.fail(
            ".NET client tests need Mono (mcs, mono) and its RabbitMQ.Client (libmono-rabbitmq4.0-cil): "
            "run `make clients` (or bash .ci/install-dotnet.sh)"
        )
    assert mcs is not None and mono is not None
    exe = tmp_path_factory.mktemp("dotnet-client") / "OtterE2E.exe"
    proc = subprocess.run(
        [mcs, "-nowarn:618", f"-r:{ASSEMBLY}", f"-out:{exe}", str(SOURCE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"mcs failed:\n{proc.stdout}\n{proc.stderr}"
    return [mono, str(exe)]


@pytest.fixture(params=PROTOCOLS)
def run_dotnet(
    request: pytest.FixtureRequest, dotnet_client: list[str], broker: Any
) -> Callable[..., ProgramRun]:
    protocol = request.param

    def run(scenario: str, prefix: str) -> ProgramRun:
        argv = [*dotnet_client, scenario, broker.url, prefix]
        result = programs.run(argv, scenario, env={"OTTER_AMQP_PROTOCOL": protocol})
        assert result.data.pop("protocol") == protocol
        return result

    return run


def typed(type_: str, value: Any) -> dict[str, Any]:
    return {"type": type_, "value": value}


DECODED = programs.Decoded(
    string=lambda value: typed("Byte[]", value),
    array=lambda values: typed("ArrayList", values),
    count_one=typed("Int64", 1),
    time_type="AmqpTimestamp",
)


def test_typed_headers_and_a_manual_ack_consumer(run_dotnet: Callable[..., ProgramRun], unique: Any) -> None:
    run = run_dotnet("pubsub", unique("dotnet-pubsub"))
    data = run.data
    assert (data["consumed"], data["in_order"]) == (200, True)
    assert (data["first_message_id"], data["first_delivery_mode"]) == ("m0", 2)
    assert data["headers"] == typed(
        "Hashtable",
        {
            "bool": typed("Boolean", True),
            "int": typed("Int32", 42),
            "list": typed("ArrayList", [typed("Byte[]", "a"), typed("Int32", 1)]),
            "long": typed("Int64", 1 << 40),
            "string": typed("Byte[]", "otter"),
            "table": typed("Hashtable", {"nested": typed("Byte[]", "yes")}),
        },
    )
    run.self_check()


def test_ttl_dead_letters_with_x_death_as_the_client_reads_it(
    run_dotnet: Callable[..., ProgramRun], unique: Any
) -> None:
    prefix = unique("dotnet-ttl")
    run = run_dotnet("ttl-dlx", prefix)
    programs.check_ttl_deaths(run, prefix, DECODED)
    run.self_check()


@pytest.mark.extension
def test_x_last_death_headers(run_dotnet: Callable[..., ProgramRun], unique: Any) -> None:
    run = run_dotnet("ttl-dlx", unique("dotnet-last"))
    programs.check_last_death_headers(run)
    run.self_check()


def test_rpc_over_direct_reply_to(run_dotnet: Callable[..., ProgramRun], unique: Any) -> None:
    run = run_dotnet("rpc", unique("dotnet-rpc"))
    assert run.data == {"reply_to_seen": True, "answers": ["OTTER", "BEAVER", "MINK"]}
    run.self_check()


def test_a_channel_error_is_an_operation_interrupted_exception(
    run_dotnet: Callable[..., ProgramRun], unique: Any, broker: Any
) -> None:
    run = run_dotnet("channel-error", unique("dotnet-error"))
    assert run.data == programs.channel_error(
        run, broker.vhost, exception="OperationInterruptedException", class_method=[50, 10]
    )
    run.self_check()
