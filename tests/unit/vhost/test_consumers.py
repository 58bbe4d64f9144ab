"""A queue's consumers (``vhost/consumers.py``): round-robin, single active consumer, exclusivity."""

from __future__ import annotations

from typing import Any

import pytest
from ottermq.vhost.arguments import parse_queue_args
from ottermq.vhost.consumers import QueueConsumers, SingleActiveConsumers, consumer_priority, make_consumers
from ottermq.vhost.message import Entry, Message
from ottermq.vhost.queue import Queue

pytestmark = pytest.mark.hot_path


class FakeConsumer:
    def __init__(self, tag: str, capacity: int = 10**9, exclusive: bool = False) -> None:
        self.tag = tag
        self.exclusive = exclusive
        self.no_ack = False
        self.capacity = capacity
        self.got: list[bytes] = []

    def can_deliver(self) -> bool:
        return len(self.got) < self.capacity

    def deliver(self, queue: Queue, entry: Entry) -> None:
        self.got.append(entry.message.body)

    def on_queue_deleted(self, queue: Queue) -> None:
        pass

    def __repr__(self) -> str:
        return self.tag


def consumers(
    *tags: str, single_active: bool = True, quorum: bool = False, **priorities: int
) -> tuple[QueueConsumers, list[FakeConsumer]]:
    part = make_consumers(single_active, quorum)
    made = [FakeConsumer(tag) for tag in tags]
    for c in made:
        part.add(c, priorities.get(c.tag, 0))
    return part, made


def test_round_robin_without_single_active_consumer() -> None:
    part, (a, b, c) = consumers("a", "b", "c", single_active=False)
    assert [part.next() for _ in range(4)] == [b, c, a, b]
    assert part.active is None and {part.status(x) for x in (a, b, c)} == {"up"}


def test_round_robin_skips_consumers_that_cannot_take_more() -> None:
    part: QueueConsumers[FakeConsumer] = QueueConsumers()
    full, free = FakeConsumer("full", capacity=0), FakeConsumer("free")
    part.add(full)
    part.add(free)
    assert [part.next(), part.next()] == [free, free]
    part.remove(free)
    assert part.next() is None


def test_the_first_registered_is_active_whatever_the_priorities() -> None:
    part, (a, b, c) = consumers("a", "b", "c", b=5, c=9)
    assert part.active is a and [part.next() for _ in range(3)] == [a, a, a]
    assert [part.status(x) for x in (a, b, c)] == ["single_active", "waiting", "waiting"]


def test_a_blocked_active_consumer_blocks_the_queue() -> None:
    part: QueueConsumers[FakeConsumer] = SingleActiveConsumers()
    active, waiting = FakeConsumer("a", capacity=0), FakeConsumer("b")
    part.add(active)
    part.add(waiting)
    assert part.next() is None  # the waiting consumer gets nothing


@pytest.mark.parametrize(
    ("quorum", "successor"),
    [(False, "c"), (True, "b")],
    ids=["classic-highest-priority", "quorum-registration-order"],
)
def test_hand_over_when_the_active_consumer_goes(quorum: bool, successor: str) -> None:
    part, (a, b, c, d) = consumers("a", "b", "c", "d", quorum=quorum, c=5, d=5)
    assert part.remove(a)
    assert part.active is not None and part.active.tag == successor


def test_classic_hand_over_without_priorities_is_registration_order() -> None:
    part, (a, b, c) = consumers("a", "b", "c")
    part.remove(a)
    assert part.active is b
    part.remove(b)
    assert part.active is c
    part.remove(c)
    assert part.active is None and not part


def test_a_waiting_consumer_that_goes_changes_nothing() -> None:
    part, (a, b, c) = consumers("a", "b", "c", c=3)
    assert part.remove(b) and part.active is a and list(part) == [a, c]
    assert not part.remove(b)  # not there any more


def test_the_first_consumer_after_an_idle_spell_is_active() -> None:
    part, (a,) = consumers("a")
    part.remove(a)
    b = FakeConsumer("b")
    part.add(b, 7)
    assert part.active is b


