"""HTTP hardening of the management and Prometheus listeners (issue "One front door").

What is proved, against a real broker process:
    * a socket that sends nothing, or half a request head, is closed within
      ``OTTERMQ_WEB_HEADER_TIMEOUT`` (+ slack for a loaded machine), 300 of them at once, while AMQP and the
      API keep working; the same for a TLS port (the handshake counts against the same time) and for a
      kept-alive connection idle past ``OTTERMQ_WEB_IDLE_TIMEOUT``;
    * ``OTTERMQ_WEB_MAX_CONNECTIONS``: the connection over the cap gets a 503 and is closed while the
      ones under it are served; once they close, new ones are served again (the per-address cap:
      ``test_http_fairness.py``);
    * API answers (errors included) carry ``Cache-Control: no-store`` and ``X-Content-Type-Options: nosniff``;
    * a state-changing request from another origin is refused with 403 before auth, from raw headers and
      from a real Chromium page on another origin (fetch and a text/plain form post, with the browser
      holding the user's Basic credentials), while same-origin pages and clients without those headers work.

RabbitMQ has none of these (its management API accepts a text/plain POST from any page), so every test
here is an ottermq extension.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import ssl
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pika
import pytest

from .conftest import Broker, BrokerProcess, _free_port
from .polling import poll_until
from .test_management_write import call, q
from .tls_certs import CA

pytestmark = pytest.mark.extension
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()
SLACK = 9.0  # seconds beyond a timeout before a test gives up: wide enough for a loaded 2-core machine
HALF_HEAD = b"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthoriz"


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


class Peer:
    """A raw client socket and everything the broker sent on it, until the broker closed it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.received = b""
        self.closed = False

    @classmethod
    def open(cls, port: int, first: bytes = b"") -> Peer:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if first:
            sock.sendall(first)
        return cls(sock)

    def poll(self) -> bool:
        """Read what has arrived without blocking; True once the broker has closed the connection."""
        self.sock.setblocking(False)
        while not self.closed:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError):
                return False
            except OSError:  # reset: closed too
                data = b""
            if not data:
                self.closed = True
            self.received += data
        return True

    def read_until_closed(self, timeout: float) -> bytes:
        self.sock.settimeout(timeout)
        while True:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed = True
                return self.received
            self.received += data

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def status_or_none(url: str, **headers: str) -> int | None:
    """One GET with Basic auth: its status, or None if the connection failed."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
    try:
        conn.request("GET", parts.path, headers={"Authorization": AUTH, **headers})
        response = conn.getresponse()
        response.read()
        return response.status
    except OSError:
        return None
    finally:
        conn.close()


def amqp_round_trip(broker: Broker) -> bool:
    connection = pika.BlockingConnection(broker.params())
    try:
        ch = connection.channel()
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", queue, b"still here")
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        return method is not None and body == b"still here"
    finally:
        connection.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[CA, Any]:
    ca = CA(tmp_path_factory.mktemp("pki"))
    return ca, ca.issue("localhost", server=True)


@pytest.fixture(scope="module")
def quick(pki: tuple[CA, Any]) -> Iterator[tuple[Broker, int]]:
    """A broker with 1 s header and idle timeouts, a cap above 300 (none per address), and HTTPS on a
    second port."""
    ca, server = pki
    tls_port = _free_port()
    env = {
        "OTTERMQ_WEB_HEADER_TIMEOUT": "1",
        "OTTERMQ_WEB_IDLE_TIMEOUT": "1",
        "OTTERMQ_WEB_MAX_CONNECTIONS": "1000",
        "OTTERMQ_WEB_MAX_CONNECTIONS_PER_ADDRESS": "0",  # all 300 come from 127.0.0.1
        "OTTERMQ_WEB_SSL": "true",
        "OTTERMQ_WEB_SSL_PORT": str(tls_port),
        "OTTERMQ_WEB_SSL_CERT_FILE": str(server.cert),
        "OTTERMQ_WEB_SSL_KEY_FILE": str(server.key),
    }
    process = BrokerProcess(env)
    try:
        yield process.start(), tls_port
    finally:
        process.close()


# -- header and idle timeouts ---------------------------------------------------------------------------
def test_silent_and_half_sent_heads_are_closed_after_the_header_timeout(quick):
    broker, _tls_port = quick
    port = _port(broker.management_url)
    silent = [Peer.open(port) for _ in range(150)]
    half = [Peer.open(port, HALF_HEAD) for _ in range(150)]
    try:
        assert amqp_round_trip(broker)  # the open sockets take nothing from AMQP
        assert status_or_none(broker.management_url + "/api/overview") == 200  # nor from other API clients
        poll_until(lambda: all([peer.poll() for peer in silent + half]), timeout=1 + SLACK, interval=0.05)
        assert {peer.received for peer in silent} == {b""}  # nothing sent: closed without a word
        assert all(peer.received.startswith(b"HTTP/1.1 408 ") for peer in half), half[0].received
        assert amqp_round_trip(broker)
        assert status_or_none(broker.management_url + "/api/overview") == 200
    finally:
        for peer in silent + half:
            peer.close()


def test_the_metrics_port_closes_silent_sockets_too(quick):
    broker, _tls_port = quick
    peers = [Peer.open(_port(broker.prometheus_url)) for _ in range(20)]
    try:
        poll_until(lambda: all([peer.poll() for peer in peers]), timeout=1 + SLACK, interval=0.05)
        assert status_or_none(broker.prometheus_url + "/metrics") == 200
    finally:
        for peer in peers:
            peer.close()


def test_a_kept_alive_connection_is_closed_when_idle(quick):
    broker, _tls_port = quick
    peer = Peer.open(_port(broker.management_url))
    try:
        peer.sock.sendall(f"GET /api/overview HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH}\r\n\r\n".encode())
        poll_until(lambda: peer.poll() or b"HTTP/1.1 200 " in peer.received, timeout=10)
        assert peer.received.startswith(b"HTTP/1.1 200 ")
        poll_until(peer.poll, timeout=1 + SLACK, interval=0.05)  # idle past OTTERMQ_WEB_IDLE_TIMEOUT
    finally:
        peer.close()


def test_a_tls_port_bounds_the_handshake_and_the_head(quick, pki):
    broker, tls_port = quick
    ca, _server = pki
    no_handshake = Peer.open(tls_port)  # TCP only: never says hello
    context = ssl.create_default_context(cafile=str(ca.cert_file))
    tls = context.wrap_socket(
        socket.create_connection(("127.0.0.1", tls_port), timeout=10), server_hostname="localhost"
    )
    tls.sendall(HALF_HEAD)
    half = Peer(tls)
    try:
        poll_until(lambda: no_handshake.poll() and half.poll(), timeout=1 + SLACK, interval=0.05)
        assert half.received.startswith(b"HTTP/1.1 408 ")
        url = f"https://localhost:{tls_port}/api/overview"
        request = urllib.request.Request(url, headers={"Authorization": AUTH})
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            assert response.status == 200  # a client that is not slow is served
    finally:
        no_handshake.close()
        half.close()


# -- connection cap -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def capped() -> Iterator[Broker]:
    process = BrokerProcess({"OTTERMQ_WEB_MAX_CONNECTIONS": "5"})
    try:
        yield process.start()
    finally:
        process.close()


@pytest.mark.parametrize("which", ["management", "prometheus"])
def test_a_connection_over_the_cap_gets_503_while_the_others_are_served(capped, which):
    url = capped.management_url if which == "management" else capped.prometheus_url
    path = "/api/overview" if which == "management" else "/metrics"
    parts = urllib.parse.urlsplit(url)
    held = [http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10) for _ in range(5)]
    try:
        for conn in held:
            conn.connect()  # accepted in this order (the listen queue is first in, first out)
        over = Peer.open(_port(url))
        answer = over.read_until_closed(timeout=10)
        over.close()
        assert answer.startswith(b"HTTP/1.1 503 "), answer
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"connection: close" in head.lower()
        assert json.loads(body) == {"error": "service_unavailable", "reason": "too many HTTP connections"}
        for conn in held:  # the five are served, twice each on the same connection
            for _ in range(2):
                conn.request("GET", path, headers={"Authorization": AUTH})
                response = conn.getresponse()
                response.read()
                assert response.status == 200
    finally:
        for conn in held:
            conn.close()
    poll_until(lambda: status_or_none(url + path) == 200, timeout=10, interval=0.05)  # their places are free


# -- security headers ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "auth", "status"),
    [
        ("/api/overview", True, 200),
        ("/api/queues/%2F/no-such-queue", True, 404),
        ("/api/overview", False, 401),
        ("/api/nowhere", True, 404),
    ],
)
def test_api_answers_are_not_stored_nor_sniffed(broker, path, auth, status):
    got, headers, _body = call(broker, path, auth=None if auth else ("guest", "wrong"))
    assert got == status
    assert headers.get("cache-control") == "no-store"
    assert headers.get("x-content-type-options") == "nosniff"


def test_the_web_ui_keeps_its_caching_and_is_not_sniffed(broker):
    for path in ("/", "/ui/app.js"):
        request = urllib.request.Request(broker.management_url + path)
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert response.headers["Cache-Control"] == "no-cache"


# -- cross-site writes ----------------------------------------------------------------------------------
REFUSED = {"error": "forbidden", "reason": "cross-site request refused"}


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"},
        {"Origin": "https://{own}"},
    ],
)
def test_a_write_from_another_origin_is_refused_before_auth(broker, unique, headers):
    own = urllib.parse.urlsplit(broker.management_url).netloc
    headers = {k: v.replace("{own}", own) for k, v in headers.items()}
    path = f"/api/queues/%2F/{q(unique('xs'))}"
    for auth in (("guest", "guest"), ("guest", "wrong")):
        status, got_headers, body = call(broker, path, "PUT", {"durable": False}, auth=auth, headers=headers)
        assert (status, body) == (403, REFUSED)
        assert got_headers.get("cache-control") == "no-store"
    assert call(broker, path)[0] == 404  # nothing was created
    assert call(broker, "/api/overview", headers=headers)[0] == 200  # reads are not refused


@pytest.mark.parametrize(
    "headers", [{}, {"Origin": "{own}"}, {"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}]
)
def test_a_write_from_the_same_origin_or_without_browser_headers_works(broker, unique, headers):
    own = broker.management_url
    headers = {k: v.replace("{own}", own) for k, v in headers.items()}
    path = f"/api/queues/%2F/{q(unique('ss'))}"
    assert call(broker, path, "PUT", {"durable": False}, headers=headers)[0] == 201
    assert call(broker, path, "DELETE", headers=headers)[0] == 204


EVIL_PAGE = """<!doctype html><html><body>
<form id="f" method="POST" enctype="text/plain" action="{api}/api/definitions">
<input name='{{"queues":[{{"name":"{form_q}","vhost":"/","durable":false,"auto_delete":false,
"arguments":{{}}}}],"x":"' value='"}}'>
</form>
<script>
window.results = {{}};
const api = "{api}";
fetch(api + "/api/queues/%2F/{put_q}", {{method: "PUT", credentials: "include",
      headers: {{"Authorization": "{auth}", "Content-Type": "application/json"}}, body: "{{}}"}})
  .then(r => results.put = r.status, e => results.put = String(e));
