"""Management HTTP API (issue 14 foundation): the GET endpoints RabbitMQ's management plugin has.

Every test here also runs against RabbitMQ with ``rabbitmq_management`` (``AMQP_URL`` set, API at
``MANAGEMENT_URL``, default http://127.0.0.1:15672). RabbitMQ's queue and connection figures come
from stats it emits every 5 s, so counts are polled with a wide timeout.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pika
import pytest

STATS_TIMEOUT = 20  # RabbitMQ's collect_statistics_interval is 5 s


def request(
    broker, path: str, method: str = "GET", auth: tuple[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """``(status, headers, body)`` of one request to the management API of ``broker``."""
    user, password = auth if auth is not None else (broker.user, broker.password)
    req = urllib.request.Request(broker.management_url + path, method=method)
    if auth != ("", ""):
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()


def get(broker, path: str) -> Any:
    status, _, body = request(broker, path)
    assert status == 200, (path, status, body)
    return json.loads(body)


def when(body: dict[str, Any], **fields: Any) -> dict[str, Any] | None:
    """``body`` once it has these field values (RabbitMQ's stats lag), else None."""
    return body if all(body.get(k) == v for k, v in fields.items()) else None


def q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}


def test_overview_has_rabbitmq_fields(broker):
    body = get(broker, "/api/overview")
    assert isinstance(body["management_version"], str) and isinstance(body["rabbitmq_version"], str)
    assert isinstance(body["node"], str) and isinstance(body["cluster_name"], str)
    totals = body["object_totals"]
    assert set(totals) >= {"connections", "channels", "exchanges", "queues", "consumers"}
    assert all(isinstance(v, int) for v in totals.values())
    assert totals["exchanges"] >= 7  # the default exchange and amq.*
    assert isinstance(body["queue_totals"], dict)
    amqp = [entry for entry in body["listeners"] if entry["protocol"] == "amqp"]
    assert broker.port in [entry["port"] for entry in amqp]


def test_no_credentials_is_401_with_the_realm(broker):
    status, headers, body = request(broker, "/api/overview", auth=("", ""))
    assert status == 401
    assert headers["www-authenticate"] == 'Basic realm="RabbitMQ Management"'
    assert body == b""


def test_wrong_password_is_401_login_failed(broker):
    status, headers, body = request(broker, "/api/overview", auth=(broker.user, "not-the-password"))
    assert status == 401
    assert json.loads(body) == {"error": "not_authorized", "reason": "Login failed"}
    assert headers["www-authenticate"] == 'Basic realm="RabbitMQ Management"'


def test_unknown_path_and_object_are_404(broker, unique):
    for path in (
        "/api/no-such-thing",
        f"/api/queues/%2F/{q(unique('missing'))}",
        "/api/vhosts/no-such-vhost",
        f"/api/exchanges/%2F/{q(unique('missing'))}",
        "/api/queues/no-such-vhost",
    ):
        status, _, body = request(broker, path)
        assert (status, json.loads(body)) == (404, NOT_FOUND), path


def test_wrong_method_is_405(broker):
    status, headers, _ = request(broker, "/api/overview", method="DELETE")
    assert status == 405
    assert "GET" in headers["allow"]


def test_whoami_and_users(broker):
    me = get(broker, "/api/whoami")
    assert me["name"] == broker.user and "administrator" in me["tags"]
    users = {u["name"]: u for u in get(broker, "/api/users")}
    assert users[broker.user]["tags"] == me["tags"]
    assert isinstance(users[broker.user]["password_hash"], str)


def test_vhosts(broker):
    names = [v["name"] for v in get(broker, "/api/vhosts")]
    assert broker.vhost in names
    one = get(broker, f"/api/vhosts/{q(broker.vhost)}")
    assert one["name"] == broker.vhost
    assert isinstance(one["tracing"], bool) and isinstance(one["tags"], list)


