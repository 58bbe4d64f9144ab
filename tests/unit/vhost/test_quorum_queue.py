"""Quorum queue behaviour (``vhost/queue.py``, ``vhost/ready.py``): what RabbitMQ 3.10.8 did with the
same operations through pika (delivery counts, where a return goes, the reject-publish soft limit).
Fake TTL manager and a recording sink from ``test_queue.py``: no loop, no sleeps."""

from __future__ import annotations

from typing import Any

import pytest
from ottermq.amqp.table import LongLong, decode_table, encode_table
from ottermq.vhost.arguments import parse_queue_args
from ottermq.vhost.message import Message
from ottermq.vhost.queue import Queue

from .test_queue import FakeConsumer, FakeTTL, Sink

# installed (compiled by mypyc) and pure-Python modules, the same expectations (tests/conftest.py): the
# compiled classes used here are this module's own imports, so that [source] replaces them all
pytestmark = pytest.mark.hot_path

Q = {"x-queue-type": "quorum"}


def make(args: dict[str, Any] | None = None) -> tuple[Queue, FakeTTL, Sink]:
    ttl, sink = FakeTTL(), Sink()
    parsed = parse_queue_args(args or {}, "q")
    return Queue("q", "/", True, False, False, None, parsed, ttl=ttl, sink=sink), ttl, sink


def msg(body: bytes) -> Message:
    return Message("", "q", b"\x00\x00", body)


def quorum(**arguments: Any) -> Any:
    return make({**Q, **arguments})


def bodies_in_order(q: Any) -> list[bytes]:
    out = []
    while (entry := q.pop()) is not None:
        out.append(entry.message.body)
    return out


def take(q: Any, n: int) -> dict[bytes, Any]:
    taken = {}
    for _ in range(n):
        entry = q.pop()
        assert entry is not None
        taken[entry.message.body] = entry
    return taken


def test_every_return_counts_without_a_limit_and_goes_out_as_a_long():
    q, _, sink = quorum()
    q.enqueue(Message("", "q", b"\x20\x00" + encode_table({"h": 1}), b"m"))  # headers {"h": 1}
    counts = []
    for _ in range(4):
        entry = q.pop()
        assert entry is not None
        headers = q.outgoing(entry, get=True).headers
        counts.append((entry.redelivered, headers["x-delivery-count"]))
        assert type(headers["x-delivery-count"]) is LongLong and headers["h"] == 1
        q.requeue([entry])
    assert counts == [(False, 0), (True, 1), (True, 2), (True, 3)]
    assert sink.dead == []
    entry = q.peek()
    assert entry is not None and entry.message.headers == {"h": 1}  # the stored message is unchanged


def test_a_consumer_sees_no_header_until_a_return():
    q, _, _ = quorum()
    q.enqueue(msg(b"m"))
    entry = q.pop()
    assert entry is not None
    assert q.outgoing(entry) is entry.message  # a delivery: nothing added
    q.requeue([entry], down=True)
    entry = q.pop()
    assert entry is not None
    assert q.outgoing(entry).headers == {"x-delivery-count": 1}


def test_the_header_is_written_into_a_table_sorted_by_key():
    """RabbitMQ's ``rabbit_basic:add_header`` sorts the table; a publisher's own ``x-delivery-count``
    is replaced by the long."""
    q, _, _ = quorum()
    table = {"z": 1, "x-delivery-count": 7, "a": "b"}
    q.enqueue(Message("", "q", b"\x20\x00" + encode_table(table), b"m"))
    entry = q.pop()
    assert entry is not None
    raw = q.outgoing(entry, get=True).raw_props
    headers, _ = decode_table(raw, 2)
    assert list(headers) == ["a", "x-delivery-count", "z"] and headers["x-delivery-count"] == 0


@pytest.mark.parametrize(("limit", "gets"), [(0, 1), (-1, 1), (1, 2), (2, 3), ("5", 8)])
def test_delivery_limit(limit: object, gets: int):
    """RabbitMQ 3.10.8: limit N -> N + 1 gets, then the next return dead-letters; 0 and -1 let one
    delivery through; a non-number limit is never reached."""
    q, _, sink = quorum(**{"x-delivery-limit": limit})
    q.enqueue(msg(b"m"))
    got = 0
    for _ in range(8):
        entry = q.pop()
        if entry is None:
            break
        got += 1
        q.requeue([entry])
    assert got == gets
    assert sink.dead == ([] if gets == 8 else [("q", "delivery_limit", b"m")])


