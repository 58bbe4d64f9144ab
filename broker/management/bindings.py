"""Bindings: ``GET /api/bindings[/{vhost}]``, ``GET/POST /api/bindings/{vhost}/e/{source}/q|e/{dest}``,
``GET/DELETE /api/bindings/{vhost}/e/{source}/q|e/{dest}/{props}``, ``GET
/api/queues/{vhost}/{name}/bindings`` and ``GET /api/exchanges/{vhost}/{name}/bindings/source|destination``.

Rules (RabbitMQ 3.10's ``rabbit_mgmt_wm_binding(s)``):
- every queue has an implicit binding from the default exchange (source ``""``, key = its name);
  it is listed but cannot be created or deleted (the default exchange is refused: 401).
- ``properties_key`` names a binding in a path: the routing key URL-quoted (``~`` for an empty
  key, ``~`` itself as ``%7E``), then, when there are arguments, ``~`` and a hash of them.
  RabbitMQ hashes the Erlang term (``erlang:phash2``); ottermq hashes the arguments' JSON, so with
  arguments the key differs between the brokers: use the one the API returns (the ``Location``).
- POST answers 201 with a relative ``Location``, ``<destination>/<properties_key>`` (the key
  URL-quoted once more: ``a b`` is ``a+b``, in the Location ``a%2Bb``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.parse
from typing import TYPE_CHECKING, Any

from aiohttp import hdrs, web
from ottermq.vhost.vhost import VHost

from ..node.operations import arguments_of
from .common import (
    NotFound,
    amqp_errors,
    bad_request,
    broker_of,
    json_body,
    json_value,
    selected_vhosts,
    user_of,
    vhost_or_404,
)

if TYPE_CHECKING:
    from ..node.auth import ResourceKind

KINDS: dict[str, ResourceKind] = {"q": "queue", "e": "exchange"}


def _quote(text: str) -> str:
    return urllib.parse.quote_plus(text, safe="").replace("~", "%7E")


def properties_key(routing_key: str, args: dict[str, Any]) -> str:
    """The binding's ``properties_key`` (see the module rules)."""
    if not args:
        return _quote(routing_key) if routing_key else "~"
    canonical = json.dumps(json_value(args), sort_keys=True, separators=(",", ":")).encode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()[:4]).decode().rstrip("=")
    return f"{_quote(routing_key)}~{_quote(digest)}"


def binding_json(
    vhost: str, source: str, kind: str, dest: str, key: str, args: dict[str, Any]
) -> dict[str, Any]:
    return {
        "source": source,
        "vhost": vhost,
        "destination": dest,
        "destination_type": kind,
        "routing_key": key,
        "arguments": json_value(args),
        "properties_key": properties_key(key, args),
    }


def vhost_bindings(vhost: VHost) -> list[dict[str, Any]]:
    """Every binding of ``vhost``: the default exchange's first, then by source exchange."""
    items = [binding_json(vhost.name, "", "queue", name, name, {}) for name in sorted(vhost.queues)]
    for name in sorted(vhost.exchanges):
        for key, (kind, dest), args in vhost.exchanges[name].bindings_list():
            items.append(binding_json(vhost.name, name, kind, dest, key, dict(args)))
    return items


async def list_bindings(request: web.Request) -> web.Response:
    return web.json_response([b for vhost in selected_vhosts(request) for b in vhost_bindings(vhost)])


def _between(request: web.Request) -> tuple[VHost, str, ResourceKind, str, list[dict[str, Any]]]:
    """``(vhost, source, destination kind, destination, bindings between them)``; 404 when the
    source or the destination is missing."""
    vhost = vhost_or_404(request)
    info = request.match_info
    source, kind, dest = info["source"], KINDS[info["kind"]], info["dest"]
    if source == "amq.default":
        source = ""
    if source and source not in vhost.exchanges:
        raise NotFound()
    if (vhost.queues if kind == "queue" else vhost.exchanges).get(dest) is None:
        raise NotFound()
    items = [
        b
        for b in vhost_bindings(vhost)
        if (b["source"], b["destination_type"], b["destination"]) == (source, kind, dest)
    ]
    return vhost, source, kind, dest, items


async def list_between(request: web.Request) -> web.Response:
    return web.json_response(_between(request)[4])


async def create_binding(request: web.Request) -> web.Response:
    vhost, source, kind, dest, _ = _between(request)
    body = await json_body(request)
    key = body.get("routing_key", "")
    if not isinstance(key, str):
        raise bad_request("routing_key must be a string")
    with amqp_errors():  # as queue.bind / exchange.bind
        args = arguments_of(body.get("arguments"))
        broker_of(request).ops.bind(user_of(request), vhost, source, (kind, dest), key, args)
    # relative, as RabbitMQ's: "<destination>/<properties_key, quoted once more>"
    last = request.raw_path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    location = f"{last}/{urllib.parse.quote(properties_key(key, args), safe='')}"
    return web.Response(status=201, headers={hdrs.LOCATION: location})


def _one(request: web.Request) -> tuple[VHost, str, ResourceKind, str, dict[str, Any]]:
    vhost, source, kind, dest, items = _between(request)
    raw = request.raw_path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    props = request.match_info["props"]
    for item in items:
        if item["properties_key"] in (raw, props):
            return vhost, source, kind, dest, item
    raise NotFound()


async def get_binding(request: web.Request) -> web.Response:
    return web.json_response(_one(request)[4])


async def delete_binding(request: web.Request) -> web.Response:
    vhost, source, kind, dest, item = _one(request)
    ops, user = broker_of(request).ops, user_of(request)
    with amqp_errors():
        if source == "":  # the implicit binding: permission, then refused
            ops.unbind(user, vhost, source, (kind, dest), item["routing_key"])
        for key, bound, args in vhost.exchanges[source].bindings_list():
            if (
                bound == (kind, dest)
                and key == item["routing_key"]
                and properties_key(key, dict(args)) == item["properties_key"]
            ):
                ops.unbind(user, vhost, source, (kind, dest), key, dict(args))
                break
    return web.Response(status=204)


async def queue_bindings(request: web.Request) -> web.Response:
    vhost = vhost_or_404(request)
    name = request.match_info["name"]
    if name not in vhost.queues:
        raise NotFound()
    items = vhost_bindings(vhost)
    found = [b for b in items if (b["destination_type"], b["destination"]) == ("queue", name)]
    return web.json_response(found)


async def exchange_bindings(request: web.Request) -> web.Response:
    vhost = vhost_or_404(request)
    name = request.match_info["name"]
    name = "" if name == "amq.default" else name
    if name and name not in vhost.exchanges:
        raise NotFound()
    items = vhost_bindings(vhost)
    if request.match_info["side"] == "source":
        found = [b for b in items if b["source"] == name]
    else:
        found = [b for b in items if (b["destination_type"], b["destination"]) == ("exchange", name)]
    return web.json_response(found)


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/bindings")(list_bindings)
    routes.get(f"{prefix}/bindings/{{vhost}}")(list_bindings)
    between = f"{prefix}/bindings/{{vhost}}/e/{{source}}/{{kind:[qe]}}/{{dest}}"
    routes.get(between)(list_between)
    routes.post(between)(create_binding)
    routes.get(between + "/{props}")(get_binding)
    routes.delete(between + "/{props}")(delete_binding)
    routes.get(f"{prefix}/queues/{{vhost}}/{{name}}/bindings")(queue_bindings)
    routes.get(f"{prefix}/exchanges/{{vhost}}/{{name}}/bindings/{{side:source|destination}}")(
        exchange_bindings
    )
