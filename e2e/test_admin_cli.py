"""``ottermq list|purge|get|publish|close-connection|users|permissions|vhosts`` and ``ottermq definitions
export|import --url`` against the broker under test's management API.

The subcommands speak RabbitMQ's management API only, so with ``AMQP_URL`` set they run against
RabbitMQ's (``MANAGEMENT_URL``) just the same: nothing here is an ottermq extension. RabbitMQ lists
connections, channels and consumers from stats it emits every 5 s, so those are polled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from .polling import poll_until

STATS_TIMEOUT = 20


@pytest.fixture
def ottermq(broker: Any) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``ottermq("list", "queues", check=True, env=None, cwd=None)``: ``python -m ottermq.broker`` pointed
    at the broker under test with ``--url/--user/--password`` (or only through ``env`` when given; a
    None value there removes the variable), and ``--any-broker``: the broker under test may be a
    RabbitMQ, which the commands refuse to change without it (``e2e/test_first_hour.py`` tests that)."""

    def _run(
        *args: str, check: bool = True, env: dict[str, str | None] | None = None, cwd: Path | None = None
    ) -> Any:
        flags = (
            []
            if env is not None
            else [
                "--url",
                broker.management_url,
                "--user",
                broker.user,
                "--password",
                broker.password,
            ]
        )
        flags.append("--any-broker")
        merged = {**os.environ, "PYTHONSAFEPATH": "1", **(env or {})}
        done = subprocess.run(
            [sys.executable, "-m", "ottermq.broker", *args, *flags],
            capture_output=True,
            text=True,
            timeout=60,
            env={name: value for name, value in merged.items() if value is not None},
            cwd=cwd,
        )
        if check:
            assert done.returncode == 0, (args, done.returncode, done.stdout, done.stderr)
        return done

    return _run


def as_json(ottermq: Callable[..., Any], *args: str) -> Any:
    return json.loads(ottermq(*args, "--format", "json").stdout)


def test_list_queues_table_and_json(ottermq, channel, declare, broker):
    queue = declare(channel)
    channel.basic_publish("", queue, b"x")
    lines = ottermq("list", "queues").stdout.splitlines()
    assert lines[0].split() == ["vhost", "name", "messages_ready", "messages_unacknowledged", "consumers"]
    assert any(line.split()[:2] == [broker.vhost, queue] for line in lines[2:])
    listed = {q["name"]: q for q in as_json(ottermq, "list", "queues", "--vhost", broker.vhost)}
    assert listed[queue]["durable"] is False  # pika's default


def test_list_exchanges_bindings_vhosts_users(ottermq, channel, declare, unique, broker):
    exchange = unique("x")
    channel.exchange_declare(exchange, "topic")
    queue = declare(channel)
    channel.queue_bind(queue, exchange, "a.#")
    assert exchange in ottermq("list", "exchanges").stdout
    bindings = as_json(ottermq, "list", "bindings", "--vhost", broker.vhost)
    assert (exchange, queue, "a.#") in [(b["source"], b["destination"], b["routing_key"]) for b in bindings]
    assert exchange in ottermq("list", "bindings").stdout
    assert broker.vhost in [v["name"] for v in as_json(ottermq, "list", "vhosts")]
    users = ottermq("list", "users").stdout.splitlines()
    assert any(line.split()[0] == broker.user for line in users[2:])


def test_list_connections_channels_consumers(ottermq, connect, declare, poll_until):
    conn = connect(client_properties={"connection_name": "admin-cli-e2e"})
    ch = conn.channel()
    queue = declare(ch)
    tag = ch.basic_consume(queue, lambda *a: None)

    def consumer_listed() -> bool:
        return any(c["consumer_tag"] == tag for c in as_json(ottermq, "list", "consumers"))

    poll_until(consumer_listed, timeout=STATS_TIMEOUT, interval=0.5)
    assert tag in ottermq("list", "consumers").stdout
    connections = as_json(ottermq, "list", "connections")
    mine = [c for c in connections if c["client_properties"].get("connection_name") == "admin-cli-e2e"]
    assert len(mine) == 1
    assert mine[0]["name"] in ottermq("list", "connections").stdout
    poll_until(
        lambda: any(c["name"].startswith(mine[0]["name"]) for c in as_json(ottermq, "list", "channels")),
        timeout=STATS_TIMEOUT,
        interval=0.5,
    )
    assert mine[0]["name"] in ottermq("list", "channels").stdout


