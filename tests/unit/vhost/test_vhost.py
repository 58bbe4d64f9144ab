"""``VHost``: declares and their equivalence, reserved names, exclusivity, deletes, auto-delete,
the exchange-to-exchange routing walk and ``x-expires``. No loop, no sleeps: a fake TTL manager.

Publishing and unbinding have their own files (``test_vhost_publish.py``, ``test_vhost_unbind.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
from ottermq.amqp.errors import AccessRefused, NotFound, PreconditionFailed, ResourceLocked
from ottermq.ttl.deadline import expires_at
from ottermq.vhost.message import Entry, Message
from ottermq.vhost.queue import Queue
from ottermq.vhost.vhost import PREDECLARED, VHost

OWNER, OTHER = object(), object()


class FakeTTL:
    """A TTL manager on a fake epoch-ms clock; ``advance`` fires the due timers."""

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

    def advance(self, ms: int) -> None:
        self.t += ms
        for target, at in list(self.expiry.items()):
            if at <= self.t and self.expiry.get(target) == at:
                del self.expiry[target]
                target.expire_queue(self.t)
        for target, at in list(self.armed.items()):
            if at <= self.t and self.armed.get(target) == at:
                del self.armed[target]
                target.expire(self.t)


class RecordingSink:
    def __init__(self) -> None:
        self.dead: list[tuple[str, str]] = []

    def dead_letter(self, queue: Queue, entries: list[Entry], reason: str) -> None:
        self.dead += [(queue.name, reason) for _ in entries]
        queue.forget(entries)  # DeadLetterSink: the sink deletes the stored rows


class FakeConsumer:
    tag = "c"
    exclusive = False
    no_ack = False

    def __init__(self) -> None:
        self.got: list[Entry] = []
        self.cancelled: list[str] = []

    def can_deliver(self) -> bool:
        return True

    def deliver(self, queue: Queue, entry: Entry) -> None:
        self.got.append(entry)

    def on_queue_deleted(self, queue: Queue) -> None:
        self.cancelled.append(queue.name)


class RecordingDefinitions:
    """A ``DefinitionStore`` that writes down what the vhost reports."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def exchange_declared(self, vhost: str, exchange: Any) -> None:
        self.events.append(("exchange+", exchange.name))

    def exchange_deleted(self, vhost: str, name: str) -> None:
        self.events.append(("exchange-", name))

    def queue_declared(self, queue: Queue) -> None:
        self.events.append(("queue+", queue.name))
        queue.store_id = len(self.events)

    def queue_deleted(self, queue: Queue) -> None:
        self.events.append(("queue-", queue.name))

    def binding_added(self, vhost: str, source: str, dest: Any, key: str, args: Any) -> None:
        self.events.append(("bind+", source, dest, key))

    def binding_removed(self, vhost: str, source: str, dest: Any, key: str, args: Any) -> None:
        self.events.append(("bind-", source, dest, key))


def exchange(
    vh: VHost,
    name: str,
    type_: str = "direct",
    *,
    durable: bool = False,
    auto_delete: bool = False,
    internal: bool = False,
    **arguments: Any,
) -> None:
    vh.declare_exchange(name, type_, False, durable, auto_delete, internal, arguments or None)


def queue(
    vh: VHost,
    name: str,
    *,
    durable: bool = False,
    exclusive: bool = False,
    auto_delete: bool = False,
    owner: object = OWNER,
    **arguments: Any,
) -> Queue:
    return vh.declare_queue(name, False, durable, exclusive, auto_delete, arguments or None, owner)


def msg(key: str = "k", headers_props: bytes = b"\x00\x00") -> Message:
    return Message("", key, headers_props, b"body")


def routed(vh: VHost, source: str | None, key: str = "k") -> list[str]:
    return sorted(q.name for q in vh.route(vh.exchanges[source] if source else None, msg(key)))


# -- exchanges: declare and equivalence ------------------------------------------------------------
def test_predeclared_exchanges_exist_durable():
    vh = VHost()
    for name, type_, internal in PREDECLARED:
        ex = vh.exchanges[name]
        assert (ex.type, ex.durable, ex.internal) == (type_, True, internal)


def test_redeclaring_an_exchange_equivalently_returns_the_same_one():
    vh = VHost()
    first = vh.declare_exchange("x", "topic", False, True, False, False, None)
    assert vh.declare_exchange("x", "topic", False, True, False, False, {}) is first
    # amq.* names exist already: an equivalent redeclare is allowed (RabbitMQ)
    assert (
        vh.declare_exchange("amq.direct", "direct", False, True, False, False, None)
        is vh.exchanges["amq.direct"]
    )


