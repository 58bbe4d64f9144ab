"""``GET /api/vhosts`` (the vhosts the user may see), ``/api/vhosts/{vhost}`` (administrators)."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from ottermq.vhost.vhost import VHost

from .. import node_name
from .common import broker_of, require_administrator, sampler_of, vhost_or_404, visible_vhosts
from .rates import MESSAGE_FIELDS, TOTALS, message_counts, totals, vhost_key, with_rates


def vhost_json(
    vhost: VHost,
    description: str,
    tags: list[str],
    node: str,
    counts: tuple[int, ...],
    rates: tuple[float, ...],
) -> dict[str, Any]:
    """One vhost with RabbitMQ's field names, its message counts (``counts`` in ``MESSAGE_FIELDS``
    order) and totals, with their ``rates`` (the message fields', then the totals')."""
    n = len(MESSAGE_FIELDS)
    return {
        "name": vhost.name,
        "description": description,
        "tags": list(tags),
        "metadata": {"description": description, "tags": list(tags)},
        "default_queue_type": "undefined",
        "tracing": False,
        "cluster_state": {node: "running"},
        "message_stats": with_rates(MESSAGE_FIELDS, counts, rates[:n]),
        **with_rates(TOTALS, totals(vhost.queues.values()), rates[n:]),
    }


def _json(request: web.Request, vhost: VHost) -> dict[str, Any]:
    record = broker_of(request).auth.vhosts.get(vhost.name)
    description = record.description if record is not None else ""
    tags = list(record.tags) if record is not None else []
    counts = message_counts(broker_of(request).connections.message_stats(vhost.name))
    rates = sampler_of(request).rates(vhost_key(vhost.name), len(MESSAGE_FIELDS) + len(TOTALS))
    return vhost_json(vhost, description, tags, node_name(), counts, rates)


async def list_vhosts(request: web.Request) -> web.Response:
    return web.json_response([_json(request, vhost) for vhost in visible_vhosts(request)])


async def get_vhost(request: web.Request) -> web.Response:
    """One vhost: administrators only, whether or not it exists (RabbitMQ 3.10.8's
    ``rabbit_mgmt_wm_vhost``: 401 ``Not administrator user`` for every other tag, with or without
    permissions there; the list shows others the vhosts they may see)."""
    require_administrator(request)
    return web.json_response(_json(request, vhost_or_404(request)))


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/vhosts")(list_vhosts)
    routes.get(f"{prefix}/vhosts/{{vhost}}")(get_vhost)
