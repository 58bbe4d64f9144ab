"""Management API statistics (issue 14): ``message_stats`` counts with ``*_details.rate`` on queues,
channels, vhosts and the overview, the ``*_details`` of queue totals, and the byte and head-timestamp
fields of a queue, as RabbitMQ 3.10's management plugin shows them.

Every test here also runs against RabbitMQ with ``rabbitmq_management`` (``AMQP_URL`` set). RabbitMQ
updates its statistics every 5 s (``collect_statistics_interval``, ottermq's
``OTTERMQ_METRICS_SAMPLES_INTERVAL``), so answers are polled until they settle.
"""

from __future__ import annotations

from typing import Any

import pika
import pytest

from .polling import poll_until
from .test_management_write import call, connection_named, q

STATS_TIMEOUT = 25  # two 5 s samples and then some, on a busy machine
MESSAGE_FIELDS = {
    "publish",
    "confirm",
    "return_unroutable",
    "drop_unroutable",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "get_empty",
    "deliver_get",
    "redeliver",
    "ack",
}


def settled(broker, path: str, check) -> Any:
    """The answer at ``path`` once ``check(answer)`` holds (else the test fails with the last one)."""
    last: list[Any] = []

    def matched() -> tuple[Any] | None:
        status, _, body = call(broker, path)
        assert status == 200, (path, status, body)
        last[:] = [body]
        return (body,) if check(body) else None  # a 1-tuple: truthy even if the answer itself is not

    (body,) = poll_until(
        matched,
        timeout=STATS_TIMEOUT,
        interval=0.5,
        what=f"{path} to match",
        explain=lambda: f"last answer: {last[0] if last else None}",
    )
    return body


def counts(stats: dict[str, Any], *fields: str) -> dict[str, Any]:
    return {field: stats.get(field) for field in fields}


def test_queue_message_stats_count_each_kind_of_delivery(broker, channel, unique):
    name = unique("q")
    channel.queue_declare(name)
    for i in range(3):
        channel.basic_publish("", name, f"m{i}".encode())
    method, _, _ = channel.basic_get(name, auto_ack=False)
    channel.basic_ack(method.delivery_tag)
    channel.basic_get(name, auto_ack=True)
    method, _, _ = channel.basic_get(name, auto_ack=False)
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, _, _ = channel.basic_get(name, auto_ack=False)
    assert method.redelivered
    channel.basic_ack(method.delivery_tag)
    assert channel.basic_get(name, auto_ack=False) == (None, None, None)
    expected = {
        "publish": 3,
        "get": 3,
        "get_no_ack": 1,
        "deliver": 0,
        "deliver_no_ack": 0,
        "deliver_get": 4,
        "redeliver": 1,
        "ack": 2,
    }
    path = f"/api/queues/{q(broker.vhost)}/{q(name)}"
    shown = settled(broker, path, lambda b: counts(b.get("message_stats", {}), *expected) == expected)
    for field in expected:
        assert shown["message_stats"][f"{field}_details"] == {"rate": pytest.approx(0.0, abs=1.0)}
    assert (shown["messages"], shown["messages_ready"], shown["messages_unacknowledged"]) == (0, 0, 0)
    for field in ("messages", "messages_ready", "messages_unacknowledged"):
        assert set(shown[f"{field}_details"]) == {"rate"}


@pytest.mark.extension  # RabbitMQ 3.10's management API always shows get_empty 0
def test_get_empty_is_counted_on_the_queue_and_the_channel(broker, connect, unique):
    client_name = unique("get-empty")
    channel = connect(client_properties={"connection_name": client_name}).channel()
    name = unique("q")
    channel.queue_declare(name)
    assert channel.basic_get(name) == (None, None, None)
    assert channel.basic_get(name) == (None, None, None)
    conn_name = poll_until(lambda: connection_named(broker, client_name), timeout=STATS_TIMEOUT, interval=0.5)

    def get_empty(items: list[dict[str, Any]]) -> Any:
        mine = [i for i in items if i["connection_details"]["name"] == conn_name]
        return mine and mine[0].get("message_stats", {}).get("get_empty") == 2

    settled(broker, "/api/channels", get_empty)
    queue = call(broker, f"/api/queues/{q(broker.vhost)}/{q(name)}")[2]
    assert queue["message_stats"]["get_empty"] == 2


def test_a_queue_without_traffic_has_no_message_stats(broker, channel, unique):
    name = unique("q")
    channel.queue_declare(name)
    shown = settled(broker, f"/api/queues/{q(broker.vhost)}/{q(name)}", lambda b: "message_bytes" in b)
    assert "message_stats" not in shown
    assert shown["head_message_timestamp"] is None
    assert (shown["message_bytes"], shown["message_bytes_unacknowledged"]) == (0, 0)
    assert shown["effective_policy_definition"] == {}


def test_consumed_messages_count_as_deliver_and_their_bytes_as_unacknowledged(broker, connect, unique):
    conn = connect()
    channel = conn.channel()
    name = unique("q")
    channel.queue_declare(name)
    channel.basic_qos(prefetch_count=2)
    for body in (b"12345", b"1234567", b"123"):
        channel.basic_publish("", name, body, pika.BasicProperties(timestamp=1700000000))
    got: list[int] = []
    channel.basic_consume(name, lambda ch, m, p, b: got.append(m.delivery_tag))

    def two_delivered() -> bool:
        conn.process_data_events(0.05)
        return len(got) >= 2

    poll_until(two_delivered, timeout=5, interval=0, what="two deliveries", explain=lambda: f"got {got}")
    assert len(got) == 2
    path = f"/api/queues/{q(broker.vhost)}/{q(name)}"
    shown = settled(broker, path, lambda b: b.get("message_stats", {}).get("deliver") == 2)
    assert (shown["messages_ready"], shown["messages_unacknowledged"]) == (1, 2)
    assert shown["message_bytes_ready"] == 3
    assert shown["message_bytes_unacknowledged"] == 12
    assert shown["message_bytes"] == 15
    assert shown["head_message_timestamp"] == 1700000000
    assert shown["message_stats"]["deliver_get"] == 2


