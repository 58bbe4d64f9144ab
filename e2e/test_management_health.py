"""Management API health checks, ``/api/nodes`` and list pagination (issue 14), as RabbitMQ 3.10's
management plugin answers them. Every test runs against RabbitMQ too (``AMQP_URL``/``MANAGEMENT_URL``)."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from typing import Any

import pytest

from .test_management_write import call, q


def test_aliveness_test_publishes_and_gets_in_the_vhost(broker):
    path = f"/api/aliveness-test/{q(broker.vhost)}"
    assert call(broker, path)[0::2] == (200, {"status": "ok"})
    assert call(broker, path)[0::2] == (200, {"status": "ok"})  # again: nothing left behind
    shown = call(broker, f"/api/queues/{q(broker.vhost)}/aliveness-test")[2]
    assert (shown["durable"], shown["auto_delete"], shown["exclusive"]) == (False, False, False)
    assert call(broker, "/api/aliveness-test/e2e-no-such-vhost")[0] == 404


@pytest.mark.parametrize("check", ["alarms", "local-alarms", "virtual-hosts"])
def test_checks_pass_on_a_healthy_node(broker, check):
    assert call(broker, f"/api/health/checks/{check}")[0::2] == (200, {"status": "ok"})


def test_health_checks_take_get_only(broker):
    status, headers, _ = call(broker, "/api/health/checks/alarms", "POST", {})
    assert status == 405
    assert headers["allow"] == "HEAD, GET, OPTIONS"


def test_port_listener(broker):
    amqp_port = broker.port
    web_port = urllib.parse.urlsplit(broker.management_url).port
    for port in (amqp_port, web_port):
        assert call(broker, f"/api/health/checks/port-listener/{port}")[0::2] == (
            200,
            {"status": "ok", "port": port},
        )
    status, _, body = call(broker, "/api/health/checks/port-listener/1")
    assert status == 503
    assert (body["status"], body["reason"], body["missing"]) == ("failed", "No active listener", 1)
    assert {amqp_port, web_port} <= set(body["ports"])
    status, _, body = call(broker, "/api/health/checks/port-listener/http")
    assert (status, body) == (400, {"error": "bad_request", "reason": "Invalid port"})


@pytest.mark.parametrize(
    ("asked", "protocol"),
    [("amqp", "amqp"), ("amqp091", "amqp"), ("AMQP", "amqp"), ("amqp0-9-1", "amqp"), ("http", "http")],
)
def test_protocol_listener(broker, asked, protocol):
    assert call(broker, f"/api/health/checks/protocol-listener/{asked}")[0::2] == (
        200,
        {"status": "ok", "protocol": protocol},
    )


def test_protocol_listener_missing(broker):
    status, _, body = call(broker, "/api/health/checks/protocol-listener/mqtt")
    assert status == 503
    assert (body["status"], body["reason"], body["missing"]) == ("failed", "No active listener", "mqtt")
    assert {"amqp", "http"} <= set(body["protocols"])


@pytest.mark.parametrize("check", ["node-is-quorum-critical", "node-is-mirror-sync-critical"])
def test_single_node_is_never_critical(broker, check):
    assert call(broker, f"/api/health/checks/{check}")[0::2] == (
        200,
        {"status": "ok", "reason": "single node cluster"},
    )


@pytest.mark.extension  # ottermq's check for a load balancer in front of an active/standby group
def test_a_node_on_its_own_is_the_active_one(broker):
    status, _, body = call(broker, "/api/health/checks/active")
    assert status == 200 and body["status"] == "ok" and body["role"] == "active"


def test_certificate_expiration_parameters(broker):
    base = "/api/health/checks/certificate-expiration"
    assert call(broker, f"{base}/1/months")[0::2] == (200, {"status": "ok"})
    assert call(broker, f"{base}/x/months")[0::2] == (
        400,
        {"error": "bad_request", "reason": "Invalid expiration value."},
    )
    assert call(broker, f"{base}/1/fortnights")[0::2] == (
        400,
        {
            "error": "bad_request",
            "reason": "Time unit not recognised. Supported units: days, weeks, months, years.",
        },
    )


def test_nodes_lists_this_node(broker):
    status, _, nodes = call(broker, "/api/nodes")
    assert status == 200 and len(nodes) == 1
    node = nodes[0]
    overview = call(broker, "/api/overview")[2]
    assert node["name"] == overview["node"]
    assert (node["type"], node["running"]) == ("disc", True)
    for field in (
        "mem_used",
        "mem_limit",
        "fd_used",
        "fd_total",
        "sockets_used",
        "sockets_total",
        "disk_free",
        "uptime",
        "processors",
    ):
        assert isinstance(node[field], int) and node[field] >= 0, field
    assert node["mem_used"] > 0 and node["mem_limit"] > 0
    assert node["mem_alarm"] is False and node["disk_free_alarm"] is False
    assert node["partitions"] == []
    assert "rabbitmq_management" in node["enabled_plugins"]
    assert {m["name"] for m in node["auth_mechanisms"] if m["enabled"]} >= {"PLAIN", "AMQPLAIN"}
    assert set(node["connection_created_details"]) == {"rate"}
    one = call(broker, f"/api/nodes/{q(node['name'])}")
    assert one[0] == 200 and one[2]["name"] == node["name"]


@pytest.mark.extension  # RabbitMQ 3.10 crashes with a 500 on an unknown node name
def test_an_unknown_node_is_not_found(broker):
    assert call(broker, "/api/nodes/nobody@nowhere")[0::2] == (
        404,
        {"error": "Object Not Found", "reason": "Not Found"},
    )


@pytest.fixture
def management_user(broker, unique):
    """A user tagged ``management`` only, with full permissions on the test vhost."""
    name = unique("mgmt-user")
    user = {"password": "pw", "tags": "management"}
    assert call(broker, f"/api/users/{q(name)}", "PUT", user)[0] in (201, 204)
    perms = {"configure": ".*", "write": ".*", "read": ".*"}
    assert call(broker, f"/api/permissions/{q(broker.vhost)}/{q(name)}", "PUT", perms)[0] in (201, 204)
    yield name
    call(broker, f"/api/users/{q(name)}", "DELETE")


def test_nodes_need_a_monitoring_user(broker, management_user):
    auth = (management_user, "pw")
    assert call(broker, "/api/nodes", auth=auth)[0::2] == (
        401,
        {"error": "not_authorised", "reason": "Not monitor user"},
    )
    assert call(broker, "/api/health/checks/alarms", auth=auth)[0::2] == (200, {"status": "ok"})
    aliveness = call(broker, f"/api/aliveness-test/{q(broker.vhost)}", auth=auth)
    assert aliveness[0::2] == (200, {"status": "ok"})


# -- pagination ----------------------------------------------------------------------------------


@pytest.fixture
def paged_queues(broker, channel, unique) -> list[str]:
    """Five queues sharing a unique marker; one spells it in capitals."""
    marker = f"pg{int(time.time() * 1000) % 10**8}"
    names = [unique(f"{marker}.{suffix}") for suffix in ("alpha", "beta", "gamma", "delta")]
    names.append(unique(f"{marker.upper()}.epsilon"))
    for name in names:
        channel.queue_declare(name)
    return [marker, *names]


def page(broker, query: str) -> tuple[int, Any]:
    status, _, body = call(broker, f"/api/queues/{q(broker.vhost)}?{query}")
    return status, body


def test_pages_filter_by_name_case_insensitively(broker, paged_queues):
    marker, *names = paged_queues
    status, body = page(broker, f"page=1&page_size=2&name={marker}")
    assert status == 200
    counts = [body[k] for k in ("filtered_count", "item_count", "page", "page_count", "page_size")]
    assert counts == [5, 2, 1, 3, 2]
    assert body["total_count"] >= 5
    everything = []
    for n in (1, 2, 3):
        items = page(broker, f"page={n}&page_size=2&name={marker}")[1]["items"]
        everything += [item["name"] for item in items]
    assert sorted(everything) == sorted(names)
    assert everything == sorted(everything)  # one order across pages


def test_page_with_regex_sort_and_columns(broker, paged_queues):
    marker, *names = paged_queues
    regex = urllib.parse.quote(f"{marker}\\.(alpha|beta)\\.", safe="")
    query = f"page=1&name={regex}&use_regex=true&sort=name&sort_reverse=true&columns=name"
    status, body = page(broker, query)
    assert status == 200
    wanted = sorted((n for n in names if ".alpha." in n or ".beta." in n), reverse=True)
    assert body["items"] == [{"name": n} for n in wanted]
    assert body["page_size"] == 100


def test_no_match_is_an_empty_first_page(broker):
    status, body = page(broker, "page=1&name=e2e-matches-nothing-at-all")
    assert status == 200
    assert {k: body[k] for k in ("filtered_count", "item_count", "items", "page", "page_count")} == {
        "filtered_count": 0,
        "item_count": 0,
        "items": [],
        "page": 1,
        "page_count": 0,
    }


@pytest.mark.parametrize(
    ("query", "error", "reason"),
    [
        (
            "page=0",
            "invalid_pagination_parameters",
            "Invalid pagination parameters: page number 0, page size undefined",
        ),
        (
            "page=1&page_size=501",
            "invalid_pagination_parameters",
            "Invalid pagination parameters: page number 1, page size 501",
        ),
        (
            "page=1&page_size=0",
            "invalid_pagination_parameters",
            "Invalid pagination parameters: page number 1, page size 0",
        ),
        ("page=x", "bad_request", "Pagination parameters are invalid"),
        ("page=1&page_size=x", "bad_request", "Pagination parameters are invalid"),
        ("page=1&name=(&use_regex=true", "bad_request", "Pagination parameters are invalid"),
    ],
)
def test_bad_pagination_parameters(broker, query, error, reason):
    assert page(broker, query) == (400, {"error": error, "reason": reason})


def test_page_out_of_range(broker, paged_queues):
    marker = paged_queues[0]
    assert page(broker, f"page=4&page_size=2&name={marker}") == (
        400,
        {"error": "page_out_of_range", "reason": "Page out of range, page: 4 page size: 2, len: 5"},
    )


@pytest.mark.parametrize("path", ["/api/exchanges", "/api/vhosts", "/api/connections", "/api/channels"])
def test_other_paginated_lists(broker, channel, path):
    status, _, body = call(broker, f"{path}?page=1&page_size=1")
    assert status == 200
    keys = {"filtered_count", "item_count", "items", "page", "page_count", "page_size", "total_count"}
    assert set(body) == keys


@pytest.mark.parametrize("path", ["/api/users", "/api/bindings", "/api/consumers", "/api/permissions"])
def test_lists_rabbitmq_does_not_paginate(broker, path):
    status, _, body = call(broker, f"{path}?page=1")
    assert status == 200 and isinstance(body, list)


# -- OpenAPI description (ottermq extension) -----------------------------------------------------


@pytest.mark.extension  # RabbitMQ serves no OpenAPI description
def test_openapi_description_lists_the_routes_that_exist(broker_process):
    b = broker_process({"OTTERMQ_ENABLE_SWAGGER": "true", "OTTERMQ_SWAGGER_PATH": "/docs"}).start()
    with urllib.request.urlopen(b.management_url + "/docs/openapi.json", timeout=10) as resp:  # no login
        doc = json.loads(resp.read())
    assert doc["openapi"].startswith("3.")
    assert doc["components"]["securitySchemes"]["basic"] == {"type": "http", "scheme": "basic"}
    paths = doc["paths"]
    assert set(paths["/api/queues/{vhost}/{name}"]) == {"get", "put", "delete"}
    assert "post" in paths["/api/definitions"] and "get" in paths["/api/health/checks/alarms"]
    side = paths["/api/exchanges/{vhost}/{name}/bindings/{side}"]["get"]
    assert [p["name"] for p in side["parameters"]] == ["vhost", "name", "side"]
    assert not any(path.startswith("/docs") for path in paths)
    ids = [op["operationId"] for ops in paths.values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    with urllib.request.urlopen(b.management_url + "/docs", timeout=10) as resp:
        page = resp.read().decode()
    assert "/api/overview" in page and "openapi.json" in page
    assert call(b, "/api/overview", auth=("guest", "wrong"))[0] == 401  # the API itself still needs a login


@pytest.mark.extension
def test_openapi_description_is_off_by_default(broker):
    assert call(broker, "/docs/openapi.json")[0] == 404
