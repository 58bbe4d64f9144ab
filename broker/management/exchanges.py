"""``GET /api/exchanges``, ``/api/exchanges/{vhost}``, ``/api/exchanges/{vhost}/{name}``.

``PUT``/``DELETE /api/exchanges/{vhost}/{name}`` declare and delete as ``exchange.declare``/``delete``
do (201 created, 204 existed or deleted, 400 with the channel's reason, ``if-unused`` honoured,
404 for a missing exchange).

The default exchange is implicit in ``VHost`` (no ``Exchange`` object): it is listed under the name
``""`` and found in a path as ``amq.default``, as RabbitMQ does.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from ottermq.vhost.dedup import DedupCache
from ottermq.vhost.exchange import Exchange
from ottermq.vhost.vhost import VHost

from ..node.operations import arguments_of
from .common import (
    NotFound,
    amqp_errors,
    bad_request,
    broker_of,
    flag,
    json_body,
    json_value,
    selected_vhosts,
    sort_by_name,
    user_of,
    vhost_or_404,
)


def exchange_json(exchange: Exchange, vhost: str, delayer: Any = None) -> dict[str, Any]:
    """One exchange with RabbitMQ's field names; a delayed exchange adds the plugin's
    ``messages_delayed``, a deduplicating one ottermq's ``deduplication`` (settings, entries, duplicates)."""
    body = {
        "name": exchange.name,
        "vhost": vhost,
        "type": exchange.type,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": json_value(exchange.arguments),
        "policy": exchange.policy,
        "user_who_performed_action": "",
    }
    if exchange.DELAYED:
        body["messages_delayed"] = delayer.pending(vhost, exchange.name) if delayer is not None else 0
    if exchange.dedup is not None:
        body["deduplication"] = dedup_json(exchange.dedup)
    return body


def dedup_json(cache: DedupCache) -> dict[str, Any]:
    """A deduplication cache as the API shows it (ottermq extension)."""
    settings = cache.settings
    return {
        "cache_size": settings.size,
        "cache_ttl": settings.ttl,
        "header": settings.header,
        "persistent": settings.persistent,
        "entries": len(cache),
        "duplicates": cache.duplicates,
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
    others = [exchange_json(x, vhost.name, vhost.delayer) for x in vhost.exchanges.values()]
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
    return web.json_response(exchange_json(exchange, vhost.name, vhost.delayer))


async def put_exchange(request: web.Request) -> web.Response:
    vhost = vhost_or_404(request)
    name = request.match_info["name"]
    name = "" if name == "amq.default" else name
    body = await json_body(request)
    type_ = body.get("type", "direct")  # RabbitMQ 3.10 declares a direct exchange without one
    if not isinstance(type_, str):
        raise bad_request("type must be a string")
    durable = flag(body, "durable", True)
    auto_delete = flag(body, "auto_delete", False)
    internal = flag(body, "internal", False)
    with amqp_errors():
        args = arguments_of(body.get("arguments"))
        declared = broker_of(request).ops.declare_exchange(
            user_of(request),
            vhost,
            name,
            type_,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=args,
        )
    return web.Response(status=201 if declared.created else 204)


async def delete_exchange(request: web.Request) -> web.Response:
    vhost = vhost_or_404(request)
    name = request.match_info["name"]
    name = "" if name == "amq.default" else name
    if name and name not in vhost.exchanges:
        raise NotFound()
    if_unused = request.query.get("if-unused", "false").lower() == "true"
    with amqp_errors():
        broker_of(request).ops.delete_exchange(user_of(request), vhost, name, if_unused)
    return web.Response(status=204)


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/exchanges")(list_exchanges)
    routes.get(f"{prefix}/exchanges/{{vhost}}")(list_exchanges)
    routes.get(f"{prefix}/exchanges/{{vhost}}/{{name}}")(get_exchange)
    routes.put(f"{prefix}/exchanges/{{vhost}}/{{name}}")(put_exchange)
    routes.delete(f"{prefix}/exchanges/{{vhost}}/{{name}}")(delete_exchange)
