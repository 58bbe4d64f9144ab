"""Vhost and user limits (issue 17), set over the management API and hit with pika. Every test here
also passes against RabbitMQ 3.10 (``make conformance``): texts and codes are RabbitMQ's."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from .test_management_write import call, q

EVERYTHING = {"configure": ".*", "write": ".*", "read": ".*"}


@pytest.fixture
def tenant(broker) -> Iterator[tuple[str, str]]:
    """A vhost and a user with full permissions on it; both deleted afterwards."""
    token = uuid.uuid4().hex[:8]
    vhost, user = f"lim-{token}", f"lim-user-{token}"
    assert call(broker, f"/api/vhosts/{q(vhost)}", "PUT", {})[0] == 201
    assert call(broker, f"/api/users/{q(user)}", "PUT", {"password": "pw", "tags": ""})[0] == 201
    assert call(broker, f"/api/permissions/{q(vhost)}/{q(user)}", "PUT", EVERYTHING)[0] in (201, 204)
    yield vhost, user
    call(broker, f"/api/vhosts/{q(vhost)}", "DELETE")
    call(broker, f"/api/users/{q(user)}", "DELETE")


def params(broker, vhost: str, user: str) -> pika.ConnectionParameters:
    return broker.params(virtual_host=vhost, credentials=pika.PlainCredentials(user, "pw"))


def refused(fn: Any) -> tuple[int, str]:
    with pytest.raises(pika.exceptions.AMQPError) as info:
        fn()
    exc = info.value
    inner = exc.args[0] if isinstance(exc, pika.exceptions.ProbableAccessDeniedError) else exc
    if isinstance(inner, str):  # pika wraps the close as text: ("ConnectionClosedByBroker: (530) "...")
        code, text = inner.split("(", 1)[1].split(") ", 1)
        return int(code), text.strip('"')
    return inner.reply_code, inner.reply_text


def test_api_shapes_and_validation(broker, tenant):
    vhost, user = tenant
    base = f"/api/vhost-limits/{q(vhost)}"
    assert call(broker, f"{base}/max-connections", "PUT", {"value": 2})[0] == 204
    assert call(broker, f"{base}/max-queues", "PUT", {"value": 5})[0] == 204
    assert call(broker, base)[2] == [{"vhost": vhost, "value": {"max-connections": 2, "max-queues": 5}}]
    listed = call(broker, "/api/vhost-limits")[2]
    assert {"vhost": vhost, "value": {"max-connections": 2, "max-queues": 5}} in listed
    status, _, body = call(broker, f"{base}/max-queues", "PUT", {"value": "x"})
    assert (status, body["reason"]) == (
        400,
        'Validation failed\n\nmax-queues should be a number, actually was <<"x">>\n',
    )
    status, _, body = call(broker, f"{base}/max-bogus", "PUT", {"value": 1})
    assert (status, body["reason"]) == (
        400,
        'Validation failed\n\nUnrecognised terms [{<<"max-bogus">>,1}] in limits\n',
    )
    assert call(broker, f"{base}/max-queues", "PUT", {})[2]["reason"] == "[{key_missing,value}]"
    assert call(broker, "/api/vhost-limits/no-such-vhost/max-queues", "PUT", {"value": 1})[0::2] == (
        404,
        {"error": "not_found", "reason": "vhost_not_found"},
    )
    assert call(broker, "/api/vhost-limits/no-such-vhost")[0] == 404
    assert call(broker, f"{base}/max-queues", "DELETE")[0] == 204
    assert call(broker, f"{base}/max-queues", "DELETE")[0] == 204  # not set: 204 all the same
    ubase = f"/api/user-limits/{q(user)}"
    assert call(broker, f"{ubase}/max-channels", "PUT", {"value": 3})[0] == 204
    assert call(broker, ubase)[2] == [{"user": user, "value": {"max-channels": 3}}]
    status, _, body = call(broker, f"{ubase}/max-channels", "PUT", {"value": "x"})
    assert (status, body["reason"]) == (400, 'max-channels should be a number, actually was <<"x">>')
    status, _, body = call(broker, f"{ubase}/max-bogus", "PUT", {"value": 1})
    assert (status, body["reason"]) == (400, 'Unrecognised terms [{<<"max-bogus">>,1}] in user-limits')
    assert call(broker, "/api/user-limits/no-such-user/max-channels", "PUT", {"value": 1})[0::2] == (
        400,
        {"error": "bad_request", "reason": ["no_such_user", "no-such-user"]},
    )


def test_vhost_connection_limit(broker, tenant):
    vhost, user = tenant
    assert call(broker, f"/api/vhost-limits/{q(vhost)}/max-connections", "PUT", {"value": 1})[0] == 204
    first = pika.BlockingConnection(params(broker, vhost, user))
    try:
        assert refused(lambda: pika.BlockingConnection(params(broker, vhost, user))) == (
            530,
            f"NOT_ALLOWED - access to vhost '{vhost}' refused for user '{user}': connection limit "
            "(1) is reached",
        )
    finally:
        first.close()
    pika.BlockingConnection(params(broker, vhost, user)).close()  # room again
    assert call(broker, f"/api/vhost-limits/{q(vhost)}/max-connections", "PUT", {"value": -1})[0] == 204
    both = [pika.BlockingConnection(params(broker, vhost, user)) for _ in range(2)]  # -1: no limit
    for conn in both:
        conn.close()


def test_vhost_queue_limit(broker, tenant):
    vhost, user = tenant
    assert call(broker, f"/api/vhost-limits/{q(vhost)}/max-queues", "PUT", {"value": 1})[0] == 204
    with pika.BlockingConnection(params(broker, vhost, user)) as conn:
        channel = conn.channel()
        channel.queue_declare("q1")
        channel.queue_declare("q1")  # redeclaring is not a new queue
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            channel.queue_declare("q2")
        assert (info.value.reply_code, info.value.reply_text) == (
            406,
            f"PRECONDITION_FAILED - cannot declare queue 'q2': queue limit in vhost '{vhost}' (1) is reached",
        )


def test_user_connection_and_channel_limits(broker, tenant):
    vhost, user = tenant
    assert call(broker, f"/api/user-limits/{q(user)}/max-connections", "PUT", {"value": 1})[0] == 204
    first = pika.BlockingConnection(params(broker, vhost, user))
    try:
        assert refused(lambda: pika.BlockingConnection(params(broker, vhost, user))) == (
            530,
            f"NOT_ALLOWED - connection refused for user '{user}': user connection limit (1) is reached",
        )
    finally:
        first.close()
    assert call(broker, f"/api/user-limits/{q(user)}/max-connections", "DELETE")[0] == 204
    assert call(broker, f"/api/user-limits/{q(user)}/max-channels", "PUT", {"value": 1})[0] == 204
    conn = pika.BlockingConnection(params(broker, vhost, user))
    conn.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.channel()
    assert (info.value.reply_code, info.value.reply_text) == (
        530,
        f"NOT_ALLOWED - number of channels opened for user '{user}' has reached the maximum allowed "
        "user limit of (1)",
    )


@pytest.mark.extension  # a restart of the broker under test
def test_limits_survive_a_restart(broker_process):
    process = broker_process()
    b = process.start()
    assert call(b, "/api/vhost-limits/%2F/max-queues", "PUT", {"value": 0})[0] == 204
    assert call(b, "/api/user-limits/guest/max-channels", "PUT", {"value": 7})[0] == 204
    assert process.stop() == 0
    b = process.start()
    assert call(b, "/api/vhost-limits/%2F")[2] == [{"vhost": "/", "value": {"max-queues": 0}}]
    assert call(b, "/api/user-limits/guest")[2] == [{"user": "guest", "value": {"max-channels": 7}}]
    with pika.BlockingConnection(b.params()) as conn:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            conn.channel().queue_declare("no.room")
    assert info.value.reply_code == 406
