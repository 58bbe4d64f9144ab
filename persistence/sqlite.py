"""``SQLiteStore``: the durable store, one SQLite file in WAL mode behind one connection on one thread.

Rules:
- One connection: a plain ``sqlite3`` connection, opened, used and closed on the store's own
  worker thread (``worker.Worker``, named ``ottermq-sqlite``); every write and every read that
  must see the store's own writes runs there, one ``Worker.call`` each (``SQLiteStore._call``),
  in submission order.
- Group commit (see ``group_commit.GroupCommit``): each batch is ONE transaction run by ONE worker
  call (``engine.write_batch``: ``BEGIN IMMEDIATE``, one ``executemany`` per run of consecutive ops
  with the same statement, ``COMMIT``). Never one call per message: each call is a thread round
  trip. The SQL (writes, reads, schema) is ``engine``'s, the very code ``MemoryStore`` runs.
- ``after_commit`` callbacks fire on the event loop once their batch's worker call has
  returned (the transaction is committed or rolled back), in registration order; a failed batch
  (``sqlite3.Error`` such as "database or disk is full") is rolled back, logged and reported to
  its callbacks as ``ok=False`` (see ``group_commit.GroupCommit._run``), and later batches go on.
- Durability (``synchronous``, from ``OTTERMQ_SYNC``), in WAL mode:
  ``FULL`` (default): the WAL is fsynced at every commit, so a confirmed message survives a power
  loss or OS crash (RabbitMQ's promise for confirms). ``NORMAL``: the WAL is fsynced only at
  checkpoints; a commit survives the broker being killed (the OS has the data) but the last
  commits before a power loss or OS crash may be rolled back. The file is never corrupted either
  way. ``NORMAL`` saves one fsync per batch.
- The file is checked before anything is written (``sqlite_schema.check_header`` and ``verify``):
  a newer schema, a non-SQLite or corrupt file raises ``StoreError`` and the file is left untouched.
- ``<file>.lock`` (``flock``) keeps a second broker out of the same data file; external readers
  (``sqlite3`` CLI, backups) still work while the broker runs.
- Reads (``load_definitions``, ``iter_messages``, ...: ``batching.BatchingStore``'s) run on the
  store's connection, between batches, after waiting for the writes queued before them. ``stats``
  only reports committed state, so it needs no ordering with the writes: it reads through a
  short-lived read-only connection (``schema``'s count statements, as ``MemoryStore``'s) and its
  ``count(*)`` scan never holds up a commit.
- ``close`` commits what is queued, closes the connection on its thread (the last connection
  checkpoints and removes the WAL), then stops the worker and joins its thread. A store never
  closed does not keep the process alive (the thread is a daemon); dying mid-commit is safe, as
  with ``kill -9`` (SQLite rolls the transaction back).

aiosqlite (public API only): ``stats`` uses ``aiosqlite.connect`` in ``async with`` on a
read-only URI, with ``execute_fetchall``. The writer is not an aiosqlite connection because
aiosqlite's public API runs one call per statement (``BEGIN``, each ``executemany``, ``COMMIT``:
several thread round trips per batch instead of one) and its worker thread is not a daemon, so a
long-lived connection never closed would hang interpreter exit; a connection scoped to one
``async with`` is always closed and its thread stopped. Written against aiosqlite >=0.20,<0.23
(0.22.1 tested).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import aiosqlite

from . import engine, schema, sqlite_schema
from .batching import BatchingStore
from .engine import Op
from .store import StoreError
from .worker import Worker

if sys.platform != "win32":
    import fcntl

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger(__name__)

T = TypeVar("T")

DB_FILENAME = "ottermq.db"  # used when the store is given a directory
SYNCHRONOUS = ("FULL", "NORMAL", "EXTRA")
LOCK_TIMEOUT = 1.0  # seconds SQLite waits for a lock held by an external reader or writer
CACHE_KIB = 16384
JOURNAL_SIZE_LIMIT = 64 << 20  # the WAL is truncated to this after a checkpoint
MAINTAIN_EVERY = 128  # batches between free-space checks
VACUUM_MIN_FREE_PAGES = 2048  # give back free pages once there are this many and they are >1/4 of the file
VACUUM_STEP_PAGES = 2048
THREAD_NAME = "ottermq-sqlite"
FREELIST_COUNT = "PRAGMA freelist_count"


class SQLiteStore(BatchingStore):
    """The durable ``Store``: SQLite in WAL mode, batched write-behind (group commit).

    Args:
        path: the database file, or an existing directory (the file is then ``<dir>/ottermq.db``;
            ``path`` is updated at ``open``).
        synchronous: ``"FULL"`` (default: a commit is on disk even across a power loss) or
            ``"NORMAL"`` (faster: a commit survives a broker crash, not an OS crash); see the
            module rules.

    Raises:
        ValueError: unknown ``synchronous`` value.
    """

    def __init__(self, path: Path, synchronous: str = "FULL") -> None:
        super().__init__()
        self.path = Path(path)
        self.synchronous = synchronous.upper()
        if self.synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS)}, not {synchronous!r}")
        self._worker: Worker | None = None
        self._conn: sqlite3.Connection | None = None  # used on the worker's thread only
        self._lock: IO[bytes] | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    async def open(self) -> None:
        """Open (creating the file and its directory if needed), check, migrate, load id counters.

        Raises:
            StoreError: newer schema, corrupt or non-SQLite file, file in use, I/O error.
        """
        if self._worker is not None:
            raise StoreError(f"{self.path} is already open")
        if self.path.is_dir():
            self.path = self.path / DB_FILENAME
        path = self.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create data dir {path.parent}: {exc}") from exc
        sqlite_schema.check_header(path)
        self._lock = _lock(path)
        worker = Worker(THREAD_NAME)
        conn: sqlite3.Connection | None = None
        try:
            conn = await worker.call(_connect, path)
            counters = await worker.call(_open_database, conn, path, self.synchronous)
        except BaseException as exc:
            if conn is not None:
                worker.call(conn.close)  # runs before stop() returns
            worker.stop()
            self._unlock()
            if isinstance(exc, sqlite3.Error | OSError):
                raise StoreError(f"cannot open data file {path}: {exc}") from exc
            raise
        self._worker, self._conn = worker, conn
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._load_ids(*counters)
        log.info("opened %s (%d durable queues, synchronous=%s)", path, len(counters[0]), self.synchronous)

    async def close(self) -> None:
        """Commit what is queued (failures are logged), then close the file and release the lock."""
        worker, conn = self._worker, self._conn
        if worker is None or conn is None:
            return
        await self._drain()
        self._closed = True
        try:
            await self._call(conn.close)  # the last connection checkpoints and removes the WAL
        except sqlite3.Error as exc:
            log.error("closing %s: %s", self.path, exc)
        finally:
            self._worker = self._conn = self._loop = None
            worker.stop()  # nothing is queued: this joins the thread at once
            self._unlock()

    def _unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None

    def _connection(self) -> sqlite3.Connection:
        """The store's ``sqlite3`` connection, to be used only in functions given to ``_call``.

        Raises:
            StoreError: the store is not open.
        """
        if self._conn is None:
            raise StoreError("the store is not open")
        return self._conn

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the store's worker thread: one round trip, in submission order.

        Raises:
            StoreError: the store is not open; whatever ``fn`` raises.
        """
        if self._worker is None:
            raise StoreError("the store is not open")
        return await self._worker.call(fn, *args)

    async def _sql(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(connection, *args)`` on the worker thread: one round trip, in submission order.

        Raises:
            StoreError: the store is not open; whatever ``fn`` raises.
        """
        return await self._call(fn, self._connection(), *args)

    async def _commit(self, ops: list[Op | None]) -> None:
        maintain = self.batches % MAINTAIN_EVERY == MAINTAIN_EVERY - 1
        await self._call(_write_batch, self._connection(), ops, maintain)

    async def stats(self) -> dict[str, int]:
        """``messages``, ``queues``, ``bytes_on_disk`` (db + WAL), ``db_bytes``, ``wal_bytes``,
        ``free_bytes`` (reusable pages in the file), ``pending``, ``batches``, ``failed_batches``.

        The counters are those of the moment of the call; the rest is the committed state a moment later.

        Raises:
            StoreError: the store is not open.
        """
        self._connection()  # raises when the store is not open
        counters = {"pending": self.pending, "batches": self.batches, "failed_batches": self.failed_batches}
        messages, queues, free_pages, page_size = await _read_stats(self.path)
        db_bytes = _size(self.path)
        wal_bytes = _size(self.path.with_name(self.path.name + "-wal"))
        return {
            "messages": messages,
            "queues": queues,
            "bytes_on_disk": db_bytes + wal_bytes,
            "db_bytes": db_bytes,
            "wal_bytes": wal_bytes,
            "free_bytes": free_pages * page_size,
            **counters,
        }

    async def checkpoint(self) -> None:
        """Flush, then copy the WAL into the database file and truncate the WAL (benchmarks, backups).

        Raises:
            StoreError: the flush failed.
        """
        await self.flush()
        await self._sql(_checkpoint)


if TYPE_CHECKING:

    def _conforms(store: SQLiteStore) -> Store:  # mypy checks SQLiteStore against the Protocol
        return store


# -- worker-thread functions (run by SQLiteStore._call, one call each) ---------------------------------
def _connect(path: Path) -> sqlite3.Connection:
    # autocommit (isolation_level=None): engine issues BEGIN IMMEDIATE/COMMIT itself;
    # check_same_thread (the default) guards the one-thread rule
    return sqlite3.connect(path, isolation_level=None, timeout=LOCK_TIMEOUT)


def _open_database(
    conn: sqlite3.Connection, path: Path, synchronous: str
) -> tuple[schema.QueueIds, dict[int, int], int]:
    version = sqlite_schema.verify(conn, path)  # read-only: nothing is written before this passes
    if version == 0:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # only possible before the first table
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise StoreError(f"data file {path} cannot use WAL mode (journal_mode stays {mode})")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
    sqlite_schema.migrate(conn, path, version)
    return engine.load_counters(conn)


def _write_batch(conn: sqlite3.Connection, ops: list[Op | None], maintain: bool) -> None:
    """``engine.write_batch``, then (every ``MAINTAIN_EVERY`` batches) give free pages back."""
    engine.write_batch(conn, ops)
    if maintain:
        _give_back_free_pages(conn)


def _give_back_free_pages(conn: sqlite3.Connection) -> None:
    """After a queue drained, shrink the file a step at a time (``auto_vacuum = INCREMENTAL``)."""
    try:
        free = conn.execute(FREELIST_COUNT).fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        if free >= VACUUM_MIN_FREE_PAGES and free * 4 > pages:
            # one page per sqlite3_step: execute() stops after the first, executescript() runs to the end
            conn.executescript(f"PRAGMA incremental_vacuum({VACUUM_STEP_PAGES});")
    except sqlite3.Error as exc:
        log.warning("incremental vacuum failed: %s", exc)


async def _read_stats(path: Path) -> tuple[int, int, int, int]:
    """Counts and page numbers of the committed state, on a read-only aiosqlite connection of its own
    (a WAL reader: it neither waits for nor holds up the store's commits)."""
    uri = path.resolve().as_uri() + "?mode=ro"
    async with aiosqlite.connect(uri, uri=True, timeout=LOCK_TIMEOUT) as db:

        async def one(sql: str) -> int:
            return int(list(await db.execute_fetchall(sql))[0][0])

        return (
            await one(schema.COUNT_MESSAGES),
            await one(schema.COUNT_QUEUES),
            await one(FREELIST_COUNT),
            await one("PRAGMA page_size"),
        )


def _checkpoint(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


# -- helpers ------------------------------------------------------------------------------------------
def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _lock(path: Path) -> IO[bytes] | None:
    """Hold ``<file>.lock`` with ``flock`` for the store's lifetime (POSIX only).

    Raises:
        StoreError: another process (or store) holds it.
    """
    if sys.platform == "win32":
        return None
    lock_path = path.with_name(path.name + ".lock")
    try:
        f = lock_path.open("ab")
    except OSError as exc:
        raise StoreError(f"cannot create lock file {lock_path}: {exc}") from exc
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        f.close()
        raise StoreError(f"data dir {path} is in use by another OtterMQ ({lock_path} is locked)") from exc
    return f
