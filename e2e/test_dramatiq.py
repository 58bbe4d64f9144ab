"""Dramatiq's RabbitmqBroker (pika) with a real in-process ``dramatiq.Worker`` against the broker.

How Dramatiq 2.x uses the broker (``dramatiq/brokers/rabbitmq.py``, ``worker.py``, ``middleware/retries.py``),
which is what these tests rely on:
    * an actor's queue ``Q`` comes with ``Q.DQ`` (delays) and ``Q.XQ`` (dead letters), all durable; ``Q`` and
      ``Q.DQ`` carry ``x-dead-letter-exchange: ""`` and ``x-dead-letter-routing-key: Q.XQ``, ``Q.XQ`` an
      ``x-message-ttl`` of 7 days. Messages are JSON bodies published persistent (``delivery_mode`` 2) to the
      default exchange; with ``confirm_delivery=True`` (used here) also ``mandatory`` and confirmed.
    * A delay is not a broker TTL: ``send_with_options(delay=ms)`` and every retry publish the message to
      ``Q.DQ`` with an ``eta`` (epoch ms) inside the body. The worker consumes ``Q.DQ`` with a large prefetch,
      holds each message unacked in memory until its eta, then publishes a copy without ``eta`` to ``Q`` and
      acks the one from ``Q.DQ``. A worker that stops leaves its held messages to the broker, which requeues
      them to ``Q.DQ`` (``redelivered`` set) when the consumer's channel closes.
    * A failed attempt that may be retried is acked on ``Q`` after its copy (``options.retries`` + 1) went to
      ``Q.DQ`` with a backoff of ``min_backoff * 2**retries * U(1, 2)`` ms, brought back to
      ``max_backoff * U(0.5, 1)`` past ``max_backoff``. Once ``max_retries`` is reached the message is
      ``basic.nack``-ed with ``requeue=False`` and the broker dead-letters it to ``Q.XQ``.

Reference values (RabbitMQ 3.10.8): the dead letter in ``Q.XQ`` is the body of the last attempt's message,
unchanged (``options.retries`` = max_retries), with ``delivery_mode`` 2, ``routing_key`` ``Q.XQ``, exchange
``""``, one ``x-death`` entry ``{count: 1, reason: rejected, queue: Q, exchange: "", routing-keys: [Q]}``
and ``x-first-death-{queue,reason,exchange}``.

The worker wakes every ``worker_timeout`` (100 ms here) to move due delayed messages, so a delayed message
runs at its eta plus up to about that; the tests allow ``LATE`` seconds on a loaded machine.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pika
import pytest

from .polling import poll_until

try:
    import dramatiq
    from dramatiq.brokers.rabbitmq import RabbitmqBroker
    from dramatiq.common import dq_name, xq_name
    from dramatiq.middleware import CurrentMessage, Middleware
except ImportError as exc:  # a dev dependency: never a silent skip
    pytest.fail(
        f"the Dramatiq tests need dramatiq[rabbitmq] ({exc}); run "
        "`.venv/bin/python -m pip install -e '.[dev]' --config-settings editable_mode=strict` "
        "(or `make install`)",
        pytrace=False,
    )

WORKER_TIMEOUT_MS = 100  # how often an idle worker wakes to move due delayed messages
LATE = 1.5  # seconds a delayed message may run after its eta on a loaded 2-core machine
CLOCK_SLACK = 0.002  # Dramatiq's eta is whole milliseconds of time.time()


@dataclass
class Attempt:
    """One run of an actor, as the actor saw it."""

    at: float  # time.monotonic() when the actor started
    message_id: str
    options: dict[str, Any]


@dataclass
class Enqueued:
    """One ``broker.enqueue``: where the message went and with which delay (ms, None for none)."""

    at: float
    queue_name: str
    delay: int | None
    message_id: str
    options: dict[str, Any]


@dataclass
class Recorder(Middleware):
    """Broker middleware recording every enqueue and every message a consumer puts aside until its eta."""

    enqueued: list[Enqueued] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def before_enqueue(self, broker: Any, message: Any, delay: int | None) -> None:
        entry = Enqueued(
            time.monotonic(), message.queue_name, delay, message.message_id, dict(message.options)
        )
        with self.lock:
            self.enqueued.append(entry)

    def before_delay_message(self, broker: Any, message: Any) -> None:
        with self.lock:
            self.held.append(message.message_id)


class DramatiqApp:
    """One Dramatiq broker on one unique queue, its actors' attempts, and at most one running worker."""

    def __init__(self, url: str, queue: str) -> None:
        self.queue = queue
        self.broker = RabbitmqBroker(url=url, confirm_delivery=True)
        self.broker.add_middleware(CurrentMessage())
        self.recorder = Recorder()
        self.broker.add_middleware(self.recorder)
        self.attempts: list[Attempt] = []
        self.worker: dramatiq.Worker | None = None

    def record_attempt(self) -> int:
        """Called first thing by an actor; returns which attempt this is (1-based)."""
        message = CurrentMessage.get_current_message()
        assert message is not None
        self.attempts.append(Attempt(time.monotonic(), message.message_id, dict(message.options)))
        return len(self.attempts)

    def actor(self, fn: Any, **options: Any) -> Any:
        return dramatiq.actor(broker=self.broker, queue_name=self.queue, **options)(fn)

    def start_worker(self) -> None:
        self.worker = dramatiq.Worker(self.broker, worker_threads=2, worker_timeout=WORKER_TIMEOUT_MS)
        self.worker.start()

    def stop_worker(self) -> None:
        """Stop the worker: its consumers' channels close, so whatever it held unacked goes back."""
        if self.worker is not None:
            self.worker.stop(timeout=10_000)
            self.worker = None

    def wait_attempts(self, n: int, timeout: float = 10) -> list[Attempt]:
        poll_until(
            lambda: len(self.attempts) >= n,
            timeout,
            what=f"{n} attempts of the actor on {self.queue}",
            explain=lambda: f"attempts: {self.attempts}\nenqueued: {self.recorder.enqueued}",
        )
        return list(self.attempts)

    def close(self) -> None:
        self.stop_worker()
        self.broker.close()


