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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

THRESHOLD = 32 << 20  # free octets held by malloc before a trim is worth it
EVERY = 5  # ticks (seconds) between looks


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
        threshold, every: see :data:`THRESHOLD` and :data:`EVERY`.
    """

    def __init__(self, rss: Callable[[], int | None], threshold: int = THRESHOLD, every: int = EVERY) -> None:
        self._libc = _glibc()
        self._rss = rss
        self.threshold = threshold
        self.every = every
        self._ticks = 0
        self._low = 0  # the least free octets seen since the last trim
        self.trims = 0  # how many times memory was handed back
        self.trimmed = 0  # octets of RSS the trims gave back, in total

    @property
    def enabled(self) -> bool:
        return self._libc is not None

    def free_held(self) -> int:
        """Octets glibc holds free in its arenas (0 when unknown)."""
        return 0 if self._libc is None else int(self._libc.mallinfo2().fordblks)

    def tick(self) -> None:
        self._ticks += 1
        if self._libc is None or self._ticks % self.every:
            return
        free = self.free_held()
        if free - self._low >= self.threshold:
            self.trim()
        else:
            self._low = min(self._low, free)

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
