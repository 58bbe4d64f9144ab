"""An OpenAPI 3 description of the management API, served when ``OTTERMQ_ENABLE_SWAGGER=true`` (an
ottermq extension; RabbitMQ has none) at ``OTTERMQ_SWAGGER_PATH`` (default ``/docs``): an HTML list
of the operations there, the JSON at ``<path>/openapi.json``.

Rules:

1. The description is generated from the application's router when asked, so it lists exactly the
   routes that exist; a summary is the handler's docstring's first line, else its name in words.
   What the router cannot say comes from the tables below, keyed by method and path under the API
   prefix: ``BODIES`` (the JSON body of every ``PUT`` and ``POST``; an empty body means ``{}``),
   ``QUERIES`` (query parameters) and ``HEADERS``. A path parameter with a pattern in the route
   (``{kind:[qe]}``) gets that pattern. ``tests/unit/broker/test_openapi.py`` fails when a write
   route has no body schema or a table names a route that does not exist.
2. No login is needed to read it (it holds no broker data); every operation in it needs HTTP Basic
   auth, as the API does. Nothing is fetched from the internet (no CDN assets).
3. The schemas say what the handlers accept, not more: RabbitMQ's loose forms too (a boolean as
   ``"true"``/``"false"``, tags as a comma-separated string, a count as a digit string), and extra
   keys are allowed (RabbitMQ ignores them).
"""

from __future__ import annotations

import html
import re
from typing import Any

from aiohttp import web
from ottermq.vhost.policy import APPLY_TO

from .. import VERSION
from .common import PREFIX_KEY
from .messages import ACKMODES
from .overview import RABBITMQ_API_VERSION
from .webui import is_ui_path

METHODS = ("GET", "PUT", "POST", "DELETE")
RESPONSES = {
    "GET": {"200": "the object or list", "404": "no such object"},
    "PUT": {"201": "created", "204": "updated", "400": "refused, with RabbitMQ's reason"},
    "POST": {"200": "the result", "201": "created", "204": "done", "400": "refused, with RabbitMQ's reason"},
    "DELETE": {"204": "deleted", "400": "refused (if-empty, if-unused)", "404": "no such object"},
}
CHECKS = ("/health/checks/", "/aliveness-test/")  # health checks: a failing check is a 503 (health.py)
FAILED_CHECK = {"503": {"description": 'the check failed: {"status": "failed", "reason": ...}'}}

# -- request bodies (rule 3) -------------------------------------------------------------------

Schema = dict[str, Any]


def _object(required: tuple[str, ...] = (), /, **properties: Schema) -> Schema:
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def _one_of(*values: str) -> Schema:
    return {"type": "string", "enum": list(values)}


