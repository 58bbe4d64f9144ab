"""The management app: routes under ``OTTERMQ_WEB_API_PATH``, Basic auth, RabbitMQ's JSON errors,
and the listener (``ManagementServer``) that ``broker/runtime.py`` binds and starts.

Request rules, in RabbitMQ's order (see ``common.py`` for the exact texts):

1. unknown path -> 404 JSON; known path, other method -> 405 with ``Allow`` (no auth needed);
2. no ``Authorization`` header -> 401, empty body; a ``Basic`` one that does not parse (not strict
   base64, no ``:``) -> 400, empty body (cowboy's answer); another scheme, bad credentials (or a
   loopback-only user from another address) -> 401 ``Login failed``; no management tag -> 401
   ``Not management user``. The credentials are the decoded octets split at the first ``:``,
   checked by the node's one login rule (``auth.AuthDB.login``: an empty password never logs in);
3. the handler: a missing object -> 404 JSON;
4. a successful GET is shaped by ``columns``, ``sort`` and ``sort_reverse`` as RabbitMQ's
   (``common.shape``); rabbitmqadmin sends them with every ``list``.

Before all of these, a write made by a browser for a page of another origin is refused with 403
(``cross_site``; ottermq goes beyond RabbitMQ, which accepts a text/plain POST from any page). Every
answer, errors included, carries ``Cache-Control: no-store`` (the UI's files keep their own) and
``X-Content-Type-Options: nosniff``.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import hdrs, web
from multidict import CIMultiDictProxy
from yarl import URL

from ..node.view import NodeView
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
    parameters,
    permissions,
    policies,
    queues,
    shovels,
    users,
    vhosts,
)
from .common import BROKER_KEY, MANAGEMENT_TAGS, PREFIX_KEY, REALM, SAMPLER_KEY, USER_KEY, json_error, shape
from .listener import HTTPListener
from .openapi import add_docs
from .rates import RateSampler
from .webui import add_ui, is_ui_path
from .workers import Forwarder

if TYPE_CHECKING:
    from ..node.node import Node

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
RESOURCES = (
    overview,
    vhosts,
    queues,
    exchanges,
    bindings,
    messages,
    connections,
    users,
    permissions,
    health,
    nodes,
    definitions,
    policies,
    archive,
    deadletters,
    limits,
    parameters,
    shovels,
)


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Sec-Fetch-Site values of a request the page's own origin made, or the user (a typed URL, a bookmark)
SAME_ORIGIN_FETCH = frozenset({"same-origin", "none"})


def _origin(url: str) -> tuple[str, str, int | None] | None:
    try:
        parsed = URL(url)
    except ValueError:
        return None
    if not parsed.scheme or not parsed.host:
        return None
    return parsed.scheme.lower(), parsed.host.lower().rstrip("."), parsed.port  # port: default filled in


def cross_site(method: str, headers: CIMultiDictProxy[str], scheme: str, host: str) -> bool:
    """Whether a request is a write that a browser made for a page of another origin (refused: 403).

    Rules, in order:

    1. ``GET``, ``HEAD`` and ``OPTIONS`` are never refused: they change nothing, and a page of another
       origin cannot read their answers (the API sends no CORS headers).
    2. ``Sec-Fetch-Site`` (set by the browser; a page's script cannot set or change it) decides when
       present: ``same-origin`` and ``none`` (typed or bookmarked) pass; ``same-site`` (another port or
       subdomain of the same site), ``cross-site`` and any other value are refused. Trusting it alone
       keeps the UI working behind a TLS-terminating proxy, where the page's ``Origin`` says https.
    3. Otherwise (browsers before 2023) ``Origin``: refused unless its scheme, host and port equal the
       request's own (``scheme`` and the ``Host`` header, default ports filled in); ``null`` (sandboxed
       frames, ``file:`` pages, cross-origin redirects) is refused.
    4. Neither header: no browser made it (curl, rabbitmqadmin, the ottermq CLI, Flower, Python clients):
       accepted, as RabbitMQ does.

    Args:
        method: the request method.
        headers: its headers.
        scheme: ``http`` or ``https``, as the listener sees it.
        host: its ``Host`` header.
    """
    if method.upper() in SAFE_METHODS:
        return False
    fetch_site = headers.get("Sec-Fetch-Site")
    if fetch_site is not None:
        return fetch_site.strip().lower() not in SAME_ORIGIN_FETCH
    origin = headers.get(hdrs.ORIGIN)
    if origin is None:
        return False
    own = _origin(f"{scheme}://{host}")
    return own is None or _origin(origin.strip()) != own


async def security_headers(_request: web.Request, response: web.StreamResponse) -> None:
    """``no-store`` and ``nosniff`` on every answer; a handler's own ``Cache-Control`` (the UI's) stays."""
    response.headers.setdefault(hdrs.CACHE_CONTROL, "no-store")
    response.headers.setdefault(hdrs.X_CONTENT_TYPE_OPTIONS, "nosniff")


def basic_credentials(header: str) -> tuple[bytes, bytes] | None:
    """``(user, password)`` octets of a ``Basic`` ``Authorization`` header (scheme in any case; the
    password is everything after the first ``:``), None for another scheme.

    Raises:
        ValueError: a ``Basic`` header whose token is not strict base64 or has no ``:``.
    """
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip().encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise ValueError("malformed Basic credentials") from None
    login, colon, password = decoded.partition(b":")
    if not colon:
        raise ValueError("Basic credentials without ':'")
    return login, password


@web.middleware
async def rabbit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Cross-site writes, then routing errors, then Basic auth, then the handler (see the module rules)."""
    if cross_site(request.method, request.headers, request.scheme, request.host):
        log.info(
            "HTTP %s %s refused: cross-site (Origin %r, Sec-Fetch-Site %r) from %s",
            request.method,
            request.path,
            request.headers.get(hdrs.ORIGIN),
            request.headers.get("Sec-Fetch-Site"),
            request.remote,
        )
        return json_error(403, "forbidden", "cross-site request refused")
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
        credentials = basic_credentials(header)
    except ValueError:
        return web.Response(status=400)
    if credentials is None:  # another scheme: no user, refused as a bad password is
        credentials = (b"", b"")
    broker = request.app[BROKER_KEY]
    login, password = credentials
    user = broker.logins.authenticate(login, password, request.remote or "", "http")
    if user is None:  # the same answer whether or not the user exists
        shown = login[:256].decode("utf-8", "backslashreplace")
        log.warning("HTTP login refused for user %r from %s", shown, request.remote)
        return json_error(401, "not_authorized", "Login failed", challenge=True)
    if MANAGEMENT_TAGS.isdisjoint(user.tags):
        return json_error(401, "not_authorised", "Not management user", challenge=True)
    request[USER_KEY] = user
    if broker.cluster.pool is not None:  # several workers: some answers are theirs (workers.py)
        forwarder = request.app.get(FORWARDER_KEY)
        if forwarder is None:
            forwarder = request.app[FORWARDER_KEY] = Forwarder(
                broker, broker.cluster.pool, request.app[PREFIX_KEY]
            )
        response = await forwarder.dispatch(request, handler)
    else:
        response = await handler(request)
    if request.method == "GET" and SHAPING_PARAMS & request.query.keys():
        return reshape(response, request)
    return response


