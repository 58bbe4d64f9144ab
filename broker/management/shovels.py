"""``/api/shovels``: the dynamic shovels' status, deletion and restart, as RabbitMQ 3.10's
``rabbitmq_shovel_management`` serves them.

Rules (measured on RabbitMQ 3.10.8):

1. Paths: ``GET /api/shovels``, ``GET /api/shovels/{vhost}``, ``GET`` and ``DELETE
   /api/shovels/vhost/{vhost}/{name}``, ``DELETE /api/shovels/vhost/{vhost}/{name}/restart``.
2. Who: an administrator or a ``monitoring`` user (else ``401 Not monitor user``), who sees the
   shovels of the vhosts it has permissions in.
3. The lists are ``Shovels.status`` entries (``engine.py`` rule 4). ``/api/shovels/{vhost}`` and
   ``/api/shovels/vhost/{vhost}/{name}`` list the vhost's shovels (RabbitMQ filters by vhost only);
   a vhost that does not exist, or a shovel that does not (the second path), is 404.
4. ``DELETE .../{name}`` clears the shovel's parameter, ``DELETE .../{name}/restart`` restarts it:
   204, or 404 without such a shovel.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .. import node_name
from .common import NotFound, broker_of, may_use_vhost, require_monitor


def _entries(request: web.Request, vhost: str | None) -> list[dict[str, Any]]:
    """Rule 2's and 3's entries."""
    broker = broker_of(request)
    node = node_name()
    return [
        e.as_json(node)
        for e in broker.shovels.status()
        if (vhost is None or e.vhost == vhost) and may_use_vhost(request, e.vhost)
    ]


def _vhost(request: web.Request) -> str | None:
    """The path's vhost, if it names one.

    Raises:
        NotFound: no such vhost.
    """
    vhost = request.match_info.get("vhost")
    if vhost is not None and vhost not in broker_of(request).vhosts:
        raise NotFound()
    return vhost


def _named(request: web.Request) -> tuple[str, str]:
    """The shovel the path names, among those the user sees (rules 2, 3).

    Raises:
        NotFound: no such vhost, or no such shovel the user sees.
    """
    vhost, name = str(_vhost(request)), request.match_info["name"]
    found = broker_of(request).shovels.find(vhost, name)
    if found is None or not may_use_vhost(request, vhost):
        raise NotFound()
    return vhost, name


async def list_shovels(request: web.Request) -> web.Response:
    require_monitor(request)
    vhost = _vhost(request)
    if "name" in request.match_info:
        _named(request)
    return web.json_response(_entries(request, vhost))


async def delete_shovel(request: web.Request) -> web.Response:
    require_monitor(request)
    vhost, name = _named(request)
    broker_of(request).ops.clear_parameter(vhost, "shovel", name)
    return web.Response(status=204)


async def restart_shovel(request: web.Request) -> web.Response:
    require_monitor(request)
    vhost, name = _named(request)
    broker_of(request).shovels.restart(vhost, name)
    return web.Response(status=204)


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/shovels")(list_shovels)
    routes.get(f"{prefix}/shovels/{{vhost}}")(list_shovels)
    routes.get(f"{prefix}/shovels/vhost/{{vhost}}/{{name}}")(list_shovels)
    routes.delete(f"{prefix}/shovels/vhost/{{vhost}}/{{name}}")(delete_shovel)
    routes.delete(f"{prefix}/shovels/vhost/{{vhost}}/{{name}}/restart")(restart_shovel)
