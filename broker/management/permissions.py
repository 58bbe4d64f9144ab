"""Administrator writes: ``PUT/DELETE /api/users/{name}``, ``PUT/DELETE /api/vhosts/{vhost}``,
``GET /api/permissions``, ``/api/vhosts/{vhost}/permissions``, ``/api/users/{name}/permissions``,
``GET/PUT/DELETE /api/permissions/{vhost}/{user}``.

Rules (RabbitMQ 3.10): all need the administrator tag (401 ``Not administrator user``); PUT answers
201 when it created the object, 204 when it replaced one; DELETE 204, or 404 when missing;
permissions for a missing user or vhost are 400 ``vhost_or_user_not_found``; a new vhost gives its
creator full permissions there. Changes go
through ``broker.auth`` (``AuthDB``), which writes them to the store as ``definitions import`` does,
so they survive a restart.

A user PUT (RabbitMQ 3.10.8's answers, measured): ``tags`` is required (a comma-separated string or
a list; missing: 400 ``tags_not_present``), with ``password`` (hashed) or ``password_hash`` (+
``hashing_algorithm``; not base64: 400 ``["not_base64", <value>]``), never both (400
``both_password_and_password_hash_are_provided``). With neither, a new user gets a random password
and an existing one loses its password. ``"password_hash": ""`` makes a user without a password,
for certificate login (SASL EXTERNAL) only; ``"password": ""`` is stored (hashed) as RabbitMQ does,
but an empty password never logs in (``auth.AuthDB.login``). A non-string ``password`` is 400 here
(RabbitMQ answers 500).
"""

from __future__ import annotations

import base64
import binascii
import secrets
from typing import Any

from aiohttp import web
from ottermq.persistence.store import PermissionRecord, UserRecord

from ..node.auth import DEFAULT_HASHING_ALGORITHM, AuthError, hash_password
from .common import NotFound, bad_request, broker_of, json_body, require_administrator, user_of


def permission_json(record: PermissionRecord) -> dict[str, Any]:
    return {
        "user": record.user,
        "vhost": record.vhost,
        "configure": record.configure,
        "write": record.write,
        "read": record.read,
    }


