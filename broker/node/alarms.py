"""The memory and disk alarms (RabbitMQ's ``vm_memory_high_watermark`` and ``disk_free_limit``).

Rules:
- Once a second (``start``) the process RSS is compared with the memory limit and the free space
  where the data directory is with the disk limit; either over its limit raises its alarm, and
  ``on_change`` is called with the reason publishers are blocked for (``reason``: ``low on disk``
  first, then ``low on memory``; None once both are clear). The node blocks its publishing
  connections from it (``ConnectionRegistry.block``).
- The same tick trims the heap after a backlog drained (``HeapTrimmer``), and asks the store to give
  back its page cache; the event loop's lag monitor starts and stops with the alarms.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Callable

from ottermq.persistence.store import Store

from ..config import Settings
from .heap import HeapTrimmer
from .looplag import LoopMonitor

log = logging.getLogger(__name__)


class Alarms:
    """A process's resource alarms (see the module rules).

    Args:
        settings: the watermarks and the data directory.
        loop: the running event loop.
        store: whose page cache is released after a backlog drained.
        on_change: called with ``reason`` whenever an alarm goes on or off.
    """

    def __init__(
        self,
        settings: Settings,
        loop: asyncio.AbstractEventLoop,
        store: Store,
        on_change: Callable[[str | None], None],
    ) -> None:
        self.settings = settings
        self.loop = loop
        self.store = store
        self.on_change = on_change
        self.memory_limit = memory_limit(settings.memory_high_watermark)
        self.memory = False  # the memory alarm is on
        self.disk_free_limit = disk_limit(settings)
        self.disk = False  # the disk alarm is on
        self.disk_free_probe: Callable[[], int | None] = self.disk_free  # tests put a fake one here
        # the event loop's lag histogram and slow-turn WARNING (broker/node/looplag.py)
        self.loop_lag = LoopMonitor(loop, settings.loop_lag_warning)
        # hands freed heap pages back after a backlog drains (and the store's page cache, see _drained)
        self.heap = HeapTrimmer(process_rss, on_drained=self._drained)
        self._timer: asyncio.TimerHandle | None = None
        self._release: asyncio.Task[None] | None = None

    @property
    def reason(self) -> str | None:
        """Why publishers are blocked (``connection.blocked``'s reason), None when they are not."""
        if self.disk:
            return "low on disk"
        return "low on memory" if self.memory else None

    def start(self) -> None:
        """Start the memory and disk checks (every second) and the event loop's lag monitor."""
        self.check_memory()
        self.loop_lag.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.loop_lag.stop()

    async def close(self) -> None:
        """Wait for a page-cache release in flight (before the store closes)."""
        if self._release is not None:
            await asyncio.gather(self._release, return_exceptions=True)

    def set_memory(self, on: bool) -> None:
        """Raise or clear the memory alarm (as RabbitMQ's memory alarm blocks publishers)."""
        self.memory = on
        self.on_change(self.reason)

    def check_memory(self) -> None:
        """Raise or clear the memory alarm from the process RSS; re-arms itself every second."""
        used = process_rss()
        if used is not None:
            if not self.memory and used > self.memory_limit:
                log.warning(
                    "memory alarm: %d bytes used, limit %d; blocking publishers", used, self.memory_limit
                )
                self.set_memory(True)
            elif self.memory and used <= self.memory_limit:
                log.info("memory alarm cleared: %d bytes used", used)
                self.set_memory(False)
        self.check_disk()
        self.heap.tick()
        self._timer = self.loop.call_later(1.0, self.check_memory)

    def disk_free(self) -> int | None:
        """Free bytes where the data directory is (None when it cannot be read)."""
        try:
            return shutil.disk_usage(self.settings.data_dir).free
        except OSError:
            return None

    def check_disk(self) -> None:
        """Raise or clear the disk alarm from the free space where the data directory is (RabbitMQ's
        disk_free_limit); the memory timer calls it every second."""
        limit = self.disk_free_limit
        free = self.disk_free_probe() if limit else None
        if free is None:
            return
        if not self.disk and free < limit:
            log.warning(
                "disk alarm: %d bytes free on %s, limit %d; blocking publishers",
                free,
                self.settings.data_dir,
                limit,
            )
            self.disk = True
            self.on_change(self.reason)
        elif self.disk and free >= limit:
            log.info("disk alarm cleared: %d bytes free", free)
            self.disk = False
            self.on_change(self.reason)

    def _drained(self) -> None:
        """A backlog drained (``HeapTrimmer``): trim now, and again once the store gave back its cache."""
        self.heap.trim()
        if self._release is None or self._release.done():
            self._release = self.loop.create_task(self._release_store_memory())

    async def _release_store_memory(self) -> None:
        try:
            await self.store.release_memory()
        except Exception as exc:  # a closed store, an I/O error: memory only, nothing to undo
            log.debug("store memory not released: %s", exc)
            return
        self.heap.trim()


def memory_limit(watermark: float) -> int:
    """Bytes allowed before the memory alarm: a fraction of physical RAM, or bytes if > 1."""
    if watermark > 1:
        return int(watermark)
    return int(physical_memory() * watermark)


def disk_limit(settings: Settings) -> int:
    """Free bytes the disk alarm keeps: ``disk_free_limit_relative`` x RAM, else ``disk_free_limit``."""
    if settings.disk_free_limit_relative is not None:
        return int(physical_memory() * settings.disk_free_limit_relative)
    return settings.disk_free_limit


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 * 1024**3


def process_rss() -> int | None:
    """Resident set size of this process in bytes (None where /proc is unavailable)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
