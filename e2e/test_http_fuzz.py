"""The management API under a fuzzer (ottermq extension: it reads ottermq's own OpenAPI description).

One dedicated broker (``OTTERMQ_ENABLE_SWAGGER=true``, SQLite store) is driven in two phases:

1. Targeted cases, a fixed list: every write operation's body with each field replaced by a value of
   the wrong type, a huge number (2**63, 2**64, 10**30, 10**400, 1e400 as JSON numbers), an odd
   string (NUL, control characters, a lone surrogate, over 255 bytes) or a deep nesting (500 levels,
   and 100,000 ``[``), and whole bodies that are no JSON object (100,000 nested ``[``, invalid UTF-8,
   ...); x-arguments, message properties, policy definitions and definitions items with the same
   values; every path parameter of every operation replaced by an odd name (over 255 bytes, NUL,
   control characters, ``%2F`` literally, unicode, broken percent-encoding); query parameters with
   huge and odd values. Sent as the administrator (bodies also as a ``management`` user).
2. schemathesis' property-based stateless generation from ``/docs/openapi.json``, positive and
   negative data, ``OTTERMQ_FUZZ_EXAMPLES`` examples (default 10) per operation for each of five
   users: tags administrator, monitoring, policymaker, management and none, all with permissions.
   Path parameters are often replaced by names that exist (or odd ones) so requests get past the
   404s; the objects the fuzzer works on are put back after each operation (``replenish``).

Checked: no request answers 5xx (schemathesis' ``not_a_server_error`` for its cases; a failing
health check's documented 503 excepted) or goes unanswered; the broker never dies (a death is a
finding, and the broker is started again to go on); AMQP keeps answering all along (a pika publish +
``basic.get`` round trip in a background thread, latencies in ``amqp_latency.json`` in the test's
tmp dir, p99 printed); after the run, a restart on the same data dir (SIGTERM, start) keeps every
durable queue the API reported as created and that was not deleted since (nor could have expired),
every durable queue listed just before the stop, and every persistent message confirmed into the
probe's durable queue.

Findings are written as soon as they are seen, to ``findings.md``/``findings.json`` in the test's tmp
dir and to ``OTTERMQ_FUZZ_FINDINGS`` when set: the request (method, path, user tag, body), the status
and the broker log's traceback, one entry per innermost ottermq frame and exception.

``OTTERMQ_FUZZ_SEED``: hypothesis' seed (default 0, so CI sends the same cases each run; ``random``
for a new one). ``make fuzz`` runs this longer, with more examples and a random seed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import random
import re
import statistics
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
import requests
import schemathesis
import yarl
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from .polling import poll_until

pytestmark = pytest.mark.extension  # RabbitMQ serves no OpenAPI description

EXAMPLES = int(os.environ.get("OTTERMQ_FUZZ_EXAMPLES", "10"))
SEED_SETTING = os.environ.get("OTTERMQ_FUZZ_SEED", "0")
FINDINGS_FILE = os.environ.get("OTTERMQ_FUZZ_FINDINGS")
HTTP_TIMEOUT = 30.0
PASSWORD = "fuzz-password"
TAGS = ("administrator", "monitoring", "policymaker", "management", "")
VHOSTS = ("/", "fuzz")  # the vhosts the fuzzer works in (and may delete)
ROOT = "fuzz-root"  # sets up, replenishes and checks; never a path parameter, so never changed
KEPT = "fuzz-kept"  # where the targeted cases declare queues; never a path parameter, so never deleted
QUEUE_ROUTE = "/api/queues/{vhost}/{name}"
SHAPING = ("columns", "sort", "sort_reverse")

# -- values ---------------------------------------------------------------------------------------

HUGE = [str(2**63), str(2**64), str(-(2**63) - 1), str(10**30), str(10**400), "1e400", "-1e400", "1e-400"]
WRONG_TYPES = ["null", "true", '"x"', "[]", "{}", "1.5", "-1", "0"]
ODD_STRINGS = [
    json.dumps("x" * 300),
    json.dumps("é" * 200),
    '"a\\u0000b"',
    '"\\u0001\\u001f\\u007f"',
    '"%2F"',
    json.dumps("ünïcødé 🐇"),
    '"\\ud800"',
]
NESTED = ["[" * 500 + "]" * 500, '{"a":' * 500 + "1" + "}" * 500, "[" * 100_000]
FIELD_VALUES = HUGE + WRONG_TYPES + ODD_STRINGS + NESTED
INNER_VALUES = HUGE + WRONG_TYPES + ODD_STRINGS[-2:] + NESTED[:1]  # one level down
WHOLE_BODIES = [
    b"[" * 100_000,
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 100_000,
    b"\xff\xfe{}",
    b"{",
    b"null",
    b"[]",
    b"1e400",
    str(10**400).encode(),
    b'"x"',
    b"{}" + b" " * 100,
]
ODD_NAMES = ["x" * 256, "é" * 200, "a\x00b", "\x01\x02\x1f\x7f", "%2F", "..", "ünïcødé-🐇", "\u202e~"]
RAW_SEGMENTS = ["%FF%FE", "%", "%00"]  # sent as they are: bad percent-encoding
QUERY_VALUES = [str(2**64), str(10**30), "-1", "0", "", "\x00", "(a+)+$", "[", "a." * 500, "%FF", "%ED%A0%80"]
ARGUMENT_KEYS = [
    "x-message-ttl",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-delivery-limit",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-overflow",
    "x-queue-mode",
    "x-queue-type",
    "x-single-active-consumer",
    "alternate-exchange",
    "x-delayed-type",
    "x-message-deduplication",
    "x-cache-size",
    "x-cache-ttl",
    "x-match",
]
PROPERTY_KEYS = [
    "delivery_mode",
    "priority",
    "expiration",
    "timestamp",
    "headers",
    "message_id",
    "correlation_id",
    "user_id",
    "app_id",
    "content_type",
    "reply_to",
    "type",
    "cluster_id",
    "content_encoding",
]
POLICY_KEYS = [
    "message-ttl",
    "expires",
    "max-length",
    "max-length-bytes",
    "delivery-limit",
    "dead-letter-exchange",
    "dead-letter-routing-key",
    "overflow",
    "queue-mode",
    "alternate-exchange",
    "max-priority",
]
DEFINITION_ITEMS: dict[str, dict[str, Any]] = {
    "queues": {"name": "fuzz.def", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}},
    "exchanges": {"name": "fuzz.defx", "vhost": "/", "type": "direct", "durable": True, "arguments": {}},
    "bindings": {
        "source": "fuzz.x",
        "vhost": "/",
        "destination": "fuzz.q",
        "destination_type": "queue",
        "routing_key": "k",
        "arguments": {},
    },
    "policies": {
        "vhost": "/",
        "name": "p",
        "pattern": "^zz$",
        "apply-to": "all",
        "definition": {},
        "priority": 0,
    },
    "users": {
        "name": "fuzz-def",
        "password_hash": "",
        "hashing_algorithm": "rabbit_password_hashing_sha256",
        "tags": "",
    },
    "permissions": {"user": "fuzz-user", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"},
    "vhosts": {"name": "fuzz-def", "description": ""},
}
# names that exist (or are about to) for each path parameter
KNOWN = {
    "vhost": ["/", "fuzz", "missing-vhost"],
    "name": [
        "fuzz.q",
        "fuzz.x",
        "fuzz.dlq",
        "fuzz-user",
        "amq.direct",
        "amq.default",
        "max-queues",
        "max-connections",
        "max-channels",
        "fuzz",
        "r1",
        "missing",
    ],
    "queue": ["fuzz.q", "fuzz.dlq"],
    "source": ["fuzz.x", "amq.direct", "amq.default", "amq.topic"],
    "dest": ["fuzz.q", "fuzz.dlq", "fuzz.x"],
    "props": ["~", "fuzz.%23", "fuzz.k"],
    "user": ["fuzz-user", "guest"],
    "id": ["1", "2", "0"],
    "file": ["a.png", "../summary.json"],
    "port": ["1", "65536", "0"],
    "protocol": ["amqp", "http", "amqp/ssl"],
    "within": ["1", "0", str(2**64)],
    "unit": ["days", "years"],
    "kind": ["q", "e"],
    "side": ["source", "destination"],
}
BASES: dict[str, dict[str, Any]] = {  # better starting points than valid_value's
    "/api/exchanges/{vhost}/{name}/publish": {
        "properties": {"delivery_mode": 2},
        "routing_key": "fuzz.q",
        "payload": "x",
        "payload_encoding": "string",
    },
    "/api/queues/{vhost}/{name}/get": {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
    "/api/policies/{vhost}/{name}": {"pattern": "^fuzz-nothing$", "definition": {"max-length": 1}},
    "/api/operator-policies/{vhost}/{name}": {"pattern": "^fuzz-nothing$", "definition": {"max-length": 1}},
    "/api/permissions/{vhost}/{user}": {"configure": ".*", "write": ".*", "read": ".*"},
    "/api/dead-letters/{vhost}/{queue}/moves": {"all": True, "target": {"exchange": "", "routing_key": "x"}},
}


def percent(value: str) -> str:
    """A path segment for ``value`` (``/`` as ``%2F``); RAW_SEGMENTS go as they are."""
    return value if value in RAW_SEGMENTS else urllib.parse.quote(value, safe="")


def fill(template: str, params: dict[str, str]) -> str:
    """``template`` with its ``{param}`` replaced by already-encoded segments."""
    return re.sub(r"\{(\w+)\}", lambda m: params[m.group(1)], template)


def decoded(segment: str) -> str:
    """A path segment as the broker reads it (yarl, under aiohttp: undecodable bytes stay %-encoded)."""
    return yarl.URL("/" + segment, encoded=True).path[1:]


def tag_of(user: str) -> str:
    return {ROOT: "administrator (set-up user)"}.get(user, user.removeprefix("fuzz-"))


def valid_value(schema: dict[str, Any]) -> Any:
    """A plausible value for a (small) JSON schema: the base each targeted case changes one part of."""
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        return valid_value(schema["anyOf"][0])
    if schema.get("type") == "object":
        required = schema.get("required", [])
        return {key: valid_value(sub) for key, sub in schema.get("properties", {}).items() if key in required}
    return {"boolean": True, "integer": 1, "number": 1, "string": "fuzz", "array": []}.get(
        str(schema.get("type"))
    )


def substituted(base: Any, path: list[str], raw: str) -> bytes:
    """``base`` as JSON with the value at ``path`` (keys; a digit string indexes a list) replaced by the
    raw JSON text ``raw`` (which may be no valid JSON, or a number json.dumps cannot write)."""
    marker = f"@@{uuid.uuid4().hex}@@"
    data = json.loads(json.dumps(base))
    target = data
    for key in path[:-1]:
        target = target[int(key)] if isinstance(target, list) else target.setdefault(key, {})
    target[path[-1]] = marker
    return json.dumps(data).replace(json.dumps(marker), raw).encode()


def documented_failure(route: str, status: int, content: bytes) -> bool:
    """A failing health check's 503 ``{"status": "failed", ...}`` (documented; not a server error)."""
    if status != 503 or not route.startswith(("/api/health/checks/", "/api/aliveness-test/")):
        return False
    with contextlib.suppress(ValueError, AttributeError):
        return bool(json.loads(content).get("status") == "failed")
    return False


