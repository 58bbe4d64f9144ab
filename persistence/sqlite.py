"""``SQLiteStore``: the durable store, one SQLite file in WAL mode behind one aiosqlite connection.

Rules:
- Group commit (see ``memory.BatchingStore``): each batch is ONE transaction run by ONE aiosqlite
  call: ``_write_batch`` on aiosqlite's worker thread does ``BEGIN IMMEDIATE``, one
  ``executemany`` per run of consecutive ops with the same statement (so queue order is kept:
  a queue deleted and redeclared, or a dead-letter move, lands exactly as queued), ``COMMIT``.
  Never one aiosqlite call per message: each call is a thread round trip.
- Durability (``synchronous``, from ``OTTERMQ_SYNC``), in WAL mode:
  ``FULL`` (default): the WAL is fsynced at every commit, so a confirmed message survives a power
  loss or OS crash (RabbitMQ's promise for confirms). ``NORMAL``: the WAL is fsynced only at
  checkpoints; a commit survives the broker being killed (the OS has the data) but the last
  commits before a power loss or OS crash may be rolled back. The file is never corrupted either
  way. ``NORMAL`` saves one fsync per batch.
- The file is checked before anything is written (``schema.check_header``/``schema.verify``): a
  newer schema, a non-SQLite or corrupt file raises ``StoreError`` and the file is left untouched.
- ``<file>.lock`` (``flock``) keeps a second broker out of the same data file; external readers
  (``sqlite3`` CLI, backups) still work while the broker runs.
- Reads (``load_definitions``, ``iter_messages``, ``stats``) run on the same connection, between
  batches. ``load_definitions`` and ``iter_messages`` first wait for the writes queued before them.

aiosqlite: ``Connection._execute(fn, *args)`` (run ``fn`` on the connection's worker thread),
``Connection._conn`` (the ``sqlite3.Connection``) and ``Connection._thread`` (made a daemon) are
private but have been stable for years;
this module is written against aiosqlite >=0.20,<0.23 (0.22.1 tested). Check ``_call`` when
upgrading past that range.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from itertools import chain, groupby
from operator import itemgetter
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar, cast

import aiosqlite

from . import schema
from .memory import BatchingStore, Op
from .store import Definitions, MessageRecord, StoreError

if sys.platform != "win32":
    import fcntl

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger(__name__)

if not all(hasattr(aiosqlite.Connection, name) for name in ("_execute", "_conn")):  # pragma: no cover
    raise ImportError(
        f"ottermq.persistence.sqlite needs aiosqlite's Connection._execute and ._conn (aiosqlite "
        f">=0.20,<0.23); aiosqlite {getattr(aiosqlite, '__version__', '?')} lacks them"
    )

T = TypeVar("T")

DB_FILENAME = "ottermq.db"  # used when the store is given a directory
SYNCHRONOUS = ("FULL", "NORMAL", "EXTRA")
LOCK_TIMEOUT = 1.0  # seconds SQLite waits for a lock held by an external reader or writer
CACHE_KIB = 16384
JOURNAL_SIZE_LIMIT = 64 << 20  # the WAL is truncated to this after a checkpoint
MAINTAIN_EVERY = 128  # batches between free-space checks
VACUUM_MIN_FREE_PAGES = 2048  # give back free pages once there are this many and they are >1/4 of the file
VACUUM_STEP_PAGES = 2048


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
        self._db: aiosqlite.Connection | None = None
        self._raw: sqlite3.Connection | None = None
        self._lock: IO[bytes] | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    async def open(self) -> None:
        """Open (creating the file and its directory if needed), check, migrate, load id counters.

        Raises:
            StoreError: newer schema, corrupt or non-SQLite file, file in use, I/O error.
        """
        if self._db is not None:
            raise StoreError(f"{self.path} is already open")
        if self.path.is_dir():
            self.path = self.path / DB_FILENAME
        path = self.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create data dir {path.parent}: {exc}") from exc
        schema.check_header(path)
        self._lock = _lock(path)
        db: aiosqlite.Connection | None = None
        try:
            db = aiosqlite.connect(path, isolation_level=None, timeout=LOCK_TIMEOUT)
            # A store never closed (a crash on the way out) must not keep the process alive; dying
            # mid-commit is safe, as with kill -9 (SQLite rolls the transaction back).
            db._thread.daemon = True
            await db
            queues, last_seq = await _call(db, _open_database, db._conn, path, self.synchronous)
        except BaseException as exc:
            if db is not None:
                await db.close()
            self._unlock()
            if isinstance(exc, sqlite3.Error | OSError):
                raise StoreError(f"cannot open data file {path}: {exc}") from exc
            raise
        self._db, self._raw = db, db._conn
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._load_ids(queues, last_seq)
        log.info("opened %s (%d durable queues, synchronous=%s)", path, len(queues), self.synchronous)

    async def close(self) -> None:
        """Commit what is queued (failures are logged), then close the file and release the lock."""
        db = self._db
        if db is None:
            return
        await self._drain()
        self._closed = True
        try:
            await db.close()  # the last connection checkpoints and removes the WAL
        except sqlite3.Error as exc:
            log.error("closing %s: %s", self.path, exc)
        finally:
            self._db = self._raw = self._loop = None
            self._unlock()

    def _unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None

    def _connection(self) -> tuple[aiosqlite.Connection, sqlite3.Connection]:
        if self._db is None or self._raw is None:
            raise StoreError("the store is not open")
        return self._db, self._raw

    # -- commit -----------------------------------------------------------------------------------
    async def _commit(self, ops: list[Op | None]) -> None:
        db, raw = self._connection()
        await _call(db, _write_batch, raw, ops, self.batches % MAINTAIN_EVERY == MAINTAIN_EVERY - 1)

    # -- reads ----------------------------------------------------------------------------------
    async def load_definitions(self) -> Definitions:
        """Every committed vhost, user, permission, exchange, queue and binding (after the writes
        queued so far)."""
        await self._settle()
        db, raw = self._connection()
        return await _call(db, _read_definitions, raw)

    async def iter_messages(self, queue_id: int, chunk: int = 10000) -> AsyncIterator[list[MessageRecord]]:
        """The queue's committed messages in seq order, ``chunk`` rows at a time.

        Each chunk is one keyset query (``id > last id``) on the queue's rowid range, so no
        statement stays open between chunks and writes may run in between.
        """
        await self._settle()
        low, high = schema.queue_range(queue_id)
        after = low
        while True:
            db, raw = self._connection()
            records = await _call(db, _read_messages, raw, queue_id, after, high, chunk)
            if records:
                yield records
            if len(records) < chunk:
                return
            after = records[-1].id

    async def stats(self) -> dict[str, int]:
        """``messages``, ``queues``, ``bytes_on_disk`` (db + WAL), ``db_bytes``, ``wal_bytes``,
        ``free_bytes`` (reusable pages in the file), ``pending``, ``batches``, ``failed_batches``."""
        db, raw = self._connection()
        messages, queues, free_pages, page_size = await _call(db, _read_stats, raw)
        db_bytes = _size(self.path)
        wal_bytes = _size(self.path.with_name(self.path.name + "-wal"))
        return {
            "messages": messages,
            "queues": queues,
            "bytes_on_disk": db_bytes + wal_bytes,
            "db_bytes": db_bytes,
            "wal_bytes": wal_bytes,
            "free_bytes": free_pages * page_size,
            "pending": self.pending,
            "batches": self.batches,
            "failed_batches": self.failed_batches,
        }

    async def checkpoint(self) -> None:
        """Flush, then copy the WAL into the database file and truncate the WAL (benchmarks, backups).

        Raises:
            StoreError: the flush failed.
        """
        await self.flush()
        db, raw = self._connection()
        await _call(db, _checkpoint, raw)


if TYPE_CHECKING:

    def _conforms(store: SQLiteStore) -> Store:  # mypy checks SQLiteStore against the Protocol
        return store


# -- worker-thread functions (run by aiosqlite, one call each) ---------------------------------------
async def _call(db: aiosqlite.Connection, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` on the connection's worker thread: one round trip (aiosqlite private API)."""
    return cast(T, await db._execute(fn, *args))  # type: ignore[no-untyped-call]


