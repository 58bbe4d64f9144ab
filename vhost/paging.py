"""Backlogs larger than memory: the part of a queue's ready messages that lives on disk.

Rules:
- A queue keeps a bounded *window* of ready entries in memory (``Ready``); the rest of its ready
  entries, always the newest ones, are on disk behind a ``Pager``: a FIFO of entry records (every field
  of the ``Entry`` and its ``Message``, body and property octets included). A paged entry costs no
  memory per message in the broker; the queue only counts them.
- Order is kept: once a queue has paged entries every new one goes behind them, even when the window
  has room; the window is refilled from the pager's head, a page at a time, when it runs dry. A
  requeued entry (it was delivered, so it came from the window) goes back into the window.
- The window is ``Paging.window`` messages and ``Paging.window_bytes`` body bytes per priority level;
  ``x-queue-mode: lazy`` (or the ``queue-mode`` policy key) makes it zero: every message goes to disk at
  once and only a page read ahead for consumers is in memory, as RabbitMQ's lazy queues.
- The pager is per process and needs no recovery: persistent messages are in the store as well (that is
  what a restart recovers); transient ones die with the process as they would in memory.
- Pagers are made by a factory the broker injects (``persistence/spill.py``); without one a queue
  keeps everything in memory. The queue never imports the broker or the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol

from .message import Entry

CallSoon = Callable[[Callable[[], None]], Any]

# entries and body bytes one page-in reads at most (one slice of the event loop: ~0.2 ms per page)
PAGE_ENTRIES: Final = 256
PAGE_BYTES: Final = 1 << 20
UNBOUNDED: Final = 1 << 62  # a window nothing fills (no pager, or paging off)
SHRINK_SLICE: Final = 5000  # entries a queue that became lazy pages out per loop turn


class Pager(Protocol):
    """A FIFO of entries on disk (``persistence/spill.py``'s ``SpillPager``)."""

    def __len__(self) -> int: ...

    @property
    def transient(self) -> tuple[int, int]:
        """Paged entries whose message is transient and their body bytes (what RabbitMQ's management
        API calls ``messages_paged_out`` and ``message_bytes_paged_out``)."""
        ...

    @property
    def nbytes(self) -> int:
        """Body bytes of the paged entries."""
        ...

    def push(self, entry: Entry) -> None:
        """Write ``entry`` at the tail and mark it ``PAGED`` (it must never fail: a pager that cannot
        write keeps the entry in memory, in order)."""

    def push_front(self, entries: list[Entry]) -> None:
        """Write ``entries`` (in order, all older than the pager's) before its head, marking them
        ``PAGED``."""

    def pull(self, count: int, nbytes: int) -> list[Entry]:
        """Read up to ``count`` entries (and about ``nbytes`` body bytes, at least one entry) from the
        head, in order, leaving out dropped ones."""
        ...

    def drop(self, entry: Entry) -> bool:
        """Leave a paged entry out (withdrawn, expired or moved while on disk); False when it was
        already pulled (it is in memory now)."""
        ...

    def entries(self) -> Iterator[Entry]:
        """Every paged entry, head first, read back (state ``PAGED``; for scans: moves, samples)."""
        ...

    def clear(self) -> None:
        """Forget every paged entry and give the disk space back."""


PagerFactory = Callable[[], Pager]


class Paging:
    """How a vhost's queues page (``broker/node/wiring.py`` sets it from ``OTTERMQ_QUEUE_WINDOW*``).

    Args:
        factory: makes a queue's pager on first use.
        window: ready messages a queue keeps in memory (per priority level) before it pages.
        window_bytes: body bytes a queue keeps in memory before it pages.
    """

    __slots__ = ("factory", "window", "window_bytes")

    def __init__(self, factory: PagerFactory, window: int, window_bytes: int) -> None:
        self.factory = factory
        self.window = window
        self.window_bytes = window_bytes


class Pageable(Protocol):
    """What a window pages (``ready.Ready``)."""

    def set_paging(self, factory: PagerFactory | None, window: int) -> None: ...

    def shrink(self, limit: int, keep: int) -> int: ...


class Window:
    """How much of one queue's ready messages stays in memory: nothing for a lazy queue (``x-queue-mode:
    lazy``), the vhost's window otherwise, all of them without paging or with exact TTL (its deadline
    heap holds every ready entry). A queue that becomes lazy pages what it holds out, a slice of
    ``SHRINK_SLICE`` entries per loop turn (``call_soon``)."""

    __slots__ = ("paging", "bytes", "lazy", "_shrinking")

    def __init__(self) -> None:
        self.paging: Paging | None = None
        self.bytes = UNBOUNDED  # ready body bytes kept in memory before new messages are paged
        self.lazy = False
        self._shrinking = False

    def apply(
        self, ready: Pageable, paging: Paging | None, lazy: bool, exact: bool, call_soon: CallSoon | None
    ) -> None:
        """Page ``ready`` beyond the window in force (``paging``: the vhost's; None: never)."""
        self.paging = paging
        self.lazy = lazy
        if paging is None or exact:
            ready.set_paging(None, UNBOUNDED)
            self.bytes = UNBOUNDED
            return
        ready.set_paging(paging.factory, 0 if lazy else paging.window)
        self.bytes = 0 if lazy else paging.window_bytes
        if lazy and not self._shrinking:
            self._shrink(ready, call_soon)

    def _shrink(self, ready: Pageable, call_soon: CallSoon | None) -> None:
        self._shrinking = False
        if not self.lazy or self.paging is None:
            return
        if ready.shrink(SHRINK_SLICE, 0) and call_soon is not None:
            self._shrinking = True
            call_soon(lambda: self._shrink(ready, call_soon))
