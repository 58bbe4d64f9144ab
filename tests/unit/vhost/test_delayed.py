"""The delayed-message exchange (vhost/delayed.py) and its heap, with a fake clock."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from ottermq.amqp.errors import CommandInvalid, PreconditionFailed
from ottermq.amqp.props import rewrite_props
from ottermq.amqp.table import Float, Long, LongLong, Short, Timestamp, encode_table
from ottermq.vhost.delayed import MAX_DELAY, Delayed, DelayHeap, delay_of, swap_delay_header
from ottermq.vhost.exchange import DelayedExchange, make_exchange
from ottermq.vhost.message import Message
from ottermq.vhost.vhost import ROUTED, UNROUTED, PublishResult, VHost


@pytest.mark.parametrize(
    ("value", "delay"),
    [
        (5000, 5000),
        (Short(7), 7),
        (LongLong(2**31), 2**31),
        ("250", 250),
        ("+3", 3),
        (Float(2.9), 2),
        (1.9, 1),
        (Decimal("12.7"), 12),
        (0, None),
        (-5, None),
        ("-5", None),
        (MAX_DELAY, MAX_DELAY),
        (MAX_DELAY + 1, None),
        ("soon", None),
        (" 5", None),
        (True, None),
        (Timestamp(5), None),
        (None, None),
        (b"5", None),
        (float("inf"), None),
    ],
)
def test_delay_of(value: Any, delay: int | None) -> None:
    assert delay_of({"x-delay": value}) == delay


def test_no_header_no_delay() -> None:
    assert delay_of(None) is None
    assert delay_of({}) is None
    assert delay_of({"x-delayy": 5}) is None


def _msg(headers: dict[str, Any] | None = None, key: str = "k") -> Message:
    props = rewrite_props(b"\x00\x00", encode_table(headers) if headers is not None else None, False)
    return Message("", key, props, b"body")


def test_swap_sets_negated_delay_as_signed_int() -> None:
    swapped = swap_delay_header(_msg({"x-delay": 5000, "keep": "me"}), 5000)
    headers = swapped.headers
    assert headers == {"x-delay": -5000, "keep": "me"}
    assert type(headers["x-delay"]) is Long
    assert swapped.body == b"body"
    assert delay_of(headers) is None  # not delayed again by a further delayed exchange


def test_heap_orders_by_due_then_publish_order() -> None:
    heap = DelayHeap()
    items = [Delayed(due, "/", "x", _msg(), 1) for due in (30, 10, 20, 10, 30)]
    for item in items:
        heap.push(item)
    assert len(heap) == 5 and heap.pending == {("/", "x"): 5}
    assert heap.next_due() == 10
    assert heap.pop_due(9) == []
    assert heap.pop_due(10) == [items[1], items[3]]
    assert heap.pop_due(100, limit=2) == [items[2], items[0]]
    assert heap.pop_due(100) == [items[4]]
    assert len(heap) == 0 and heap.pending == {} and heap.next_due() is None


def test_heap_remove_and_drop_exchange() -> None:
    heap = DelayHeap()
    a = [Delayed(i, "/", "a", _msg(), 1) for i in range(100)]
    b = [Delayed(i, "/", "b", _msg(), 1) for i in range(100)]
    c = Delayed(5, "other", "a", _msg(), 1)
    for item in [*a, *b, c]:
        heap.push(item)
    assert heap.remove(a[0]) and not heap.remove(a[0])
    gone = heap.drop_exchange("/", "a")
    assert len(gone) == 99 and all(not g.live for g in gone)
    assert heap.pending == {("/", "b"): 100, ("other", "a"): 1}
    assert len(heap._heap) <= 2 * len(heap)  # compacted: dead entries do not pile up
    assert heap.pop_due(5) == [b[0], b[1], b[2], b[3], b[4], b[5], c]
    assert heap.drop_exchange("other", None) == []
    assert [i.seq for i in heap.items("/", "b")][:2] == [b[6].seq, b[7].seq]


def test_delayed_exchange_declare_rules() -> None:
    with pytest.raises(PreconditionFailed, match="'x-delayed-type' must bean existing exchnage type"):
        make_exchange("d", "x-delayed-message")
    with pytest.raises(PreconditionFailed, match="must bean existing"):
        make_exchange("d", "x-delayed-message", arguments={"x-delayed-type": 5})
    with pytest.raises(CommandInvalid, match="invalid exchange type 'foo'"):
        make_exchange("d", "x-delayed-message", arguments={"x-delayed-type": "foo"})
    with pytest.raises(PreconditionFailed):
        make_exchange("d", "x-delayed-message", arguments={"x-delayed-type": "x-delayed-message"})
    x = make_exchange("d", "x-delayed-message", arguments={"x-delayed-type": "topic"})
    assert isinstance(x, DelayedExchange) and x.delayed_type == "topic"
    x.bind("a.*", ("queue", "q"), {})
    assert x.route("a.b") == {("queue", "q")}
    assert x.route("b.b") == set()


def test_delayed_headers_exchange_checks_bindings() -> None:
    x = make_exchange("d", "x-delayed-message", arguments={"x-delayed-type": "headers"})
    with pytest.raises(PreconditionFailed):
        x.bind("", ("queue", "q"), {"x-match": "some"})


class FakeDelayer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, bool]] = []
        self.deleted: list[str] = []

    def delay(
        self, vhost: VHost, exchange: Any, message: Message, delay: int, mandatory: bool
    ) -> PublishResult:
        self.calls.append((exchange.name, delay, mandatory))
        return ROUTED

    def exchange_deleted(self, vhost: str, name: str) -> None:
        self.deleted.append(name)


def test_vhost_hands_delayed_messages_to_the_delayer() -> None:
    vhost = VHost()
    delayer = FakeDelayer()
    vhost.delayer = delayer
    vhost.declare_queue("q", False, False, False, False, None, None)
    x = vhost.declare_exchange(
        "d", "x-delayed-message", False, True, False, False, {"x-delayed-type": "direct"}
    )
    vhost.bind("d", ("queue", "q"), "k", {})
    assert vhost.publish(x, _msg({"x-delay": 100}), mandatory=True) is ROUTED
    assert delayer.calls == [("d", 100, True)]
    assert vhost.queues["q"].message_count == 0
    assert vhost.publish(x, _msg({"x-delay": -1})) is ROUTED  # not delayed: routed at once
    assert vhost.publish(x, _msg()) is ROUTED
    assert vhost.publish(x, _msg({"x-delay": 5}), checked=True) is ROUTED  # came due: routed
    assert vhost.queues["q"].message_count == 3
    assert vhost.publish(x, _msg({}, key="nowhere")) is UNROUTED
    vhost.delete_exchange("d", False)
    assert delayer.deleted == ["d"]
