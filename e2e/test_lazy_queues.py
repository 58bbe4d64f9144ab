"""Lazy queues (``x-queue-mode: lazy``, the ``queue-mode`` policy key): the backlog is on disk, what
the management API says about it, and nothing a client sees changes: order, TTL, priorities.

RabbitMQ's management API counts ``messages_paged_out`` for transient messages only (its persistent
ones are on disk anyway) and samples queue stats every few seconds: the tests poll."""

from __future__ import annotations

import urllib.parse
from typing import Any

import pika
import pytest

from .polling import poll_until

N = 600


def queue_info(broker: Any, name: str) -> dict[str, Any]:
    status, body = broker.api(
        f"/api/queues/{urllib.parse.quote(broker.vhost, safe='')}/{urllib.parse.quote(name, safe='')}"
    )
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def publish(ch: Any, queue: str, n: int, **props: Any) -> None:
    ch.confirm_delivery()
    for i in range(n):
        mode = 2 if i % 2 else 1
        ch.basic_publish(
            "", queue, b"%06d" % i + b"." * 1000, pika.BasicProperties(delivery_mode=mode, **props)
        )


def consume_all(ch: Any, queue: str, n: int) -> list[bytes]:
    ch.basic_qos(prefetch_count=100)
    got: list[bytes] = []
    for method, _, body in ch.consume(queue, inactivity_timeout=10):
        assert method is not None, f"only {len(got)} of {n} delivered"
        got.append(body[:6])
        ch.basic_ack(method.delivery_tag)
        if len(got) == n:
            break
    ch.cancel()
    return got


def durable(ch: Any, unique: Any, name: str, **arguments: Any) -> str:
    queue = unique(name)
    ch.queue_declare(queue, durable=True, arguments=arguments or None)
    return queue


def test_a_lazy_queue_keeps_its_backlog_on_disk_and_delivers_it_in_order(broker, channel, unique):
    queue = durable(channel, unique, "lazy", **{"x-queue-mode": "lazy"})
    publish(channel, queue, N)

    def paged() -> dict[str, Any] | None:
        info = queue_info(broker, queue)
        return info if info.get("messages") == N and info.get("messages_paged_out") == N // 2 else None

    info = poll_until(paged, timeout=30, what="the transient half counted as paged out")
    assert info["messages_ram"] == 0 and info["messages_ready_ram"] == 0
    assert info["message_bytes_paged_out"] == N // 2 * 1006
    assert info["arguments"] == {"x-queue-mode": "lazy"}
    assert consume_all(channel, queue, N) == [b"%06d" % i for i in range(N)]


def test_a_transient_lazy_queue_counts_paged_messages_by_flag_and_bytes_of_all(broker, channel, declare):
    queue = declare(channel, "transient", **{"x-queue-mode": "lazy"})
    publish(channel, queue, N)
    info = poll_until(
        lambda: (i := queue_info(broker, queue)).get("messages") == N and i,
        timeout=30,
        what="the backlog counted",
    )
    assert info["messages_ram"] == 0 and info["messages_paged_out"] == N // 2  # RabbitMQ 3.10.8's counts
    assert info["message_bytes_paged_out"] == N * 1006
    assert consume_all(channel, queue, N) == [b"%06d" % i for i in range(N)]


def test_a_default_queue_holds_its_messages_in_memory(broker, channel, unique):
    queue = durable(channel, unique, "default")
    publish(channel, queue, 100)
    info = poll_until(
        lambda: (i := queue_info(broker, queue)).get("messages") == 100 and i, timeout=30, what="stats"
    )
    assert info["messages_ram"] == 100 and info["messages_paged_out"] == 0
    assert info["message_bytes_ram"] == 100 * 1006


def lazy_policy(broker: Any, queue: str) -> str:
    vhost = urllib.parse.quote(broker.vhost, safe="")
    path = f"/api/policies/{vhost}/lazy-{queue[-8:]}"
    status, body = broker.api(
        path, "PUT", {"pattern": f"^{queue}$", "definition": {"queue-mode": "lazy"}, "apply-to": "queues"}
    )
    assert status in (201, 204), body
    poll_until(
        lambda: queue_info(broker, queue).get("effective_policy_definition") == {"queue-mode": "lazy"},
        timeout=30,
        what="the policy in force",
    )
    return path


def test_under_a_queue_mode_policy_new_messages_go_to_disk(broker, channel, unique):
    queue = durable(channel, unique, "policy")
    publish(channel, queue, N)
    path = lazy_policy(broker, queue)
    try:
        channel.basic_publish("", queue, b"%06d" % N + b"." * 1000)  # transient
        poll_until(
            lambda: (
                (i := queue_info(broker, queue)).get("messages") == N + 1 and i["messages_paged_out"] >= 1
            ),
            timeout=30,
            what="the new message paged out",
        )
        assert consume_all(channel, queue, N + 1) == [b"%06d" % i for i in range(N + 1)]
    finally:
        broker.api(path, "DELETE")