@pytest.mark.parametrize(
    "type_, durable, auto_delete, internal, arguments, text",
    [
        (
            "fanout",
            False,
            False,
            False,
            None,
            "inequivalent arg 'type' for exchange 'x' in vhost '/': "
            "received 'fanout' but current is 'direct'",
        ),
        (
            "direct",
            True,
            False,
            False,
            None,
            "inequivalent arg 'durable' for exchange 'x' in vhost '/': "
            "received 'true' but current is 'false'",
        ),
        (
            "direct",
            False,
            True,
            False,
            None,
            "inequivalent arg 'auto_delete' for exchange 'x' in vhost '/': received 'true' but current is "
            "'false'",
        ),
        (
            "direct",
            False,
            False,
            True,
            None,
            "inequivalent arg 'internal' for exchange 'x' in vhost '/': received 'true' but current is "
            "'false'",
        ),
        (
            "direct",
            False,
            False,
            False,
            {"alternate-exchange": "ae"},
            "inequivalent arg 'alternate-exchange' for exchange 'x' in vhost '/': received the value 'ae' "
            "of type 'longstr' but current is none",
        ),
    ],
    ids=["type", "durable", "auto_delete", "internal", "alternate-exchange"],
)
def test_inequivalent_exchange_redeclare_is_406(type_, durable, auto_delete, internal, arguments, text):
    vh = VHost()
    exchange(vh, "x")
    with pytest.raises(PreconditionFailed) as info:
        vh.declare_exchange("x", type_, False, durable, auto_delete, internal, arguments)
    assert (info.value.reply_code, info.value.text) == (406, text)
    assert vh.exchanges["x"].type == "direct"


def test_passive_exchange_declare():
    vh = VHost()
    exchange(vh, "x", "fanout")
    assert vh.declare_exchange("x", "direct", True, True, True, True, {"a": 1}) is vh.exchanges["x"]
    assert vh.declare_exchange("amq.topic", "", True, False, False, False, None).name == "amq.topic"
    with pytest.raises(NotFound) as info:
        vh.declare_exchange("nope", "bogus-type", True, False, False, False, None)
    assert (info.value.reply_code, info.value.text) == (404, "no exchange 'nope' in vhost '/'")
    with pytest.raises(NotFound):
        vh.declare_exchange("amq.nope", "direct", True, False, False, False, None)


def test_reserved_exchange_names_are_403():
    vh = VHost()
    with pytest.raises(AccessRefused) as info:
        exchange(vh, "amq.custom")
    assert (info.value.reply_code, info.value.text) == (
        403,
        "exchange name 'amq.custom' contains reserved prefix 'amq.*'",
    )
    assert "amq.custom" not in vh.exchanges
    for call in (
        lambda: exchange(vh, ""),
        lambda: vh.declare_exchange("", "direct", True, False, False, False, None),
        lambda: vh.delete_exchange("", False),
        lambda: vh.bind("", ("queue", "q"), "k", {}),
    ):
        with pytest.raises(AccessRefused) as info:
            call()
        assert info.value.text == "operation not permitted on the default exchange"
    with pytest.raises(AccessRefused) as info:
        vh.delete_exchange("amq.fanout", False)
    assert info.value.text == "deletion of system exchange 'amq.fanout' in vhost '/' not allowed"
    assert "amq.fanout" in vh.exchanges


# -- queues: declare, equivalence, exclusivity -----------------------------------------------------
def test_queue_redeclare_checks_flags_and_arguments():
    vh = VHost()
    q = queue(vh, "q", **{"x-message-ttl": 1000})
    assert queue(vh, "q", **{"x-message-ttl": 1000}) is q
    with pytest.raises(PreconditionFailed) as info:
        queue(vh, "q", durable=True, **{"x-message-ttl": 1000})
    assert info.value.text == (
        "inequivalent arg 'durable' for queue 'q' in vhost '/': received 'true' but current is 'false'"
    )
    with pytest.raises(PreconditionFailed) as info:
        queue(vh, "q", auto_delete=True, **{"x-message-ttl": 1000})
    assert info.value.text == (
        "inequivalent arg 'auto_delete' for queue 'q' in vhost '/': received 'true' but current is 'false'"
    )
    with pytest.raises(PreconditionFailed) as info:
        queue(vh, "q", **{"x-message-ttl": 2000})
    assert info.value.text == (
        "inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received '2000' but current is '1000'"
    )
    with pytest.raises(PreconditionFailed) as info:
        queue(vh, "q")
    assert info.value.text.startswith("inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/'")
    assert vh.queues["q"] is q


