"""End-to-end fixtures: a real broker process, real clients, real sockets.

Which broker:
    * ``AMQP_URL`` set (e.g. ``amqp://guest:guest@127.0.0.1:5672/%2F``): every test runs against that broker
      (a real RabbitMQ for ``make conformance``); tests marked ``@pytest.mark.extension`` are skipped there.
    * otherwise ``python -m ottermq.broker`` is started once per session on a free port with a temp data dir.

What may depend on the broker (``broker.is_ottermq``): only a fixture choosing how to reach, start or restart
the broker under test, and a test marked ``@pytest.mark.extension``. An unmarked test claims RabbitMQ's
behaviour and must assert the same thing on both brokers: no ``is_ottermq`` in its body or in a helper
deciding what it asserts. Where ottermq does more (an extra header, an argument RabbitMQ refuses), the
unmarked test asserts what both do and an ``extension`` test asserts the extra.

Helpers: pytest runs with ``--import-mode=importlib`` and ``e2e/`` has no ``__init__.py``, so it is imported
as the namespace package ``e2e`` and nothing is added to ``sys.path``: plain helpers are sibling modules
imported relatively (``from .polling import poll_until``, ``from .tls_certs import CA``); what needs
pytest's machinery (set-up, clean-up, per-test state) is a fixture defined here:

    broker            session: ``.host .port .vhost .url .is_ottermq`` and ``.params(**overrides)`` for pika;
                      ``.management_url``: the management API's base URL (``MANAGEMENT_URL`` under AMQP_URL);
                      ``.prometheus_url``: the metrics base URL (``PROMETHEUS_URL`` under AMQP_URL);
                      ``.api(path, method, body, auth=, raw=, headers=) -> (status, json)``: one
                      management API request.
    unique            ``unique("orders") -> "e2e.orders.<test>.<hex>"``; every name handed out is deleted as a
                      queue AND as an exchange after the test, so re-runs on a long-lived RabbitMQ stay clean.
    poll_until        the function of ``e2e/polling.py`` (import it instead): ``poll_until(fn, timeout=5,
                      interval=0.01, what=, explain=)`` -> fn()'s first truthy value, or fail with what
                      was awaited and the last value; ``poll_until_async`` there is its twin for asyncio.
    connect           ``connect(**param_overrides) -> pika.BlockingConnection``, closed after the test.
    channel           a channel on a fresh ``connect()`` connection (the most common need).
    channel_error     ``channel_error(fn, code, text)``: fn() must make the broker close the channel with
                      exactly that reply code and text; returns the pika exception.
    connection_error  the same for a Connection.Close.
    raw_connect       ``raw_connect(handshake=True, heartbeat=0, ...) -> RawConnection``: AMQP over a plain
                      socket with pamqp, for protocol errors pika cannot express.
    declare           ``declare(ch, name="q", *, exclusive=False, **arguments) -> queue``: a ``unique`` queue
                      with these x-arguments.
    with_dlq          ``with_dlq(ch, name="work", **arguments) -> (queue, dlq)``: a ``unique`` DLQ and a queue
                      dead-lettering into it through the default exchange.
    drain             ``drain(ch, queue, redelivered=False)``: every message now in the queue (auto-ack), as
                      bodies, or ``(body, redelivered)`` pairs.
    expect_message    ``expect_message(ch, queue, auto_ack=True, timeout=3) -> (method, props, body)``: poll
                      ``basic.get`` until a message arrives, or fail.
    nothing_for       ``nothing_for(ch, queue_or_queues, seconds)``: every ``basic.get`` in that window finds
                      the queue(s) empty (a bounded wait for "nothing arrives").
    restartable       ``restartable("sigterm"|"sigkill") -> (broker, restart)``: a private ottermq process, or
                      under ``AMQP_URL`` the local RabbitMQ (``rabbitmqctl stop_app``/``start_app``).

Reply texts longer than 255 bytes are compared the way RabbitMQ sends them: first 252 bytes + "..."
(``reply_text``).

Rules for tests: no bare sleeps (``poll_until``, a socket read timeout or a bounded
``process_data_events(time_limit=...)`` when checking that nothing else arrives), no TTLs here, delete what
you create (``unique`` names do it for you), keep each file to a few seconds.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pamqp.base
import pamqp.commands
import pamqp.exceptions
import pamqp.frame
import pamqp.heartbeat
import pika
import pika.exceptions
import pytest

from . import polling

FRAME_HEADER_SIZE = 7
# Spark JVMs started by the tests (doc snippets, the web UI's reports) use the tests' quick settings
os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).parents[1] / "tests" / "spark" / "conf"))


# --------------------------------------------------------------------------------------------------------
# markers
# --------------------------------------------------------------------------------------------------------
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip ottermq-only tests when running against a foreign broker (``AMQP_URL``)."""
    if item.get_closest_marker("extension") is not None and os.environ.get("AMQP_URL"):
        pytest.skip("ottermq extension: not run against AMQP_URL")


