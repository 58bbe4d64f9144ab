"""Rates for the management API: the ``*_details: {"rate": r}`` beside each count, as RabbitMQ's.

Rules:

1. The hot path only increments plain counters (``broker/node/stats.py``, ``QueueStats``); nothing here
   runs per message.
2. Every ``OTTERMQ_METRICS_SAMPLES_INTERVAL`` seconds (RabbitMQ's ``collect_statistics_interval``,
   5 s) :meth:`RateSampler.sample` reads the counters of the node, each vhost, queue, connection
   and channel; a
   rate is the change since the previous sample divided by the time between them (per second,
   one decimal). Gauges (``messages``, ``messages_ready``, ``messages_unacknowledged``) get rates
   too, negative when they shrink, as RabbitMQ's.
3. Queues and channels are keyed by identity, so a queue deleted and declared again starts from
   no rate; objects gone since the last sample are forgotten. Before two samples every rate is 0.0.
4. Counts in answers are read live; only the rates come from the samples.
5. ``get_empty`` counts every ``basic.get`` answered with ``get-empty``, per queue, channel, vhost
   and node. RabbitMQ 3.10's management plugin always shows 0 there (only its Prometheus
   ``rabbitmq_global_messages_get_empty_total`` counts them); ottermq shows the real count.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any

from ottermq.vhost.queue import Queue

from ..node.stats import MESSAGE_STATS, MessageStats

if TYPE_CHECKING:
    from ..node.info import ChannelInfo, ConnectionInfo
    from ..node.view import NodeView

log = logging.getLogger(__name__)

# A queue's ``message_stats`` fields in RabbitMQ's order (``deliver_get`` is the sum of four).
QUEUE_STATS = (
    "publish",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "get_empty",
    "deliver_get",
    "redeliver",
    "ack",
)
TOTALS = ("messages", "messages_ready", "messages_unacknowledged")
MESSAGE_FIELDS = tuple(field for field, _attribute in MESSAGE_STATS)
OCTETS = ("recv_oct", "send_oct")  # a connection's socket bytes, with rates
# the overview's ``churn_rates``, in RabbitMQ's order
CHURN = (
    "channel_closed",
    "channel_created",
    "connection_closed",
    "connection_created",
    "queue_created",
    "queue_declared",
    "queue_deleted",
)


def message_counts(stats: MessageStats) -> tuple[int, ...]:
    """``stats`` in :data:`MESSAGE_FIELDS` order."""
    return tuple(int(getattr(stats, attribute)) for _field, attribute in MESSAGE_STATS)


def queue_counts(queue: Queue) -> tuple[int, ...]:
    """``queue``'s counters in :data:`QUEUE_STATS` order."""
    s = queue.stats
    deliver_get = s.deliver + s.deliver_no_ack + s.get + s.get_no_ack
    return (
        s.publish,
        s.deliver,
        s.deliver_no_ack,
        s.get,
        s.get_no_ack,
        s.get_empty,
        deliver_get,
        s.redeliver,
        s.ack,
    )


def totals(queues: Iterable[Queue]) -> tuple[int, int, int]:
    """``(messages, messages_ready, messages_unacknowledged)`` over ``queues``."""
    ready = unacked = 0
    for queue in queues:
        ready += queue.message_count
        unacked += queue.unacked
    return ready + unacked, ready, unacked


def churn_counts(broker: NodeView) -> tuple[int, ...]:
    """The node's churn in :data:`CHURN` order."""
    churn = broker.connections.churn
    vhosts = broker.owned_vhosts()
    return (
        churn.channels_closed,
        churn.channels_opened,
        churn.connections_closed,
        churn.connections_opened,
        sum(v.queues_created for v in vhosts),
        sum(v.queues_declared for v in vhosts),
        sum(v.queues_deleted for v in vhosts),
    )


def node_key() -> tuple[str]:
    return ("node",)


def churn_key() -> tuple[str]:
    return ("churn",)


def vhost_key(name: str) -> tuple[str, str]:
    return ("vhost", name)


def queue_key(queue: Queue) -> tuple[str, int]:
    return ("queue", id(queue))


def channel_key(channel: ChannelInfo) -> tuple[str, int]:
    return ("channel", channel.key)


def connection_key(conn: ConnectionInfo) -> tuple[str, int]:
    return ("connection", conn.key)


def with_rates(fields: Iterable[str], values: Iterable[int], rates: Iterable[float]) -> dict[str, Any]:
    """RabbitMQ's ``{"publish": 5, "publish_details": {"rate": 0.2}, ...}``."""
    out: dict[str, Any] = {}
    for field, value, rate in zip(fields, values, rates, strict=True):
        out[field] = value
        out[f"{field}_details"] = {"rate": rate}
    return out


class RateSampler:
    """Samples the broker's counters and keeps the latest rates (see the module rules).

    Args:
        broker: whose counters to read.
        interval: seconds between samples.
    """

    def __init__(self, broker: NodeView, interval: float) -> None:
        self.broker = broker
        self.interval = interval
        self._last: dict[Hashable, tuple[int, ...]] = {}
        self._last_at = 0.0
        self._rates: dict[Hashable, tuple[float, ...]] = {}
        self._task: asyncio.Task[None] | None = None

    def observe(self) -> dict[Hashable, tuple[int, ...]]:
        """The counters of every object, keyed as the answers look them up."""
        broker = self.broker
        observed: dict[Hashable, tuple[int, ...]] = {}
        all_queues: list[Queue] = []
        for vhost in broker.owned_vhosts():
            name = vhost.name
            queues = list(vhost.queues.values())
            all_queues += queues
            for queue in queues:
                observed[queue_key(queue)] = queue_counts(queue) + totals([queue])
            observed[vhost_key(name)] = message_counts(broker.connections.message_stats(name)) + totals(
                queues
            )
        observed[node_key()] = message_counts(broker.connections.message_stats()) + totals(all_queues)
        observed[churn_key()] = churn_counts(broker)
        for handle in broker.connections:
            if handle.vhost_name is None:  # not open yet: no snapshot
                continue
            conn = handle.info()
            observed[connection_key(conn)] = (conn.recv_oct, conn.send_oct)
            for channel in conn.channels:
                observed[channel_key(channel)] = message_counts(channel.stats)
        return observed

    def sample(self, now: float | None = None) -> None:
        """Read every counter and replace the rates with the change since the last sample."""
        now = time.monotonic() if now is None else now
        observed = self.observe()
        elapsed = now - self._last_at
        rates: dict[Hashable, tuple[float, ...]] = {}
        if self._last and elapsed > 0:
            for key, values in observed.items():
                before = self._last.get(key)
                if before is not None:
                    pairs = zip(values, before, strict=True)
                    rates[key] = tuple(round((v - b) / elapsed, 1) for v, b in pairs)
        self._last, self._last_at, self._rates = observed, now, rates

    def rates(self, key: Hashable, count: int) -> tuple[float, ...]:
        """The latest rates of the object ``key`` (zeros before two samples saw it)."""
        return self._rates.get(key) or (0.0,) * count

    def start(self) -> None:
        """Sample now and then every ``interval`` seconds on the running loop."""
        self.sample()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.sample()
            except Exception:  # never stop sampling over one bad read
                log.exception("management statistics sample failed")
