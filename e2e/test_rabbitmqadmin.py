"""RabbitMQ's own ``rabbitmqadmin`` (3.10) works unchanged against the broker under test.

The script is the one RabbitMQ's management plugin serves at ``/cli/rabbitmqadmin``, read from Debian's
rabbitmq-server package (``make clients`` installs it; the server need not run), and run with ``python3``
against the management port of the broker under test: ottermq's own, or RabbitMQ's with ``AMQP_URL``
set. Nothing here is an ottermq extension.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from .test_definitions_everything import FIXTURE, V1, kept_clean

STATS_TIMEOUT = 20  # RabbitMQ lists connections from stats it emits every 5 s


PACKAGED = "/usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbitmq_management-*/priv/www/cli/rabbitmqadmin"


@pytest.fixture(scope="session")
def rabbitmqadmin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RabbitMQ's ``rabbitmqadmin`` script: ``RABBITMQADMIN``, else the copy inside Debian's rabbitmq-server
    package (``make clients`` installs it), else downloaded from a management plugin at ``MANAGEMENT_URL``."""
    named = os.environ.get("RABBITMQADMIN")
    if named:
        return Path(named)
    packaged = sorted(glob.glob(PACKAGED))
    if packaged:
        return Path(packaged[-1])
    base = os.environ.get("MANAGEMENT_URL", "http://127.0.0.1:15672").rstrip("/")
    url = f"{base}/cli/rabbitmqadmin"
    req = urllib.request.Request(url)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            script = resp.read()
    except (urllib.error.URLError, OSError) as exc:
        pytest.fail(
            f"no rabbitmqadmin: RABBITMQADMIN unset, none at {PACKAGED} (bash .ci/install-rabbitmqadmin.sh"
            f" installs Debian's rabbitmq-server, which holds it) and cannot download {url} ({exc})"
        )
    path = tmp_path_factory.mktemp("rabbitmqadmin") / "rabbitmqadmin"
    path.write_bytes(script)
    return path