def test_publish_get_purge(ottermq, channel, declare):
    queue = declare(channel)
    for payload in ("one", "two", "three"):
        out = ottermq("publish", "--routing-key", queue, "--payload", payload).stdout
        assert out.splitlines() == ["routed", "------", "true"]
    got = as_json(ottermq, "get", queue, "--count", "1", "--ackmode", "ack_requeue_false")
    assert [(m["payload"], m["message_count"]) for m in got] == [("one", 2)]
    table = ottermq("get", queue, "--count", "2").stdout.splitlines()
    assert table[0].split() == [
        "routing_key",
        "exchange",
        "redelivered",
        "message_count",
        "message_id",
        "x-death",
        "headers",
        "payload_encoding",
        "payload",
    ]
    assert [line.split()[-1] for line in table[2:]] == ["two", "three"]
    ottermq("purge", queue)
    assert as_json(ottermq, "get", queue) == []


def table_rows(text: str) -> list[dict[str, str]]:
    """The rows of an ``ottermq`` table, cut at the header's column starts (values may hold spaces)."""
    header, _rule, *lines = text.splitlines()
    columns = header.split()
    starts: list[int | None] = []
    for column in columns:  # in order: "payload" comes after "payload_encoding"
        starts.append(header.index(column, (starts[-1] or 0) + 1 if starts else 0))
    starts.append(None)
    return [{c: line[starts[i] : starts[i + 1]].strip() for i, c in enumerate(columns)} for line in lines]


def test_get_shows_x_death_message_id_and_headers(ottermq, channel, with_dlq, expect_message):
    work, dlq = with_dlq(channel)
    props = pika.BasicProperties(message_id="order-17", headers={"tenant": "acme"})
    channel.basic_publish("", work, b"bad", props)
    method, _, _ = expect_message(channel, work, auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)
    poll_until(lambda: channel.queue_declare(dlq, passive=True).method.message_count == 1)
    [row] = table_rows(ottermq("get", dlq).stdout)
    assert row["message_id"] == "order-17"
    assert row["x-death"] == f"rejected in {work} (count 1)"
    assert row["headers"] == '{"tenant": "acme"}'  # without x-death and x-first-death-* (x-last-death-*)
    assert row["payload"] == "bad"
    [message] = as_json(ottermq, "get", dlq)  # the API's JSON, x-death and all
    assert message["properties"]["headers"]["x-death"][0]["reason"] == "rejected"


def test_the_brokers_own_settings_are_the_default_and_the_product_is_named(ottermq, broker, tmp_path):
    """Without --url or OTTERMQ_ADMIN_URL the commands go where the broker's own OTTERMQ_WEB_* settings
    (here from ./.env) say, and stderr names the product /api/overview reports; stdout stays the table.
    (``--any-broker``, from the fixture, keeps a RabbitMQ under test from adding its warning.)"""
    web = urllib.parse.urlsplit(broker.management_url)
    (tmp_path / ".env").write_text(f"OTTERMQ_WEB_HOST={web.hostname}\nOTTERMQ_WEB_PORT={web.port}\n")
    env: dict[str, str | None] = {name: None for name in os.environ if name.startswith("OTTERMQ_")}
    env.update(OTTERMQ_USERNAME=broker.user, OTTERMQ_PASSWORD=broker.password)
    status, overview = broker.api("/api/overview")
    assert status == 200
    at = f"{overview['product_name']} {overview['product_version']} at http://{web.hostname}:{web.port}/"
    done = ottermq("list", "vhosts", env=env, cwd=tmp_path)
    assert done.stderr == f"Listing vhosts of {at}\n"
    assert broker.vhost in [row["name"] for row in table_rows(done.stdout)]
    done = ottermq("list", "queues", "--vhost", broker.vhost, "--format", "json", env=env, cwd=tmp_path)
    assert done.stderr == f"Listing queues of {at} (vhost {broker.vhost})\n"
    assert isinstance(json.loads(done.stdout), list)
    quiet = ottermq("list", "vhosts", "--quiet", env=env, cwd=tmp_path)
    assert quiet.stderr == "" and quiet.stdout.split()[:2] == ["name", "messages"]


