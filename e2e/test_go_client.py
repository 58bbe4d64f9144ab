"""amqp091-go (the Go client RabbitMQ maintains) against the broker under test.

The client program lives in ``e2e/go/src/ottermqe2e`` (one binary, one subcommand per scenario, JSON on
stdout; see its ``main.go``). It is built once per session in GOPATH mode against Debian's packages
``golang-go`` and ``golang-github-rabbitmq-amqp091-go-dev`` (``.ci/install-go.sh`` installs them): no
module proxy, no network. Without Go the tests fail with the command
to run (``make test`` installs it through ``make clients``).

Each test runs one scenario against ``broker.url`` and asserts on its JSON. The binary also checks
itself (``failures``), so a failure shows both what we expected here and what the client saw.

Reference values are RabbitMQ 3.10's: ``x-death`` entries hold exactly count/reason/queue/time/exchange/
routing-keys (+ original-expiration for per-message TTL) and the only other headers dead-lettering adds
are ``x-first-death-{exchange,queue,reason}``. ottermq also writes ``x-last-death-{exchange,queue,reason}``
as RabbitMQ 3.13+ does: the shared tests leave those three out (``without_last_death``) and the extension
test ``test_dead_letter_x_last_death_headers`` asserts them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

GO_DIR = Path(__file__).parent / "go"
GO_PACKAGE = "ottermqe2e"
DEBIAN_GOPATH = Path("/usr/share/gocode")
AMQP091_SRC = DEBIAN_GOPATH / "src/github.com/rabbitmq/amqp091-go"
BUILD_TIMEOUT = 60
RUN_TIMEOUT = 15  # the binary's own deadline is SCENARIO_TIMEOUT, its watchdog fires 2 s later
SCENARIO_TIMEOUT = "5s"


def _go_env(cache_dir: Path) -> dict[str, str]:
    """GOPATH-mode build environment: our sources plus Debian's /usr/share/gocode, nothing fetched."""
    env = dict(os.environ)
    env.update(
        GO111MODULE="off",
        GOFLAGS="",
        GOPATH=f"{GO_DIR}{os.pathsep}{DEBIAN_GOPATH}",
        GOPROXY="off",
        GOTOOLCHAIN="local",
        # The cgo resolver needs gcc; Go 1.19 would not fall back by itself.
        CGO_ENABLED="1" if shutil.which("gcc") else "0",
    )
    if not (env.get("GOCACHE") or env.get("XDG_CACHE_HOME") or env.get("HOME")):
        env["GOCACHE"] = str(cache_dir)
    return env


@pytest.fixture(scope="session")
def go_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``ottermq-e2e`` binary, built once per session."""
    go = shutil.which("go") or ("/usr/lib/go/bin/go" if Path("/usr/lib/go/bin/go").exists() else None)
    missing = []
    if go is None:
        missing.append("the go command (Debian package golang-go)")
    if not (AMQP091_SRC / "channel.go").exists():
        missing.append(f"amqp091-go sources in {AMQP091_SRC} (golang-github-rabbitmq-amqp091-go-dev)")
    if missing:
        # never a silent skip: `make test` installs them (make clients)
        pytest.fail(
            f"Go client tests need {' and '.join(missing)}; run `make clients` (or bash .ci/install-go.sh)"
        )
    assert go is not None
    out_dir = tmp_path_factory.mktemp("go-client")
    binary = out_dir / "ottermq-e2e"
    proc = subprocess.run(
        [go, "build", "-o", str(binary), GO_PACKAGE],
        cwd=GO_DIR,
        env=_go_env(out_dir / "gocache"),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    if proc.returncode != 0:
        pytest.fail(f"go build {GO_PACKAGE} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return binary


@dataclass
class GoRun:
    """One scenario's outcome: the JSON's ``data`` plus what is needed for the final self-check."""

    data: dict[str, Any]
    failures: list[str]
    ok: bool
    returncode: int
    dump: str

    def self_check(self) -> None:
        """The binary's own checks passed and it exited 0 (asserted after the tests' specific asserts)."""
        assert self.failures == [], self.dump
        assert self.returncode == 0 and self.ok, self.dump


@pytest.fixture
def run_go(go_client: Path, broker: Any) -> Callable[..., GoRun]:
    """``run_go(scenario, prefix, *flags) -> GoRun``; fails the test on a client error or timeout."""

    def _run(scenario: str, prefix: str, *flags: str) -> GoRun:
        argv = [str(go_client), scenario, "-url", broker.url, "-prefix", prefix, "-timeout", SCENARIO_TIMEOUT]
        argv += flags
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
        return GoRun(result["data"], result["failures"], result["ok"], proc.returncode, dump)

    return _run


def field(type_: str, value: Any) -> dict[str, Any]:
    """A header value the way the Go program prints it: ``{"type": <Go type>, "value": ...}``."""
    return {"type": type_, "value": value}


def string(value: str) -> dict[str, Any]:
    return field("string", value)


def not_found(kind: str, name: str, vhost: str) -> str:
    return f"NOT_FOUND - no {kind} '{name}' in vhost '{vhost}'"


# What RabbitMQ 3.10 adds when dead-lettering; 3.13 (and ottermq) also add x-last-death-*.
DEAD_LETTER_HEADERS = ["x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason"]
LAST_DEATH_HEADERS = ["x-last-death-exchange", "x-last-death-queue", "x-last-death-reason"]


def without_last_death(headers: dict[str, Any]) -> dict[str, Any]:
    """``headers`` less RabbitMQ 3.13's x-last-death-* (3.10 does not write them; ottermq does)."""
    return {k: v for k, v in headers.items() if k not in LAST_DEATH_HEADERS}


