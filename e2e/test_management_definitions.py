"""Definitions over the management API (issue 14): ``GET``/``POST /api/definitions[/{vhost}]`` export and
import the running broker's users, vhosts, permissions and topology, as RabbitMQ 3.10's do. Every test
here also passes against RabbitMQ (``AMQP_URL``/``MANAGEMENT_URL``); what it creates is removed."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from .test_management_write import call, q


def basic(broker) -> str:
    return "Basic " + base64.b64encode(f"{broker.user}:{broker.password}".encode()).decode()


def rabbit_hash(password: str) -> str:
    """RabbitMQ's ``rabbit_password_hashing_sha256`` hash: base64(salt + sha256(salt + password))."""
    salt = os.urandom(4)
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


@pytest.fixture
def names(broker) -> Iterator[dict[str, str]]:
    """Unique names for a vhost, a user, a queue and an exchange; the vhost and user go afterwards."""
    suffix = uuid.uuid4().hex[:8]
    made = {
        "vhost": f"e2e-defs-{suffix}",
        "user": f"e2e-defs-user-{suffix}",
        "queue": f"e2e.defs.q.{suffix}",
        "exchange": f"e2e.defs.x.{suffix}",
    }
    yield made
    call(broker, f"/api/vhosts/{q(made['vhost'])}", "DELETE")
    call(broker, f"/api/users/{q(made['user'])}", "DELETE")


def definitions(names: dict[str, str], password_hash: str) -> dict[str, Any]:
    vhost = names["vhost"]
    return {
        "users": [
            {
                "name": names["user"],
                "password_hash": password_hash,
                "hashing_algorithm": "rabbit_password_hashing_sha256",
                "tags": ["management"],
            }
        ],
        "vhosts": [{"name": vhost}],
        "permissions": [
            {"user": names["user"], "vhost": vhost, "configure": ".*", "write": ".*", "read": ".*"}
        ],
        "queues": [
            {
                "name": names["queue"],
                "vhost": vhost,
                "durable": True,
                "auto_delete": False,
                "arguments": {"x-max-length": 10},
            },
            {
                "name": names["queue"] + ".transient",
                "vhost": vhost,
                "durable": False,
                "auto_delete": False,
                "arguments": {},
            },
        ],
        "exchanges": [
            {
                "name": names["exchange"],
                "vhost": vhost,
                "type": "topic",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            }
        ],
        "bindings": [
            {
                "source": names["exchange"],
                "vhost": vhost,
                "destination": names["queue"],
                "destination_type": "queue",
                "routing_key": "orders.#",
                "arguments": {},
            }
        ],
    }


def test_import_applies_live_and_a_client_uses_it(broker, names):
    status, _, body = call(broker, "/api/definitions", "POST", definitions(names, rabbit_hash("s3cret")))
    assert (status, body) == (204, None)
    credentials = pika.PlainCredentials(names["user"], "s3cret")
    conn = pika.BlockingConnection(broker.params(virtual_host=names["vhost"], credentials=credentials))
    try:
        channel = conn.channel()
        channel.confirm_delivery()
        channel.basic_publish(names["exchange"], "orders.eu", b"routed", mandatory=True)
        method, _props, got = channel.basic_get(names["queue"], auto_ack=True)
        assert got == b"routed"
        ok = channel.queue_declare(names["queue"] + ".transient", passive=True)
        assert ok.method.message_count == 0
    finally:
        conn.close()
    vh = q(names["vhost"])
    assert call(broker, f"/api/queues/{vh}/{q(names['queue'])}")[2]["durable"] is True
    assert call(broker, f"/api/queues/{vh}/{q(names['queue'] + '.transient')}")[2]["durable"] is False
    assert call(broker, f"/api/queues/{vh}/{q(names['queue'])}")[2]["arguments"] == {"x-max-length": 10}


