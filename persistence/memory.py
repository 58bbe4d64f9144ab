"""``MemoryStore``: the ``Store`` contract on an in-memory SQLite database, with the SQLite store's SQL.

Rules:
- One implementation of the schema: ``MemoryStore`` runs the ``engine`` functions (the same
  statements, transactions and reads as ``SQLiteStore``) on its own ``sqlite3.connect(":memory:")``
  connection. The batching, ids, coalescing and callbacks are ``batching.BatchingStore``'s.
- No thread: an in-memory database does no I/O, so each commit and read runs at once on the event
  loop's thread (a commit is still a task of its own, as for the SQLite store, so writes queued in
  one loop turn share a batch). SQLite refuses what it cannot hold (an integer over 64 bits, an
  unbindable type) exactly as on disk, so a poison op is split off the same way.
- It works without ``open()``; the data lives as long as the object: closing and reopening it is a
  "restart" that keeps everything, and reopening tidies the message ranges and reloads the id
  counters as the SQLite store's open does.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from . import engine, sqlite_schema
from .batching import BatchingStore
from .engine import Op
from .store import StoreError

T = TypeVar("T")


class MemoryStore(BatchingStore):
    """The ``Store`` contract on an in-memory SQLite database: the same SQL (``engine``), batching,
    ids, coalescing and callbacks as ``SQLiteStore``, without a file or a thread.

    For broker tests and for running without persistence. Data lives as long as the object: closing
    and reopening it is a "restart" that keeps everything (and, as the SQLite store's open, drops
    orphaned messages and reloads the id counters). It works without ``open()``.

    Args:
        keep_messages: False keeps no message rows (persistence off: ids and callbacks still work,
            SQLite still refuses values it cannot hold, ``iter_messages`` yields nothing). Fixed
            at construction.

    Attributes:
        fail_batches: test hook; the next ``fail_batches`` batches fail (nothing applied, ok=False).
    """

    _needs_open = False

    def __init__(self, keep_messages: bool = True) -> None:
        super().__init__()
        self.keep_messages = keep_messages
        self.fail_batches = 0
        conn = _new_database()
        if not keep_messages:
            conn.execute(KEEP_NO_MESSAGES)
        self._conn = conn
        weakref.finalize(self, conn.close)  # the data lives exactly as long as the store

    # -- lifecycle ----------------------------------------------------------------------------
    async def open(self) -> None:
        """Bind to the running loop; reload the id counters as the SQLite store does."""
        self._loop = asyncio.get_running_loop()
        self._closed = False
        await self._settle()  # writes queued before open() keep their ids
        self._load_ids(*engine.load_counters(self._conn))

    async def close(self) -> None:
        """Commit what is queued; the data stays in this object (reopen to use it again)."""
        await self._drain()
        self._closed = True
        self._loop = None

    # -- the database -------------------------------------------------------------------------
    async def _sql(self, fn: Callable[..., T], *args: Any) -> T:
        return fn(self._conn, *args)  # no I/O: a call costs what its SQL costs, no thread hop

    async def _commit(self, ops: list[Op | None]) -> None:
        if self.fail_batches:
            self.fail_batches -= 1
            raise StoreError("simulated failure (MemoryStore.fail_batches)")
        await super()._commit(ops)

    async def stats(self) -> dict[str, int]:
        """``messages``, ``queues``, ``pending``, ``batches``, ``failed_batches``, ``bytes_on_disk`` (0)."""
        messages, queues = engine.read_counts(self._conn)
        return {
            "messages": messages,
            "queues": queues,
            "pending": self.pending,
            "batches": self.batches,
            "failed_batches": self.failed_batches,
            "bytes_on_disk": 0,
        }


MEMORY = Path(":memory:")  # how the in-memory database is named in messages
# keep_messages=False: SQLite binds (and so checks) each message row, then drops it
KEEP_NO_MESSAGES = (
    "CREATE TEMP TRIGGER keep_no_messages BEFORE INSERT ON main.messages BEGIN SELECT RAISE(IGNORE); END"
)


_empty: sqlite3.Connection | None = None  # the schema without rows, made once per process
_empty_lock = threading.Lock()


def _new_database() -> sqlite3.Connection:
    """A new in-memory database holding the schema at ``SCHEMA_VERSION``, without rows.

    The first call runs ``sqlite_schema.migrate``; every store copies the result's pages (``backup``: 5x
    faster than running the migrations again). The connection is used by one thread at a time, the
    event loop's, which need not be the one constructing the store.
    """
    global _empty
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    with _empty_lock:
        if _empty is None:
            _empty = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            sqlite_schema.migrate(_empty, MEMORY, 0)
        _empty.backup(conn)
    return conn
