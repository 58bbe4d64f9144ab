"""Prometheus metrics in RabbitMQ's ``rabbitmq_prometheus`` names, served by aiohttp.

Rules:

1. Nothing runs between scrapes: :class:`BrokerCollector` reads the broker's state and the plain
   counters the hot path increments (``broker/node/stats.py``, ``DeadLetterer.dead_lettered`` and
   ``.lateness``, the archive's ``lost``) when Prometheus asks.
2. ``<path>`` (``OTTERMQ_PROMETHEUS_PATH``, default ``/metrics``) is aggregated like RabbitMQ's
   ``/metrics`` (queue metrics summed, unlabelled); ``<path>/per-object`` labels the queue metrics
   with ``vhost`` and ``queue`` like RabbitMQ's ``/metrics/per-object``; ``<path>/detailed`` answers
   the families a scrape asks for like RabbitMQ's ``/metrics/detailed`` (``prometheus_detailed``).
3. Names and labels are RabbitMQ 3.10's (``protocol="amqp091"`` on the global message counters,
   ``queue_type``/``dead_letter_strategy`` on the dead-letter ones); ottermq's own metrics start with
   ``ottermq_``.
4. No authentication, as RabbitMQ's endpoint; the listener binds with the AMQP port at start-up.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web
from ottermq.dlx.deadletter import LATENESS_BUCKETS_MS, DeadLetterer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from ..node.view import NodeView
from .listener import HTTPListener
from .node_metrics import channel_metrics, churn_metrics, connection_metrics, node_metrics
from .prometheus_detailed import Detailed, Query, cluster_rows
from .queues import memory_fields
from .shovel_metrics import shovel_metrics

if TYPE_CHECKING:
    from ottermq.vhost.queue import Queue

    from ..node.node import Node

log = logging.getLogger(__name__)

# generate_latest writes text format 0.0.4, which is also what RabbitMQ 3.10 declares
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PROTOCOL = {"protocol": "amqp091"}
CLASSIC = "rabbit_classic_queue"  # RabbitMQ's queue_type label value for classic queues
DEAD_LETTER_REASONS = ("expired", "rejected", "maxlen", "delivery_limit")
STRATEGIES = ("disabled", "at_most_once")

# (name without _total, MessageStats attribute, help): RabbitMQ's rabbit_global_counters
GLOBAL_COUNTERS = (
    ("rabbitmq_global_messages_received", "received", "Total number of messages received from publishers"),
    (
        "rabbitmq_global_messages_received_confirm",
        "received_confirm",
        "Total number of messages received from publishers expecting confirmations",
    ),
    ("rabbitmq_global_messages_routed", "routed", "Total number of messages routed to queues or streams"),
    (
        "rabbitmq_global_messages_unroutable_dropped",
        "unroutable_dropped",
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
    ),
    (
        "rabbitmq_global_messages_unroutable_returned",
        "unroutable_returned",
        "Total number of messages published as mandatory into an exchange and returned to the publisher"
        " as unroutable",
    ),
    ("rabbitmq_global_messages_confirmed", "confirmed", "Total number of messages confirmed to publishers"),
    (
        "rabbitmq_global_messages_delivered",
        "delivered",
        "Total number of messages delivered to consumers",
    ),
    (
        "rabbitmq_global_messages_delivered_consume_auto_ack",
        "delivered_consume_auto_ack",
        "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment",
    ),
    (
        "rabbitmq_global_messages_delivered_consume_manual_ack",
        "delivered_consume_manual_ack",
        "Total number of messages delivered to consumers using basic.consume with manual acknowledgment",
    ),
    (
        "rabbitmq_global_messages_delivered_get_auto_ack",
        "delivered_get_auto_ack",
        "Total number of messages delivered to consumers using basic.get with automatic acknowledgment",
    ),
    (
        "rabbitmq_global_messages_delivered_get_manual_ack",
        "delivered_get_manual_ack",
        "Total number of messages delivered to consumers using basic.get with manual acknowledgment",
    ),
    (
        "rabbitmq_global_messages_get_empty",
        "get_empty",
        "Total number of times basic.get operations fetched no message",
    ),
    (
        "rabbitmq_global_messages_redelivered",
        "redelivered",
        "Total number of messages redelivered to consumers",
    ),
    (
        "rabbitmq_global_messages_acknowledged",
        "acknowledged",
        "Total number of messages acknowledged by consumers",
    ),
)

# (name, help) of each queue metric, in the order of ``_queue_values``; the last is a counter
QUEUE_GAUGES = (
    ("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers"),
    ("rabbitmq_queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged"),
    ("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages - total queue depth"),
    ("rabbitmq_queue_consumers", "Consumers on a queue"),
    ("rabbitmq_queue_messages_ready_bytes", "Size in bytes of ready messages"),
    ("rabbitmq_queue_messages_unacked_bytes", "Size in bytes of all unacknowledged messages"),
    ("rabbitmq_queue_messages_bytes", "Size in bytes of ready and unacknowledged messages"),
    ("rabbitmq_queue_messages_ram", "Ready and unacknowledged messages stored in memory"),
    ("rabbitmq_queue_messages_ram_bytes", "Size of ready and unacknowledged messages stored in memory"),
    ("rabbitmq_queue_messages_ready_ram", "Ready messages stored in memory"),
    ("rabbitmq_queue_messages_unacked_ram", "Unacknowledged messages stored in memory"),
    ("rabbitmq_queue_messages_paged_out", "Messages paged out to disk"),
    ("rabbitmq_queue_messages_paged_out_bytes", "Size in bytes of messages paged out to disk"),
)
QUEUE_PUBLISHED = ("rabbitmq_queue_messages_published", "Total number of messages published to queues")

# (name without _total, MessageStats attribute, help): RabbitMQ's channel counters, summed over the
# node's channels (closed ones included, so they never go down)
CHANNEL_COUNTERS = (
    (
        "rabbitmq_channel_messages_published",
        "received",
        "Total number of messages published into an exchange on a channel",
    ),
    (
        "rabbitmq_channel_messages_confirmed",
        "confirmed",
        "Total number of messages published into an exchange and confirmed on the channel",
    ),
    (
        "rabbitmq_channel_messages_unroutable_returned",
        "unroutable_returned",
        "Total number of messages published as mandatory into an exchange and returned to the publisher"
        " as unroutable",
    ),
    (
        "rabbitmq_channel_messages_unroutable_dropped",
        "unroutable_dropped",
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
    ),
    (
        "rabbitmq_channel_get_ack",
        "delivered_get_manual_ack",
        "Total number of messages fetched with basic.get in manual acknowledgement mode",
    ),
    (
        "rabbitmq_channel_get",
        "delivered_get_auto_ack",
        "Total number of messages fetched with basic.get in automatic acknowledgement mode",
    ),
    (
        "rabbitmq_channel_messages_delivered_ack",
        "delivered_consume_manual_ack",
        "Total number of messages delivered to consumers in manual acknowledgement mode",
    ),
    (
        "rabbitmq_channel_messages_delivered",
        "delivered_consume_auto_ack",
        "Total number of messages delivered to consumers in automatic acknowledgement mode",
    ),
    (
        "rabbitmq_channel_messages_redelivered",
        "redelivered",
        "Total number of messages redelivered to consumers",
    ),
    ("rabbitmq_channel_messages_acked", "acknowledged", "Total number of messages acknowledged by consumers"),
    (
        "rabbitmq_channel_get_empty",
        "get_empty",
        "Total number of times basic.get operations fetched no message",
    ),
)


def _queue_values(queue: Queue, unacked_bytes: int) -> tuple[int, ...]:
    ready, unacked = queue.message_count, queue.unacked
    ready_bytes = queue.ready_bytes
    memory = memory_fields(queue, unacked_bytes)
    return (
        ready,
        unacked,
        ready + unacked,
        len(queue.consumers),
        ready_bytes,
        unacked_bytes,
        ready_bytes + unacked_bytes,
        memory["messages_ram"],
        memory["message_bytes_ram"],
        memory["messages_ready_ram"],
        memory["messages_unacknowledged_ram"],
        memory["messages_paged_out"],
        memory["message_bytes_paged_out"],
        queue.stats.publish,
    )


class BrokerCollector(Collector):
    """Reads ``broker`` at scrape time (see the module rules).

    Args:
        broker: the broker to describe.
        per_object: label queue metrics per queue (``/metrics/per-object``) instead of summing them.
    """

    def __init__(self, broker: NodeView, per_object: bool = False) -> None:
        self.broker = broker
        self.per_object = per_object

    def collect(self) -> Iterable[Metric]:
        """Every metric family, read now."""
        return self.snapshot().collect()

    def snapshot(self) -> Snapshot:
        """What a scrape reads of the broker, on the event loop: a row of numbers per queue and the
        other (few) metric families. Turning the rows into families and the text (the costly part,
        which grows with the number of queues) is left to whoever renders the snapshot."""
        broker = self.broker
        queues = [q for vhost in broker.owned_vhosts() for q in vhost.queues.values()]
        unacked_bytes: dict[Queue, int] = {}
        for conn in broker.connections:
            conn.count_unacked_bytes(unacked_bytes)
        rows = [(q.vhost, q.name, _queue_values(q, unacked_bytes.get(q, 0))) for q in queues]
        conns = [c.info() for c in broker.connections]
        families: list[Metric] = [
            GaugeMetricFamily("rabbitmq_queues", "Queues available", value=len(queues)),
            GaugeMetricFamily("rabbitmq_connections", "Connections currently open", value=len(conns)),
            GaugeMetricFamily(
                "rabbitmq_channels", "Channels currently open", value=sum(len(c.channels) for c in conns)
            ),
            GaugeMetricFamily(
                "rabbitmq_consumers",
                "Consumers currently connected",
                value=sum(len(q.consumers) for q in queues),
            ),
        ]
        stats = broker.connections.message_stats()
        for name, attribute, text in GLOBAL_COUNTERS:
            family = CounterMetricFamily(name, text, labels=list(PROTOCOL))
            family.add_metric(list(PROTOCOL.values()), getattr(stats, attribute))
            families.append(family)
        for name, attribute, text in CHANNEL_COUNTERS:
            families.append(CounterMetricFamily(name, text, value=getattr(stats, attribute)))
        families += self._dead_letter_metrics()
        families += channel_metrics(conns, self.per_object)
        families += connection_metrics(conns, self.per_object)
        families += churn_metrics(broker)
        families += node_metrics(broker)
        families += shovel_metrics(broker.shovels.status())
        return Snapshot(rows, self.per_object, families)

    def _dead_letter_metrics(self) -> Iterator[Metric]:
        counts: dict[tuple[str, str], int] = {}
        buckets = [0] * (len(LATENESS_BUCKETS_MS) + 1)
        late_sum_ms = 0
        dropped = 0
        for vhost in self.broker.owned_vhosts():
            sink = vhost.sink
            if not isinstance(sink, DeadLetterer):
                continue
            for key, n in sink.dead_lettered.items():
                counts[key] = counts.get(key, 0) + n
            for i, n in enumerate(sink.lateness.counts):
                buckets[i] += n
            late_sum_ms += sink.lateness.sum_ms
            dropped += sink.dropped
        for reason in DEAD_LETTER_REASONS:
            family = CounterMetricFamily(
                f"rabbitmq_global_messages_dead_lettered_{reason}",
                f"Total number of messages dead-lettered due to {reason.replace('_', '-')}",
                labels=["queue_type", "dead_letter_strategy"],
            )
            for strategy in STRATEGIES:
                family.add_metric([CLASSIC, strategy], counts.get((reason, strategy), 0))
            yield family
        cumulative, running = [], 0
        for bound, n in zip([*LATENESS_BUCKETS_MS, None], buckets, strict=True):
            running += n
            cumulative.append(("+Inf" if bound is None else str(bound / 1000), running))
        yield HistogramMetricFamily(
            "ottermq_expired_lateness_seconds",
            "How long after its deadline an expired message was dead-lettered (or dropped)",
            buckets=cumulative,
            sum_value=late_sum_ms / 1000,
        )
        yield CounterMetricFamily(
            "ottermq_dead_letters_dropped",
            "Dead letters dropped: no dead-letter exchange, a missing one, no route from it, or a cycle",
            value=dropped,
        )
        yield CounterMetricFamily(
            "ottermq_dead_letter_archive_lost",
            "Dead letters the archive (OTTERMQ_DLX_ARCHIVE_DIR) could not record",
            value=self.broker.archive.lost,
        )
        yield from self._delayed_and_dedup()

    def _delayed_and_dedup(self) -> Iterator[Metric]:
        """Delayed messages (x-delayed-message exchanges) and deduplication."""
        delays = self.broker.delays
        pending = GaugeMetricFamily(
            "ottermq_delayed_messages", "Messages waiting in delayed exchanges", labels=["vhost", "exchange"]
        )
        for (vhost_name, exchange_name), count in sorted(delays.heap.pending.items()):
            pending.add_metric([vhost_name, exchange_name], count)
        yield pending
        for name, text, value in (
            (
                "ottermq_delayed_messages_published",
                "Messages accepted by delayed exchanges to wait",
                delays.published,
            ),
            (
                "ottermq_delayed_messages_delivered",
                "Delayed messages routed to a queue when due",
                delays.delivered,
            ),
            (
                "ottermq_delayed_messages_unroutable",
                "Delayed messages that routed nowhere when due",
                delays.unroutable,
            ),
            (
                "ottermq_delayed_messages_dropped",
                "Delayed messages dropped with their exchange",
                delays.dropped,
            ),
        ):
            yield CounterMetricFamily(name, text, value=value)
        duplicates = CounterMetricFamily(
            "ottermq_messages_deduplicated",
            "Duplicates not routed (exchange) or not enqueued (queue)",
            labels=["vhost", "kind", "name"],
        )
        for vhost in self.broker.owned_vhosts():
            for exchange in vhost.exchanges.values():
                if exchange.dedup is not None:
                    duplicates.add_metric([vhost.name, "exchange", exchange.name], exchange.dedup.duplicates)
            for queue in vhost.queues.values():
                if queue.dedup is not None:
                    duplicates.add_metric([vhost.name, "queue", queue.name], queue.dedup.duplicates)
        yield duplicates


class Snapshot(Collector):
    """A scrape's numbers, read on the loop (``BrokerCollector.snapshot``); ``collect`` builds the queue
    families from them, so it can run in a worker thread."""

    def __init__(
        self, rows: list[tuple[str, str, tuple[int, ...]]], per_object: bool, families: list[Metric]
    ) -> None:
        self.rows = rows
        self.per_object = per_object
        self.families = families

    def collect(self) -> Iterable[Metric]:
        yield from self._queue_metrics()
        yield from self.families

    def _queue_metrics(self) -> Iterator[Metric]:
        rows = self.rows
        families: list[tuple[type[GaugeMetricFamily] | type[CounterMetricFamily], str, str]]
        families = [(GaugeMetricFamily, name, text) for name, text in QUEUE_GAUGES]
        families.append((CounterMetricFamily, *QUEUE_PUBLISHED))
        for i, (kind, name, text) in enumerate(families):
            if self.per_object:
                family = kind(name, text, labels=["vhost", "queue"])
                for vhost, queue, values in rows:
                    family.add_metric([vhost, queue], values[i])
            else:
                family = kind(name, text, value=sum(values[i] for _, _, values in rows))
            yield family


def exposition(broker: NodeView, per_object: bool = False, others: Iterable[str] = ()) -> bytes:
    """The text exposition of ``broker``'s metrics, read now, with the other workers' (their
    expositions, ``others``) merged in (see :class:`Merged`)."""
    return render(BrokerCollector(broker, per_object), list(others))


def render(collector: Collector, others: list[str]) -> bytes:
    """The text exposition of ``collector`` merged with ``others`` (a :class:`Snapshot` renders in a
    worker thread: nothing of the broker is read)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Merged(collector, others) if others else collector)
    return generate_latest(registry)


