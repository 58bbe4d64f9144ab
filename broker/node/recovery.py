"""Start-up recovery: rebuild durable exchanges, queues and bindings from the store, then stream
each queue's messages back in order, in chunks, and run the expiry check on what lapsed while the
broker was down (the design card's "recovery" check point: it is dead-lettered once, or dropped).

Rules:
- Exchanges, queues and bindings are restored by the one definitions applier
  (``definitions/apply.py``, rule 4: what the broker refuses today is logged and skipped; a
  refused queue is deleted from the store).
- Nothing recovered is written back: the vhosts' store hooks are attached only afterwards.
- Bindings whose source or destination is gone are ignored (and deleted from the store).
- Messages come back with ``redelivered`` set if they had been delivered before; their TTL
  deadline and delivery count are the stored ones (a quorum queue counts the delivery as a return,
  as RabbitMQ's does when it finds the consumer gone: one over its limit is dead-lettered);
  ``x-expires`` clocks resume.
- Dead-lettering runs only once every queue is loaded, so DLX targets exist.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator
from typing import Protocol

from ottermq.amqp.props import quick_props
from ottermq.persistence.hook import DurableHook
from ottermq.persistence.store import BindingRecord, Definitions, MessageRecord, QueueRecord, Store
from ottermq.vhost.message import Entry, Message, SelectedMessage
from ottermq.vhost.queue import Queue
from ottermq.vhost.vhost import VHost

from .definitions.apply import Restore, Target, apply_definitions

log = logging.getLogger(__name__)


class Recoverable(Target, Protocol):
    """What recovery fills: the node's vhosts (through the definitions applier's restore), its
    deduplication caches and delayed messages."""

    def ensure_vhost(self, name: str) -> VHost: ...


async def recover(broker: Recoverable, store: Store, hook: DurableHook) -> dict[str, int]:
    """Load everything durable into ``broker.vhosts``; returns counts for the log.

    The cyclic GC is paused meanwhile (millions of new, acyclic objects would trigger useless
    full collections: 1M messages took 9.9 s with it, 4.5 s without) and the recovered objects
    are then frozen out of future collections.
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return await _recover(broker, store, hook)
    finally:
        gc.freeze()
        if gc_was_enabled:
            gc.enable()


async def _recover(broker: Recoverable, store: Store, hook: DurableHook) -> dict[str, int]:
    started = time.monotonic()
    defs = await store.load_definitions()
    await broker.services.dedup.load()  # before the exchanges and queues whose caches persist
    for record in defs.vhosts:
        broker.ensure_vhost(record.name)
    counts = {"exchanges": 0, "queues": 0, "bindings": 0, "messages": 0}
    for vhost in broker.vhosts.values():
        vhost.store = None  # no write-back while restoring
    queues: list[tuple[Queue, int]] = []

    def restored(record: QueueRecord, queue: Queue) -> None:
        queue.store_id = record.id
        queue.store = hook
        if record.expires_at is not None and queue.args.expires is not None:
            queue.ttl.schedule_queue_expiry(queue, record.expires_at)  # the clock resumes
        queues.append((queue, record.id))

    def skipped(kind: str, record: object) -> None:
        if isinstance(record, QueueRecord):
            store.delete_queue(record.id)
        elif isinstance(record, BindingRecord):
            store.delete_binding(record)

    topology = Definitions(exchanges=defs.exchanges, queues=defs.queues, bindings=defs.bindings)
    done = apply_definitions(broker, topology, restore=Restore(skipped, restored))
    counts["exchanges"], counts["queues"], counts["bindings"] = (
        len(done.exchanges),
        len(done.queues),
        len(done.bindings),
    )
    for vhost in broker.vhosts.values():
        vhost.store = hook
    for queue, queue_id in queues:
        counts["messages"] += await _load_messages(store, queue, queue_id)
    for queue, _ in queues:
        queue.recovered()  # expires (dead-letters) what lapsed while we were down, arms timers
    counts["delayed"] = await broker.services.delays.recover()  # the due ones are routed right after
    await store.flush()
    log.info(
        "recovered %d exchanges, %d queues, %d bindings, %d messages in %.2f s",
        counts["exchanges"],
        counts["queues"],
        counts["bindings"],
        counts["messages"],
        time.monotonic() - started,
    )
    return counts


async def _load_messages(store: Store, queue: Queue, queue_id: int) -> int:
    need_priority = bool(queue.args.max_priority)
    interrupted = queue.kind.interrupted_delivery_returns  # a cut-short delivery counts as a return
    total = 0
    async for chunk in _prefetched(store.iter_messages(queue_id)):
        entries: list[Entry] = []
        append = entries.append
        for r in chunk:
            priority = quick_props(r.props)[1] if need_priority else None
            message = Message(r.exchange, r.routing_key, r.props, r.body, True, priority, None)
            if r.extra_keys:
                message = SelectedMessage(message, r.props, tuple(r.extra_keys))
            entry = Entry(message, r.seq, r.deadline, r.enqueued_at)
            entry.redelivered = r.delivered
            entry.delivery_count = r.delivery_count + 1 if interrupted and r.delivered else r.delivery_count
            entry.store_id = r.id
            append(entry)
        queue.recover(entries)
        total += len(entries)
    return total


async def _prefetched(chunks: AsyncIterator[list[MessageRecord]]) -> AsyncIterator[list[MessageRecord]]:
    """Fetch the next chunk (in the store's thread) while the caller works on the current one."""
    pending: asyncio.Future[list[MessageRecord]] = asyncio.ensure_future(anext(chunks))
    while True:
        try:
            chunk = await pending
        except StopAsyncIteration:
            return
        pending = asyncio.ensure_future(anext(chunks))
        yield chunk


def attach(vhost: VHost, hook: DurableHook) -> None:
    """Give a (new) vhost the store hook."""
    vhost.store = hook
