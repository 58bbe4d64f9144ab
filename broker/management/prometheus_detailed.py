"""``<path>/detailed``: RabbitMQ 3.10's ``/metrics/detailed``, the metric families a scrape asks for.

Rules (RabbitMQ's ``prometheus_rabbitmq_core_metrics_collector``, ``collect_mf('detailed', ...)``):

1. ``?family=NAME`` (repeatable) picks metric families by the name of RabbitMQ's table
   (``queue_coarse_metrics``, ``queue_metrics``, ...); a name that is no family is ignored. Without any,
   the answer holds only ``rabbitmq_build_info`` and ``rabbitmq_identity_info``, which every answer
   ends with.
2. The metrics are those of ``/metrics/per-object`` (labelled per object), named ``rabbitmq_detailed_``
   instead of ``rabbitmq_``, in the order of RabbitMQ's tables, each family's metrics in its order;
   the cluster families (``vhost_status``, ``exchange_bindings``, ``exchange_names``) are named
   ``rabbitmq_cluster_``. ``queue_consumer_count`` is left out when ``queue_metrics`` (which holds
   its one metric) is asked for too.
3. ``?vhost=NAME`` (repeatable) keeps the queue families' series (``queue_coarse_metrics``,
   ``queue_metrics``, ``queue_consumer_count``) of those vhosts; names of no vhost are ignored, so
   only unknown names leave the queue families empty. The other families are not filtered.
4. A family ottermq has no data for is answered without it; a family it has only some metrics for
   gets those (``FAMILIES``; docs/metrics.md lists what is missing).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric

from ..node.view import NodeView

PREFIX, DETAILED, CLUSTER = "rabbitmq_", "rabbitmq_detailed_", "rabbitmq_cluster_"
IDENTITY = ("rabbitmq_build_info", "rabbitmq_identity_info")

# RabbitMQ's tables in its order, each with the metrics of /metrics/per-object it holds (family names
# without prefix and without _total), in RabbitMQ's order; tables ottermq has no data for are absent
FAMILIES: dict[str, tuple[str, ...]] = {
    "connection_churn_metrics": (
        "connections_opened",
        "connections_closed",
        "channels_opened",
        "channels_closed",
        "queues_declared",
        "queues_created",
        "queues_deleted",
    ),
    "node_coarse_metrics": (
        "process_open_fds",
        "process_open_tcp_sockets",
        "process_resident_memory_bytes",
        "disk_space_available_bytes",
    ),
    "node_metrics": (
        "process_max_fds",
        "process_max_tcp_sockets",
        "resident_memory_limit_bytes",
        "disk_space_available_limit_bytes",
    ),
    "auth_attempt_metrics": ("auth_attempts", "auth_attempts_succeeded", "auth_attempts_failed"),
    "queue_coarse_metrics": ("queue_messages_ready", "queue_messages_unacked", "queue_messages"),
    "queue_consumer_count": ("queue_consumers",),
    "queue_metrics": (
        "queue_consumers",
        "queue_messages_ram",
        "queue_messages_ram_bytes",
        "queue_messages_ready_ram",
        "queue_messages_unacked_ram",
        "queue_messages_bytes",
        "queue_messages_ready_bytes",
        "queue_messages_unacked_bytes",
        "queue_messages_paged_out",
        "queue_messages_paged_out_bytes",
    ),
    "channel_metrics": (
        "channel_consumers",
        "channel_messages_unacked",
        "channel_messages_unconfirmed",
        "channel_messages_uncommitted",
        "channel_acks_uncommitted",
        "consumer_prefetch",
        "channel_prefetch",
    ),
    "connection_coarse_metrics": ("connection_incoming_bytes", "connection_outgoing_bytes"),
    "connection_metrics": (
        "connection_incoming_packets",
        "connection_outgoing_packets",
        "connection_channels",
    ),
}
QUEUE_FAMILIES = frozenset({"queue_coarse_metrics", "queue_metrics", "queue_consumer_count"})
CLUSTER_FAMILIES = ("vhost_status", "exchange_bindings", "exchange_names")
_CLUSTER_HELP = {
    "vhost_status": "Whether a given vhost is running",
    "exchange_bindings": "Number of bindings for an exchange. This value is cluster-wide.",
    "exchange_name": "Enumerates exchanges without any additional info. This value is cluster-wide. A"
    " cheaper alternative to `exchange_bindings`",
}


@dataclass(frozen=True)
class Query:
    """What a scrape of ``/detailed`` asks for: RabbitMQ's family names and vhost names, as given."""

    families: tuple[str, ...]
    vhosts: tuple[str, ...] | None  # None: no ``vhost`` parameter

    @classmethod
    def of(cls, query: Mapping[str, str] | object) -> Query:
        """From aiohttp's ``request.query`` (a multidict: ``getall``)."""
        getall = getattr(query, "getall")  # noqa: B009 - a MultiDictProxy's method
        vhosts = tuple(getall("vhost", ()))
        return cls(tuple(getall("family", ())), vhosts or None)


