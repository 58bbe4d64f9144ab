"""The first hour of a RabbitMQ user with ottermq (issue 26 item 9): each test is a stumble seen then.

- The listeners the API reports include Prometheus, shaped as RabbitMQ reports them (both brokers), and
  the web UI's overview lists it.
- The web UI's dead-letter table shows each message's message_id and its own headers beside x-death.
- ``ottermq dlq move`` names the broker it talks to and never shows "0 of 0" before it knows the count.
- The admin commands find an HTTPS-only configured broker from its own settings (``OTTERMQ_WEB_SSL``).

Issue 41 (the first hour of a user coming from RabbitMQ, with a RabbitMQ on 5672/15672):

- A broker on PostgreSQL that has never reached its database (a wrong port, role or database) stops
  with one line naming what failed and the setting to check, exit status 1, within seconds.
- ``ottermq dlq report`` straight after dead letters were produced reads the archive file the broker is
  still writing (its complete lines), prints nothing of the JVM's or Spark's own, and the time it
  prints is the whole command's.
- The admin commands read ``OTTERMQ_ADMIN_*`` from ``./.env`` too, warn when what answers is not OtterMQ
  and refuse to change it without ``--any-broker`` (the "other broker" is a stand-in answering
  ``/api/overview`` with RabbitMQ 3.10.8's product fields, measured on RabbitMQ, and recording every
  request, so the test sees that nothing was sent to change it).

The UI, the dead-letter moves, TLS set-ups and the command line's guard are ottermq's (``extension``);
the listener shape is not.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from .conftest import Broker, _free_port, postgres_url
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


@pytest.mark.extension
def test_ui_queue_list_has_a_type_column(page, broker, channel, unique):
    """RabbitMQ's queue list has a Type column (classic, quorum, stream); a quorum queue must not be told
    only by its x-queue-type feature tag."""
    prefix = unique("typed")
    channel.queue_declare(f"{prefix}.classic")
    channel.queue_declare(f"{prefix}.quorum", durable=True, arguments={"x-queue-type": "quorum"})
    try:
        page.goto(broker.management_url + "/#/queues")
        page.fill("input[type=search]", prefix)
        page.wait_for_selector(f"td a:text-is('{prefix}.quorum')")
        table = page.locator("table", has=page.locator("th:text-is('Type')"))
        headers = [cell.strip() for cell in table.locator("thead th").all_inner_texts()]
        column = headers.index("Type")
        assert headers[column - 1] == "Name"

        def rows() -> dict[str, str]:
            found = {}
            for row in table.locator("tbody tr").all():
                cells = row.locator("td").all_inner_texts()
                # other tests' queues may show until the search applies
                if cells[column - 1].startswith(prefix):
                    found[cells[column - 1]] = cells[column]
            return found

        expected = {f"{prefix}.classic": "classic", f"{prefix}.quorum": "quorum"}
        poll_until(
            lambda: rows() == expected,
            timeout=10,
            what=f"the filtered list {expected}",
            explain=lambda: str(rows()),
        )
    finally:
        channel.queue_delete(f"{prefix}.classic")
        channel.queue_delete(f"{prefix}.quorum")


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


# -- the command line and another broker on its ports ------------------------------------------------------
class OtherBroker(http.server.ThreadingHTTPServer):
    """A management API that is not OtterMQ: ``/api/overview`` answers RabbitMQ 3.10.8's product fields
    (as RabbitMQ's does), every other request a 204; ``requests`` records them all."""

    requests: list[tuple[str, str]]


class _OtherHandler(http.server.BaseHTTPRequestHandler):
    server: OtherBroker

    def _answer(self) -> None:
        self.server.requests.append((self.command, self.path))
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path == "/api/overview":
            body = json.dumps({"product_name": "RabbitMQ", "product_version": "3.10.8"}).encode()
        elif self.command == "GET":
            body = (
                b"[]" if self.path != "/api/users/guest" else b'{"name": "guest", "tags": ["administrator"]}'
            )
        else:
            self.send_response(204)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_DELETE = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture
def other_broker() -> Iterator[OtherBroker]:
    server = OtherBroker(("127.0.0.1", 0), _OtherHandler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.extension
def test_the_command_line_warns_about_another_broker_and_refuses_to_change_it(other_broker, tmp_path):
    """What happened in the first hour: OtterMQ's ports moved on one shell's command line, so in another
    shell the commands' default (the broker's own settings, here OTTERMQ_WEB_PORT from ./.env) reaches
    the other broker. Reads warn; changes refuse and send nothing but the overview's GET."""
    port = other_broker.server_address[1]
    (tmp_path / ".env").write_text(f"OTTERMQ_WEB_PORT={port}\n")
    at = f"RabbitMQ 3.10.8 at http://localhost:{port}/"
    came = f"the URL comes from OTTERMQ_WEB_PORT={port}"
    listed = ottermq("list", "queues", env={}, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    first, warning = listed.stderr.splitlines()
    assert first == f"Listing queues of {at} (all vhosts)"
    assert warning.startswith(f"WARNING: {at} is not OtterMQ ({came}; ")
    assert "--any-broker" in warning
    for command in (
        ["users", "passwd", "guest", "n3w"],
        ["policies", "set", "ttl", ".*", '{"message-ttl": 1000}'],
        ["purge", "orders"],
        ["get", "orders", "--ackmode", "ack_requeue_false"],
        ["definitions", "import", str(tmp_path / ".env"), "--url", f"http://localhost:{port}"],
        ["dlq", "move", "/", "orders.dlq", "--all"],
    ):
        other_broker.requests.clear()
        refused = ottermq(*command, env={}, cwd=tmp_path)
        assert refused.returncode == 1, (command, refused.stdout, refused.stderr)
        [line] = refused.stderr.splitlines()  # one line: nothing said about a change not made
        assert line.startswith("ottermq ") and f": refusing to change {at}: it is not OtterMQ (" in line
        assert other_broker.requests == [("GET", "/api/overview")], command
    other_broker.requests.clear()
    asked = ottermq("users", "passwd", "guest", "n3w", "--any-broker", env={}, cwd=tmp_path)
    assert asked.returncode == 0, asked.stderr
    assert asked.stderr == f"Changing the password of user 'guest' on {at}\n"
    assert ("PUT", "/api/users/guest") in other_broker.requests


@pytest.mark.extension
def test_the_admin_variables_in_dot_env_win_over_the_brokers_settings(broker, other_broker, tmp_path):
    """OTTERMQ_ADMIN_URL/_USER/_PASSWORD in ./.env are read like the broker's own settings there."""
    (tmp_path / ".env").write_text(
        f"OTTERMQ_WEB_PORT={other_broker.server_address[1]}\n"
        f"OTTERMQ_ADMIN_URL={broker.management_url}\n"
        f"OTTERMQ_ADMIN_USER={broker.user}\nOTTERMQ_ADMIN_PASSWORD={broker.password}\n"
    )
    done = ottermq("vhosts", "add", "from-dot-env", env={}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("Adding vhost 'from-dot-env' on OtterMQ ")
    assert other_broker.requests == []
    assert broker.api(f"/api/vhosts/{urllib.parse.quote('from-dot-env', safe='')}")[0] == 200
    assert broker.api(f"/api/vhosts/{urllib.parse.quote('from-dot-env', safe='')}", "DELETE")[0] == 204


# -- the start-up log with two workers ----------------------------------------------------------------------
@pytest.mark.extension
def test_only_worker_0_says_where_the_web_ui_is(broker_process, poll_until):
    """Worker 1's listener is internal (an ephemeral port on 127.0.0.1 that worker 0 asks): the log names it
    so, and the one web UI line is worker 0's, on OTTERMQ_WEB_PORT."""
    process = broker_process({"OTTERMQ_WORKERS": "2"})
    process.start()
    line = f"INFO ottermq.broker.management.app: web UI on http://127.0.0.1:{process.web_port}/"
    poll_until(lambda: line in process.log_tail(400))
    log = process.log_tail(400)
    assert log.count("web UI on ") == 1, log
    assert "internal management API (worker 0 asks it) on http://127.0.0.1:" in log
    assert "internal Prometheus metrics (worker 0 adds them up) on http://127.0.0.1:" in log


# -- PostgreSQL: a broker that never reached its database is no standby -----------------------------------
@pytest.mark.extension
@pytest.mark.parametrize(
    ("wrong", "fix"),
    [
        ("port", "check the host and port in OTTERMQ_POSTGRES_URL"),
        ("role", "check the user and password in OTTERMQ_POSTGRES_URL"),
        ("database", "check the database in OTTERMQ_POSTGRES_URL"),
    ],
)
def test_a_postgresql_misconfiguration_stops_the_start_with_one_line(wrong, fix, tmp_path):
    good = urllib.parse.urlsplit(postgres_url())  # a throwaway server (.ci/postgres.py)
    netloc, path = good.netloc, good.path
    if wrong == "port":
        netloc = f"{good.username}@{good.hostname}:{_free_port()}"
    elif wrong == "role":
        netloc = f"no_such_role@{good.hostname}:{good.port}"
    else:
        path = "/no_such_database"
    url = urllib.parse.urlunsplit(good._replace(netloc=netloc, path=path))
    env = {
        "OTTERMQ_STORE": "postgresql",
        "OTTERMQ_POSTGRES_URL": url,
        "OTTERMQ_BROKER_HOST": "127.0.0.1",
        "OTTERMQ_BROKER_PORT": str(_free_port()),
        "OTTERMQ_WEB_PORT": str(_free_port()),
        "OTTERMQ_PROMETHEUS_PORT": str(_free_port()),
        "OTTERMQ_DATA_DIR": str(tmp_path / "data"),
    }
    started = time.monotonic()
    done = ottermq(env=env, cwd=tmp_path)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, done.stderr
    assert f"cannot start: OTTERMQ_POSTGRES_URL={url}: " in errors[0]
    assert fix in errors[0]
    assert "standby" not in done.stderr  # it never reached the database: no standby
    # OTTERMQ_POSTGRES_START_TIMEOUT (5 s) of retries at most for a port; a refusal stops at once
    assert took < (25 if wrong == "port" else 20), took


# -- ottermq dlq report on an archive being written ----------------------------------------------------------
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING|ERROR) ottermq\.")


@pytest.mark.extension
def test_dlq_report_straight_after_dead_letters(broker_process, tmp_path):
    archive = tmp_path / "archive"
    process = broker_process({"OTTERMQ_DLX_ARCHIVE_DIR": str(archive)})
    conn = pika.BlockingConnection(process.start().params())
    channel = conn.channel()
    channel.queue_declare("report.dlq")
    args = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "report.dlq", "x-message-ttl": 1}
    channel.queue_declare("report.work", arguments=args)
    for i in range(5):
        channel.basic_publish("", "report.work", f"m{i}".encode())
    poll_until(lambda: channel.queue_declare("report.dlq", passive=True).method.message_count == 5)
    conn.close()

    def written() -> int:  # the archive writer wakes every 0.5 s; the file stays open (.part) for 60 s
        return sum(p.read_bytes().count(b"\n") for p in archive.rglob("*.jsonl.part"))

    poll_until(lambda: written() == 5)
    out = tmp_path / "report"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTTERMQ_")}
    command = [sys.executable, "-m", "ottermq.broker", "dlq", "report", str(archive), "--out", str(out)]
    refused = subprocess.run(
        [*command, "--complete-only"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "PYTHONSAFEPATH": "1"},
    )
    assert refused.returncode == 2 and "1 .jsonl.part file(s) still being written" in refused.stderr
    # the wall time of the process, as a shell's `time` sees it (the JVM it started may outlive it a
    # few seconds, writing its class-data archive: so no waiting for the end of its output here)
    with open(tmp_path / "report.out", "w+") as stdout, open(tmp_path / "report.err", "w+") as stderr:
        started = time.monotonic()
        proc = subprocess.Popen(command, stdout=stdout, stderr=stderr, env={**env, "PYTHONSAFEPATH": "1"})
        returncode = proc.wait(timeout=600)
        wall = time.monotonic() - started
    run = subprocess.CompletedProcess(command, returncode, "", (tmp_path / "report.err").read_text())
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["records"] == 5
    assert list(archive.rglob("*.jsonl.part")) and not list(archive.rglob("*.jsonl"))  # still being written
    assert "1 archive file(s) still being written: their 5 complete line(s) so far are read too" in run.stderr
    foreign = [line for line in run.stderr.splitlines() if line and not LOG_LINE.match(line)]
    assert foreign == [], foreign  # no JVM or Spark line without --verbose (the incubator warning)
    [seconds] = re.findall(r"report written to \S+ in ([\d.]+) s", run.stderr)
    assert wall - 1.5 <= float(seconds) <= wall + 0.1, (seconds, wall)  # the whole command's wall time
