"""Give memory back to the system after a backlog drains: glibc's free heap pages, trimmed.

Python's small objects live in pymalloc arenas (freed when empty); everything else (bodies over 512 octets,
large lists and dicts, SQLite's and the event loop's buffers, every thread's own malloc arena) lives in
glibc's heap, which keeps what was freed for reuse and returns only the free top of the main heap by
itself. After a large backlog drains that is tens to hundreds of MiB held free: ``malloc_trim(0)`` hands
every free page back (``MADV_DONTNEED``), in each arena.

Rules:
- ``HeapTrimmer.tick`` runs on the node's one-second memory timer; every ``every`` ticks it asks glibc how
  much it holds free (``mallinfo2``: a walk of the free lists, microseconds) and trims when that grew by
  ``threshold`` octets over the least seen since the last trim (trimmed pages still count as free chunks,
  so the level itself says nothing). A trim walks the heap once (milliseconds for hundreds of MiB) and
  only runs after that much was freed, so a steady broker never pays for it.
- Where the C library is not glibc 2.33 or later (no ``mallinfo2``/``malloc_trim``), the trimmer is off.
- Python's own heap (pymalloc: 1 MiB arenas of 16 KiB pools) is watched on the same look through
  ``sys.getallocatedblocks()``. An arena goes back to the system only once every block in it is free,
  and after a backlog drains the arenas it filled are held by a few survivors each: blocks parked on
  the interpreter's free lists (tuples, floats, lists, dicts), type-cache names, objects allocated
  while the backlog was there. When the count fell by ``blocks_drop`` since its peak and to half the
  peak or less (so what is left to scan is no more than what was freed), a full ``gc.collect()``
  (it empties the free lists) and ``sys._clear_type_cache()`` run, then ``on_drained`` (the node asks
  the store to give back its page cache, then trims) or a trim. Measured on a 1M-message backlog of
  100-octet messages: ~8 MiB back for transient messages, ~28 MiB for persistent ones, in milliseconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import sys
from collections.abc import Callable

log = logging.getLogger(__name__)

THRESHOLD = 32 << 20  # free octets held by malloc before a trim is worth it
EVERY = 5  # ticks (seconds) between looks
BLOCKS_DROP = 1 << 18  # pymalloc blocks freed since the peak before a collection (~20-30 MiB)
_allocated_blocks: Callable[[], int] = getattr(sys, "getallocatedblocks", lambda: 0)


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallinfo2.restype = _MallInfo2
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


class HeapTrimmer:
    """Trims glibc's free heap pages when enough is held (see the module rules).

    Args:
        rss: the process RSS in octets (None when unknown).
        threshold, every, blocks_drop: see :data:`THRESHOLD`, :data:`EVERY` and :data:`BLOCKS_DROP`.
        on_drained: called after the collection that follows a drain (instead of a trim: it trims).
    """

    def __init__(
        self,
        rss: Callable[[], int | None],
        threshold: int = THRESHOLD,
        every: int = EVERY,
        blocks_drop: int = BLOCKS_DROP,
        on_drained: Callable[[], None] | None = None,
    ) -> None:
        self._libc = _glibc()
        self._rss = rss
        self.threshold = threshold
        self.every = every
        self.blocks_drop = blocks_drop
        self.on_drained = on_drained
        self._ticks = 0
        self._low = 0  # the least free octets seen since the last trim
        self._peak_blocks = _allocated_blocks()  # the most pymalloc blocks seen since the last collection
        self.trims = 0  # how many times memory was handed back
        self.trimmed = 0  # octets of RSS the trims gave back, in total
        self.collections = 0  # full collections after a drain

    @property
    def enabled(self) -> bool:
        return self._libc is not None

    def free_held(self) -> int:
        """Octets glibc holds free in its arenas (0 when unknown)."""
        return 0 if self._libc is None else int(self._libc.mallinfo2().fordblks)

    def tick(self) -> None:
        self._ticks += 1
        if self._ticks % self.every:
            return
        blocks = _allocated_blocks()
        if blocks > self._peak_blocks:
            self._peak_blocks = blocks
        elif self._peak_blocks - blocks >= self.blocks_drop and blocks * 2 <= self._peak_blocks:
            self.drained()
            return
        if self._libc is None:
            return
        free = self.free_held()
        if free - self._low >= self.threshold:
            self.trim()
        else:
            self._low = min(self._low, free)

    def drained(self) -> None:
        """Python's heap shrank a lot: free the blocks that pin its arenas, then hand pages back."""
        gc.collect()  # a full collection also empties the free lists
        sys._clear_type_cache()
        self._peak_blocks = _allocated_blocks()
        self.collections += 1
        if self.on_drained is not None:
            self.on_drained()
        else:
            self.trim()

    def trim(self) -> int:
        """Hand free heap pages back now; returns the RSS octets that went (0 when unknown)."""
        if self._libc is None:
            return 0
        before = self._rss()
        self._libc.malloc_trim(0)
        self._low = self.free_held()
        after = self._rss()
        gone = before - after if before is not None and after is not None else 0
        self.trims += 1
        self.trimmed += max(gone, 0)
        log.debug("heap trimmed: %d octets handed back", gone)
        return gone
