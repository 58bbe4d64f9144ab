"""Permissions: which AMQP method needs which permission, and RabbitMQ's exact refusals.

Every expectation here was first read back from RabbitMQ 3.10.8. The restricted user may
configure names containing ``-PC-``, write names containing ``-PW-`` and read names containing
``-PR-`` (RabbitMQ searches the regex in the name, unanchored); ``e2e-perm-empty`` has an all-empty
entry (opens the vhost, allows nothing) and ``e2e-perm-none`` has no entry at all.

Where the users come from:
    * ``AMQP_URL`` set (RabbitMQ): created once per module with ``rabbitmqctl import_definitions``
      and deleted afterwards; the module is skipped when ``rabbitmqctl`` is missing or fails.
    * ottermq: each test starts a private broker (``broker_process``) with
      ``OTTERMQ_DEFINITIONS_FILE`` pointing at a RabbitMQ definitions file holding the same users
      plus ``guest``; skipped until ottermq's settings have ``definitions_file``.

One case per rule runs here against both brokers; the variants are protocol tests
(tests/protocol/test_permissions.py).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pamqp.commands
import pamqp.frame
import pamqp.heartbeat
import pika
import pika.exceptions
import pytest

from .polling import poll_until

RESTRICTED, RESTRICTED_PW = "e2e-perm-restricted", "restricted-pw"
EMPTY, EMPTY_PW = "e2e-perm-empty", "empty-pw"
NOPERM, NOPERM_PW = "e2e-perm-none", "none-pw"
CONFIGURE, WRITE, READ = "-PC-", "-PW-", "-PR-"


def rabbit_hash(password: str) -> str:
    """RabbitMQ's ``rabbit_password_hashing_sha256`` format (4-byte salt + sha256)."""
    salt = os.urandom(4)
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def user_definitions(vhost: str) -> dict[str, Any]:
    """The three test users and their permissions on ``vhost`` (RabbitMQ definitions JSON)."""

    def user(name: str, password: str) -> dict[str, Any]:
        return {
            "name": name,
            "password_hash": rabbit_hash(password),
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": [],
        }

    return {
        "users": [user(RESTRICTED, RESTRICTED_PW), user(EMPTY, EMPTY_PW), user(NOPERM, NOPERM_PW)],
        "permissions": [
            {"user": RESTRICTED, "vhost": vhost, "configure": CONFIGURE, "write": WRITE, "read": READ},
            {"user": EMPTY, "vhost": vhost, "configure": "", "write": "", "read": ""},
        ],
    }


def ottermq_definitions() -> dict[str, Any]:
    defs = user_definitions("/")
    defs["rabbit_version"] = "3.10.8"
    defs["vhosts"] = [{"name": "/", "metadata": {"description": "Default virtual host", "tags": []}}]
    defs["users"].append(
        {
            "name": "guest",
            "password_hash": rabbit_hash("guest"),
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": ["administrator"],
        }
    )
    defs["permissions"].append(
        {"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
    )
    return defs


def rabbitmqctl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["rabbitmqctl", *args], input=stdin, text=True, capture_output=True, timeout=60, check=False
    )


# --------------------------------------------------------------------------------------------------------
# where the test users live
# --------------------------------------------------------------------------------------------------------
@dataclass
class Target:
    """A broker that knows the test users, with ``guest`` as the administrator."""

    host: str
    port: int
    vhost: str
    admin: Callable[..., pika.ConnectionParameters]
    names: list[str] = field(default_factory=list)

    def params(self, user: str, password: str, **overrides: Any) -> pika.ConnectionParameters:
        return self.admin(credentials=pika.PlainCredentials(user, password), **overrides)

    def name(self, *tokens: str) -> str:
        """A fresh resource name carrying the given permission tokens (cleaned up afterwards)."""
        name = f"e2e.perm.{''.join(tokens)}.{uuid.uuid4().hex[:10]}"
        self.names.append(name)
        return name

    def refused(self, kind: str, name: str, user: str = RESTRICTED) -> str:
        return f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '{self.vhost}' refused for user '{user}'"

    def cleanup(self) -> None:
        if not self.names:
            return
        with contextlib.suppress(Exception):
            conn = pika.BlockingConnection(self.admin())
            try:
                for name in self.names:
                    for kind in ("queue", "exchange"):
                        try:
                            ch = conn.channel()
                            getattr(ch, f"{kind}_delete")(name)
                            ch.close()
                        except pika.exceptions.ChannelClosedByBroker:
                            pass
            finally:
                conn.close()


