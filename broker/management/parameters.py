"""``/api/parameters[/{component}[/{vhost}[/{name}]]]``: runtime parameters, as RabbitMQ 3.10's
management plugin serves them (``rabbit_mgmt_wm_parameters``, ``rabbit_mgmt_wm_parameter``).

Rules (measured on RabbitMQ 3.10.8 with ``rabbitmq_shovel``):

1. Who: an administrator, or a ``policymaker`` that has permissions in the vhost the path names
   (the lists: its vhosts' parameters); anyone else ``401 User not authorised to access object``.
2. The lists hold ``{"value", "vhost", "component", "name"}`` per parameter, by vhost, component
   and name: the components' parameters (``shovel``), and ``vhost-limits`` and ``operator_policy``,
   which ottermq keeps as limits and operator policies (``/api/vhost-limits``,
   ``/api/operator-policies``); ``/api/parameters/policy`` lists the policies the same way. A
   component nobody has set is an empty list; a named vhost that does not exist is 404.
3. ``PUT`` takes ``{"value": ...}`` (missing: 400 ``[{key_missing,value}]``; a body that is no JSON
   object: ``not_json``, or for a JSON string RabbitMQ's doubly-encoded text) into an existing vhost
   (else 404 ``vhost_not_found``): 201 when new, 204 when replaced, both with an empty body; a value
   refused is 400 with RabbitMQ's text (``Validation failed``... per problem, HTML-escaped: ``<``,
   ``>`` and ``&``). ``vhost-limits`` (``name`` ``limits``, the vhost's limits replaced) and
   ``operator_policy`` go to the limits and operator policies; ``policy`` is refused (``policies may
   not be set using this method``).
4. ``DELETE`` answers 204, or 404 when there is no such parameter; a shovel's parameter stops it.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

from aiohttp import web
from ottermq.vhost.policy import PolicyError

from ..node.definitions.export import vhost_limit_parameters
from ..node.limits import LimitError
from ..node.parameters import ParameterError, validation_failed
from .common import (
    NotFound,
    bad_request,
    broker_of,
    may_use_vhost,
    not_authorised,
    parse_json,
    user_of,
    vhost_not_found,
)
from .definitions import live_policies

VHOST_LIMITS = "vhost-limits"
OPERATOR_POLICY = "operator_policy"


def _allowed(request: web.Request, vhost: str | None) -> None:
    """Rule 1.

    Raises:
        HTTPUnauthorized: not allowed.
    """
    user = user_of(request)
    if "administrator" in user.tags:
        return
    if "policymaker" in user.tags and (vhost is None or may_use_vhost(request, vhost)):
        return
    raise not_authorised("User not authorised to access object")


def sorted_value(value: Any) -> Any:
    """A value as RabbitMQ shows it back: objects with their keys in Erlang's (byte) order."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: str(k).encode("utf-8", "surrogatepass"))
        return {k: sorted_value(value[k]) for k in keys}
    if isinstance(value, list):
        return [sorted_value(v) for v in value]
    return value


def item(vhost: str, component: str, name: str, value: Any) -> dict[str, Any]:
    """One parameter as RabbitMQ lists and exports it (rule 2)."""
    return {"value": sorted_value(value), "vhost": vhost, "component": component, "name": name}


def all_parameters(request: web.Request, policies: bool = False) -> list[dict[str, Any]]:
    """Every parameter rule 2 lists, before filtering (with ``policies``: the policies too)."""
    broker = broker_of(request)
    found = [item(v, c, n, value) for v, c, n, value in broker.ops.parameters.items()]
    found += vhost_limit_parameters(broker.limits.records())
    users, operators = live_policies([v for _, v in sorted(broker.vhosts.items())])
    found += operators
    if policies:
        found += [
            {
                "value": {k: p[k] for k in VALUE_KEYS},
                "vhost": p["vhost"],
                "component": "policy",
                "name": p["name"],
            }
            for p in users
        ]
    return sorted(found, key=lambda p: (p["vhost"], p["component"], p["name"]))


VALUE_KEYS = ("pattern", "definition", "priority", "apply-to")  # an (operator) policy's value


async def list_parameters(request: web.Request) -> web.Response:
    component = request.match_info.get("component")
    vhost = request.match_info.get("vhost")
    _allowed(request, vhost)
    if vhost is not None and vhost not in broker_of(request).vhosts:
        raise NotFound()
    user = user_of(request)
    items = [
        p
        for p in all_parameters(request, component == "policy")
        if (component is None or p["component"] == component)
        and (vhost is None or p["vhost"] == vhost)
        and ("administrator" in user.tags or may_use_vhost(request, p["vhost"]))
    ]
    return web.json_response(items)


def _one(request: web.Request) -> dict[str, Any] | None:
    info = request.match_info
    return next(
        (
            p
            for p in all_parameters(request, info["component"] == "policy")
            if (p["component"], p["vhost"], p["name"]) == (info["component"], info["vhost"], info["name"])
        ),
        None,
    )