# --------------------------------------------------------------------------------------------------------
# broker
# --------------------------------------------------------------------------------------------------------
@dataclass
class Broker:
    """Where the broker under test listens, and how to reach it with pika."""

    host: str
    port: int
    vhost: str = "/"
    user: str = "guest"
    password: str = "guest"
    is_ottermq: bool = True
    log_path: Path | None = None
    # management HTTP API base (no path): ours on a free port, or MANAGEMENT_URL / RabbitMQ's 15672
    management_url: str = "http://127.0.0.1:15672"
    # Prometheus metrics base (no path): ours on a free port, or PROMETHEUS_URL / RabbitMQ's 15692
    prometheus_url: str = "http://127.0.0.1:15692"

    @property
    def url(self) -> str:
        vhost = urllib.parse.quote(self.vhost, safe="")
        return f"amqp://{self.user}:{self.password}@{self.host}:{self.port}/{vhost}"

    def params(self, **overrides: Any) -> pika.ConnectionParameters:
        """pika parameters for this broker; keyword arguments override the defaults."""
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "virtual_host": self.vhost,
            "credentials": pika.PlainCredentials(self.user, self.password),
            "heartbeat": 0,
            "blocked_connection_timeout": 10,
            "socket_timeout": 10,
            "stack_timeout": 10,
            "connection_attempts": 1,
        }
        kwargs.update(overrides)
        return pika.ConnectionParameters(**kwargs)

    def api(
        self,
        path: str,
        method: str = "GET",
        body: Any = None,
        *,
        auth: tuple[str, str] | None = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """``(status, decoded JSON body or None)`` of one management API request (see :meth:`http`)."""
        status, _, answer = self.http(path, method, body, auth=auth, raw=raw, headers=headers)
        return status, answer

    def http(
        self,
        path: str,
        method: str = "GET",
        body: Any = None,
        *,
        auth: tuple[str, str] | None = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        """``(status, headers with lower-case names, decoded JSON body or None; text if not JSON)`` of
        one management API request (``path`` from ``/api``); ``body`` is sent as JSON, ``raw`` as it
        is; ``auth`` defaults to this broker's user."""
        user, password = auth if auth is not None else (self.user, self.password)
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.management_url + path, data=data, method=method)
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for key, value in (headers or {}).items():
            req.add_header(key, value)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, answer, found = resp.status, resp.read(), resp.headers
        except urllib.error.HTTPError as err:
            status, answer, found = err.code, err.read(), err.headers
        lowered = {k.lower(): v for k, v in found.items()}
        try:
            return status, lowered, json.loads(answer) if answer.strip() else None
        except ValueError:
            return status, lowered, answer.decode(errors="replace")

    def log_tail(self, lines: int = 60) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "<no broker log>"
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def _broker_from_url(url: str) -> Broker:
    parts = urllib.parse.urlsplit(url)
    vhost = urllib.parse.unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    return Broker(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5672,
        vhost=vhost,
        user=urllib.parse.unquote(parts.username or "guest"),
        password=urllib.parse.unquote(parts.password or "guest"),
        is_ottermq=False,
        management_url=os.environ.get("MANAGEMENT_URL", "http://127.0.0.1:15672").rstrip("/"),
        prometheus_url=os.environ.get("PROMETHEUS_URL", "http://127.0.0.1:15692").rstrip("/"),
    )


def _ephemeral_low() -> int:
    """The first port the kernel hands out to outgoing connections (Linux's ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# RabbitMQ's and Erlang's ports: a RabbitMQ restarted by a test must find them free
RABBITMQ_PORTS = {4369, 5671, 5672, 15671, 15672, 15692, 25672}
_PORTS_BELOW = _ephemeral_low()


_HANDED_OUT: set[int] = set()  # ports this process gave a broker (not bound yet while it starts)


def _port_range() -> tuple[int, int]:
    """This test process's share of the ports below the ephemeral range: each pytest-xdist worker draws
    from its own slice, so two workers never pick the same port in the second before its broker binds."""
    low, high = max(1024, _PORTS_BELOW - 12000), _PORTS_BELOW
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if worker.startswith("gw") and worker[2:].isdigit() and count > 1:
        size = (high - low) // count
        low += int(worker[2:]) % count * size
        high = low + size
    return low, high


def _free_port() -> int:
    """A free port below the range the kernel gives outgoing connections: a broker restarted on its
    ports must find them free, and a client's connection (a reconnect loop, another test's) can take an
    ephemeral port that a stopped broker had just bound and handed back. Never one this process handed
    out before (its broker may still be starting), nor one another xdist worker may hand out."""
    rng = random.Random()
    low, high = _port_range()
    for _ in range(200):
        port = rng.randrange(low, high)
        if port in RABBITMQ_PORTS or port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _HANDED_OUT.add(port)
            return port
    with socket.socket() as s:  # a crowded machine: whatever the kernel gives
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a broker's workers)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_bytes()
        except OSError:
            continue
        if int(text[text.rfind(b")") + 2 :].split()[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _give_default_vhost_to_the_last_worker(env: dict[str, str], data_dir: Path) -> int:
    """With ``OTTERMQ_WORKERS`` > 1 (``make test-workers``), the suite's vhost ``/`` belongs to the last
    worker, so that every connection to it is handed over by worker 0 (docs/workers.md): the
    assignment file is written before the first start, as the broker would keep it."""
    workers = env.get("OTTERMQ_WORKERS", "1").strip().lower()
    count = (os.cpu_count() or 1) if workers == "auto" else int(workers) if workers.isdigit() else 1
    assignment = data_dir / "workers.json"
    if count > 1 and not assignment.exists() and not (data_dir / "ottermq.db").exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        assignment.write_text(json.dumps({"workers": count, "vhosts": {"/": count - 1}}))
    return count


class BrokerProcess:
    """One ``python -m ottermq.broker`` process on a free port with its own data dir.

    ``start``/``stop`` may be called again (same port and data dir) to test restarts; ``kill``
    sends SIGKILL for crash tests. Extra ``OTTERMQ_*`` settings come from ``env``.
    """

    def __init__(self, env: dict[str, str] | None = None, data_dir: Path | None = None) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="ottermq-e2e-"))
        self.data_dir = data_dir or self.tmp / "data"
        self.port = _free_port()
        self.web_port = _free_port()  # never RabbitMQ's 15672, which CI's RabbitMQ holds
        self.prometheus_port = _free_port()  # nor its 15692
        self.broker = Broker(
            host="127.0.0.1",
            port=self.port,
            log_path=self.tmp / "broker.log",
            management_url=f"http://127.0.0.1:{self.web_port}",
            prometheus_url=f"http://127.0.0.1:{self.prometheus_port}",
        )
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.died = False

    def start(self, timeout: float | None = None) -> Broker:
        """Start (or start again) and wait until the AMQP port is served: up to ``timeout`` seconds,
        by default 30 (60 with ``OTTERMQ_WORKERS``: every worker starts first), a ceiling for a
        machine busy with other tests, not a target."""
        workers = self.launch()
        if timeout is None:
            timeout = 60.0 if workers > 1 else 30.0
        self.wait_until_serving(timeout)
        return self.broker

    def wait_until_serving(self, timeout: float = 30.0) -> None:
        """Wait until the AMQP port is served (fails if the process exits or ``timeout`` passes)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not _port_open(self.broker.host, self.port):
            if self.proc.poll() is not None:
                self.died = True
                pytest.fail(f"ottermq exited with {self.proc.returncode} during startup:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"ottermq did not listen on {self.port} within {timeout} s:\n{self.log_tail()}")
            time.sleep(0.05)

    def store_env(self) -> dict[str, str]:
        """The settings a command line tool needs to open this broker's store (its data dir; with
        ``OTTERMQ_STORE=postgresql`` the database and schema too)."""
        env = {"OTTERMQ_DATA_DIR": str(self.data_dir)}
        store = self.extra_env.get("OTTERMQ_STORE", os.environ.get("OTTERMQ_STORE", "sqlite")).lower()
        if store == "postgresql":
            env.update(
                OTTERMQ_STORE=store,
                OTTERMQ_POSTGRES_URL=self.extra_env.get("OTTERMQ_POSTGRES_URL") or postgres_url(),
                OTTERMQ_POSTGRES_SCHEMA=self.extra_env.get("OTTERMQ_POSTGRES_SCHEMA")
                or schema_for(self.data_dir),
            )
        return env

    def launch(self) -> int:
        """Start the process without waiting for it to serve (a standby binds nothing until it takes
        over); returns its number of worker processes."""
        env = dict(os.environ)
        env.update(
            OTTERMQ_BROKER_HOST=self.broker.host,
            OTTERMQ_BROKER_PORT=str(self.port),
            OTTERMQ_DATA_DIR=str(self.data_dir),
            OTTERMQ_WEB_PORT=str(self.web_port),
            OTTERMQ_PROMETHEUS_PORT=str(self.prometheus_port),
            LOG_LEVEL="INFO",
            PYTHONSAFEPATH="1",
        )
        env.update(self.extra_env)
        env.update(self.store_env())  # make test's PostgreSQL pass: a schema per data dir
        workers = _give_default_vhost_to_the_last_worker(env, self.data_dir)
        log = open(self.broker.log_path, "ab")  # noqa: SIM115 - the child keeps its own handle
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ottermq.broker"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.tmp,
            )
        finally:
            log.close()
        return workers

    def log_tail(self, lines: int = 60) -> str:
        return self.broker.log_tail(lines)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int | None:
        """Signal the process and wait; returns its exit code (None if it had to be killed)."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is not None:
            self.died = self.died or proc.returncode not in (0, -signal.SIGTERM)
            return proc.returncode
        proc.send_signal(sig)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None

    def pids(self) -> list[int]:
        """The broker's process, then its worker processes (``OTTERMQ_WORKERS``)."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        return [self.proc.pid, *_children(self.proc.pid)]

    def kill(self) -> None:
        """SIGKILL: the crash a store must survive (with ``OTTERMQ_WORKERS``, of every worker process:
        the whole broker crashes, not worker 0 alone, whose workers would then stop cleanly)."""
        if self.proc is not None and self.proc.poll() is None:
            for pid in self.pids()[1:]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        crashed = self.proc is not None and self.proc.poll() is not None and self.proc.returncode > 0
        self.stop()
        if crashed or self.died:
            print(
                f"\nottermq died during the test (exit {self.proc and self.proc.returncode}); log tail:\n"
                f"{self.log_tail()}\n(data dir and full log kept in {self.tmp})"
            )
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


