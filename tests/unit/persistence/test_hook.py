"""``DurableHook``: the vhost's durability events become the right ``Store`` ops.

A real ``VHost`` (with a ``DeadLetterer`` sink) writes through the hook into a ``MemoryStore``;
what the store holds after a flush is read back with its own read methods. The store needs a
running loop, so each test body runs under ``asyncio.run``. No sockets, no sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from ottermq.dlx.deadletter import DeadLetterer
from ottermq.persistence.hook import DurableHook
from ottermq.persistence.memory import MemoryStore
from ottermq.persistence.schema import SEQ_BITS
from ottermq.persistence.store import MessageRecord, StoreError
from ottermq.ttl.deadline import expires_at
from ottermq.vhost.message import Message, sender_selected
from ottermq.vhost.queue import Queue
from ottermq.vhost.vhost import VHost
from pamqp import commands

T0 = 1_700_000_000_000


class FakeTTL:
    enabled = True

    def __init__(self) -> None:
        self.t = T0

    def now(self) -> int:
        return self.t

    def expires_at(self, now: int, queue_ttl: int | None, message_ttl: int | None) -> int | None:
        return expires_at(now, queue_ttl, message_ttl)

    def schedule(self, target: Any, deadline: int) -> None:
        pass

    def cancel(self, target: Any) -> None:
        pass

    def schedule_queue_expiry(self, target: Any, at: int) -> None:
        pass

    def cancel_queue_expiry(self, target: Any) -> None:
        pass


class Setup:
    def __init__(self) -> None:
        self.store = MemoryStore()
        self.ttl = FakeTTL()
        self.hook = DurableHook(self.store, self.ttl.now)
        self.vh = VHost(ttl=self.ttl)
        self.vh.sink = DeadLetterer(self.vh, self.ttl.now)
        self.vh.store = self.hook

    def queue(self, name: str, durable: bool = True, **arguments: Any) -> Queue:
        return self.vh.declare_queue(name, False, durable, False, False, arguments or None, None)

    def publish(self, key: str, body: bytes, persistent: bool = True, **props: Any) -> None:
        raw = commands.Basic.Properties(delivery_mode=2 if persistent else 1, **props).marshal()
        message, _ = sender_selected(Message("", key, raw, body, persistent))
        assert self.vh.publish(None, message).routed

    async def rows(self, queue: Queue) -> list[MessageRecord]:
        return [r async for chunk in self.store.iter_messages(queue.store_id) for r in chunk]

    async def bodies(self, queue: Queue) -> list[bytes]:
        return [r.body for r in await self.rows(queue)]


def run(body: Callable[[Setup], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(body(Setup()))


# -- messages -------------------------------------------------------------------------------------------
def test_message_added_writes_the_whole_record():
    async def body(s: Setup) -> None:
        q = s.queue("q", **{"x-message-ttl": 5000})
        s.publish("q", b"payload", content_type="text/plain", headers={"CC": ["other"]})
        [entry] = list(q.ready_entries())
        assert entry.store_id
        await s.store.flush()
        [row] = await s.rows(q)
        message_id = (q.store_id << SEQ_BITS) | entry.seq
        assert (row.id, row.queue_id, row.seq) == (message_id, q.store_id, entry.seq)
        assert entry.store_id is q.store_id  # no int object of its own per stored entry
        assert (row.exchange, row.routing_key, row.body) == ("", "q", b"payload")
        assert row.props == entry.message.raw_props
        assert (row.enqueued_at, row.deadline) == (T0, T0 + 5000)
        assert row.extra_keys == ("other",)
        assert (row.delivered, row.delivery_count) == (False, 0)

    run(body)


def test_transient_messages_and_queues_write_nothing():
    async def body(s: Setup) -> None:
        s.queue("durable")
        transient = s.queue("transient", durable=False)
        s.publish("durable", b"not persistent", persistent=False)
        s.publish("transient", b"persistent", persistent=True)
        assert transient.store is None and transient.store_id == 0
        await s.store.flush()
        assert (await s.store.stats())["messages"] == 0
        assert [q.name for q in (await s.store.load_definitions()).queues] == ["durable"]

    run(body)


def test_delivered_then_removed():
    async def body(s: Setup) -> None:
        q = s.queue("q")
        s.publish("q", b"a")
        s.publish("q", b"b")
        await s.store.flush()
        first = q.pop()
        assert first is not None
        q.delivered(first)  # message_delivered
        await s.store.flush()
        delivered = {r.body: r.delivered for r in await s.rows(q)}
        assert delivered == {b"a": True, b"b": False}
        q.forget([first])  # acked: message_removed
        assert first.store_id == 0
        await s.store.flush()
        assert await s.bodies(q) == [b"b"]

    run(body)


def test_a_message_acked_before_its_batch_commits_is_never_written():
    async def body(s: Setup) -> None:
        q = s.queue("q")
        s.publish("q", b"quick")
        entry = q.pop()
        assert entry is not None
        q.forget([entry])
        batches = s.store.batches
        await s.store.flush()
        assert await s.bodies(q) == []
        assert s.store.batches == batches + 1  # the queue row only: insert and delete cancelled

    run(body)


def test_purge_deletes_every_stored_message():
    async def body(s: Setup) -> None:
        q = s.queue("q")
        other = s.queue("other")
        for b in (b"1", b"2", b"3"):
            s.publish("q", b)
        s.publish("other", b"keep")
        await s.store.flush()
        assert q.purge() == 3
        await s.store.flush()
        assert await s.bodies(q) == [] and await s.bodies(other) == [b"keep"]

    run(body)


def test_touched_records_the_x_expires_deadline():
    async def body(s: Setup) -> None:
        q = s.queue("q", **{"x-expires": 30_000})
        s.ttl.t += 1000
        q.touch()
        s.ttl.t += 1000
        q.touch()  # coalesced with the first one in this batch: the last deadline wins
        await s.store.flush()
        [record] = (await s.store.load_definitions()).queues
        assert (record.name, record.expires_at) == ("q", T0 + 32_000)

    run(body)


# -- definitions ---------------------------------------------------------------------------------------
def test_definitions_are_written_and_deleted():
    async def body(s: Setup) -> None:
        s.vh.declare_exchange("dx", "topic", False, True, True, False, {"alternate-exchange": "ae"})
        q = s.queue("q", **{"x-max-length": 10})
        s.vh.bind("dx", ("queue", "q"), "a.#", {"x-any": 1})
        await s.store.flush()
        defs = await s.store.load_definitions()
        [ex] = [e for e in defs.exchanges if e.name == "dx"]
        assert (ex.vhost, ex.type, ex.auto_delete, ex.internal) == ("/", "topic", True, False)
        [qr] = defs.queues
        assert (qr.name, qr.id, qr.auto_delete) == ("q", q.store_id, False)
        [b] = defs.bindings
        assert (b.source, b.destination_kind, b.destination, b.routing_key) == ("dx", "queue", "q", "a.#")
        s.publish("q", b"m")
        s.vh.delete_queue(q)  # its binding goes, and with it the auto-delete exchange
        await s.store.flush()
        defs = await s.store.load_definitions()
        assert (defs.queues, defs.bindings) == ([], [])
        assert "dx" not in [e.name for e in defs.exchanges]
        assert (await s.store.stats())["messages"] == 0

    run(body)


# -- the dead-letter move -----------------------------------------------------------------------------
def test_a_dead_letter_move_lands_in_one_batch():
    """The move deletes the source row and inserts a row in each target (a fanout DLX, two DLQs:
    1 delete + 2 inserts, so the stored message count tells every partial outcome apart)."""

    async def body(s: Setup) -> None:
        s.vh.declare_exchange("dlx", "fanout", False, True, False, False, None)
        dlq1, dlq2 = s.queue("dlq1"), s.queue("dlq2")
        s.vh.bind("dlx", ("queue", "dlq1"), "", {})
        s.vh.bind("dlx", ("queue", "dlq2"), "", {})
        work = s.queue("work", **{"x-dead-letter-exchange": "dlx"})
        s.publish("work", b"first")
        s.publish("work", b"second")
        await s.store.flush()

        s.store.fail_batches = 1  # the move's batch fails: none of its ops may be applied
        entry = work.pop()
        assert entry is not None
        work.reject([entry])
        with pytest.raises(StoreError):
            await s.store.flush()
        stats = await s.store.stats()  # (stats does not wait for the retry)
        assert (stats["failed_batches"], stats["messages"]) == (1, 2)  # neither 1, 3 nor 4
        await s.store.flush()  # the store retries the failed batch: now all of it is applied
        assert await s.bodies(work) == [b"second"]
        assert await s.bodies(dlq1) == await s.bodies(dlq2) == [b"first"]

        batches = s.store.batches
        entry = work.pop()
        assert entry is not None
        work.reject([entry])
        await s.store.flush()
        assert s.store.batches == batches + 1  # delete and inserts in one commit
        assert await s.bodies(work) == []
        rows = await s.rows(dlq1)
        assert [r.body for r in rows] == [b"first", b"second"]
        assert rows[1].props == list(dlq1.ready_entries())[1].message.raw_props  # with its x-death

    run(body)