def expiring_policies(data: Any, vhost: str) -> list[tuple[str, str]]:
    """``(vhost, pattern)`` of the policies with ``expires`` in an accepted policy PUT or definitions
    body (``("*", "")``, any queue, when the body cannot be read)."""
    if not isinstance(data, dict):
        return [("*", "")]
    if "definition" in data:  # a policy
        items = [data]
    else:  # definitions: policies, and operator policies as parameters
        items = data.get("policies") if isinstance(data.get("policies"), list) else []
        items += [p.get("value") for p in data.get("parameters") or [] if isinstance(p, dict)]
    found = []
    for item in (i for i in items if isinstance(i, dict)):
        definition, pattern = item.get("definition"), item.get("pattern")
        if not isinstance(definition, dict) or "expires" in definition:
            where = vhost if vhost != "*" else str(item.get("vhost", "*"))
            found.append((where, pattern if isinstance(pattern, str) else ""))
    return found


# -- findings ---------------------------------------------------------------------------------------

FRAME = re.compile(r'File "([^"]*ottermq/[^"]*)", line (\d+), in (\S+)')


@dataclass
class Finding:
    """One kind of server error (status, innermost ottermq frame, exception): its first request and
    every route and user tag that showed it."""

    key: str
    status: str
    summary: str
    where: str
    request: str
    user: str
    body: str
    traceback: str
    count: int = 0
    routes: dict[str, set[str]] = field(default_factory=dict)


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def body_preview(body: bytes | None, limit: int = 400) -> str:
    if not body:
        return "(none)"
    text = body.decode("utf-8", "backslashreplace")
    for char in '[{"':  # a deep nesting, said rather than shown
        run = len(text) - len(text.lstrip(char))
        if run > 50:
            return f"{char!r} * {run} then {text[run : run + 60]!r}... ({len(body)} bytes)"
    marker = text.find('{"a":{"a":{"a":')
    if marker >= 0 and len(text) > limit:
        return f'{text[:marker]}{{"a": ... nested {text.count("{")} deep ...}} ({len(body)} bytes)'
    return clip(text, limit)