# --------------------------------------------------------------------------------------------------------
# PostgreSQL (OTTERMQ_STORE=postgresql)
# --------------------------------------------------------------------------------------------------------
_POSTGRES: dict[str, Any] = {}
POSTGRES_SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "postgres.py"


def postgres_url() -> str:
    """The PostgreSQL server of the session: ``TEST_POSTGRES_URL`` (``make test`` starts one for
    every test process), or one started now by ``.ci/postgres.py`` and stopped when the session ends.
    Fails (not skips) when PostgreSQL is not installed."""
    url = os.environ.get("TEST_POSTGRES_URL") or _POSTGRES.get("url")
    if url:
        return str(url)
    started = subprocess.run(
        [sys.executable, str(POSTGRES_SCRIPT), "start"], capture_output=True, text=True, check=False
    )
    if started.returncode:
        pytest.fail(f"cannot start a PostgreSQL for the tests:\n{started.stdout}{started.stderr}")
    url, directory = started.stdout.split()
    _POSTGRES.update(url=url, directory=directory)
    return url


def schema_for(data_dir: Path) -> str:
    """The PostgreSQL schema of the broker on ``data_dir`` (a restarted broker finds its data)."""
    return "e2e_" + uuid.uuid5(uuid.NAMESPACE_URL, str(data_dir.resolve())).hex[:16]