def test_publish_rate_is_sampled(broker, connect, unique):
    conn = connect()
    channel = conn.channel()
    name = unique("q")
    channel.queue_declare(name)
    path = f"/api/queues/{q(broker.vhost)}/{q(name)}"
    shown: dict[str, Any] = {}

    def sampled() -> bool:
        """Publish some more, then: does the queue show a publish rate and a messages_ready rate yet?"""
        nonlocal shown
        for _ in range(20):
            channel.basic_publish("", name, b"r")
        conn.process_data_events(0.1)
        shown = call(broker, path)[2]
        rate = shown.get("message_stats", {}).get("publish_details", {}).get("rate", 0)
        return rate > 0 and shown["messages_ready_details"]["rate"] > 0

    poll_until(
        sampled,
        timeout=STATS_TIMEOUT,
        interval=0,
        what="a publish rate and a messages_ready rate",
        explain=lambda: f"last answer: {shown}",
    )
    overview = call(broker, "/api/overview")[2]
    assert overview["message_stats"]["publish_details"]["rate"] > 0


def test_channel_message_stats_count_publishes_and_confirms(broker, connect, unique):
    client_name = unique("stats-conn")
    conn = connect(client_properties={"connection_name": client_name})
    channel = conn.channel()
    channel.confirm_delivery()
    name = unique("q")
    channel.queue_declare(name)
    for _ in range(4):
        channel.basic_publish("", name, b"c")
    conn_name = poll_until(lambda: connection_named(broker, client_name), timeout=STATS_TIMEOUT, interval=0.5)

    def my_stats(items: list[dict[str, Any]]) -> dict[str, Any]:
        mine = [i for i in items if i["connection_details"]["name"] == conn_name]
        return dict(mine[0].get("message_stats", {})) if mine else {}

    channels = settled(broker, "/api/channels", lambda items: my_stats(items).get("confirm") == 4)
    stats = my_stats(channels)
    assert stats["publish"] == 4
    publishing = {"publish", "confirm", "return_unroutable", "drop_unroutable"}  # RabbitMQ shows these
    assert publishing <= set(stats)  # once the channel published; ottermq always shows them all
    assert all(stats[f"{field}_details"].keys() == {"rate"} for field in publishing)


def test_overview_and_vhost_show_message_stats_and_totals_with_rates(broker, channel, unique):
    name = unique("q")
    channel.queue_declare(name)
    channel.basic_publish("", name, b"o")
    overview = settled(broker, "/api/overview", lambda b: b["message_stats"].get("publish", 0) >= 1)
    assert MESSAGE_FIELDS <= set(overview["message_stats"])
    assert overview["rates_mode"] == "basic"
    for field in ("messages", "messages_ready", "messages_unacknowledged"):
        assert set(overview["queue_totals"][f"{field}_details"]) == {"rate"}
    vhost = settled(
        broker, f"/api/vhosts/{q(broker.vhost)}", lambda b: b.get("message_stats", {}).get("publish", 0) >= 1
    )
    assert {"publish", "publish_details", "messages_details", "messages_ready_details"} <= (
        set(vhost["message_stats"]) | set(vhost)
    )


def test_connection_shows_socket_bytes(broker, connect, unique):
    client_name = unique("octets")
    conn = connect(client_properties={"connection_name": client_name})
    channel = conn.channel()
    name = unique("q")
    channel.queue_declare(name)
    channel.basic_publish("", name, b"z" * 5000)
    channel.basic_get(name, auto_ack=True)
    conn_name = poll_until(lambda: connection_named(broker, client_name), timeout=STATS_TIMEOUT, interval=0.5)
    path = f"/api/connections/{q(conn_name)}"
    shown = settled(broker, path, lambda b: b.get("recv_oct", 0) > 5000 and b.get("send_oct", 0) > 5000)
    for field in ("recv_oct", "send_oct"):
        assert shown[f"{field}_details"].keys() == {"rate"}
    assert shown["recv_cnt"] >= 1 and shown["send_cnt"] >= 1


def test_overview_churn_rates_count_connections_channels_and_queues(broker, connect, unique):
    def churn() -> dict[str, Any]:
        return dict(call(broker, "/api/overview")[2]["churn_rates"])

    fields = (
        "channel_closed",
        "channel_created",
        "connection_closed",
        "connection_created",
        "queue_created",
        "queue_declared",
        "queue_deleted",
    )
    before = churn()
    assert all(before[f"{field}_details"].keys() == {"rate"} for field in fields)
    conn = connect()
    channel = conn.channel()
    name = unique("q")
    channel.queue_declare(name)
    channel.queue_declare(name)
    channel.queue_delete(name)
    channel.close()
    conn.close()

    def grown(now: dict[str, Any]) -> bool:
        wanted = {
            "connection_created": 1,
            "connection_closed": 1,
            "channel_created": 1,
            "channel_closed": 1,
            "queue_created": 1,
            "queue_declared": 2,
            "queue_deleted": 1,
        }
        return all(now[field] - before[field] >= n for field, n in wanted.items())

    settled(broker, "/api/overview", lambda body: grown(body["churn_rates"]))
