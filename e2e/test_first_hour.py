"""The first hour of a RabbitMQ user with ottermq (issue 26 item 9): each test is a stumble seen then.

- The listeners the API reports include Prometheus, shaped as RabbitMQ reports them (both brokers), and
  the web UI's overview lists it.
- The web UI's dead-letter table shows each message's message_id and its own headers beside x-death.
- ``ottermq dlq move`` names the broker it talks to and never shows "0 of 0" before it knows the count.
- The admin commands find an HTTPS-only configured broker from its own settings (``OTTERMQ_WEB_SSL``).

The UI, the dead-letter moves and TLS set-ups are ottermq's (``extension``); the listener shape is not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from .conftest import Broker, _free_port
from .polling import poll_until
from .tls_certs import CA


def port_of(url: str) -> int:
    port = urllib.parse.urlsplit(url).port
    assert port is not None
    return port


def ottermq(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m ottermq.broker ARGS`` with only ``env``'s OTTERMQ_* variables, in ``cwd``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTTERMQ_")}
    return subprocess.run(
        [sys.executable, "-m", "ottermq.broker", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, "PYTHONSAFEPATH": "1", **env},
        cwd=cwd,
    )


# -- listeners ------------------------------------------------------------------------------------------
def test_overview_and_node_list_the_prometheus_listener(broker):
    port = port_of(broker.prometheus_url)
    status, overview = broker.api("/api/overview")
    assert status == 200
    prometheus = [entry for entry in overview["listeners"] if entry["protocol"] == "http/prometheus"]
    assert prometheus and {entry["port"] for entry in prometheus} == {port}
    entry = prometheus[0]
    assert set(entry) >= {"node", "protocol", "ip_address", "port", "socket_opts"}
    assert (entry["node"], entry["socket_opts"]["port"]) == (overview["node"], port)
    assert entry["socket_opts"]["protocol"] == "http/prometheus"
    web = [entry for entry in overview["listeners"] if entry["protocol"] == "http"]
    assert {entry["port"] for entry in web} == {port_of(broker.management_url)}
    status, node = broker.api(f"/api/nodes/{urllib.parse.quote(overview['node'], safe='')}")
    assert status == 200
    contexts = [c for c in node["contexts"] if c["description"] == "RabbitMQ Prometheus"]
    assert [(c["port"], c["protocol"]) for c in contexts] == [(str(port), "'http/prometheus'")]


# -- the web UI -----------------------------------------------------------------------------------------
@pytest.fixture
def page(browser: Any, broker: Broker) -> Iterator[Any]:
    """A logged-in tab of the broker's web UI; no script error may happen in it."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.set_default_timeout(15_000)
    tab.goto(broker.management_url + "/")
    tab.fill("input[name=username]", broker.user)
    tab.fill("input[name=password]", broker.password)
    tab.click("#login-form button[type=submit]")
    tab.wait_for_selector("#nav a")
    try:
        yield tab
    finally:
        context.close()
    assert errors == []


@pytest.mark.extension
def test_ui_overview_lists_the_prometheus_listener(page, broker):
    page.goto(broker.management_url + "/#/")
    page.wait_for_selector("td:text-is('http/prometheus')")
    listeners = page.locator("table", has=page.locator("th:text-is('Protocol')")).inner_text()
    rows = [line.split("\t") for line in listeners.splitlines()]
    assert [row[-1] for row in rows if row[0] == "http/prometheus"] == [str(port_of(broker.prometheus_url))]


@pytest.mark.extension
def test_ui_dead_letters_show_message_id_and_headers(page, broker, channel, with_dlq, expect_message):
    work, dlq = with_dlq(channel)
    props = pika.BasicProperties(message_id="order-17", headers={"tenant": "acme"})
    channel.basic_publish("", work, b"bad", props)
    method, _, _ = expect_message(channel, work, auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)
    poll_until(lambda: channel.queue_declare(dlq, passive=True).method.message_count == 1)
    path = "/".join(urllib.parse.quote(part, safe="") for part in (broker.vhost, dlq))
    page.goto(f"{broker.management_url}/#/dead-letters/{path}")
    page.wait_for_selector("td:text-is('order-17')")
    messages = page.locator("table", has=page.locator("th:text-is('Message ID')"))
    assert "Headers" in messages.locator("thead").inner_text()
    row = messages.locator("tbody").inner_text()
    assert "rejected" in row and "tenant = acme" in row
    assert "x-first-death" not in row and "x-last-death" not in row  # x-death has its own columns


# -- ottermq dlq move ------------------------------------------------------------------------------------
@pytest.mark.extension
def test_dlq_move_names_the_broker_and_never_shows_0_of_0(broker, channel, with_dlq, tmp_path):
    work, dlq = with_dlq(channel)
    for i in range(40):
        channel.basic_publish("", work, f"m{i}".encode())
    for _ in range(40):
        method, _, _ = channel.basic_get(work)
        channel.basic_reject(method.delivery_tag, requeue=False)
    poll_until(lambda: channel.queue_declare(dlq, passive=True).method.message_count == 40)
    env = {"OTTERMQ_ADMIN_URL": broker.management_url, "OTTERMQ_ADMIN_USER": broker.user}
    env["OTTERMQ_ADMIN_PASSWORD"] = broker.password
    done = ottermq("dlq", "move", broker.vhost, dlq, "--all", "--rate", "20", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done: moved 40, unroutable 0, skipped 0\n"
    first, progress = done.stderr.split("\n", 1)
    assert first.startswith(f"Moving dead letters from queue '{dlq}' on OtterMQ ")
    assert first.endswith(f" at {broker.management_url}/ (vhost {broker.vhost})")
    assert " of 40" in progress and "0 of 0" not in progress


# -- the admin commands find an HTTPS broker from its settings -------------------------------------------
@pytest.mark.extension
def test_admin_commands_use_the_brokers_https_settings(broker_process, tmp_path):
    ca = CA(tmp_path / "ca")
    server = ca.issue("localhost", server=True)
    web_ssl_port = _free_port()
    settings = {
        "OTTERMQ_WEB_SSL": "true",
        "OTTERMQ_WEB_SSL_PORT": str(web_ssl_port),
        "OTTERMQ_SSL_CERT_FILE": str(server.cert),
        "OTTERMQ_SSL_KEY_FILE": str(server.key),
        "OTTERMQ_SSL_CA_FILE": str(ca.cert_file),
    }
    process = broker_process(settings)
    process.start()
    # what a user has: the broker's .env (here the same settings), no OTTERMQ_ADMIN_*, no --url
    (tmp_path / ".env").write_text("".join(f"{name}={value}\n" for name, value in settings.items()))
    done = ottermq("list", "vhosts", env={}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("Listing vhosts of OtterMQ ")
    assert done.stderr.endswith(f" at https://localhost:{web_ssl_port}/\n")
    assert done.stdout.splitlines()[2].split()[0] == "/"
    wrong = ottermq("list", "vhosts", "--cacert", str(CA(tmp_path / "other").cert_file), env={}, cwd=tmp_path)
    assert wrong.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in wrong.stderr