STRING: Schema = {"type": "string"}
FLAG: Schema = {"anyOf": [{"type": "boolean"}, _one_of("true", "false")]}  # common.flag
ARGUMENTS: Schema = {
    "type": "object",
    "nullable": True,
    "additionalProperties": True,
    "description": "x-arguments, as an AMQP field table",
}
TAGS: Schema = {
    "anyOf": [STRING, {"type": "array", "items": STRING}],
    "nullable": True,
    "description": "a comma-separated string or a list",
}
COUNT: Schema = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[0-9]+$"}]}
LIMIT: Schema = _object(("value",), value={"type": "integer", "description": "negative: no limit"})
POLICY: Schema = _object(
    ("pattern", "definition"),
    pattern={"type": "string", "description": "a regular expression on queue or exchange names"},
    definition={"type": "object", "additionalProperties": True},
    priority={"type": "integer"},
    **{"apply-to": _one_of(*APPLY_TO)},
)
ITEMS: Schema = {"type": "array", "items": {"type": "object", "additionalProperties": True}}
SECTIONS = "users vhosts permissions topic_permissions queues exchanges bindings policies parameters"
DEFINITIONS: Schema = _object(
    **dict.fromkeys([*SECTIONS.split(), "global_parameters"], ITEMS),
    rabbit_version=STRING,
    rabbitmq_version=STRING,
)
MOVE: Schema = _object(
    ids={
        "type": "array",
        "items": {"type": "integer", "minimum": 0},
        "description": "give one of ids, filter, all; at most OTTERMQ_DLQ_MOVE_MAX_IDS (5,000 by default)",
    },
    filter=_object(reason={**STRING, "nullable": True}, source_queue={**STRING, "nullable": True}),
    all={"type": "boolean"},
    target={
        **_object(exchange=STRING, routing_key=STRING),
        "nullable": True,
        "description": "null: each message's original exchange and routing key",
    },
    keep_death_headers={"type": "boolean"},
    rate={"type": "number", "minimum": 0, "description": "messages per second; 0: no limit"},
)
BODIES: dict[tuple[str, str], Schema] = {
    ("PUT", "/queues/{vhost}/{name}"): _object(durable=FLAG, auto_delete=FLAG, arguments=ARGUMENTS),
    ("PUT", "/exchanges/{vhost}/{name}"): _object(
        type={
            "type": "string",
            "description": "direct, fanout, topic, headers, x-consistent-hash, x-delayed-message, "
            "x-message-deduplication",
        },
        durable=FLAG,
        auto_delete=FLAG,
        internal=FLAG,
        arguments=ARGUMENTS,
    ),
    ("POST", "/bindings/{vhost}/e/{source}/{kind}/{dest}"): _object(routing_key=STRING, arguments=ARGUMENTS),
    ("POST", "/exchanges/{vhost}/{name}/publish"): _object(
        ("properties", "routing_key", "payload", "payload_encoding"),
        properties={
            "type": "object",
            "additionalProperties": True,
            "description": "basic properties by RabbitMQ's names (delivery_mode, headers, ...)",
        },
        routing_key=STRING,
        payload=STRING,
        payload_encoding=_one_of("string", "base64"),
    ),
    ("POST", "/queues/{vhost}/{name}/get"): _object(
        ("count", "ackmode", "encoding"),
        count=COUNT,
        ackmode=_one_of(*ACKMODES),
        encoding=_one_of("auto", "base64"),
        truncate={**COUNT, "nullable": True},
    ),
    ("PUT", "/policies/{vhost}/{name}"): POLICY,
    ("PUT", "/operator-policies/{vhost}/{name}"): POLICY,
    ("PUT", "/users/{name}"): _object(
        password=STRING,
        password_hash={"type": "string", "description": "base64"},
        hashing_algorithm=STRING,
        tags=TAGS,
    ),
    ("PUT", "/vhosts/{vhost}"): _object(description=STRING, tags=TAGS),
    ("PUT", "/permissions/{vhost}/{user}"): _object(
        ("configure", "write", "read"), configure=STRING, write=STRING, read=STRING
    ),
    ("PUT", "/vhost-limits/{vhost}/{name}"): LIMIT,
    ("PUT", "/user-limits/{user}/{name}"): LIMIT,
    # a runtime parameter: a shovel's definition (docs/shovels.md), a vhost's limits, an operator policy
    ("PUT", "/parameters/{component}/{vhost}/{name}"): _object(
        ("value",), value={"description": "the component's value, e.g. a shovel's definition (an object)"}
    ),
    ("POST", "/definitions"): DEFINITIONS,
    ("POST", "/definitions/{vhost}"): DEFINITIONS,
    ("POST", "/dead-letters/{vhost}/{queue}/moves"): MOVE,
    ("PUT", "/dead-letter-moves/{id}"): _object(("state",), state=_one_of("paused", "running")),
}
# multipart uploads besides JSON (the web UI's import form)
UPLOADS = frozenset({("POST", "/definitions"), ("POST", "/definitions/{vhost}")})

# -- query parameters and headers ----------------------------------------------------------------


def _query(name: str, schema: Schema, description: str) -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


TRUE_FALSE: Schema = _one_of("true", "false")
SHAPING = [  # the lists RabbitMQ documents them for (app.py applies them to every GET: rule 4)
    _query("columns", STRING, "comma-separated (dotted) fields to keep"),
    _query("sort", STRING, "a (dotted) field to sort by"),
    _query("sort_reverse", TRUE_FALSE, "reverse the order"),
]
PAGING = [  # the lists RabbitMQ paginates
    _query("page", {"type": "integer", "minimum": 1}, "page number, from 1"),
    _query("page_size", {"type": "integer", "minimum": 1, "maximum": 500}, "default 100"),
    _query("name", STRING, "keep names containing this (case-insensitive), with page"),
    _query("use_regex", TRUE_FALSE, "name is a regular expression"),
]
PAGINATED = frozenset(
    {"/queues", "/queues/{vhost}", "/exchanges", "/exchanges/{vhost}", "/vhosts", "/connections", "/channels"}
)
QUERIES: dict[tuple[str, str], list[Schema]] = {
    **{("GET", path): PAGING + SHAPING for path in PAGINATED},
    ("DELETE", "/queues/{vhost}/{name}"): [
        _query("if-empty", TRUE_FALSE, "only if it holds no messages"),
        _query("if-unused", TRUE_FALSE, "only if it has no consumers"),
    ],
    ("DELETE", "/exchanges/{vhost}/{name}"): [_query("if-unused", TRUE_FALSE, "only if it has no bindings")],
    ("GET", "/definitions"): [_query("download", STRING, "a file name: answer as an attachment")],
    ("GET", "/definitions/{vhost}"): [_query("download", STRING, "a file name: answer as an attachment")],
    **{
        ("POST", path): [
            _query("report", TRUE_FALSE, "true: answer with the import report even when nothing was skipped")
        ]
        for path in ("/definitions", "/definitions/{vhost}")
    },
    ("GET", "/dead-letters/{vhost}/{queue}"): [
        _query("reason", STRING, "keep messages whose last death has this reason"),
        _query("source_queue", STRING, "keep messages whose last death was in this queue"),
        _query("offset", {"type": "integer", "minimum": 0}, "skip this many matching messages"),
        _query("limit", {"type": "integer", "minimum": 0, "maximum": 1000}, "page size, default 100"),
        _query("truncate", {"type": "integer", "minimum": 0}, "cut payloads to this many bytes"),
    ],
}
HEADERS: dict[tuple[str, str], list[Schema]] = {
    ("DELETE", "/connections/{name}"): [
        {
            "name": "X-Reason",
            "in": "header",
            "required": False,
            "schema": STRING,
            "description": "the close reason the client sees",
        },
    ],
}


