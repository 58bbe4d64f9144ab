"""Ready entries of a queue in delivery order: a plain deque, or one per priority level (a quorum
queue's, with its returns first, are ``quorum.QuorumReady``).

Rules:
- Entries are kept in ``seq`` order; a requeue merges entries back into their original positions.
- Exact-TTL expiries are tombstones (state ``GONE``) left in place and skipped by every read.
- ``pop_expired``/``head_deadline`` look only at the head: the highest non-empty priority level's
  first entry (a priority queue expires like one queue read in delivery order).
- Paging (``paging.py``): beyond its window a ``Ready`` (each level of a priority queue, a quorum queue's
  main line) writes new entries to its pager; reading the head with none left in memory pages the next
  page in. Returns (requeues) go to memory: they are older than anything paged.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import deque
from collections.abc import Iterator

from .message import GONE, PAGED, Entry
from .paging import PAGE_BYTES, PAGE_ENTRIES, UNBOUNDED, Pager, PagerFactory

log = logging.getLogger(__name__)


class Ready:
    """Ready entries in seq order: one deque (plain queue), then its pager's; tombstones are skipped."""

    __slots__ = ("_q", "_dead", "_paged", "_pager", "window", "factory")

    def __init__(self) -> None:
        self._q: deque[Entry] = deque()
        self._dead = 0  # tombstones (exact-TTL expiries) still in the deque
        self._paged = 0  # entries on disk (``len(self._pager)``)
        self._pager: Pager | None = None
        self.window = UNBOUNDED  # entries kept in memory before new ones are paged
        self.factory: PagerFactory | None = None

    def __len__(self) -> int:
        return len(self._q) - self._dead + self._paged

    def set_paging(self, factory: PagerFactory | None, window: int) -> None:
        """Page beyond ``window`` entries with pagers from ``factory`` (None: keep all in memory)."""
        self.factory = factory
        self.window = window if factory is not None else UNBOUNDED

    @property
    def paged(self) -> int:
        """Entries on disk."""
        return self._paged

    @property
    def paged_transient(self) -> tuple[int, int]:
        """Transient entries on disk and their body bytes."""
        pager = self._pager
        return pager.transient if pager is not None else (0, 0)

    @property
    def paged_bytes(self) -> int:
        """Body bytes on disk."""
        pager = self._pager
        return pager.nbytes if pager is not None else 0

    def append(self, entry: Entry) -> None:
        if self._paged or len(self._q) >= self.window:  # (tombstones count: exact TTL does not page)
            if self.page(entry):
                return
        self._q.append(entry)

    def page(self, entry: Entry) -> bool:
        """Write ``entry`` behind everything (the queue's window is full); False without a pager."""
        pager = self._pager_or_none()
        if pager is None:
            return False
        pager.push(entry)
        self._paged += 1
        return True

    def _pager_or_none(self) -> Pager | None:
        """The pager, made on first use; None without a factory or when it cannot be made (the queue
        then keeps its messages in memory)."""
        pager = self._pager
        if pager is None:
            factory = self.factory
            if factory is None:
                return None
            try:
                pager = self._pager = factory()
            except OSError as exc:
                log.warning("cannot page (%s): this queue keeps its messages in memory", exc)
                self.factory = None
                self.window = UNBOUNDED
                return None
        return pager

    def _page_in(self) -> None:
        """The window ran dry: read the next page from disk."""
        pager = self._pager
        assert pager is not None
        self._q.extend(pager.pull(PAGE_ENTRIES, PAGE_BYTES))
        self._paged = len(pager)

    def shrink(self, limit: int, keep: int) -> int:
        """Page out up to ``limit`` entries from the end of the window, keeping ``keep`` in memory
        (a queue that became lazy); returns how many are still above ``keep``."""
        q = self._q
        if len(q) - self._dead <= keep:
            return 0
        pager = self._pager_or_none()
        if pager is None:
            return 0
        out: list[Entry] = []
        while q and len(out) < limit and len(q) - self._dead > keep:
            entry = q.pop()
            if entry.state == GONE:
                self._dead -= 1
            else:
                out.append(entry)
        if not out:
            return 0
        out.reverse()
        pager.push_front(out)
        self._paged = len(pager)
        return max(0, len(q) - self._dead - keep)

    def popleft(self) -> Entry:
        q = self._q
        while True:
            if not q and self._paged:
                self._page_in()
            entry = q.popleft()
            if entry.state != GONE:
                return entry
            self._dead -= 1

    def peek(self) -> Entry | None:
        q = self._q
        while q and q[0].state == GONE:
            q.popleft()
            self._dead -= 1
        if not q and self._paged:
            self._page_in()
        return q[0] if q else None

    def peek_in_memory(self) -> Entry | None:
        """The head if it is in memory (None when it is paged out): a look that reads no disk."""
        for e in self._q:
            if e.state != GONE:
                return e
        return None

    def discard(self, entry: Entry) -> bool:
        """Tombstone a ready entry in place (exact TTL, a withdrawn publish); a paged one is dropped
        from its pager or, paged in since, tombstoned where it now is. False when a paged entry was
        paged in and is no longer ready (delivered)."""
        if entry.state != PAGED:
            entry.state = GONE
            self._dead += 1
            return True
        entry.state = GONE
        pager = self._pager
        if pager is not None and pager.drop(entry):
            self._paged = len(pager)
            return True
        seq = entry.seq  # paged in since: another Entry object holds it now
        for other in self._q:
            if other.seq == seq and other.state != GONE:
                other.state = GONE
                self._dead += 1
                return True
        return False

    def clear(self) -> list[Entry]:
        """Empty it; returns the entries that were in memory (paged ones are forgotten)."""
        entries = [e for e in self._q if e.state != GONE]
        self._q.clear()
        self._dead = 0
        if self._pager is not None:
            self._pager.clear()
            self._paged = 0
        return entries

    def __iter__(self) -> Iterator[Entry]:
        # a generator function, not a generator expression: mypyc compiles those into a list (a copy of
        # the whole queue for a caller that reads only the first entries)
        for e in self._q:
            if e.state != GONE:
                yield e
        if self._paged and self._pager is not None:
            yield from self._pager.entries()

    def scan(self) -> Iterator[Entry]:
        """Every ready entry, head first: the ones in memory as they are now (a snapshot), then the
        paged ones read back lazily (state ``PAGED``; one paged in meanwhile is not seen)."""
        memory = [e for e in self._q if e.state != GONE]
        pager = self._pager
        if pager is None or not self._paged:
            return iter(memory)
        return itertools.chain(memory, pager.entries())

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

    def head_seq(self) -> int:
        """The head's ``seq`` (-1 when empty)."""
        head = self.peek()
        return head.seq if head is not None else -1