def assert_header_names(headers: dict[str, Any], expected: list[str]) -> None:
    extra, missing = sorted(set(headers) - set(expected)), sorted(set(expected) - set(headers))
    assert (extra, missing) == ([], []), f"headers {sorted(headers)}: extra {extra}, missing {missing}"


# --------------------------------------------------------------------------------------------------------
# scenarios
# --------------------------------------------------------------------------------------------------------
def test_pubsub_confirms_prefetch_manual_ack(run_go: Callable[..., GoRun], unique: Any) -> None:
    queue = unique("go-pubsub")
    run = run_go("pubsub", queue, "-count", "100", "-prefetch", "10")
    data = run.data

    assert data["declare_ok"] == {"queue": queue, "messages": 0, "consumers": 0}
    assert data["confirms"] == list(range(1, 101))
    assert data["nacks"] == 0
    assert data["ready_after_confirms"] == 100
    assert (data["prefetch_window"], data["extra_in_window"]) == (10, 0)
    assert data["received"] == 100
    for position, tag in (("first", 1), ("last", 100)):
        delivery = data[position]
        assert delivery["delivery_tag"] == tag
        assert delivery["body"] == f"msg-{tag - 1:03d}"
        assert (delivery["exchange"], delivery["routing_key"], delivery["redelivered"]) == ("", queue, False)
        assert (delivery["message_id"], delivery["content_type"]) == (f"m{tag - 1}", "text/plain")
        assert delivery["headers"] == {"seq": field("int32", tag - 1)}
    assert (data["ready_after_acks"], data["consumers_after_acks"], data["purged_on_delete"]) == (0, 1, 0)
    run.self_check()


TTL_CASES = {
    # id: (flags, x-death original-expiration, minimum time from publish to dead-letter delivery)
    "queue-ttl": (("-queue-ttl", "200"), None, 180),
    "message-expiration": (("-queue-ttl", "-1", "-expiration", "100"), "100", 80),
}