def test_publish_to_an_exchange_reports_unrouted(ottermq, channel, unique):
    exchange = unique("x")
    channel.exchange_declare(exchange, "fanout")
    assert as_json(ottermq, "publish", "--exchange", exchange, "--payload", "p") == {"routed": False}


def test_close_connection(ottermq, connect, poll_until):
    conn = connect(client_properties={"connection_name": "admin-cli-close"})
    conn.channel()

    def name() -> str | None:
        for c in as_json(ottermq, "list", "connections"):
            if c["client_properties"].get("connection_name") == "admin-cli-close":
                return str(c["name"])
        return None

    ottermq("close-connection", poll_until(name, timeout=STATS_TIMEOUT, interval=0.5), "--reason", "bye")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.process_data_events(time_limit=10)
        conn.process_data_events(time_limit=10)
    assert (info.value.reply_code, info.value.reply_text) == (320, "CONNECTION_FORCED - bye")


def test_environment_variables_and_errors(ottermq, broker, unique):
    env = {
        "OTTERMQ_ADMIN_URL": broker.management_url,
        "OTTERMQ_ADMIN_USER": broker.user,
        "OTTERMQ_ADMIN_PASSWORD": broker.password,
    }
    assert broker.vhost in [
        v["name"] for v in json.loads(ottermq("list", "vhosts", "--format", "json", env=env).stdout)
    ]
    bad = ottermq("list", "queues", check=False, env={**env, "OTTERMQ_ADMIN_PASSWORD": "wrong"})
    assert (bad.returncode, bad.stdout) == (1, "")
    assert bad.stderr.startswith("ottermq list: 401 ")
    missing = ottermq("purge", unique("missing"), check=False)
    assert missing.returncode == 1 and "404" in missing.stderr


def test_users_permissions_and_vhosts(ottermq, broker, unique):
    user, vhost = unique("cli-user"), unique("cli-vhost")
    try:
        ottermq("vhosts", "add", vhost, "--description", "made by the CLI")
        assert vhost in [v["name"] for v in as_json(ottermq, "vhosts", "list")]
        ottermq("users", "add", user, "first-pw", "--tags", "monitoring,management")
        listed = {u["name"]: u for u in as_json(ottermq, "users", "list")}
        assert sorted(listed[user]["tags"]) == ["management", "monitoring"]
        ottermq("permissions", "add", vhost, user, "--configure", "^$", "--write", ".*", "--read", ".*")
        perms = as_json(ottermq, "permissions", "list", "--vhost", vhost)  # the creator has some too
        assert [(p["configure"], p["write"]) for p in perms if p["user"] == user] == [("^$", ".*")]
        params = broker.params(virtual_host=vhost, credentials=pika.PlainCredentials(user, "first-pw"))
        pika.BlockingConnection(params).close()
        ottermq("users", "passwd", user, "second-pw")
        assert sorted({u["name"]: u for u in as_json(ottermq, "users", "list")}[user]["tags"]) == [
            "management",
            "monitoring",
        ]
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(params)
        params = broker.params(virtual_host=vhost, credentials=pika.PlainCredentials(user, "second-pw"))
        pika.BlockingConnection(params).close()
        ottermq("permissions", "delete", vhost, user)
        assert user not in [p["user"] for p in as_json(ottermq, "permissions", "list", "--vhost", vhost)]
    finally:
        ottermq("users", "delete", user, check=False)
        ottermq("vhosts", "delete", vhost, check=False)
    assert user not in [u["name"] for u in as_json(ottermq, "users", "list")]
    assert vhost not in [v["name"] for v in as_json(ottermq, "vhosts", "list")]
    missing = ottermq("users", "delete", user, check=False)
    assert missing.returncode == 1 and "404" in missing.stderr