def _summary(handler: Any) -> str:
    doc = (getattr(handler, "__doc__", None) or "").strip()
    if doc:
        return doc.splitlines()[0].strip()
    return str(getattr(handler, "__name__", "operation")).replace("_", " ").capitalize()


DEFAULT_SEGMENT = "[^{}/]+"  # aiohttp's pattern of a plain {name}


def _route_patterns(resource: web.AbstractResource) -> dict[str, str]:
    """The patterns of the path parameters that have their own (``{kind:[qe]}`` -> ``{"kind": "[qe]"}``)."""
    compiled = resource.get_info().get("pattern")
    if not isinstance(compiled, re.Pattern):
        return {}
    text, found = compiled.pattern, {}
    for group in re.finditer(r"\(\?P<(\w+)>", text):
        depth, i = 1, group.end()
        while depth:
            if text[i] == "\\":
                i += 2
                continue
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        body = text[group.end() : i - 1]
        if body != DEFAULT_SEGMENT:
            found[group[1]] = body
    return found


def _path_parameter(name: str, pattern: str | None) -> Schema:
    schema: Schema = {"type": "string"}
    if pattern is not None:
        schema["pattern"] = f"^(?:{pattern})$"
    description = "the vhost, URL-encoded (%2F for /)" if name == "vhost" else name
    return {"name": name, "in": "path", "required": True, "schema": schema, "description": description}


def _request_body(key: tuple[str, str]) -> Schema | None:
    schema = BODIES.get(key)
    if schema is None:
        return None
    content: Schema = {"application/json": {"schema": schema}}
    if key in UPLOADS:
        upload = _object(("file",), file={"type": "string", "format": "binary"})
        content["multipart/form-data"] = {"schema": upload}
    return {"required": bool(schema.get("required")), "content": content}


def describe(app: web.Application, skip: str) -> dict[str, Any]:
    """The OpenAPI document of ``app``'s routes (those under ``skip``, the docs themselves, left out)."""
    prefix = app.get(PREFIX_KEY, "")
    paths: dict[str, dict[str, Any]] = {}
    for route in app.router.routes():
        resource = route.resource
        if route.method not in METHODS or resource is None:
            continue
        canonical = resource.canonical
        path = re.sub(r"\{(\w+):[^}]*\}", r"{\1}", canonical)
        if path == skip or path.startswith(skip + "/") or is_ui_path(path):
            continue  # the docs themselves and the web UI's files
        patterns = _route_patterns(resource)
        key = (route.method, path[len(prefix) :] if path.startswith(prefix) else path)
        operation: dict[str, Any] = {
            "summary": _summary(route.handler),
            "operationId": route.method.lower() + re.sub(r"[^A-Za-z0-9]+", "_", path).rstrip("_"),
            "parameters": [
                *(_path_parameter(p, patterns.get(p)) for p in re.findall(r"\{(\w+)\}", path)),
                *QUERIES.get(key, []),
                *HEADERS.get(key, []),
            ],
            "responses": {
                **{code: {"description": text} for code, text in RESPONSES[route.method].items()},
                "401": {"description": "no or bad credentials, or a missing user tag"},
                **(FAILED_CHECK if key[1].startswith(CHECKS) else {}),
            },
        }
        body = _request_body(key)
        if body is not None:
            operation["requestBody"] = body
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
