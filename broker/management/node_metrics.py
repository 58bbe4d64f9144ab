"""Prometheus families about channels, connections, churn and the node itself, in RabbitMQ 3.10's
``rabbitmq_prometheus`` names (``prometheus.py`` serves them with the queue and message metrics).

Rules:

1. Read at scrape time from broker state and plain counters; nothing runs between scrapes.
2. Channel and connection gauges are summed over what is open now, as RabbitMQ's aggregated
   ``/metrics``; on ``/metrics/per-object`` they are labelled ``channel`` with the management API's
   name of the channel or connection (RabbitMQ puts an Erlang pid there, which ottermq has not).
3. Connection byte and packet counters are those of open connections (RabbitMQ's too: they drop
   when a connection closes); the channel message counters (``prometheus.py``) keep closed channels'.
4. ``rabbitmq_identity_info`` carries the node and cluster names RabbitMQ's Grafana dashboards join
   on; ``rabbitmq_build_info`` names the RabbitMQ release whose API ottermq speaks (as
   ``/api/overview``'s ``rabbitmq_version``) and, in ``erlang_version``, the Python running it.
5. ottermq has a memory alarm but no disk or file-descriptor alarm, so those two alarm gauges are
   always 0 and there is no disk-limit gauge.
6. The event-loop lag (``ottermq_event_loop_lag_seconds``, ``_max_seconds``) is per process, labelled
   ``worker`` (0 for a broker of one process), so worker 0's merge keeps each worker's series.
"""

from __future__ import annotations

import base64
import hashlib
import os
import platform
import resource
import shutil
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import prometheus_client
from ottermq.persistence.batching import BatchingStore
from ottermq.persistence.postgres import PostgresStore
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from .. import node_name
from ..node.alarms import process_rss
from .overview import RABBITMQ_API_VERSION

if TYPE_CHECKING:
    from ..node.info import ConnectionInfo
    from ..node.view import NodeView


def _family(
    kind: type[GaugeMetricFamily] | type[CounterMetricFamily],
    name: str,
    text: str,
    rows: Iterable[tuple[str, int]],
    per_object: bool,
) -> Metric:
    """One family: labelled per object (``channel``) or the sum of ``rows``' values."""
    if per_object:
        family = kind(name, text, labels=["channel"])
        for label, value in rows:
            family.add_metric([label], value)
        return family
    return kind(name, text, value=sum(value for _label, value in rows))


def channel_metrics(conns: list[ConnectionInfo], per_object: bool) -> Iterator[Metric]:
    """``rabbitmq_channel_*`` gauges and the global publisher/consumer counts."""
    channels = [ch for conn in conns for ch in conn.channels]
    names = [ch.name for ch in channels]
    gauges = (
        ("rabbitmq_channel_consumers", "Consumers on a channel", lambda ch: len(ch.consumers)),
        (
            "rabbitmq_channel_messages_unacked",
            "Delivered but not yet acknowledged messages",
            lambda ch: ch.unacked,
        ),
        (
            "rabbitmq_channel_messages_unconfirmed",
            "Published but not yet confirmed messages",
            lambda ch: ch.unconfirmed,
        ),
        (
            "rabbitmq_channel_messages_uncommitted",
            "Messages received in a transaction but not yet committed",
            lambda ch: ch.uncommitted[0],
        ),
        (
            "rabbitmq_channel_acks_uncommitted",
            "Message acknowledgements in a transaction not yet committed",
            lambda ch: ch.uncommitted[1],
        ),
        (
            "rabbitmq_channel_prefetch",
            "Total limit of unacknowledged messages for all consumers on a channel",
            lambda ch: ch.global_prefetch,
        ),
        (
            "rabbitmq_consumer_prefetch",
            "Limit of unacknowledged messages for each consumer",
            lambda ch: sum(c.prefetch for c in ch.consumers),
        ),
    )
    for name, text, value in gauges:
        rows = [(label, int(value(ch))) for label, ch in zip(names, channels, strict=True)]
        yield _family(GaugeMetricFamily, name, text, rows, per_object)
    yield GaugeMetricFamily(
        "rabbitmq_global_publishers",
        "Current number of publishers",
        value=sum(1 for ch in channels if ch.stats.received),
    )
    consumers = sum(len(ch.consumers) for ch in channels)
    yield GaugeMetricFamily("rabbitmq_global_consumers", "Current number of consumers", value=consumers)


