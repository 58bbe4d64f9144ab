"""Queue behaviour with a fake TTL manager and a recording sink: no loop, no sleeps."""

from __future__ import annotations

from typing import Any

import pytest
from ottermq.ttl.deadline import expires_at
from ottermq.vhost.arguments import parse_queue_args
from ottermq.vhost.message import Entry, Message
from ottermq.vhost.queue import DISPATCH_BUDGET, Queue

# installed (compiled by mypyc) and pure-Python modules, the same expectations (tests/conftest.py)
pytestmark = pytest.mark.hot_path


class FakeTTL:
    enabled = True

    def __init__(self) -> None:
        self.t = 1_000_000
        self.armed: dict[Any, int] = {}
        self.expiry: dict[Any, int] = {}

    def now(self) -> int:
        return self.t

    def expires_at(self, now: int, queue_ttl: int | None, message_ttl: int | None) -> int | None:
        return expires_at(now, queue_ttl, message_ttl)

    def schedule(self, target: Any, deadline: int) -> None:
        if target not in self.armed or deadline < self.armed[target]:
            self.armed[target] = deadline

    def cancel(self, target: Any) -> None:
        self.armed.pop(target, None)
        self.expiry.pop(target, None)

    def schedule_queue_expiry(self, target: Any, at: int) -> None:
        self.expiry[target] = at

    def cancel_queue_expiry(self, target: Any) -> None:
        self.expiry.pop(target, None)

    def advance(self, ms: int, queue: Queue) -> None:
        """Move time and fire the queue's timers that are due (as the default manager would)."""
        self.t += ms
        due = self.armed.get(queue)
        if due is not None and due <= self.t:
            del self.armed[queue]
            queue.expire(self.t)
        at = self.expiry.get(queue)
        if at is not None and at <= self.t:
            del self.expiry[queue]
            queue.expire_queue(self.t)


class Sink:
    def __init__(self) -> None:
        self.dead: list[tuple[str, str, bytes]] = []

    def dead_letter(self, queue: Queue, entries: list[Entry], reason: str) -> None:
        self.dead.extend((queue.name, reason, e.message.body) for e in entries)
        queue.forget(entries)  # DeadLetterSink: the sink deletes the stored rows


class FakeConsumer:
    tag = "c"
    exclusive = False
    no_ack = False

    def __init__(self, capacity: int = 10**9) -> None:
        self.capacity = capacity
        self.got: list[Entry] = []

    def can_deliver(self) -> bool:
        return len(self.got) < self.capacity

    def deliver(self, queue: Queue, entry: Entry) -> None:
        self.got.append(entry)

    def on_queue_deleted(self, queue: Queue) -> None:
        pass


def make(args: dict[str, Any] | None = None, limits: bool = True) -> tuple[Queue, FakeTTL, Sink]:
    ttl, sink = FakeTTL(), Sink()
    q = Queue(
        "q",
        "/",
        False,
        False,
        False,
        None,
        parse_queue_args(args or {}, "q"),
        ttl=ttl,
        sink=sink,
        limits=limits,
    )
    return q, ttl, sink


def msg(body: bytes, expiration: int | None = None, priority: int | None = None) -> Message:
    return Message("", "q", b"\x00\x00", body, False, priority, expiration)


def test_effective_ttl_is_the_lower_of_queue_and_message():
    assert expires_at(100, 50, 10) == 110
    assert expires_at(100, 10, 50) == 110
    assert expires_at(100, None, 7) == 107
    assert expires_at(100, 7, None) == 107
    assert expires_at(100, None, None) is None


def test_head_expires_on_timer_without_consumer():
    q, ttl, sink = make({"x-message-ttl": 100})
    q.enqueue(msg(b"a"))
    assert ttl.armed[q] == ttl.t + 100
    ttl.advance(99, q)
    assert sink.dead == [] and q.message_count == 1
    ttl.advance(1, q)
    assert sink.dead == [("q", "expired", b"a")] and q.message_count == 0