def test_definitions_export_and_import_through_the_api(ottermq, broker, channel, unique, tmp_path):
    name = unique("cli-defs")
    channel.queue_declare(name, durable=True, arguments={"x-max-length": 9})
    saved = tmp_path / "defs.json"
    ottermq("definitions", "export", str(saved), "--vhost", broker.vhost)
    assert name in [q["name"] for q in json.loads(saved.read_text())["queues"]]
    everything = json.loads(ottermq("definitions", "export").stdout)
    assert broker.user in [u["name"] for u in everything["users"]]
    channel.queue_delete(name)
    ottermq("definitions", "import", str(saved), "--vhost", broker.vhost)
    assert channel.queue_declare(name, passive=True).method.queue == name
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    failed = ottermq("definitions", "import", str(bad), check=False)
    assert failed.returncode == 1 and "cannot read" in failed.stderr


def test_version(ottermq):
    command = [sys.executable, "-m", "ottermq.broker", "--version"]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONSAFEPATH": "1"})
    assert done.returncode == 0 and done.stdout.startswith("ottermq ")


def test_policies_set_list_clear(ottermq, broker, unique):
    name = unique("cli-pol")
    try:
        shown = as_json(
            ottermq,
            "policies",
            "set",
            name,
            "^cli-pol-never$",
            '{"max-length": 5}',
            "--priority",
            "3",
            "--apply-to",
            "queues",
            "--vhost",
            broker.vhost,
        )
        assert shown["definition"] == {"max-length": 5}
        listed = {p["name"]: p for p in as_json(ottermq, "policies", "list", "--vhost", broker.vhost)}
        assert (listed[name]["priority"], listed[name]["apply-to"]) == (3, "queues")
        assert name in ottermq("policies", "list").stdout
        ottermq("policies", "set", name, "^x$", '{"max-length": 1}', "--vhost", broker.vhost, "--operator")
        assert name in [p["name"] for p in as_json(ottermq, "policies", "list", "--operator")]
        ottermq("policies", "clear", name, "--vhost", broker.vhost, "--operator")
        bad = ottermq(
            "policies", "set", name, "x", '{"max-length": -1}', "--vhost", broker.vhost, check=False
        )
        assert bad.returncode == 1 and "is not a valid maximum length" in bad.stderr
    finally:
        ottermq("policies", "clear", name, "--vhost", broker.vhost, check=False)
    assert name not in [p["name"] for p in as_json(ottermq, "policies", "list")]


def test_limits_set_list_clear(ottermq, broker):
    try:
        limits = '{"max-connections": 100, "max-queues": 1000}'
        shown = as_json(ottermq, "limits", "set", broker.vhost, limits)
        assert shown["value"] == {"max-connections": 100, "max-queues": 1000}
        listed = {item["vhost"]: item["value"] for item in as_json(ottermq, "limits", "list")}
        assert listed[broker.vhost] == {"max-connections": 100, "max-queues": 1000}
        ottermq("limits", "set", broker.user, '{"max-channels": 500}', "--user-limits")
        users = {item["user"]: item["value"] for item in as_json(ottermq, "limits", "list", "--user-limits")}
        assert users[broker.user] == {"max-channels": 500}
        ottermq("limits", "clear", broker.vhost, "max-queues")
        listed = {item["vhost"]: item["value"] for item in as_json(ottermq, "limits", "list")}
        assert listed[broker.vhost] == {"max-connections": 100}
        bad = ottermq("limits", "set", broker.vhost, '{"max-bogus": 1}', check=False)
        assert bad.returncode == 1 and "Unrecognised terms" in bad.stderr
    finally:
        ottermq("limits", "clear", broker.vhost, check=False)
        ottermq("limits", "clear", broker.user, "--user-limits", check=False)
    left = {item["vhost"]: item["value"] for item in as_json(ottermq, "limits", "list")}
    assert not left.get(broker.vhost)  # gone, or RabbitMQ's empty [] once all were cleared