def test_export_shows_what_clients_declared(broker, names):
    vh = q(names["vhost"])
    assert call(broker, f"/api/vhosts/{vh}", "PUT", {})[0] == 201
    conn = pika.BlockingConnection(broker.params(virtual_host=names["vhost"]))
    try:
        channel = conn.channel()
        channel.exchange_declare(names["exchange"], "direct", durable=False)
        channel.queue_declare(names["queue"], durable=True, arguments={"x-message-ttl": 60000})
        channel.queue_bind(names["queue"], names["exchange"], "k1")
        channel.queue_declare("", exclusive=True)  # never exported
        status, _, exported = call(broker, "/api/definitions")
        assert status == 200
        vhost = names["vhost"]
        assert vhost in [v["name"] for v in exported["vhosts"]]
        queues = [x for x in exported["queues"] if x["vhost"] == vhost]
        assert queues == [
            {
                "name": names["queue"],
                "vhost": vhost,
                "durable": True,
                "auto_delete": False,
                "arguments": {"x-message-ttl": 60000},
            }
        ]
        exchanges = [
            (x["name"], x["type"], x["durable"]) for x in exported["exchanges"] if x["vhost"] == vhost
        ]
        assert exchanges == [(names["exchange"], "direct", False)]
        bindings = [b for b in exported["bindings"] if b["vhost"] == vhost]
        assert bindings == [
            {
                "source": names["exchange"],
                "vhost": vhost,
                "destination": names["queue"],
                "destination_type": "queue",
                "routing_key": "k1",
                "arguments": {},
            }
        ]
        assert broker.user in [u["name"] for u in exported["users"]]
        assert {"user": broker.user, "vhost": names["vhost"]}.items() <= next(
            p for p in exported["permissions"] if p["vhost"] == names["vhost"]
        ).items()
        assert exported["rabbit_version"].startswith("3.")
        status, _, scoped = call(broker, f"/api/definitions/{vh}")
        assert status == 200
        assert {"users", "vhosts", "permissions"}.isdisjoint(scoped)
        assert [x["name"] for x in scoped["queues"]] == [names["queue"]]
        assert "vhost" not in scoped["queues"][0] and "vhost" not in scoped["bindings"][0]
    finally:
        conn.close()


def test_import_into_one_vhost_ignores_vhost_fields(broker, names):
    vh = q(names["vhost"])
    assert call(broker, f"/api/vhosts/{vh}", "PUT", {})[0] == 201
    scoped = {
        "queues": [
            {
                "name": names["queue"],
                "vhost": "some-other-vhost",
                "durable": True,
                "auto_delete": False,
                "arguments": {},
            }
        ],
        "exchanges": [
            {
                "name": names["exchange"],
                "type": "fanout",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            }
        ],
        "bindings": [
            {
                "source": names["exchange"],
                "destination": names["queue"],
                "destination_type": "queue",
                "routing_key": "",
                "arguments": {},
            }
        ],
    }
    assert call(broker, f"/api/definitions/{vh}", "POST", scoped)[0] == 204
    shown = call(broker, f"/api/bindings/{vh}/e/{q(names['exchange'])}/q/{q(names['queue'])}")
    assert shown[0] == 200 and len(shown[2]) == 1


def test_existing_entities_are_left_unchanged(broker, names, channel, unique):
    name = unique("defs-existing")
    channel.queue_declare(name, arguments={"x-max-length": 3})
    again = {
        "queues": [
            {
                "name": name,
                "vhost": broker.vhost,
                "durable": True,
                "auto_delete": False,
                "arguments": {"x-max-length": 7},
            }
        ]
    }
    assert call(broker, "/api/definitions", "POST", again)[0] == 204
    shown = call(broker, f"/api/queues/{q(broker.vhost)}/{q(name)}")[2]
    assert (shown["durable"], shown["arguments"]) == (False, {"x-max-length": 3})


@pytest.mark.parametrize("raw", [b"{bad", b"[]"])
def test_unreadable_bodies_are_400(broker, raw):
    req = urllib.request.Request(broker.management_url + "/api/definitions", data=raw, method="POST")
    req.add_header("Authorization", basic(broker))
    req.add_header("Content-Type", "application/json")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 400
    assert json.loads(info.value.read()) == {"error": "bad_request", "reason": "failed_to_parse_json"}