def test_message_behind_longer_head_waits_for_the_head():
    q, ttl, sink = make()
    q.enqueue(msg(b"long", expiration=1000))
    q.enqueue(msg(b"short", expiration=10))
    ttl.advance(500, q)
    assert sink.dead == []
    ttl.advance(500, q)
    assert [b for _, _, b in sink.dead] == [b"long", b"short"]


def test_exact_ttl_expires_each_message_at_its_own_deadline():
    q, ttl, sink = make({"x-ottermq-exact-ttl": True})
    q.enqueue(msg(b"long", expiration=1000))
    q.enqueue(msg(b"short", expiration=10))
    q.enqueue(msg(b"none"))
    ttl.advance(10, q)
    assert sink.dead == [("q", "expired", b"short")]
    assert q.message_count == 2 and q.ready_bytes == 8
    c = FakeConsumer()
    q.add_consumer(c)
    assert [e.message.body for e in c.got] == [b"long", b"none"]


def test_exact_ttl_switched_on_and_off_by_a_policy():
    from ottermq.vhost.policy import effective_args

    q, ttl, sink = make()
    q.enqueue(msg(b"long", expiration=1000))
    q.enqueue(msg(b"due", expiration=10))
    q.enqueue(msg(b"later", expiration=50))
    ttl.advance(20, q)
    assert sink.dead == []  # head-only: "due" waits behind "long"
    on = {"ottermq-exact-ttl": True}
    q.set_policy("exact", None, on, effective_args(q.declared_args, on))
    assert sink.dead == [("q", "expired", b"due")]  # already due: expires at once
    ttl.advance(30, q)
    assert sink.dead[-1] == ("q", "expired", b"later") and q.message_count == 1
    q.set_policy(None, None, {}, q.declared_args)  # policy deleted: head-only again
    q.enqueue(msg(b"short", expiration=5))
    ttl.advance(10, q)
    assert len(sink.dead) == 2 and q.message_count == 2


def test_ttl_zero_goes_to_a_ready_consumer_or_expires_at_once():
    q, ttl, sink = make({"x-message-ttl": 0})
    c = FakeConsumer()
    q.add_consumer(c)
    q.enqueue(msg(b"taken"))
    assert [e.message.body for e in c.got] == [b"taken"] and sink.dead == []
    c.capacity = 1
    q.enqueue(msg(b"nobody"))
    assert sink.dead == [("q", "expired", b"nobody")] and q.message_count == 0


def test_requeue_after_deadline_dead_letters_instead():
    q, ttl, sink = make({"x-message-ttl": 100})
    q.enqueue(msg(b"a"))
    entry = q.pop()
    assert entry is not None
    ttl.advance(200, q)  # delivered-but-unacked: never expires
    assert sink.dead == []
    q.requeue([entry])
    assert sink.dead == [("q", "expired", b"a")] and q.message_count == 0


def test_requeue_keeps_deadline_and_position():
    q, ttl, sink = make({"x-message-ttl": 100})
    for b in (b"a", b"b"):
        q.enqueue(msg(b))
    a = q.pop()
    assert a is not None
    ttl.advance(50, q)
    q.requeue([a])
    assert [e.message.body for e in q.ready_entries()] == [b"a", b"b"] and a.redelivered
    ttl.advance(50, q)
    assert [b for _, _, b in sink.dead] == [b"a", b"b"]


def test_expired_head_is_dead_lettered_on_get():
    q, ttl, sink = make()
    q.enqueue(msg(b"old", expiration=5))
    q.enqueue(msg(b"new"))
    ttl.t += 10  # the timer has not fired yet
    entry = q.pop()
    assert entry is not None and entry.message.body == b"new"
    assert sink.dead == [("q", "expired", b"old")]


def test_drop_head_overflow_dead_letters_maxlen():
    q, ttl, sink = make({"x-max-length": 2})
    for b in (b"1", b"2", b"3"):
        q.enqueue(msg(b))
    assert sink.dead == [("q", "maxlen", b"1")]
    assert [e.message.body for e in q.ready_entries()] == [b"2", b"3"]


def test_max_length_bytes_counts_bodies():
    q, ttl, sink = make({"x-max-length-bytes": 5})
    q.enqueue(msg(b"abc"))
    q.enqueue(msg(b"de"))
    q.enqueue(msg(b"f"))
    assert sink.dead == [("q", "maxlen", b"abc")] and q.ready_bytes == 3


