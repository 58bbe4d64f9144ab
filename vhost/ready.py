"""Ready entries of a queue in delivery order: a plain deque, or one per priority level, or a quorum
queue's two.

Rules:
- Entries are kept in ``seq`` order; a requeue merges entries back into their original positions.
- A quorum queue (``QuorumReady``, RabbitMQ 3.10's ``rabbit_fifo``) has no original positions: a
  return (``requeue``) joins the returns, which go out first, in the order they came back; ``append``
  puts a new message, or a requeued one (``rabbit_fifo``'s requeue: a nack without a delivery
  limit), at the back.
- Exact-TTL expiries are tombstones (state ``GONE``) left in place and skipped by every read.
- ``pop_expired``/``head_deadline`` look only at the head: the highest non-empty priority level's
  first entry (a priority queue expires like one queue read in delivery order).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from .message import GONE, Entry


class Ready:
    """Ready entries in seq order: one deque (plain queue); tombstones are skipped."""

    __slots__ = ("_q", "_dead")

    def __init__(self) -> None:
        self._q: deque[Entry] = deque()
        self._dead = 0  # tombstones (exact-TTL expiries) still in the deque

    def __len__(self) -> int:
        return len(self._q) - self._dead

    def append(self, entry: Entry) -> None:
        self._q.append(entry)

    def popleft(self) -> Entry:
        q = self._q
        entry = q.popleft()
        while entry.state == GONE:
            self._dead -= 1
            entry = q.popleft()
        return entry

    def peek(self) -> Entry | None:
        q = self._q
        while q and q[0].state == GONE:
            q.popleft()
            self._dead -= 1
        return q[0] if q else None

    def discard(self, entry: Entry) -> None:
        """Tombstone a ready entry in place (exact TTL)."""
        entry.state = GONE
        self._dead += 1

    def clear(self) -> list[Entry]:
        entries = [e for e in self._q if e.state != GONE]
        self._q.clear()
        self._dead = 0
        return entries

    def __iter__(self) -> Iterator[Entry]:
        # a generator function, not a generator expression: mypyc compiles those into a list (a copy of
        # the whole queue for a caller that reads only the first entries)
        for e in self._q:
            if e.state != GONE:
                yield e

    def requeue(self, entries: list[Entry]) -> None:
        self._q = _merge(self._q, entries)

    def pop_expired(self, now: int, out: list[Entry]) -> None:
        """Move expired head entries into ``out``."""
        while True:
            head = self.peek()
            if head is None or head.deadline is None or now < head.deadline:
                return
            out.append(self.popleft())

    def head_deadline(self) -> int | None:
        head = self.peek()
        return head.deadline if head is not None else None


def _merge(q: deque[Entry], entries: list[Entry]) -> deque[Entry]:
    entries.sort(key=_seq)
    if not q or entries[-1].seq < q[0].seq:
        q.extendleft(reversed(entries))
        return q
    return deque(heapq.merge(q, entries, key=_seq))


def _seq(entry: Entry) -> int:
    return entry.seq


class QuorumReady(Ready):
    """A quorum queue's ready entries: its returns (served first, in return order), then the rest."""

    __slots__ = ("_returns",)

    def __init__(self) -> None:
        super().__init__()
        self._returns: deque[Entry] = deque()

    def __len__(self) -> int:
        return len(self._returns) + len(self._q) - self._dead

    def popleft(self) -> Entry:
        returns = self._returns
        while returns:
            entry = returns.popleft()
            if entry.state != GONE:
                return entry
            self._dead -= 1
        return super().popleft()

    def peek(self) -> Entry | None:
        returns = self._returns
        while returns and returns[0].state == GONE:
            returns.popleft()
            self._dead -= 1
        return returns[0] if returns else super().peek()

    def clear(self) -> list[Entry]:
        entries = [e for e in self._returns if e.state != GONE]
        self._returns.clear()
        return entries + super().clear()

    def __iter__(self) -> Iterator[Entry]:
        for e in self._returns:
            if e.state != GONE:
                yield e
        yield from super().__iter__()

    def requeue(self, entries: list[Entry]) -> None:
        self._returns.extend(entries)


class PriorityReady(Ready):
    """Ready entries for ``x-max-priority`` queues: one ``Ready`` per priority, highest first."""

    __slots__ = ("_levels", "_max")

    def __init__(self, max_priority: int) -> None:
        super().__init__()
        self._max = max_priority
        self._levels: list[Ready] = [Ready() for _ in range(max_priority + 1)]

    def _level(self, entry: Entry) -> Ready:
        priority = entry.message.priority or 0
        return self._levels[priority if priority <= self._max else self._max]

    def __len__(self) -> int:
        return sum(len(level) for level in self._levels)

    def append(self, entry: Entry) -> None:
        self._level(entry).append(entry)

    def popleft(self) -> Entry:
        for level in reversed(self._levels):
            if level:
                return level.popleft()
        raise IndexError("pop from an empty queue")

    def peek(self) -> Entry | None:
        for level in reversed(self._levels):
            head = level.peek()
            if head is not None:
                return head
        return None

    def discard(self, entry: Entry) -> None:
        self._level(entry).discard(entry)

    def clear(self) -> list[Entry]:
        return [e for level in reversed(self._levels) for e in level.clear()]

    def __iter__(self) -> Iterator[Entry]:
        for level in reversed(self._levels):
            yield from level

    def requeue(self, entries: list[Entry]) -> None:
        by_level: dict[int, list[Entry]] = {}
        for entry in entries:
            by_level.setdefault(id(self._level(entry)), []).append(entry)
        for level in self._levels:
            group = by_level.get(id(level))
            if group:
                level.requeue(group)

    def pop_expired(self, now: int, out: list[Entry]) -> None:
        """Expire from the highest level down, stopping at the first live head (RabbitMQ's
        ``rabbit_priority_queue:dropwhile``): lower levels wait behind it like any message."""
        for level in reversed(self._levels):
            level.pop_expired(now, out)
            if level:
                return

    def head_deadline(self) -> int | None:
        head = self.peek()
        return head.deadline if head is not None else None
