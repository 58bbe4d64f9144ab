"""Celery (kombu over py-amqp) with a real worker process, and kombu's Producer/Consumer directly (issue 7).

One worker per module (start-up takes about a second and a half): ``celery -A app worker --pool=solo
--concurrency=1 -Q <queue>`` run from ``e2e/celery_app`` with ``PYTHONSAFEPATH=1``, on a task queue declared
through a kombu ``Queue`` with ``x-dead-letter-exchange``. Both sides use the ``rpc://`` result backend
(results travel back over the broker to a reply queue). Tasks report their side effects by appending JSON
lines to a file the test names (``celery_app/app.py``). The acks-late test SIGKILLs the worker mid-task and
starts its replacement, which the later tests keep using.

Pinned here, on both brokers:
    * the worker imports py-amqp from site-packages, never ottermq's ``amqp/`` folder;
    * ``self.retry(countdown=1)`` republishes the task with an ``eta`` header; the worker holds it (raising
      its prefetch with ``basic.qos``) and runs it a second later;
    * a prefetch window full of held ETA tasks does not block the next task: Celery raises the prefetch with
      ``basic.qos``, global or per-consumer depending on what kombu's ``qos_semantics_matches_spec`` infers
      from the server's ``product``/``version`` (RabbitMQ 3.3-3.x: global);
    * an ``acks_late`` task whose worker dies is redelivered (``redelivered`` set) to the next worker;
    * ``Reject(requeue=False)`` dead-letters the task message with ``x-death`` reason ``rejected``;
    * kombu ``expiration=`` (seconds, sent as milliseconds) dead-letters as ``expired``; ``x-max-priority``
      queues deliver by ``priority=``, FIFO within a priority.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import kombu
import pika
import pytest

from .polling import poll_until

APP_DIR = Path(__file__).resolve().parent / "celery_app"
WORKER_READY_TIMEOUT = 30


def load_app_module() -> ModuleType:
    """``celery_app/app.py`` by path, under a private name (no package import, no ``sys.path`` change)."""
    spec = importlib.util.spec_from_file_location("ottermq_e2e_celery_app", APP_DIR / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Worker:
    """One ``celery -A app worker`` process (solo pool) consuming the module's task queue."""

    def __init__(self, env: dict[str, str], queue: str, logs: Path, name: str) -> None:
        self.log_path = logs / f"{name}.log"
        celery = Path(sys.executable).with_name("celery")
        command = [str(celery) if celery.exists() else (shutil.which("celery") or "celery")]
        command += [
            "-A",
            "app",
            "worker",
            "--pool=solo",
            "--concurrency=1",
            "-Q",
            queue,
            "-n",
            f"{name}@%h",
            "--loglevel=INFO",
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, cwd=APP_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)
        poll_until(
            self._ready,
            WORKER_READY_TIMEOUT,
            0.02,
            what=f"celery worker {name} ready",
            explain=self.log_tail,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"celery worker exited with {self.proc.returncode}:\n{self.log_tail()}")
        return " ready." in self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace").splitlines() if self.log_path.exists() else []
        return "worker log tail:\n" + "\n".join(text[-lines:])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # warm shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


