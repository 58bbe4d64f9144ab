"""Management HTTP API, the write side (issue 14): declare, delete, purge, get, publish, bindings,
vhosts, users, permissions and closing connections, as RabbitMQ's management plugin does them.

Every test not marked ``extension`` also runs against RabbitMQ 3.10 with ``rabbitmq_management``
(``AMQP_URL`` set). Whatever is created through the API is checked through AMQP (pika) and the
other way round; names are unique and removed afterwards.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any
from unittest.mock import ANY

import pika
import pytest

STATS_TIMEOUT = 20  # RabbitMQ's collect_statistics_interval is 5 s


def call(
    broker,
    path: str,
    method: str = "GET",
    body: Any = None,
    auth: tuple[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    """``(status, headers, decoded JSON body or None)`` of one management API request."""
    return broker.http(path, method, body, auth=auth, headers=headers)


def q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def connection_named(broker, client_name: str) -> str | None:
    """The API name of the connection whose client called itself ``client_name``."""
    for item in call(broker, "/api/connections")[2] or []:
        if (item.get("client_properties") or {}).get("connection_name") == client_name:
            return str(item["name"])
    return None


@pytest.fixture
def vh(broker) -> str:
    return q(broker.vhost)


def test_put_queue_is_seen_by_amqp_and_checks_equivalence(broker, vh, channel, unique):
    name = unique("q")
    path = f"/api/queues/{vh}/{q(name)}"
    declare = {"durable": True, "auto_delete": False, "arguments": {"x-max-length": 5}}
    assert call(broker, path, "PUT", declare)[0] == 201
    assert call(broker, path, "PUT", {"durable": True, "arguments": {"x-max-length": 5}})[0] == 204
    ok = channel.queue_declare(name, passive=True)
    assert ok.method.message_count == 0
    shown = call(broker, path)[2]
    assert (shown["durable"], shown["arguments"]) == (True, {"x-max-length": 5})
    status, _, body = call(broker, path, "PUT", {"durable": False, "arguments": {"x-max-length": 5}})
    assert status == 400
    assert body == {
        "error": "bad_request",
        "reason": f"inequivalent arg 'durable' for queue '{name}' in vhost '{broker.vhost}': "
        "received 'false' but current is 'true'",
    }


def test_declared_over_amqp_deleted_over_http(broker, vh, channel, unique):
    name = unique("q")
    channel.queue_declare(name)
    channel.basic_publish("", name, b"x")
    channel.basic_get(name, auto_ack=False)  # a round trip: the publish has arrived ...
    channel.basic_recover(requeue=True)  # ... and is back
    path = f"/api/queues/{vh}/{q(name)}"
    status, _, body = call(broker, path + "?if-empty=true", "DELETE")
    assert status == 400 and body["error"] == "bad_request"
    assert body["reason"] == f"queue '{name}' in vhost '{broker.vhost}' not empty"
    assert call(broker, path + "/contents", "DELETE")[0] == 204
    assert channel.queue_declare(name, passive=True).method.message_count == 0
    assert call(broker, path + "?if-empty=true", "DELETE")[0] == 204
    assert call(broker, path, "DELETE")[0] == 404
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.queue_declare(name, passive=True)
    assert info.value.reply_code == 404


def _publish(channel, name: str, n: int) -> None:
    props = pika.BasicProperties(content_type="text/plain", headers={"k": "v"}, delivery_mode=2)
    for i in range(n):
        channel.basic_publish("", name, f"m{i}".encode(), props)
    channel.queue_declare(name, passive=True)  # a round trip: the publishes have arrived


def get_messages(
    broker, vh: str, name: str, ackmode: str, count: int = 5, **extra: Any
) -> list[dict[str, Any]]:
    body = {"count": count, "ackmode": ackmode, "encoding": "auto", **extra}
    status, _, got = call(broker, f"/api/queues/{vh}/{q(name)}/get", "POST", body)
    assert status == 200, got
    return got


def test_get_requeue_modes_keep_the_messages(broker, vh, channel, unique):
    name = unique("q")
    channel.queue_declare(name)
    _publish(channel, name, 2)
    first = get_messages(broker, vh, name, "ack_requeue_true")
    assert [m["payload"] for m in first] == ["m0", "m1"]
    assert [m["message_count"] for m in first] == [1, 0]
    m = first[0]
    assert (m["redelivered"], m["exchange"], m["routing_key"], m["payload_bytes"], m["payload_encoding"]) == (
        False,
        "",
        name,
        2,
        "string",
    )
    assert m["properties"] == {"content_type": "text/plain", "headers": {"k": "v"}, "delivery_mode": 2}
    again = get_messages(broker, vh, name, "reject_requeue_true", count=1, truncate=1)
    assert (again[0]["payload"], again[0]["payload_bytes"], again[0]["redelivered"]) == ("m", 2, True)
    assert channel.queue_declare(name, passive=True).method.message_count == 2
    gone = get_messages(broker, vh, name, "ack_requeue_false")
    assert len(gone) == 2
    assert get_messages(broker, vh, name, "ack_requeue_false") == []


def test_get_reject_requeue_false_dead_letters(broker, vh, channel, unique):
    dlq = unique("dlq")
    name = unique("q")
    channel.queue_declare(dlq)
    channel.queue_declare(name, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    _publish(channel, name, 1)
    assert len(get_messages(broker, vh, name, "reject_requeue_false")) == 1
    assert channel.queue_declare(name, passive=True).method.message_count == 0
    dead = get_messages(broker, vh, dlq, "ack_requeue_false")
    assert len(dead) == 1
    death = dead[0]["properties"]["headers"]["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("rejected", name, 1)


def test_get_base64_and_bad_input(broker, vh, channel, unique):
    name = unique("q")
    channel.queue_declare(name)
    channel.basic_publish("", name, b"\xff\x00")
    channel.queue_declare(name, passive=True)
    got = get_messages(broker, vh, name, "ack_requeue_true", encoding="auto")
    encoded = base64.b64encode(b"\xff\x00").decode()
    assert (got[0]["payload"], got[0]["payload_encoding"]) == (encoded, "base64")
    assert (
        call(
            broker,
            f"/api/queues/{vh}/{q(unique('missing'))}/get",
            "POST",
            {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
        )[0]
        == 404
    )


def test_publish_routed_and_unrouted(broker, vh, channel, unique):
    name = unique("q")
    channel.queue_declare(name)
    body = {
        "properties": {"delivery_mode": 2, "headers": {"h": "1"}, "content_type": "application/json"},
        "routing_key": name,
        "payload": "aGk=",
        "payload_encoding": "base64",
    }
    status, _, result = call(broker, f"/api/exchanges/{vh}/amq.default/publish", "POST", body)
    assert (status, result) == (200, {"routed": True})
    body["routing_key"] = unique("nowhere")
    assert call(broker, f"/api/exchanges/{vh}/amq.default/publish", "POST", body)[2] == {"routed": False}
    method, props, payload = channel.basic_get(name, auto_ack=True)
    assert payload == b"hi"
    assert (props.delivery_mode, props.content_type, props.headers) == (2, "application/json", {"h": "1"})
    missing = unique("missing")
    status, _, error = call(broker, f"/api/exchanges/{vh}/{q(missing)}/publish", "POST", body)
    reason = f"404 NOT_FOUND - no exchange '{missing}' in vhost '{broker.vhost}'"
    assert (status, error) == (400, {"error": "bad_request", "reason": reason})


def test_exchange_put_bind_publish_and_delete(broker, vh, channel, unique):
    x = unique("x")
    name = unique("q")
    xpath = f"/api/exchanges/{vh}/{q(x)}"
    assert call(broker, xpath, "PUT", {"type": "direct", "durable": False, "auto_delete": False})[0] == 201
    assert call(broker, xpath, "PUT", {"type": "direct", "durable": False})[0] == 204
    status, _, body = call(broker, xpath, "PUT", {"type": "fanout", "durable": False})
    assert status == 400 and body["error"] == "bad_request" and "inequivalent arg 'type'" in body["reason"]
    channel.exchange_declare(x, "direct", passive=True)
    channel.queue_declare(name)
    between = f"/api/bindings/{vh}/e/{q(x)}/q/{q(name)}"
    status, headers, _ = call(broker, between, "POST", {"routing_key": "rk", "arguments": {}})
    assert status == 201
    assert headers["location"] == f"{q(name)}/rk"
    expected = {
        "source": x,
        "vhost": broker.vhost,
        "destination": name,
        "destination_type": "queue",
        "routing_key": "rk",
        "arguments": {},
        "properties_key": "rk",
    }
    assert call(broker, between)[2] == [expected]
    assert call(broker, between + "/rk")[2] == expected
    queue_bindings = call(broker, f"/api/queues/{vh}/{q(name)}/bindings")[2]
    assert [(b["source"], b["routing_key"], b["properties_key"]) for b in queue_bindings] == [
        ("", name, name),
        (x, "rk", "rk"),
    ]
    assert call(broker, f"{xpath}/bindings/source")[2] == [expected]
    assert expected in call(broker, f"/api/bindings/{vh}")[2]
    publish = {"properties": {}, "routing_key": "rk", "payload": "p", "payload_encoding": "string"}
    assert call(broker, f"{xpath}/publish", "POST", publish)[2] == {"routed": True}
    assert channel.basic_get(name, auto_ack=True)[2] == b"p"
    status, _, body = call(broker, xpath + "?if-unused=true", "DELETE")
    assert status == 400 and body["reason"] == f"exchange '{x}' in vhost '{broker.vhost}' in use"
    assert call(broker, between + "/rk", "DELETE")[0] == 204
    assert call(broker, between)[2] == []
    assert call(broker, f"{xpath}/publish", "POST", publish)[2] == {"routed": False}
    assert call(broker, xpath + "?if-unused=true", "DELETE")[0] == 204
    assert call(broker, xpath)[0] == 404
    assert call(broker, xpath, "DELETE")[0] == 404


def test_exchange_to_exchange_binding_made_over_amqp(broker, vh, channel, unique):
    src, dst = unique("src"), unique("dst")
    channel.exchange_declare(src, "fanout", auto_delete=False)
    channel.exchange_declare(dst, "fanout", auto_delete=False)
    channel.exchange_bind(dst, src, routing_key="")
    between = f"/api/bindings/{vh}/e/{q(src)}/e/{q(dst)}"
    [binding] = call(broker, between)[2]
    assert (binding["destination_type"], binding["properties_key"]) == ("exchange", "~")
    assert call(broker, f"/api/exchanges/{vh}/{q(dst)}/bindings/destination")[2] == [binding]
    assert call(broker, between + "/~", "DELETE")[0] == 204
    assert call(broker, between)[2] == []
    status, headers, _ = call(broker, between, "POST", {"routing_key": "a b~c", "arguments": {}})
    assert status == 201 and headers["location"] == f"{q(dst)}/a%2Bb%257Ec"
    [binding] = call(broker, between)[2]
    assert (binding["routing_key"], binding["properties_key"]) == ("a b~c", "a+b%7Ec")
    assert call(broker, between + "/a%2Bb%257Ec", "DELETE")[0] == 204


def test_default_exchange_bindings_are_refused(broker, vh, channel, unique):
    name = unique("q")
    channel.queue_declare(name)
    refused = (401, {"error": "not_authorised", "reason": "Access refused."})
    between = f"/api/bindings/{vh}/e/amq.default/q/{q(name)}"
    status, _, body = call(broker, between, "POST", {"routing_key": "k"})
    assert (status, body) == refused
    status, _, body = call(broker, f"{between}/{q(name)}", "DELETE")
    assert (status, body) == refused
    assert call(broker, f"{between}/{q(name)}")[2]["source"] == ""


def test_reserved_names_and_bad_arguments(broker, vh, unique):
    refused = (401, {"error": "not_authorised", "reason": "Access refused."})
    status, _, body = call(broker, f"/api/queues/{vh}/amq.{unique('q')}", "PUT", {})
    assert (status, body) == refused
    status, _, body = call(broker, f"/api/exchanges/{vh}/amq.direct", "DELETE")
    assert (status, body) == refused
    name = unique("q")
    status, _, body = call(broker, f"/api/queues/{vh}/{q(name)}", "PUT", {"arguments": {"x-max-length": "a"}})
    reason = (
        f"invalid arg 'x-max-length' for queue '{name}' in vhost '{broker.vhost}': "
        '"expected integer, got longstr"'
    )
    assert (status, body) == (400, {"error": "bad_request", "reason": reason})
    x = unique("x")
    status, _, body = call(broker, f"/api/exchanges/{vh}/{q(x)}", "PUT", {"type": "nosuch"})
    assert (status, body) == (400, {"error": "bad_request", "reason": "unknown exchange type 'nosuch'"})
    assert call(broker, f"/api/exchanges/{vh}/{q(x)}", "PUT", {})[0] == 201
    assert call(broker, f"/api/exchanges/{vh}/{q(x)}")[2]["type"] == "direct"
    perm = {"configure": ".*", "write": ".*", "read": ".*"}
    missing_vhost, missing_user = q(unique("vh")), unique("user")
    for path in (f"/api/permissions/{missing_vhost}/{broker.user}", f"/api/permissions/{vh}/{missing_user}"):
        status, _, body = call(broker, path, "PUT", perm)
        assert (status, body) == (400, {"error": "bad_request", "reason": "vhost_or_user_not_found"})


def test_vhost_user_and_permissions_round_trip(broker, connect, poll_until):
    suffix = uuid.uuid4().hex[:8]
    user, vhost = f"e2e-user-{suffix}", f"e2e-vhost-{suffix}"
    try:
        assert call(broker, f"/api/vhosts/{q(vhost)}", "PUT", {"description": "d"})[0] == 201
        assert call(broker, f"/api/vhosts/{q(vhost)}", "PUT", {"description": "d"})[0] == 204
        assert call(broker, f"/api/vhosts/{q(vhost)}")[2]["name"] == vhost
        full = {"user": broker.user, "vhost": vhost, "configure": ".*", "write": ".*", "read": ".*"}
        assert call(broker, f"/api/vhosts/{q(vhost)}/permissions")[2] == [full]  # the creator's
        assert call(broker, f"/api/users/{user}", "PUT", {"password": "pw1", "tags": "management"})[0] == 201
        assert call(broker, f"/api/users/{user}", "PUT", {"password": "pw", "tags": "management"})[0] == 204
        assert call(broker, f"/api/users/{user}")[2]["tags"] == ["management"]
        perm = {"configure": ".*", "write": ".*", "read": "^$"}
        assert call(broker, f"/api/permissions/{q(vhost)}/{user}", "PUT", perm)[0] == 201
        assert call(broker, f"/api/permissions/{q(vhost)}/{user}", "PUT", perm)[0] == 204
        shown = call(broker, f"/api/permissions/{q(vhost)}/{user}")[2]
        assert shown == {"user": user, "vhost": vhost, **perm}
        assert shown in call(broker, "/api/permissions")[2]
        assert call(broker, f"/api/users/{user}/permissions")[2] == [shown]
        conn = connect(virtual_host=vhost, credentials=pika.PlainCredentials(user, "pw"))
        ch = conn.channel()
        ch.queue_declare("only-here")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_get("only-here")  # read is ^$
        assert info.value.reply_code == 403
        conn.close()
        # a management (not administrator) user may not write users
        status, _, body = call(
            broker, f"/api/users/{user}-other", "PUT", {"password": "x", "tags": ""}, auth=(user, "pw")
        )
        assert (status, body) == (401, {"error": "not_authorised", "reason": "Not administrator user"})
        assert call(broker, f"/api/permissions/{q(vhost)}/{user}", "DELETE")[0] == 204
        assert call(broker, f"/api/permissions/{q(vhost)}/{user}")[0] == 404
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            connect(virtual_host=vhost, credentials=pika.PlainCredentials(user, "pw"))
        inside = connect(virtual_host=vhost)
        assert call(broker, f"/api/vhosts/{q(vhost)}", "DELETE")[0] == 204
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            for _ in range(100):
                inside.process_data_events(time_limit=0.1)
        # RabbitMQ 3.10 races its vhost supervisor's shutdown ("is down") with the close ("is deleted")
        assert closed.value.reply_code == 320
        texts = [f"CONNECTION_FORCED - vhost '{vhost}' is {how}" for how in ("deleted", "down")]
        assert closed.value.reply_text in texts
    finally:
        call(broker, f"/api/users/{user}", "DELETE")
        call(broker, f"/api/vhosts/{q(vhost)}", "DELETE")
    assert call(broker, f"/api/users/{user}")[0] == 404
    assert call(broker, f"/api/vhosts/{q(vhost)}")[0] == 404
    assert call(broker, f"/api/users/{user}", "DELETE")[0] == 404


def test_delete_connection_closes_it_with_320(broker, connect, unique, poll_until):
    conn_name = unique("conn")
    conn = connect(client_properties={"connection_name": conn_name})

    name = poll_until(lambda: connection_named(broker, conn_name), timeout=STATS_TIMEOUT)
    status, _, _ = call(broker, f"/api/connections/{q(name)}", "DELETE", headers={"X-Reason": "bye from e2e"})
    assert status == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        for _ in range(100):
            conn.process_data_events(time_limit=0.1)
    assert (info.value.reply_code, info.value.reply_text) == (320, "CONNECTION_FORCED - bye from e2e")
    poll_until(lambda: call(broker, f"/api/connections/{q(name)}")[0] == 404, timeout=STATS_TIMEOUT)


def test_delete_connection_default_reason(broker, connect, unique, poll_until):
    conn_name = unique("conn")
    conn = connect(client_properties={"connection_name": conn_name})

    name = poll_until(lambda: connection_named(broker, conn_name), timeout=STATS_TIMEOUT)
    assert call(broker, f"/api/connections/{q(name)}", "DELETE")[0] == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        for _ in range(100):
            conn.process_data_events(time_limit=0.1)
    assert (info.value.reply_code, info.value.reply_text) == (
        320,
        "CONNECTION_FORCED - Closed via management plugin",
    )


def test_get_with_no_properties_shows_an_empty_list(broker, vh, channel, unique):
    """RabbitMQ shows a message without properties as ``"properties": []``."""
    name = unique("q")
    channel.queue_declare(name)
    body = {"properties": {}, "routing_key": name, "payload": "x", "payload_encoding": "string"}
    assert call(broker, f"/api/exchanges/{vh}/amq.default/publish", "POST", body)[2] == {"routed": True}
    [got] = get_messages(broker, vh, name, "ack_requeue_false")
    assert got["properties"] == []


@pytest.mark.extension
def test_bad_get_input_is_400_on_ottermq(broker, vh, channel, unique):
    """RabbitMQ 3.10 answers an unknown ackmode with a 500 (a crash); ottermq with a 400."""
    name = unique("q")
    channel.queue_declare(name)
    for bad in (
        {"count": 1, "ackmode": "bogus", "encoding": "auto"},
        {"count": -1, "ackmode": "ack_requeue_true", "encoding": "auto"},
        {"ackmode": "ack_requeue_true", "encoding": "auto"},
    ):
        status, _, body = call(broker, f"/api/queues/{vh}/{q(name)}/get", "POST", bad)
        assert status == 400 and body["error"] == "bad_request", bad


@pytest.mark.extension
def test_binding_with_arguments_round_trips_by_its_key(broker, vh, channel, unique):
    """The hash after ``~`` differs from RabbitMQ's (Erlang's phash2): use the returned key."""
    x, name = unique("x"), unique("q")
    channel.exchange_declare(x, "headers")
    channel.queue_declare(name)
    between = f"/api/bindings/{vh}/e/{q(x)}/q/{q(name)}"
    args = {"x-match": "all", "a": 1}
    status, headers, _ = call(broker, between, "POST", {"routing_key": "", "arguments": args})
    assert status == 201
    [binding] = call(broker, between)[2]
    assert binding["properties_key"].startswith("~") and binding["arguments"] == {"x-match": "all", "a": 1}
    assert headers["location"] == f"{q(name)}/{q(binding['properties_key'])}"
    assert call(broker, f"{between}/{q(binding['properties_key'])}", "DELETE")[0] == 204
    assert call(broker, between)[2] == []


@pytest.mark.extension
def test_api_writes_survive_a_restart(broker_process):
    """Users, vhosts, permissions and durable topology made over the API are in the store."""
    process = broker_process()
    b = process.start()
    assert call(b, "/api/vhosts/v1", "PUT", {})[0] == 201
    assert call(b, "/api/users/alice", "PUT", {"password": "pw", "tags": ["management"]})[0] == 201
    perm = {"configure": "^a", "write": ".*", "read": ".*"}
    assert call(b, "/api/permissions/v1/alice", "PUT", perm)[0] == 201
    assert call(b, "/api/exchanges/v1/x1", "PUT", {"type": "fanout", "durable": True})[0] == 201
    assert call(b, "/api/queues/v1/q1", "PUT", {"durable": True})[0] == 201
    assert call(b, "/api/bindings/v1/e/x1/q/q1", "POST", {"routing_key": "k"})[0] == 201
    publish = {
        "properties": {"delivery_mode": 2},
        "routing_key": "",
        "payload": "kept",
        "payload_encoding": "string",
    }
    assert call(b, "/api/exchanges/v1/x1/publish", "POST", publish)[2] == {"routed": True}
    assert call(b, "/api/users/gone", "PUT", {"password": "pw", "tags": ""})[0] == 201
    assert call(b, "/api/users/gone", "DELETE")[0] == 204
    assert process.stop() == 0
    b = process.start()
    assert call(b, "/api/users/alice")[2]["tags"] == ["management"]
    assert call(b, "/api/users/gone")[0] == 404
    assert call(b, "/api/permissions/v1/alice")[2] == {"user": "alice", "vhost": "v1", **perm}
    assert [x["routing_key"] for x in call(b, "/api/bindings/v1/e/x1/q/q1")[2]] == ["k"]
    [got] = get_messages(b, "v1", "q1", "ack_requeue_false")
    assert got["payload"] == "kept"
    alice = pika.PlainCredentials("alice", "pw")
    conn = pika.BlockingConnection(b.params(virtual_host="v1", credentials=alice))
    conn.close()


def test_user_without_password_cannot_log_in(broker):
    user = f"e2e-nopw-{uuid.uuid4().hex[:8]}"
    try:
        tags = {"password": "pw", "tags": ["management", "monitoring"]}
        assert call(broker, f"/api/users/{user}", "PUT", tags)[0] == 201
        assert call(broker, f"/api/users/{user}")[2]["tags"] == ["management", "monitoring"]
        assert call(broker, "/api/whoami", auth=(user, "pw"))[0] == 200
        assert call(broker, f"/api/users/{user}", "PUT", {"tags": "management"})[0] == 204
        shown = call(broker, f"/api/users/{user}")[2]
        assert (shown["password_hash"], shown["tags"]) == ("", ["management"])
        status, _, body = call(broker, "/api/whoami", auth=(user, "pw"))
        assert (status, body) == (401, {"error": "not_authorized", "reason": "Login failed"})
    finally:
        call(broker, f"/api/users/{user}", "DELETE")


def test_in_use_internal_and_exclusive(broker, vh, connect, unique):
    ch = connect().channel()
    name = unique("q")
    ch.queue_declare(name)
    ch.basic_consume(name, lambda *args: None)
    status, _, body = call(broker, f"/api/queues/{vh}/{q(name)}?if-unused=true", "DELETE")
    in_use = f"queue '{name}' in vhost '{broker.vhost}' in use"
    assert (status, body) == (400, {"error": "bad_request", "reason": in_use})
    x = unique("x")
    assert call(broker, f"/api/exchanges/{vh}/{q(x)}", "PUT", {"type": "fanout", "internal": True})[0] == 201
    publish = {"properties": {}, "routing_key": "", "payload": "p", "payload_encoding": "string"}
    status, _, body = call(broker, f"/api/exchanges/{vh}/{q(x)}/publish", "POST", publish)
    reason = f"403 ACCESS_REFUSED - cannot publish to internal exchange '{x}' in vhost '{broker.vhost}'"
    assert (status, body) == (400, {"error": "bad_request", "reason": reason})
    exclusive = unique("excl")
    ch.queue_declare(exclusive, exclusive=True)
    locked = (
        f"cannot obtain exclusive access to locked queue '{exclusive}' in vhost '{broker.vhost}'. "
        "It could be originally declared on another connection or the exclusive property value does "
        "not match that of the original declaration."
    )
    path = f"/api/queues/{vh}/{q(exclusive)}"
    error = {"error": "bad_request", "reason": locked}
    for method, suffix, body in (
        ("PUT", "", {"durable": False}),
        ("DELETE", "/contents", None),
        ("DELETE", "", None),
    ):
        assert call(broker, path + suffix, method, body) == (400, ANY, error)
    get = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
    status, _, body = call(broker, f"{path}/get", "POST", get)
    assert (status, body["error"]) == (400, "bad_request")
    assert body["reason"].startswith(f"405 RESOURCE_LOCKED - {locked[:80]}")
    assert body["reason"].endswith("...")  # the 255-byte reply text
    ch.queue_declare(exclusive, passive=True)  # still there
