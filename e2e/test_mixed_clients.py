"""One message through three client libraries: Go publishes, Python consumes, Node dead-letters, Python reads.

1. pika declares a fanout DLX, a DLQ bound to it, and a work queue whose x-dead-letter-exchange is the DLX.
2. amqp091-go (``e2e/go`` subcommand ``publish``) publishes one confirmed, mandatory message to the work
   queue: its headers hold every field type amqp091-go writes (t B b s I l f d S x D T F A V), every basic
   property is set but expiration, and the 200,000-byte body spans several body frames.
3. pika consumes it, checks it, cancels its consumer and rejects the delivery with requeue=True.
4. amqplib (``e2e/node`` subcommand ``dead-letter``) consumes the redelivered message and calls
   ``nack(msg, false, false)``, so the broker dead-letters it through the DLX.
5. pika reads the DLQ: the headers the publisher sent are there with the same AMQP type tags and values,
   body and other properties are the same, and the broker added only RabbitMQ 3.10's x-death (count 'l',
   time 'T', routing-keys an 'A' of 'S') and x-first-death-*. ottermq also adds x-last-death-* (as 3.13
   does): this test leaves them out and the extension test below checks their tags and values.

pika decodes header tables lossily (every integer width is an int, and pika 1.4 truncates 'f'/'d' floats to
ints), so the type tags are read from the raw content-header bytes that pika received: the test wraps
``pika.spec.BasicProperties.decode`` to keep them and decodes the headers table with ``tagged_table``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pika.spec
import pytest

from .polling import poll_until

E2E = Path(__file__).parent
GO_DIR = E2E / "go"
GO_PACKAGE = "ottermqe2e"
AMQP091_SRC = Path("/usr/share/gocode/src/github.com/rabbitmq/amqp091-go")
NODE_DIR = E2E / "node"
RUN_TIMEOUT = 15
BODY_SIZE = 200_000  # > RabbitMQ's and ottermq's 128 KiB frame_max: several body frames each way

DEAD_LETTER_HEADERS = ["x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason"]
LAST_DEATH_HEADERS = ["x-last-death-exchange", "x-last-death-queue", "x-last-death-reason"]


def _missing(message: str) -> None:
    """Never a silent skip: `make test` installs both clients (`make clients`)."""
    pytest.fail(f"{message} (or run `make clients`)")


# --------------------------------------------------------------------------------------------------------
# the two client programs (the build and install checks of test_go_client.py / test_node_client.py;
# fixtures cannot be imported between test modules under --import-mode=importlib)
# --------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def go_publisher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``ottermq-e2e`` Go binary (GOPATH mode against Debian's amqp091-go, no network)."""
    go = shutil.which("go") or ("/usr/lib/go/bin/go" if Path("/usr/lib/go/bin/go").exists() else None)
    if go is None or not (AMQP091_SRC / "channel.go").exists():
        _missing("the mixed-client test needs go and Debian's amqp091-go sources; run .ci/install-go.sh")
    assert go is not None
    out_dir = tmp_path_factory.mktemp("go-mixed")
    env = dict(os.environ)
    env.update(
        GO111MODULE="off",
        GOFLAGS="",
        GOPATH=f"{GO_DIR}{os.pathsep}/usr/share/gocode",
        GOPROXY="off",
        GOTOOLCHAIN="local",
        CGO_ENABLED="1" if shutil.which("gcc") else "0",
    )
    if not (env.get("GOCACHE") or env.get("XDG_CACHE_HOME") or env.get("HOME")):
        env["GOCACHE"] = str(out_dir / "gocache")
    binary = out_dir / "ottermq-e2e"
    proc = subprocess.run(
        [go, "build", "-o", str(binary), GO_PACKAGE],
        cwd=GO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        pytest.fail(f"go build {GO_PACKAGE} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return binary


@pytest.fixture(scope="session")
def node_cli() -> list[str]:
    """``[node, e2e/node/ottermq-e2e.js]`` once amqplib is installed."""
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules/amqplib/package.json").exists():
        _missing(
            "the mixed-client test needs node and amqplib in e2e/node/node_modules; run .ci/install-node.sh"
        )
    assert node is not None
    return [node, str(NODE_DIR / "ottermq-e2e.js")]


def run_program(argv: list[str], what: str) -> dict[str, Any]:
    """Run a Go or Node scenario; its JSON ``data`` if it succeeded, else fail with its whole output."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{what} did not exit within {RUN_TIMEOUT} s; stdout: {exc.stdout!r}")
    try:
        result: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"{what} exited {proc.returncode} without JSON:\n{proc.stdout}\n{proc.stderr}")
    dump = json.dumps(result, indent=1, sort_keys=True)
    assert not result.get("error") and result["failures"] == [], f"{what} failed:\n{dump}\n{proc.stderr}"
    assert proc.returncode == 0 and result["ok"], dump
    data: dict[str, Any] = result["data"]
    return data


def node_dead_letter(node_cli: list[str], url: str, queue: str) -> dict[str, Any]:
    """amqplib (``dead-letter``) takes one message from ``queue`` and nacks it without requeue."""
    argv = [*node_cli, "dead-letter", "--url", url, "--prefix", queue, "--count", "1", "--timeout", "5000"]
    return run_program(argv, "node dead-letter")


def death_headers(prefix: str, queue: str, reason: str, exchange: str = "") -> dict[str, tuple[str, Any]]:
    """``<prefix>-{exchange,queue,reason}`` as RabbitMQ writes them: longstrs ('S')."""
    return {
        f"{prefix}-exchange": ("S", exchange),
        f"{prefix}-queue": ("S", queue),
        f"{prefix}-reason": ("S", reason),
    }


# --------------------------------------------------------------------------------------------------------
# raw header tables with their type tags
# --------------------------------------------------------------------------------------------------------
@pytest.fixture
def raw_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make pika keep each content header's raw property bytes as ``properties.raw``."""
    original = pika.spec.BasicProperties.decode

    def decode(self: Any, encoded: bytes, offset: int = 0) -> Any:
        self.raw = bytes(encoded[offset:])
        return original(self, encoded, offset)

    monkeypatch.setattr(pika.spec.BasicProperties, "decode", decode)


def _value(data: bytes, pos: int) -> tuple[tuple[str, Any], int]:
    """One field value as ``(tag, value)`` (tables and arrays hold tagged values too); returns the new pos."""
    tag = chr(data[pos])
    pos += 1
    fixed = {
        "t": ">B",
        "b": ">b",
        "B": ">B",
        "s": ">h",
        "u": ">H",
        "I": ">i",
        "i": ">I",
        "l": ">q",
        "f": ">f",
        "d": ">d",
        "T": ">Q",
    }
    if tag in fixed:
        (value,) = struct.unpack_from(fixed[tag], data, pos)
        pos += struct.calcsize(fixed[tag])
        return (tag, bool(value) if tag == "t" else value), pos
    if tag == "D":
        scale, digits = struct.unpack_from(">Bi", data, pos)
        return (tag, (scale, digits)), pos + 5
    if tag == "V":
        return (tag, None), pos
    (size,) = struct.unpack_from(">I", data, pos)
    pos += 4
    chunk, end = data[pos : pos + size], pos + size
    if tag == "S":
        return (tag, chunk.decode()), end
    if tag == "x":
        return (tag, chunk), end
    if tag == "F":
        return (tag, tagged_table(chunk)), end
    if tag == "A":
        items, at = [], 0
        while at < len(chunk):
            item, at = _value(chunk, at)
            items.append(item)
        return (tag, items), end
    raise AssertionError(f"unknown field type tag {tag!r} at byte {pos - 5}")


def tagged_table(data: bytes) -> dict[str, tuple[str, Any]]:
    """A field table's contents (without its length prefix) as ``{key: (tag, value)}``."""
    table, pos = {}, 0
    while pos < len(data):
        size = data[pos]
        key = data[pos + 1 : pos + 1 + size].decode()
        table[key], pos = _value(data, pos + 1 + size)
    return table


def tagged_headers(properties: Any) -> dict[str, tuple[str, Any]]:
    """The headers of a content header pika received (``raw_properties``), type tags kept."""
    raw: bytes = properties.raw
    (flags,) = struct.unpack_from(">H", raw, 0)
    assert not flags & 1, "a second property flag word (never sent for basic)"
    pos = 2
    for bit in (15, 14):  # content-type, content-encoding: shortstr
        if flags & (1 << bit):
            pos += 1 + raw[pos]
    if not flags & (1 << 13):
        return {}
    (size,) = struct.unpack_from(">I", raw, pos)
    return tagged_table(raw[pos + 4 : pos + 4 + size])


# --------------------------------------------------------------------------------------------------------
# what amqp091-go sends (e2e/go/src/ottermqe2e/table.go tableFields, encoded by amqp091-go's writeField)
# --------------------------------------------------------------------------------------------------------
GO_HEADERS: dict[str, tuple[str, Any]] = {
    "bool_true": ("t", True),
    "bool_false": ("t", False),
    "uint8": ("B", 200),
    "int8": ("b", -100),
    "int16": ("s", -30000),
    "int": ("I", 123456),  # Go int is written as 'I'
    "int32": ("I", -2000000000),
    "int64": ("l", -9000000000000000000),
    "float32": ("f", 1.5),
    "float64": ("d", -2.718281828459045),
    "string": ("S", "héllo wörld ✓"),
    "string_empty": ("S", ""),
    "bytes": ("x", b"\x00\x01\x02\xfe\xff"),
    "decimal": ("D", (2, -12345)),
    "timestamp": ("T", 1700000000),
    "timestamp_ns": ("T", 1700000000),  # whole seconds on the wire
    "table": ("F", {"a": ("I", 1), "b": ("S", "two"), "c": ("F", {"deep": ("t", True)})}),
    "table_empty": ("F", {}),
    "array": (
        "A",
        [
            ("I", 1),
            ("S", "two"),
            ("t", True),
            ("V", None),
            ("A", [("l", 3)]),
            ("F", {"k": ("S", "v")}),
            ("d", 0.5),
        ],
    ),
    "array_empty": ("A", []),
    "void": ("V", None),
}


def _js(type_: str, value: Any) -> dict[str, Any]:
    return {"type": type_, "value": value}


# The same headers as amqplib decodes them (e2e/node/lib/typed.js): one JavaScript number for every
# integer and float width, a Buffer for 'x', tagged objects for 'T' and 'D' (digits read unsigned).
NODE_VIEW: dict[str, Any] = {
    "bool_true": _js("boolean", True),
    "bool_false": _js("boolean", False),
    "uint8": _js("number", 200),
    "int8": _js("number", -100),
    "int16": _js("number", -30000),
    "int": _js("number", 123456),
    "int32": _js("number", -2000000000),
    "int64": _js("number", -9000000000000000000),
    "float32": _js("number", 1.5),
    "float64": _js("number", -2.718281828459045),
    "string": _js("string", "héllo wörld ✓"),
    "string_empty": _js("string", ""),
    "bytes": _js("Buffer", "000102feff"),
    "decimal": {"type": "object", "!": "decimal", "value": {"places": 2, "digits": 2**32 - 12345}},
    "timestamp": {"type": "object", "!": "timestamp", "value": 1700000000},
    "timestamp_ns": {"type": "object", "!": "timestamp", "value": 1700000000},
    "table": _js(
        "object",
        {
            "a": _js("number", 1),
            "b": _js("string", "two"),
            "c": _js("object", {"deep": _js("boolean", True)}),
        },
    ),
    "table_empty": _js("object", {}),
    "array": _js(
        "Array",
        [
            _js("number", 1),
            _js("string", "two"),
            _js("boolean", True),
            _js("null", None),
            _js("Array", [_js("number", 3)]),
            _js("object", {"k": _js("string", "v")}),
            _js("number", 0.5),
        ],
    ),
    "array_empty": _js("Array", []),
    "void": _js("null", None),
}

PROPERTY_NAMES = (
    "content_type",
    "content_encoding",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
)


def body_bytes(size: int) -> bytes:
    """The Go publisher's body: byte i is i % 251."""
    return bytes(i % 251 for i in range(size))


def properties_of(props: pika.BasicProperties) -> dict[str, Any]:
    return {name: getattr(props, name) for name in (*PROPERTY_NAMES, "expiration")}


@pytest.fixture
def topology(channel: Any, unique: Callable[[str], str]) -> Iterator[dict[str, str]]:
    names = {"dlx": unique("mixed-dlx"), "dlq": unique("mixed-dlq"), "work": unique("mixed-work")}
    channel.exchange_declare(names["dlx"], "fanout")
    channel.queue_declare(names["dlq"])
    channel.queue_bind(names["dlq"], names["dlx"])
    channel.queue_declare(names["work"], arguments={"x-dead-letter-exchange": names["dlx"]})
    yield names


def test_go_publishes_python_consumes_node_dead_letters_python_reads_dlq(
    go_publisher: Path,
    node_cli: list[str],
    broker: Any,
    topology: dict[str, str],
    connect: Any,
    raw_properties: None,
) -> None:
    work, dlx, dlq = topology["work"], topology["dlx"], topology["dlq"]
    body = body_bytes(BODY_SIZE)
    sha256 = hashlib.sha256(body).hexdigest()

    # 2. Go publishes.
    go = run_program(
        [
            str(go_publisher),
            "publish",
            "-url",
            broker.url,
            "-prefix",
            work,
            "-body-size",
            str(BODY_SIZE),
            "-message-id",
            "mixed-1",
            "-timeout",
            "5s",
        ],
        "go publish",
    )
    assert (go["acked"], go["returned"], go["routing_key"], go["exchange"]) == (True, False, work, "")
    assert (go["body_size"], go["body_sha256"]) == (BODY_SIZE, sha256)
    sent_properties = {**go["properties"], "expiration": None}
    assert sent_properties["timestamp"] == 1700000001 and sent_properties["delivery_mode"] == 2

    # 3. Python consumes, checks, and puts the message back (cancel first, so it is not redelivered here).
    ch = connect().channel()
    got: list[tuple[Any, Any, bytes]] = []
    ch.basic_qos(prefetch_count=1)
    tag = ch.basic_consume(work, lambda _ch, method, props, body: got.append((method, props, body)))

    def consumed() -> bool:
        ch.connection.process_data_events(time_limit=0.05)
        return bool(got)

    poll_until(consumed, what=f"pika's delivery from {work}")
    ch.basic_cancel(tag)
    method, props, first_body = got[0]
    assert (method.exchange, method.routing_key, method.redelivered) == ("", work, False)
    assert first_body == body
    assert properties_of(props) == sent_properties
    assert tagged_headers(props) == GO_HEADERS
    pika_view = dict(props.headers)
    ch.basic_reject(method.delivery_tag, requeue=True)

    # 4. Node takes the redelivered message and rejects it without requeue: the broker dead-letters it.
    node = node_dead_letter(node_cli, broker.url, work)
    (seen,) = node["deliveries"]
    assert (seen["exchange"], seen["routing_key"], seen["redelivered"]) == ("", work, True)
    assert (seen["body_size"], seen["body_sha256"]) == (BODY_SIZE, sha256)
    assert seen["headers"] == NODE_VIEW
    node_props = {k: v for k, v in seen["properties"].items() if k != "expiration"}
    assert node_props == {k: v for k, v in sent_properties.items() if k != "expiration"}
    assert (node["ready_after"], node["consumers_after"]) == (0, 0)

    # 5. Python reads the DLQ.
    def dead_lettered() -> Any:
        method, props, body = ch.basic_get(dlq, auto_ack=True)
        return (method, props, body) if method is not None else None

    method, props, dlq_body = poll_until(dead_lettered, what=f"the dead letter in {dlq}")
    now = time.time()
    assert (method.exchange, method.routing_key, method.redelivered) == (dlx, work, False)
    assert dlq_body == body
    assert properties_of(props) == sent_properties

    headers = tagged_headers(props)
    added = {key: headers.pop(key) for key in list(headers) if key not in GO_HEADERS}
    assert headers == GO_HEADERS  # every value with its original type tag
    for key in LAST_DEATH_HEADERS:  # RabbitMQ 3.13's, not 3.10's: see the extension test
        added.pop(key, None)
    assert sorted(added) == sorted(DEAD_LETTER_HEADERS)
    tag_, deaths = added.pop("x-death")
    assert tag_ == "A" and len(deaths) == 1, deaths
    entry_tag, death = deaths[0]
    assert entry_tag == "F"
    time_tag, death_time = death.pop("time")
    assert time_tag == "T" and abs(death_time - now) <= 30, (time_tag, death_time)
    assert death == {
        "count": ("l", 1),
        "reason": ("S", "rejected"),
        "queue": ("S", work),
        "exchange": ("S", ""),
        "routing-keys": ("A", [("S", work)]),
    }
    assert added == death_headers("x-first-death", work, "rejected")

    # pika's own (lossy) decoding agrees before and after the round trip.
    assert {k: v for k, v in props.headers.items() if k in GO_HEADERS} == pika_view


@pytest.mark.extension
def test_x_last_death_headers_are_tagged_like_x_first_death(
    node_cli: list[str], broker: Any, topology: dict[str, str], connect: Any, raw_properties: None
) -> None:
    """ottermq also writes RabbitMQ 3.13's x-last-death-*: pika publishes, Node nacks, and the dead letter
    read back by pika holds them as longstrs ('S') with the same values as x-first-death-* (one death)."""
    work, dlq = topology["work"], topology["dlq"]
    ch = connect().channel()
    ch.confirm_delivery()
    ch.basic_publish("", work, b"once", pika.BasicProperties(headers={"who": "pika"}))
    node_dead_letter(node_cli, broker.url, work)

    def dead_lettered() -> Any:
        method, props, _ = ch.basic_get(dlq, auto_ack=True)
        return props if method is not None else None

    headers = tagged_headers(poll_until(dead_lettered, what=f"the dead letter in {dlq}"))
    assert {k: v for k, v in headers.items() if k.startswith("x-last-death")} == death_headers(
        "x-last-death", work, "rejected"
    )
    assert {k: v for k, v in headers.items() if k.startswith("x-first-death")} == death_headers(
        "x-first-death", work, "rejected"
    )