@pytest.mark.parametrize("overflow,dead", [("reject-publish", []), ("reject-publish-dlx", [b"2"])])
def test_reject_publish(overflow, dead):
    q, ttl, sink = make({"x-max-length": 1, "x-overflow": overflow})
    assert q.enqueue(msg(b"1")) is not None
    assert q.enqueue(msg(b"2")) is None
    assert [b for _, _, b in sink.dead] == dead and q.message_count == 1


def test_limits_disabled_keeps_everything():
    q, ttl, sink = make({"x-max-length": 1}, limits=False)
    for b in (b"1", b"2"):
        q.enqueue(msg(b))
    assert q.message_count == 2 and sink.dead == []


def test_delivery_limit_dead_letters_after_too_many_returns():
    q, ttl, sink = make({"x-delivery-limit": 1})
    q.enqueue(msg(b"m"))
    first = q.pop()
    assert first is not None
    q.requeue([first])
    second = q.pop()
    assert second is not None and second.redelivered
    assert second.message.headers is None  # the stored message; the count goes out with the delivery
    assert q.outgoing(second).headers == {"x-delivery-count": 1}
    q.requeue([second])
    assert sink.dead == [("q", "delivery_limit", b"m")]


def test_x_expires_deletes_unused_queue_and_is_reset_by_use():
    q, ttl, sink = make({"x-expires": 100})
    deleted: list[Queue] = []
    q.on_expired = deleted.append
    q.enqueue(msg(b"x"))  # publishing is not use
    ttl.advance(60, q)
    q.touch()  # e.g. basic.get or a redeclare
    ttl.advance(60, q)
    assert deleted == []
    ttl.advance(40, q)
    assert deleted == [q] and sink.dead == []


def test_x_expires_spares_a_queue_with_consumers():
    q, ttl, sink = make({"x-expires": 100})
    deleted: list[Queue] = []
    q.on_expired = deleted.append
    q.add_consumer(FakeConsumer())
    ttl.advance(150, q)
    assert deleted == []


def test_priority_queue_orders_and_expires_per_level():
    q, ttl, sink = make({"x-max-priority": 3})
    q.enqueue(msg(b"low", priority=0))
    q.enqueue(msg(b"high", priority=3, expiration=10))
    ttl.advance(10, q)
    assert sink.dead == [("q", "expired", b"high")]
    assert [e.message.body for e in q.ready_entries()] == [b"low"]


# -- RabbitMQ's drop_expired_msgs: expired heads leave after every head change -------------------------
def bodies(entries: Any) -> list[bytes]:
    return [e.message.body for e in entries]


def test_get_drops_the_expired_messages_it_exposes_before_counting():
    """m2 expired behind a live head: get-ok for m1 counts 0 and m2 is dead-lettered right then."""
    q, ttl, sink = make()
    q.enqueue(msg(b"m1"))
    q.enqueue(msg(b"m2", expiration=1))
    q.enqueue(msg(b"m3", expiration=1))
    q.enqueue(msg(b"m4"))
    q.enqueue(msg(b"m5", expiration=1))
    ttl.t += 60  # no timer: only the head is watched and it has no TTL
    assert q.message_count == 5 and sink.dead == []  # declare-ok (stat) runs no check
    entry = q.pop()
    assert entry is not None and entry.message.body == b"m1"
    assert sink.dead == [("q", "expired", b"m2"), ("q", "expired", b"m3")]
    assert q.message_count == 2  # m4 is live and hides m5
    assert q.purge() == 2 and sink.dead[2:] == []  # purge counts m5 and never dead-letters


def test_delivery_to_a_consumer_drops_the_expired_new_head():
    q, ttl, sink = make()
    for body, exp in ((b"m1", None), (b"m2", 1), (b"m3", None)):
        q.enqueue(msg(body, expiration=exp))
    ttl.t += 60
    c = FakeConsumer(capacity=1)
    q.add_consumer(c)
    assert bodies(c.got) == [b"m1"]
    assert sink.dead == [("q", "expired", b"m2")] and q.message_count == 1