@pytest.fixture(scope="module")
def rabbit_users(request: pytest.FixtureRequest) -> Iterator[Any]:
    """On a foreign broker (AMQP_URL): create the test users there with rabbitmqctl."""
    if not os.environ.get("AMQP_URL"):
        yield None
        return
    broker = request.getfixturevalue("broker")
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not available to create the restricted users")
    result = rabbitmqctl("import_definitions", stdin=json.dumps(user_definitions(broker.vhost)))
    if result.returncode != 0:
        pytest.skip(
            f"rabbitmqctl import_definitions failed: {result.stderr.strip() or result.stdout.strip()}"
        )
    try:
        # the import is asynchronous: wait until the restricted user can log in
        params = broker.params(credentials=pika.PlainCredentials(RESTRICTED, RESTRICTED_PW))

        def logs_in() -> bool:
            try:
                pika.BlockingConnection(params).close()
            except pika.exceptions.AMQPConnectionError:
                return False
            return True

        poll_until(
            logs_in, timeout=20, interval=0.1, what="the restricted user imported with rabbitmqctl to log in"
        )
        yield broker
    finally:
        for user in (RESTRICTED, EMPTY, NOPERM):
            rabbitmqctl("delete_user", user)


@pytest.fixture
def target(
    rabbit_users: Any,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> Iterator[Target]:
    if rabbit_users is not None:
        broker = rabbit_users
        made = Target(broker.host, broker.port, broker.vhost, broker.params)
    else:
        path = tmp_path / "definitions.json"
        path.write_text(json.dumps(ottermq_definitions()), encoding="utf-8")
        process = request.getfixturevalue("broker_process")({"OTTERMQ_DEFINITIONS_FILE": str(path)})
        broker = process.start()
        made = Target(broker.host, broker.port, "/", broker.params)
    try:
        yield made
    finally:
        made.cleanup()


@pytest.fixture
def admin(target: Target) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    conn = pika.BlockingConnection(target.admin())
    yield conn.channel()
    with contextlib.suppress(Exception):
        conn.close()


@pytest.fixture
def restricted(target: Target) -> Iterator[Callable[[], Any]]:
    """``restricted()`` -> a fresh channel of the restricted user (one connection per test)."""
    conns: list[pika.BlockingConnection] = []

    def _channel() -> Any:
        if not conns or not conns[-1].is_open:
            conns.append(pika.BlockingConnection(target.params(RESTRICTED, RESTRICTED_PW)))
        return conns[-1].channel()

    yield _channel
    for conn in conns:
        with contextlib.suppress(Exception):
            if conn.is_open:
                conn.close()


def publish(ch: Any, exchange: str, routing_key: str = "k") -> None:
    """Publish, then make a round trip so an asynchronous channel error surfaces here."""
    ch.basic_publish(exchange, routing_key, b"m")
    ch.basic_qos(prefetch_count=0)


# --------------------------------------------------------------------------------------------------------
# Connection.Open, spoken by hand: pika only reports "probable access denied" there
# --------------------------------------------------------------------------------------------------------
def open_error(host: str, port: int, user: str, password: str, vhost: str) -> tuple[int, str] | None:
    """Log in and open ``vhost``; returns the ``Connection.Close`` code and text, or None if it opened."""
    with socket.create_connection((host, port), timeout=10) as sock:
        buf = b""

        def send(frame: Any) -> None:
            sock.sendall(pamqp.frame.marshal(frame, 0))

        def recv() -> Any:
            nonlocal buf
            while True:
                if len(buf) >= 7:
                    size = int.from_bytes(buf[3:7], "big")
                    if len(buf) >= 8 + size:
                        _, _, frame = pamqp.frame.unmarshal(buf[: 8 + size])
                        buf = buf[8 + size :]
                        if not isinstance(frame, pamqp.heartbeat.Heartbeat):
                            return frame
                        continue
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("broker closed the socket")
                buf += chunk

        sock.sendall(b"AMQP\x00\x00\x09\x01")
        assert isinstance(recv(), pamqp.commands.Connection.Start)
        send(
            pamqp.commands.Connection.StartOk(
                client_properties={"capabilities": {"authentication_failure_close": True}},
                mechanism="PLAIN",
                response=f"\0{user}\0{password}",
                locale="en_US",
            )
        )
        reply = recv()
        if isinstance(reply, pamqp.commands.Connection.Close):
            return int(reply.reply_code), str(reply.reply_text)
        assert isinstance(reply, pamqp.commands.Connection.Tune)
        send(
            pamqp.commands.Connection.TuneOk(
                channel_max=reply.channel_max, frame_max=reply.frame_max, heartbeat=0
            )
        )
        send(pamqp.commands.Connection.Open(virtual_host=vhost))
        reply = recv()
        if isinstance(reply, pamqp.commands.Connection.OpenOk):
            send(pamqp.commands.Connection.Close(200, "bye", 0, 0))
            return None
        assert isinstance(reply, pamqp.commands.Connection.Close), reply
        with contextlib.suppress(OSError):
            send(pamqp.commands.Connection.CloseOk())
        return int(reply.reply_code), str(reply.reply_text)


# --------------------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------------------
def test_vhost_access(target: Target) -> None:
    host, port, vhost = target.host, target.port, target.vhost
    assert open_error(host, port, RESTRICTED, RESTRICTED_PW, vhost) is None
    assert open_error(host, port, EMPTY, EMPTY_PW, vhost) is None  # an all-empty entry opens the vhost
    assert open_error(host, port, NOPERM, NOPERM_PW, vhost) == (
        530,
        f"NOT_ALLOWED - access to vhost '{vhost}' refused for user '{NOPERM}'",
    )
    assert open_error(host, port, RESTRICTED, RESTRICTED_PW, "e2e-perm-no-such-vhost") == (
        530,
        "NOT_ALLOWED - vhost e2e-perm-no-such-vhost not found",
    )
    assert open_error(host, port, RESTRICTED, "wrong", vhost) == (
        403,
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
        "For details see the broker logfile.",
    )


def test_configure_permission(
    target: Target, admin: Any, restricted: Callable[[], Any], channel_error: Callable[..., Any]
) -> None:
    x_none, q_none = target.name(), target.name()
    admin.exchange_declare(x_none, "direct")
    admin.queue_declare(q_none)
    x_new, q_new = target.name(), target.name()
    x_cfg, q_cfg = target.name(CONFIGURE), target.name(CONFIGURE)

    channel_error(
        lambda: restricted().exchange_declare(x_new, "direct"), 403, target.refused("exchange", x_new)
    )
    restricted().exchange_declare(x_cfg, "direct")
    channel_error(
        lambda: restricted().exchange_declare(x_none, "direct"), 403, target.refused("exchange", x_none)
    )
    restricted().exchange_declare(x_none, "direct", passive=True)
    channel_error(lambda: restricted().exchange_delete(x_none), 403, target.refused("exchange", x_none))
    channel_error(
        lambda: restricted().exchange_delete(x_new), 403, target.refused("exchange", x_new)
    )  # missing
    restricted().exchange_delete(x_cfg)

    channel_error(lambda: restricted().queue_declare(q_new), 403, target.refused("queue", q_new))
    restricted().queue_declare(q_cfg)
    channel_error(lambda: restricted().queue_declare(q_none), 403, target.refused("queue", q_none))
    restricted().queue_declare(q_none, passive=True)
    channel_error(lambda: restricted().queue_delete(q_none), 403, target.refused("queue", q_none))
    channel_error(lambda: restricted().queue_delete(q_new), 403, target.refused("queue", q_new))  # missing
    restricted().queue_delete(q_cfg)

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        restricted().queue_declare("", exclusive=True)
    assert info.value.reply_code == 403
    pattern = re.escape(target.refused("queue", "@")).replace("@", r"amq\.gen-[A-Za-z0-9_-]{22}")
    assert re.fullmatch(pattern, info.value.reply_text), info.value.reply_text


def test_binding_permissions(
    target: Target, admin: Any, restricted: Callable[[], Any], channel_error: Callable[..., Any]
) -> None:
    q_none, q_w = target.name(), target.name(WRITE)
    x_none, x_r, x_w = target.name(), target.name(READ), target.name(WRITE)
    for queue in (q_none, q_w):
        admin.queue_declare(queue)
    for exchange in (x_none, x_r, x_w):
        admin.exchange_declare(exchange, "direct")

    for verb in ("queue_bind", "queue_unbind"):
        # write on the queue is checked first, then read on the exchange
        channel_error(
            lambda verb=verb: getattr(restricted(), verb)(q_none, x_none, "k"),
            403,
            target.refused("queue", q_none),
        )
        channel_error(
            lambda verb=verb: getattr(restricted(), verb)(q_w, x_none, "k"),
            403,
            target.refused("exchange", x_none),
        )
        getattr(restricted(), verb)(q_w, x_r, "k")
    for verb in ("exchange_bind", "exchange_unbind"):
        # write on the destination first, then read on the source
        channel_error(
            lambda verb=verb: getattr(restricted(), verb)(x_r, x_none, "k"),
            403,
            target.refused("exchange", x_r),
        )
        channel_error(
            lambda verb=verb: getattr(restricted(), verb)(x_w, x_none, "k"),
            403,
            target.refused("exchange", x_none),
        )
        getattr(restricted(), verb)(x_w, x_r, "k")
    # permission checks come before existence checks
    q_missing, x_missing = target.name(), target.name()
    channel_error(
        lambda: restricted().queue_bind(q_missing, x_r, "k"), 403, target.refused("queue", q_missing)
    )
    channel_error(
        lambda: restricted().queue_bind(q_w, x_missing, "k"), 403, target.refused("exchange", x_missing)
    )


def test_publish_consume_get_purge(
    target: Target, admin: Any, restricted: Callable[[], Any], channel_error: Callable[..., Any]
) -> None:
    x_none, x_w = target.name(), target.name(WRITE)
    q_none, q_r, q_c = target.name(), target.name(READ), target.name(CONFIGURE)
    for exchange in (x_none, x_w):
        admin.exchange_declare(exchange, "direct")
    for queue in (q_none, q_r, q_c):
        admin.queue_declare(queue)

    channel_error(lambda: publish(restricted(), x_none), 403, target.refused("exchange", x_none))
    channel_error(lambda: publish(restricted(), "", q_r), 403, target.refused("exchange", "amq.default"))
    channel_error(
        lambda: publish(restricted(), "amq.default", q_r), 403, target.refused("exchange", "amq.default")
    )
    x_missing, x_missing_w = target.name(), target.name(WRITE)
    channel_error(lambda: publish(restricted(), x_missing), 403, target.refused("exchange", x_missing))
    channel_error(
        lambda: publish(restricted(), x_missing_w),
        404,
        f"NOT_FOUND - no exchange '{x_missing_w}' in vhost '{target.vhost}'",
    )
    publish(restricted(), x_w)

    channel_error(
        lambda: restricted().basic_consume(q_none, lambda *a: None), 403, target.refused("queue", q_none)
    )
    channel_error(lambda: restricted().basic_get(q_none), 403, target.refused("queue", q_none))
    q_missing = target.name()
    channel_error(lambda: restricted().basic_get(q_missing), 403, target.refused("queue", q_missing))
    channel_error(
        lambda: restricted().queue_purge(q_c), 403, target.refused("queue", q_c)
    )  # purge needs read
    admin.basic_publish("", q_r, b"m")
    ch = restricted()
    assert ch.queue_purge(q_r).method.message_count == 1
    assert ch.basic_get(q_r) == (None, None, None)
    ch.basic_consume(q_r, lambda *a: None)


def test_alternate_exchange_and_dead_letter_exchange_checks(
    target: Target, admin: Any, restricted: Callable[[], Any], channel_error: Callable[..., Any]
) -> None:
    ae_none, ae_w = target.name(), target.name(WRITE)
    for exchange in (ae_none, ae_w):
        admin.exchange_declare(exchange, "fanout")

    # a new exchange with an alternate exchange: read on itself, then write on the AE
    x_c, x_cr, x_cr2 = target.name(CONFIGURE), target.name(CONFIGURE, READ), target.name(CONFIGURE, READ)
    channel_error(
        lambda: restricted().exchange_declare(x_c, "direct", arguments={"alternate-exchange": ae_none}),
        403,
        target.refused("exchange", x_c),
    )
    channel_error(
        lambda: restricted().exchange_declare(x_cr, "direct", arguments={"alternate-exchange": ae_none}),
        403,
        target.refused("exchange", ae_none),
    )
    restricted().exchange_declare(x_cr2, "direct", arguments={"alternate-exchange": ae_w})

    # a new queue with a dead-letter exchange: read on itself, then write on the DLX
    q_c, q_cr = target.name(CONFIGURE), target.name(CONFIGURE, READ)
    q_cr2, q_cr3 = target.name(CONFIGURE, READ), target.name(CONFIGURE, READ)
    channel_error(
        lambda: restricted().queue_declare(q_c, arguments={"x-dead-letter-exchange": ae_none}),
        403,
        target.refused("queue", q_c),
    )
    channel_error(
        lambda: restricted().queue_declare(q_cr, arguments={"x-dead-letter-exchange": ae_none}),
        403,
        target.refused("exchange", ae_none),
    )
    channel_error(
        lambda: restricted().queue_declare(q_cr2, arguments={"x-dead-letter-exchange": ""}),
        403,
        target.refused("exchange", "amq.default"),
    )
    restricted().queue_declare(q_cr3, arguments={"x-dead-letter-exchange": ae_w})


def test_dead_lettering_checks_nothing(target: Target, admin: Any, restricted: Callable[[], Any]) -> None:
    dlx, dlq, source = target.name(), target.name(), target.name(READ)
    admin.exchange_declare(dlx, "fanout")
    admin.queue_declare(dlq)
    admin.queue_bind(dlq, dlx)
    admin.queue_declare(source, arguments={"x-dead-letter-exchange": dlx})
    admin.basic_publish("", source, b"dead")
    ch = restricted()  # may read the source, may not write to the DLX
    method, _, body = poll_until(lambda: (lambda got: got if got[0] else None)(ch.basic_get(source)))
    assert body == b"dead"
    ch.basic_reject(method.delivery_tag, requeue=False)
    ch.basic_qos(prefetch_count=0)
    got = poll_until(lambda: (lambda g: g if g[0] else None)(admin.basic_get(dlq, auto_ack=True)))
    assert got[2] == b"dead"