def _merge(q: deque[Entry], entries: list[Entry]) -> deque[Entry]:
    entries.sort(key=_seq)
    if not q or entries[-1].seq < q[0].seq:
        q.extendleft(reversed(entries))
        return q
    return deque(heapq.merge(q, entries, key=_seq))


def _seq(entry: Entry) -> int:
    return entry.seq


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

    def set_paging(self, factory: PagerFactory | None, window: int) -> None:
        for level in self._levels:
            level.set_paging(factory, window)
        self.factory = factory

    @property
    def paged(self) -> int:
        return sum(level.paged for level in self._levels)

    @property
    def paged_transient(self) -> tuple[int, int]:
        count = size = 0
        for level in self._levels:
            n, b = level.paged_transient
            count += n
            size += b
        return count, size

    @property
    def paged_bytes(self) -> int:
        return sum(level.paged_bytes for level in self._levels)

    def append(self, entry: Entry) -> None:
        self._level(entry).append(entry)

    def page(self, entry: Entry) -> bool:
        return self._level(entry).page(entry)

    def shrink(self, limit: int, keep: int) -> int:
        left = 0
        for level in self._levels:
            if limit > 0:
                before = level.paged
                left += level.shrink(limit, keep)
                limit -= level.paged - before
            else:
                left += max(0, len(level) - level.paged - keep)
        return left

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

    def peek_in_memory(self) -> Entry | None:
        for level in reversed(self._levels):
            if level:
                return level.peek_in_memory()
        return None

    def discard(self, entry: Entry) -> bool:
        return self._level(entry).discard(entry)

    def clear(self) -> list[Entry]:
        return [e for level in reversed(self._levels) for e in level.clear()]

    def __iter__(self) -> Iterator[Entry]:
        for level in reversed(self._levels):
            yield from level

    def scan(self) -> Iterator[Entry]:
        return itertools.chain.from_iterable([level.scan() for level in reversed(self._levels)])

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