# With several workers: what describes the node (or a limit of it) is worker 0's; an alarm is on
# when any worker's is; everything else adds up (per-object series are one worker's each).
NODE_WIDE = frozenset(
    {
        "rabbitmq_identity_info",
        "rabbitmq_build_info",
        "rabbitmq_version",
        "erlang_version",
        "rabbitmq_cluster",
        "rabbitmq_cluster_permanent_id",
        "rabbitmq_node",
        "rabbitmq_disk_space_available_bytes",
        "rabbitmq_disk_space_available_limit_bytes",
        "rabbitmq_process_max_fds",
        "rabbitmq_process_max_tcp_sockets",
        "rabbitmq_resident_memory_limit_bytes",
        "process_start_time_seconds",
    }
)


class Merged:
    """Worker 0's metric families with the other workers' expositions merged in."""

    def __init__(self, mine: Collector, others: list[str]) -> None:
        self.mine = mine
        self.others = others

    def collect(self) -> Iterable[Metric]:
        families = {family.name: family for family in self.mine.collect()}
        for text in self.others:
            for family in text_string_to_metric_families(text):
                own = families.get(family.name)
                if own is None:
                    families[family.name] = family
                elif family.name not in NODE_WIDE:
                    own.samples = _merge_samples(
                        own.samples, family.samples, family.name.startswith("rabbitmq_alarms")
                    )
        return list(families.values())