class CeleryRig:
    """The module's names, client app, output folder and current worker."""

    def __init__(self, broker: Any, tmp: Path) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.broker = broker
        self.queue = f"e2e.celery.tasks.{suffix}"
        self.dlx = f"e2e.celery.dlx.{suffix}"
        self.dlq = f"e2e.celery.dlq.{suffix}"
        self.tmp = tmp
        self.env = dict(os.environ)
        self.env.update(
            E2E_CELERY_BROKER_URL=broker.url,
            E2E_CELERY_QUEUE=self.queue,
            E2E_CELERY_DLX=self.dlx,
            E2E_CELERY_DLQ=self.dlq,
            E2E_CELERY_RESULT_BACKEND="rpc://",
            PYTHONSAFEPATH="1",
        )
        self.env.pop("PYTHONPATH", None)
        self.module = load_app_module()
        self.app = self.module.make_app(broker.url, self.queue, self.dlx, self.dlq, "rpc://")
        self.workers = 0
        self.worker: Worker | None = None

    def dlq_binding(self) -> kombu.Queue:
        return kombu.Queue(self.dlq, kombu.Exchange(self.dlx, type="direct"), routing_key=self.dlq)

    def declare(self) -> None:
        """DLX and DLQ first (the task queue dead-letters into them), then the task queue itself."""
        with kombu.Connection(self.broker.url) as conn:
            channel = conn.default_channel
            self.dlq_binding()(channel).declare()
            self.module.task_queue(self.queue, self.dlx, self.dlq)(channel).declare()

    def qos_semantics_matches_spec(self) -> bool:
        """kombu's guess from the server's ``product``/``version``; Celery sends global QoS when False."""
        with kombu.Connection(self.broker.url) as conn:
            conn.connect()
            return bool(conn.qos_semantics_matches_spec)

    def start_worker(self) -> Worker:
        self.workers += 1
        self.worker = Worker(self.env, self.queue, self.tmp, f"e2e{self.workers}-{uuid.uuid4().hex[:6]}")
        return self.worker

    def out(self, name: str) -> Path:
        return self.tmp / f"{name}.{uuid.uuid4().hex[:6]}.jsonl"

    def wait_lines(self, path: Path, n: int, timeout: float = 10) -> list[dict[str, Any]]:
        def enough() -> list[dict[str, Any]] | None:
            lines = read_lines(path)
            return lines if len(lines) >= n else None

        def explain() -> str:
            worker_log = self.worker.log_tail() if self.worker else ""
            return f"{path}: {read_lines(path)}\n{worker_log}\n{broker_log(self.broker)}"

        return poll_until(enough, timeout, 0.02, what=f"{n} lines in {path.name}", explain=explain)

    def cleanup(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        with contextlib.suppress(Exception):  # the rpc:// reply consumer has its own connection
            self.app.backend.result_consumer.stop()
        with contextlib.suppress(Exception):  # Celery's app.close() leaves pooled connections open
            self.app.pool.force_close_all()
        with contextlib.suppress(Exception):
            self.app.close()
        names = [self.queue, self.dlq, self.app.backend.oid]
        with contextlib.suppress(Exception):
            conn = pika.BlockingConnection(self.broker.params())
            for name in names:
                with contextlib.suppress(Exception):
                    conn.channel().queue_delete(name)
            for name in (self.queue, self.dlx):
                with contextlib.suppress(Exception):
                    conn.channel().exchange_delete(name)
            conn.close()


def broker_log(broker: Any) -> str:
    """The tail of our broker's log (``<no broker log>`` for one started elsewhere)."""
    return f"broker log tail:\n{broker.log_tail()}"


@pytest.fixture(scope="module")
def rig(broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CeleryRig]:
    rig = CeleryRig(broker, tmp_path_factory.mktemp("celery"))
    try:
        rig.declare()
        rig.start_worker()
        yield rig
    finally:
        rig.cleanup()


@pytest.fixture
def kombu_conn(broker: Any) -> Iterator[kombu.Connection]:
    with kombu.Connection(broker.url, transport_options={"confirm_publish": True}) as conn:
        yield conn


# ---------------------------------------------------------------------------------------------------------
# Celery worker
# ---------------------------------------------------------------------------------------------------------
def test_worker_uses_py_amqp_from_site_packages(rig):
    import amqp  # in this process too: pytest's importlib mode keeps the repo root off sys.path

    assert "site-packages" in str(amqp.__file__), amqp.__file__
    out = rig.out("env")
    rig.app.tasks["e2e.environment"].delay(str(out))
    (line,) = rig.wait_lines(out, 1)
    assert "site-packages" in line["amqp_file"], line["amqp_file"]
    assert not line["amqp_file"].startswith(str(APP_DIR.parent.parent / "amqp")), line["amqp_file"]
    assert line["safe_path"] is True
    assert line["cwd"] == str(APP_DIR)


def test_tasks_run_in_the_worker_and_rpc_results_come_back(rig):
    out = rig.out("record")
    results = [rig.app.tasks["e2e.record"].delay(str(out), i) for i in range(5)]
    lines = rig.wait_lines(out, 5)
    assert [line["value"] for line in lines] == list(range(5))  # one queue, one solo worker: FIFO
    assert {line["pid"] for line in lines} == {rig.worker.pid}
    assert [line["id"] for line in lines] == [r.id for r in results]
    assert all(line["redelivered"] is False for line in lines)
    assert [r.get(timeout=10) for r in results] == list(range(5))
    assert rig.app.tasks["e2e.add"].delay(2, 3).get(timeout=10) == 5


def test_retry_with_countdown_is_an_eta_the_worker_waits_for(rig):
    out = rig.out("flaky")
    result = rig.app.tasks["e2e.flaky"].delay(str(out), 2)
    lines = rig.wait_lines(out, 4, timeout=15)
    attempts = [line for line in lines if line["step"] == "attempt"]
    assert [a["retries"] for a in attempts] == [0, 1, 2]
    assert lines[-1]["step"] == "done"
    assert attempts[0]["eta"] is None
    assert all(a["eta"] is not None for a in attempts[1:])  # countdown travels as an ETA header
    gaps = [b["at"] - a["at"] for a, b in zip(attempts, attempts[1:], strict=False)]
    assert all(0.9 <= gap < 5 for gap in gaps), gaps
    assert {a["id"] for a in attempts} == {result.id}
    assert result.get(timeout=10) == "ok"


def test_held_eta_tasks_do_not_block_the_queue(rig):
    """The worker holds ETA tasks unacked and raises its prefetch with ``basic.qos`` for each, so a task
    sent after a prefetch window full of them still runs at once (Celery's ``QoS.increment_eventually``)."""
    out = rig.out("eta")
    prefetch = rig.app.conf.worker_prefetch_multiplier  # x concurrency 1
    held = [
        rig.app.tasks["e2e.record"].apply_async((str(out), f"later{i}"), countdown=2.5)
        for i in range(prefetch)
    ]
    sent = time.time()
    now_task = rig.app.tasks["e2e.record"].delay(str(out), "now")
    first = rig.wait_lines(out, 1, timeout=10)[0]
    spec = rig.qos_semantics_matches_spec()
    blocked = (
        f"the task sent after {prefetch} ETA tasks waited for them: raising the prefetch with basic.qos did "
        f"not reach the worker's consumer (kombu qos_semantics_matches_spec={spec}, so the worker's "
        f"basic.qos used global={not spec})\n{rig.worker.log_tail()}\n{broker_log(rig.broker)}"
    )
    assert (first["value"], first["id"]) == ("now", now_task.id), blocked
    assert first["at"] - sent < 2, blocked
    later = rig.wait_lines(out, 1 + prefetch, timeout=10)[1:]
    assert sorted(line["id"] for line in later) == sorted(r.id for r in held)
    assert all(line["eta"] is not None and line["at"] - sent >= 2.4 for line in later)


def test_rejected_task_lands_in_the_dead_letter_queue(rig, kombu_conn):
    out = rig.out("refuse")
    result = rig.app.tasks["e2e.refuse"].delay(str(out), "bad input")
    rig.wait_lines(out, 1)

    dead: list[kombu.Message] = []
    with kombu.Consumer(
        kombu_conn, [rig.dlq_binding()], callbacks=[lambda _b, m: dead.append(m)], accept=["json"]
    ):
        kombu_conn.drain_events(timeout=5)
    (message,) = dead
    message.ack()
    headers = message.headers
    assert (headers["task"], headers["id"]) == ("e2e.refuse", result.id)
    assert message.decode()[0] == [str(out), "bad input"]  # Celery's [args, kwargs, embed]
    (death,) = headers["x-death"]
    # Celery sends to a direct queue through the default exchange, routing key = queue name
    assert (death["reason"], death["queue"], death["exchange"], death["count"]) == (
        "rejected",
        rig.queue,
        "",
        1,
    )
    assert death["routing-keys"] == [rig.queue]
    assert message.delivery_info["routing_key"] == rig.dlq
    with kombu.Connection(rig.broker.url) as conn:
        _, count, _ = conn.default_channel.queue_declare(rig.queue, passive=True)
    assert count == 0


def test_acks_late_task_is_redelivered_after_the_worker_is_killed(rig):
    """Runs last in the module: the killed worker is replaced and the replacement stays."""
    out, release = rig.out("hold"), rig.tmp / f"release.{uuid.uuid4().hex[:6]}"
    result = rig.app.tasks["e2e.hold"].delay(str(out), str(release))
    (started,) = rig.wait_lines(out, 1)
    first = rig.worker
    assert (started["step"], started["pid"], started["redelivered"]) == ("started", first.pid, False)

    first.kill()  # SIGKILL mid-task: the message was never acked
    second = rig.start_worker()
    lines = rig.wait_lines(out, 2)
    assert (lines[1]["step"], lines[1]["pid"], lines[1]["redelivered"]) == ("started", second.pid, True)
    assert lines[1]["id"] == result.id

    release.touch()
    lines = rig.wait_lines(out, 3)
    assert (lines[2]["step"], lines[2]["pid"]) == ("done", second.pid)
    assert result.get(timeout=10) == "released"


# ---------------------------------------------------------------------------------------------------------
# kombu directly
# ---------------------------------------------------------------------------------------------------------
def test_kombu_expiration_dead_letters_as_expired(kombu_conn, unique):
    dlq_name, work_name = unique("dlq"), unique("work")
    default = kombu.Exchange("")
    dlq = kombu.Queue(dlq_name, default, routing_key=dlq_name)
    work = kombu.Queue(
        work_name,
        default,
        routing_key=work_name,
        queue_arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq_name},
    )
    channel = kombu_conn.default_channel
    dlq(channel).declare()
    work(channel).declare()
    producer = kombu.Producer(channel)
    producer.publish(
        {"order": 1}, routing_key=work_name, expiration=0.1, serializer="json", headers={"tenant": "acme"}
    )

    dead: list[kombu.Message] = []
    with kombu.Consumer(kombu_conn, [dlq], callbacks=[lambda _b, m: dead.append(m)], accept=["json"]):
        kombu_conn.drain_events(timeout=5)
    (message,) = dead
    message.ack()
    assert message.decode() == {"order": 1}
    assert message.headers["tenant"] == "acme"
    assert "expiration" not in message.properties
    (death,) = message.headers["x-death"]
    assert (death["reason"], death["original-expiration"], death["queue"], death["exchange"]) == (
        "expired",
        "100",
        work_name,
        "",
    )

    # a long enough TTL is just a TTL: the message is consumed normally
    producer.publish({"order": 2}, routing_key=work_name, expiration=30, serializer="json")
    got = kombu_conn.SimpleQueue(work).get(timeout=5)
    got.ack()
    assert (got.decode(), got.properties["expiration"]) == ({"order": 2}, "30000")


