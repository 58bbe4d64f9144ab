"""``GET /api/users`` (administrators only), ``/api/users/{name}``, ``/api/whoami``."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from ottermq.persistence.store import UserRecord

from .common import NotFound, broker_of, json_error, user_of


def user_json(user: UserRecord, limits: dict[str, int] | None = None) -> dict[str, Any]:
    """One user as RabbitMQ 3.10 shows it (tags as a list, its limits)."""
    return {
        "name": user.name,
        "password_hash": user.password_hash,
        "hashing_algorithm": user.hashing_algorithm,
        "tags": list(user.tags),
        "limits": dict(limits or {}),
    }


def _not_administrator(request: web.Request) -> web.Response | None:
    if "administrator" in user_of(request).tags:
        return None
    return json_error(401, "not_authorised", "Not administrator user", challenge=True)


async def list_users(request: web.Request) -> web.Response:
    refused = _not_administrator(request)
    if refused is not None:
        return refused
    users = broker_of(request).auth.users
    return web.json_response([user_json(users[name]) for name in sorted(users)])


async def get_user(request: web.Request) -> web.Response:
    refused = _not_administrator(request)
    if refused is not None:
        return refused
    user = broker_of(request).auth.users.get(request.match_info["name"])
    if user is None:
        raise NotFound()
    return web.json_response(user_json(user))


async def whoami(request: web.Request) -> web.Response:
    user = user_of(request)
    return web.json_response({"name": user.name, "tags": list(user.tags)})


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/users")(list_users)
    routes.get(f"{prefix}/users/{{name}}")(get_user)
    routes.get(f"{prefix}/whoami")(whoami)