@pytest.mark.parametrize(
    ("single_active", "quorum", "existing", "exclusive", "admitted"),
    [
        (False, False, [], True, True),
        (False, False, ["plain"], True, False),
        (False, False, ["exclusive"], False, False),
        (False, False, ["plain"], False, True),
        (True, False, [], True, False),  # a classic SAC queue refuses every exclusive consume
        (True, False, ["plain"], False, True),
        (False, True, ["exclusive"], False, True),  # quorum queues ignore the flag
        (False, True, ["plain"], True, True),
        (True, True, ["plain"], True, True),
    ],
)
def test_who_may_join(
    single_active: bool, quorum: bool, existing: list[str], exclusive: bool, admitted: bool
) -> None:
    part = make_consumers(single_active, quorum)
    for tag in existing:
        part.add(FakeConsumer(tag, exclusive=tag == "exclusive"))
    assert part.admits(exclusive) is admitted


def test_clear_forgets_everything() -> None:
    part, made = consumers("a", "b", b=2)
    assert part.clear() == made
    assert part.active is None and len(part) == 0 and made[0] not in part


@pytest.mark.parametrize(
    ("arguments", "priority"),
    [
        (None, 0),
        ({}, 0),
        ({"x-priority": 4}, 4),
        ({"x-priority": -2}, -2),
        ({"x-priority": True}, 0),
        ({"x-priority": "9"}, 0),
    ],
)
def test_consumer_priority(arguments: Any, priority: int) -> None:
    assert consumer_priority(arguments) == priority


def _queue(**arguments: Any) -> Queue:
    args = parse_queue_args({"x-single-active-consumer": True, **arguments}, "q")
    return Queue("q", "/", True, False, False, None, args)


def _publish(queue: Queue, *bodies: bytes) -> None:
    for body in bodies:
        queue.enqueue(Message("", "q", b"", body))


def test_quorum_queue_hands_what_is_ready_to_the_new_active_consumer_at_once() -> None:
    queue = _queue(**{"x-queue-type": "quorum"})
    a, b = FakeConsumer("a", capacity=2), FakeConsumer("b")
    queue.add_consumer(a)
    queue.add_consumer(b)
    _publish(queue, b"1", b"2", b"3")
    assert (a.got, b.got, queue.message_count) == ([b"1", b"2"], [], 1)
    assert not queue.remove_consumer(a)
    assert b.got == [b"3"]


def test_classic_queue_hands_what_is_ready_over_at_its_next_run() -> None:
    queue = _queue()
    a, b = FakeConsumer("a", capacity=2), FakeConsumer("b")
    queue.add_consumer(a)
    queue.add_consumer(b)
    _publish(queue, b"1", b"2", b"3")
    queue.remove_consumer(a)
    assert (b.got, queue.selection.active) == ([], b)
    _publish(queue, b"4")
    assert b.got == [b"3", b"4"]


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_queue_hand_over_can_wait_for_the_requeue(queue_type: str) -> None:
    queue = _queue(**{"x-queue-type": queue_type})
    a, b = FakeConsumer("a", capacity=1), FakeConsumer("b")
    queue.add_consumer(a)
    queue.add_consumer(b)
    _publish(queue, b"1", b"2")
    queue.remove_consumer(a, dispatch=False)
    assert b.got == [] and queue.selection.active is b
    queue.dispatch()
    assert b.got == [b"2"]


def test_queue_priority_from_consume_arguments_chooses_the_successor() -> None:
    queue = _queue()
    a, b, c = FakeConsumer("a"), FakeConsumer("b"), FakeConsumer("c")
    queue.add_consumer(a, {"x-priority": 1})
    queue.add_consumer(b)
    queue.add_consumer(c, {"x-priority": 3})
    queue.remove_consumer(a)
    assert queue.selection.active is c


def test_auto_delete_single_active_queue_goes_with_its_last_consumer() -> None:
    args = parse_queue_args({"x-single-active-consumer": True}, "q")
    queue = Queue("q", "/", False, False, True, None, args)
    a, b = FakeConsumer("a"), FakeConsumer("b")
    queue.add_consumer(a)
    queue.add_consumer(b)
    assert not queue.remove_consumer(a)
    assert queue.remove_consumer(b)
