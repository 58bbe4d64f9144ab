"""Queues: ready messages in order, consumers served round-robin.

Rules:
- Every message in a queue is an ``Entry`` with a per-queue sequence number ``seq``; ready entries
  are kept in ``seq`` order (per priority level for priority queues).
- A requeued entry goes back to its original position (by ``seq``), with ``redelivered`` set.
- ``dispatch`` hands ready entries to consumers round-robin, skipping consumers whose channel
  cannot take more (prefetch, flow, a paused connection); the broker calls it again when a
  consumer regains capacity.
- The queue never imports the broker: consumers are anything implementing ``Consumer``.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from .message import Entry, Message

if TYPE_CHECKING:
    from .arguments import QueueArgs


class Consumer(Protocol):
    """What a queue needs from a consumer (implemented by the broker's channel)."""

    tag: str
    exclusive: bool

    def can_deliver(self) -> bool: ...

    def deliver(self, queue: Queue, entry: Entry) -> None: ...

    def on_queue_deleted(self, queue: Queue) -> None: ...


class _Ready:
    """Ready entries in seq order: one deque (plain queue)."""

    __slots__ = ("_q",)

    def __init__(self) -> None:
        self._q: deque[Entry] = deque()

    def __len__(self) -> int:
        return len(self._q)

    def append(self, entry: Entry) -> None:
        self._q.append(entry)

    def popleft(self) -> Entry:
        return self._q.popleft()

    def peek(self) -> Entry | None:
        return self._q[0] if self._q else None

    def clear(self) -> list[Entry]:
        entries = list(self._q)
        self._q.clear()
        return entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._q)

    def requeue(self, entries: list[Entry]) -> None:
        self._q = _merge(self._q, entries)


def _merge(q: deque[Entry], entries: list[Entry]) -> deque[Entry]:
    entries.sort(key=_seq)
    if not q or entries[-1].seq < q[0].seq:
        q.extendleft(reversed(entries))
        return q
    return deque(heapq.merge(q, entries, key=_seq))


def _seq(entry: Entry) -> int:
    return entry.seq


class _PriorityReady(_Ready):
    """Ready entries for ``x-max-priority`` queues: one deque per priority, highest first."""

    __slots__ = ("_levels", "_count", "_max")

    def __init__(self, max_priority: int) -> None:
        self._max = max_priority
        self._levels: list[deque[Entry]] = [deque() for _ in range(max_priority + 1)]
        self._count = 0

    def _level(self, entry: Entry) -> deque[Entry]:
        priority = entry.message.priority or 0
        return self._levels[priority if priority <= self._max else self._max]

    def __len__(self) -> int:
        return self._count

    def append(self, entry: Entry) -> None:
        self._level(entry).append(entry)
        self._count += 1

    def popleft(self) -> Entry:
        for level in reversed(self._levels):
            if level:
                self._count -= 1
                return level.popleft()
        raise IndexError("pop from an empty queue")

    def peek(self) -> Entry | None:
        for level in reversed(self._levels):
            if level:
                return level[0]
        return None

    def clear(self) -> list[Entry]:
        entries = [e for level in reversed(self._levels) for e in level]
        for level in self._levels:
            level.clear()
        self._count = 0
        return entries

    def __iter__(self) -> Iterator[Entry]:
        for level in reversed(self._levels):
            yield from level

    def requeue(self, entries: list[Entry]) -> None:
        by_level: dict[int, list[Entry]] = {}
        for entry in entries:
            by_level.setdefault(id(self._level(entry)), []).append(entry)
        for i, level in enumerate(self._levels):
            group = by_level.get(id(level))
            if group:
                self._levels[i] = _merge(level, group)
        self._count += len(entries)


class Queue:
    """A queue in a virtual host.

    Args:
        name: queue name.
        vhost: name of the owning virtual host (for error texts).
        durable, exclusive, auto_delete: the declare flags.
        owner: the connection owning an exclusive queue (opaque), else None.
        args: validated ``x-`` arguments.
    """

    __slots__ = (
        "name",
        "vhost",
        "durable",
        "exclusive",
        "auto_delete",
        "owner",
        "args",
        "consumers",
        "_ready",
        "_rr",
        "_seq",
        "had_consumer",
        "deleted",
        "ready_bytes",
        "unacked",
    )

    def __init__(
        self,
        name: str,
        vhost: str,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        owner: object | None,
        args: QueueArgs,
    ) -> None:
        self.name = name
        self.vhost = vhost
        self.durable = durable
        self.exclusive = exclusive
        self.auto_delete = auto_delete
        self.owner = owner
        self.args = args
        self.consumers: list[Consumer] = []
        self._ready: _Ready = _PriorityReady(args.max_priority) if args.max_priority else _Ready()
        self._rr = 0
        self._seq = 0
        self.had_consumer = False
        self.deleted = False
        self.ready_bytes = 0
        self.unacked = 0  # delivered, awaiting ack

    # -- messages -------------------------------------------------------------------------
    @property
    def message_count(self) -> int:
        """Ready messages (what declare-ok, get-ok and delete-ok report)."""
        return len(self._ready)

    def enqueue(self, message: Message) -> Entry:
        """Append a published message and hand it to a consumer if one can take it."""
        self._seq += 1
        entry = Entry(message, self._seq)
        self._ready.append(entry)
        self.ready_bytes += len(message.body)
        if self.consumers:
            self.dispatch()
        return entry

    def pop(self) -> Entry | None:
        """Take the head entry for delivery (``basic.get`` or a consumer)."""
        if not self._ready:
            return None
        entry = self._ready.popleft()
        self.ready_bytes -= len(entry.message.body)
        return entry

    def peek(self) -> Entry | None:
        return self._ready.peek()

    def requeue(self, entries: list[Entry]) -> None:
        """Return delivered entries to their original positions, marked redelivered."""
        if self.deleted or not entries:
            return
        for entry in entries:
            entry.redelivered = True
            self.ready_bytes += len(entry.message.body)
        self._ready.requeue(entries)
        if self.consumers:
            self.dispatch()

    def purge(self) -> int:
        """Drop every ready message; returns how many (never dead-letters)."""
        entries = self._ready.clear()
        self.ready_bytes = 0
        return len(entries)

    def ready_entries(self) -> Iterable[Entry]:
        return iter(self._ready)

    # -- consumers ------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.had_consumer = True
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> bool:
        """Detach a consumer. Returns True when an auto-delete queue should now be deleted."""
        try:
            self.consumers.remove(consumer)
        except ValueError:
            return False
        return self.auto_delete and not self.consumers and self.had_consumer

    def has_exclusive_consumer(self) -> bool:
        return any(c.exclusive for c in self.consumers)

    def dispatch(self) -> None:
        """Deliver ready entries round-robin to consumers able to take them."""
        ready = self._ready
        consumers = self.consumers
        while ready and consumers:
            n = len(consumers)
            if n == 1:
                consumer = consumers[0]
                if not consumer.can_deliver():
                    return
            else:
                for _ in range(n):
                    self._rr = (self._rr + 1) % n
                    consumer = consumers[self._rr]
                    if consumer.can_deliver():
                        break
                else:
                    return
            entry = ready.popleft()
            self.ready_bytes -= len(entry.message.body)
            consumer.deliver(self, entry)

    def mark_deleted(self) -> list[Consumer]:
        """Flag the queue deleted, drop its messages; returns the consumers to notify."""
        self.deleted = True
        self._ready.clear()
        self.ready_bytes = 0
        consumers, self.consumers = self.consumers, []
        return consumers