@pytest.mark.parametrize("case", list(TTL_CASES))
def test_ttl_dead_letter_x_death(run_go: Callable[..., GoRun], unique: Any, case: str) -> None:
    flags, original_expiration, min_elapsed_ms = TTL_CASES[case]
    prefix = unique("go-ttl")
    run = run_go("ttl-dlx", prefix, *flags)
    data = run.data
    names = data["names"]
    work = names["work"]

    delivery = data["delivery"]
    assert (delivery["exchange"], delivery["routing_key"]) == (names["dlx"], "dead")
    assert (delivery["body"], delivery["message_id"]) == ("expire me", "ttl-1")
    assert delivery["redelivered"] is False
    assert delivery["expiration"] == "", "per-message expiration must be removed when dead-lettering"
    assert data["elapsed_ms"] >= min_elapsed_ms

    headers = delivery["headers"]
    published = data["published_headers"]
    assert_header_names(without_last_death(headers), [*published, *DEAD_LETTER_HEADERS])
    assert {k: headers[k] for k in published} == published, "original headers must keep their types"
    assert headers["x-first-death-exchange"] == string("")
    assert headers["x-first-death-queue"] == string(work)
    assert headers["x-first-death-reason"] == string("expired")

    x_death = headers["x-death"]
    assert data["x_death"] == x_death
    assert x_death["type"] == "[]interface {}"
    assert len(x_death["value"]) == 1
    entry = x_death["value"][0]
    assert entry["type"] == "amqp091.Table"
    death = dict(entry["value"])
    death_time = death.pop("time")
    assert death_time["type"] == "time.Time"
    assert abs(death_time["value"] - data["now_unix"]) <= 30, death_time
    expected = {
        "count": field("int64", 1),
        "reason": string("expired"),
        "queue": string(work),
        "exchange": string(""),
        "routing-keys": field("[]interface {}", [string(work)]),
    }
    if original_expiration is not None:
        expected["original-expiration"] = string(original_expiration)
    assert death == expected

    assert data["work_ready_after"] == 0
    run.self_check()


@pytest.mark.extension
def test_dead_letter_x_last_death_headers(run_go: Callable[..., GoRun], unique: Any) -> None:
    """ottermq writes RabbitMQ 3.13's x-last-death-* besides 3.10's headers: after one death they name
    the same queue, reason and exchange as x-first-death-*, and amqp091-go reads them as strings."""
    run = run_go("ttl-dlx", unique("go-last-death"), *TTL_CASES["queue-ttl"][0])
    headers = run.data["delivery"]["headers"]
    work = run.data["names"]["work"]
    assert_header_names(headers, [*run.data["published_headers"], *DEAD_LETTER_HEADERS, *LAST_DEATH_HEADERS])
    assert {k: headers[k] for k in LAST_DEATH_HEADERS} == {
        "x-last-death-exchange": string(""),
        "x-last-death-queue": string(work),
        "x-last-death-reason": string("expired"),
    }
    run.self_check()


def test_return_mandatory_unroutable(run_go: Callable[..., GoRun], unique: Any) -> None:
    key = unique("go-return")
    run = run_go("return", key)
    data = run.data

    assert data["events"] == ["ack:1", "return:mandatory", "ack:2", "return:mandatory-amq.direct", "ack:3"]
    assert data["returns"] == [
        {
            "reply_code": 312,
            "reply_text": "NO_ROUTE",
            "exchange": exchange,
            "routing_key": key,
            "body": f"body of {message_id}",
            "message_id": message_id,
            "content_type": "text/plain",
            "headers": {"kind": string(message_id)},
        }
        for exchange, message_id in (("", "mandatory"), ("amq.direct", "mandatory-amq.direct"))
    ]
    run.self_check()


def test_close_notify_on_channel_error(run_go: Callable[..., GoRun], unique: Any, broker: Any) -> None:
    prefix = unique("go-close")
    run = run_go("close", prefix)
    data = run.data

    channel_error = {
        "type": "*amqp091.Error",
        "code": 404,
        "reason": not_found("queue", data["missing_queue"], broker.vhost),
        "server": True,
        "recover": True,
    }
    assert data["declare_error"] == channel_error
    assert data["notify_close"] == channel_error
    assert data["notify_closed_after"] is True
    assert data["channel_is_closed"] is True
    assert data["call_after_close_error"]["code"] == 504  # amqp.ErrClosed, raised by the client
    assert data["connection_notified"] is None
    assert data["second_channel_ok"] is True
    assert data["exchange_error"] == {
        **channel_error,
        "reason": not_found("exchange", data["missing_exchange"], broker.vhost),
    }
    assert data["graceful_close_error"] is None
    # RabbitMQ waits for the client to close the socket after Close-Ok; a broker that closes it at once
    # races amqp091-go's Close(), whose reader then reports 501 "EOF" to NotifyClose on some closes.
    assert data["graceful_closes"] == 11
    assert data["graceful_close_notified"] == [], (
        "NotifyClose got errors on graceful closes (socket closed early?)"
    )
    run.self_check()


