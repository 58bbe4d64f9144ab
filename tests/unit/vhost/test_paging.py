"""Queues with a window: what is beyond it goes to a pager (spill files under tmp_path), and nothing
changes for clients: order, TTL, priorities, limits, requeue, purge, withdraw."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ottermq.persistence.spill import SpillDir
from ottermq.vhost.arguments import parse_queue_args
from ottermq.vhost.message import PAGED, Entry, Message
from ottermq.vhost.paging import Paging
from ottermq.vhost.queue import Queue

from .test_queue import FakeConsumer, FakeTTL, Sink

pytestmark = pytest.mark.hot_path


def make(
    tmp_path: Path, args: dict[str, Any] | None = None, window: int = 3, window_bytes: int = 1 << 30
) -> tuple[Queue, FakeTTL, Sink]:
    ttl, sink = FakeTTL(), Sink()
    q = Queue("q", "/", False, False, False, None, parse_queue_args(args or {}, "q"), ttl=ttl, sink=sink)
    q.set_paging(Paging(SpillDir(tmp_path).pager, window, window_bytes))
    return q, ttl, sink


def msg(
    body: bytes, expiration: int | None = None, priority: int | None = None, persistent: bool = False
) -> Message:
    return Message("", "q", b"\x00\x00", body, persistent, priority, expiration)


def bodies(q: Queue) -> list[bytes]:
    out = []
    while (e := q.pop()) is not None:
        out.append(e.message.body)
    return out


def test_beyond_the_window_messages_are_paged_and_come_back_in_order(tmp_path):
    q, _, _ = make(tmp_path)
    entries = [q.enqueue(msg(b"%d" % i)) for i in range(10)]
    assert q.message_count == 10 and q.paged == 7
    assert [e.state for e in entries[3:]] == [PAGED] * 7  # type: ignore[union-attr]
    assert q.ready_bytes == 10
    assert bodies(q) == [b"%d" % i for i in range(10)]
    assert q.message_count == 0 and q.paged == 0 and q.ready_bytes == 0


def test_once_paged_new_messages_queue_behind_the_paged_ones(tmp_path):
    q, _, _ = make(tmp_path)
    for i in range(5):
        q.enqueue(msg(b"%d" % i))
    assert q.pop().message.body == b"0"  # type: ignore[union-attr]
    q.enqueue(msg(b"5"))  # the window has room, but 3 and 4 are on disk: 5 goes behind them
    assert q.paged == 3
    assert bodies(q) == [b"1", b"2", b"3", b"4", b"5"]


def test_a_lazy_queue_keeps_nothing_ready_in_memory(tmp_path):
    q, _, _ = make(tmp_path, {"x-queue-mode": "lazy"}, window=1000)
    for i in range(50):
        q.enqueue(msg(b"x" * 100, persistent=i % 2 == 0))
    assert q.paged == 50
    assert q.paged_transient == (25, 2500) and q.paged_bytes == 5000
    assert len(bodies(q)) == 50


def test_the_byte_window_pages_too(tmp_path):
    q, _, _ = make(tmp_path, window=1000, window_bytes=250)
    for _ in range(5):
        q.enqueue(msg(b"x" * 100))
    assert q.paged == 2  # paged once 250 bytes are in memory (one message larger than it stays)


def test_consumers_get_paged_messages_in_order_and_requeues_go_first(tmp_path):
    q, _, _ = make(tmp_path)
    for i in range(8):
        q.enqueue(msg(b"%d" % i))
    c = FakeConsumer(capacity=4)
    q.add_consumer(c)
    assert [e.message.body for e in c.got] == [b"0", b"1", b"2", b"3"]
    q.requeue(c.got[1:3])
    c.got.clear()
    c.capacity = 100
    q.dispatch()
    assert [e.message.body for e in c.got] == [b"1", b"2", b"4", b"5", b"6", b"7"]
    assert all(e.redelivered for e in c.got[:2]) and not any(e.redelivered for e in c.got[2:])


def test_a_paged_head_expires_and_is_dead_lettered(tmp_path):
    q, ttl, sink = make(tmp_path, {"x-message-ttl": 100, "x-queue-mode": "lazy"})
    q.enqueue(msg(b"a"))
    q.enqueue(msg(b"b"))
    assert q.message_count == 2
    assert ttl.armed[q] == ttl.t + 100  # armed for the (paged) head
    ttl.advance(100, q)
    assert [d[2] for d in sink.dead] == [b"a", b"b"] and q.message_count == 0


def test_priorities_page_per_level_and_keep_delivery_order(tmp_path):
    q, _, _ = make(tmp_path, {"x-max-priority": 5}, window=2)
    for i in range(6):
        q.enqueue(msg(b"low%d" % i, priority=1))
    for i in range(6):
        q.enqueue(msg(b"high%d" % i, priority=5))
    assert q.paged == 8
    assert bodies(q) == [b"high%d" % i for i in range(6)] + [b"low%d" % i for i in range(6)]


def test_drop_head_overflow_dead_letters_from_the_head_with_paged_messages(tmp_path):
    q, _, sink = make(tmp_path, {"x-max-length": 4}, window=2)
    for i in range(6):
        q.enqueue(msg(b"%d" % i))
    assert [d[2] for d in sink.dead] == [b"0", b"1"]
    assert bodies(q) == [b"2", b"3", b"4", b"5"]


def test_purge_counts_paged_messages_and_removes_the_spill(tmp_path):
    q, _, _ = make(tmp_path)
    for i in range(10):
        q.enqueue(msg(b"%d" % i))
    assert q.purge() == 10
    assert q.message_count == 0 and q.paged == 0
    assert not list(tmp_path.rglob("*.seg"))
    q.enqueue(msg(b"again"))
    assert bodies(q) == [b"again"]


def test_withdraw_of_a_paged_entry_leaves_it_out(tmp_path):
    q, _, _ = make(tmp_path)
    entries = [q.enqueue(msg(b"%d" % i)) for i in range(6)]
    assert q.withdraw(entries[4])  # type: ignore[arg-type]
    assert q.message_count == 5 and q.ready_bytes == 5
    assert bodies(q) == [b"0", b"1", b"2", b"3", b"5"]


def test_withdraw_after_page_in_finds_the_entry_in_memory(tmp_path):
    q, _, _ = make(tmp_path)
    entries = [q.enqueue(msg(b"%d" % i)) for i in range(6)]
    for _ in range(3):
        q.pop()
    assert q.peek() is not None  # paged in: 3, 4, 5 are other objects now
    assert q.withdraw(entries[4])  # type: ignore[arg-type]
    assert bodies(q) == [b"3", b"5"]


def test_ready_entries_read_paged_ones_back(tmp_path):
    q, _, _ = make(tmp_path)
    for i in range(7):
        q.enqueue(msg(b"%d" % i))
    listed = list(q.ready_entries())
    assert [e.message.body for e in listed] == [b"%d" % i for i in range(7)]
    assert [e.state for e in listed[3:]] == [PAGED] * 4
    assert q.withdraw(listed[5])  # a move takes a paged message
    assert bodies(q) == [b"0", b"1", b"2", b"3", b"4", b"6"]


def test_a_queue_made_lazy_by_a_policy_pages_its_window_out(tmp_path):
    q, _, _ = make(tmp_path, window=100)
    for i in range(10):
        q.enqueue(msg(b"%d" % i))
    assert q.paged == 0
    lazy = parse_queue_args({"x-queue-mode": "lazy"}, "q")
    q.set_policy("p", None, {"queue-mode": "lazy"}, lazy)
    assert q.paged == 10
    q.enqueue(msg(b"10"))
    assert bodies(q) == [b"%d" % i for i in range(11)]


def test_without_paging_a_lazy_queue_keeps_everything_in_memory():
    q = Queue("q", "/", False, False, False, None, parse_queue_args({"x-queue-mode": "lazy"}, "q"))
    for i in range(10):
        q.enqueue(msg(b"%d" % i))
    assert q.paged == 0 and q.message_count == 10


def test_recovered_entries_beyond_the_window_are_paged(tmp_path):
    q, _, _ = make(tmp_path)
    q.recover([Entry(msg(b"%d" % i, persistent=True), i + 1) for i in range(10)])
    q.recovered()
    assert q.paged == 7 and q.message_count == 10
    assert bodies(q) == [b"%d" % i for i in range(10)]
