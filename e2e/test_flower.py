"""Celery Flower's broker view reads queue depths from the management API (issue 14).

Flower asks ``GET /api/queues/{vhost}`` (``flower/utils/broker.py``, class ``RabbitMQ``) and keeps the
queues its Celery app knows. Two checks, on ottermq and (``AMQP_URL``/``MANAGEMENT_URL`` set) on RabbitMQ:

* Flower's own ``Broker`` class, called as Flower calls it;
* a real ``celery flower`` process: its JSON ``/api/queues/length`` and its HTML ``/broker`` page.

Both use a vhost created for the test: Flower turns the vhost ``/`` into the path ``/api/queues//``,
which RabbitMQ answers with 404, so Flower shows no queues for ``/`` on RabbitMQ (and ottermq answers
the same).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from flower.utils import broker as flower_broker  # Celery Flower, in the dev extra

from .conftest import _free_port
from .polling import poll_until
from .test_management_write import call, q

APP_DIR = Path(__file__).resolve().parent / "flower_app"
TIMEOUT = 30  # RabbitMQ's queue counts lag by its 5 s statistics interval; Flower starts in ~2 s


class Rig:
    """A vhost of its own with two queues: A holds 3 ready messages, B 1 ready and 1 unacknowledged."""

    def __init__(self, broker: Any) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.broker = broker
        self.vhost = f"e2e-flower-{suffix}"
        self.queue_a = f"e2e.flower.a.{suffix}"
        self.queue_b = f"e2e.flower.b.{suffix}"
        vh = q(self.vhost)
        assert call(broker, f"/api/vhosts/{vh}", "PUT", {})[0] in (201, 204)
        perms = {"configure": ".*", "write": ".*", "read": ".*"}
        assert call(broker, f"/api/permissions/{vh}/{q(broker.user)}", "PUT", perms)[0] in (201, 204)
        self.conn = pika.BlockingConnection(broker.params(virtual_host=self.vhost))
        channel = self.conn.channel()
        for name in (self.queue_a, self.queue_b):
            channel.queue_declare(name)
        for body in (b"1", b"2", b"3"):
            channel.basic_publish("", self.queue_a, body)
        for body in (b"x", b"y"):
            channel.basic_publish("", self.queue_b, body)
        method, _props, _body = channel.basic_get(self.queue_b, auto_ack=False)  # held unacked
        assert method is not None

    @property
    def amqp_url(self) -> str:
        b = self.broker
        return f"amqp://{b.user}:{b.password}@{b.host}:{b.port}/{urllib.parse.quote(self.vhost, safe='')}"

    @property
    def broker_api(self) -> str:
        parts = urllib.parse.urlsplit(self.broker.management_url)
        return f"http://{self.broker.user}:{self.broker.password}@{parts.hostname}:{parts.port}/api/"

    def expected(self) -> dict[str, tuple[int, int, int]]:
        """``name -> (messages, messages_ready, messages_unacknowledged)``."""
        return {self.queue_a: (3, 3, 0), self.queue_b: (2, 1, 1)}

    def close(self) -> None:
        if self.conn.is_open:
            self.conn.close()
        call(self.broker, f"/api/vhosts/{q(self.vhost)}", "DELETE")


@pytest.fixture
def rig(broker: Any) -> Iterator[Rig]:
    made = Rig(broker)
    yield made
    made.close()


def counts(queues: list[dict[str, Any]]) -> dict[str, tuple[int, int, int]]:
    return {
        item["name"]: (item.get("messages"), item.get("messages_ready"), item.get("messages_unacknowledged"))
        for item in queues
    }


def test_flowers_broker_class_reads_queue_depths(rig: Rig) -> None:
    broker = flower_broker.Broker(rig.amqp_url, http_api=rig.broker_api)
    names = [rig.queue_a, rig.queue_b, "e2e.flower.not-there"]
    got: dict[str, tuple[int, int, int]] = {}

    def depths_shown() -> bool:
        nonlocal got
        got = counts(asyncio.run(broker.queues(names)))
        return got == rig.expected()

    poll_until(
        depths_shown,
        timeout=TIMEOUT,
        interval=0.5,
        what="the queue depths from Flower's Broker class",
        explain=lambda: f"last: {got}, expected: {rig.expected()}",
    )


class Flower:
    """A ``celery -A flowerapp flower`` process on a free port."""

    def __init__(self, rig: Rig, logs: Path) -> None:
        self.port = _free_port()
        self.log_path = logs / "flower.log"
        celery = Path(sys.executable).with_name("celery")
        command = [str(celery) if celery.exists() else (shutil.which("celery") or "celery")]
        command += [
            "-A",
            "flowerapp",
            "flower",
            f"--port={self.port}",
            "--address=127.0.0.1",
            f"--broker_api={rig.broker_api}",
        ]
        env = dict(os.environ)
        env.update(
            E2E_FLOWER_BROKER_URL=rig.amqp_url,
            E2E_FLOWER_QUEUE_A=rig.queue_a,
            E2E_FLOWER_QUEUE_B=rig.queue_b,
            FLOWER_UNAUTHENTICATED_API="true",  # Flower 2 serves /api only with auth or this
            PYTHONSAFEPATH="1",
        )
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, cwd=APP_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)

    def get(self, path: str) -> tuple[int, str]:
        if self.proc.poll() is not None:
            pytest.fail(f"flower exited with {self.proc.returncode}:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except OSError:
            return 0, ""

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace").splitlines() if self.log_path.exists() else []
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def test_flower_process_shows_queue_depths(rig: Rig, tmp_path: Path) -> None:
    flower = Flower(rig, tmp_path)
    try:
        got: dict[str, tuple[int, int, int]] = {}

        def depths_shown() -> bool:
            nonlocal got
            status, text = flower.get("/api/queues/length")
            if status == 200:
                got = counts(json.loads(text)["active_queues"])
            return got == rig.expected()

        poll_until(
            depths_shown,
            timeout=TIMEOUT,
            interval=0.5,
            what="the queue depths on Flower's /api/queues/length",
            explain=lambda: f"last: {got}, expected: {rig.expected()}\n{flower.log_tail()}",
        )
        status, page = flower.get("/broker")
        assert status == 200
        assert rig.queue_a in page and rig.queue_b in page
    finally:
        flower.stop()