fetch(api + "/api/definitions", {{method: "POST", mode: "no-cors", credentials: "include",
      headers: {{"Content-Type": "text/plain"}},
      body: JSON.stringify({{queues: [{{name: "{nocors_q}", vhost: "/", durable: false, auto_delete: false,
                                       arguments: {{}}}}]}})}})
  .then(r => results.nocors = r.type, e => results.nocors = String(e));
</script></body></html>"""


@pytest.fixture
def other_origin() -> Iterator[Callable[[str], str]]:
    """``serve(html) -> path``: a tiny web server on another port of 127.0.0.1 serving those pages."""
    pages: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = pages.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def serve(html: str) -> int:
        pages["/evil.html"] = html.encode()
        return int(server.server_address[1])

    try:
        yield serve
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("page_host", ["localhost", "127.0.0.1"])  # cross-site, then same-site other port
def test_a_page_on_another_origin_cannot_create_queues(broker, browser, other_origin, unique, page_host):
    put_q, form_q, nocors_q = unique("put"), unique("form"), unique("nocors")
    html = EVIL_PAGE.format(
        api=broker.management_url, put_q=q(put_q), form_q=form_q, nocors_q=nocors_q, auth=AUTH
    )
    port = other_origin(html)
    # the browser holds the user's Basic credentials, as after a login prompt on the API: it answers 401s
    context = browser.new_context(http_credentials={"username": "guest", "password": "guest"})
    try:
        page = context.new_page()
        page.goto(f"http://{page_host}:{port}/evil.html")
        page.wait_for_function("window.results.put !== undefined && window.results.nocors !== undefined")
        results = page.evaluate("window.results")
        assert results["put"] == "TypeError: Failed to fetch"  # its CORS preflight (OPTIONS) got no allowance
        assert results["nocors"] == "opaque"  # sent without a preflight; its answer unreadable, as always
        posted = page.expect_response(
            lambda r: (
                r.request.method == "POST"
                and "/api/definitions" in r.url
                and r.request.resource_type == "document"
            )
        )
        with posted as answer:
            page.evaluate("document.getElementById('f').submit()")
        assert answer.value.status == 403  # refused, not a login failure (before: 204, definitions imported)
        page.wait_for_load_state()
        assert json.loads(page.inner_text("body")) == REFUSED
        for name in (put_q, form_q, nocors_q):
            assert call(broker, f"/api/queues/%2F/{q(name)}")[0] == 404, name
    finally:
        context.close()


def test_a_page_on_the_broker_origin_can_write(broker, browser, unique):
    name = unique("same")
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(broker.management_url + "/")
        script = """async ([path, auth]) => (await fetch(path, {method: "PUT", body: "{}",
                    headers: {"Authorization": auth, "Content-Type": "application/json"}})).status"""
        assert page.evaluate(script, [f"/api/queues/%2F/{q(name)}", AUTH]) == 201
        assert call(broker, f"/api/queues/%2F/{q(name)}")[0] == 200
    finally:
        context.close()


# -- archive folders: links out are not followed --------------------------------------------------------
def test_report_links_out_of_the_reports_folder_are_404(broker_process, tmp_path):
    reports, secret = tmp_path / "reports", tmp_path / "secret"
    (reports / "mine" / "charts").mkdir(parents=True)
    (secret / "charts").mkdir(parents=True)
    for folder in (reports / "mine", secret):
        (folder / "summary.json").write_text(json.dumps({"records": 1}))
        (folder / "report.md").write_text(f"# {folder.name}")
        (folder / "charts" / "a.png").write_bytes(b"\x89PNG")
    (reports / "leak").symlink_to(secret, target_is_directory=True)  # a whole report out of the folder
    (reports / "mine" / "charts" / "b.png").symlink_to(secret / "charts" / "a.png")
    (reports / "alias").symlink_to(reports / "mine", target_is_directory=True)  # within: followed
    broker = broker_process({"OTTERMQ_DLX_REPORTS_DIR": str(reports)}).start()
    base = "/api/dead-letter-archive/reports"
    assert sorted(r["name"] for r in call(broker, base)[2]["reports"]) == ["alias", "mine"]
    assert call(broker, f"{base}/mine")[2]["markdown"] == "# mine"
    assert call(broker, f"{base}/alias")[0] == 200
    assert call(broker, f"{base}/leak")[0] == 404
    assert call(broker, f"{base}/leak/charts/a.png")[0] == 404
    assert call(broker, f"{base}/mine/charts/b.png")[0] == 404
    request = urllib.request.Request(
        broker.management_url + f"{base}/mine/charts/a.png", headers={"Authorization": AUTH}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.read() == b"\x89PNG"