def test_exchanges_include_the_default_and_amq(broker, channel, unique):
    vh = q(broker.vhost)
    names = {e["name"] for e in get(broker, f"/api/exchanges/{vh}")}
    assert {"", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"} <= names
    default = get(broker, f"/api/exchanges/{vh}/amq.default")
    assert (default["name"], default["type"], default["durable"]) == ("", "direct", True)
    name = unique("x")
    channel.exchange_declare(
        name, "topic", durable=False, auto_delete=True, arguments={"alternate-exchange": "amq.fanout"}
    )
    x = get(broker, f"/api/exchanges/{vh}/{q(name)}")
    expected = {
        "name": name,
        "vhost": broker.vhost,
        "type": "topic",
        "durable": False,
        "auto_delete": True,
        "internal": False,
        "arguments": {"alternate-exchange": "amq.fanout"},
    }
    assert {k: x[k] for k in expected} == expected
    assert name in {e["name"] for e in get(broker, "/api/exchanges")}


def test_queue_fields_and_counts(broker, channel, unique, poll_until):
    vh = q(broker.vhost)
    name = unique("q")
    channel.queue_declare(name, durable=False, arguments={"x-max-length": 10})
    for i in range(3):
        channel.basic_publish("", name, f"m{i}".encode())
    path = f"/api/queues/{vh}/{q(name)}"
    expected = {
        "name": name,
        "vhost": broker.vhost,
        "durable": False,
        "auto_delete": False,
        "exclusive": False,
        "arguments": {"x-max-length": 10},
        "messages": 3,
        "messages_unacknowledged": 0,
        "consumers": 0,
        "state": "running",
        "policy": None,
    }
    # RabbitMQ fills a queue's fields from separate stats events: wait until all of them are there
    queue = poll_until(lambda: when(get(broker, path), **expected), timeout=STATS_TIMEOUT)
    assert {k: queue[k] for k in expected} == expected
    assert isinstance(queue["node"], str)
    method, _, _ = channel.basic_get(name, auto_ack=False)
    assert method is not None
    counts = {"messages_unacknowledged": 1, "messages": 3, "messages_ready": 2}
    queue = poll_until(lambda: when(get(broker, path), **counts), timeout=STATS_TIMEOUT)
    assert (queue["messages"], queue["messages_ready"]) == (3, 2)
    assert name in {item["name"] for item in get(broker, f"/api/queues/{vh}")}
    assert name in {item["name"] for item in get(broker, "/api/queues")}


def test_connections_channels_and_consumers(broker, connect, unique, poll_until):
    conn = connect(client_properties={"connection_name": unique("conn")})
    ch = conn.channel()
    name = unique("consumed")
    ch.queue_declare(name, exclusive=True)
    tag = ch.basic_consume(name, lambda *args: None, auto_ack=False)

    def mine(kind: str, match) -> Any:
        return next((item for item in get(broker, f"/api/{kind}") if match(item)), None)

    consumer = poll_until(
        lambda: mine("consumers", lambda c: c["queue"]["name"] == name), timeout=STATS_TIMEOUT
    )
    assert consumer["consumer_tag"] == tag
    assert consumer["ack_required"] is True and consumer["exclusive"] is False
    assert consumer["queue"]["vhost"] == broker.vhost
    conn_name = consumer["channel_details"]["connection_name"]
    connection = poll_until(
        lambda: mine("connections", lambda c: c["name"] == conn_name), timeout=STATS_TIMEOUT
    )
    assert connection["user"] == broker.user and connection["vhost"] == broker.vhost
    assert connection["protocol"] == "AMQP 0-9-1"
    assert connection["client_properties"]["connection_name"].startswith("e2e.conn.")
    channel = poll_until(
        lambda: mine("channels", lambda c: c["connection_details"]["name"] == conn_name),
        timeout=STATS_TIMEOUT,
    )
    assert channel["number"] == ch.channel_number and channel["user"] == broker.user
    totals = get(broker, "/api/overview")["object_totals"]
    assert totals["connections"] >= 1 and totals["consumers"] >= 1


@pytest.mark.extension
def test_counts_are_live_on_ottermq(broker, channel, unique):
    """ottermq reads queue state directly: no stats interval to wait for."""
    name = unique("live")
    channel.queue_declare(name)
    channel.basic_publish("", name, b"x", pika.BasicProperties())
    channel.basic_get(name, auto_ack=False)  # a round trip: the publish has arrived
    queue = get(broker, f"/api/queues/{q(broker.vhost)}/{q(name)}")
    assert (queue["messages"], queue["messages_ready"], queue["messages_unacknowledged"]) == (1, 0, 1)
