"""``VHost.publish``: the one publish operation (channel publish, tx commit, dead-lettering)."""

from __future__ import annotations

from typing import Any

from ottermq.vhost.message import Entry, Message, SelectedMessage
from ottermq.vhost.queue import Queue
from ottermq.vhost.vhost import VHost


class FakeMessageStore:
    """Gives every persistent entry a store id, as ``persistence.hook.DurableHook`` does."""

    def __init__(self) -> None:
        self.added: list[Entry] = []

    def message_added(self, queue: Queue, entry: Entry) -> None:
        self.added.append(entry)
        entry.store_id = len(self.added)

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


def vhost(*queues: str, **args: Any) -> VHost:
    vh = VHost()
    for name in queues:
        vh.declare_queue(name, False, False, False, False, args or None, None)
    return vh


def msg(key: str, persistent: bool = False) -> Message:
    return Message("", key, b"\x00\x00", b"body", persistent)


def test_unroutable_message_is_not_routed():
    result = vhost("q").publish(None, msg("nowhere"))
    assert (result.routed, result.refused, result.stored) == (False, False, None)


def test_default_exchange_routes_by_queue_name_and_enqueues():
    vh = vhost("q")
    result = vh.publish(None, msg("q"))
    assert (result.routed, result.refused, result.stored) == (True, False, None)
    assert vh.queues["q"].message_count == 1


def test_fanout_reaches_every_bound_queue_once():
    vh = vhost("a", "b")
    vh.declare_exchange("f", "fanout", False, False, False, False, None)
    vh.bind("f", ("queue", "a"), "", {})
    vh.bind("f", ("queue", "b"), "", {})
    vh.bind("f", ("queue", "b"), "other", {})
    assert vh.publish(vh.exchanges["f"], msg("k")).routed
    assert [vh.queues[n].message_count for n in ("a", "b")] == [1, 1]


def test_cc_keys_route_too():
    vh = vhost("a", "b", "c")
    selected = SelectedMessage(msg("a"), b"\x00\x00", ("b",))
    vh.publish(None, selected)
    assert [vh.queues[n].message_count for n in ("a", "b", "c")] == [1, 1, 0]


def test_reject_publish_overflow_is_refused_but_routed():
    vh = vhost("full", **{"x-max-length": 0, "x-overflow": "reject-publish"})
    result = vh.publish(None, msg("full"))
    assert (result.routed, result.refused) == (True, True)
    assert vh.queues["full"].message_count == 0


def test_stored_entries_are_reported_for_the_confirm():
    vh = vhost("d")
    store = FakeMessageStore()
    vh.queues["d"].store = store  # type: ignore[assignment]
    assert vh.publish(None, msg("d")).stored is None  # transient: nothing written
    result = vh.publish(None, msg("d", persistent=True))
    assert result.stored is not None
    [(queue, entry)] = result.stored
    assert queue is vh.queues["d"] and entry is store.added[0] and entry.store_id == 1


class DirectConsumer:
    tag = "c"
    exclusive = False

    def __init__(self, no_ack: bool) -> None:
        self.no_ack = no_ack
        self.got: list[Entry] = []

    def can_deliver(self) -> bool:
        return True

    def deliver(self, queue: Queue, entry: Entry) -> None:
        self.got.append(entry)

    def on_queue_deleted(self, queue: Queue) -> None:
        pass


def test_a_persistent_message_taken_at_once_by_a_no_ack_consumer_is_not_stored():
    vh = vhost("d")
    store = FakeMessageStore()
    queue = vh.queues["d"]
    queue.store = store  # type: ignore[assignment]
    no_ack = DirectConsumer(no_ack=True)
    queue.add_consumer(no_ack)
    result = vh.publish(None, msg("d", persistent=True))
    assert result.routed and result.stored is None and store.added == []  # confirmed at once
    assert [e.message.body for e in no_ack.got] == [b"body"]
    queue.remove_consumer(no_ack)
    acking = DirectConsumer(no_ack=False)
    queue.add_consumer(acking)
    result = vh.publish(None, msg("d", persistent=True))
    assert result.stored is not None and len(store.added) == 1  # it may come back: stored first
    assert acking.got == store.added


def test_exclude_filters_target_queues():
    vh = vhost("a", "b")
    vh.declare_exchange("f", "fanout", False, False, False, False, None)
    vh.bind("f", ("queue", "a"), "", {})
    vh.bind("f", ("queue", "b"), "", {})
    result = vh.publish(vh.exchanges["f"], msg("k"), exclude=frozenset({"a"}))
    assert result.routed and not result.excluded
    assert [vh.queues[n].message_count for n in ("a", "b")] == [0, 1]
    result = vh.publish(vh.exchanges["f"], msg("k"), exclude=frozenset({"a", "b"}))
    assert (result.routed, result.excluded) == (False, True)
    result = vh.publish(None, msg("nowhere"), exclude=frozenset({"a"}))
    assert (result.routed, result.excluded) == (False, False)


def test_withdraw_takes_back_a_ready_entry_only():
    vh = vhost("w")
    queue = vh.queues["w"]
    store = FakeMessageStore()
    queue.store = store  # type: ignore[assignment]
    [(_, first)] = vh.publish(None, msg("w", persistent=True)).stored or []
    [(_, second)] = vh.publish(None, msg("w", persistent=True)).stored or []
    assert queue.withdraw(second) and queue.message_count == 1 and second.store_id == 0
    taken = queue.pop()
    assert taken is first
    assert not queue.withdraw(first)  # delivered: it stays with its consumer
    assert queue.pop() is None
