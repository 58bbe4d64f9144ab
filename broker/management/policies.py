"""``/api/policies[/{vhost}[/{name}]]`` and ``/api/operator-policies[/{vhost}[/{name}]]`` (GET; PUT and
DELETE of one), as RabbitMQ 3.10's management plugin serves them.

Rules:

1. Lists show the policies of the vhosts the user has permissions in (every vhost for an
   administrator; a monitoring tag is not enough, as RabbitMQ's); a named vhost without access is
   401 ``User not authorised to access virtual host``.
2. One policy (GET, PUT and DELETE alike; measured on RabbitMQ 3.10.8 for every tag, with and
   without permissions): a policy needs the ``policymaker`` or ``administrator`` tag and, when its
   vhost exists, access to it, else 401 ``User not authorised to access object`` (a ``management``
   or ``monitoring`` user too, whether or not the policy or the vhost exists); an operator policy
   needs ``administrator`` (401 ``Not administrator user``). Then a missing vhost is 404 (a PUT's
   ``vhost_not_found``), then a missing policy.
3. PUT takes ``pattern`` and ``definition`` (missing: 400 ``[{key_missing,pattern}]``),
   ``priority`` (0) and ``apply-to`` (``all``); a bad one is 400 ``Validation failed\\n\\n<reason>\\n``
   (HTML-escaped for policies, not for operator policies, as RabbitMQ). 201 when created, 204 when
   replaced. The vhost re-applies its policies to every queue and exchange at once
   (``VHost.set_policy``) and the store keeps them across restarts; a pattern only PCRE reads is
   first matched against the vhost's names in a worker thread (``Operations.prepare_policy``), so the
   event loop is never held by it (RabbitMQ answers after matching every name, 42 s for 500 names
   that take the pattern to its match limit; ottermq within ``vhost.patterns.BUDGET``, 2 s).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from aiohttp import web
from ottermq.vhost.policy import Policy, PolicyError

from .common import (
    NotFound,
    bad_request,
    broker_of,
    json_body,
    may_use_vhost,
    not_authorised,
    require_administrator,
    selected_vhosts,
    user_of,
    vhost_not_found,
)

if TYPE_CHECKING:
    from ottermq.vhost.vhost import VHost

POLICY_TAGS = frozenset({"policymaker", "administrator"})


def _operator(request: web.Request) -> bool:
    return request.match_info.route.resource is not None and "/operator-policies" in (
        request.match_info.route.resource.canonical
    )


def _vhost(request: web.Request, operator: bool) -> VHost | None:
    """The vhost of a single policy, once the user may reach it (rule 2); None when it does not exist.

    Raises:
        HTTPUnauthorized: rule 2's 401s.
    """
    if operator:
        require_administrator(request)
    name = request.match_info["vhost"]
    vhost = broker_of(request).vhosts.get(name)
    may_reach = vhost is None or may_use_vhost(request, name)
    if POLICY_TAGS.isdisjoint(user_of(request).tags) or not may_reach:
        raise not_authorised("User not authorised to access object")
    return vhost


def _registry(vhost: VHost, operator: bool) -> dict[str, Policy]:
    return vhost.operator_policies if operator else vhost.policies


async def list_policies(request: web.Request) -> web.Response:
    operator = _operator(request)
    vhosts = selected_vhosts(request, owned_only=False)  # metadata: every worker has them
    items = [p.as_json() for v in vhosts for _, p in sorted(_registry(v, operator).items())]
    return web.json_response(items)


async def get_policy(request: web.Request) -> web.Response:
    operator = _operator(request)
    vhost = _vhost(request, operator)
    policy = _registry(vhost, operator).get(request.match_info["name"]) if vhost is not None else None
    if policy is None:
        raise NotFound()
    return web.json_response(policy.as_json())


async def put_policy(request: web.Request) -> web.Response:
    operator = _operator(request)
    vhost = _vhost(request, operator)
    if vhost is None:
        raise vhost_not_found()
    body = await json_body(request)
    for key in ("pattern", "definition"):
        if key not in body:
            raise bad_request(f"[{{key_missing,{key}}}]")
    name = request.match_info["name"]
    ops = broker_of(request).ops
    await ops.prepare_policy(vhost, body["pattern"], body.get("apply-to", "all"))
    try:
        created = ops.set_policy(
            vhost,
            name,
            body["pattern"],
            body["definition"],
            body.get("apply-to", "all"),
            body.get("priority", 0),
            operator,
        )
    except PolicyError as exc:
        reason = f"Validation failed\n\n{exc}\n"
        raise bad_request(reason if operator else html.escape(reason, quote=False)) from None
    return web.Response(status=201 if created else 204)


async def delete_policy(request: web.Request) -> web.Response:
    operator = _operator(request)
    vhost = _vhost(request, operator)
    if vhost is None or not broker_of(request).ops.delete_policy(vhost, request.match_info["name"], operator):
        raise NotFound()
    return web.Response(status=204)


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    for kind in ("policies", "operator-policies"):
        routes.get(f"{prefix}/{kind}")(list_policies)
        routes.get(f"{prefix}/{kind}/{{vhost}}")(list_policies)
        routes.get(f"{prefix}/{kind}/{{vhost}}/{{name}}")(get_policy)
        routes.put(f"{prefix}/{kind}/{{vhost}}/{{name}}")(put_policy)
        routes.delete(f"{prefix}/{kind}/{{vhost}}/{{name}}")(delete_policy)


def policy_fields(definition: dict[str, Any], policy: str | None, operator: str | None) -> dict[str, Any]:
    """The ``policy``, ``operator_policy`` and ``effective_policy_definition`` of a queue."""
    return {"policy": policy, "operator_policy": operator, "effective_policy_definition": dict(definition)}
