"""Start-up recovery: rebuild durable exchanges, queues and bindings from the store, then stream
each queue's messages back in order, in chunks, and run the expiry check on what lapsed while the
broker was down (the design card's "recovery" check point: it is dead-lettered once, or dropped).

Rules:
- Nothing recovered is written back: the vhosts' store hooks are attached only afterwards.
- Bindings whose source or destination is gone are ignored (and deleted from the store).
- Messages come back with ``redelivered`` set if they had been delivered before; their TTL
  deadline and ``x-delivery-count`` are the stored ones; ``x-expires`` clocks resume.
- Dead-lettering runs only once every queue is loaded, so DLX targets exist.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from ottermq.amqp.errors import AMQPError
from ottermq.amqp.props import quick_props
from ottermq.amqp.table import decode_table
from ottermq.persistence.hook import DurableHook
from ottermq.persistence.store import BindingRecord, MessageRecord, Store
from ottermq.vhost.message import Entry, Message, SelectedMessage, with_delivery_count
from ottermq.vhost.queue import Queue
from ottermq.vhost.vhost import VHost

from .delayed import DedupPersistence, DelayService

log = logging.getLogger(__name__)


class Recoverable(Protocol):
    """What recovery fills: the node's vhosts, its deduplication caches and delayed messages."""

    vhosts: dict[str, VHost]
    dedup: DedupPersistence
    delays: DelayService

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
    await broker.dedup.load()  # before the exchanges and queues whose caches persist
    for record in defs.vhosts:
        broker.ensure_vhost(record.name)
    counts = {"exchanges": 0, "queues": 0, "bindings": 0, "messages": 0}
    for vhost in broker.vhosts.values():
        vhost.store = None  # no write-back while restoring
    for ex in defs.exchanges:
        ex_vhost = broker.vhosts.get(ex.vhost)
        if ex_vhost is None or ex.name in ex_vhost.exchanges:
            continue
        args = decode_table(ex.arguments)[0]
        try:
            ex_vhost.declare_exchange(ex.name, ex.type, False, True, ex.auto_delete, ex.internal, args)
        except AMQPError as exc:
            log.warning("skipping stored exchange '%s' in vhost '%s': %s", ex.name, ex.vhost, exc.text)
            continue
        counts["exchanges"] += 1
    queues: list[tuple[Queue, int]] = []
    for qr in defs.queues:
        q_vhost = broker.vhosts.get(qr.vhost)
        if q_vhost is None:
            continue
        args = decode_table(qr.arguments)[0]
        try:
            queue = q_vhost.declare_queue(qr.name, False, True, False, qr.auto_delete, args, None, True)
        except AMQPError as exc:
            log.warning("skipping stored queue '%s' in vhost '%s': %s", qr.name, qr.vhost, exc.text)
            store.delete_queue(qr.id)
            continue
        queue.store_id = qr.id
        queue.store = hook
        if qr.expires_at is not None and queue.args.expires is not None:
            queue.ttl.schedule_queue_expiry(queue, qr.expires_at)  # the clock resumes
        queues.append((queue, qr.id))
        counts["queues"] += 1
    for b in defs.bindings:
        b_vhost = broker.vhosts.get(b.vhost)
        if b_vhost is None or not _binding_ends_exist(b_vhost, b):
            store.delete_binding(b)
            continue
        args = decode_table(b.arguments)[0]
        b_vhost.bind(b.source, (b.destination_kind, b.destination), b.routing_key, args)
        counts["bindings"] += 1
    for vhost in broker.vhosts.values():
        vhost.store = hook
    for queue, queue_id in queues:
        counts["messages"] += await _load_messages(store, queue, queue_id)
    for queue, _ in queues:
        queue.recovered()  # expires (dead-letters) what lapsed while we were down, arms timers
    counts["delayed"] = await broker.delays.recover()  # the due ones are routed right after
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


def _binding_ends_exist(vhost: VHost, b: BindingRecord) -> bool:
    targets: Mapping[str, object] = vhost.queues if b.destination_kind == "queue" else vhost.exchanges
    return b.source in vhost.exchanges and b.destination in targets


async def _load_messages(store: Store, queue: Queue, queue_id: int) -> int:
    need_priority = bool(queue.args.max_priority)
    limit = queue.args.delivery_limit
    total = 0
    async for chunk in _prefetched(store.iter_messages(queue_id)):
        entries: list[Entry] = []
        append = entries.append
        for r in chunk:
            priority = quick_props(r.props)[1] if need_priority else None
            message = Message(r.exchange, r.routing_key, r.props, r.body, True, priority, None)
            if r.extra_keys:
                message = SelectedMessage(message, r.props, tuple(r.extra_keys))
            if r.delivery_count and limit is not None:
                message = with_delivery_count(message, r.delivery_count)
            entry = Entry(message, r.seq, r.deadline, r.enqueued_at)
            entry.redelivered = r.delivered
            entry.delivery_count = r.delivery_count
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
