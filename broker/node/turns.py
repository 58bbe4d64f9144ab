"""Slices of work that take turns on the event loop (the dead-letter tools' budget for the loop).

Rules:
- Work whose cost grows with what a client controls (a queue scanned, messages moved) runs in
  synchronous slices of at most ``budget`` seconds; a slice holds the turn, and only one slice runs per
  event-loop iteration however many tasks want one, so the loop polls its sockets between two slices.
- The turn is released on the next iteration (``call_soon``): a bare ``sleep(0)`` between slices would
  let every waiting task run one slice in the same iteration, and N tasks would hold the loop N slices.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

SLICE_SECONDS = 0.005  # the longest slice between two polls of the sockets


class Turns:
    """Slices of dead-letter work take turns: one slice (of at most ``budget`` seconds) per event-loop
    iteration, however many tasks want one, so the loop polls its sockets between two of them. A
    slice holds the turn until the next iteration (the release is a ``call_soon``): a bare
    ``sleep(0)`` between slices would let every waiting task run one slice in the same iteration."""

    def __init__(self, budget: float = SLICE_SECONDS) -> None:
        self.budget = budget
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[float]:
        """Hold the turn for one synchronous slice; yields its ``time.perf_counter()`` deadline."""
        await self._lock.acquire()
        try:
            yield time.perf_counter() + self.budget
        finally:
            asyncio.get_running_loop().call_soon(self._lock.release)

    async def each(self, items: Iterable[T], fn: Callable[[T], object]) -> None:
        """Call ``fn`` on every item, as many per turn as fit in the budget (``items`` may be a
        lazy iterator: a queue's scan reads its paged messages back as it goes)."""
        it = iter(items)
        done = False
        while not done:
            async with self.turn() as deadline:
                i = 0
                for item in it:
                    fn(item)
                    i += 1
                    if not i & 63 and time.perf_counter() > deadline:
                        break
                else:
                    done = True