@dataclass(frozen=True)
class ClusterRows:
    """The cluster families' rows, read on the event loop (the vhosts and exchanges this worker owns)."""

    vhosts: list[str]
    exchanges: list[tuple[str, str, str, int]]  # vhost, name, type, bindings from it


def cluster_rows(broker: NodeView) -> ClusterRows:
    """RabbitMQ's rows: every vhost (running: 1), every exchange but the default and internal ones."""
    vhosts = [vhost.name for vhost in broker.owned_vhosts()]
    exchanges = []
    for vhost in broker.owned_vhosts():
        for exchange in vhost.exchanges.values():
            if not exchange.name or exchange.internal:
                continue
            exchanges.append((vhost.name, exchange.name, exchange.type, exchange.bindings))
    return ClusterRows(sorted(vhosts), sorted(exchanges))


class Detailed:
    """The families ``query`` asks for (see the module rules), from a per-object scrape's families."""

    def __init__(self, per_object: Iterable[Metric], rows: ClusterRows, query: Query, vhosts: Sequence[str]):
        self.by_name = {family.name: family for family in per_object}
        self.rows = rows
        self.query = query
        known = set(vhosts)
        self.keep = None if query.vhosts is None else {name for name in query.vhosts if name in known}

    def collect(self) -> Iterator[Metric]:
        asked = set(self.query.families)
        for table, names in FAMILIES.items():
            if table not in asked or (table == "queue_consumer_count" and "queue_metrics" in asked):
                continue
            for name in names:
                family = self.by_name.get(PREFIX + name)
                if family is not None:
                    yield self._renamed(family, DETAILED + name, table in QUEUE_FAMILIES)
        for table in CLUSTER_FAMILIES:
            if table in asked:
                yield self._cluster(table)
        for name in IDENTITY:
            if name in self.by_name:
                yield self.by_name[name]

    def _renamed(self, family: Metric, name: str, filtered: bool) -> Metric:
        renamed = Metric(name, family.documentation, family.type)
        for sample in family.samples:
            if filtered and self.keep is not None and sample.labels.get("vhost") not in self.keep:
                continue
            suffix = sample.name[len(family.name) :]
            renamed.add_sample(name + suffix, sample.labels, sample.value, sample.timestamp, sample.exemplar)
        return renamed

    def _cluster(self, table: str) -> Metric:
        if table == "vhost_status":
            family = GaugeMetricFamily(CLUSTER + table, _CLUSTER_HELP[table], labels=["vhost"])
            for vhost in self.rows.vhosts:
                family.add_metric([vhost], 1)
            return family
        name = "exchange_bindings" if table == "exchange_bindings" else "exchange_name"
        family = GaugeMetricFamily(CLUSTER + name, _CLUSTER_HELP[name], labels=["vhost", "exchange", "type"])
        for vhost, exchange, kind, bindings in self.rows.exchanges:
            family.add_metric([vhost, exchange, kind], bindings if table == "exchange_bindings" else 1)
        return family