@pytest.fixture
def admin(broker: Any, rabbitmqadmin: Path) -> Callable[..., str]:
    """``admin("list", "queues") -> stdout`` of rabbitmqadmin against the broker under test (rc 0)."""
    api = urllib.parse.urlsplit(broker.management_url)

    def _admin(*args: str) -> str:
        command = [
            sys.executable,
            str(rabbitmqadmin),
            "-H",
            api.hostname or "127.0.0.1",
            "-P",
            str(api.port),
            "-u",
            broker.user,
            "-p",
            broker.password,
            "-V",
            broker.vhost,
            *args,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, (args, done.returncode, done.stdout, done.stderr)
        return done.stdout

    return _admin


def raw(admin: Callable[..., str], *args: str) -> Any:
    return json.loads(admin("-f", "raw_json", *args))


def test_list_vhosts_and_users(admin, broker):
    assert broker.vhost in [v["name"] for v in raw(admin, "list", "vhosts")]
    assert f"| {broker.vhost} " in admin("list", "vhosts")
    users = raw(admin, "list", "users")
    assert broker.user in [u["name"] for u in users]
    assert broker.user in admin("list", "users")


def test_declare_list_and_delete_queue(admin, unique):
    queue = unique("q")
    assert "queue declared" in admin("declare", "queue", f"name={queue}", "durable=false")
    assert queue in admin("list", "queues")
    listed = {q["name"]: q for q in raw(admin, "list", "queues")}
    assert listed[queue]["durable"] is False
    assert "queue deleted" in admin("delete", "queue", f"name={queue}")
    assert queue not in admin("list", "queues")


def test_raw_json_list_queues_honours_columns(admin, unique):
    queue = unique("q")
    admin("declare", "queue", f"name={queue}", "durable=false")
    rows = raw(admin, "list", "queues", "name", "durable")
    assert {"name": queue, "durable": False} in rows
    assert all(set(row) <= {"name", "durable"} for row in rows)


def test_publish_get_purge(admin, unique, poll_until):
    queue = unique("q")
    admin("declare", "queue", f"name={queue}", "durable=false")
    for payload in ("one", "two", "three"):
        admin("publish", "exchange=amq.default", f"routing_key={queue}", f"payload={payload}")
    got = raw(admin, "get", f"queue={queue}", "ackmode=ack_requeue_false")
    assert [(m["payload"], m["routing_key"], m["message_count"]) for m in got] == [("one", queue, 2)]
    assert "two" in admin("get", f"queue={queue}", "ackmode=ack_requeue_true")  # table output
    assert "queue purged" in admin("purge", "queue", f"name={queue}")
    assert raw(admin, "get", f"queue={queue}", "ackmode=ack_requeue_false") == []


def test_declare_exchange_and_binding_then_route(admin, unique):
    exchange, queue = unique("x"), unique("q")
    declared = admin("declare", "exchange", f"name={exchange}", "type=topic", "durable=false")
    assert "exchange declared" in declared
    assert {"name": exchange, "type": "topic"} in raw(admin, "list", "exchanges", "name", "type")
    admin("declare", "queue", f"name={queue}", "durable=false")
    assert "binding declared" in admin(
        "declare", "binding", f"source={exchange}", f"destination={queue}", "routing_key=a.*"
    )
    bindings = raw(admin, "list", "bindings", "source", "destination", "routing_key")
    assert {"source": exchange, "destination": queue, "routing_key": "a.*"} in bindings
    assert exchange in admin("list", "bindings")
    assert "Message published" in admin("publish", f"exchange={exchange}", "routing_key=a.b", "payload=hi")
    got = raw(admin, "get", f"queue={queue}", "ackmode=ack_requeue_false")
    assert [m["payload"] for m in got] == ["hi"]
    assert "exchange deleted" in admin("delete", "exchange", f"name={exchange}")


def test_list_connections_shows_a_client(admin, connect, poll_until):
    name = "rabbitmqadmin-e2e"
    conn = connect(client_properties={"connection_name": name})
    conn.channel()

    def listed() -> bool:
        rows = raw(admin, "list", "connections", "name", "user", "client_properties.connection_name")
        return any(row.get("client_properties", {}).get("connection_name") == name for row in rows)

    poll_until(listed, timeout=STATS_TIMEOUT, interval=0.5)
    header = admin("list", "connections").splitlines()[1]
    assert [c.strip() for c in header.split("|")[1:4]] == ["name", "user", "channels"]
    rows = raw(admin, "--sort", "name", "--sort-reverse", "list", "exchanges", "name")
    assert [r["name"] for r in rows] == sorted((r["name"] for r in rows), reverse=True)


def test_list_nodes_and_overview(admin, broker):
    nodes = raw(admin, "list", "nodes")
    assert len(nodes) == 1 and nodes[0]["type"] == "disc" and nodes[0]["mem_used"] > 0
    assert nodes[0]["name"] in admin("list", "nodes")
    assert nodes[0]["name"] in admin("show", "overview")


def test_export_then_import_restores_a_deleted_queue(admin, channel, unique, tmp_path):
    name = unique("admin-defs")
    channel.queue_declare(name, durable=True, arguments={"x-max-length": 4})
    saved = tmp_path / "defs.json"
    admin("export", str(saved))
    exported = json.loads(saved.read_text())
    assert name in [q["name"] for q in exported["queues"]]
    channel.queue_delete(name)
    admin("import", str(saved))
    ok = channel.queue_declare(name, durable=True, arguments={"x-max-length": 4}, passive=True)
    assert ok.method.queue == name


def test_import_of_a_file_the_broker_imports_in_part(rabbitmqadmin, broker):
    """RabbitMQ's export holding every kind of object (``e2e/test_definitions_everything.py``), imported
    node-wide (no ``-V``): RabbitMQ imports it whole (204), ottermq answers 200 naming what it skipped;
    rabbitmqadmin succeeds on both."""
    api = urllib.parse.urlsplit(broker.management_url)
    command = [sys.executable, str(rabbitmqadmin), "-H", api.hostname or "127.0.0.1", "-P", str(api.port)]
    command += ["-u", broker.user, "-p", broker.password, "import", str(FIXTURE)]
    with kept_clean(broker.api):
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert broker.api(f"/api/queues/{quote(V1, safe='')}/classic.args")[0] == 200