def _tags(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [tag.strip() for tag in value.split(",") if tag.strip()]
    if isinstance(value, list) and all(isinstance(tag, str) for tag in value):
        return [tag.strip() for tag in value if tag.strip()]
    raise bad_request("tags must be a string or a list of strings")


async def put_user(request: web.Request) -> web.Response:
    require_administrator(request)
    auth = broker_of(request).auth
    name = request.match_info["name"]
    body = await json_body(request)
    if body.get("tags") is None:
        raise bad_request("tags_not_present")
    tags = _tags(body["tags"])
    existing = auth.users.get(name)
    algorithm = body.get("hashing_algorithm", DEFAULT_HASHING_ALGORITHM)
    if not isinstance(algorithm, str):
        raise bad_request("hashing_algorithm must be a string")
    if "password" in body and "password_hash" in body:
        raise bad_request("both_password_and_password_hash_are_provided")
    try:
        if "password" in body:
            password = body["password"]
            if not isinstance(password, str):
                raise bad_request("password must be a string")
            password_hash, algorithm = hash_password(password), DEFAULT_HASHING_ALGORITHM
        elif "password_hash" in body:
            password_hash = body["password_hash"]
            if not _is_base64(password_hash):
                raise bad_request(["not_base64", password_hash])
        elif existing is not None:  # RabbitMQ 3.10 clears the password: no password login
            password_hash, algorithm = "", DEFAULT_HASHING_ALGORITHM
        else:  # RabbitMQ 3.10 sets a random one
            password_hash, algorithm = hash_password(secrets.token_urlsafe(24)), DEFAULT_HASHING_ALGORITHM
        auth.put_user(UserRecord(name, password_hash, algorithm, tags))
    except AuthError as exc:
        raise bad_request(str(exc)) from None
    return web.Response(status=204 if existing is not None else 201)


def _is_base64(value: object) -> bool:
    """Whether ``value`` is a base64 string (``""`` is: a user without a password)."""
    if not isinstance(value, str):
        return False
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


async def delete_user(request: web.Request) -> web.Response:
    require_administrator(request)
    auth = broker_of(request).auth
    name = request.match_info["name"]
    if name not in auth.users:
        raise NotFound()
    broker_of(request).delete_user(name)
    return web.Response(status=204)


async def put_vhost(request: web.Request) -> web.Response:
    require_administrator(request)
    broker = broker_of(request)
    name = request.match_info["vhost"]
    body = await json_body(request)
    description = body.get("description", "")
    if not isinstance(description, str):
        raise bad_request("description must be a string")
    try:
        existed = broker.add_vhost(name, description, _tags(body.get("tags")))
    except AuthError as exc:
        raise bad_request(str(exc)) from None
    if not existed:  # RabbitMQ grants the creating user full permissions on a new vhost
        broker.auth.set_permissions(user_of(request).name, name, ".*", ".*", ".*")
    return web.Response(status=204 if existed else 201)


async def delete_vhost(request: web.Request) -> web.Response:
    require_administrator(request)
    broker = broker_of(request)
    name = request.match_info["vhost"]
    if name not in broker.auth.vhosts:
        raise NotFound()
    broker.delete_vhost(name)
    return web.Response(status=204)


async def list_permissions(request: web.Request) -> web.Response:
    require_administrator(request)
    perms = broker_of(request).auth.permissions
    return web.json_response([permission_json(perms[key]) for key in sorted(perms)])


def _record(request: web.Request) -> PermissionRecord:
    key = (request.match_info["user"], request.match_info["vhost"])
    record = broker_of(request).auth.permissions.get(key)
    if record is None:
        raise NotFound()
    return record


async def vhost_permissions(request: web.Request) -> web.Response:
    require_administrator(request)
    auth = broker_of(request).auth
    name = request.match_info["vhost"]
    if name not in auth.vhosts:
        raise NotFound()
    found = [permission_json(auth.permissions[key]) for key in sorted(auth.permissions) if key[1] == name]
    return web.json_response(found)


async def user_permissions(request: web.Request) -> web.Response:
    require_administrator(request)
    auth = broker_of(request).auth
    name = request.match_info["name"]
    if name not in auth.users:
        raise NotFound()
    found = [permission_json(auth.permissions[key]) for key in sorted(auth.permissions) if key[0] == name]
    return web.json_response(found)


async def get_permission(request: web.Request) -> web.Response:
    require_administrator(request)
    return web.json_response(permission_json(_record(request)))


async def put_permission(request: web.Request) -> web.Response:
    require_administrator(request)
    auth = broker_of(request).auth
    user, vhost = request.match_info["user"], request.match_info["vhost"]
    if user not in auth.users or vhost not in auth.vhosts:
        raise bad_request("vhost_or_user_not_found")
    body = await json_body(request)
    regexes = []
    for key in ("configure", "write", "read"):
        value = body.get(key)
        if not isinstance(value, str):
            raise bad_request(f"{key} not found")
        regexes.append(value)
    existed = (user, vhost) in auth.permissions
    try:
        auth.set_permissions(user, vhost, *regexes)
    except AuthError as exc:
        raise bad_request(str(exc)) from None
    return web.Response(status=204 if existed else 201)


async def delete_permission(request: web.Request) -> web.Response:
    require_administrator(request)
    record = _record(request)
    broker_of(request).auth.clear_permissions(record.user, record.vhost)
    return web.Response(status=204)


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.put(f"{prefix}/users/{{name}}")(put_user)
    routes.delete(f"{prefix}/users/{{name}}")(delete_user)
    routes.put(f"{prefix}/vhosts/{{vhost}}")(put_vhost)
    routes.delete(f"{prefix}/vhosts/{{vhost}}")(delete_vhost)
    routes.get(f"{prefix}/permissions")(list_permissions)
    routes.get(f"{prefix}/vhosts/{{vhost}}/permissions")(vhost_permissions)
    routes.get(f"{prefix}/users/{{name}}/permissions")(user_permissions)
    routes.get(f"{prefix}/permissions/{{vhost}}/{{user}}")(get_permission)
    routes.put(f"{prefix}/permissions/{{vhost}}/{{user}}")(put_permission)
    routes.delete(f"{prefix}/permissions/{{vhost}}/{{user}}")(delete_permission)