@pytest.mark.extension  # RabbitMQ 3.10.8 keeps a backlog already in memory there (measured: 600 of 600)
def test_a_queue_mode_policy_pages_the_backlog_already_in_memory_out(broker, channel, unique):
    queue = durable(channel, unique, "policy")
    publish(channel, queue, N)
    path = lazy_policy(broker, queue)
    try:
        info = poll_until(
            lambda: (i := queue_info(broker, queue)).get("messages_ram") == 0 and i,
            timeout=30,
            what="the backlog paged out",
        )
        assert info["messages_paged_out"] == N // 2 and info["messages"] == N
        assert consume_all(channel, queue, N) == [b"%06d" % i for i in range(N)]
    finally:
        broker.api(path, "DELETE")


def test_a_queue_mode_that_is_not_default_or_lazy_is_refused_in_a_policy(broker):
    vhost = urllib.parse.quote(broker.vhost, safe="")
    status, body = broker.api(
        f"/api/policies/{vhost}/bad-mode",
        "PUT",
        {"pattern": "^nothing$", "definition": {"queue-mode": "eager"}},
    )
    assert status == 400
    assert body["error"] == "bad_request"
    assert "is not a valid queue-mode value" in body["reason"]


def test_messages_expire_from_a_lazy_queue_in_order(channel, with_dlq, drain):
    queue, dlq = with_dlq(channel, **{"x-queue-mode": "lazy", "x-message-ttl": 100})
    publish(channel, queue, 50)
    poll_until(
        lambda: channel.queue_declare(dlq, passive=True).method.message_count == 50,
        timeout=30,
        what="every message dead-lettered",
    )
    assert [b[:6] for b in drain(channel, dlq)] == [b"%06d" % i for i in range(50)]
    assert channel.queue_declare(queue, passive=True).method.message_count == 0


def test_priorities_hold_in_a_lazy_queue(channel, declare, drain):
    queue = declare(channel, "prio", **{"x-queue-mode": "lazy", "x-max-priority": 5})
    channel.confirm_delivery()
    for i in range(30):
        priority = 5 if i % 3 == 0 else 1
        channel.basic_publish(
            "", queue, b"%02d" % i, pika.BasicProperties(priority=priority, delivery_mode=2)
        )
    got = drain(channel, queue)
    high = [b"%02d" % i for i in range(30) if i % 3 == 0]
    low = [b"%02d" % i for i in range(30) if i % 3]
    assert got == high + low


@pytest.mark.parametrize("requeue", [True, False])
def test_a_message_returned_to_a_lazy_queue_is_redelivered_first(channel, declare, requeue):
    queue = declare(channel, "returns", **{"x-queue-mode": "lazy"})
    publish(channel, queue, 20)
    method, _, body = channel.basic_get(queue)
    assert body[:6] == b"000000"
    if requeue:
        channel.basic_nack(method.delivery_tag, requeue=True)
        method, _, body = channel.basic_get(queue, auto_ack=True)
        assert body[:6] == b"000000" and method.redelivered
    else:
        channel.basic_ack(method.delivery_tag)
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert body[:6] == b"000001" and not method.redelivered


@pytest.mark.parametrize("how", ["sigterm", pytest.param("sigkill", marks=pytest.mark.extension)])
def test_a_lazy_queue_recovers_its_persistent_backlog_in_order(restartable, unique, how):
    """After a restart the persistent messages come back from the store, in order, paged again (the
    spill of the old process is not read); the transient ones are gone, as RabbitMQ's."""
    broker, restart = restartable(how)
    queue = unique("recover")
    conn = pika.BlockingConnection(broker.params())
    ch = conn.channel()
    ch.queue_declare(queue, durable=True, arguments={"x-queue-mode": "lazy"})
    publish(ch, queue, N)
    conn.close()
    restart()
    poll_until(
        lambda: queue_info(broker, queue).get("messages") == N // 2,
        timeout=60,
        what="the persistent half recovered",
    )  # (RabbitMQ 3.10.8 then shows all of them in messages_ram, ottermq the head's page)
    conn = pika.BlockingConnection(broker.params())
    try:
        got = consume_all(conn.channel(), queue, N // 2)
        assert got == [b"%06d" % i for i in range(1, N, 2)]
    finally:
        conn.channel().queue_delete(queue)
        conn.close()


def test_large_messages_in_a_lazy_queue_come_back_whole_and_in_order(channel, declare):
    """A 20 MB body stays in memory in its place (writing it to the spill would hold the loop), a small
    one around it is paged: the order and the bytes are what was published."""
    queue = declare(channel, "large", **{"x-queue-mode": "lazy"})
    channel.confirm_delivery()
    bodies = [b"a" * 100, bytes(range(256)) * (20 * 4096), b"c" * 100, b"d" * (2 << 20)]
    for body in bodies:
        channel.basic_publish("", queue, body)
    for body in bodies:
        method, _, got = channel.basic_get(queue, auto_ack=True)
        assert method is not None and got == body