def connection_metrics(conns: list[ConnectionInfo], per_object: bool) -> Iterator[Metric]:
    """``rabbitmq_connection_*`` of the open connections."""
    names = [conn.name for conn in conns]
    counters = (  # (name without _total, help, ConnectionInfo attribute)
        ("rabbitmq_connection_incoming_bytes", "Total number of bytes received on a connection", "recv_oct"),
        ("rabbitmq_connection_outgoing_bytes", "Total number of bytes sent on a connection", "send_oct"),
        (
            "rabbitmq_connection_incoming_packets",
            "Total number of packets received on a connection",
            "recv_cnt",
        ),
        ("rabbitmq_connection_outgoing_packets", "Total number of packets sent on a connection", "send_cnt"),
    )
    for name, text, attribute in counters:
        rows = [(label, int(getattr(conn, attribute))) for label, conn in zip(names, conns, strict=True)]
        yield _family(CounterMetricFamily, name, text, rows, per_object)
    rows = [(label, len(conn.channels)) for label, conn in zip(names, conns, strict=True)]
    text = "Channels on a connection"
    yield _family(GaugeMetricFamily, "rabbitmq_connection_channels", text, rows, per_object)


def churn_metrics(broker: NodeView) -> Iterator[Metric]:
    """Connections, channels and queues opened/declared/created and closed/deleted since start-up."""
    churn = broker.connections.churn
    vhosts = broker.owned_vhosts()
    counters = (
        ("rabbitmq_connections_opened", "Total number of connections opened", churn.connections_opened),
        (
            "rabbitmq_connections_closed",
            "Total number of connections closed or terminated",
            churn.connections_closed,
        ),
        ("rabbitmq_channels_opened", "Total number of channels opened", churn.channels_opened),
        ("rabbitmq_channels_closed", "Total number of channels closed", churn.channels_closed),
        (
            "rabbitmq_queues_declared",
            "Total number of queues declared",
            sum(v.queues_declared for v in vhosts),
        ),
        ("rabbitmq_queues_created", "Total number of queues created", sum(v.queues_created for v in vhosts)),
        ("rabbitmq_queues_deleted", "Total number of queues deleted", sum(v.queues_deleted for v in vhosts)),
    )
    for name, text, value in counters:
        yield CounterMetricFamily(name, text, value=value)


def cluster_permanent_id(node: str) -> str:
    """A stable cluster id in RabbitMQ's form (``rabbitmq-cluster-id-`` and 22 base64url characters),
    derived from the node name since a single ottermq node is its own cluster."""
    digest = hashlib.sha256(node.encode()).digest()[:16]
    return "rabbitmq-cluster-id-" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def open_fds() -> int | None:
    """File descriptors this process has open (None where /proc is unavailable)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux
        return None


def max_fds() -> int:
    """The soft limit on open file descriptors."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def max_tcp_sockets(fd_limit: int) -> int:
    """RabbitMQ 3.10's socket limit for a file-descriptor limit (``file_handle_cache``: the handle
    limit is ``max(2, fds - 100 + 3)``, sockets may take ``trunc(limit * 0.9 - 2)`` of it, at least 0),
    what its ``rabbitmq_process_max_tcp_sockets`` shows: 832 for 1024 descriptors."""
    limit = max(2, fd_limit - 100 + 3)
    return max(0, int(limit * 0.9 - 2))


