"""What a queue needs from the rest of the broker (implemented there and injected: the queue never
imports the broker, dlx or persistence), and the counters it keeps for the management API.

The interfaces are generic in the queue (``Consumer[Queue]``): a consumer, a sink or a store is handed
the queue it serves, and this module need not import the queue's."""

from __future__ import annotations

from typing import Protocol, TypeVar

from .message import Entry

Q = TypeVar("Q", contravariant=True)


class Consumer(Protocol[Q]):
    """What a queue needs from a consumer (implemented by the broker's channel)."""

    tag: str
    exclusive: bool
    no_ack: bool  # deliveries are settled on sending (basic.consume no-ack)

    def can_deliver(self) -> bool: ...

    def deliver(self, queue: Q, entry: Entry) -> None: ...

    def on_queue_deleted(self, queue: Q) -> None: ...


class DeadLetterSink(Protocol[Q]):
    """Where expired, rejected and overflowing messages go (``dlx.DeadLetterer`` or a drop).

    Store first, then forget: the sink deletes each entry's stored row (``queue.forget``) itself,
    only after the entry's dead letter is stored (its insert queued in the same store batch, ahead
    of the delete) or once it is dropped for good. An entry the sink could not hand on keeps its row:
    a restart brings it back (a duplicate at worst, never a loss). ``dead_letter`` never raises for
    one message's sake.
    """

    def dead_letter(self, queue: Q, entries: list[Entry], reason: str) -> None: ...


class MessageStore(Protocol[Q]):
    """Persistence of a durable queue's persistent messages (filled by ``persistence.hook``)."""

    def message_added(self, queue: Q, entry: Entry) -> None:
        """Store the entry; sets ``entry.store_id``."""

    def message_removed(self, entry: Entry) -> None:
        """Forget a stored entry (acked, dead-lettered, expired, dropped)."""

    def message_delivered(self, entry: Entry) -> None:
        """Remember a stored entry was delivered (recovered as redelivered)."""

    def queue_purged(self, queue: Q) -> None: ...

    def queue_touched(self, queue: Q, expires_at: int) -> None: ...


class Forgets(Protocol):
    def forget(self, entries: list[Entry]) -> None: ...


class DropSink:
    """Dead letters vanish (no DLX wiring, e.g. in unit tests)."""

    def dead_letter(self, queue: Forgets, entries: list[Entry], reason: str) -> None:
        queue.forget(entries)


class QueueStats:
    """A queue's message counters since it was declared (the management API's queue
    ``message_stats``, Prometheus' ``rabbitmq_queue_messages_published_total``): plain integers,
    incremented by the queue (``publish``: the published messages it took; not dead letters, as
    RabbitMQ counts publishes per channel) and by the channels that deliver from it."""

    __slots__ = ("publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty", "redeliver", "ack")

    def __init__(self) -> None:
        self.publish = 0
        self.deliver = 0
        self.deliver_no_ack = 0
        self.get = 0
        self.get_no_ack = 0
        self.get_empty = 0
        self.redeliver = 0
        self.ack = 0