def test_a_nack_without_a_limit_goes_to_the_back():
    """nack 3, nack 1, reject 2 (RabbitMQ 3.10.8 without a delivery limit): 4, 5, 3, 1, 2."""
    q, _, _ = quorum()
    for b in (b"1", b"2", b"3", b"4", b"5"):
        q.enqueue(msg(b))
    taken = take(q, 3)
    for b in (b"3", b"1", b"2"):
        q.requeue([taken[b]], failed=b == b"2")
    assert bodies_in_order(q) == [b"4", b"5", b"3", b"1", b"2"]


def test_with_a_limit_returns_go_first_in_return_order():
    """The same with ``x-delivery-limit: 10``: 3, 1, 2, 4, 5."""
    q, _, _ = quorum(**{"x-delivery-limit": 10})
    for b in (b"1", b"2", b"3", b"4", b"5"):
        q.enqueue(msg(b))
    taken = take(q, 3)
    for b in (b"3", b"1", b"2"):
        q.requeue([taken[b]])
    assert bodies_in_order(q) == [b"3", b"1", b"2", b"4", b"5"]


def test_a_closed_channel_returns_its_deliveries_first_in_delivery_order():
    q, _, _ = quorum()
    for b in (b"1", b"2", b"3", b"4", b"5"):
        q.enqueue(msg(b))
    taken = take(q, 3)
    q.requeue([taken[b"1"], taken[b"2"], taken[b"3"]], down=True)
    assert bodies_in_order(q) == [b"1", b"2", b"3", b"4", b"5"]


def test_a_classic_queue_still_requeues_in_place():
    q, _, _ = make()
    for b in (b"1", b"2", b"3", b"4", b"5"):
        q.enqueue(msg(b))
    taken = take(q, 3)
    for b in (b"3", b"1"):
        q.requeue([taken[b]])
    assert bodies_in_order(q) == [b"1", b"3", b"4", b"5"]


def test_reject_publish_is_a_soft_limit():
    """x-max-length 10: 11 accepted, then refused until the queue is down to 8 (80 %)."""
    q, _, sink = quorum(**{"x-max-length": 10, "x-overflow": "reject-publish"})
    accepted = [q.enqueue(msg(b"x")) is not None for _ in range(12)]
    assert accepted == [True] * 11 + [False] and q.message_count == 11
    seen = []
    for _ in range(3):
        q.pop()
        seen.append((q.message_count, q.enqueue(msg(b"y")) is not None))
    assert seen == [(10, False), (9, False), (8, True)]
    assert sink.dead == []


def test_reject_publish_soft_limit_on_bytes():
    q, _, _ = quorum(**{"x-max-length-bytes": 10, "x-overflow": "reject-publish"})
    assert [q.enqueue(msg(b"xxx")) is not None for _ in range(6)] == [True] * 4 + [False] * 2


def test_a_consumer_taking_messages_lets_publishes_in_again():
    q, _, _ = quorum(**{"x-max-length": 10, "x-overflow": "reject-publish"})
    for _ in range(11):
        q.enqueue(msg(b"x"))
    consumer = FakeConsumer(capacity=5)
    q.add_consumer(consumer)
    assert q.message_count == 6 and q.enqueue(msg(b"y")) is not None


def test_reject_publish_dlx_acts_as_drop_head():
    """RabbitMQ 3.10 logs "Invalid overflow strategy" and keeps its default."""
    q, _, sink = quorum(**{"x-max-length": 2, "x-overflow": "reject-publish-dlx"})
    assert all(q.enqueue(msg(b)) is not None for b in (b"0", b"1", b"2", b"3"))
    assert bodies_in_order(q) == [b"2", b"3"]
    assert sink.dead == [("q", "maxlen", b"0"), ("q", "maxlen", b"1")]


def test_drop_head_as_a_classic_queue():
    q, _, sink = quorum(**{"x-max-length": 2})
    for b in (b"0", b"1", b"2", b"3"):
        q.enqueue(msg(b))
    assert bodies_in_order(q) == [b"2", b"3"]
    assert [b for _, _, b in sink.dead] == [b"0", b"1"]
