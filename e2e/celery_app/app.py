"""A tiny Celery app for ``e2e/test_celery_kombu.py``.

The worker is started from this folder (``cwd``) as::

    celery -A app worker --pool=solo --concurrency=1 -Q <queue>

and reads its settings from the environment (set by the test):

    E2E_CELERY_BROKER_URL   broker URL (ottermq's test process or ``AMQP_URL``)
    E2E_CELERY_QUEUE        the one task queue (a unique name per test module)
    E2E_CELERY_DLX          its ``x-dead-letter-exchange`` (tasks rejected with ``requeue=False`` land there)
    E2E_CELERY_DLQ          its ``x-dead-letter-routing-key``

The tests load this file by path (``importlib.util.spec_from_file_location``) and call ``make_app`` with
the same values, so client and worker declare the queue with identical arguments. Tasks have explicit names
(``e2e.*``) because the module is known under a different name in each process.

Every task reports through a file: it appends one JSON line to ``out`` (a path chosen by the test), which
the test polls. Nothing here talks to the broker besides Celery itself.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from celery import Celery, Task
from celery.exceptions import Reject
from kombu import Exchange, Queue


def task_queue(queue: str, dlx: str, dlq: str) -> Queue:
    """The task queue, dead-lettering into ``dlx`` with routing key ``dlq``."""
    return Queue(
        queue,
        Exchange(queue, type="direct"),
        routing_key=queue,
        queue_arguments={"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": dlq},
    )


def _report(out: str, task: Task, **fields: Any) -> None:
    request = task.request
    line = {
        "task": task.name,
        "id": request.id,
        "pid": os.getpid(),
        "retries": request.retries,
        "eta": request.eta,
        "redelivered": (request.delivery_info or {}).get("redelivered"),
        "at": time.time(),
        **fields,
    }
    with open(out, "a") as f:
        f.write(json.dumps(line) + "\n")


def make_app(broker_url: str, queue: str, dlx: str, dlq: str, result_backend: str | None = None) -> Celery:
    """A Celery app whose default (and only) queue is ``queue``; tasks are registered on it."""
    app = Celery("e2e", broker=broker_url, backend=result_backend, set_as_current=False)
    app.conf.update(
        task_queues=[task_queue(queue, dlx, dlq)],
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=3,
        worker_hijack_root_logger=False,
        task_serializer="json",
        accept_content=["json"],
    )

    @app.task(bind=True, shared=False, name="e2e.record")
    def record(self: Task, out: str, value: Any) -> Any:
        """Append ``value`` to ``out``; return it (for the rpc:// result backend)."""
        _report(out, self, value=value)
        return value

    @app.task(bind=True, shared=False, name="e2e.add")
    def add(self: Task, x: int, y: int) -> int:
        return x + y

    @app.task(bind=True, shared=False, name="e2e.environment")
    def environment(self: Task, out: str) -> None:
        """Which ``amqp`` the worker imported (must be py-amqp from site-packages, never ottermq's)."""
        import amqp

        _report(
            out,
            self,
            amqp_file=amqp.__file__,
            cwd=os.getcwd(),
            sys_path=sys.path,
            safe_path=bool(sys.flags.safe_path),
        )

    @app.task(bind=True, shared=False, name="e2e.flaky", max_retries=5)
    def flaky(self: Task, out: str, failures: int) -> str:
        """Fail ``failures`` times, each time retrying with ``countdown=1``, then succeed."""
        _report(out, self, step="attempt")
        if self.request.retries < failures:
            raise self.retry(countdown=1)
        _report(out, self, step="done")
        return "ok"

    @app.task(bind=True, shared=False, name="e2e.hold", acks_late=True)
    def hold(self: Task, out: str, release: str, timeout: float = 30) -> str:
        """Report start, then wait until the file ``release`` exists (the test kills us meanwhile)."""
        _report(out, self, step="started")
        deadline = time.monotonic() + timeout
        while not Path(release).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{release} never appeared")
            time.sleep(0.02)
        _report(out, self, step="done")
        return "released"

    @app.task(bind=True, shared=False, name="e2e.refuse", acks_late=True)
    def refuse(self: Task, out: str, why: str) -> None:
        """Reject the message without requeue: the broker dead-letters it to the queue's DLX."""
        _report(out, self, step="rejecting")
        raise Reject(why, requeue=False)

    return app


app = make_app(
    os.environ.get("E2E_CELERY_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//"),
    os.environ.get("E2E_CELERY_QUEUE", "e2e.celery"),
    os.environ.get("E2E_CELERY_DLX", "e2e.celery.dlx"),
    os.environ.get("E2E_CELERY_DLQ", "e2e.celery.dlq"),
    os.environ.get("E2E_CELERY_RESULT_BACKEND") or None,
)
