"""Start-up recovery (``broker.recovery.recover``) from a ``MemoryStore`` into a fresh ``Broker``.

A first broker writes through the real ``DurableHook``; a second one, on the same store, recovers.
Time is a fake epoch-ms clock driving ``DefaultTTLManager`` over a fake loop (timers fire on
``advance``); the store needs a running loop, so each test body runs under ``asyncio.run``. No
sockets, no sleeps.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from typing import Any

from ottermq.amqp.table import encode_table
from ottermq.broker.config import Settings
from ottermq.broker.node.node import Node
from ottermq.broker.node.recovery import recover
from ottermq.persistence.hook import DurableHook
from ottermq.persistence.memory import MemoryStore
from ottermq.persistence.store import BindingRecord, ExchangeRecord, PolicyRecord, QueueRecord, VHostRecord
from ottermq.ttl.default import DefaultTTLManager
from ottermq.vhost.message import Entry, Message
from ottermq.vhost.queue import Queue
from ottermq.vhost.vhost import VHost
from pamqp import commands

T0 = 1_700_000_000_000


class Timer:
    def __init__(self, at: float, cb: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.at, self.cb, self.args, self.cancelled = at, cb, args, False

    def cancel(self) -> None:
        self.cancelled = True


class Clock:
    """Epoch ms, and the ``call_later`` and ``call_soon`` part of a loop measured on it."""

    def __init__(self) -> None:
        self.ms = T0
        self.timers: list[Timer] = []

    def __call__(self) -> int:
        return self.ms

    def call_later(self, delay: float, cb: Callable[..., Any], *args: Any) -> Timer:
        timer = Timer(self.ms + delay * 1000, cb, args)
        self.timers.append(timer)
        return timer

    def call_soon(self, cb: Callable[..., Any], *args: Any) -> Timer:
        return self.call_later(0, cb, *args)

    def advance(self, ms: int) -> None:
        end = self.ms + ms
        while True:
            due = [t for t in self.timers if not t.cancelled and t.at <= end]
            if not due:
                break
            timer = min(due, key=lambda t: t.at)
            self.timers.remove(timer)
            self.ms = max(self.ms, int(timer.at))
            timer.cb(*timer.args)
        self.ms = end


def crash(clock: Clock) -> None:
    """The running broker is gone: its timers with it (the next ``boot`` arms its own)."""
    clock.timers.clear()


def boot(store: MemoryStore, clock: Clock) -> Node:
    """A broker on ``store`` whose TTL timers and hook run on ``clock`` (as ``Broker.start`` wires
    it, minus sockets and auth)."""
    broker = Node(Settings(_env_file=None), clock, store)  # type: ignore[call-arg, arg-type]
    broker.services = dataclasses.replace(
        broker.services,
        ttl=DefaultTTLManager(clock, clock),  # type: ignore[arg-type]
        hook=DurableHook(store, clock),
    )
    broker.ensure_vhost("/")
    return broker


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(body())


def props(**kwargs: Any) -> bytes:
    return commands.Basic.Properties(delivery_mode=2, **kwargs).marshal()


def publish(
    vh: VHost,
    key: str,
    body: bytes,
    exchange: str = "",
    persistent: bool = True,
    expiration: int | None = None,
) -> None:
    raw = props(expiration=str(expiration)) if expiration is not None else props()
    message = Message(exchange, key, raw, body, persistent, None, expiration)
    assert vh.publish(vh.exchanges[exchange] if exchange else None, message).routed


def durable_queue(vh: VHost, name: str, **arguments: Any) -> Queue:
    return vh.declare_queue(name, False, True, False, False, arguments or None, None)


def ready(queue: Queue) -> list[tuple[bytes, bool]]:
    return [(e.message.body, e.redelivered) for e in queue.ready_entries()]


def bodies(queue: Queue) -> list[bytes]:
    return [e.message.body for e in queue.ready_entries()]


def test_durable_definitions_come_back_and_transient_ones_do_not():
    async def body() -> None:
        store, clock = MemoryStore(), Clock()
        vh = boot(store, clock).vhosts["/"]
        vh.declare_exchange("dx", "topic", False, True, False, False, {"alternate-exchange": "ae"})
        vh.declare_exchange("ae", "fanout", False, True, False, False, None)
        vh.declare_exchange("tx", "fanout", False, False, False, False, None)
        durable_queue(vh, "dq", **{"x-message-ttl": 60000})
        durable_queue(vh, "unrouted")
        vh.declare_queue("tq", False, False, False, False, None, None)
        vh.declare_queue("ex", False, True, True, False, None, object())
        vh.bind("dx", ("queue", "dq"), "a.*", {})
        vh.bind("dx", ("exchange", "amq.topic"), "x.#", {})
        vh.bind("ae", ("queue", "unrouted"), "", {})
        vh.bind("tx", ("queue", "dq"), "", {})
        vh.bind("dx", ("queue", "tq"), "t", {})
        await store.flush()
        crash(clock)

        broker = boot(store, clock)
        counts = await recover(broker, store, broker.services.hook)
        again = broker.vhosts["/"]
        assert counts == {"exchanges": 2, "queues": 2, "bindings": 3, "messages": 0, "delayed": 0}
        assert {"dx", "ae"} <= set(again.exchanges) and "tx" not in again.exchanges
        dx = again.exchanges["dx"]
        assert (dx.type, dx.durable, dx.alternate_exchange) == ("topic", True, "ae")
        assert sorted(again.queues) == ["dq", "unrouted"]
        assert again.queues["dq"].args.message_ttl == 60000 and again.queues["dq"].durable
        assert [q.name for q in again.route(dx, Message("", "a.b", b"\x00\x00", b""))] == ["dq"]
        assert [q.name for q in again.route(dx, Message("", "zzz", b"\x00\x00", b""))] == ["unrouted"]
        assert [q.name for q in again.route(dx, Message("", "x.y", b"\x00\x00", b""))] == []
        assert again.exchanges["amq.topic"].has_bindings() is False  # amq.topic is the destination
        assert dx.has_binding("x.#", ("exchange", "amq.topic"), {})

    run(body)


def test_messages_come_back_in_seq_order_with_redelivered_flags():
    async def body() -> None:
        store, clock = MemoryStore(), Clock()
        vh = boot(store, clock).vhosts["/"]
        q = durable_queue(vh, "q")
        for b in (b"1", b"2", b"3", b"4", b"5"):
            publish(vh, "q", b)
        publish(vh, "q", b"transient", persistent=False)
        first = q.pop()
        second = q.pop()
        assert first is not None and second is not None
        q.delivered(first)  # delivered, never acked: the broker "crashes" with it unacked
        q.delivered(second)
        q.forget([second])  # acked
        await store.flush()
        crash(clock)

        broker = boot(store, clock)
        counts = await recover(broker, store, broker.services.hook)
        q2 = broker.vhosts["/"].queues["q"]
        assert counts["messages"] == 4
        assert ready(q2) == [(b"1", True), (b"3", False), (b"4", False), (b"5", False)]
        seqs = [e.seq for e in q2.ready_entries()]
        assert seqs == sorted(seqs)
        assert all(e.store_id for e in q2.ready_entries())
        publish(broker.vhosts["/"], "q", b"6")  # new messages go after the recovered ones
        assert [e.seq for e in q2.ready_entries()][-1] > seqs[-1]
        assert bodies(q2)[-1] == b"6"

    run(body)


def test_recovery_writes_nothing_back():
    async def body() -> None:
        store, clock = MemoryStore(), Clock()
        vh = boot(store, clock).vhosts["/"]
        vh.declare_exchange("dx", "direct", False, True, False, False, None)
        durable_queue(vh, "q")
        vh.bind("dx", ("queue", "q"), "k", {})
        publish(vh, "q", b"m")
        await store.flush()
        batches = store.batches

        broker = boot(store, clock)
        await recover(broker, store, broker.services.hook)
        assert store.batches == batches and store.pending == 0
        assert bodies(broker.vhosts["/"].queues["q"]) == [b"m"]

    run(body)


def test_bindings_whose_ends_are_gone_are_dropped_from_the_store():
    async def body() -> None:
        store, clock = MemoryStore(), Clock()
        vh = boot(store, clock).vhosts["/"]
        vh.declare_exchange("dx", "direct", False, True, False, False, None)
        store.put_binding(BindingRecord("/", "dx", "queue", "missing", "k"))
        store.put_binding(BindingRecord("/", "gone", "exchange", "dx", "k"))
        await store.flush()
        assert len((await store.load_definitions()).bindings) == 2

        broker = boot(store, clock)
        counts = await recover(broker, store, broker.services.hook)
        assert counts["bindings"] == 0
        assert not broker.vhosts["/"].exchanges["dx"].has_bindings()
        assert (await store.load_definitions()).bindings == []

    run(body)


def test_records_the_broker_refuses_today_are_skipped_and_the_rest_comes_back(caplog):
    """The definitions applier's restore rule: one bad record cannot stop a start-up; a refused
    queue leaves the store with its bindings, a server-named queue comes back."""

    async def body() -> None:
        store, clock = MemoryStore(), Clock()
        vh = boot(store, clock).vhosts["/"]
        vh.declare_exchange("dx", "direct", False, True, False, False, None)
        durable_queue(vh, "good")
        vh.declare_queue("amq.gen-abc", False, True, False, False, None, None, True)
        bad_args = encode_table({"x-max-length": -1})
        bad_id = store.put_queue(QueueRecord("/", "bad", arguments=bad_args))
        store.put_exchange(ExchangeRecord("/", "odd", "x-no-such-type"))
        store.put_binding(BindingRecord("/", "dx", "queue", "bad", "k"))
        store.put_binding(BindingRecord("/", "dx", "queue", "good", "k"))
        await store.flush()

        broker = boot(store, clock)
        counts = await recover(broker, store, broker.services.hook)
        vh2 = broker.vhosts["/"]
        assert set(vh2.queues) == {"good", "amq.gen-abc"} and "odd" not in vh2.exchanges
        assert (counts["queues"], counts["bindings"]) == (2, 1)
        stored = await store.load_definitions()
        assert bad_id not in {q.id for q in stored.queues}
        assert [b.destination for b in stored.bindings] == ["good"]
        assert "skipping stored queue 'bad' in vhost '/'" in caplog.text
        assert "skipping stored exchange 'odd' in vhost '/'" in caplog.text

    run(body)


def test_a_stored_policy_that_no_longer_validates_is_skipped_at_start_up(caplog):
    async def body() -> None:
        store = MemoryStore()
        store.put_vhost(VHostRecord("/"))
        store.put_policy(PolicyRecord("/", "old", ".*", "queues", 0, '{"x-no-such-key": 1}'))
        store.put_policy(PolicyRecord("/", "ttl", "^q$", "queues", 0, '{"message-ttl": 1000}'))
        await store.flush()
        node = Node(Settings(_env_file=None), asyncio.get_running_loop(), store)  # type: ignore[call-arg]
        await node.open()
        assert set(node.vhosts["/"].policies) == {"ttl"}
        assert "skipping stored policy 'old' in vhost '/'" in caplog.text
        await node.close()

    run(body)


def test_ttl_that_lapsed_while_down_is_dead_lettered_once():
    async def body() -> None:
        store, clock = MemoryStore(), Clock()
        vh = boot(store, clock).vhosts["/"]
        durable_queue(vh, "dlq")
        durable_queue(vh, "work", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
        publish(vh, "work", b"short", expiration=1000)
        publish(vh, "work", b"long", expiration=10_000)
        publish(vh, "work", b"forever")
        await store.flush()
        crash(clock)
        clock.advance(5000)  # the broker is down meanwhile: "short" lapses

        broker = boot(store, clock)
        await recover(broker, store, broker.services.hook)
        vh2 = broker.vhosts["/"]
        work, dlq = vh2.queues["work"], vh2.queues["dlq"]
        assert bodies(work) == [b"long", b"forever"]
        [dead] = list(dlq.ready_entries())
        assert dead.message.body == b"short"
        [death] = (dead.message.headers or {})["x-death"]
        assert (death["queue"], death["reason"], death["count"]) == ("work", "expired", 1)
        await store.flush()  # the dead-letter move is in the store

        clock.advance(4999)
        assert bodies(work) == [b"long", b"forever"]  # the recovered deadline is armed, not restarted
        clock.advance(1)
        assert bodies(work) == [b"forever"] and bodies(dlq) == [b"short", b"long"]
        await store.flush()
        crash(clock)

        third = boot(store, clock)  # a second restart dead-letters nothing again
        await recover(third, store, third.services.hook)
        vh3 = third.vhosts["/"]
        assert bodies(vh3.queues["work"]) == [b"forever"]
        assert bodies(vh3.queues["dlq"]) == [b"short", b"long"]
        counts = [
            (d["queue"], d["count"])
            for e in vh3.queues["dlq"].ready_entries()
            for d in (e.message.headers or {})["x-death"]
        ]
        assert counts == [("work", 1), ("work", 1)]

    run(body)


def test_recovered_expiry_without_a_dlx_drops_and_deletes_the_rows():
    async def body() -> None:
        store, clock = MemoryStore(), Clock()
        vh = boot(store, clock).vhosts["/"]
        q = durable_queue(vh, "q", **{"x-message-ttl": 100})
        publish(vh, "q", b"old")
        await store.flush()
        crash(clock)
        clock.advance(100)

        broker = boot(store, clock)
        await recover(broker, store, broker.services.hook)
        assert bodies(broker.vhosts["/"].queues["q"]) == []
        await store.flush()
        assert [chunk async for chunk in store.iter_messages(q.store_id)] == []

    run(body)


def test_x_expires_deadline_resumes_after_a_restart():
    async def body() -> None:
        store, clock = MemoryStore(), Clock()
        vh = boot(store, clock).vhosts["/"]
        for name, expires in (("idle", 10_000), ("lapsed", 2_000)):
            durable_queue(vh, name, **{"x-expires": expires}).touch()  # as on_queue_declare does
        await store.flush()
        stored = {q.name: q.expires_at for q in (await store.load_definitions()).queues}
        assert stored == {"idle": T0 + 10_000, "lapsed": T0 + 2_000}
        crash(clock)
        clock.advance(3000)  # down for 3 s: "lapsed" expired meanwhile

        broker = boot(store, clock)
        await recover(broker, store, broker.services.hook)
        vh2 = broker.vhosts["/"]
        assert sorted(vh2.queues) == ["idle", "lapsed"]
        clock.advance(0)  # a deadline in the past fires at once
        assert sorted(vh2.queues) == ["idle"]
        clock.advance(6999)  # T0 + 9999: the stored deadline, not restart + 10 s
        assert "idle" in vh2.queues
        clock.advance(1)
        assert "idle" not in vh2.queues
        await store.flush()
        assert (await store.load_definitions()).queues == []

    run(body)


def test_recovered_entries_keep_their_delivery_count_and_deadline():
    async def body() -> None:
        store, clock = MemoryStore(), Clock()
        vh = boot(store, clock).vhosts["/"]
        q = durable_queue(vh, "q", **{"x-delivery-limit": 5, "x-message-ttl": 60_000})
        publish(vh, "q", b"m")
        entry = q.pop()
        assert entry is not None
        q.requeue([entry])  # one return: delivery_count 1
        entry = q.pop()
        assert entry is not None
        q.delivered(entry)
        await store.flush()
        crash(clock)

        broker = boot(store, clock)
        await recover(broker, store, broker.services.hook)
        [back] = list(broker.vhosts["/"].queues["q"].ready_entries())
        assert isinstance(back, Entry)
        assert (back.redelivered, back.delivery_count, back.deadline) == (True, 1, T0 + 60_000)
        assert back.message.headers is None  # the stored message; the count goes out on delivery
        assert (broker.vhosts["/"].queues["q"].outgoing(back).headers or {})["x-delivery-count"] == 1

    run(body)


def test_a_quorum_queue_comes_back_with_its_type_and_transient_messages_and_counts_the_cut_delivery():
    """Quorum queues store every message, persistent or not; a delivery the restart cut short counts as
    a return (RabbitMQ returns it when it finds the consumer gone): over the limit, it is dead-lettered."""

    async def body() -> None:
        store, clock = MemoryStore(), Clock()
        vh = boot(store, clock).vhosts["/"]
        durable_queue(vh, "dlq")
        q = durable_queue(
            vh,
            "q",
            **{
                "x-queue-type": "quorum",
                "x-delivery-limit": 1,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "dlq",
            },
        )
        for body_ in (b"once", b"twice", b"never"):
            publish(vh, "q", body_, persistent=False)
        first = q.pop()
        second = q.pop()
        assert first is not None and second is not None
        q.delivered(first)  # in flight at the crash: count 0 -> 1
        q.requeue([second])  # returned once (count 1), then delivered again: 1 -> 2, over the limit
        second = q.pop()
        assert second is not None and second.message.body == b"twice"
        q.delivered(second)
        await store.flush()
        crash(clock)

        broker = boot(store, clock)
        await recover(broker, store, broker.services.hook)
        back = broker.vhosts["/"].queues["q"]
        assert back.kind.name == "quorum" and back.args.queue_type == "quorum"
        got = [(e.message.body, e.redelivered, e.delivery_count) for e in back.ready_entries()]
        assert got == [(b"once", True, 1), (b"never", False, 0)]
        assert bodies(broker.vhosts["/"].queues["dlq"]) == [b"twice"]

    run(body)
