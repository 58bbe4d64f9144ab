"""``GET /api/overview``.

Versions: ``management_version`` and ``rabbitmq_version`` name the RabbitMQ release whose API this
emulates (3.10.8), so tools that compare them keep working; ``product_name``/``product_version``
are OtterMQ's own. ``dead_letter_stats`` (an ottermq extension; RabbitMQ's API has none) counts the
messages dead-lettered in the user's vhosts by reason since start (the web UI charts their rates).
``definitions_file`` (an ottermq extension, administrators only) is the import report of the
``OTTERMQ_DEFINITIONS_FILE`` read at this start: ``file``, ``applied``, ``unchanged``, ``skipped``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from ottermq.dlx.reasons import Reason
from ottermq.vhost.chash import CHASH_DESCRIPTION, CHASH_EXCHANGE_TYPE

from .. import VERSION, node_name
from ..node.stats import MessageStats
from .common import SEE_ALL_TAGS, broker_of, sampler_of, user_of, visible_vhosts
from .rates import (
    CHURN,
    MESSAGE_FIELDS,
    TOTALS,
    churn_counts,
    churn_key,
    message_counts,
    node_key,
    totals,
    vhost_key,
    with_rates,
)

RABBITMQ_API_VERSION = "3.10.8"
EXCHANGE_TYPES = ("direct", "fanout", "headers", "topic")
# the plugins' types ottermq has built in, with the plugins' descriptions (RabbitMQ lists every type by name)
PLUGIN_EXCHANGE_TYPES = (
    (CHASH_EXCHANGE_TYPE, CHASH_DESCRIPTION),
    ("x-delayed-message", "Delayed Message Exchange."),
    ("x-message-deduplication", "Message Deduplication Exchange."),
)


def exchange_types() -> list[dict[str, Any]]:
    """The ``exchange_types`` of ``/api/overview`` and ``/api/nodes``: the AMQP types, then the
    plugins' types ottermq has built in (all of them are always enabled)."""
    return [
        {"name": t, "description": f"AMQP {t} exchange, as per the AMQP specification", "enabled": True}
        for t in EXCHANGE_TYPES
    ] + [{"name": t, "description": d, "enabled": True} for t, d in PLUGIN_EXCHANGE_TYPES]


async def overview(request: web.Request) -> web.Response:
    broker = broker_of(request)
    node = node_name()
    vhosts = [vhost for vhost in visible_vhosts(request) if broker.cluster.owns(vhost.name)]
    names = {vhost.name for vhost in vhosts}
    user = user_of(request)
    conns = [c for c in broker.connections if c.vhost_name is not None and c.vhost_name in names]
    if not {"administrator", "monitoring"} & set(user.tags):
        conns = [c for c in conns if c.username == user.name]
    queues = [q for vhost in vhosts for q in vhost.queues.values()]
    sampler = sampler_of(request)
    width = len(MESSAGE_FIELDS) + len(TOTALS)
    if not SEE_ALL_TAGS.isdisjoint(user.tags):  # the node's counts
        counts = message_counts(broker.connections.message_stats())
        rates = sampler.rates(node_key(), width)
    else:  # the user's vhosts' counts
        counts = message_counts(MessageStats.total(broker.connections.message_stats(v.name) for v in vhosts))
        per_vhost = [sampler.rates(vhost_key(v.name), width) for v in vhosts]
        rates = tuple(round(sum(column), 1) for column in zip(*per_vhost, strict=True)) or (0.0,) * width
    body: dict[str, Any] = {
        "management_version": RABBITMQ_API_VERSION,
        "rabbitmq_version": RABBITMQ_API_VERSION,
        "product_name": "OtterMQ",
        "product_version": VERSION,
        "rates_mode": "basic",
        "disable_stats": False,
        "enable_queue_totals": False,
        "exchange_types": exchange_types(),
        "message_stats": with_rates(MESSAGE_FIELDS, counts, rates[: len(MESSAGE_FIELDS)]),
        "queue_totals": with_rates(TOTALS, totals(queues), rates[len(MESSAGE_FIELDS) :]),
        "churn_rates": with_rates(CHURN, churn_counts(broker), sampler.rates(churn_key(), len(CHURN))),
        "object_totals": {
            "connections": len(conns),
            "channels": sum(c.channel_count() for c in conns),
            "exchanges": sum(len(vhost.exchanges) + 1 for vhost in vhosts),  # + the default exchange
            "queues": len(queues),
            "consumers": sum(len(q.consumers) for q in queues),
        },
        "node": node,
        "cluster_name": node,
        "listeners": listeners(request, node),
        "dead_letter_stats": dead_letter_stats(vhosts),
    }
    imported = broker.definitions_file
    if imported is not None and "administrator" in user.tags:
        body["definitions_file"] = imported.to_json()
    return web.json_response(body)


def dead_letter_stats(vhosts: list[Any]) -> dict[str, int]:
    """Messages dead-lettered by reason in ``vhosts`` (dropped ones too: they died all the same)."""
    counts = {reason.value: 0 for reason in Reason}
    for vhost in vhosts:
        for (reason, _strategy), n in getattr(vhost.sink, "dead_lettered", {}).items():
            counts[reason] = counts.get(reason, 0) + n
    return counts


def listeners(request: web.Request, node: str) -> list[dict[str, Any]]:
    """The AMQP, management and Prometheus listeners, as RabbitMQ lists them (protocols ``amqp``,
    ``amqp/ssl``, ``http``, ``https``, ``http/prometheus``, ``https/prometheus``; the HTTP ones' socket
    options name their port, the Prometheus ones their protocol too, without cowboy's options)."""
    result = []
    for protocol, ip, port in broker_of(request).listings.all():
        opts: dict[str, Any] = {}
        if protocol.startswith("http"):
            opts = {"port": port, **({"protocol": protocol} if protocol.endswith("/prometheus") else {})}
        result.append(
            {"node": node, "protocol": protocol, "ip_address": ip, "port": port, "socket_opts": opts}
        )
    return result


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/overview")(overview)