def disk_free(broker: NodeView) -> int | None:
    """Free bytes on the file system of the data directory (or the working one before it exists)."""
    data_dir = broker.settings.data_dir
    try:
        return shutil.disk_usage(data_dir if os.path.isdir(data_dir) else ".").free
    except OSError:
        return None


def node_metrics(broker: NodeView) -> Iterator[Metric]:
    """Identity and build labels, memory, file descriptors, disk space and alarms."""
    node = node_name()
    identity = GaugeMetricFamily(
        "rabbitmq_identity_info",
        "RabbitMQ node & cluster identity info",
        labels=["rabbitmq_node", "rabbitmq_cluster", "rabbitmq_cluster_permanent_id"],
    )
    identity.add_metric([node, node, cluster_permanent_id(node)], 1)
    yield identity
    build = GaugeMetricFamily(
        "rabbitmq_build_info",
        "RabbitMQ & Erlang/OTP version info",
        labels=[
            "rabbitmq_version",
            "prometheus_plugin_version",
            "prometheus_client_version",
            "erlang_version",
        ],
    )
    client_version = getattr(prometheus_client, "__version__", "")
    build.add_metric(
        [RABBITMQ_API_VERSION, RABBITMQ_API_VERSION, client_version, f"Python {platform.python_version()}"], 1
    )
    yield build
    yield GaugeMetricFamily(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        value=broker.started_at,
    )
    rss = process_rss()
    if rss is not None:
        yield GaugeMetricFamily("rabbitmq_process_resident_memory_bytes", "Memory used in bytes", value=rss)
    yield GaugeMetricFamily(
        "rabbitmq_resident_memory_limit_bytes",
        "Memory high watermark in bytes",
        value=broker.alarms.memory_limit,
    )
    fds = open_fds()
    if fds is not None:
        yield GaugeMetricFamily("rabbitmq_process_open_fds", "Open file descriptors", value=fds)
    fd_limit = max_fds()
    yield GaugeMetricFamily("rabbitmq_process_max_fds", "Open file descriptors limit", value=fd_limit)
    sockets = len(broker.connections)
    yield GaugeMetricFamily("rabbitmq_process_open_tcp_sockets", "Open TCP sockets", value=sockets)
    yield GaugeMetricFamily(
        "rabbitmq_process_max_tcp_sockets", "Open TCP sockets limit", value=max_tcp_sockets(fd_limit)
    )
    free = disk_free(broker)
    if free is not None:
        yield GaugeMetricFamily(
            "rabbitmq_disk_space_available_bytes", "Disk space available in bytes", value=free
        )
    yield GaugeMetricFamily(
        "rabbitmq_disk_space_available_limit_bytes",
        "Free disk space low watermark in bytes",
        value=broker.alarms.disk_free_limit,
    )
    alarms = (
        (
            "rabbitmq_alarms_memory_used_watermark",
            "is 1 if VM memory watermark alarm is in effect",
            broker.alarms.memory,
        ),
        (
            "rabbitmq_alarms_free_disk_space_watermark",
            "is 1 if free disk space watermark alarm is in effect",
            broker.alarms.disk,
        ),
        ("rabbitmq_alarms_file_descriptor_limit", "is 1 if file descriptor limit alarm is in effect", False),
    )
    for name, text, on in alarms:
        yield GaugeMetricFamily(name, text, value=1 if on else 0)
    yield from auth_metrics(broker)
    yield from leadership_metrics(broker)
    yield from loop_lag_metrics(broker)