def unknown_user_permission(names: dict[str, str]) -> dict[str, Any]:
    perm = {"user": "e2e-no-such-user", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
    return {"vhosts": [{"name": names["vhost"]}], "permissions": [perm]}


def test_a_permission_for_an_unknown_user_is_400(broker, names):
    status, _, body = call(broker, "/api/definitions", "POST", unknown_user_permission(names))
    assert status == 400 and body["error"] == "bad_request"


@pytest.mark.extension  # RabbitMQ 3.10 has created the vhost by the time it fails on the permission
def test_invalid_definitions_apply_nothing(broker, names):
    assert call(broker, "/api/definitions", "POST", unknown_user_permission(names))[0] == 400
    assert call(broker, f"/api/vhosts/{q(names['vhost'])}")[0] == 404


def test_download_names_the_file(broker):
    req = urllib.request.Request(broker.management_url + "/api/definitions?download=backup.json")
    req.add_header("Authorization", basic(broker))
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Disposition"] == "attachment; filename=backup.json"
        assert "users" in json.loads(resp.read())


def test_multipart_upload_as_the_web_ui_sends_it(broker, names):
    payload = json.dumps({"vhosts": [{"name": names["vhost"]}]}).encode()
    boundary = "e2e" + uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="defs.json"\r\n'
            "Content-Type: application/json\r\n\r\n"
        ).encode()
        + payload
        + f"\r\n--{boundary}--\r\n".encode()
    )
    req = urllib.request.Request(broker.management_url + "/api/definitions", data=body, method="POST")
    req.add_header("Authorization", basic(broker))
    req.add_header("Content-Type", f"multipart/form-data; boundary={boundary}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status in (200, 204)
    assert call(broker, f"/api/vhosts/{q(names['vhost'])}")[0] == 200


def test_definitions_need_an_administrator(broker, names):
    user = {"password": "pw", "tags": "monitoring"}
    assert call(broker, f"/api/users/{q(names['user'])}", "PUT", user)[0] == 201
    refused = (401, {"error": "not_authorised", "reason": "Not administrator user"})
    auth = (names["user"], "pw")
    assert call(broker, "/api/definitions", auth=auth)[0::2] == refused
    assert call(broker, "/api/definitions", "POST", {}, auth=auth)[0::2] == refused


def test_policies_travel_with_definitions(broker, names):
    vhost = names["vhost"]
    policy = {
        "vhost": vhost,
        "name": "e2e-defs-pol",
        "pattern": "^cap\\.",
        "apply-to": "queues",
        "definition": {"max-length": 3},
        "priority": 2,
    }
    value = {"pattern": "^cap\\.", "definition": {"max-length": 1}, "priority": 0, "apply-to": "all"}
    operator = {"value": value, "vhost": vhost, "component": "operator_policy", "name": "e2e-defs-op"}
    body = {"vhosts": [{"name": vhost}], "policies": [policy], "parameters": [operator]}
    assert call(broker, "/api/definitions", "POST", body)[0] == 204
    vh = q(vhost)
    assert call(broker, f"/api/policies/{vh}/e2e-defs-pol")[2] == policy
    assert call(broker, f"/api/operator-policies/{vh}/e2e-defs-op")[2]["definition"] == {"max-length": 1}
    exported = call(broker, "/api/definitions")[2]
    assert policy in exported["policies"]
    assert operator in exported["parameters"]
    scoped = call(broker, f"/api/definitions/{vh}")[2]
    assert scoped["policies"] == [policy] and scoped["parameters"] == [operator]


@pytest.mark.extension  # RabbitMQ 3.10.8 answers these with 500 (its parser crashes on them)
@pytest.mark.parametrize("body", [{"queues": 9223372036854775808}, {"exchanges": "x"}, {"queues": [1]}])
def test_a_section_of_the_wrong_shape_is_a_400_and_applies_nothing(broker, body):
    status, _, answer = call(broker, "/api/definitions", "POST", body)
    assert status == 400, answer
    assert answer["error"] == "bad_request"