def test_kombu_priority_queue_delivers_highest_priority_first(kombu_conn, unique):
    name = unique("prio")
    queue = kombu.Queue(name, kombu.Exchange(""), routing_key=name, max_priority=10)
    channel = kombu_conn.default_channel
    queue(channel).declare()
    producer = kombu.Producer(channel)
    sent = [("a", 1), ("b", 5), ("c", 3), ("d", 9), ("e", 0), ("f", 5), ("g", None)]
    for body, priority in sent:
        producer.publish(body, routing_key=name, priority=priority, serializer="json")

    got: list[tuple[str, int | None]] = []

    def on_message(body: Any, message: kombu.Message) -> None:
        got.append((body, message.properties.get("priority")))
        message.ack()

    def all_delivered() -> bool:
        if len(got) < len(sent):
            kombu_conn.drain_events(timeout=5)
        return len(got) >= len(sent)

    with kombu.Consumer(kombu_conn, [queue], callbacks=[on_message], accept=["json"], prefetch_count=1):
        poll_until(all_delivered, 5, what=f"{len(sent)} deliveries from {name}", explain=lambda: f"got {got}")
    # no priority counts as 0; equal priorities keep publish order
    assert got == [("d", 9), ("b", 5), ("f", 5), ("c", 3), ("a", 1), ("e", 0), ("g", None)]
