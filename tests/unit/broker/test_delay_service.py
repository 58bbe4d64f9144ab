"""DelayService (broker/delayed.py) over a MemoryStore with a fake loop and clock: no sleeps."""

from __future__ import annotations

import asyncio
from typing import Any

from ottermq.amqp.props import rewrite_props
from ottermq.amqp.table import encode_table
from ottermq.broker.node.delayed import BATCH, DedupPersistence, DelayService
from ottermq.persistence.memory import MemoryStore
from ottermq.vhost.dedup import DedupCache, DedupSettings
from ottermq.vhost.message import Message
from ottermq.vhost.vhost import ROUTED, UNROUTED, VHost


class Timer:
    def __init__(self, delay: float, fn: Any) -> None:
        self.delay, self.fn, self.cancelled = delay, fn, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    def __init__(self) -> None:
        self.timers: list[Timer] = []

    def call_later(self, delay: float, fn: Any) -> Timer:
        timer = Timer(delay, fn)
        self.timers.append(timer)
        return timer

    def fire(self) -> None:
        """Run the live timers (the service re-arms itself from inside)."""
        live = [t for t in self.timers if not t.cancelled]
        self.timers.clear()
        for timer in live:
            timer.fn()


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000_000

    def __call__(self) -> int:
        return self.t


def msg(delay: int, body: bytes, persistent: bool = True, key: str = "k") -> Message:
    props = rewrite_props(b"\x00\x00", encode_table({"x-delay": delay}), False)
    return Message("dx", key, props, body, persistent)


def setup(store: MemoryStore) -> tuple[DelayService, VHost, FakeLoop, Clock]:
    loop, clock = FakeLoop(), Clock()
    vhost = VHost()
    service = DelayService({"/": vhost}, store, loop, clock)  # type: ignore[arg-type]
    vhost.delayer = service
    vhost.declare_exchange("dx", "x-delayed-message", False, True, False, False, {"x-delayed-type": "direct"})
    vhost.declare_queue("q", False, False, False, False, None, None)
    vhost.bind("dx", ("queue", "q"), "k", {})
    return service, vhost, loop, clock


async def stored_delayed(store: MemoryStore) -> list[Any]:
    """The delayed messages the store holds (the contract's read, after the pending writes)."""
    return [record async for chunk in store.iter_delayed() for record in chunk]


def test_due_order_timer_and_store_rows() -> None:
    async def main() -> None:
        store = MemoryStore()
        service, vhost, loop, clock = setup(store)
        x = vhost.exchanges["dx"]
        for delay, body in ((300, b"c"), (100, b"a"), (200, b"b")):
            result = vhost.publish(x, msg(delay, body))
            assert result.routed and result.stored is not None  # durable + persistent: waits for the commit
        result = vhost.publish(x, msg(50, b"transient", persistent=False))
        assert result is ROUTED
        await store.flush()
        assert len(await stored_delayed(store)) == 3
        assert service.pending("/", "dx") == 4
        assert [t.delay for t in loop.timers if not t.cancelled] == [0.05]
        clock.t += 150
        loop.fire()
        queue = vhost.queues["q"]
        assert [e.message.body for e in queue.ready_entries()] == [b"transient", b"a"]
        assert queue.ready_entries().__next__().message.headers == {"x-delay": -50}
        clock.t += 1000
        loop.fire()
        assert [e.message.body for e in queue.ready_entries()] == [b"transient", b"a", b"b", b"c"]
        await store.flush()
        assert await stored_delayed(store) == [] and service.pending("/", "dx") == 0
        assert (service.published, service.delivered) == (4, 4)

    asyncio.run(main())


def test_mandatory_unroutable_is_not_kept_and_late_unroutable_is_counted() -> None:
    async def main() -> None:
        service, vhost, loop, clock = setup(MemoryStore())
        x = vhost.exchanges["dx"]
        assert vhost.publish(x, msg(100, b"m", key="nowhere"), mandatory=True) is UNROUTED
        assert service.pending("/", "dx") == 0
        vhost.publish(x, msg(100, b"m"), mandatory=True)
        vhost.unbind("dx", ("queue", "q"), "k", {}, None)
        clock.t += 100
        loop.fire()
        assert service.unroutable == 1 and vhost.queues["q"].message_count == 0

    asyncio.run(main())


