"""``GET /api/queues``, ``/api/queues/{vhost}``, ``/api/queues/{vhost}/{name}``."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from ottermq.vhost.queue import Queue

from .common import NotFound, json_value, node_name, selected_vhosts, sort_by_name, vhost_or_404


def queue_json(queue: Queue, node: str) -> dict[str, Any]:
    """One queue with RabbitMQ's field names; counts are read live (RabbitMQ samples them)."""
    ready = queue.message_count
    return {
        "name": queue.name,
        "vhost": queue.vhost,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": queue.exclusive,
        "arguments": json_value(queue.args.raw or {}),
        "type": "classic",
        "node": node,
        "state": "running",
        "policy": None,
        "messages": ready + queue.unacked,
        "messages_ready": ready,
        "messages_unacknowledged": queue.unacked,
        "message_bytes_ready": queue.ready_bytes,
        "consumers": len(queue.consumers),
    }


async def list_queues(request: web.Request) -> web.Response:
    node = node_name()
    items = [queue_json(q, node) for vhost in selected_vhosts(request) for q in vhost.queues.values()]
    return web.json_response(sort_by_name(items))


async def get_queue(request: web.Request) -> web.Response:
    queue = vhost_or_404(request).queues.get(request.match_info["name"])
    if queue is None or queue.deleted:
        raise NotFound()
    return web.json_response(queue_json(queue, node_name()))


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/queues")(list_queues)
    routes.get(f"{prefix}/queues/{{vhost}}")(list_queues)
    routes.get(f"{prefix}/queues/{{vhost}}/{{name}}")(get_queue)
