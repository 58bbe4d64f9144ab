"""``GET /api/vhosts``, ``/api/vhosts/{vhost}``."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from ottermq.vhost.vhost import VHost

from .common import broker_of, node_name, vhost_or_404, visible_vhosts


def vhost_json(vhost: VHost, description: str, tags: list[str], node: str) -> dict[str, Any]:
    """One vhost with RabbitMQ's field names and its message totals."""
    ready = sum(q.message_count for q in vhost.queues.values())
    unacked = sum(q.unacked for q in vhost.queues.values())
    return {
        "name": vhost.name,
        "description": description,
        "tags": list(tags),
        "metadata": {"description": description, "tags": list(tags)},
        "default_queue_type": "undefined",
        "tracing": False,
        "cluster_state": {node: "running"},
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
    }


def _json(request: web.Request, vhost: VHost) -> dict[str, Any]:
    record = broker_of(request).auth.vhosts.get(vhost.name)
    description = record.description if record is not None else ""
    tags = list(record.tags) if record is not None else []
    return vhost_json(vhost, description, tags, node_name())


async def list_vhosts(request: web.Request) -> web.Response:
    return web.json_response([_json(request, vhost) for vhost in visible_vhosts(request)])


async def get_vhost(request: web.Request) -> web.Response:
    return web.json_response(_json(request, vhost_or_404(request)))


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/vhosts")(list_vhosts)
    routes.get(f"{prefix}/vhosts/{{vhost}}")(get_vhost)
