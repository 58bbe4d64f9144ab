"""``GET /api/overview``.

Versions: ``management_version`` and ``rabbitmq_version`` name the RabbitMQ release whose API this
emulates (3.10.8), so tools that compare them keep working; ``product_name``/``product_version``
are OtterMQ's own.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .. import VERSION
from .common import broker_of, node_name, user_of, visible_vhosts

RABBITMQ_API_VERSION = "3.10.8"
EXCHANGE_TYPES = ("direct", "fanout", "headers", "topic")


async def overview(request: web.Request) -> web.Response:
    broker = broker_of(request)
    node = node_name()
    vhosts = visible_vhosts(request)
    names = {vhost.name for vhost in vhosts}
    user = user_of(request)
    conns = [c for c in broker.connections if c.vhost is not None and c.vhost.name in names]
    if not {"administrator", "monitoring"} & set(user.tags):
        conns = [c for c in conns if c.username == user.name]
    queues = [q for vhost in vhosts for q in vhost.queues.values()]
    ready = sum(q.message_count for q in queues)
    unacked = sum(q.unacked for q in queues)
    body: dict[str, Any] = {
        "management_version": RABBITMQ_API_VERSION,
        "rabbitmq_version": RABBITMQ_API_VERSION,
        "product_name": "OtterMQ",
        "product_version": VERSION,
        "rates_mode": "none",
        "disable_stats": False,
        "enable_queue_totals": False,
        "exchange_types": [
            {"name": t, "description": f"AMQP {t} exchange, as per the AMQP specification", "enabled": True}
            for t in EXCHANGE_TYPES
        ],
        "message_stats": {},
        "queue_totals": {
            "messages": ready + unacked,
            "messages_ready": ready,
            "messages_unacknowledged": unacked,
        },
        "object_totals": {
            "connections": len(conns),
            "channels": sum(len(c.channels) for c in conns),
            "exchanges": sum(len(vhost.exchanges) + 1 for vhost in vhosts),  # + the default exchange
            "queues": len(queues),
            "consumers": sum(len(q.consumers) for q in queues),
        },
        "node": node,
        "cluster_name": node,
        "listeners": listeners(request, node),
    }
    return web.json_response(body)


def listeners(request: web.Request, node: str) -> list[dict[str, Any]]:
    """The AMQP and HTTP listeners, as RabbitMQ lists them."""
    broker = broker_of(request)
    result = []
    for protocol, addresses in (("amqp", broker.amqp_addresses()), ("http", broker.web_addresses())):
        for ip, port in addresses:
            result.append(
                {"node": node, "protocol": protocol, "ip_address": ip, "port": port, "socket_opts": {}}
            )
    return result


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/overview")(overview)
