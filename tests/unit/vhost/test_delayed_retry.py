"""RabbitMQ 4.3's delayed retry on our classic queues (Queue.requeue), with a fake clock and timers."""

from __future__ import annotations

from typing import Any

import pytest
from ottermq.amqp.errors import PreconditionFailed
from ottermq.vhost.arguments import parse_queue_args
from ottermq.vhost.message import Entry, Message
from ottermq.vhost.policy import effective_args, make_policy
from ottermq.vhost.queue import Queue

from .test_queue import FakeTTL, Sink


class Handle:
    def __init__(self, timers: Timers, at: int, fn: Any) -> None:
        self.timers, self.at, self.fn, self.cancelled = timers, at, fn, False

    def cancel(self) -> None:
        self.cancelled = True


class Timers:
    """A fake ``call_at``: timers fire when ``run(now)`` passes their time."""

    def __init__(self) -> None:
        self.handles: list[Handle] = []

    def __call__(self, at: int, fn: Any) -> Handle:
        handle = Handle(self, at, fn)
        self.handles.append(handle)
        return handle

    def run(self, now: int) -> None:
        for handle in [h for h in self.handles if h.at <= now and not h.cancelled]:
            self.handles.remove(handle)
            handle.fn()


class Taker:
    tag = "c"
    exclusive = False
    no_ack = False

    def __init__(self) -> None:
        self.got: list[Entry] = []

    def can_deliver(self) -> bool:
        return True

    def deliver(self, queue: Queue, entry: Entry) -> None:
        self.got.append(entry)

    def on_queue_deleted(self, queue: Queue) -> None:
        pass


def make(**args: Any) -> tuple[Queue, FakeTTL, Timers, Sink]:
    ttl, timers, sink = FakeTTL(), Timers(), Sink()
    queue = Queue("q", "/", False, False, False, None, parse_queue_args(args, "q"), ttl=ttl, sink=sink)
    queue.call_at = timers
    return queue, ttl, timers, sink


def take_all(queue: Queue) -> list[Entry]:
    out = []
    while (entry := queue.pop()) is not None:
        out.append(entry)
    return out


def test_linear_back_off_capped() -> None:
    queue, ttl, timers, _ = make(
        **{"x-delayed-retry-type": "all", "x-delayed-retry-min": 1000, "x-delayed-retry-max": 2500}
    )
    assert [queue.retry_delay(n) for n in (0, 1, 2, 3, 10)] == [1000, 1000, 2000, 2500, 2500]
    queue.enqueue(Message("", "q", b"\x00\x00", b"m"))
    for attempt, wait in ((1, 1000), (2, 2000), (3, 2500), (4, 2500)):
        (entry,) = take_all(queue)
        queue.requeue([entry], failed=True)
        assert queue.message_count == 0 and queue.delayed_count == 1
        ttl.t += wait - 1
        timers.run(ttl.t)
        assert queue.message_count == 0, f"back too early on attempt {attempt}"
        ttl.t += 1
        timers.run(ttl.t)
        assert queue.message_count == 1 and queue.delayed_count == 0
        assert queue.peek() is entry and entry.redelivered and entry.delivery_count == attempt
        assert queue.outgoing(entry).headers == {"x-delivery-count": attempt}


@pytest.mark.parametrize(
    ("kind", "failed", "held"),
    [
        ("all", True, True),
        ("all", False, True),
        ("failed", True, True),
        ("failed", False, False),
        ("returned", True, False),
        ("returned", False, True),
        ("disabled", True, False),
    ],
)
def test_which_returns_are_delayed(kind: str, failed: bool, held: bool) -> None:
    queue, _, _, _ = make(**{"x-delayed-retry-type": kind, "x-delayed-retry-min": 50})
    queue.enqueue(Message("", "q", b"\x00\x00", b"m"))
    queue.requeue(take_all(queue), failed=failed)
    assert (queue.delayed_count, queue.message_count) == ((1, 0) if held else (0, 1))


def test_held_entries_keep_their_place_and_wake_consumers() -> None:
    queue, ttl, timers, _ = make(**{"x-delayed-retry-type": "all", "x-delayed-retry-min": 100})
    for body in (b"1", b"2", b"3"):
        queue.enqueue(Message("", "q", b"\x00\x00", body))
    first = queue.pop()
    assert first is not None
    queue.requeue([first])
    consumer = Taker()
    queue.add_consumer(consumer)
    queue.dispatch()
    assert [e.message.body for e in consumer.got] == [b"2", b"3"]
    ttl.t += 100
    timers.run(ttl.t)
    assert [e.message.body for e in consumer.got] == [b"2", b"3", b"1"]


def test_delivery_limit_dead_letters_instead_of_holding() -> None:
    queue, ttl, timers, sink = make(
        **{"x-delayed-retry-type": "all", "x-delayed-retry-min": 10, "x-delivery-limit": 1}
    )
    queue.enqueue(Message("", "q", b"\x00\x00", b"m"))
    queue.requeue(take_all(queue))
    ttl.t += 10
    timers.run(ttl.t)
    queue.requeue(take_all(queue))  # the second return is over the limit
    assert sink.dead == [("q", "delivery_limit", b"m")]
    assert queue.delayed_count == 0 and timers.handles == []


def test_delete_cancels_the_timer() -> None:
    queue, _, timers, _ = make(**{"x-delayed-retry-type": "all", "x-delayed-retry-min": 10})
    queue.enqueue(Message("", "q", b"\x00\x00", b"m"))
    queue.requeue(take_all(queue))
    queue.mark_deleted()
    assert queue.delayed_count == 0 and timers.handles[0].cancelled


def test_arguments_and_policy_keys() -> None:
    with pytest.raises(PreconditionFailed, match="unsupported delayed retry type 'some'"):
        parse_queue_args({"x-delayed-retry-type": "some"}, "q")
    with pytest.raises(PreconditionFailed, match="x-delayed-retry-min"):
        parse_queue_args({"x-delayed-retry-min": 0}, "q")
    declared = parse_queue_args({"x-delayed-retry-min": 5}, "q")
    policy = make_policy(
        "/",
        "p",
        ".",
        {"delayed-retry-type": "failed", "delayed-retry-min": 100, "delayed-retry-max": 900},
        "queues",
    )
    args = effective_args(declared, policy.definition)
    assert (args.delayed_retry_type, args.delayed_retry_min, args.delayed_retry_max) == ("failed", 5, 900)
    with pytest.raises(ValueError, match="is not a valid delayed retry type"):
        make_policy("/", "p", ".", {"delayed-retry-type": "sometimes"}, "queues")