def test_a_user_without_a_password(ottermq, broker, unique):
    """``users add NAME --no-password``: RabbitMQ's ``password_hash: ""`` (certificate login only); an
    empty PASSWORD is refused before anything is sent, as it would never log in."""
    user = unique("cli-cert-user")
    vhost = urllib.parse.quote(broker.vhost, safe="")
    try:
        empty = ottermq("users", "add", user, "", check=False)
        assert (empty.returncode, empty.stdout) == (1, "")
        assert "an empty password never logs in; use --no-password" in empty.stderr
        assert broker.api(f"/api/users/{user}")[0] == 404
        ottermq("users", "add", user, "--no-password", "--tags", "management")
        shown = broker.api(f"/api/users/{user}")[1]
        assert (shown["password_hash"], shown["tags"]) == ("", ["management"])
        everything = {"configure": ".*", "write": ".*", "read": ".*"}
        assert broker.api(f"/api/permissions/{vhost}/{user}", "PUT", everything)[0] == 201
        for password in ("", "any"):
            with pytest.raises(pika.exceptions.ProbableAuthenticationError):
                pika.BlockingConnection(broker.params(credentials=pika.PlainCredentials(user, password)))
            assert broker.api("/api/whoami", auth=(user, password))[0] == 401
        ottermq("users", "passwd", user, "now-a-pw")
        pika.BlockingConnection(broker.params(credentials=pika.PlainCredentials(user, "now-a-pw"))).close()
        ottermq("users", "passwd", user, "--no-password")
        assert broker.api(f"/api/users/{user}")[1]["password_hash"] == ""
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(broker.params(credentials=pika.PlainCredentials(user, "now-a-pw")))
    finally:
        ottermq("users", "delete", user, check=False)


def test_parameters_and_shovels(ottermq, broker, unique, channel):
    """``ottermq parameters set shovel NAME VALUE`` takes ``rabbitmqctl set_parameter``'s JSON as it is;
    ``ottermq shovels list|restart|delete`` (issue 42)."""
    name, src, dest = unique("cli-sh"), unique("src"), unique("dest")
    value = {"src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://", "dest-queue": dest}
    try:
        shown = as_json(
            ottermq, "parameters", "set", "shovel", name, json.dumps(value), "--vhost", broker.vhost
        )
        assert shown == {"vhost": broker.vhost, "component": "shovel", "name": name, "value": value}
        listed = as_json(ottermq, "parameters", "list", "shovel", "--vhost", broker.vhost)
        assert {"value": value, "vhost": broker.vhost, "component": "shovel", "name": name} in listed
        assert name in ottermq("parameters", "list").stdout

        def state() -> str | None:
            entries = as_json(ottermq, "shovels", "list", "--vhost", broker.vhost)
            return next((e["state"] for e in entries if e["name"] == name), None)

        poll_until(lambda: state() == "running", timeout=STATS_TIMEOUT, what="the shovel running")
        table = ottermq("shovels", "list").stdout
        assert name in table and "running" in table and src in table
        ottermq("shovels", "restart", name, "--vhost", broker.vhost)
        poll_until(lambda: state() == "running", timeout=STATS_TIMEOUT, what="running again")
        bad = ottermq(
            "parameters",
            "set",
            "shovel",
            name,
            '{"src-uri": "amqp://"}',
            "--vhost",
            broker.vhost,
            check=False,
        )
        assert (
            bad.returncode == 1
            and "Validation failed" in bad.stderr
            and 'Key "dest-uri" not found' in bad.stderr
        )
        ottermq("shovels", "delete", name, "--vhost", broker.vhost)
        assert name not in [p["name"] for p in as_json(ottermq, "parameters", "list", "shovel")]
        ottermq("parameters", "set", "shovel", name, json.dumps(value), "--vhost", broker.vhost)
        ottermq("parameters", "clear", "shovel", name, "--vhost", broker.vhost)
        assert name not in [p["name"] for p in as_json(ottermq, "parameters", "list")]
    finally:
        ottermq("parameters", "clear", "shovel", name, "--vhost", broker.vhost, check=False)