def _merge_samples(mine: list[Sample], theirs: list[Sample], highest: bool) -> list[Sample]:
    index = {(s.name, tuple(sorted(s.labels.items()))): i for i, s in enumerate(mine)}
    out = list(mine)
    for sample in theirs:
        key = (sample.name, tuple(sorted(sample.labels.items())))
        at = index.get(key)
        if at is None:
            index[key] = len(out)
            out.append(sample)
        else:
            old = out[at]
            value = max(old.value, sample.value) if highest else old.value + sample.value
            out[at] = old._replace(value=value)
    return out


def make_app(broker: NodeView, path: str | None = None) -> web.Application:
    """The metrics app: ``path`` (default ``OTTERMQ_PROMETHEUS_PATH``) and ``path/per-object``."""
    base = (path if path is not None else broker.settings.prometheus_path).rstrip("/") or ""

    async def others(path: str) -> list[str]:
        """The other workers' expositions (worker 0 of several), those that answer."""
        pool = broker.cluster.pool
        if pool is None:
            return []
        texts = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            for index in range(1, pool.count):
                port = pool.prometheus_port(index)
                if port is None:
                    continue
                try:
                    async with session.get(f"http://127.0.0.1:{port}{path}") as answer:
                        if answer.status == 200:
                            texts.append(await answer.text())
                except (aiohttp.ClientError, TimeoutError) as exc:
                    log.warning("worker %d's metrics: %s", index, exc)
        return texts

    one_at_a_time = asyncio.Lock()  # each rendering thread competes with the loop for the GIL

    async def scrape(per_object: bool, path: str) -> web.Response:
        texts = await others(path)
        async with one_at_a_time:
            snapshot = BrokerCollector(broker, per_object).snapshot()  # read on the loop, rendered off it
            body = await asyncio.get_running_loop().run_in_executor(None, render, snapshot, texts)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def aggregated(request: web.Request) -> web.Response:
        return await scrape(False, base or "/")

    async def per_object(request: web.Request) -> web.Response:
        return await scrape(True, f"{base}/per-object")

    async def detailed(request: web.Request) -> web.Response:
        query = f"?{request.query_string}" if request.query_string else ""
        texts = await others(f"{base}/detailed{query}")
        async with one_at_a_time:
            snapshot = BrokerCollector(broker, True).snapshot()  # read on the loop, rendered off it
            rows = cluster_rows(broker)
            vhosts = [vhost.name for vhost in broker.owned_vhosts()]
            wanted = Query.of(request.query)

            def render_detailed() -> bytes:
                return render(Detailed(snapshot.collect(), rows, wanted, vhosts), texts)

            body = await asyncio.get_running_loop().run_in_executor(None, render_detailed)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get(base or "/", aggregated)
    app.router.add_get(f"{base}/per-object", per_object)
    app.router.add_get(f"{base}/detailed", detailed)
    return app


class PrometheusServer(HTTPListener):
    """The metrics listener on ``OTTERMQ_PROMETHEUS_PORT`` (0: no plain HTTP port, HTTPS only) and, with
    ``OTTERMQ_PROMETHEUS_SSL``, ``OTTERMQ_PROMETHEUS_SSL_PORT``; ``ephemeral``: a worker's internal
    listener on any free port instead."""

    def __init__(self, node: Node, tls_context: ssl.SSLContext | None, ephemeral: bool = False) -> None:
        broker = NodeView(node)  # what the API reads of the node
        settings = broker.settings
        port = 0 if ephemeral else settings.prometheus_port or None
        path = settings.prometheus_path
        tls = tls_context if settings.prometheus_ssl else None
        tls_port = settings.prometheus_ssl_port
        what = "internal Prometheus metrics (worker 0 adds them up)" if ephemeral else "Prometheus metrics"
        super().__init__(broker, port, path, what, make_app, tls_port, tls)