def ready_counts(channel: Any, queue: str) -> tuple[int, int, int]:
    """Ready messages in ``Q``, ``Q.DQ`` and ``Q.XQ`` (passive declares: unacked ones are not counted)."""
    main, delayed, dead = (
        channel.queue_declare(name, passive=True).method.message_count
        for name in (queue, dq_name(queue), xq_name(queue))
    )
    return main, delayed, dead


@pytest.fixture
def app(broker: Any, unique: Any) -> Iterator[DramatiqApp]:
    queue = unique("dramatiq")  # unique deletes Q; Q.DQ and Q.XQ are deleted here
    dramatiq_app = DramatiqApp(broker.url, queue)
    try:
        yield dramatiq_app
    finally:
        dramatiq_app.close()
        with contextlib.suppress(Exception):
            conn = pika.BlockingConnection(broker.params())
            for name in (dq_name(queue), xq_name(queue)):
                with contextlib.suppress(Exception):
                    conn.channel().queue_delete(name)
            conn.close()


# ---------------------------------------------------------------------------------------------------------
# retries with backoff through Q.DQ
# ---------------------------------------------------------------------------------------------------------
def test_actor_failing_twice_is_retried_with_backoff_then_succeeds(app, channel):
    min_backoff, max_backoff, failures = 100, 400, 2

    def flaky(order: int) -> None:
        if app.record_attempt() <= failures:
            raise RuntimeError(f"attempt failed on purpose (order {order})")

    actor = app.actor(flaky, max_retries=3, min_backoff=min_backoff, max_backoff=max_backoff)
    app.start_worker()
    sent = actor.send(7)
    attempts = app.wait_attempts(failures + 1)

    assert [a.message_id for a in attempts] == [sent.message_id] * 3
    assert [a.options.get("retries", 0) for a in attempts] == [0, 1, 2]
    retries = [e for e in app.recorder.enqueued if e.queue_name == dq_name(app.queue)]
    assert [e.options["retries"] for e in retries] == [1, 2]
    for i, (retry, before, after) in enumerate(zip(retries, attempts[:-1], attempts[1:], strict=True)):
        assert retry.delay is not None
        # retry i: min_backoff * 2**i * U(1, 2), at most max_backoff
        assert min(min_backoff * 2**i, max_backoff // 2) <= retry.delay <= max_backoff, retry
        gap = after.at - before.at
        assert retry.delay / 1000 - CLOCK_SLACK <= gap <= retry.delay / 1000 + LATE, (i, gap, retry.delay)
        assert "eta" not in after.options  # the worker moved it from Q.DQ to Q without its eta

    app.stop_worker()  # acks are sent before the consumers close; anything unacked would come back
    assert ready_counts(channel, app.queue) == (0, 0, 0)
    assert len(app.attempts) == failures + 1  # success: no fourth attempt


def test_actor_always_failing_is_dead_lettered_to_xq_after_max_retries(app, channel):
    max_retries = 2

    def doomed(order: int) -> None:
        app.record_attempt()
        raise RuntimeError(f"always fails (order {order})")

    actor = app.actor(doomed, max_retries=max_retries, min_backoff=100, max_backoff=200)
    app.start_worker()
    sent = actor.send(42)

    poll_until(
        lambda: ready_counts(channel, app.queue)[2] == 1,
        10,
        0.02,
        what=f"the dead letter in {xq_name(app.queue)}",
        explain=lambda: f"attempts: {app.attempts}\nenqueued: {app.recorder.enqueued}",
    )
    app.stop_worker()
    assert len(app.attempts) == max_retries + 1
    assert [a.options.get("retries", 0) for a in app.attempts] == [0, 1, 2]
    assert ready_counts(channel, app.queue) == (0, 0, 1)

    method, props, body = channel.basic_get(xq_name(app.queue), auto_ack=True)
    assert method is not None
    assert (method.exchange, method.routing_key, method.redelivered) == ("", xq_name(app.queue), False)
    assert props.delivery_mode == 2
    dead = json.loads(body)
    assert (dead["message_id"], dead["queue_name"], dead["actor_name"]) == (
        sent.message_id,
        app.queue,
        "doomed",
    )
    assert (dead["args"], dead["options"]["retries"]) == ([42], max_retries)
    assert "eta" not in dead["options"]
    headers = props.headers
    assert len(headers["x-death"]) == 1
    death = headers["x-death"][0]
    assert {k: death[k] for k in ("count", "reason", "queue", "exchange", "routing-keys")} == {
        "count": 1,
        "reason": "rejected",
        "queue": app.queue,
        "exchange": "",
        "routing-keys": [app.queue],
    }
    assert (headers["x-first-death-queue"], headers["x-first-death-reason"]) == (app.queue, "rejected")
    assert headers["x-first-death-exchange"] == ""


# ---------------------------------------------------------------------------------------------------------
# send_with_options(delay=...)
# ---------------------------------------------------------------------------------------------------------
def test_delayed_send_runs_not_before_its_delay(app, channel):
    delay_ms = 500

    def later(order: int) -> None:
        app.record_attempt()

    actor = app.actor(later, max_retries=0)
    app.start_worker()
    started = time.monotonic()
    sent = actor.send_with_options(args=(1,), delay=delay_ms)
    (attempt,) = app.wait_attempts(1)

    elapsed = attempt.at - started
    assert delay_ms / 1000 - CLOCK_SLACK <= elapsed <= delay_ms / 1000 + LATE, elapsed
    assert attempt.message_id == sent.message_id
    assert "eta" not in attempt.options
    route = [(e.queue_name, e.delay) for e in app.recorder.enqueued]
    assert route == [(dq_name(app.queue), delay_ms), (app.queue, None)]
    app.stop_worker()
    assert ready_counts(channel, app.queue) == (0, 0, 0)


def test_delayed_message_held_by_a_stopping_worker_goes_back_to_dq(app, channel):
    """The worker holds a far-future message unacked; when it stops, the broker requeues it to ``Q.DQ``
    (``redelivered``), body and eta unchanged, for the next worker."""

    def far_future(order: int) -> None:
        app.record_attempt()

    actor = app.actor(far_future, max_retries=0)
    app.start_worker()
    sent = actor.send_with_options(args=(2,), delay=60_000)
    poll_until(
        lambda: sent.message_id in app.recorder.held, 10, what="the worker holding the delayed message"
    )
    assert ready_counts(channel, app.queue) == (0, 0, 0)  # held = delivered, unacked

    app.stop_worker()
    poll_until(lambda: ready_counts(channel, app.queue) == (0, 1, 0), 10, what="the message back in Q.DQ")
    method, props, body = channel.basic_get(dq_name(app.queue), auto_ack=True)
    assert method is not None
    assert (method.routing_key, method.redelivered) == (dq_name(app.queue), True)
    assert props.delivery_mode == 2
    back = json.loads(body)
    (enqueued,) = app.recorder.enqueued
    assert (back["message_id"], back["options"]["eta"]) == (sent.message_id, enqueued.options["eta"])
    assert app.attempts == []


# ---------------------------------------------------------------------------------------------------------
# publisher confirms and mandatory returns
# ---------------------------------------------------------------------------------------------------------
def test_queue_deleted_behind_dramatiqs_back_is_declared_again_on_send(app, channel):
    """With ``confirm_delivery`` Dramatiq publishes ``mandatory``: the broker's ``basic.return`` (312, the
    queue is gone) makes pika raise ``UnroutableError``, and Dramatiq declares its three queues again and
    publishes once more."""

    def task(order: int) -> None:
        app.record_attempt()

    actor = app.actor(task, max_retries=0)
    first = actor.send(1)
    assert ready_counts(channel, app.queue) == (1, 0, 0)
    for name in (app.queue, dq_name(app.queue), xq_name(app.queue)):
        channel.queue_delete(name)

    second = actor.send(2)
    assert ready_counts(channel, app.queue) == (1, 0, 0)
    method, props, body = channel.basic_get(app.queue, auto_ack=True)
    assert method is not None and props.delivery_mode == 2
    assert json.loads(body)["message_id"] == second.message_id != first.message_id
    # one publish for the first send, two for the second: returned once, then published again
    assert [e.message_id for e in app.recorder.enqueued] == [first.message_id] + [second.message_id] * 2
