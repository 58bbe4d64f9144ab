"""An OpenAPI 3 description of the management API, served when ``OTTERMQ_ENABLE_SWAGGER=true`` (an
ottermq extension; RabbitMQ has none) at ``OTTERMQ_SWAGGER_PATH`` (default ``/docs``): an HTML list
of the operations there, the JSON at ``<path>/openapi.json``.

Rules:

1. The description is generated from the application's router when asked, so it lists exactly the
   routes that exist; a summary is the handler's docstring's first line, else its name in words.
2. No login is needed to read it (it holds no broker data); every operation in it needs HTTP Basic
   auth, as the API does. Nothing is fetched from the internet (no CDN assets).
"""

from __future__ import annotations

import html
import re
from typing import Any

from aiohttp import web

from .. import VERSION
from .overview import RABBITMQ_API_VERSION
from .webui import is_ui_path

METHODS = ("GET", "PUT", "POST", "DELETE")
RESPONSES = {
    "GET": {"200": "the object or list", "404": "no such object"},
    "PUT": {"201": "created", "204": "updated", "400": "refused, with RabbitMQ's reason"},
    "POST": {"200": "the result", "201": "created", "204": "done", "400": "refused, with RabbitMQ's reason"},
    "DELETE": {"204": "deleted", "400": "refused (if-empty, if-unused)", "404": "no such object"},
}


def _summary(handler: Any) -> str:
    doc = (getattr(handler, "__doc__", None) or "").strip()
    if doc:
        return doc.splitlines()[0].strip()
    return str(getattr(handler, "__name__", "operation")).replace("_", " ").capitalize()


def describe(app: web.Application, skip: str) -> dict[str, Any]:
    """The OpenAPI document of ``app``'s routes (those under ``skip``, the docs themselves, left out)."""
    paths: dict[str, dict[str, Any]] = {}
    for route in app.router.routes():
        resource = route.resource
        if route.method not in METHODS or resource is None:
            continue
        path = re.sub(r"\{(\w+):[^}]*\}", r"{\1}", resource.canonical)
        if path == skip or path.startswith(skip + "/") or is_ui_path(path):
            continue  # the docs themselves and the web UI's files
        params = re.findall(r"\{(\w+)\}", path)
        operation = {
            "summary": _summary(route.handler),
            "operationId": route.method.lower() + re.sub(r"[^A-Za-z0-9]+", "_", path).rstrip("_"),
            "parameters": [
                {"name": p, "in": "path", "required": True, "schema": {"type": "string"},
                 "description": "the vhost, URL-encoded (%2F for /)" if p == "vhost" else p}
                for p in params
            ],  # fmt: skip
            "responses": {
                **{code: {"description": text} for code, text in RESPONSES[route.method].items()},
                "401": {"description": "no or bad credentials, or a missing user tag"},
            },
        }
        paths.setdefault(path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "OtterMQ management API",
            "version": VERSION,
            "description": f"RabbitMQ {RABBITMQ_API_VERSION}'s management HTTP API, as ottermq serves it.",
        },
        "components": {"securitySchemes": {"basic": {"type": "http", "scheme": "basic"}}},
        "security": [{"basic": []}],
        "paths": dict(sorted(paths.items())),
    }


def _page(doc: dict[str, Any], json_url: str) -> str:
    rows = []
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            rows.append(
                f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape(path)}</code></td>"
                f"<td>{html.escape(op['summary'])}</td></tr>"
            )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>OtterMQ management API</title></head>"
        f"<body><h1>OtterMQ management API {html.escape(doc['info']['version'])}</h1>"
        f"<p>{html.escape(doc['info']['description'])} OpenAPI 3: <a href='{json_url}'>openapi.json</a>."
        " Every operation takes HTTP Basic auth.</p>"
        f"<table><tr><th>method</th><th>path</th><th>summary</th></tr>{''.join(rows)}</table></body></html>"
    )


def add_docs(app: web.Application, docs_path: str) -> None:
    """Serve the description at ``docs_path`` (HTML) and ``docs_path/openapi.json``."""
    base = docs_path.rstrip("/") or "/docs"

    async def openapi_json(request: web.Request) -> web.Response:
        return web.json_response(describe(request.app, base))

    async def openapi_page(request: web.Request) -> web.Response:
        page = _page(describe(request.app, base), f"{base}/openapi.json")
        return web.Response(text=page, content_type="text/html")

    app.router.add_get(base, openapi_page)
    app.router.add_get(f"{base}/openapi.json", openapi_json)