def last_traceback(log: str) -> str:
    """The last traceback in a piece of the broker's log, with the log line before it."""
    start = log.rfind("Traceback (most recent call last)")
    if start < 0:
        return ""
    lines = log[log.rfind("\n", 0, max(0, start - 1)) + 1 :].splitlines()
    end = next(
        (i + 1 for i, line in enumerate(lines[2:], 2) if line and not line.startswith(" ")), len(lines)
    )
    return "\n".join(clip(line, 300) for line in lines[:end])


# -- the fuzz run -----------------------------------------------------------------------------------


@dataclass
class Sent:
    """What one request did: its status (None: no answer) and the response body."""

    status: int | None
    content: bytes = b""


class Fuzz:
    """The run's state: the broker process, a session per user, findings, what the store must keep."""

    def __init__(self, process: Any, out: Path) -> None:
        self.process = process
        self.base: str = process.broker.management_url
        self.log_path: Path = process.broker.log_path
        self.out = out
        self.sessions: dict[str, requests.Session] = {}
        self.findings: dict[str, Finding] = {}
        self.requests = 0
        self.client_errors: dict[str, int] = {}  # what the client library refused to send, by exception
        self.crashes = 0
        self.durable: dict[tuple[str, str], str] = {}  # API-created durable queues -> the body
        self.expiring: list[tuple[str, str]] = []  # (vhost or "*", pattern) of policies with expires

    def session(self, user: str) -> requests.Session:
        if user not in self.sessions:
            self.sessions[user] = requests.Session()
            self.sessions[user].auth = (user, PASSWORD)
        return self.sessions[user]

    def log_size(self) -> int:
        with contextlib.suppress(OSError):
            return self.log_path.stat().st_size
        return 0

    def log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    # -- sending ---------------------------------------------------------------------------------
    def send(
        self,
        user: str,
        method: str,
        route: str,
        params: dict[str, str],
        body: bytes | None = None,
        query: dict[str, str] | None = None,
    ) -> Sent:
        """One request as ``user`` (``params``: encoded path segments); a 5xx or no answer is a finding."""
        path = fill(route, params)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        offset = self.log_size()
        self.requests += 1
        try:
            encoded = urllib.parse.urlencode(query, safe="%") if query else None  # "%FF" goes as it is
            r = self.session(user).request(
                method,
                self.base + path,
                data=body,
                params=encoded,
                headers=headers,
                timeout=HTTP_TIMEOUT,
                allow_redirects=False,
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            self.after(user, method, route, path, query, body, None, offset, repr(exc))
            return Sent(None)
        except (requests.RequestException, ValueError, UnicodeError) as exc:
            self.client_errors[type(exc).__name__] = self.client_errors.get(type(exc).__name__, 0) + 1
            return Sent(None)
        if r.status_code >= 500 and not documented_failure(route, r.status_code, r.content):
            self.after(user, method, route, path, query, body, r.status_code, offset, "")
        elif r.status_code < 300:
            self.track(method, route, params, body)
        self.check_alive(offset)
        return Sent(r.status_code, r.content)

    def call_case(self, case: Any, user: str) -> None:
        """A schemathesis case as ``user``, checked with its ``not_a_server_error``."""
        route = case.operation.path
        auth = "Basic " + base64.b64encode(f"{user}:{PASSWORD}".encode()).decode()
        offset = self.log_size()
        self.requests += 1
        try:
            response = case.call(
                base_url=self.base,
                headers={"Authorization": auth},
                timeout=HTTP_TIMEOUT,
                allow_redirects=False,
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            raw = json.dumps(case.body).encode() if isinstance(case.body, dict | list | str) else None
            self.after(
                user, case.method, route, case.formatted_path, case.query, raw, None, offset, repr(exc)
            )
            return
        except (
            Exception
        ) as exc:  # the client could not send what was generated (a header with a newline, ...)
            self.client_errors[type(exc).__name__] = self.client_errors.get(type(exc).__name__, 0) + 1
            return
        request = response.request
        sent = request.body.encode() if isinstance(request.body, str) else request.body
        url = urllib.parse.urlsplit(request.url or "")
        try:
            if not documented_failure(route, response.status_code, response.content):
                case.validate_response(response, checks=[not_a_server_error])
        except (Exception, BaseExceptionGroup):  # schemathesis' FailureGroup is a BaseExceptionGroup
            query = {"": url.query} if url.query else None
            self.after(user, case.method, route, url.path, query, sent, response.status_code, offset, "")
        else:
            if response.status_code < 300:
                self.track(case.method, route, dict(case.path_parameters or {}), sent)
        self.check_alive(offset)

    def check_alive(self, offset: int) -> None:
        if self.process.proc is not None and self.process.proc.poll() is not None:
            self.after("", "-", "-", "-", None, None, None, offset, "")

    def after(
        self,
        user: str,
        method: str,
        route: str,
        path: str,
        query: Any,
        body: bytes | None,
        status: int | None,
        offset: int,
        error: str,
    ) -> None:
        """Record a 5xx, no answer or a dead broker (started again to go on)."""
        died = self.process.proc is not None and self.process.proc.poll() is not None
        log = self.log_since(offset)
        if "Traceback" not in log and not died:

            def traceback_logged() -> bool:
                nonlocal log
                log = self.log_since(offset)
                return "Traceback" in log

            # the log line may land just after the answer; a 5xx without a traceback is recorded all the same
            with contextlib.suppress(pytest.fail.Exception):
                poll_until(traceback_logged, timeout=2, interval=0.05, what="a traceback in the broker log")
        trace = last_traceback(log)
        frames = FRAME.findall(trace)
        where = (
            f"{frames[-1][0].split('ottermq/', 1)[1]}:{frames[-1][1]} in {frames[-1][2]}" if frames else ""
        )
        last = clip(trace.strip().splitlines()[-1], 200) if trace.strip() else ""
        shown = "broker died" if died else str(status) if status is not None else f"no answer ({error})"
        key = f"{shown}|{where}|{re.sub(r'[0-9]+', 'N', last)[:80]}" if last else f"{shown}|{route}"
        finding = self.findings.get(key)
        if finding is None:
            target = f"{method} {path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
            trace = trace or (self.process.log_tail(40) if died else clip(log, 3000)) or "(nothing logged)"
            finding = Finding(
                key,
                shown,
                last or shown,
                where,
                clip(target, 400),
                tag_of(user) if user else "-",
                body_preview(body),
                trace,
            )
            self.findings[key] = finding
        finding.count += 1
        finding.routes.setdefault(f"{method} {route}", set()).add(tag_of(user) if user else "-")
        if finding.count == 1:
            self.write_findings()
        if died:
            self.crashes += 1
            self.process.start()

    def track(self, method: str, route: str, params: dict[str, str], body: bytes | None) -> None:
        """Keep account of the durable queues the API created and of what may have removed them."""
        seg = decoded
        data: Any = None
        with contextlib.suppress(ValueError, RecursionError):
            data = json.loads(body) if body else {}
        if method == "PUT" and route == QUEUE_ROUTE and isinstance(data, dict):
            args = data.get("arguments") or {}
            durable = data.get("durable", True) in (True, "true")
            transient = data.get("auto_delete", False) in (True, "true") or not isinstance(args, dict)
            if durable and not transient and "x-expires" not in args:
                self.durable[(seg(params["vhost"]), seg(params["name"]))] = body_preview(body, 200)
        elif method == "DELETE" and route == QUEUE_ROUTE:
            self.durable.pop((seg(params["vhost"]), seg(params["name"])), None)
        elif method == "DELETE" and route == "/api/vhosts/{vhost}":
            self.durable = {k: v for k, v in self.durable.items() if k[0] != seg(params["vhost"])}
        elif (
            body
            and b"expires" in body
            and ((method == "PUT" and "policies/" in route) or (method == "POST" and "/definitions" in route))
        ):
            self.expiring += expiring_policies(data, seg(params.get("vhost", "%2A")))

    def may_have_expired(self, vhost: str, name: str) -> bool:
        """Could a policy with ``expires`` have applied to this queue (a pattern Python cannot read: yes)?"""
        for where, pattern in self.expiring:
            if where in (vhost, "*"):
                try:
                    if re.search(pattern, name):
                        return True
                except (re.error, RecursionError):
                    return True
        return False

    # -- reporting -------------------------------------------------------------------------------
    def write_findings(self) -> None:
        found = sorted(self.findings.values(), key=lambda f: -f.count)
        data = [{**f.__dict__, "routes": {r: sorted(u) for r, u in f.routes.items()}} for f in found]
        (self.out / "findings.json").write_text(json.dumps(data, indent=1))
        lines = [
            f"# Management API fuzz findings: {len(found)} kinds",
            "",
            f"{self.requests} requests so far; the broker died {self.crashes} times.",
            "",
        ]
        for n, f in enumerate(found, 1):
            routes = "; ".join(f"`{r}` ({', '.join(sorted(u))})" for r, u in sorted(f.routes.items()))
            lines += [
                f"## F{n}: {f.status}: {f.summary}",
                "",
                f"- innermost ottermq frame: `{f.where or '?'}`",
                f"- seen {f.count} times, on: {routes}",
                f"- first request: user tag `{f.user}`",
                "",
                "```",
                f.request,
                f"body: {f.body}",
                "```",
                "",
                "```",
                f.traceback.strip(),
                "```",
                "",
            ]
        text = "\n".join(lines)
        (self.out / "findings.md").write_text(text)
        if FINDINGS_FILE:
            Path(FINDINGS_FILE).write_text(text)


# -- AMQP all along ---------------------------------------------------------------------------------


class Probe(threading.Thread):
    """Round trips (a confirmed publish, then ``basic.get`` until it is back) on one queue and persistent
    confirmed messages into a durable one, until stopped; latencies and errors recorded."""

    def __init__(self, params: pika.ConnectionParameters) -> None:
        super().__init__(daemon=True)
        self.params = params
        self.stopping = threading.Event()
        self.latencies: list[float] = []
        self.successes: list[float] = []  # when each round trip ended (monotonic)
        self.errors: list[str] = []
        self.confirmed: list[bytes] = []

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            try:
                conn = pika.BlockingConnection(self.params)
                try:
                    ch = conn.channel()
                    ch.confirm_delivery()
                    while not self.stopping.is_set():
                        n += 1
                        self.round_trip(conn, ch, n)
                        persistent = pika.BasicProperties(delivery_mode=2)
                        ch.basic_publish("", "probe.durable", b"durable-%d" % n, persistent, mandatory=True)
                        self.confirmed.append(b"durable-%d" % n)
                        self.stopping.wait(0.05)  # pace: some 15 round trips a second
                finally:
                    with contextlib.suppress(Exception):
                        conn.close()
            except Exception as exc:  # every failure is a finding
                self.errors.append(f"{time.strftime('%H:%M:%S')} {exc!r}")
                self.stopping.wait(0.5)

    def round_trip(self, conn: pika.BlockingConnection, ch: Any, n: int) -> None:
        body = b"rtt-%d" % n
        start = time.monotonic()
        ch.basic_publish("", "probe.rtt", body, pika.BasicProperties(delivery_mode=1), mandatory=True)
        while True:
            method, _, got = ch.basic_get("probe.rtt", auto_ack=True)
            if method is not None and got == body:
                break
            if time.monotonic() - start > HTTP_TIMEOUT:
                raise TimeoutError(f"round trip {n}: no message back within {HTTP_TIMEOUT} s")
            if method is None:
                conn.sleep(0.001)
        now = time.monotonic()
        self.latencies.append(now - start)
        self.successes.append(now)

    def report(self) -> dict[str, Any]:
        ms = sorted(x * 1000 for x in self.latencies)
        gaps = [b - a for a, b in zip(self.successes, self.successes[1:], strict=False)]
        return {
            "round_trips": len(ms),
            "errors": self.errors,
            "p50_ms": round(statistics.median(ms), 2) if ms else None,
            "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2) if ms else None,
            "max_ms": round(ms[-1], 2) if ms else None,
            "longest_gap_s": round(max(gaps), 2) if gaps else None,
            "confirmed_persistent": len(self.confirmed),
        }


# -- the test ---------------------------------------------------------------------------------------


def test_management_api_survives_fuzzing(broker_process: Callable[..., Any], tmp_path: Path) -> None:
    started = time.monotonic()
    reports = tmp_path / "reports" / "r1"  # one dlq report for the archive endpoints to show
    (reports / "charts").mkdir(parents=True)
    (reports / "summary.json").write_text('{"records": 1, "charts": ["a.png"]}')
    (reports / "charts" / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    process = broker_process(
        env={
            "OTTERMQ_ENABLE_SWAGGER": "true",
            "OTTERMQ_DLX_ARCHIVE_DIR": str(tmp_path / "archive"),
            "OTTERMQ_DLX_REPORTS_DIR": str(tmp_path / "reports"),
        }
    )
    b = process.start()
    fuzz = Fuzz(process, tmp_path)
    witness = f"fuzz-witness-{uuid.uuid4().hex[:8]}"  # the probe's vhost: no path parameter names it
    set_up(fuzz, b, witness)
    probe = Probe(b.params(virtual_host=witness, credentials=pika.PlainCredentials("fuzz-probe", PASSWORD)))
    probe.start()
    try:
        targeted(fuzz)
        targeted_seconds = time.monotonic() - started
        generated(fuzz)
    finally:
        probe.stopping.set()
        probe.join(HTTP_TIMEOUT + 5)
    fuzz_seconds = time.monotonic() - started
    amqp = probe.report()
    (tmp_path / "amqp_latency.json").write_text(json.dumps({**amqp, "latencies_s": probe.latencies}))
    lost = restart_and_check(fuzz, process, witness, probe)
    fuzz.write_findings()
    print(
        f"\nfuzz: {fuzz.requests} requests in {fuzz_seconds:.0f} s (targeted {targeted_seconds:.0f} s); "
        f"{EXAMPLES} examples per operation and user; not sent by the client: {fuzz.client_errors}; "
        f"the broker died {fuzz.crashes} times\nAMQP during the run: {json.dumps(amqp)}\n"
        f"{len(fuzz.findings)} kinds of server error: {tmp_path / 'findings.md'}"
    )
    problems = [
        f"{f.status} x{f.count}: {f.summary} at {f.where or '?'} (first: {f.user}: {clip(f.request, 120)})"
        for f in sorted(fuzz.findings.values(), key=lambda f: -f.count)
    ]
    if probe.errors or not probe.latencies or (amqp["longest_gap_s"] or 0) > HTTP_TIMEOUT:
        problems.append(f"AMQP stopped answering during the run: {amqp}")
    assert not problems + lost, "\n".join(problems + lost)


def api(fuzz: Fuzz, method: str, path: str, body: Any = None) -> Sent:
    """A request as ROOT to a literal path (every segment already encoded)."""
    return fuzz.send(ROOT, method, path, {}, json.dumps(body).encode() if body is not None else None)


def set_up(fuzz: Fuzz, b: Any, witness: str) -> None:
    """ROOT (created by guest, the default user), the fuzz users, the probe's user, vhost and queues."""
    guest = requests.Session()
    guest.auth = (b.user, b.password)
    r = guest.put(f"{fuzz.base}/api/users/{ROOT}", json={"password": PASSWORD, "tags": "administrator"})
    assert r.status_code == 201, r.text
    for tag in TAGS:
        assert (
            api(fuzz, "PUT", f"/api/users/fuzz-{tag or 'none'}", {"password": PASSWORD, "tags": tag}).status
            == 201
        )
    api(fuzz, "PUT", "/api/users/fuzz-probe", {"password": PASSWORD, "tags": ""})
    assert api(fuzz, "PUT", f"/api/vhosts/{percent(witness)}", {}).status == 201
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api(fuzz, "PUT", f"/api/permissions/{percent(witness)}/fuzz-probe", everything).status == 201
    assert api(fuzz, "PUT", f"/api/vhosts/{KEPT}", {}).status == 201
    for user in ("fuzz-administrator", ROOT):
        assert api(fuzz, "PUT", f"/api/permissions/{KEPT}/{user}", everything).status in (201, 204)
    for queue, durable in (("probe.rtt", False), ("probe.durable", True)):
        assert api(fuzz, "PUT", f"/api/queues/{percent(witness)}/{queue}", {"durable": durable}).status == 201
    replenish(fuzz)


def replenish(fuzz: Fuzz) -> None:
    """Put back what the fuzzer works on (it may have deleted any of it)."""
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    death = {
        "count": 1,
        "reason": "rejected",
        "queue": "fuzz.q",
        "exchange": "",
        "routing-keys": ["fuzz.q"],
        "time": 1700000000,
    }
    for vhost in VHOSTS:
        v = percent(vhost)
        api(fuzz, "PUT", f"/api/vhosts/{v}", {})
        for limit in ("max-queues", "max-connections"):
            api(fuzz, "DELETE", f"/api/vhost-limits/{v}/{limit}")
        for user in [ROOT, *(f"fuzz-{tag or 'none'}" for tag in TAGS)]:
            api(fuzz, "PUT", f"/api/permissions/{v}/{user}", everything)
        for queue in ("fuzz.q", "fuzz.dlq"):  # tracked as the fuzzer's own creations are
            fuzz.send(ROOT, "PUT", QUEUE_ROUTE, {"vhost": v, "name": queue}, b'{"durable": true}')
        api(fuzz, "PUT", f"/api/exchanges/{v}/fuzz.x", {"type": "topic", "durable": True})
        api(fuzz, "POST", f"/api/bindings/{v}/e/fuzz.x/q/fuzz.q", {"routing_key": "fuzz.#"})
        for queue, headers in (
            ("fuzz.q", {}),
            ("fuzz.dlq", {"x-death": [death], "x-first-death-reason": "rejected"}),
        ):
            api(
                fuzz,
                "POST",
                f"/api/exchanges/{v}/amq.default/publish",
                {
                    "properties": {"delivery_mode": 2, "headers": headers},
                    "routing_key": queue,
                    "payload": "m",
                    "payload_encoding": "string",
                },
            )
    api(fuzz, "PUT", "/api/users/fuzz-user", {"password": PASSWORD, "tags": ""})


def known_params(route: str) -> dict[str, str]:
    """An encoded segment that exists for each path parameter of ``route``."""
    names = re.findall(r"\{(\w+)\}", route)
    fixed = {
        "dest": "fuzz.q",
        "name": "fuzz.q" if route.startswith("/api/queues/") else "fuzz.x",
        "user": "fuzz-user",
    }
    if route.startswith(("/api/users/", "/api/user-limits/")):
        fixed["name"] = "fuzz-user" if route.startswith("/api/users/") else "max-channels"
    if route.startswith("/api/vhost-limits/"):
        fixed["name"] = "max-queues"
    return {p: percent(fixed.get(p, KNOWN.get(p, ["fuzz"])[0])) for p in names}


def targeted(fuzz: Fuzz) -> None:
    """Phase 1 (see the module docstring)."""
    doc = requests.get(f"{fuzz.base}/docs/openapi.json", timeout=10).json()
    admin, manager = "fuzz-administrator", "fuzz-management"
    for route, ops in doc["paths"].items():
        for method, op in ((m.upper(), op) for m, op in ops.items()):
            params = known_params(route)
            if (method, route) == (
                "PUT",
                QUEUE_ROUTE,
            ):  # each accepted body: a queue that must outlive a restart
                params["vhost"] = percent(KEPT)
            schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            base = BASES.get(route, valid_value(schema) if schema else None)
            valid = json.dumps(base).encode() if base is not None else None
            for name in params:  # odd names, one parameter at a time
                for odd in ODD_NAMES + RAW_SEGMENTS:
                    fuzz.send(admin, method, route, {**params, name: percent(odd)}, valid)
            queries = [p["name"] for p in op["parameters"] if p["in"] == "query"]
            if method == "GET":  # app.py shapes every GET, documented there or not
                queries += [name for name in SHAPING if name not in queries]
            for i, name in enumerate(queries):
                # shaping parameters (one middleware for every GET) take a few values each; the others all
                values = QUERY_VALUES[i % 3 :: 3] if name in SHAPING else QUERY_VALUES
                paging = {"page": "1", "use_regex": "true"} if name in ("page_size", "name") else {}
                for value in values:
                    fuzz.send(admin, method, route, params, valid, {**paging, name: value})
            if schema is None:
                continue
            bodies = [substituted(base, [key], raw) for key in schema["properties"] for raw in FIELD_VALUES]
            for body in WHOLE_BODIES:
                fuzz.send(manager, method, route, params, body)
            for n, body in enumerate(WHOLE_BODIES + bodies + nested_bodies(route, base)):
                fresh = {"name": percent(f"fuzz.t{n}")} if (method, route) == ("PUT", QUEUE_ROUTE) else {}
                fuzz.send(admin, method, route, {**params, **fresh}, body)  # a new queue for each body
            replenish(fuzz)


def nested_bodies(route: str, base: dict[str, Any]) -> list[bytes]:
    """Odd values one level down: x-arguments, message properties, policy definitions, definitions."""
    out: list[bytes] = []
    if route in (
        QUEUE_ROUTE,
        "/api/exchanges/{vhost}/{name}",
        "/api/bindings/{vhost}/e/{source}/{kind}/{dest}",
    ):
        out += [substituted(base, ["arguments", key], raw) for key in ARGUMENT_KEYS for raw in INNER_VALUES]
        if route.startswith("/api/exchanges"):
            kinds = ["x-delayed-message", "headers", "x-consistent-hash", "\x00", "x" * 300]
            out += [
                json.dumps({"type": kind, "arguments": {"x-delayed-type": "direct"}}).encode()
                for kind in kinds
            ]
    elif route.endswith("/publish"):
        out += [substituted(base, ["properties", key], raw) for key in PROPERTY_KEYS for raw in INNER_VALUES]
        with_headers = {**base, "properties": {"headers": {}}}
        out += [substituted(with_headers, ["properties", "headers", "h"], raw) for raw in INNER_VALUES]
        in_base64 = {**base, "payload_encoding": "base64"}
        out += [substituted(in_base64, ["payload"], raw) for raw in ('"!!!"', '"=="', '"' + "A" * 1001 + '"')]
    elif "policies/" in route:
        out += [substituted(base, ["definition", key], raw) for key in POLICY_KEYS for raw in INNER_VALUES]
        patterns = ['"(a+)+$"', '"["', '"(?<=a)b"', '"(a)\\\\1"', '"\\\\p{Zzz}"', json.dumps("a" * 100_000)]
        out += [substituted(base, ["pattern"], raw) for raw in patterns]
    elif route.startswith("/api/definitions"):
        sections = DEFINITION_ITEMS if route == "/api/definitions" else ("queues", "exchanges", "bindings")
        for section in sections:
            item = DEFINITION_ITEMS[section]
            one = {section: [item]}
            out += [
                substituted(one, [section, "0", key], raw) for key in item for raw in HUGE + WRONG_TYPES[:5]
            ]
            if "arguments" in item:
                out += [
                    substituted(one, [section, "0", "arguments", key], raw)
                    for key in ARGUMENT_KEYS[:6]
                    for raw in HUGE
                ]
    return out


def param_values(name: str) -> st.SearchStrategy[str | None]:
    """For a path parameter: keep schemathesis' value (None), a name that exists, or an odd one."""
    odd: st.SearchStrategy[str | None] = st.sampled_from(ODD_NAMES + RAW_SEGMENTS)
    if name not in KNOWN:
        return st.one_of(st.none(), odd)
    return st.one_of(st.sampled_from(KNOWN[name]), st.sampled_from(KNOWN[name]), st.none(), odd)


def generated(fuzz: Fuzz) -> None:
    """Phase 2 (see the module docstring)."""
    schema = schemathesis.openapi.from_url(f"{fuzz.base}/docs/openapi.json")
    chosen = random.SystemRandom().randrange(2**32) if SEED_SETTING == "random" else int(SEED_SETTING)
    print(
        f"\nschemathesis {schemathesis.__version__}: {EXAMPLES} examples per operation and user, "
        f"hypothesis seed {chosen}"
    )
    for result in schema.get_all_operations():
        operation = result.ok()
        modes = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
        cases = st.one_of([operation.as_strategy(generation_mode=mode) for mode in modes])
        names = st.fixed_dictionaries({n: param_values(n) for n in re.findall(r"\{(\w+)\}", operation.path)})
        for tag in TAGS:
            fuzz_operation(fuzz, cases, names, f"fuzz-{tag or 'none'}", chosen)
        if operation.method.upper() != "GET":
            replenish(fuzz)


def fuzz_operation(fuzz: Fuzz, cases: Any, names: Any, user: str, chosen: int) -> None:
    """``EXAMPLES`` cases of one operation as ``user``; findings are recorded, not raised, so hypothesis
    neither stops at the first nor spends the time budget shrinking it."""

    @seed(chosen)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases, replaced=names)
    def run(case: Any, replaced: dict[str, str | None]) -> None:
        for name, value in replaced.items():
            if value is not None:
                case.path_parameters[name] = percent(value)
        fuzz.call_case(case, user)

    run()


def restart_and_check(fuzz: Fuzz, process: Any, witness: str, probe: Probe) -> list[str]:
    """SIGTERM, start on the same data dir; what the store must have kept (see the module docstring)."""
    problems: list[str] = []
    before = api(fuzz, "GET", "/api/queues?columns=vhost,name,durable")
    listed: set[tuple[str, str]] = set()
    if before.status == 200:
        listed = {(q["vhost"], q["name"]) for q in json.loads(before.content) if q.get("durable")}
    else:  # a finding already; the queues the API reported as created are still checked
        problems.append(f"before the restart, GET /api/queues answered {before.status}")
    code = process.stop()
    if code not in (0, -15):
        problems.append(f"SIGTERM: the broker exited with {code}:\n{process.log_tail()}")
    process.start()
    tracked = {k for k in fuzz.durable if not fuzz.may_have_expired(*k)}
    missing, unchecked = missing_queues(fuzz, process, tracked | listed)
    problems += [
        f"durable queue {n!r} in vhost {v!r}, created by the API ({fuzz.durable[v, n]}), lost"
        for v, n in sorted(missing & tracked)
    ]
    problems += [
        f"durable queue {n!r} in vhost {v!r}, listed before the stop, lost"
        for v, n in sorted((missing & listed) - tracked)
    ]
    credentials = pika.PlainCredentials("fuzz-probe", PASSWORD)
    conn = pika.BlockingConnection(process.broker.params(virtual_host=witness, credentials=credentials))
    kept: set[bytes] = set()
    try:
        ch = conn.channel()
        while (got := ch.basic_get("probe.durable", auto_ack=True))[0] is not None:
            kept.add(got[2])
    finally:
        conn.close()
    lost = [m for m in probe.confirmed if m not in kept]
    if lost:
        problems.append(
            f"{len(lost)} of {len(probe.confirmed)} confirmed persistent messages lost: {lost[:5]}"
        )
    print(
        f"restart: {len(tracked)} durable queues the API created (and nothing could have removed), "
        f"{len(listed)} durable queues listed before the stop: {len(missing)} lost, {len(unchecked)} not "
        f"checkable {sorted(unchecked)[:5]}; {len(kept)} of {len(probe.confirmed)} confirmed messages back"
    )
    return problems


def missing_queues(fuzz: Fuzz, process: Any, wanted: set[tuple[str, str]]) -> tuple[set[Any], set[Any]]:
    """``(missing, unchecked)`` of ``(vhost, name)`` queues: a passive ``queue.declare`` as ROOT (no listing
    the fuzzer may have broken), else ``GET /api/queues/{vhost}/{name}``."""
    missing: set[tuple[str, str]] = set()
    unchecked: set[tuple[str, str]] = set()
    credentials = pika.PlainCredentials(ROOT, PASSWORD)
    for vhost in sorted({v for v, _ in wanted}):
        names = sorted(n for v, n in wanted if v == vhost)
        api(
            fuzz,
            "PUT",
            f"/api/permissions/{percent(vhost)}/{ROOT}",
            {"configure": ".*", "write": ".*", "read": ".*"},
        )
        by_http = [n for n in names if len(n.encode()) > 255]  # no AMQP shortstr holds these
        try:
            conn = pika.BlockingConnection(process.broker.params(virtual_host=vhost, credentials=credentials))
        except Exception:
            by_http = names
        else:
            try:
                ch = conn.channel()
                for name in (n for n in names if n not in by_http):
                    try:
                        ch.queue_declare(name, passive=True)
                    except pika.exceptions.ChannelClosedByBroker as exc:
                        (missing if exc.reply_code == 404 else unchecked).add((vhost, name))
                        ch = conn.channel()
            finally:
                with contextlib.suppress(Exception):
                    conn.close()
        for name in by_http:
            status = fuzz.send(
                ROOT, "GET", QUEUE_ROUTE, {"vhost": percent(vhost), "name": percent(name)}
            ).status
            if status != 200:
                (missing if status == 404 else unchecked).add((vhost, name))
    return missing, unchecked


@pytest.fixture(autouse=True)
def _quiet_pika() -> Iterator[None]:
    """The probe's reconnects would flood the captured log."""
    logger = logging.getLogger("pika")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)
