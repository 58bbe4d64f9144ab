"""``/api/vhost-limits[/{vhost}[/{name}]]`` and ``/api/user-limits[/{user}[/{name}]]``.

RabbitMQ 3.10.8's shapes and texts: lists of ``{"vhost"|"user", "value": {name: N}}``; ``PUT`` with
``{"value": N}`` and ``DELETE`` answer 204 (whether or not the limit was set); a bad name or value is
a 400 (``Validation failed\\n\\n...\\n`` for vhosts, the bare reason for users, see
``broker/node/limits.py``), a missing ``value`` ``[{key_missing,value}]``, an unknown vhost on ``PUT``
``404 {"error":"not_found","reason":"vhost_not_found"}``, an unknown user
``400 {"error":"bad_request","reason":["no_such_user",name]}``. Reading needs a management tag
(vhost limits of the vhosts the user sees; user limits: administrators); writing, administrators.
One difference: RabbitMQ answers 500 to ``DELETE`` of an unknown user's limit; ottermq 404.
"""

from __future__ import annotations

import json

from aiohttp import web

from ..node.limits import LimitError
from .common import (
    NotFound,
    bad_request,
    broker_of,
    json_body,
    require_administrator,
    vhost_not_found,
    visible_vhosts,
)


def _listing(kind: str, owners: dict[str, dict[str, int]], only: set[str] | None = None) -> web.Response:
    key = "vhost" if kind == "vhost" else "user"
    # a vhost whose limits were all cleared is listed with [] (RabbitMQ keeps an empty parameter)
    shown = [
        (owner, values)
        for owner, values in sorted(owners.items())
        if (values or kind == "vhost") and (only is None or owner in only)
    ]
    return web.json_response([{key: owner, "value": dict(v) if v else []} for owner, v in shown])


async def list_vhost_limits(request: web.Request) -> web.Response:
    """Vhost limits (max-connections, max-queues) of the vhosts the user sees."""
    seen = {v.name for v in visible_vhosts(request)}
    name = request.match_info.get("vhost")
    if name is not None:
        if name not in seen:
            raise NotFound()
        seen = {name}
    return _listing("vhost", broker_of(request).limits.by_kind["vhost"], seen)


async def list_user_limits(request: web.Request) -> web.Response:
    """User limits (max-connections, max-channels); administrators only."""
    require_administrator(request)
    broker = broker_of(request)
    name = request.match_info.get("user")
    if name is not None and name not in broker.auth.users:
        raise NotFound()
    return _listing("user", broker.limits.by_kind["user"], {name} if name is not None else None)


def _owner(request: web.Request, kind: str) -> str:
    broker = broker_of(request)
    if kind == "vhost":
        vhost = request.match_info["vhost"]
        if vhost not in broker.vhosts:
            raise vhost_not_found()
        return vhost
    user = request.match_info["user"]
    if user not in broker.auth.users:
        body = json.dumps({"error": "bad_request", "reason": ["no_such_user", user]}, separators=(",", ":"))
        raise web.HTTPBadRequest(text=body, content_type="application/json")
    return user


async def _put(request: web.Request, kind: str) -> web.Response:
    require_administrator(request)
    owner = _owner(request, kind)
    body = await json_body(request)
    if "value" not in body:
        raise bad_request("[{key_missing,value}]")
    name = request.match_info["name"]
    try:
        broker_of(request).ops.set_limit(kind, owner, name, body["value"])
    except LimitError as exc:
        raise bad_request(f"Validation failed\n\n{exc}\n" if kind == "vhost" else str(exc)) from None
    return web.Response(status=204)


async def _delete(request: web.Request, kind: str) -> web.Response:
    require_administrator(request)
    broker = broker_of(request)
    owner = request.match_info["vhost" if kind == "vhost" else "user"]
    if kind == "user" and owner not in broker.auth.users:
        raise NotFound()
    if kind == "vhost" and owner not in broker.vhosts:
        raise NotFound()
    broker.ops.clear_limit(kind, owner, request.match_info["name"])
    return web.Response(status=204)


async def put_vhost_limit(request: web.Request) -> web.Response:
    """Set a vhost limit: {"value": N} (a negative N: no limit)."""
    return await _put(request, "vhost")


async def delete_vhost_limit(request: web.Request) -> web.Response:
    """Clear a vhost limit."""
    return await _delete(request, "vhost")


async def put_user_limit(request: web.Request) -> web.Response:
    """Set a user limit: {"value": N} (a negative N: no limit)."""
    return await _put(request, "user")


async def delete_user_limit(request: web.Request) -> web.Response:
    """Clear a user limit."""
    return await _delete(request, "user")


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/vhost-limits")(list_vhost_limits)
    routes.get(f"{prefix}/vhost-limits/{{vhost}}")(list_vhost_limits)
    routes.put(f"{prefix}/vhost-limits/{{vhost}}/{{name}}")(put_vhost_limit)
    routes.delete(f"{prefix}/vhost-limits/{{vhost}}/{{name}}")(delete_vhost_limit)
    routes.get(f"{prefix}/user-limits")(list_user_limits)
    routes.get(f"{prefix}/user-limits/{{user}}")(list_user_limits)
    routes.put(f"{prefix}/user-limits/{{user}}/{{name}}")(put_user_limit)
    routes.delete(f"{prefix}/user-limits/{{user}}/{{name}}")(delete_user_limit)
