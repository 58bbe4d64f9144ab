"""A definitions round trip with RabbitMQ (issue 15): ``rabbitmqctl export_definitions`` -> ``ottermq
definitions import`` -> the policies in force on ottermq's queues -> ``ottermq definitions export`` ->
``rabbitmqctl import_definitions`` -> RabbitMQ applies the same policies.

It needs a local RabbitMQ with ``rabbitmqctl`` (``make conformance`` starts one and sets
``AMQP_URL``); without one it is skipped. Its objects live in a vhost of their own, which is deleted
from RabbitMQ afterwards; ottermq runs as a private process on free ports.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from .polling import poll_until
from .test_management_write import call, q
from .test_permissions import rabbit_hash

SECTIONS = ("queues", "exchanges", "bindings", "policies", "parameters", "permissions")


def rabbitmqctl(*args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        ["rabbitmqctl", *args], input=stdin, text=True, capture_output=True, timeout=120, check=False
    )
    if result.returncode != 0:
        pytest.fail(f"rabbitmqctl {' '.join(args)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def ottermq(*args: str, data_dir: Path | None = None) -> str:
    env = dict(os.environ, PYTHONSAFEPATH="1")
    if data_dir is not None:
        env["OTTERMQ_DATA_DIR"] = str(data_dir)
    result = subprocess.run(
        [sys.executable, "-m", "ottermq.broker", *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"ottermq {' '.join(args)} failed ({result.returncode}): {result.stderr[-3000:]}")
    return result.stdout


def seed(vhost: str, user: str) -> dict[str, Any]:
    """What the test creates on RabbitMQ: policies of every kind ottermq applies, an operator policy,
    queues, exchanges and bindings they act on, and a user with permissions on the vhost."""

    def policy(
        name: str, pattern: str, definition: dict[str, Any], apply_to: str = "queues", priority: int = 0
    ) -> dict[str, Any]:
        return {
            "vhost": vhost,
            "name": name,
            "pattern": pattern,
            "apply-to": apply_to,
            "definition": definition,
            "priority": priority,
        }

    def queue(name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "name": name,
            "vhost": vhost,
            "durable": True,
            "auto_delete": False,
            "arguments": arguments or {},
        }

    def exchange(name: str, kind: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "name": name,
            "vhost": vhost,
            "type": kind,
            "durable": True,
            "auto_delete": False,
            "internal": False,
            "arguments": arguments or {},
        }

    def binding(source: str, destination: str, key: str, kind: str = "queue") -> dict[str, Any]:
        return {
            "source": source,
            "vhost": vhost,
            "destination": destination,
            "destination_type": kind,
            "routing_key": key,
            "arguments": {},
        }

    return {
        "users": [
            {
                "name": user,
                "password_hash": rabbit_hash("rt-secret"),
                "hashing_algorithm": "rabbit_password_hashing_sha256",
                "tags": ["policymaker"],
                "limits": {"max-channels": 50, "max-connections": 10},
            }
        ],
        "vhosts": [{"name": vhost}],
        "permissions": [
            {"user": user, "vhost": vhost, "configure": "^rt\\.", "write": ".*", "read": "^rt\\."},
            {"user": "guest", "vhost": vhost, "configure": ".*", "write": ".*", "read": ".*"},
        ],
        "policies": [
            policy(
                "rt-ttl",
                "^rt\\.work$",
                {"message-ttl": 200, "dead-letter-exchange": "rt.dlx", "dead-letter-routing-key": "dead"},
                priority=5,
            ),
            policy("rt-catch-all", "^rt\\.", {"max-length": 1000, "queue-mode": "lazy"}),
            policy(
                "rt-limits",
                "^rt\\.capped$",
                {"max-length": 3, "overflow": "reject-publish", "expires": 3_600_000},
                "all",
                2,
            ),
            # a stream key: skipped for classic queues by both brokers, so rt-limits applies
            policy("rt-streams", "^rt\\.capped$", {"max-age": "1D", "max-length": 1}, priority=9),
            policy("rt-ae", "^rt\\.in$", {"alternate-exchange": "rt.unrouted"}, "exchanges"),
        ],
        "parameters": [
            {
                "vhost": vhost,
                "component": "operator_policy",
                "name": "rt-cap",
                "value": {
                    "pattern": "^rt\\.",
                    "definition": {"max-length": 500, "message-ttl": 3_600_000},
                    "priority": 1,
                    "apply-to": "queues",
                },
            },
            {
                "vhost": vhost,
                "component": "vhost-limits",
                "name": "limits",
                "value": {"max-connections": 20, "max-queues": 30},
            },
        ],
        "queues": [
            queue("rt.work"),
            queue("rt.dead"),
            queue("rt.capped", {"x-max-length": 10}),
            queue("rt.lost"),
        ],
        "exchanges": [
            exchange("rt.dlx", "direct"),
            exchange("rt.in", "topic"),
            exchange("rt.unrouted", "fanout"),
        ],
        "bindings": [
            binding("rt.dlx", "rt.dead", "dead"),
            binding("rt.in", "rt.work", "work.#"),
            binding("rt.unrouted", "rt.lost", ""),
        ],
    }


def of_vhost(definitions: dict[str, Any], vhost: str) -> dict[str, list[str]]:
    """``vhost``'s items of each section, each as canonical JSON, sorted (order is not meaningful).

    RabbitMQ 3.10's two exporters differ in two default-valued keys: ``rabbitmqctl`` adds a queue's
    ``"type": "classic"`` and leaves out an exchange's ``"internal": false``, ``GET /api/definitions``
    (and ottermq's, live) the other way round; both imports read either. Those two are dropped here.
    """

    def canonical(section: str, item: dict[str, Any]) -> str:
        item = dict(item)
        if section == "queues" and item.get("type") == "classic":
            del item["type"]
        if section == "exchanges" and item.get("internal") is False:
            del item["internal"]
        return json.dumps(item, sort_keys=True)

    return {
        section: sorted(
            canonical(section, item) for item in definitions.get(section, []) if item.get("vhost") == vhost
        )
        for section in SECTIONS
    }


def user_entry(definitions: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [u for u in definitions["users"] if u["name"] == name]
    return {k: found[k] for k in ("name", "password_hash", "hashing_algorithm", "tags", "limits")}


def export_rabbitmq(path: Path) -> dict[str, Any]:
    """Through stdout: Debian's rabbitmqctl runs as the rabbitmq user, who cannot write pytest's tmp."""
    path.write_text(rabbitmqctl("export_definitions", "-"))
    return json.loads(path.read_text())


@pytest.fixture
def rabbitmq() -> Iterator[tuple[str, str]]:
    """A vhost and a user made on the local RabbitMQ for this test, deleted afterwards."""
    if not os.environ.get("AMQP_URL") or shutil.which("rabbitmqctl") is None:
        pytest.skip("needs a local RabbitMQ and rabbitmqctl (make conformance)")
    token = uuid.uuid4().hex[:8]
    vhost, user = f"otter-rt-{token}", f"otter-rt-{token}"
    try:
        yield vhost, user
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True, timeout=120, check=False)
        subprocess.run(["rabbitmqctl", "delete_user", user], capture_output=True, timeout=120, check=False)


# the one poll helper at this file's pace (RabbitMQ applies imported policies asynchronously)
eventually = functools.partial(poll_until, timeout=30, interval=0.2)


def test_rabbitmq_ottermq_rabbitmq_round_trip_keeps_policies(rabbitmq, broker_process, tmp_path):
    vhost, user = rabbitmq
    rabbitmqctl("import_definitions", stdin=json.dumps(seed(vhost, user)))
    original = export_rabbitmq(tmp_path / "rabbitmq.json")
    expected = of_vhost(original, vhost)
    assert len(expected["policies"]) == 5 and len(expected["parameters"]) == 2  # operator policy, limits

    # into ottermq's store (broker stopped), then started: the policies are in force on its queues
    data_dir = tmp_path / "ottermq-data"
    ottermq("definitions", "import", str(tmp_path / "rabbitmq.json"), data_dir=data_dir)
    process = broker_process(data_dir=data_dir)
    broker = process.start()
    queue = call(broker, f"/api/queues/{q(vhost)}/rt.work")[2]
    assert (queue["policy"], queue["operator_policy"]) == ("rt-ttl", "rt-cap")
    assert queue["effective_policy_definition"] == {
        "message-ttl": 200,
        "dead-letter-exchange": "rt.dlx",
        "dead-letter-routing-key": "dead",
        "max-length": 500,
    }
    capped = call(broker, f"/api/queues/{q(vhost)}/rt.capped")[2]
    assert (capped["policy"], capped["operator_policy"]) == ("rt-limits", "rt-cap")
    assert capped["effective_policy_definition"] == {
        "max-length": 3,
        "overflow": "reject-publish",
        "expires": 3_600_000,
        "message-ttl": 3_600_000,
    }
    assert call(broker, f"/api/exchanges/{q(vhost)}/rt.in")[2]["policy"] == "rt-ae"
    assert call(broker, f"/api/vhost-limits/{q(vhost)}")[2] == [
        {"vhost": vhost, "value": {"max-connections": 20, "max-queues": 30}}
    ]
    assert call(broker, f"/api/user-limits/{q(user)}")[2] == [
        {"user": user, "value": {"max-channels": 50, "max-connections": 10}}
    ]
    params = pika.ConnectionParameters(
        broker.host, broker.port, vhost, pika.PlainCredentials(user, "rt-secret"), heartbeat=0
    )  # the imported user logs in with the password RabbitMQ hashed
    with pika.BlockingConnection(params) as connection:
        channel = connection.channel()
        channel.basic_publish("rt.in", "work.eu", b"expires")  # rt.work: TTL and DLX from rt-ttl
        channel.basic_publish("rt.in", "nowhere", b"lost")  # rt-ae's alternate exchange
        got = eventually(lambda: channel.basic_get("rt.dead", auto_ack=True)[2], what="a message in rt.dead")
        assert got == b"expires"
        got = eventually(lambda: channel.basic_get("rt.lost", auto_ack=True)[2], what="a message in rt.lost")
        assert got == b"lost"

    # out of ottermq (live, over its API) and back into RabbitMQ, in place of the original vhost
    exported_path = tmp_path / "ottermq.json"
    ottermq("definitions", "export", "--url", broker.management_url, str(exported_path))
    process.stop()
    exported = json.loads(exported_path.read_text())
    assert of_vhost(exported, vhost) == expected
    assert user_entry(exported, user) == user_entry(original, user)
    rabbitmqctl("delete_vhost", vhost)
    rabbitmqctl("import_definitions", stdin=exported_path.read_text())
    again = export_rabbitmq(tmp_path / "again.json")
    assert of_vhost(again, vhost) == expected
    assert user_entry(again, user) == user_entry(original, user)
    in_force = {
        "rt.work": "rt-ttl",
        "rt.capped": "rt-limits",
        "rt.dead": "rt-catch-all",
        "rt.lost": "rt-catch-all",
    }
    eventually(
        lambda: rabbitmq_policies(vhost) == in_force,
        what=f"RabbitMQ applies {in_force}",
        explain=lambda: f"it applies {rabbitmq_policies(vhost)}",
    )


def rabbitmq_policies(vhost: str) -> dict[str, str]:
    """queue name -> the policy RabbitMQ applies to it."""
    lines = rabbitmqctl("list_queues", "-q", "--no-table-headers", "-p", vhost, "name", "policy").splitlines()
    return dict(line.split("\t", 1) for line in lines if "\t" in line)