def test_passive_queue_declare_is_404_for_a_missing_queue_even_with_a_reserved_name():
    vh = VHost()
    q = queue(vh, "q")
    assert vh.declare_queue("q", True, True, False, True, {"x-message-ttl": 5}, OTHER) is q
    for name in ("nope", "amq.nope"):
        with pytest.raises(NotFound) as info:
            vh.declare_queue(name, True, False, False, False, None, OWNER)
        assert (info.value.reply_code, info.value.text) == (404, f"no queue '{name}' in vhost '/'")


def test_reserved_queue_names_are_403_unless_generated():
    vh = VHost()
    with pytest.raises(AccessRefused) as info:
        queue(vh, "amq.mine")
    assert (info.value.reply_code, info.value.text) == (
        403,
        "queue name 'amq.mine' contains reserved prefix 'amq.*'",
    )
    assert "amq.mine" not in vh.queues
    q = vh.declare_queue("amq.gen-abc", False, False, True, True, None, OWNER, generated=True)
    assert vh.queues["amq.gen-abc"] is q


def test_exclusive_queue_is_405_for_other_connections():
    vh = VHost()
    q = queue(vh, "ex", exclusive=True)
    assert q.owner is OWNER
    assert vh.get_queue("ex", OWNER) is q
    assert queue(vh, "ex", exclusive=True) is q
    for call in (
        lambda: vh.get_queue("ex", OTHER),
        lambda: queue(vh, "ex", exclusive=True, owner=OTHER),
        lambda: vh.declare_queue("ex", True, False, False, False, None, OTHER),
    ):
        with pytest.raises(ResourceLocked) as info:
            call()
        assert info.value.reply_code == 405
        assert info.value.text.startswith("cannot obtain exclusive access to locked queue 'ex' in vhost '/'")


def test_exclusive_flag_mismatch_is_405_not_406():
    vh = VHost()
    queue(vh, "ex", exclusive=True)
    queue(vh, "shared", owner=None)
    with pytest.raises(ResourceLocked):
        queue(vh, "ex", exclusive=False)  # the owner itself, without exclusive
    with pytest.raises(ResourceLocked):
        queue(vh, "shared", exclusive=True)
    assert vh.queues["shared"].owner is None  # a non-exclusive queue has no owner


# -- deletes -----------------------------------------------------------------------------------------
def test_delete_exchange_if_unused():
    vh = VHost()
    exchange(vh, "x")
    queue(vh, "q")
    vh.bind("x", ("queue", "q"), "k", {})
    with pytest.raises(PreconditionFailed) as info:
        vh.delete_exchange("x", if_unused=True)
    assert (info.value.reply_code, info.value.text) == (406, "exchange 'x' in vhost '/' in use")
    assert "x" in vh.exchanges
    vh.delete_exchange("x", if_unused=False)
    assert "x" not in vh.exchanges
    vh.delete_exchange("x", if_unused=True)  # a missing exchange: fine (RabbitMQ 3.x)
    exchange(vh, "unused")
    vh.delete_exchange("unused", if_unused=True)
    assert "unused" not in vh.exchanges


def test_deleting_an_exchange_removes_bindings_to_it_and_from_it():
    vh = VHost()
    exchange(vh, "src", "fanout")
    exchange(vh, "mid", "fanout")
    queue(vh, "q")
    vh.bind("src", ("exchange", "mid"), "", {})
    vh.bind("mid", ("queue", "q"), "", {})
    assert routed(vh, "src") == ["q"]
    vh.delete_exchange("mid", False)
    assert not vh.exchanges["src"].has_bindings()
    exchange(vh, "mid", "fanout")  # a new exchange with the old name has no bindings
    assert routed(vh, "src") == []
    assert not vh.exchanges["mid"].has_bindings()


def test_delete_queue_unbinds_it_cancels_consumers_and_reports_its_count():
    vh = VHost()
    exchange(vh, "x", "fanout")
    q = queue(vh, "q")
    vh.bind("x", ("queue", "q"), "", {})
    vh.publish(vh.exchanges["x"], msg())
    vh.publish(vh.exchanges["x"], msg())
    consumer = FakeConsumer()
    gone: list[str] = []
    vh.on_queue_deleted.append(lambda queue: gone.append(queue.name))
    assert vh.delete_queue(q) == 2
    assert q.deleted and "q" not in vh.queues
    assert not vh.exchanges["x"].has_bindings()
    assert gone == ["q"]
    q2 = queue(vh, "q2")
    q2.add_consumer(consumer)  # type: ignore[arg-type]
    vh.delete_queue(q2)
    assert consumer.cancelled == ["q2"]
    assert routed(vh, "x") == []