def pytest_sessionfinish(session: pytest.Session) -> None:
    directory = _POSTGRES.pop("directory", None)
    if directory is not None:
        subprocess.run([sys.executable, str(POSTGRES_SCRIPT), "stop", directory], check=False)


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    url = os.environ.get("AMQP_URL")
    if url:
        yield _broker_from_url(url)
        return
    process = BrokerProcess()
    try:
        yield process.start()
    finally:
        process.close()


@pytest.fixture
def broker_process() -> Iterator[Callable[..., BrokerProcess]]:
    """Factory for private ottermq processes (``extension`` tests: toggles, restarts, crashes)."""
    made: list[BrokerProcess] = []

    def make(env: dict[str, str] | None = None, data_dir: Path | None = None) -> BrokerProcess:
        process = BrokerProcess(env, data_dir)
        made.append(process)
        return process

    try:
        yield make
    finally:
        for process in made:
            process.close()


@pytest.fixture
def restartable(broker: Any, broker_process: Any) -> Callable[[str], tuple[Any, Callable[[], None]]]:
    """``restartable(how) -> (broker, restart)``: a private ottermq process that ``restart`` stops with
    SIGTERM or SIGKILL (``how``) and starts again, or under ``AMQP_URL`` the local RabbitMQ, restarted with
    ``rabbitmqctl`` (SIGTERM semantics). How to restart the broker is all that depends on which it is."""

    def make(how: str) -> tuple[Any, Callable[[], None]]:
        if broker.is_ottermq:
            process = broker_process()
            b = process.start()

            def restart_ottermq() -> None:
                if how == "sigterm":
                    assert process.stop() == 0
                else:
                    process.kill()
                process.start()

            return b, restart_ottermq
        ctl = shutil.which("rabbitmqctl")
        if ctl is None or broker.host not in ("127.0.0.1", "localhost", "::1"):
            pytest.skip("restarting the broker at AMQP_URL needs a local rabbitmqctl")

        def restart_rabbitmq() -> None:  # closes every connection (320), then recovers durable state
            for action in ("stop_app", "start_app"):
                subprocess.run([ctl, "-q", action], check=True, capture_output=True, timeout=120)

        return broker, restart_rabbitmq

    return make