def test_drop_head_overflow_then_drops_the_expired_new_head():
    q, ttl, sink = make({"x-max-length": 2})
    q.enqueue(msg(b"m1"))
    q.enqueue(msg(b"m2", expiration=1))
    ttl.t += 60
    q.enqueue(msg(b"m3"))
    assert sink.dead == [("q", "maxlen", b"m1"), ("q", "expired", b"m2")]
    assert bodies(q.ready_entries()) == [b"m3"]


def test_expired_message_requeued_behind_a_live_head_waits_counted():
    """As RabbitMQ: requeue puts it back; it is dead-lettered when it reaches the head, not before."""
    q, ttl, sink = make()
    for body, exp in ((b"m0", None), (b"m1", 100), (b"m2", None)):
        q.enqueue(msg(body, expiration=exp))
    m0, m1 = q.pop(), q.pop()
    assert m0 is not None and m1 is not None
    q.requeue([m0])
    ttl.advance(200, q)
    q.requeue([m1])
    assert sink.dead == [] and q.message_count == 3
    entry = q.pop()
    assert entry is not None and entry.message.body == b"m0"
    assert sink.dead == [("q", "expired", b"m1")] and q.message_count == 1


def test_expired_message_requeued_to_the_head_is_dead_lettered_at_once():
    q, ttl, sink = make()
    for body, exp in ((b"m0", None), (b"m1", 100), (b"m2", None)):
        q.enqueue(msg(body, expiration=exp))
    m0, m1 = q.pop(), q.pop()
    assert m0 is not None and m1 is not None
    ttl.advance(200, q)
    q.requeue([m1])
    assert sink.dead == [("q", "expired", b"m1")] and q.message_count == 1
    q.requeue([m0])
    assert bodies(q.ready_entries()) == [b"m0", b"m2"]


def test_priority_queue_expires_in_delivery_order_only():
    """rabbit_priority_queue: a low-priority message expired behind a live high-priority head waits."""
    q, ttl, sink = make({"x-max-priority": 5})
    q.enqueue(msg(b"p0", priority=0, expiration=50))
    q.enqueue(msg(b"p5", priority=5))
    ttl.advance(100, q)  # the timer armed for p0 fires, but p5 is the head
    assert sink.dead == [] and q.message_count == 2
    entry = q.pop()
    assert entry is not None and entry.message.body == b"p5"
    assert sink.dead == [("q", "expired", b"p0")] and q.message_count == 0


def test_queue_without_ttl_never_reads_the_clock_on_get_or_dispatch():
    q, ttl, sink = make()
    for body in (b"a", b"b", b"c"):
        q.enqueue(msg(body))
    reads: list[int] = []
    ttl.now = lambda: reads.append(1) or ttl.t  # type: ignore[method-assign]
    q.pop()
    q.add_consumer(FakeConsumer(capacity=1))
    assert reads == []


def test_a_dispatch_hands_out_a_budget_per_event_loop_turn():
    q, _ttl, _sink = make()
    turns: list[Any] = []
    q.call_soon = turns.append  # the event loop's call_soon: what the next turn runs
    n = DISPATCH_BUDGET * 2 + 10
    for i in range(n):
        q.enqueue(msg(str(i).encode()))
    c = FakeConsumer()
    q.add_consumer(c)  # dispatches
    assert len(c.got) == DISPATCH_BUDGET and len(turns) == 1
    q.dispatch()  # more work this turn (a publish, an ack): the next turn is already scheduled
    assert len(c.got) == 2 * DISPATCH_BUDGET and len(turns) == 1
    turns.pop()()
    assert len(c.got) == n and not turns
    assert [e.message.body for e in c.got] == [str(i).encode() for i in range(n)]  # in order


def test_without_an_event_loop_a_dispatch_hands_out_all():
    q, _ttl, _sink = make()
    for i in range(DISPATCH_BUDGET + 10):
        q.enqueue(msg(str(i).encode()))
    c = FakeConsumer()
    q.add_consumer(c)
    assert len(c.got) == DISPATCH_BUDGET + 10