# -- auto-delete -----------------------------------------------------------------------------------
def test_auto_delete_exchange_goes_with_its_last_binding():
    vh = VHost()
    exchange(vh, "ad", "fanout", auto_delete=True)
    assert "ad" in vh.exchanges  # never bound: stays
    queue(vh, "a")
    queue(vh, "b")
    vh.bind("ad", ("queue", "a"), "", {})
    vh.bind("ad", ("queue", "b"), "", {})
    vh.unbind("ad", ("queue", "a"), "", {})
    assert "ad" in vh.exchanges
    vh.delete_queue(vh.queues["b"])  # the last binding goes with its queue
    assert "ad" not in vh.exchanges


def test_auto_delete_exchange_goes_when_its_destination_exchange_is_deleted():
    vh = VHost()
    exchange(vh, "ad", "fanout", auto_delete=True)
    exchange(vh, "dest", "fanout")
    vh.bind("ad", ("exchange", "dest"), "", {})
    vh.delete_exchange("dest", False)
    assert "ad" not in vh.exchanges


def test_auto_delete_queue_goes_after_its_last_consumer():
    vh = VHost()
    q = queue(vh, "ad", auto_delete=True)
    first, second = FakeConsumer(), FakeConsumer()
    q.add_consumer(first)  # type: ignore[arg-type]
    q.add_consumer(second)  # type: ignore[arg-type]
    vh.consumer_removed(q, first)  # type: ignore[arg-type]
    assert "ad" in vh.queues
    vh.consumer_removed(q, second)  # type: ignore[arg-type]
    assert "ad" not in vh.queues and q.deleted
    plain = queue(vh, "plain")
    c = FakeConsumer()
    plain.add_consumer(c)  # type: ignore[arg-type]
    vh.consumer_removed(plain, c)  # type: ignore[arg-type]
    assert "plain" in vh.queues


# -- the routing walk ------------------------------------------------------------------------------
def test_exchange_to_exchange_routing_reaches_queues_behind_exchanges():
    vh = VHost()
    exchange(vh, "front", "direct")
    exchange(vh, "back", "topic")
    queue(vh, "q1")
    queue(vh, "q2")
    vh.bind("front", ("exchange", "back"), "k.a", {})
    vh.bind("back", ("queue", "q1"), "k.*", {})
    vh.bind("back", ("queue", "q2"), "other", {})
    vh.bind("front", ("queue", "q1"), "k.a", {})  # reached twice: once in the result
    assert [q.name for q in vh.route(vh.exchanges["front"], msg("k.a"))] == ["q1"]
    assert routed(vh, "front", "other") == []  # front does not pass "other" on


def test_exchange_cycles_terminate_and_route_once():
    vh = VHost()
    for name in ("a", "b", "c"):
        exchange(vh, name, "fanout")
    queue(vh, "q")
    vh.bind("a", ("exchange", "b"), "", {})
    vh.bind("b", ("exchange", "c"), "", {})
    vh.bind("c", ("exchange", "a"), "", {})
    vh.bind("b", ("queue", "q"), "", {})
    vh.bind("a", ("exchange", "a"), "", {})  # a self-loop too
    for start in ("a", "b", "c"):
        assert routed(vh, start) == ["q"]
    vh.publish(vh.exchanges["a"], msg())
    assert vh.queues["q"].message_count == 1


def test_alternate_exchange_takes_what_the_exchange_cannot_route():
    vh = VHost()
    exchange(vh, "ae", "fanout")
    exchange(vh, "x", "direct", **{"alternate-exchange": "ae"})
    queue(vh, "main")
    queue(vh, "unrouted")
    vh.bind("x", ("queue", "main"), "k", {})
    vh.bind("ae", ("queue", "unrouted"), "", {})
    assert routed(vh, "x", "k") == ["main"]
    assert routed(vh, "x", "nope") == ["unrouted"]