def test_a_channel_error_crossing_the_clients_close_keeps_the_connection(
    run_go: Callable[..., GoRun], unique: Any
) -> None:
    """amqp091-go's TestChannelExceptionWithCloseIssue43 on 20 connections: the broker's 404 close of
    channel 1 and the client's close of it cross (either first); channel 2 and the connection carry on."""
    run = run_go("crossing-close", unique("go-crossing"))
    data = run.data
    assert data["rounds"] == 20
    assert data["declare_errors"] == [] and data["connection_errors"] == []
    run.self_check()


@pytest.mark.parametrize("mode", ["direct", "via-dlx"])
def test_table_roundtrip_every_field_type(run_go: Callable[..., GoRun], unique: Any, mode: str) -> None:
    flags = ("-via-dlx",) if mode == "via-dlx" else ()
    run = run_go("table-roundtrip", unique("go-table"), *flags)
    data = run.data
    fields = data["fields"]

    different = {name: f for name, f in fields.items() if not f["equal"]}
    assert different == {}, json.dumps(different, indent=1)
    got_types = {name: f["got"]["type"] for name, f in fields.items()}
    assert got_types == {
        "bool_true": "bool",
        "bool_false": "bool",
        "uint8": "uint8",
        "int8": "int8",
        "int16": "int16",
        "int": "int32",  # amqp091-go writes Go int as 'I'
        "int32": "int32",
        "int64": "int64",
        "float32": "float32",
        "float64": "float64",
        "string": "string",
        "string_empty": "string",
        "bytes": "[]uint8",
        "decimal": "amqp091.Decimal",
        "timestamp": "time.Time",
        "timestamp_ns": "time.Time",  # whole seconds on the wire
        "table": "amqp091.Table",
        "table_empty": "amqp091.Table",
        "array": "[]interface {}",
        "array_empty": "[]interface {}",
        "void": "<nil>",
    }
    if mode == "via-dlx":
        assert_header_names(without_last_death(dict.fromkeys(data["extra_headers"])), DEAD_LETTER_HEADERS)
    else:
        assert data["extra_headers"] == []
    run.self_check()


def test_update_secret_and_channel_flow(run_go: Callable[..., GoRun], unique: Any) -> None:
    """amqp091-go's UpdateSecret works; Flow(false) gets RabbitMQ 3.x's 540, which the client's own
    integration suite (TestIntegrationConsumeFlow) type-asserts to skip itself."""
    run = run_go("flow-secret", unique("go-flow"))
    data = run.data
    assert data["update_secret_error"] is None
    assert data["declare_after_update_error"] is None
    assert data["flow_true_error"] is None
    refused = {
        "type": "*amqp091.Error",
        "code": 540,
        "reason": "NOT_IMPLEMENTED - active=false",
        "server": True,
        "recover": False,
    }
    assert data["flow_false_error"] == refused
    assert data["connection_close"] == refused
    assert data["connection_is_closed"] is True
    run.self_check()


@pytest.mark.extension
def test_delayed_exchange_and_deduplication(run_go: Callable[..., GoRun], unique: Any) -> None:
    """Issue 19 with amqp091-go: delayed messages in due order with x-delay = -delay (int32), and a
    deduplicating exchange that returns a mandatory duplicate (312) yet confirms it."""
    run = run_go("delayed-dedup", unique("go-delayed"))
    data = run.data
    assert [d["body"] for d in data["delayed"]] == ["200", "400", "600"]
    assert [d["x-delay"] for d in data["delayed"]] == [
        field("int32", -200),
        field("int32", -400),
        field("int32", -600),
    ]
    assert data["acks"] == 8
    assert data["returns"] == ["312 NO_ROUTE 1:a"]
    assert data["dedup_bodies"] == ["0:a", "2:b", "3:c", "4:a"]
    run.self_check()
