"""Helpers shared by the management resource modules: JSON errors, field values, visibility.

RabbitMQ's texts (checked against RabbitMQ 3.10.8's management plugin):

- missing object or unknown path: ``404 {"error":"Object Not Found","reason":"Not Found"}``
- no credentials: ``401`` with an empty body; bad credentials: ``401
  {"error":"not_authorized","reason":"Login failed"}``; a user without a management tag: ``401
  {"error":"not_authorised","reason":"Not management user"}`` (British spelling, as RabbitMQ); all
  with ``WWW-Authenticate: Basic realm="RabbitMQ Management"``
- a method the path does not have: ``405`` with an empty body and ``Allow: HEAD, GET, OPTIONS``
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from ottermq.persistence.store import UserRecord
    from ottermq.vhost.vhost import VHost

    from ..server import Broker

BROKER_KEY: web.AppKey[Broker] = web.AppKey("broker")
USER_KEY = "ottermq.user"  # the authenticated UserRecord, set on each request by the auth middleware

REALM = 'Basic realm="RabbitMQ Management"'
MANAGEMENT_TAGS = frozenset({"administrator", "monitoring", "policymaker", "management"})
SEE_ALL_TAGS = frozenset({"administrator", "monitoring"})  # see every vhost's objects


def json_error(status: int, error: str, reason: str, *, challenge: bool = False) -> web.Response:
    """RabbitMQ's JSON error body ``{"error": ..., "reason": ...}`` with ``status``."""
    headers = {"WWW-Authenticate": REALM} if challenge else None
    return web.json_response({"error": error, "reason": reason}, status=status, headers=headers)


class NotFound(web.HTTPException):
    """A named object (vhost, queue, exchange) does not exist: RabbitMQ's JSON 404."""

    status_code = 404

    def __init__(self) -> None:
        super().__init__(
            text='{"error":"Object Not Found","reason":"Not Found"}', content_type="application/json"
        )


def node_name() -> str:
    """This node's name, RabbitMQ-style ``name@host``."""
    return f"ottermq@{socket.gethostname().split('.')[0]}"


def broker_of(request: web.Request) -> Broker:
    return request.app[BROKER_KEY]


def user_of(request: web.Request) -> UserRecord:
    user: UserRecord = request[USER_KEY]
    return user


def visible_vhosts(request: web.Request) -> list[VHost]:
    """The vhosts the user may see: all for administrator/monitoring, else those it has
    permissions in (as RabbitMQ's ``rabbit_mgmt_util:list_login_vhosts``)."""
    broker = broker_of(request)
    user = user_of(request)
    sees_all = not SEE_ALL_TAGS.isdisjoint(user.tags)
    return [
        vhost
        for name, vhost in sorted(broker.vhosts.items())
        if sees_all or (user.name, name) in broker.auth.permissions
    ]


def vhost_or_404(request: web.Request) -> VHost:
    """The vhost named by the ``vhost`` path segment (``%2F`` for ``/``) if the user sees it.

    Raises:
        NotFound: no such vhost, or not visible to the user.
    """
    name = request.match_info["vhost"]
    for vhost in visible_vhosts(request):
        if vhost.name == name:
            return vhost
    raise NotFound()


def selected_vhosts(request: web.Request) -> list[VHost]:
    """One vhost when the path names one (404 if missing), else every visible vhost."""
    if "vhost" in request.match_info:
        return [vhost_or_404(request)]
    return visible_vhosts(request)


def json_value(value: object) -> Any:
    """An AMQP field value as RabbitMQ's management API shows it (longstr bytes as text,
    timestamps as epoch seconds, decimals as numbers, tables and arrays recursively)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, Iterable):
        return [json_value(v) for v in value]
    return str(value)


def sort_by_name(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """RabbitMQ lists sort by vhost, then name."""
    return sorted(items, key=lambda item: (str(item.get("vhost", "")), str(item.get("name", ""))))
