"""``GET /api/exchanges``, ``/api/exchanges/{vhost}``, ``/api/exchanges/{vhost}/{name}``.

The default exchange is implicit in ``VHost`` (no ``Exchange`` object): it is listed under the name
``""`` and found in a path as ``amq.default``, as RabbitMQ does.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from ottermq.vhost.exchange import Exchange
from ottermq.vhost.vhost import VHost

from .common import NotFound, json_value, selected_vhosts, sort_by_name, vhost_or_404


def exchange_json(exchange: Exchange, vhost: str) -> dict[str, Any]:
    """One exchange with RabbitMQ's field names."""
    return {
        "name": exchange.name,
        "vhost": vhost,
        "type": exchange.type,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": json_value(exchange.arguments),
        "policy": None,
        "user_who_performed_action": "",
    }


def default_exchange_json(vhost: str) -> dict[str, Any]:
    """The default exchange of ``vhost``."""
    return {
        "name": "",
        "vhost": vhost,
        "type": "direct",
        "durable": True,
        "auto_delete": False,
        "internal": False,
        "arguments": {},
        "policy": None,
        "user_who_performed_action": "rmq-internal",
    }


def exchanges_json(vhost: VHost) -> list[dict[str, Any]]:
    """Every exchange of ``vhost``, the default one included."""
    others = [exchange_json(x, vhost.name) for x in vhost.exchanges.values()]
    return [default_exchange_json(vhost.name), *others]


async def list_exchanges(request: web.Request) -> web.Response:
    items = [item for vhost in selected_vhosts(request) for item in exchanges_json(vhost)]
    return web.json_response(sort_by_name(items))


async def get_exchange(request: web.Request) -> web.Response:
    vhost = vhost_or_404(request)
    name = request.match_info["name"]
    if name in ("", "amq.default"):
        return web.json_response(default_exchange_json(vhost.name))
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        raise NotFound()
    return web.json_response(exchange_json(exchange, vhost.name))


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/exchanges")(list_exchanges)
    routes.get(f"{prefix}/exchanges/{{vhost}}")(list_exchanges)
    routes.get(f"{prefix}/exchanges/{{vhost}}/{{name}}")(get_exchange)