def test_alternate_exchange_applies_behind_an_exchange_binding_and_missing_ones_drop():
    vh = VHost()
    exchange(vh, "ae", "fanout")
    exchange(vh, "inner", "direct", **{"alternate-exchange": "ae"})
    exchange(vh, "outer", "fanout")
    exchange(vh, "lost", "direct", **{"alternate-exchange": "missing"})
    queue(vh, "unrouted")
    vh.bind("outer", ("exchange", "inner"), "", {})
    vh.bind("ae", ("queue", "unrouted"), "", {})
    assert routed(vh, "outer", "nothing-bound") == ["unrouted"]
    assert routed(vh, "lost") == []


def test_alternate_exchange_cycles_terminate():
    vh = VHost()
    exchange(vh, "x", "direct", **{"alternate-exchange": "y"})
    exchange(vh, "y", "direct", **{"alternate-exchange": "x"})
    queue(vh, "q")
    assert routed(vh, "x") == []
    vh.bind("y", ("queue", "q"), "k", {})
    assert routed(vh, "x", "k") == ["q"]  # x routes nowhere, its AE y does
    assert routed(vh, "x", "other") == []


def test_routes_to_deleted_queue_names_are_ignored():
    vh = VHost()
    exchange(vh, "x", "fanout")
    q = queue(vh, "q")
    vh.bind("x", ("queue", "q"), "", {})
    vh.queues.pop("q")  # a stale binding (the walk must not raise)
    assert routed(vh, "x") == []
    vh.queues["q"] = q
    assert routed(vh, None, "q") == ["q"] and routed(vh, None, "none") == []


# -- x-expires ---------------------------------------------------------------------------------------
def test_unused_queue_expires_with_its_bindings_and_messages_are_not_dead_lettered():
    ttl = FakeTTL()
    vh = VHost(ttl=ttl)
    sink = RecordingSink()
    vh.sink = sink
    exchange(vh, "ad", "fanout", auto_delete=True)
    q = queue(vh, "q", **{"x-expires": 1000})
    vh.bind("ad", ("queue", "q"), "", {})
    vh.publish(None, msg("q"))
    assert ttl.expiry[q] == ttl.t + 1000
    ttl.advance(999)
    assert "q" in vh.queues
    ttl.advance(1)
    assert "q" not in vh.queues and q.deleted
    assert "ad" not in vh.exchanges  # its last binding went with the queue
    assert sink.dead == []


def test_touch_and_consumers_keep_an_expiring_queue_alive():
    ttl = FakeTTL()
    vh = VHost(ttl=ttl)
    q = queue(vh, "q", **{"x-expires": 1000})
    ttl.advance(600)
    q.touch()  # basic.get / redeclare: the clock restarts
    ttl.advance(600)
    assert "q" in vh.queues
    consumer = FakeConsumer()
    q.add_consumer(consumer)  # type: ignore[arg-type]
    ttl.advance(5000)  # fires while consumed: re-armed, not deleted
    assert "q" in vh.queues and ttl.expiry[q] > ttl.t
    vh.consumer_removed(q, consumer)  # type: ignore[arg-type]
    assert ttl.expiry[q] == ttl.t + 1000
    ttl.advance(1000)
    assert "q" not in vh.queues


def test_an_expired_queue_does_not_delete_its_successor():
    ttl = FakeTTL()
    vh = VHost(ttl=ttl)
    old = queue(vh, "q", **{"x-expires": 1000})
    vh.delete_queue(old)
    new = queue(vh, "q")
    old.expire_queue(ttl.t + 5000)  # a late timer for the deleted queue
    assert vh.queues["q"] is new


def test_message_ttl_timers_stop_when_the_queue_is_deleted():
    ttl = FakeTTL()
    vh = VHost(ttl=ttl)
    q = queue(vh, "q", **{"x-message-ttl": 100})
    vh.publish(None, msg("q"))
    assert q in ttl.armed
    vh.delete_queue(q)
    assert q not in ttl.armed and q not in ttl.expiry


