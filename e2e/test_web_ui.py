"""The web UI (issue 16) in a real browser: Debian's chromium driven by Playwright for Python.

A private ottermq (with a dead-letter archive and a reports folder) serves the UI; pika publishes and
checks what the UI did. Screenshots of each page go to ``OTTERMQ_SCREENSHOTS`` (``make screenshots``
writes the README's into docs/screenshots), else to pytest's temporary directory.
RabbitMQ's UI is another program, so every test here is an ottermq extension.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from playwright import sync_api as playwright_api

from .conftest import Broker, BrokerProcess
from .polling import poll_until
from .test_management_write import call, q

pytestmark = pytest.mark.extension
XSS_NAME = "<img src=x onerror=alert(1)>"
XSS_BODY = "<script>alert('body')</script>"


@pytest.fixture(scope="module")
def ui_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, Path, Path]]:
    root = tmp_path_factory.mktemp("webui")
    archive, reports = root / "archive", root / "reports"
    reports.mkdir()
    process = BrokerProcess(
        {
            "OTTERMQ_DLX_ARCHIVE_DIR": str(archive),
            "OTTERMQ_DLX_REPORTS_DIR": str(reports),
            "OTTERMQ_METRICS_SAMPLES_INTERVAL": "1",
        }
    )
    try:
        yield process.start(), archive, reports
    finally:
        process.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Any, str], None]:
    folder = Path(os.environ.get("OTTERMQ_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)

    def shot(page: Any, name: str) -> None:
        page.wait_for_timeout(300)  # let the charts draw
        page.screenshot(path=str(folder / f"{name}.png"), full_page=True)

    return shot


class UI:
    """One logged-in browser tab; ``dialogs`` records every alert/confirm (confirms are accepted)."""

    def __init__(self, page: Any, broker: Broker) -> None:
        self.page = page
        self.broker = broker
        self.dialogs: list[tuple[str, str]] = []
        self.errors: list[str] = []
        page.on("dialog", self._dialog)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.set_default_timeout(15_000)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append((dialog.type, dialog.message))
        dialog.accept()

    def go(self, hash_: str) -> Any:
        self.page.goto(f"{self.broker.management_url}/{hash_}")
        self.page.wait_for_selector("main h1")
        return self.page

    def login(self, user: str = "guest", password: str = "guest") -> None:
        self.page.goto(self.broker.management_url + "/")
        self.page.fill("input[name=username]", user)
        self.page.fill("input[name=password]", password)
        self.page.click("#login-form button[type=submit]")

    def flash(self) -> str:
        self.page.wait_for_selector("#flash:not([hidden])")
        return str(self.page.inner_text("#flash"))

    def alerts(self) -> list[str]:
        return [message for kind, message in self.dialogs if kind == "alert"]


@pytest.fixture
def ui(browser: Any, ui_broker: tuple[Broker, Path, Path]) -> Iterator[UI]:
    context = browser.new_context(viewport={"width": 1400, "height": 900}, accept_downloads=True)
    tab = UI(context.new_page(), ui_broker[0])
    tab.login()
    tab.page.wait_for_selector("#nav a")
    try:
        yield tab
    finally:
        context.close()
    assert tab.errors == [], tab.errors
    assert tab.alerts() == []  # nothing a client sent ever ran as script


@pytest.fixture
def amqp(ui_broker: tuple[Broker, Path, Path]) -> Iterator[Any]:
    broker = ui_broker[0]
    connection = pika.BlockingConnection(broker.params())
    try:
        yield connection.channel()
    finally:
        if connection.is_open:
            connection.close()


def name(prefix: str) -> str:
    return f"ui.{prefix}.{uuid.uuid4().hex[:6]}"


# the one poll helper at this file's pace
eventually = functools.partial(poll_until, timeout=20, interval=0.2)


# -- login ---------------------------------------------------------------------------------------------
def test_login_form_logout_and_refusals(browser, ui_broker, shots):
    broker = ui_broker[0]
    assert call(broker, "/api/users/ui-plain", "PUT", {"password": "pw", "tags": ""})[0] in (201, 204)
    context = browser.new_context(viewport={"width": 1000, "height": 700})
    tab = UI(context.new_page(), broker)
    try:
        tab.page.goto(broker.management_url + "/")
        assert tab.page.get_attribute("input#username", "name") == "username"
        assert tab.page.get_attribute("input#password", "name") == "password"
        shots(tab.page, "login")
        tab.login("guest", "wrong")
        tab.page.wait_for_selector("#login-error:has-text('Login failed')")
        tab.login("ui-plain", "pw")
        tab.page.wait_for_selector("#login-error:has-text('no management tag')")
        tab.login()
        tab.page.wait_for_selector("#nav a")
        assert "guest" in tab.page.inner_text("#whoami")
        tab.page.reload()  # the session survives a reload of the tab...
        tab.page.wait_for_selector("#nav a")
        assert tab.page.evaluate("sessionStorage.length") == 1
        assert tab.page.evaluate("localStorage.length") == 0
        tab.page.click("#logout")  # ...and logging out forgets it
        tab.page.wait_for_selector("#login:not([hidden])")
        assert tab.page.evaluate("sessionStorage.length") == 0
    finally:
        context.close()


def test_login_form_refuses_an_empty_password_and_takes_a_non_ascii_one(browser, ui_broker):
    broker = ui_broker[0]
    empty, accented = f"ui-empty-{uuid.uuid4().hex[:6]}", f"ui-ete-{uuid.uuid4().hex[:6]}"
    assert call(broker, f"/api/users/{empty}", "PUT", {"password": "", "tags": "administrator"})[0] == 201
    assert (
        call(broker, f"/api/users/{accented}", "PUT", {"password": "été-ß", "tags": "management"})[0] == 201
    )
    context = browser.new_context(viewport={"width": 1000, "height": 700})
    tab = UI(context.new_page(), broker)
    try:
        tab.login(empty, "")
        tab.page.wait_for_selector("#login-error:has-text('Login failed')")
        tab.login(accented, "été-ß")  # the page sends UTF-8, compared as the bytes sent
        tab.page.wait_for_selector("#nav a")
        assert accented in tab.page.inner_text("#whoami")
    finally:
        context.close()
        for user in (empty, accented):
            call(broker, f"/api/users/{user}", "DELETE")


# -- overview and queues -------------------------------------------------------------------------------
def test_overview_shows_live_counts(ui, amqp, shots):
    queue = name("live")
    amqp.queue_declare(queue)
    page = ui.go("#/")
    before = int(page.inner_text(".card:has(.l:text-is('Ready')) .n").replace(",", ""))
    for i in range(7):
        amqp.basic_publish("", queue, f"m{i}".encode())
    ready = page.locator(".card:has(.l:text-is('Ready')) .n")
    playwright_api.expect(ready).to_have_text(str(before + 7), timeout=20_000)  # refreshed without a reload
    assert page.locator("canvas").count() == 3
    shots(page, "overview")
    amqp.queue_delete(queue)


def test_queues_list_filters_sorts_and_pages(ui, amqp, shots):
    prefix = name("list")
    for i in range(3):
        amqp.queue_declare(f"{prefix}.{i}")
        for _ in range(i):
            amqp.basic_publish("", f"{prefix}.{i}", b"x")
    page = ui.go("#/queues")
    page.fill("input[type=search]", prefix)
    page.wait_for_selector(f"td a:text-is('{prefix}.2')")
    assert page.locator("tbody tr").count() == 3
    page.click("th:text-is('Ready')")
    page.click("th:text-is('Ready')")  # descending
    page.wait_for_selector("th.sorted-desc")
    first = page.locator("tbody tr").first.locator("td").nth(1)
    playwright_api.expect(first).to_have_text(f"{prefix}.2")
    page.check("input[aria-label=regex]")
    page.fill("input[type=search]", prefix.replace(".", r"\.") + r"\.[01]$")
    playwright_api.expect(page.locator("tbody tr")).to_have_count(2)
    shots(page, "queues")
    for i in range(3):
        amqp.queue_delete(f"{prefix}.{i}")


def test_queue_page_publish_get_purge_delete(ui, amqp, shots):
    queue = name("page")
    amqp.queue_declare(queue, arguments={"x-max-length": 100})
    page = ui.go(f"#/queues/%2F/{q(queue)}")
    page.fill("form.stack textarea[name=payload]", "hello from the UI")
    page.fill("form.stack textarea[name=headers]", "source=ui")
    page.click("form.stack button:text-is('Publish message')")
    assert "Publish: done" in ui.flash()
    assert amqp.queue_declare(queue, passive=True).method.message_count == 1
    page.click("button:text-is('Get message(s)')")
    page.wait_for_selector("pre.payload")
    assert page.inner_text("pre.payload") == "hello from the UI"
    assert amqp.queue_declare(queue, passive=True).method.message_count == 1  # requeued (the default mode)
    playwright_api.expect(page.locator(".card:has(.l:text-is('Ready')) .n")).to_have_text("1", timeout=20_000)
    assert "x-max-length" in page.inner_text("table.kv")
    shots(page, "queue")
    page.click("button:text-is('Purge messages')")
    assert ui.dialogs[-1] == ("confirm", f"Purge every ready message of queue '{queue}'?")
    eventually(lambda: amqp.queue_declare(queue, passive=True).method.message_count == 0)
    page.click("button:text-is('Delete queue')")
    page.wait_for_url("**/#/queues")
    assert call(ui.broker, f"/api/queues/%2F/{q(queue)}")[0] == 404


def test_names_and_payloads_are_escaped(ui, amqp):
    amqp.queue_declare(XSS_NAME)
    props = pika.BasicProperties(headers={"<b>h</b>": "<i>v</i>"})
    amqp.basic_publish("", XSS_NAME, XSS_BODY.encode(), props)
    page = ui.go("#/queues")
    page.fill("input[type=search]", "onerror")
    page.wait_for_selector(f"td a:text-is('{XSS_NAME}')")
    page.click(f"td a:text-is('{XSS_NAME}')")
    page.wait_for_selector("h1 code")
    assert page.inner_text("h1 code") == XSS_NAME
    page.click("button:text-is('Get message(s)')")
    page.wait_for_selector("pre.payload")
    assert page.inner_text("pre.payload") == XSS_BODY
    assert "<i>v</i>" in page.inner_text("div.message")
    assert page.locator("main img").count() == 0 and page.locator("main script").count() == 0
    amqp.queue_delete(XSS_NAME)
    # the ui fixture asserts that no alert() ran


# -- exchanges, connections ----------------------------------------------------------------------------
def test_exchange_publish_form_and_bindings(ui, amqp, shots):
    exchange, queue = name("x"), name("bound")
    amqp.exchange_declare(exchange, "topic")
    amqp.queue_declare(queue)
    amqp.queue_bind(queue, exchange, "a.#")
    page = ui.go(f"#/exchanges/%2F/{q(exchange)}")
    page.wait_for_selector(f"td a:text-is('{queue}')")
    page.fill("form.stack input[name=routing_key]", "a.b")
    page.fill("form.stack textarea[name=payload]", "via exchange")
    page.click("form.stack button:text-is('Publish message')")
    assert "Publish: done" in ui.flash()
    method, _, body = eventually(lambda: (got := amqp.basic_get(queue, auto_ack=True))[0] and got)
    assert body == b"via exchange" and method.routing_key == "a.b"
    shots(page, "exchange")
    ui.go("#/exchanges")
    shots(ui.page, "exchanges")
    amqp.queue_delete(queue)
    amqp.exchange_delete(exchange)


def test_close_a_connection(ui, ui_broker, shots):
    broker = ui_broker[0]
    victim = pika.BlockingConnection(broker.params(client_properties={"connection_name": "ui-victim"}))
    try:
        page = ui.go("#/connections")
        row = page.locator("tbody tr", has_text="guest").first
        row.wait_for()
        shots(page, "connections")
        page.locator("tbody tr").first.locator("td").nth(1).locator("a").click()
        page.wait_for_selector("button:text-is('Force close')")
        shots(page, "connection")
        page.click("button:text-is('Force close')")
        page.wait_for_url("**/#/connections")

        def closed() -> bool:
            try:
                victim.process_data_events(0.1)
            except pika.exceptions.ConnectionClosedByBroker as exc:
                return exc.reply_code == 320 and "Closed via management UI" in exc.reply_text
            return False

        assert eventually(closed)
    finally:
        if victim.is_open:
            victim.close()
    ui.go("#/channels")
    shots(ui.page, "channels")


# -- admin ---------------------------------------------------------------------------------------------
def test_admin_vhosts_users_permissions_and_visibility(browser, ui, shots):
    vhost, user = name("vh"), f"ui-user-{uuid.uuid4().hex[:6]}"
    page = ui.go("#/admin")
    page.fill("input[name=name] >> nth=0", vhost)
    page.click("button:text-is('Add virtual host')")
    page.wait_for_selector(f"td:text-is('{vhost}')")
    page.fill("input[placeholder=management]", "management")
    page.locator("form:has(button:text-is('Add / update user')) input[name=name]").fill(user)
    page.locator("form:has(button:text-is('Add / update user')) input[name=password]").fill("secret")
    page.click("button:text-is('Add / update user')")
    page.wait_for_selector(f"td:text-is('{user}')")
    page.select_option("select[name=user]", user)
    page.select_option("select[name=vhost]", vhost)
    page.click("button:text-is('Set permission')")
    page.wait_for_selector(f"tr:has(td:text-is('{user}')):has(td:text-is('{vhost}'))")
    shots(page, "admin")
    # the new user sees its vhost's queues only
    assert call(ui.broker, f"/api/queues/{q(vhost)}/{q('mine')}", "PUT", {"durable": False})[0] == 201
    assert call(ui.broker, "/api/queues/%2F/ui.notmine", "PUT", {"durable": False})[0] == 201
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    other = UI(context.new_page(), ui.broker)
    try:
        other.login(user, "secret")
        other.page.wait_for_selector("#nav a")
        assert other.page.locator("#nav a:text-is('Admin')").count() == 0
        other.go("#/queues")
        other.page.wait_for_selector("td a:text-is('mine')")
        assert other.page.locator("td a:text-is('ui.notmine')").count() == 0
    finally:
        context.close()
    call(ui.broker, "/api/queues/%2F/ui.notmine", "DELETE")
    call(ui.broker, f"/api/vhosts/{q(vhost)}", "DELETE")
    call(ui.broker, f"/api/users/{q(user)}", "DELETE")


def test_an_empty_password_field_adds_a_user_without_a_password(ui):
    user = f"ui-cert-{uuid.uuid4().hex[:6]}"
    page = ui.go("#/admin")
    form = page.locator("form:has(button:text-is('Add / update user'))")
    form.locator("input[name=name]").fill(user)
    page.click("button:text-is('Add / update user')")
    page.wait_for_selector(f"tr:has(td:text-is('{user}')):has(td:text-is('no (certificate login)'))")
    assert call(ui.broker, f"/api/users/{q(user)}")[2]["password_hash"] == ""
    assert call(ui.broker, f"/api/users/{q(user)}", "DELETE")[0] == 204


def test_edit_a_policy(ui, amqp, shots):
    queue = name("pol")
    policy = name("policy")
    amqp.queue_declare(queue)
    page = ui.go("#/policies")
    form = page.locator("form.stack").first
    form.locator("input[name=name]").fill(policy)
    form.locator("input[name=pattern]").fill("^" + queue.replace(".", r"\.") + "$")
    form.locator("select[name=apply_to]").select_option("queues")
    form.locator("textarea[name=definition]").fill("max-length=5\nmessage-ttl=60000")
    form.locator("button:text-is('Save policy')").click()
    page.wait_for_selector(f"td:text-is('{policy}')")
    path = f"/api/queues/%2F/{q(queue)}"
    info = eventually(lambda: (i := call(ui.broker, path)[2])["policy"] == policy and i)
    assert info["effective_policy_definition"] == {"max-length": 5, "message-ttl": 60000}
    page.locator(f"tr:has(td:text-is('{policy}')) button:text-is('Edit')").click()
    assert form.locator("textarea[name=definition]").input_value() == "max-length=5\nmessage-ttl=60000"
    form.locator("textarea[name=definition]").fill("max-length=2")
    form.locator("button:text-is('Save policy')").click()
    page.wait_for_selector("td code:text-is('{\"max-length\":2}')")
    assert eventually(
        lambda: (
            call(ui.broker, f"/api/queues/%2F/{q(queue)}")[2]["effective_policy_definition"]
            == {"max-length": 2}
        )
    )
    form.locator("textarea[name=definition]").fill("max-length=-1")
    form.locator("button:text-is('Save policy')").click()
    page.wait_for_selector("#flash.bad:has-text('-1 is not a valid maximum length')")  # RabbitMQ's text
    shots(page, "policies")
    page.locator(f"tr:has(td:text-is('{policy}')) button:text-is('Delete')").click()
    page.wait_for_selector(f"td:text-is('{policy}')", state="detached")
    amqp.queue_delete(queue)


def test_definitions_download_and_upload(ui, tmp_path, shots):
    queue = name("defs")
    page = ui.go("#/definitions")
    with page.expect_download() as download:
        page.click("button:text-is('Download broker definitions')")
    saved = tmp_path / "defs.json"
    download.value.save_as(saved)
    data = json.loads(saved.read_text())
    assert {"users", "vhosts", "permissions", "queues", "exchanges", "bindings", "policies"} <= data.keys()
    upload = tmp_path / "upload.json"
    item = {
        "name": queue,
        "vhost": "/",
        "durable": True,
        "auto_delete": False,
        "arguments": {"x-message-ttl": 1000},
    }
    upload.write_text(json.dumps({"queues": [item]}))
    page.set_input_files("input[type=file]", str(upload))
    page.click("button:text-is('Upload')")
    assert "Upload definitions: done" in ui.flash()
    assert call(ui.broker, f"/api/queues/%2F/{q(queue)}")[2]["arguments"] == {"x-message-ttl": 1000}
    shots(page, "definitions")
    call(ui.broker, f"/api/queues/%2F/{q(queue)}", "DELETE")
    stream = {**item, "name": queue + ".stream", "arguments": {"x-queue-type": "stream"}}
    upload.write_text(json.dumps({"queues": [stream]}))  # what ottermq skips is shown with the reason
    page.set_input_files("input[type=file]", str(upload))
    page.click("button:text-is('Upload')")
    page.wait_for_selector("h2:text-is('Upload: some items were skipped')")
    row = page.locator(f"tr:has(td:text-is('queues')):has(td:has-text('{queue}.stream'))")
    assert "stream queues are not supported" in row.inner_text()


# -- archive -------------------------------------------------------------------------------------------
def test_archive_files_and_a_rendered_report(ui, amqp, ui_broker, broker_process, shots):
    _, archive, reports = ui_broker
    dlq, work = name("adlq"), name("awork")
    # dead letters from the UI's broker stay in a .part file while it runs...
    amqp.queue_declare(work, arguments={"x-message-ttl": 1, "x-dead-letter-exchange": "amq.fanout"})
    amqp.basic_publish("", work, b"still being written")
    # ...and another broker on the same archive folder finishes its files when it stops
    other = broker_process({"OTTERMQ_DLX_ARCHIVE_DIR": str(archive)})
    connection = pika.BlockingConnection(other.start().params())
    channel = connection.channel()
    channel.queue_declare(dlq)
    channel.queue_declare(
        work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq, "x-message-ttl": 1}
    )
    for i in range(4):
        channel.basic_publish("", work, f"a{i}".encode())
    assert eventually(lambda: channel.queue_declare(dlq, passive=True).method.message_count == 4)
    connection.close()
    assert other.stop() == 0
    listing = eventually(lambda: (a := call(ui.broker, "/api/dead-letter-archive")[2])["hours"] and a)
    files = [f for hour in listing["hours"] for f in hour["files"]]
    assert sum(f["records"] for f in files if not f["writing"]) == 4
    assert any(f["writing"] for f in files)
    page = ui.go("#/archive")
    page.wait_for_selector(f"td:text-is('{listing['hours'][0]['hour']}')")
    assert "(being written)" in page.inner_text("main")
    out = reports / "today"
    command = [sys.executable, "-m", "ottermq.broker", "dlq", "report", str(archive), "--out", str(out)]
    env = dict(os.environ, PYTHONSAFEPATH="1")
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    page.reload()
    page.click("a:text-is('today')")
    page.wait_for_selector(".report-md h2")
    text = page.inner_text(".report-md")
    assert "Dead-letter report" in text and work in text
    assert page.locator(".report-md table").count() >= 3
    loaded = "[...document.querySelectorAll('.report-md img')].filter(i => i.naturalWidth > 0).length"
    assert eventually(lambda: page.evaluate(loaded) >= 1)  # the PNG charts, fetched with the login
    shots(page, "report")
    ui.go("#/archive")
    shots(ui.page, "archive")
    amqp.queue_delete(work)


# -- dead letters --------------------------------------------------------------------------------------
def test_dead_letters_decoded_and_sent_back_once(ui, amqp, shots):
    work, dlq = name("dwork"), name("ddlq")
    amqp.queue_declare(dlq)
    amqp.queue_declare(work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    for i in range(4):
        amqp.basic_publish("", work, f"late-{i}".encode(), pika.BasicProperties(expiration="1"))
    assert eventually(lambda: amqp.queue_declare(dlq, passive=True).method.message_count == 4)
    for i in range(2):
        amqp.basic_publish("", work, f"bad-{i}".encode())
    for _ in range(2):
        method, _, _ = eventually(lambda: (got := amqp.basic_get(work))[0] and got)
        amqp.basic_reject(method.delivery_tag, requeue=False)
    assert eventually(lambda: amqp.queue_declare(dlq, passive=True).method.message_count == 6)
    page = ui.go("#/dead-letters")
    page.wait_for_selector(f"td a:text-is('{dlq}')")
    assert "expired: 4" in page.inner_text("main") and "rejected: 2" in page.inner_text("main")
    shots(page, "dead-letters")
    page.click(f"td a:text-is('{dlq}')")
    page.wait_for_selector("td:text-is('rejected')")
    summary = page.locator("table").first.inner_text()
    assert "expired\t" + work in summary and "rejected\t" + work in summary
    assert page.locator("td:text-is('1')").count() >= 4  # original-expiration of the expired ones
    # two selected messages back to where they came from
    page.select_option("select[aria-label='reason filter']", "rejected")
    page.wait_for_selector("text=1–2 of 2")
    for box in page.locator("tbody input[type=checkbox]").all():
        box.check()
    shots(page, "dead-letter-queue")
    page.click("button:text-is('Send back')")
    page.wait_for_selector("progress")
    page.wait_for_selector("text=done: moved 2 of 2")
    assert ui.dialogs[-1][0] == "confirm" and ui.dialogs[-1][1].startswith("Move 2 selected message(s)")
    back = sorted(body for body in iter(lambda: amqp.basic_get(work, auto_ack=True)[2], None))
    assert back == [b"bad-0", b"bad-1"]
    # then everything matching a filter, at a rate limit
    page.select_option("select[aria-label='reason filter']", "expired")
    page.select_option("#move-form select[name=which]", "filter")
    page.fill("#move-form input[name=rate]", "20")
    page.click("button:text-is('Send back')")
    page.wait_for_selector("text=done: moved 4 of 4")
    assert "Send back done: moved 4, unroutable 0, skipped 0" in ui.flash()
    back = sorted(body for body in iter(lambda: amqp.basic_get(work, auto_ack=True)[2], None))
    assert back == [b"late-0", b"late-1", b"late-2", b"late-3"]  # each once, none left behind
    assert amqp.queue_declare(dlq, passive=True).method.message_count == 0
    page.wait_for_selector("td:text-is('done')")
    shots(page, "dead-letter-moves")
    amqp.queue_delete(work)
    amqp.queue_delete(dlq)


def test_shovels_add_status_restart_and_delete(ui, amqp, shots):
    """The Shovels page (issue 42): RabbitMQ's "Add a new shovel" form, the status table with its
    restart button, the management table with its delete button, and a refused value's text."""
    shovel, src, dest = name("shovel"), name("src"), name("dest")
    amqp.queue_declare(src, durable=True)
    for i in range(3):
        amqp.basic_publish("", src, b"%d" % i)
    page = ui.go("#/shovels")
    form = page.locator("form.stack").first
    form.locator("input[name=name]").fill(shovel)
    form.locator("input[name=src_name]").fill(src)
    form.locator("input[name=dest_name]").fill(dest)
    form.locator("input[name=forward]").check()
    form.locator("button:text-is('Add shovel')").click()
    page.wait_for_selector(f"tr:has(td:text-is('{shovel}')) span.state-running")
    assert eventually(lambda: amqp.queue_declare(dest, passive=True).method.message_count == 3)
    value = call(ui.broker, f"/api/parameters/shovel/%2F/{q(shovel)}")[2]["value"]
    assert value == {
        "ack-mode": "on-confirm",
        "dest-add-forward-headers": True,
        "dest-add-timestamp-header": False,
        "dest-queue": dest,
        "dest-uri": "amqp://",
        "reconnect-delay": 5,
        "src-delete-after": "never",
        "src-prefetch-count": 1000,
        "src-queue": src,
        "src-uri": "amqp://",
    }
    shots(page, "shovels")
    page.locator(f"tr:has(td:text-is('{shovel}')) button:text-is('Restart')").click()
    page.wait_for_selector("#flash:has-text('Restart shovel')")
    page.wait_for_selector(f"tr:has(td:text-is('{shovel}')) span.state-running")
    form.locator("input[name=name]").fill(name("bad"))
    form.locator("input[name=src_uri]").fill("nothing")
    form.locator("button:text-is('Add shovel')").click()
    page.wait_for_selector('#flash.bad:has-text("not a valid URI: {{unable_to_parse_uri,no_scheme}")')
    page.locator(f"tr:has(td:text-is('{shovel}')) button:text-is('Delete')").click()
    page.wait_for_selector(f"td:text-is('{shovel}')", state="detached")
    assert call(ui.broker, f"/api/parameters/shovel/%2F/{q(shovel)}")[0] == 404
    amqp.queue_delete(src)
    amqp.queue_delete(dest)