async def get_parameter(request: web.Request) -> web.Response:
    _allowed(request, request.match_info["vhost"])
    found = _one(request)
    if found is None:
        raise NotFound()
    return web.json_response(found)


def _finite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


async def _value(request: web.Request) -> Any:
    """The body's ``value``, read as RabbitMQ's ``with_decode`` reads it (rule 3).

    Raises:
        HTTPBadRequest: no JSON object, or no ``value``.
    """
    raw = (await request.read()).strip()
    try:
        body = {} if raw in (b"", b"null", b"undefined") else json.loads(raw)
    except (ValueError, RecursionError):
        raise bad_request("not_json") from None
    if body:
        parse_json(raw)  # ottermq's bounds on any JSON body: nesting depth, lone surrogates (400)
    if isinstance(body, bool) or body is None:
        body = {}
    if isinstance(body, str):
        raise bad_request(
            "invalid payload: the request body JSON-decoded to a string. Is the input doubly-JSON-encoded?"
        )
    if not isinstance(body, dict):
        raise bad_request("not_json")
    if "value" not in body:
        raise bad_request("[{key_missing,value}]")
    return body["value"]


async def put_parameter(request: web.Request) -> web.Response:
    info = request.match_info
    component, vhost, name = info["component"], info["vhost"], info["name"]
    _allowed(request, vhost)
    broker = broker_of(request)
    if vhost not in broker.vhosts:
        raise vhost_not_found()
    value = await _value(request)
    if component == "policy":
        raise bad_request("policies may not be set using this method")
    try:
        if not _finite(value):
            raise ParameterError(validation_failed(["value holds a number that is not finite"]))
        if component == VHOST_LIMITS:
            created = _set_limits(request, vhost, value)
        elif component == OPERATOR_POLICY:
            created = await _set_operator_policy(request, vhost, name, value)
        else:
            created = broker.ops.set_parameter(user_of(request), vhost, component, name, value)
    except ParameterError as exc:
        raise bad_request(html.escape(str(exc), quote=False)) from None
    return web.Response(status=201 if created else 204)


def _set_limits(request: web.Request, vhost: str, value: Any) -> bool:
    """A ``vhost-limits`` value: the vhost's limits become these.

    Raises:
        ParameterError: not an object, or a limit refused.
    """
    ops, limits = broker_of(request).ops, broker_of(request).limits
    if not isinstance(value, dict):
        raise ParameterError(validation_failed([f"limits should be a JSON object, actually was {value!r}"]))
    existed = bool(limits.of("vhost", vhost))
    try:
        for name, limit in value.items():
            ops.set_limit("vhost", vhost, name, limit)
    except LimitError as exc:
        raise ParameterError(validation_failed([str(exc)])) from None
    for name in set(limits.of("vhost", vhost)) - set(value):
        ops.clear_limit("vhost", vhost, name)
    return not existed


async def _set_operator_policy(request: web.Request, vhost_name: str, name: str, value: Any) -> bool:
    """An ``operator_policy`` value: ``{pattern, definition, priority, apply-to}``.

    Raises:
        ParameterError: not an object, or the policy refused.
    """
    broker = broker_of(request)
    vhost = broker.vhosts[vhost_name]
    if not isinstance(value, dict):
        raise ParameterError(validation_failed([f"policy should be a JSON object, actually was {value!r}"]))
    apply_to = value.get("apply-to", "all")
    await broker.ops.prepare_policy(vhost, value.get("pattern"), apply_to)
    try:
        return broker.ops.set_policy(
            vhost,
            name,
            value.get("pattern"),
            value.get("definition"),
            apply_to,
            value.get("priority", 0),
            True,
        )
    except PolicyError as exc:
        raise ParameterError(validation_failed([str(exc)])) from None


async def delete_parameter(request: web.Request) -> web.Response:
    info = request.match_info
    component, vhost, name = info["component"], info["vhost"], info["name"]
    _allowed(request, vhost)
    broker = broker_of(request)
    if component == VHOST_LIMITS and name == "limits" and broker.limits.of("vhost", vhost):
        for limit in list(broker.limits.of("vhost", vhost)):
            broker.ops.clear_limit("vhost", vhost, limit)
    elif component == OPERATOR_POLICY and vhost in broker.vhosts:
        if not broker.ops.delete_policy(broker.vhosts[vhost], name, True):
            raise NotFound()
    elif not broker.ops.clear_parameter(vhost, component, name):
        raise NotFound()
    return web.Response(status=204)


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/parameters")(list_parameters)
    routes.get(f"{prefix}/parameters/{{component}}")(list_parameters)
    routes.get(f"{prefix}/parameters/{{component}}/{{vhost}}")(list_parameters)
    routes.get(f"{prefix}/parameters/{{component}}/{{vhost}}/{{name}}")(get_parameter)
    routes.put(f"{prefix}/parameters/{{component}}/{{vhost}}/{{name}}")(put_parameter)
    routes.delete(f"{prefix}/parameters/{{component}}/{{vhost}}/{{name}}")(delete_parameter)