# -- durability reporting ----------------------------------------------------------------------------
def test_only_durable_entities_reach_the_definition_store():
    vh = VHost()
    store = RecordingDefinitions()
    vh.store = store  # type: ignore[assignment]
    exchange(vh, "dx", "fanout", durable=True)
    exchange(vh, "tx", "fanout")
    queue(vh, "dq", durable=True)
    queue(vh, "tq")
    queue(vh, "ex", durable=True, exclusive=True)
    for source in ("dx", "tx"):
        for dest in ("dq", "tq", "ex"):
            vh.bind(source, ("queue", dest), "", {})
    vh.bind("dx", ("exchange", "amq.fanout"), "", {})
    assert store.events == [
        ("exchange+", "dx"),
        ("queue+", "dq"),
        ("bind+", "dx", ("queue", "dq"), ""),
        ("bind+", "dx", ("exchange", "amq.fanout"), ""),
    ]
    store.events.clear()
    vh.delete_queue(vh.queues["dq"])
    vh.delete_queue(vh.queues["ex"])
    vh.delete_exchange("dx", False)
    vh.delete_exchange("tx", False)
    assert store.events == [
        ("bind-", "dx", ("queue", "dq"), ""),
        ("queue-", "dq"),
        ("bind-", "dx", ("exchange", "amq.fanout"), ""),
        ("exchange-", "dx"),
    ]


class RefusingDefinitions(RecordingDefinitions):
    """A ``DefinitionStore`` that cannot hold anything whose name starts with ``bad``."""

    def exchange_declared(self, vhost: str, exchange: Any) -> None:
        if exchange.name.startswith("bad"):
            raise ValueError("field table key longer than 255 octets")
        super().exchange_declared(vhost, exchange)

    def queue_declared(self, queue: Queue) -> None:
        if queue.name.startswith("bad"):
            raise ValueError("field table key longer than 255 octets")
        super().queue_declared(queue)

    def binding_added(self, vhost: str, source: str, dest: Any, key: str, args: Any) -> None:
        if key.startswith("bad"):
            raise TypeError("cannot encode object value")
        super().binding_added(vhost, source, dest, key, args)


def test_what_the_store_refuses_is_not_applied_in_memory():
    """Store first: a durable declare or binding the store cannot hold is a 406 and leaves nothing
    behind (before: in memory, gone after a restart)."""
    vh = VHost()
    store = RefusingDefinitions()
    vh.store = store  # type: ignore[assignment]
    with pytest.raises(PreconditionFailed, match="cannot store exchange 'bad-x' in vhost '/'"):
        exchange(vh, "bad-x", "fanout", durable=True)
    with pytest.raises(PreconditionFailed, match="cannot store queue 'bad-q' in vhost '/'"):
        queue(vh, "bad-q", durable=True)
    assert "bad-x" not in vh.exchanges and "bad-q" not in vh.queues
    exchange(vh, "dx", "fanout", durable=True)
    queue(vh, "dq", durable=True)
    with pytest.raises(PreconditionFailed, match="cannot store binding of queue 'dq' to exchange 'dx'"):
        vh.bind("dx", ("queue", "dq"), "bad-key", {})
    assert vh.exchanges["dx"].bindings_list() == [] and ("queue", "dq") not in vh._sources
    vh.bind("dx", ("queue", "dq"), "good", {})
    assert store.events == [("exchange+", "dx"), ("queue+", "dq"), ("bind+", "dx", ("queue", "dq"), "good")]
    exchange(vh, "bad-transient", "fanout")  # not durable: the store is not asked
    assert "bad-transient" in vh.exchanges


def test_a_policy_set_again_unchanged_is_not_applied_again() -> None:
    """A worker's metadata copy sets every policy anew on each change: only a changed one re-applies."""
    import dataclasses

    from ottermq.vhost.patterns import Pattern
    from ottermq.vhost.policy import make_policy

    class Counting(Pattern):
        calls = 0

        def matches(self, text: str) -> bool:
            Counting.calls += 1
            return super().matches(text)

    def policy(max_length: int) -> Any:
        return dataclasses.replace(
            make_policy("/", "p", "^q", {"max-length": max_length}, "queues"), regex=Counting("^q")
        )

    vh = VHost("/")
    vh.declare_queue("q1", False, False, False, False, None, OWNER)
    vh.set_policy(policy(3))
    assert Counting.calls == 1 and vh.queues["q1"].args.max_length == 3
    vh.set_policy(policy(3))  # the same again: nothing matched again
    assert Counting.calls == 1
    vh.set_policy(policy(4))
    assert Counting.calls == 2 and vh.queues["q1"].args.max_length == 4


def test_policy_names_are_what_a_policy_may_apply_to() -> None:
    vh = VHost("/")
    vh.declare_queue("q1", False, False, False, False, None, OWNER)
    assert vh.policy_names("queues") == ["q1"]
    assert set(vh.policy_names("exchanges")) == {name for name, *_ in PREDECLARED}
    assert set(vh.policy_names("all")) == {"q1", *(name for name, *_ in PREDECLARED)}
    assert vh.policy_names("streams") == []
