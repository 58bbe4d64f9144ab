"""The management app: routes under ``OTTERMQ_WEB_API_PATH``, Basic auth, RabbitMQ's JSON errors,
and the listener (``ManagementServer``) that ``broker/server.py`` binds and starts.

Request rules, in RabbitMQ's order (see ``common.py`` for the exact texts):

1. unknown path -> 404 JSON; known path, other method -> 405 with ``Allow`` (no auth needed);
2. no ``Authorization`` header -> 401, empty body; bad credentials (or a loopback-only user from
   another address) -> 401 ``Login failed``; no management tag -> 401 ``Not management user``;
3. the handler: a missing object -> 404 JSON;
4. a successful GET is shaped by ``columns``, ``sort`` and ``sort_reverse`` as RabbitMQ's
   (``common.shape``); rabbitmqadmin sends them with every ``list``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import BasicAuth, hdrs, web

from . import (
    archive,
    bindings,
    connections,
    deadletters,
    definitions,
    exchanges,
    health,
    limits,
    messages,
    nodes,
    overview,
    permissions,
    policies,
    queues,
    users,
    vhosts,
)
from .common import BROKER_KEY, MANAGEMENT_TAGS, PREFIX_KEY, REALM, SAMPLER_KEY, USER_KEY, json_error, shape
from .listener import HTTPListener
from .openapi import add_docs
from .rates import RateSampler
from .webui import add_ui, is_ui_path

if TYPE_CHECKING:
    from ..server import Broker

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
RESOURCES = (
    overview, vhosts, queues, exchanges, bindings, messages, connections, users, permissions, health, nodes,
    definitions, policies, archive, deadletters, limits,
)  # fmt: skip


@web.middleware
async def rabbit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Routing errors, then Basic auth, then the handler (see the module rules)."""
    docs = request.app.get(DOCS_KEY)
    if docs is not None and (request.path == docs or request.path.startswith(docs + "/")):
        return await handler(request)  # the OpenAPI description needs no login (openapi.py)
    if request.app.get(UI_KEY) and is_ui_path(request.path) and request.match_info.http_exception is None:
        return await handler(request)  # the web UI's files; the page logs in to the API itself
    routing_error = request.match_info.http_exception
    if isinstance(routing_error, web.HTTPMethodNotAllowed):
        methods = set(routing_error.allowed_methods) | {"OPTIONS"}
        if "GET" in methods:
            methods.add("HEAD")
        allowed = ", ".join(m for m in METHOD_ORDER if m in methods)
        return web.Response(status=405, headers={hdrs.ALLOW: allowed})
    if routing_error is not None:
        return json_error(404, "Object Not Found", "Not Found")
    header = request.headers.get(hdrs.AUTHORIZATION)
    if header is None:
        return web.Response(status=401, headers={hdrs.WWW_AUTHENTICATE: REALM})
    try:
        credentials = BasicAuth.decode(header)
    except ValueError:
        return json_error(401, "not_authorized", "Login failed", challenge=True)
    broker = request.app[BROKER_KEY]
    user = broker.authenticate(credentials.login, credentials.password, request.remote or "", "http")
    if user is None:  # the same answer whether or not the user exists
        log.warning("HTTP login refused for user %r from %s", credentials.login, request.remote)
        return json_error(401, "not_authorized", "Login failed", challenge=True)
    if MANAGEMENT_TAGS.isdisjoint(user.tags):
        return json_error(401, "not_authorised", "Not management user", challenge=True)
    request[USER_KEY] = user
    response = await handler(request)
    if request.method == "GET" and SHAPING_PARAMS & request.query.keys():
        return reshape(response, request)
    return response


DOCS_KEY: web.AppKey[str] = web.AppKey("docs", str)  # OTTERMQ_SWAGGER_PATH when enabled
UI_KEY: web.AppKey[bool] = web.AppKey("ui", bool)  # OTTERMQ_ENABLE_UI
METHOD_ORDER = ("HEAD", "GET", "PUT", "POST", "DELETE", "OPTIONS")  # RabbitMQ's (cowboy's) Allow order
SHAPING_PARAMS = frozenset({"columns", "sort", "sort_reverse", "page"})
# The lists RabbitMQ paginates (paths under the API prefix)
PAGINATED = frozenset({"/queues", "/queues/{vhost}", "/exchanges", "/exchanges/{vhost}", "/vhosts",
                       "/connections", "/channels"})  # fmt: skip


def reshape(response: web.StreamResponse, request: web.Request) -> web.StreamResponse:
    """Apply ``columns``/``sort``/``sort_reverse`` and pagination to a JSON answer (rule 4)."""
    if not isinstance(response, web.Response) or response.content_type != "application/json":
        return response
    if response.status != 200 or not isinstance(response.body, bytes):
        return response
    route = request.match_info.route.resource
    path = route.canonical[len(request.app[PREFIX_KEY]) :] if route is not None else ""
    return web.json_response(shape(json.loads(response.body), request.query, path in PAGINATED))


def make_app(broker: Broker, api_path: str | None = None) -> web.Application:
    """The management application for ``broker``; routes under ``api_path`` (default: the
    ``OTTERMQ_WEB_API_PATH`` setting)."""
    prefix = (api_path if api_path is not None else broker.settings.web_api_path).rstrip("/")
    app = web.Application(middlewares=[rabbit_middleware])
    app[BROKER_KEY] = broker
    app[PREFIX_KEY] = prefix
    sampler = app[SAMPLER_KEY] = RateSampler(broker, broker.settings.metrics_samples_interval)

    async def start_sampling(_app: web.Application) -> None:
        sampler.start()

    async def stop_sampling(_app: web.Application) -> None:
        await sampler.stop()

    app.on_startup.append(start_sampling)
    app.on_cleanup.append(stop_sampling)
    deadletters.setup_moves(app, broker)
    routes = web.RouteTableDef()
    for resource in RESOURCES:
        resource.add_routes(routes, prefix)
    app.add_routes(routes)
    if broker.settings.enable_ui:
        app[UI_KEY] = True
        add_ui(app, prefix)
    if broker.settings.enable_swagger:
        docs = broker.settings.swagger_path.rstrip("/") or "/docs"
        app[DOCS_KEY] = docs
        add_docs(app, docs)
    return app


class ManagementServer(HTTPListener):
    """The management API's listener on ``OTTERMQ_WEB_HOST:OTTERMQ_WEB_PORT``."""

    def __init__(self, broker: Broker) -> None:
        settings = broker.settings
        tls = broker.web_tls_context if settings.web_ssl else None
        super().__init__(broker, settings.web_port, settings.web_api_path, "management API", make_app,
                         settings.web_ssl_port, tls)  # fmt: skip