def loop_lag_metrics(broker: NodeView) -> Iterator[Metric]:
    """``ottermq_event_loop_lag_seconds{worker}`` (histogram: how late the event loop ran a timer
    due every 20 ms) and ``ottermq_event_loop_lag_max_seconds{worker}`` (the worst since start),
    labelled with this process's worker number so that the workers' series stay apart
    (``broker/node/looplag.py``)."""
    monitor = broker.alarms.loop_lag
    worker = str(broker.cluster.index)
    histogram = HistogramMetricFamily(
        "ottermq_event_loop_lag_seconds",
        "How late the event loop ran a timer (a turn that held the loop shows here)",
        labels=["worker"],
    )
    histogram.add_metric([worker], monitor.cumulative(), sum_value=monitor.total)
    yield histogram
    worst = GaugeMetricFamily(
        "ottermq_event_loop_lag_max_seconds", "The largest event-loop lag since start", labels=["worker"]
    )
    worst.add_metric([worker], monitor.worst)
    yield worst


ROLES = ("active", "standby", "lost")


def leadership_metrics(broker: NodeView) -> Iterator[Metric]:
    """``ottermq_ha_role{role}`` (1 for this node's role; a broker without a PostgreSQL lease is the
    active one), ``ottermq_ha_epoch`` and ``ottermq_ha_failovers_total`` (take-overs from a node that
    had not released the leadership, as counted in the database)."""
    lease = broker.lease
    role = lease.role if lease is not None else "active"
    family = GaugeMetricFamily(
        "ottermq_ha_role", "This node's role: active, standby or lost", labels=["role"]
    )
    for name in ROLES:
        family.add_metric([name], 1 if name == role else 0)
    yield family
    yield GaugeMetricFamily(
        "ottermq_ha_epoch",
        "Leadership epoch this node holds (OTTERMQ_STORE=postgresql; 0 otherwise)",
        value=lease.epoch if lease is not None else 0,
    )
    yield CounterMetricFamily(
        "ottermq_ha_failovers",
        "Take-overs by a standby of a node that had not released the leadership",
        value=lease.failovers if lease is not None else 0,
    )
    yield GaugeMetricFamily(
        "ottermq_ha_lease_age_seconds",
        "Seconds since the active last renewed its lease (it stops at OTTERMQ_LEASE_SECONDS)",
        value=lease.lease_age if lease is not None else 0,
    )
    yield from store_metrics(broker)


def store_metrics(broker: NodeView) -> Iterator[Metric]:
    """``ottermq_store_pending_ops`` (written, not yet committed: grows while the store cannot
    commit), ``ottermq_store_failed_batches_total`` (commits that failed and were retried, or were
    refused when the disk was full) and ``ottermq_store_timeouts_total`` (PostgreSQL calls dropped at
    their deadline)."""
    store = broker.store
    yield GaugeMetricFamily(
        "ottermq_store_pending_ops", "Store writes not yet committed", value=store.pending
    )
    if isinstance(store, BatchingStore):
        yield CounterMetricFamily(
            "ottermq_store_failed_batches", "Store commits that failed", value=store.failed_batches
        )
    if isinstance(store, PostgresStore):
        yield CounterMetricFamily(
            "ottermq_store_timeouts",
            "PostgreSQL calls that got no answer within their deadline (the connection was dropped)",
            value=store.timeouts,
        )


def auth_metrics(broker: NodeView) -> Iterator[Metric]:
    """``rabbitmq_auth_attempts_{,succeeded_,failed_}total`` by protocol (``amqp091``, ``http``)."""
    families: tuple[tuple[str, str, Callable[[int, int], int]], ...] = (
        ("rabbitmq_auth_attempts", "Total number of authorization attempts", lambda ok, bad: ok + bad),
        (
            "rabbitmq_auth_attempts_succeeded",
            "Total number of successful authentication attempts",
            lambda ok, bad: ok,
        ),
        (
            "rabbitmq_auth_attempts_failed",
            "Total number of failed authentication attempts",
            lambda ok, bad: bad,
        ),
    )
    attempts = {"amqp091": [0, 0], "http": [0, 0], **broker.logins.attempts}
    for name, text, value in families:
        family = CounterMetricFamily(name, text, labels=["protocol"])
        for protocol, (ok, bad) in sorted(attempts.items()):
            family.add_metric([protocol], value(ok, bad))
        yield family