FORWARDER_KEY: web.AppKey[Forwarder] = web.AppKey("forwarder", Forwarder)
DOCS_KEY: web.AppKey[str] = web.AppKey("docs", str)  # OTTERMQ_SWAGGER_PATH when enabled
UI_KEY: web.AppKey[bool] = web.AppKey("ui", bool)  # OTTERMQ_ENABLE_UI
METHOD_ORDER = ("HEAD", "GET", "PUT", "POST", "DELETE", "OPTIONS")  # RabbitMQ's (cowboy's) Allow order
SHAPING_PARAMS = frozenset({"columns", "sort", "sort_reverse", "page"})
# The lists RabbitMQ paginates (paths under the API prefix)
PAGINATED = frozenset(
    {"/queues", "/queues/{vhost}", "/exchanges", "/exchanges/{vhost}", "/vhosts", "/connections", "/channels"}
)


def reshape(response: web.StreamResponse, request: web.Request) -> web.StreamResponse:
    """Apply ``columns``/``sort``/``sort_reverse`` and pagination to a JSON answer (rule 4)."""
    if not isinstance(response, web.Response) or response.content_type != "application/json":
        return response
    if response.status != 200 or not isinstance(response.body, bytes):
        return response
    route = request.match_info.route.resource
    path = route.canonical[len(request.app[PREFIX_KEY]) :] if route is not None else ""
    return web.json_response(shape(json.loads(response.body), request.query, path in PAGINATED))


def make_app(broker: NodeView, api_path: str | None = None) -> web.Application:
    """The management application for ``broker``; routes under ``api_path`` (default: the
    ``OTTERMQ_WEB_API_PATH`` setting)."""
    prefix = (api_path if api_path is not None else broker.settings.web_api_path).rstrip("/")
    app = web.Application(middlewares=[rabbit_middleware])
    app.on_response_prepare.append(security_headers)
    app[BROKER_KEY] = broker
    app[PREFIX_KEY] = prefix
    sampler = app[SAMPLER_KEY] = RateSampler(broker, broker.settings.metrics_samples_interval)

    async def start_sampling(_app: web.Application) -> None:
        sampler.start()

    async def stop_sampling(_app: web.Application) -> None:
        await sampler.stop()

    async def close_forwarder(app: web.Application) -> None:
        forwarder = app.get(FORWARDER_KEY)
        if forwarder is not None:
            await forwarder.close()

    app.on_startup.append(start_sampling)
    app.on_cleanup.append(stop_sampling)
    app.on_cleanup.append(close_forwarder)
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
    """The management API's listener on ``OTTERMQ_WEB_HOST:OTTERMQ_WEB_PORT`` (0: no plain HTTP port,
    HTTPS only) and, with ``OTTERMQ_WEB_SSL``, ``OTTERMQ_WEB_SSL_PORT``; ``ephemeral``: a worker's
    internal listener on any free port instead."""

    def __init__(self, node: Node, tls_context: ssl.SSLContext | None, ephemeral: bool = False) -> None:
        broker = NodeView(node)  # what the API reads of the node
        settings = broker.settings
        tls = tls_context if settings.web_ssl else None
        super().__init__(
            broker,
            0 if ephemeral else settings.web_port or None,
            settings.web_api_path,
            "internal management API (worker 0 asks it)" if ephemeral else "management API",
            make_app,
            settings.web_ssl_port,
            tls,
        )
        self.ephemeral = ephemeral

    async def start(self) -> None:
        """Serve, and say where the web UI is (``OTTERMQ_ENABLE_UI``; not on a worker's internal
        listener, which nobody browses: the UI is worker 0's)."""
        await super().start()
        if self.broker.settings.enable_ui and not self.ephemeral:
            log.info("web UI on %s", self.urls("/"))