def test_a_failed_write_takes_the_message_back() -> None:
    async def main() -> None:
        store = MemoryStore()
        service, vhost, loop, clock = setup(store)
        store.fail_batches = 1
        result = vhost.publish(vhost.exchanges["dx"], msg(100, b"m"))
        outcome: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        store.after_commit(outcome.set_result)
        assert await outcome is False
        for holder, item in result.stored or []:
            assert holder.withdraw(item)  # what the channel does before its nack
        assert service.pending("/", "dx") == 0
        clock.t += 100
        loop.fire()
        assert vhost.queues["q"].message_count == 0
        await store.flush()
        assert await stored_delayed(store) == []  # the retried insert and the delete both landed

    asyncio.run(main())


def test_a_burst_is_routed_in_batches() -> None:
    async def main() -> None:
        service, vhost, loop, clock = setup(MemoryStore())
        x = vhost.exchanges["dx"]
        for i in range(BATCH + 10):
            vhost.publish(x, msg(10, b"%d" % i, persistent=False))
        clock.t += 10
        loop.fire()
        assert vhost.queues["q"].message_count == BATCH
        loop.fire()
        assert vhost.queues["q"].message_count == BATCH + 10

    asyncio.run(main())


def test_recovery_and_exchange_deletion() -> None:
    async def main() -> None:
        store = MemoryStore()
        service, vhost, loop, clock = setup(store)
        for delay in (100, 200):
            vhost.publish(vhost.exchanges["dx"], msg(delay, b"%d" % delay))
        await store.flush()
        again, vhost2, loop2, clock2 = setup(store)  # a restart on the same store
        clock2.t = clock.t + 150
        assert await again.recover() == 2
        loop2.fire()
        assert [e.message.body for e in vhost2.queues["q"].ready_entries()] == [b"100"]
        vhost2.delete_exchange("dx", False)
        assert again.dropped == 1 and again.pending("/", "dx") == 0
        await store.flush()
        assert await stored_delayed(store) == []

    asyncio.run(main())


def test_dedup_persistence_reloads_live_keys() -> None:
    async def main() -> None:
        store = MemoryStore()
        clock = Clock()
        first = DedupPersistence(store, clock)
        cache = DedupCache(DedupSettings(size=2, persistent=True))
        first.attach("/", "queue", "q", cache)
        for key, now in (("a", clock.t), ("b", clock.t), ("c", clock.t)):
            cache.duplicate({"x-deduplication-header": key, "x-cache-ttl": 1000 if key == "b" else None}, now)
        await store.flush()
        second = DedupPersistence(store, clock)
        assert await second.load() == 2
        clock.t += 2000  # "b" expired meanwhile
        restored = DedupCache(DedupSettings(size=2, persistent=True))
        second.attach("/", "queue", "q", restored)
        assert len(restored) == 1 and restored.duplicate({"x-deduplication-header": "c"}, clock.t)
        await store.flush()
        assert len(await store.load_dedup()) == 1
        second.detach("/", "queue", "q")
        await store.flush()
        assert await store.load_dedup() == []

    asyncio.run(main())


def test_a_due_message_keeps_its_row_until_its_copy_is_stored(monkeypatch: Any) -> None:
    """Store first, then forget: a due message whose routing fails keeps its row (routed again after a
    restart); one whose x-delay cannot be rewritten goes on with its headers as they came."""
    from ottermq.broker.node import delayed

    async def main() -> None:
        store = MemoryStore()
        service, vhost, loop, clock = setup(store)
        x = vhost.exchanges["dx"]
        for body in (b"ok", b"bug", b"odd"):
            vhost.publish(x, msg(100, body))
        await store.flush()
        real_swap = delayed.swap_delay_header

        class Failing:  # the queue's MessageStore: a bug for one message
            def message_added(self, queue: Any, entry: Any) -> None:
                if entry.message.body == b"bug":
                    raise RuntimeError("a bug")

        def swap(message: Message, delay: int) -> Message:
            if message.body == b"odd":
                raise ValueError("does not fit")
            return real_swap(message, delay)

        vhost.queues["q"].store = Failing()  # type: ignore[assignment]
        monkeypatch.setattr(delayed, "swap_delay_header", swap)
        clock.t += 150
        loop.fire()
        queue = vhost.queues["q"]
        got = {e.message.body: e.message.headers for e in queue.ready_entries()}
        assert got == {b"ok": {"x-delay": -100}, b"odd": {"x-delay": 100}}
        await store.flush()
        assert [r.body for r in await stored_delayed(store)] == [b"bug"]

    asyncio.run(main())
