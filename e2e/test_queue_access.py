"""Every way to a queue's messages checks the same rules, exclusivity included (issue 38): consume, get
and purge over AMQP, get and purge over HTTP and the command line, and ottermq's dead-letter tools
(browse, move: extensions).

Another connection's exclusive queue is RESOURCE_LOCKED to everyone else, whoever the user: a
channel is closed 405, HTTP ``/get`` answers 400 ``405 RESOURCE_LOCKED - ...``, HTTP purge 400 with
the bare text (RabbitMQ 3.10.8's answers, measured). HTTP ``/get`` checks the permission before the
queue's existence, as a channel does: 401 with the ACCESS_REFUSED text even for a queue that does
not exist, and 404 ``not_found`` with NOT_FOUND's text for one that does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from .conftest import reply_text
from .polling import poll_until

GET = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}


def q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def locked_text(queue: str, vhost: str) -> str:
    return (
        f"cannot obtain exclusive access to locked queue '{queue}' in vhost '{vhost}'. It could be "
        "originally declared on another connection or the exclusive property value does not match that "
        "of the original declaration."
    )


def make_user(broker: Any, read: str) -> Iterator[tuple[str, str]]:
    name, password = f"e2e-access-{uuid.uuid4().hex[:8]}", "secret"
    assert broker.api(f"/api/users/{q(name)}", "PUT", {"password": password, "tags": "management"})[0] in (
        201,
        204,
    )
    perms = {"configure": read, "write": read, "read": read}
    assert broker.api(f"/api/permissions/{q(broker.vhost)}/{q(name)}", "PUT", perms)[0] in (201, 204)
    yield name, password
    broker.api(f"/api/users/{q(name)}", "DELETE")


@pytest.fixture
def reader(broker) -> Iterator[tuple[str, str]]:
    """Another management user, with every permission on the test vhost."""
    yield from make_user(broker, ".*")


@pytest.fixture
def stranger(broker) -> Iterator[tuple[str, str]]:
    """A management user with access to the test vhost but no permission on anything in it."""
    yield from make_user(broker, "")


@pytest.fixture
def locked(connect, unique) -> Iterator[tuple[str, Any]]:
    """``(queue, owner channel)``: an exclusive queue holding one message, held by its own connection."""
    owner = connect().channel()
    name = unique("locked")
    owner.queue_declare(name, exclusive=True)
    owner.basic_publish("", name, b"mine")
    poll_until(lambda: owner.queue_declare(name, passive=True).method.message_count == 1)
    yield name, owner


def still_there(owner: Any, queue: str) -> None:
    assert owner.queue_declare(queue, passive=True).method.message_count == 1


@pytest.mark.parametrize("as_reader", [False, True], ids=["same-user", "other-user"])
@pytest.mark.parametrize("way", ["consume", "get", "purge"])
def test_amqp_ways_into_another_connections_exclusive_queue_are_locked(
    broker, connect, channel_error, locked, reader, way, as_reader
):
    queue, owner = locked
    params = broker.params(credentials=pika.PlainCredentials(*reader)) if as_reader else broker.params()
    ch = pika.BlockingConnection(params).channel()
    try:
        action = {
            "consume": lambda: ch.basic_consume(queue, lambda *_: None),
            "get": lambda: ch.basic_get(queue),
            "purge": lambda: ch.queue_purge(queue),
        }[way]
        channel_error(action, 405, "RESOURCE_LOCKED - " + locked_text(queue, broker.vhost))
    finally:
        ch.connection.close()
    still_there(owner, queue)


@pytest.mark.parametrize("as_reader", [False, True], ids=["same-user", "other-user"])
def test_http_get_and_purge_of_another_connections_exclusive_queue_are_400(broker, locked, reader, as_reader):
    queue, owner = locked
    auth = reader if as_reader else None
    path = f"/api/queues/{q(broker.vhost)}/{q(queue)}"
    status, body = broker.api(f"{path}/get", "POST", GET, auth=auth)
    reason = "405 " + reply_text("RESOURCE_LOCKED - " + locked_text(queue, broker.vhost))
    assert (status, body) == (400, {"error": "bad_request", "reason": reason})
    status, body = broker.api(f"{path}/contents", "DELETE", auth=auth)
    assert (status, body) == (400, {"error": "bad_request", "reason": locked_text(queue, broker.vhost)})
    still_there(owner, queue)


def test_http_get_checks_the_permission_before_the_queue_exists(broker, stranger, locked, unique):
    queue, owner = locked
    missing = unique("missing")
    for name in (missing, queue):
        status, body = broker.api(f"/api/queues/{q(broker.vhost)}/{q(name)}/get", "POST", GET, auth=stranger)
        refused = f"ACCESS_REFUSED - access to queue '{name}' in vhost '{broker.vhost}' refused for user "
        assert (status, body) == (401, {"error": "not_authorised", "reason": f"{refused}'{stranger[0]}'"})
    status, body = broker.api(f"/api/queues/{q(broker.vhost)}/{q(missing)}/get", "POST", GET)
    reason = f"NOT_FOUND - no queue '{missing}' in vhost '{broker.vhost}'"
    assert (status, body) == (404, {"error": "not_found", "reason": reason})
    still_there(owner, queue)


def cli(broker: Any, *args: str, user: tuple[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    name, password = user or (broker.user, broker.password)
    command = [sys.executable, "-m", "ottermq.broker", *args, "--url", broker.management_url]
    command += ["--user", name, "--password", password, "--quiet", "--any-broker"]  # RabbitMQ's too
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("way", ["get", "purge"])
def test_the_command_line_finds_another_connections_exclusive_queue_locked(broker, locked, reader, way):
    queue, owner = locked
    done = cli(broker, way, queue, "--vhost", broker.vhost, user=reader)
    assert done.returncode == 1 and "cannot obtain exclusive access to locked queue" in done.stderr
    still_there(owner, queue)


# -- ottermq's dead-letter tools (extensions) ----------------------------------------------------------
@pytest.fixture
def locked_dlq(connect, unique) -> Iterator[tuple[str, Any]]:
    """``(queue, owner channel)``: an exclusive queue holding one dead letter (rejected from a work queue)."""
    owner = connect().channel()
    dlq, work = unique("locked-dlq"), unique("work")
    owner.queue_declare(dlq, exclusive=True)
    owner.queue_declare(work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    owner.basic_publish("", work, b"dead")
    method = poll_until(lambda: owner.basic_get(work)[0])
    owner.basic_reject(method.delivery_tag, requeue=False)
    poll_until(lambda: owner.queue_declare(dlq, passive=True).method.message_count == 1)
    yield dlq, owner
    owner.queue_delete(work)


@pytest.mark.extension
@pytest.mark.parametrize("as_reader", [False, True], ids=["same-user", "other-user"])
def test_the_dead_letter_tools_find_another_connections_exclusive_queue_locked(
    broker, locked_dlq, reader, as_reader
):
    queue, owner = locked_dlq
    auth = reader if as_reader else None
    reason = "405 " + reply_text("RESOURCE_LOCKED - " + locked_text(queue, broker.vhost))
    locked = (400, {"error": "bad_request", "reason": reason})
    assert broker.api(f"/api/dead-letters/{q(broker.vhost)}/{q(queue)}", auth=auth) == locked
    path = f"/api/dead-letters/{q(broker.vhost)}/{q(queue)}/moves"
    for body in ({"all": True}, {"filter": {"reason": "rejected"}}, {"ids": [1, 2, 3]}):
        assert broker.api(path, "POST", body, auth=auth) == locked
    status, index = broker.api("/api/dead-letters", auth=auth)
    assert status == 200 and queue not in [item["name"] for item in index]
    done = cli(broker, "dlq", "move", broker.vhost, queue, "--all", user=auth)
    assert done.returncode == 1 and "405 RESOURCE_LOCKED" in done.stderr
    still_there(owner, queue)


@pytest.mark.extension
def test_the_dead_letter_tools_check_the_permission_before_the_queue_exists(
    broker, stranger, locked_dlq, unique
):
    queue, owner = locked_dlq
    for name in (unique("missing"), queue):
        refused = f"ACCESS_REFUSED - access to queue '{name}' in vhost '{broker.vhost}' refused for user "
        answer = (401, {"error": "not_authorised", "reason": f"{refused}'{stranger[0]}'"})
        assert broker.api(f"/api/dead-letters/{q(broker.vhost)}/{q(name)}", auth=stranger) == answer
        path = f"/api/dead-letters/{q(broker.vhost)}/{q(name)}/moves"
        assert broker.api(path, "POST", {"all": True}, auth=stranger) == answer
    status, index = broker.api("/api/dead-letters", auth=stranger)
    assert status == 200 and queue not in [item["name"] for item in index]
    missing = unique("missing")
    status, body = broker.api(f"/api/dead-letters/{q(broker.vhost)}/{q(missing)}")
    assert (status, body) == (
        404,
        {"error": "not_found", "reason": f"NOT_FOUND - no queue '{missing}' in vhost '{broker.vhost}'"},
    )
    still_there(owner, queue)