# --------------------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------------------
def reply_text(text: str) -> str:
    """``text`` as RabbitMQ puts it in a shortstr: over 255 bytes -> first 252 bytes + "..."."""
    raw = text.encode()
    if len(raw) <= 255:
        return text
    return raw[:252].decode("utf-8", "ignore") + "..."


@pytest.fixture
def channel_error() -> Callable[..., pika.exceptions.ChannelClosedByBroker]:
    def _channel_error(fn: Callable[[], Any], code: int, text: str) -> pika.exceptions.ChannelClosedByBroker:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            fn()
        assert (info.value.reply_code, info.value.reply_text) == (code, reply_text(text))
        return info.value

    return _channel_error


@pytest.fixture
def connection_error() -> Callable[..., pika.exceptions.ConnectionClosedByBroker]:
    def _connection_error(
        fn: Callable[[], Any], code: int, text: str
    ) -> pika.exceptions.ConnectionClosedByBroker:
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            fn()
        assert (info.value.reply_code, info.value.reply_text) == (code, reply_text(text))
        return info.value

    return _connection_error


CHROMIUM = os.environ.get("OTTERMQ_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium driven by Playwright for Python (no browser download), one per module."""
    from playwright import sync_api  # the dev extra; imported here so other tests do not load it

    if not Path(CHROMIUM).exists():
        pytest.fail(f"no chromium at {CHROMIUM}: run `make clients` (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        args = ["--no-sandbox", "--disable-dev-shm-usage"]
        launched = p.chromium.launch(executable_path=CHROMIUM, args=args)
        yield launched
        launched.close()


@pytest.fixture
def poll_until() -> Callable[..., Any]:
    """``e2e/polling.py``'s ``poll_until``, for tests that take it as a fixture."""
    return polling.poll_until


@pytest.fixture
def connect(broker: Broker) -> Iterator[Callable[..., pika.BlockingConnection]]:
    opened: list[pika.BlockingConnection] = []

    def _connect(**overrides: Any) -> pika.BlockingConnection:
        conn = pika.BlockingConnection(broker.params(**overrides))
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        with contextlib.suppress(Exception):
            if conn.is_open:
                conn.close()


@pytest.fixture
def channel(connect: Callable[..., pika.BlockingConnection]) -> Any:
    return connect().channel()


@pytest.fixture
def unique(request: pytest.FixtureRequest, broker: Broker) -> Iterator[Callable[[str], str]]:
    names: list[str] = []
    test = request.node.name.replace("[", ".").replace("]", "")[:60]

    def _unique(name: str = "x") -> str:
        full = f"e2e.{name}.{test}.{uuid.uuid4().hex[:8]}"
        names.append(full)
        return full

    yield _unique
    if not names:
        return
    try:
        conn = pika.BlockingConnection(broker.params())
    except Exception:
        return
    try:
        for name in names:
            for kind in ("queue", "exchange"):
                try:
                    ch = conn.channel()
                    getattr(ch, f"{kind}_delete")(name)
                    ch.close()
                except Exception:
                    if not conn.is_open:
                        conn = pika.BlockingConnection(broker.params())
    finally:
        with contextlib.suppress(Exception):
            conn.close()


@pytest.fixture
def declare(unique: Callable[[str], str]) -> Callable[..., str]:
    def _declare(ch: Any, name: str = "q", *, exclusive: bool = False, **arguments: Any) -> str:
        queue = unique(name)
        ch.queue_declare(queue, exclusive=exclusive, arguments=arguments or None)
        return queue

    return _declare


@pytest.fixture
def with_dlq(declare: Callable[..., str]) -> Callable[..., tuple[str, str]]:
    def _with_dlq(ch: Any, name: str = "work", **arguments: Any) -> tuple[str, str]:
        dlq = declare(ch, "dlq")
        queue = declare(
            ch, name, **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq, **arguments}
        )
        return queue, dlq

    return _with_dlq


@pytest.fixture
def drain() -> Callable[..., list[Any]]:
    def _drain(ch: Any, queue: str, redelivered: bool = False) -> list[Any]:
        out: list[Any] = []
        while True:
            method, _, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return out
            out.append((body, method.redelivered) if redelivered else body)

    return _drain


@pytest.fixture
def expect_message() -> Callable[..., tuple[Any, Any, bytes]]:
    def _expect_message(
        ch: Any, queue: str, auto_ack: bool = True, timeout: float = 3
    ) -> tuple[Any, Any, bytes]:
        def get() -> Any:
            got = ch.basic_get(queue, auto_ack=auto_ack)
            return got if got[0] is not None else None

        return polling.poll_until(get, timeout=timeout, what=f"a message in {queue}")

    return _expect_message


@pytest.fixture
def nothing_for() -> Callable[..., None]:
    def _nothing_for(ch: Any, queues: str | list[str], seconds: float) -> None:
        names = [queues] if isinstance(queues, str) else queues
        deadline = time.monotonic() + seconds
        while True:
            for queue in names:
                method, _, body = ch.basic_get(queue, auto_ack=True)
                assert method is None, f"unexpected message {body!r} in {queue}"
            if time.monotonic() >= deadline:
                return
            time.sleep(0.02)

    return _nothing_for


# --------------------------------------------------------------------------------------------------------
# raw AMQP over a socket
# --------------------------------------------------------------------------------------------------------
class PeerClosed(ConnectionError):
    """The broker closed the TCP connection (tests catch it as ``ConnectionError``)."""


@dataclass
class CloseResult:
    """What ``RawConnection.expect_close`` saw."""

    channel: int
    method: pamqp.commands.Connection.Close | pamqp.commands.Channel.Close
    socket_closed: bool

    @property
    def reply_code(self) -> int:
        return int(self.method.reply_code)

    @property
    def reply_text(self) -> str:
        return str(self.method.reply_text)

    @property
    def class_id(self) -> int:
        return int(self.method.class_id)

    @property
    def method_id(self) -> int:
        return int(self.method.method_id)


class RawConnection:
    """An AMQP 0-9-1 client written by hand over a blocking socket.

    Args:
        host, port: broker address.
        handshake: run protocol header, Start-Ok (PLAIN), Tune-Ok and Open before returning.
        capabilities: client capabilities sent in Start-Ok (none by default, unlike pika).
        heartbeat, channel_max, frame_max: values sent in Tune-Ok; ``None`` means "accept the server's".
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        handshake: bool = True,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        heartbeat: int | None = 0,
        channel_max: int | None = None,
        frame_max: int | None = None,
        capabilities: dict[str, bool] | None = None,
    ) -> None:
        self.capabilities = capabilities or {}
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.tune: pamqp.commands.Connection.Tune | None = None
        self.start: pamqp.commands.Connection.Start | None = None
        if handshake:
            self.handshake(user, password, vhost, heartbeat, channel_max, frame_max)

    # -- bytes --------------------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, channel: int, frame: Any) -> None:
        self.send(pamqp.frame.marshal(frame, channel))

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no frame from broker in time")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            raise
        except OSError as exc:
            raise PeerClosed(str(exc)) from exc
        if not chunk:
            raise PeerClosed("EOF")
        self.buf += chunk

    def recv_bytes(self, n: int, timeout: float = 5) -> bytes:
        """Exactly ``n`` raw bytes (for non-frame replies such as a protocol header)."""
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            self._fill(deadline)
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _next_frame_bytes(self, deadline: float) -> bytes:
        while True:
            if len(self.buf) >= FRAME_HEADER_SIZE:
                _, _, size = pamqp.frame.frame_parts(self.buf)
                if size is not None and len(self.buf) >= FRAME_HEADER_SIZE + size + 1:
                    data, self.buf = (
                        self.buf[: FRAME_HEADER_SIZE + size + 1],
                        self.buf[FRAME_HEADER_SIZE + size + 1 :],
                    )
                    return data
            self._fill(deadline)

    def recv_raw_frame(self, timeout: float = 5) -> tuple[int, int, bytes]:
        """Next frame undecoded: ``(frame_type, channel, payload)`` (heartbeats included)."""
        data = self._next_frame_bytes(time.monotonic() + timeout)
        frame_type, channel, _ = pamqp.frame.frame_parts(data)
        return frame_type, channel, data[FRAME_HEADER_SIZE:-1]

    def recv_frame(self, timeout: float = 5, skip_heartbeats: bool = True) -> tuple[int, Any]:
        """Next ``(channel, pamqp frame)``; raises ``TimeoutError`` or ``PeerClosed``."""
        deadline = time.monotonic() + timeout
        while True:
            _, channel, frame = pamqp.frame.unmarshal(self._next_frame_bytes(deadline))
            if skip_heartbeats and isinstance(frame, pamqp.heartbeat.Heartbeat):
                continue
            return channel, frame

    def expect(self, frame_type: type, timeout: float = 5) -> tuple[int, Any]:
        """Next non-heartbeat frame, asserted to be of ``frame_type``."""
        channel, frame = self.recv_frame(timeout)
        assert isinstance(frame, frame_type), f"expected {frame_type.__name__}, got {frame!r} on {channel}"
        return channel, frame

    def rpc(self, channel: int, frame: Any, reply_type: type, timeout: float = 5) -> Any:
        self.send_frame(channel, frame)
        return self.expect(reply_type, timeout)[1]

    def closed(self, timeout: float = 5) -> bool:
        """True if the broker closes the socket within ``timeout`` (incoming frames are discarded)."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                self.buf = b""
                self._fill(deadline)
        except PeerClosed:
            return True
        except TimeoutError:
            return False

    def expect_close(self, timeout: float = 5, closed_timeout: float = 5) -> CloseResult:
        """Wait for ``Connection.Close``/``Channel.Close``, answer it with Close-Ok, report socket state.

        For a ``Connection.Close`` ``socket_closed`` says whether the broker then closed the TCP connection
        within ``closed_timeout``; for a ``Channel.Close`` it is False (the connection is expected to live).
        Frames other than closes (e.g. in-flight deliveries) are skipped.
        """
        deadline = time.monotonic() + timeout
        while True:
            channel, frame = self.recv_frame(max(deadline - time.monotonic(), 0.001))
            if isinstance(frame, pamqp.commands.Connection.Close):
                with contextlib.suppress(OSError):
                    self.send_frame(0, pamqp.commands.Connection.CloseOk())
                return CloseResult(channel, frame, self.closed(closed_timeout))
            if isinstance(frame, pamqp.commands.Channel.Close):
                self.send_frame(channel, pamqp.commands.Channel.CloseOk())
                return CloseResult(channel, frame, False)

    # -- protocol ---------------------------------------------------------------------------------
    def handshake(
        self,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        heartbeat: int | None = 0,
        channel_max: int | None = None,
        frame_max: int | None = None,
        open_vhost: bool = True,
    ) -> None:
        self.send(b"AMQP\x00\x00\x09\x01")
        _, self.start = self.expect(pamqp.commands.Connection.Start)
        self.send_frame(
            0,
            pamqp.commands.Connection.StartOk(
                client_properties={"product": "ottermq-e2e-raw", "capabilities": self.capabilities},
                mechanism="PLAIN",
                response=f"\0{user}\0{password}",
                locale="en_US",
            ),
        )
        _, self.tune = self.expect(pamqp.commands.Connection.Tune)
        tune = self.tune
        self.send_frame(
            0,
            pamqp.commands.Connection.TuneOk(
                channel_max=tune.channel_max if channel_max is None else channel_max,
                frame_max=tune.frame_max if frame_max is None else frame_max,
                heartbeat=tune.heartbeat if heartbeat is None else heartbeat,
            ),
        )
        if open_vhost:
            self.rpc(0, pamqp.commands.Connection.Open(virtual_host=vhost), pamqp.commands.Connection.OpenOk)

    def open_channel(self, channel: int = 1) -> None:
        self.rpc(channel, pamqp.commands.Channel.Open(), pamqp.commands.Channel.OpenOk)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


@pytest.fixture
def raw_connect(broker: Broker) -> Iterator[Callable[..., RawConnection]]:
    opened: list[RawConnection] = []

    def _raw_connect(**kwargs: Any) -> RawConnection:
        conn = RawConnection(broker.host, broker.port, **kwargs)
        opened.append(conn)
        return conn

    yield _raw_connect
    for conn in opened:
        conn.close()
