"""The management API's OpenAPI description (``broker/management/openapi.py``): generated from the
router, with a body schema for every write route, query parameters and Basic auth, and no table entry
for a route that does not exist."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from ottermq.broker.config import Settings
from ottermq.broker.management import app as management_app
from ottermq.broker.management.openapi import BODIES, HEADERS, PAGINATED, QUERIES, describe
from ottermq.broker.node.node import Node
from ottermq.broker.node.view import NodeView

PREFIX = "/api"


@pytest.fixture(scope="module")
def doc() -> Iterator[dict[str, Any]]:
    loop = asyncio.new_event_loop()
    try:
        broker = Node(Settings(_env_file=None, enable_swagger=True), loop)  # type: ignore[call-arg]
        yield describe(management_app.make_app(NodeView(broker)), "/docs")
    finally:
        loop.close()


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            yield method.upper(), path, op


def test_every_write_route_has_a_json_body_schema(doc: dict[str, Any]) -> None:
    missing = [f"{m} {p}" for m, p, op in operations(doc) if m in ("PUT", "POST") and "requestBody" not in op]
    assert missing == [], "add these routes to openapi.BODIES"
    for method, path, op in operations(doc):
        if "requestBody" in op:
            schema = op["requestBody"]["content"]["application/json"]["schema"]
            assert schema["type"] == "object" and schema["properties"], (method, path)


def test_tables_name_only_routes_that_exist(doc: dict[str, Any]) -> None:
    routes = {(m, p[len(PREFIX) :]) for m, p, _ in operations(doc)}
    for table in (BODIES, QUERIES, HEADERS):
        assert set(table) - routes == set()


def test_paginated_lists_are_the_apps(doc: dict[str, Any]) -> None:
    assert PAGINATED == management_app.PAGINATED
    names = {p["name"] for p in doc["paths"]["/api/queues/{vhost}"]["get"]["parameters"]}
    assert {"page", "page_size", "name", "use_regex", "columns", "sort", "sort_reverse"} <= names
    assert doc["paths"]["/api/users"]["get"]["parameters"] == []  # RabbitMQ does not paginate users


def test_path_parameters_match_the_template_and_keep_route_patterns(doc: dict[str, Any]) -> None:
    for method, path, op in operations(doc):
        declared = [p["name"] for p in op["parameters"] if p["in"] == "path"]
        assert declared == re.findall(r"\{(\w+)\}", path), (method, path)
    between = doc["paths"]["/api/bindings/{vhost}/e/{source}/{kind}/{dest}"]["post"]["parameters"]
    assert next(p for p in between if p["name"] == "kind")["schema"]["pattern"] == "^(?:[qe])$"


def test_security_is_http_basic_and_ids_are_unique(doc: dict[str, Any]) -> None:
    assert doc["components"]["securitySchemes"] == {"basic": {"type": "http", "scheme": "basic"}}
    assert doc["security"] == [{"basic": []}]
    ids = [op["operationId"] for _, _, op in operations(doc)]
    assert len(ids) == len(set(ids))


def test_queue_and_publish_bodies_say_what_the_handlers_read(doc: dict[str, Any]) -> None:
    queue = doc["paths"]["/api/queues/{vhost}/{name}"]["put"]["requestBody"]
    assert set(queue["content"]["application/json"]["schema"]["properties"]) == {
        "durable",
        "auto_delete",
        "arguments",
    }
    assert queue["required"] is False  # an empty body declares with the defaults
    publish = doc["paths"]["/api/exchanges/{vhost}/{name}/publish"]["post"]["requestBody"]
    schema = publish["content"]["application/json"]["schema"]
    assert publish["required"] is True
    assert set(schema["required"]) == {"properties", "routing_key", "payload", "payload_encoding"}
    upload = doc["paths"]["/api/definitions"]["post"]["requestBody"]["content"]
    assert set(upload) == {"application/json", "multipart/form-data"}