def _open_database(
    conn: sqlite3.Connection, path: Path, synchronous: str
) -> tuple[schema.QueueIds, dict[int, int]]:
    version = schema.verify(conn, path)  # read-only: nothing is written before this passes
    if version == 0:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # only possible before the first table
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise StoreError(f"data file {path} cannot use WAL mode (journal_mode stays {mode})")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
    schema.migrate(conn, path, version)
    return schema.load_ids(conn)


def _executemany(conn: sqlite3.Connection, statement: str, params: list[tuple[Any, ...]]) -> None:
    conn.executemany(statement, params)


def _write_batch(conn: sqlite3.Connection, ops: list[Op | None], maintain: bool) -> None:
    """One batch, one transaction: consecutive ops with the same statement share an executemany
    (message inserts and deletes ``MULTI_ROWS`` rows per statement)."""
    schema.rollback(conn)  # a transaction left open by a failed rollback must not wedge the store
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement, group in groupby(filter(None, ops), key=itemgetter(0)):
            params = [p for _, p in group]
            multi = schema.MULTI_ROW.get(statement)
            if multi is not None and len(params) >= schema.MULTI_ROWS:
                k = schema.MULTI_ROWS
                full = len(params) - len(params) % k
                rows = [tuple(chain.from_iterable(params[i:i + k])) for i in range(0, full, k)]
                _executemany(conn, multi, rows)
                params = params[full:]
            if params:
                _executemany(conn, statement, params)
        conn.execute("COMMIT")
    except BaseException:
        schema.rollback(conn)
        raise
    if maintain:
        _give_back_free_pages(conn)


def _give_back_free_pages(conn: sqlite3.Connection) -> None:
    """After a queue drained, shrink the file a step at a time (``auto_vacuum = INCREMENTAL``)."""
    try:
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        if free >= VACUUM_MIN_FREE_PAGES and free * 4 > pages:
            # one page per sqlite3_step: execute() stops after the first, executescript() runs to the end
            conn.executescript(f"PRAGMA incremental_vacuum({VACUUM_STEP_PAGES});")
    except sqlite3.Error as exc:
        log.warning("incremental vacuum failed: %s", exc)


def _read_definitions(conn: sqlite3.Connection) -> Definitions:
    return schema.definitions(*(
        conn.execute(query).fetchall()
        for query in (
            schema.SELECT_VHOSTS, schema.SELECT_USERS, schema.SELECT_PERMISSIONS,
            schema.SELECT_EXCHANGES, schema.SELECT_QUEUES, schema.SELECT_BINDINGS,
        )
    ))


def _read_messages(
    conn: sqlite3.Connection, queue_id: int, after: int, high: int, chunk: int
) -> list[MessageRecord]:
    rows = conn.execute(schema.SELECT_MESSAGES, (after, high, chunk)).fetchall()
    return schema.message_records(queue_id, rows)


def _read_stats(conn: sqlite3.Connection) -> tuple[int, int, int, int]:
    one: Callable[[str], int] = lambda sql: int(conn.execute(sql).fetchone()[0])  # noqa: E731
    return (
        one("SELECT count(*) FROM messages"), one("SELECT count(*) FROM queues"),
        one("PRAGMA freelist_count"), one("PRAGMA page_size"),
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
