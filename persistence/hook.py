"""Adapter from the vhost's durability events to ``Store`` records.

The vhost reports durable exchanges, queues, bindings and the persistent messages of durable
queues (``vhost.DefinitionStore``, ``vhost.queue.MessageStore``); this turns them into records
and queues them on the store. Nothing here awaits: the store batches and commits on its own.

A stored entry's ``store_id`` is its queue's id (the very int object the queue holds) when its
message id is ``(queue id << SEQ_BITS) | entry.seq``, as it nearly always is: no int object per
queued message (32 octets each). Otherwise (the store moved the seq on, e.g. in a queue redeclared
under a name whose old messages used higher seqs; recovered entries) it is the full message id.
Message ids are at least ``1 << SEQ_BITS`` and queue ids below it, so ``_message_id`` tells them apart.
"""

from __future__ import annotations

from typing import Any

from ottermq.ttl.manager import Clock
from ottermq.vhost.exchange import Destination, Exchange
from ottermq.vhost.message import Entry
from ottermq.vhost.queue import Queue

from .arguments import encode_arguments
from .schema import SEQ_BITS
from .store import BindingRecord, ExchangeRecord, MessageRecord, QueueRecord, Store


def exchange_record(vhost: str, exchange: Exchange) -> ExchangeRecord:
    return ExchangeRecord(
        vhost,
        exchange.name,
        exchange.type,
        exchange.auto_delete,
        exchange.internal,
        encode_arguments(dict(exchange.arguments or {})),
    )


def binding_record(
    vhost: str, source: str, dest: Destination, routing_key: str, arguments: dict[str, Any]
) -> BindingRecord:
    return BindingRecord(vhost, source, dest[0], dest[1], routing_key, encode_arguments(dict(arguments)))


class DurableHook:
    """Implements ``vhost.DefinitionStore`` and ``vhost.queue.MessageStore`` over a ``Store``.

    Args:
        store: where records go.
        clock: epoch-ms clock (message enqueue times).
    """

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    # -- definitions ----------------------------------------------------------------------
    def exchange_declared(self, vhost: str, exchange: Exchange) -> None:
        self.store.put_exchange(exchange_record(vhost, exchange))

    def exchange_deleted(self, vhost: str, name: str) -> None:
        self.store.delete_exchange(vhost, name)

    def queue_declared(self, queue: Queue) -> None:
        record = QueueRecord(queue.vhost, queue.name, queue.auto_delete, encode_arguments(queue.args.raw))
        queue.store_id = self.store.put_queue(record)
        queue.store = self

    def queue_deleted(self, queue: Queue) -> None:
        self.store.delete_queue(queue.store_id)
        queue.store = None

    def binding_added(
        self, vhost: str, source: str, dest: Destination, routing_key: str, arguments: dict[str, Any]
    ) -> None:
        self.store.put_binding(binding_record(vhost, source, dest, routing_key, arguments))

    def binding_removed(
        self, vhost: str, source: str, dest: Destination, routing_key: str, arguments: dict[str, Any]
    ) -> None:
        self.store.delete_binding(binding_record(vhost, source, dest, routing_key, arguments))

    # -- messages -------------------------------------------------------------------------
    def message_added(self, queue: Queue, entry: Entry) -> None:
        message = entry.message
        message_id = self.store.insert_message(
            MessageRecord(
                queue.store_id,
                entry.seq,
                message.exchange,
                message.routing_key,
                message.raw_props,
                message.body,
                entry.enqueued_at or self.clock(),
                entry.deadline,
                message.extra_keys,
                entry.redelivered,
                entry.delivery_count,
            )
        )
        queue_id = queue.store_id
        entry.store_id = queue_id if message_id == (queue_id << SEQ_BITS) | entry.seq else message_id

    def message_removed(self, entry: Entry) -> None:
        self.store.delete_message(_message_id(entry))

    def message_delivered(self, entry: Entry) -> None:
        self.store.mark_delivered(_message_id(entry), entry.delivery_count)

    def queue_purged(self, queue: Queue) -> None:
        self.store.purge_queue(queue.store_id)

    def queue_touched(self, queue: Queue, expires_at: int) -> None:
        self.store.touch_queue(queue.store_id, expires_at)


def _message_id(entry: Entry) -> int:
    """The stored entry's message id (see the module docstring)."""
    sid = entry.store_id
    return sid if sid >> SEQ_BITS else (sid << SEQ_BITS) | entry.seq
