"""The management API's rate sampler (``broker/management/rates.py``) and the message counters it reads
(``broker/stats.py``): rates are the change between two samples per second, objects are keyed by
identity, a closed channel's counts stay in its vhost's and the node's totals."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from ottermq.broker.config import Settings
from ottermq.broker.management.rates import (
    MESSAGE_FIELDS,
    QUEUE_STATS,
    TOTALS,
    RateSampler,
    node_key,
    queue_key,
    vhost_key,
    with_rates,
)
from ottermq.broker.node.info import ChannelInfo, ChannelRef, ConnectionInfo
from ottermq.broker.node.node import Node
from ottermq.broker.node.stats import MessageStats
from ottermq.vhost.message import Message

PUBLISH = QUEUE_STATS.index("publish")
READY = len(QUEUE_STATS) + TOTALS.index("messages_ready")


def make_broker() -> Node:
    return Node(Settings(_env_file=None), asyncio.new_event_loop())  # type: ignore[call-arg]


def publish(broker: Node, queue: str, n: int) -> None:
    vhost = broker.vhosts["/"]
    for _ in range(n):
        vhost.publish(None, Message("", queue, b"\x00\x00", b"x", False, 0, None))


class FakeConnection:
    """A ``ConnectionHandle`` with one vhost and channels whose counters the test moves."""

    def __init__(self, vhost: Any, channels: dict[int, MessageStats]) -> None:
        self.vhost_name = vhost.name
        self.username = "guest"
        self.channels = channels

    def channel_stats(self) -> Iterator[MessageStats]:
        yield from self.channels.values()

    def info(self) -> ConnectionInfo:
        ref = ChannelRef(1, "c", "127.0.0.1", 1, "guest")
        channels = tuple(
            ChannelInfo(id(stats), ref, self.vhost_name, (), 0, 0, (0, 0), 0, 0, False, False, stats)
            for _number, stats in sorted(self.channels.items())
        )
        return ConnectionInfo(
            id(self),
            "c",
            "127.0.0.1",
            5672,
            "127.0.0.1",
            1,
            "guest",
            self.vhost_name,
            None,
            False,
            2047,
            131072,
            60,
            {},
            0,
            0,
            0,
            0,
            channels,
        )


def test_rates_are_the_change_between_two_samples_per_second():
    broker = make_broker()
    vhost = broker.ensure_vhost("/")
    queue = vhost.declare_queue("q", False, False, False, False, {}, None)
    sampler = RateSampler(broker, 5.0)
    publish(broker, "q", 3)
    sampler.sample(now=100.0)
    assert sampler.rates(queue_key(queue), 12) == (0.0,) * 12  # one sample: no rate yet
    publish(broker, "q", 10)
    sampler.sample(now=102.0)
    rates = sampler.rates(queue_key(queue), len(QUEUE_STATS) + len(TOTALS))
    assert rates[PUBLISH] == 5.0
    assert rates[READY] == 5.0
    node = sampler.rates(node_key(), len(MESSAGE_FIELDS) + len(TOTALS))
    assert node[len(MESSAGE_FIELDS) + TOTALS.index("messages")] == 5.0
    vhost.get_queue("q", None).purge()
    sampler.sample(now=104.0)
    assert sampler.rates(queue_key(queue), len(QUEUE_STATS) + len(TOTALS))[READY] == -6.5  # gauges fall


def test_a_queue_declared_again_starts_without_a_rate():
    broker = make_broker()
    vhost = broker.ensure_vhost("/")
    first = vhost.declare_queue("q", False, False, False, False, {}, None)
    sampler = RateSampler(broker, 5.0)
    sampler.sample(now=0.0)
    vhost.delete_queue(first)
    second = vhost.declare_queue("q", False, False, False, False, {}, None)
    publish(broker, "q", 4)
    sampler.sample(now=1.0)
    assert sampler.rates(queue_key(second), len(QUEUE_STATS) + len(TOTALS)) == (0.0,) * 12


def test_closed_channels_stay_in_vhost_and_node_totals():
    broker = make_broker()
    broker.ensure_vhost("/")
    broker.ensure_vhost("other")
    live = MessageStats()
    live.received = 2
    conn = FakeConnection(broker.vhosts["/"], {1: live})
    broker.connections.add(conn)  # type: ignore[arg-type]
    closed = MessageStats()
    closed.received = 5
    closed.acknowledged = 1
    broker.connections.retire("/", closed)
    assert broker.connections.message_stats("/").received == 7
    assert broker.connections.message_stats("/").acknowledged == 1
    assert broker.connections.message_stats("other").received == 0
    assert broker.connections.message_stats().received == 7
    sampler = RateSampler(broker, 5.0)
    sampler.sample(now=0.0)
    live.received += 10
    sampler.sample(now=2.0)
    width = len(MESSAGE_FIELDS) + len(TOTALS)
    assert sampler.rates(vhost_key("/"), width)[MESSAGE_FIELDS.index("publish")] == 5.0
    assert sampler.rates(vhost_key("other"), width)[MESSAGE_FIELDS.index("publish")] == 0.0


def test_with_rates_puts_details_beside_each_count():
    assert with_rates(("publish", "ack"), (3, 1), (0.5, 0.0)) == {
        "publish": 3,
        "publish_details": {"rate": 0.5},
        "ack": 1,
        "ack_details": {"rate": 0.0},
    }


def test_message_stats_total_and_delivered():
    a, b = MessageStats(), MessageStats()
    a.delivered_get_auto_ack, b.delivered_consume_manual_ack, b.get_empty = 1, 2, 3
    total = MessageStats.total([a, b])
    assert (total.delivered, total.get_empty) == (3, 3)
