"""``PostgresStore``: the durable store on PostgreSQL (asyncpg), for brokers that outgrow one disk.

Rules:
- The same store as SQLite's: ``batching.BatchingStore`` queues the same ``(statement, params)`` ops
  (``schema``'s statements), coalesces them, allocates the ids and fires the commit callbacks; this
  class only runs them on PostgreSQL, in its dialect (``postgres_sql.STATEMENTS``). A confirm goes out
  after the batch's ``COMMIT`` returned, so it is as durable as the server's ``synchronous_commit``
  and ``synchronous_standby_names`` make a commit (see docs/postgresql.md).
- One batch, one transaction, few round trips: ``BEGIN`` (with the fence check, below) is one, each
  run of consecutive ops with the same statement is one (a run of message inserts is one binary
  ``COPY``; a run of message deletes one ``DELETE ... = ANY($1)``; any other run one pipelined
  ``executemany``), ``COMMIT`` is one. Never a round trip per message.
- Fencing: a store given a ``Lease`` begins every transaction with ``ottermq_fence(epoch)``
  (``postgres_sql``). When another broker took the leadership over, that raises, the batch is rolled
  back and reported failed (no confirm), the store refuses every later write (``StoreFenced``) and
  the lease is told (``Lease.fenced``), which stops the broker. Two actives can never both commit.
- Text holds what SQLite's holds: the NUL character, which PostgreSQL's text refuses, is written
  escaped and read back as it was (``postgres_text``).
- A batch that fails for a value (``DATA_ERRORS``: an integer over 64 bits, a constraint) is split,
  as on SQLite (``_commit_each``: one savepoint per op). A batch that fails because the server or
  the connection did (``IO_ERRORS``) goes back to the front of the queue (``BatchingStore``) and is
  tried again once the store has reconnected.
- Every database call has a deadline (``timeout``): a commit, a read or ``stats`` that gets no
  answer in time (a silent partition, a hung server) drops the connection (``terminate``), which
  fails the call with an I/O error; nothing waits on the database forever.
- Confirms wait through an outage (``_confirms_wait``): a batch that fails for an I/O reason is not
  reported failed; it is tried again, alone, once the store has reconnected, until it commits, the
  store is fenced or abandoned (``abandon``: the lease is lost) or closing. Before each new try the
  commit token (``postgres_sql.begin_batch``) says whether the try before committed after all (its
  ``COMMIT`` reached the server but the answer did not come back): then it is not written again.
  So a nack means "not stored": a batch that may have committed is never nacked; when the broker
  gives it up (fenced, abandoned, closing) its callbacks are withheld, and its clients see their
  connection close without an answer (publish again: at-least-once).
- One connection, used by one operation at a time (``_lock``): commits, reads and ``stats`` take
  turns. Reads (``BatchingStore``'s, by the ``engine`` function they name) wait for the writes queued
  before them, as on SQLite.
- The tables live in one PostgreSQL schema (``OTTERMQ_POSTGRES_SCHEMA``, created if missing), so
  several brokers (or worker processes, or tests) can share one database; ``open`` creates and
  migrates it and loads the id counters as the SQLite store's open does (``postgres_conn``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from itertools import groupby
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from . import engine
from . import postgres_sql as pg
from . import schema as s
from .batching import BatchingStore
from .engine import Op
from .postgres_conn import (
    CONNECT_TIMEOUT,
    DATA_ERRORS,
    IO_ERRORS,
    close_quietly,
    connect,
    describe,
    load_counters,
    migrate,
    require_driver,
    rollback,
    server,
)
from .postgres_text import ESC, params, text_out, unescape
from .store import (
    DedupRecord,
    Definitions,
    DelayedRecord,
    MessageRecord,
    MoveJobRecord,
    StoreError,
    StoreFenced,
)

try:
    import asyncpg
except ImportError:  # pragma: no cover - the postgresql extra is not installed
    asyncpg = None

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger(__name__)

T = TypeVar("T")

COPY_MIN = 8  # a run of at least this many message inserts is one COPY (fewer: executemany)
TIMEOUT = 30.0  # default deadline of one database call (the broker passes twice its lease, at least 5 s)


class Fence(Protocol):
    """What a fenced store checks (``lease.Lease``): the epoch its commits must still hold, and who
    to tell when one finds it moved on."""

    epoch: int

    def fenced(self, reason: str) -> None: ...


class PostgresStore(BatchingStore):
    """The durable ``Store`` on PostgreSQL: batched write-behind (group commit), fenced by a lease.

    Args:
        url: a libpq connection URL (``postgresql://user:pass@host:port/db?sslmode=...``); what it
            leaves out comes from the standard ``PG*`` variables (``PGHOST``, ``PGPASSWORD``,
            ``PGPASSFILE``, ...), as with ``psql``.
        schema: the PostgreSQL schema holding the tables (created if missing).
        password: overrides the URL's password (``OTTERMQ_POSTGRES_PASSWORD_FILE``).
        lease: the leadership every commit checks (None: no fencing, one broker per schema).
        application_name: how the connection shows in ``pg_stat_activity``.
        timeout: the deadline of each database call, in seconds (see the module rules).
    """

    _data_errors = DATA_ERRORS
    _io_errors = IO_ERRORS
    _confirms_wait = True

    def __init__(
        self,
        url: str | None,
        *,
        schema: str = "ottermq",
        password: str | None = None,
        lease: Fence | None = None,
        application_name: str = "ottermq",
        timeout: float = TIMEOUT,
    ) -> None:
        super().__init__()
        self.url = url
        self.schema = schema
        self.password = password
        self.lease = lease
        self.application_name = application_name
        self.timeout = timeout
        self._conn: Any = None  # asyncpg.Connection
        self._server = ""  # where the connection is, as the server said (``where``)
        self._lock = asyncio.Lock()
        self._fenced = False
        self._abandoned = ""  # why the store gave up (``abandon``)
        # the commit token: (epoch, batch) of the last try, and the next batch number (unique per
        # process and epoch: a restarted broker without a lease starts above its predecessor)
        self._tokens: set[tuple[int, int]] = set()  # the tries of the batch being written
        self._batch_no = time.time_ns()
        self.timeouts = 0  # database calls that passed their deadline
        self._reads: dict[Callable[..., Any], Callable[..., Awaitable[Any]]] = {
            engine.read_definitions: self._read_definitions,
            engine.read_messages: self._read_messages,
            engine.read_delayed: self._read_delayed,
            engine.read_dedup: self._read_dedup,
            engine.read_move_jobs: self._read_move_jobs,
            engine.shrink_memory: self._nothing,  # the server manages its own memory
        }

    # -- lifecycle ----------------------------------------------------------------------------
    async def open(self) -> None:
        """Connect, create or migrate the schema, tidy the message ranges, load the id counters.

        Raises:
            StoreError: no driver, the server is unreachable or refuses us, the schema belongs to
                another program or to a newer OtterMQ.
        """
        require_driver()
        if self._conn is not None:
            raise StoreError(f"the PostgreSQL store (schema {self.schema}) is already open")
        try:
            conn = await self._connect()
        except IO_ERRORS as exc:
            raise StoreError(f"cannot connect to PostgreSQL ({self.where()}): {exc}") from exc
        try:
            await migrate(conn, self.schema)
            counters = await load_counters(conn)
        except BaseException as exc:
            await conn.close()
            if isinstance(exc, StoreError):
                raise
            if isinstance(exc, IO_ERRORS):
                raise StoreError(f"cannot open the PostgreSQL store ({self.where()}): {exc}") from exc
            raise
        self._conn = conn
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._load_ids(*counters)
        log.info("opened PostgreSQL store %s (%d durable queues)", self.where(), len(counters[0]))

    def where(self) -> str:
        """The server, database and schema, without user or password (for messages): as the server
        reported itself once connected, before that as the URL names it."""
        return f"{self._server or describe(self.url)} schema {self.schema}"

    async def _connect(self) -> Any:
        timeout = min(CONNECT_TIMEOUT, self.timeout)
        conn = await connect(self.url, self.schema, self.password, self.application_name, timeout)
        try:
            self._server = await server(conn, timeout)
        except BaseException:
            conn.terminate()
            raise
        return conn

    async def close(self) -> None:
        """Commit what is queued (failures are logged), then close the connection."""
        if self._conn is None:
            return
        await self._drain()
        self._closed = True
        conn, self._conn, self._loop = self._conn, None, None
        await close_quietly(conn, 5)

    async def _connection(self) -> Any:
        """The open connection, reconnected if the server or the network dropped it.

        Raises:
            StoreError: the store is not open; IO_ERRORS: reconnecting failed.
        """
        conn = self._conn
        if conn is None or self._closed and not self._closing:
            raise StoreError("the store is not open")
        if self._abandoned:
            raise StoreFenced(f"the store gave up: {self._abandoned}")
        if conn.is_closed():
            log.warning("PostgreSQL connection lost (%s): reconnecting", self.where())
            conn = self._conn = await self._connect()
            log.info("PostgreSQL connection back (%s)", self.where())
        return conn

    # -- the database -------------------------------------------------------------------------
    @contextlib.contextmanager
    def _deadline(self, conn: Any, what: str) -> Iterator[None]:
        """Drop ``conn`` when what runs inside takes longer than ``timeout`` (the call then fails with
        an I/O error; ``terminate`` is immediate, a polite close would wait on the silent server)."""

        def expire() -> None:
            self.timeouts += 1
            log.warning(
                "PostgreSQL did not answer %s within %g s (%s): dropping the connection",
                what,
                self.timeout,
                self.where(),
            )
            conn.terminate()

        handle = asyncio.get_running_loop().call_later(self.timeout, expire)
        try:
            yield
        finally:
            handle.cancel()

    async def _sql(self, fn: Callable[..., T], *args: Any) -> T:
        read = self._reads[fn]
        async with self._lock:
            conn = await self._connection()
            with self._deadline(conn, "a read"):
                result: T = await read(conn, *args)
            return result

    async def _commit(self, ops: list[Op | None]) -> None:
        async with self._lock:
            conn = await self._begin()
            with self._deadline(conn, "a commit"):
                try:
                    await self._apply(conn, ops)
                    await conn.execute("COMMIT")
                except BaseException:
                    await rollback(conn)
                    raise

    def _new_batch(self) -> None:
        self._tokens.clear()

    async def _committed(self) -> bool:
        """Whether a try of the batch being written, which failed for an I/O reason, committed after
        all (the server's token is one of its tries'; only one try can have committed: the batch is
        not tried again before this answers). False when no try reached the server.

        Raises:
            IO_ERRORS: the server is still unreachable; StoreFenced: the store gave up.
        """
        if not self._tokens:
            return False
        async with self._lock:
            conn = await self._connection()
            with self._deadline(conn, "the commit token"):
                row = await conn.fetchrow(pg.SELECT_COMMIT_TOKEN)
        if row is not None and (int(row["epoch"]), int(row["batch"])) in self._tokens:
            return True
        self._tokens.clear()  # no try committed: none is uncertain any more
        return False

    def _uncertain(self) -> bool:
        """A try of the batch being written reached (or may have reached) the server."""
        return bool(self._tokens)

    def abandon(self, reason: str) -> None:
        """Give up at once (the lease is lost): drop the connection, refuse every later write, and
        withhold the callbacks of a batch whose commit is unknown (see the module rules)."""
        if self._abandoned:
            return
        self._abandoned = reason
        self._fenced = True
        conn = self._conn
        if conn is not None and not conn.is_closed():
            conn.terminate()

    async def _commit_each(self, ops: list[Op | None]) -> set[int]:
        refused: set[int] = set()
        async with self._lock:
            conn = await self._begin()
            with self._deadline(conn, "a commit"):
                return await self._commit_each_on(conn, ops, refused)

    @staticmethod
    async def _commit_each_on(conn: Any, ops: list[Op | None], refused: set[int]) -> set[int]:
        try:
            for i, op in enumerate(ops):
                if op is None:
                    continue
                await conn.execute("SAVEPOINT op")
                try:
                    await conn.execute(pg.STATEMENTS[op[0]], *params(op[0], op[1]))
                except DATA_ERRORS:
                    await conn.execute("ROLLBACK TO SAVEPOINT op")
                    refused.add(i)
                await conn.execute("RELEASE SAVEPOINT op")
            await conn.execute("COMMIT")
        except BaseException:
            await rollback(conn)
            raise
        return refused

    async def _begin(self) -> Any:
        """Connect if needed and open the batch's transaction, checking the lease's epoch in it.

        Raises:
            StoreFenced: another broker took the leadership over (now or before).
        """
        if self._fenced:
            raise StoreFenced("this broker lost the leadership: it no longer writes")
        conn = await self._connection()
        lease = self.lease
        self._batch_no += 1
        epoch = None if lease is None else int(lease.epoch)
        self._tokens.add((epoch or 0, self._batch_no))
        try:  # one round trip: the fence runs in the transaction it guards, with the commit token
            with self._deadline(conn, "BEGIN"):
                await conn.execute(pg.begin_batch(epoch, self._batch_no))
        except asyncpg.PostgresError as exc:
            await rollback(conn)
            if lease is not None and exc.sqlstate == pg.FENCED:
                self._fenced = True
                lease.fenced(str(exc))
                raise StoreFenced(f"this broker lost the leadership: {exc}") from exc
            raise
        return conn

    async def _apply(self, conn: Any, ops: list[Op | None]) -> None:
        statements = pg.STATEMENTS
        for statement, group in groupby(filter(None, ops), key=itemgetter(0)):
            rows = [params(statement, p) for _, p in group]
            if len(rows) == 1:
                await conn.execute(statements[statement], *rows[0])
            elif statement == s.INSERT_MESSAGE and len(rows) >= COPY_MIN:
                await conn.copy_records_to_table(
                    "messages", records=rows, columns=pg.MESSAGE_COLUMNS, schema_name=self.schema
                )
            elif statement == s.DELETE_MESSAGE:
                await conn.execute(pg.DELETE_MESSAGE_IDS, [row[0] for row in rows])
            else:
                await conn.executemany(statements[statement], rows)

    # -- reads (the engine functions BatchingStore names, on PostgreSQL) ---------------------------
    @staticmethod
    async def _read_definitions(conn: Any) -> Definitions:
        queries = (
            s.SELECT_VHOSTS,
            s.SELECT_USERS,
            s.SELECT_PERMISSIONS,
            s.SELECT_EXCHANGES,
            s.SELECT_QUEUES,
            s.SELECT_BINDINGS,
            s.SELECT_POLICIES,
            s.SELECT_LIMITS,
            s.SELECT_PARAMETERS,
        )
        return s.definitions(*[map(text_out, await conn.fetch(pg.STATEMENTS[q])) for q in queries])

    @staticmethod
    async def _read_messages(
        conn: Any, queue_id: int, after: int, high: int, chunk: int
    ) -> list[MessageRecord]:
        rows = await conn.fetch(pg.STATEMENTS[s.SELECT_MESSAGES], after, high, chunk)
        records = s.message_records(queue_id, rows)
        for record in records:
            if ESC in record.exchange or ESC in record.routing_key:
                record.exchange, record.routing_key = unescape(record.exchange), unescape(record.routing_key)
        return records

    @staticmethod
    async def _read_delayed(conn: Any, after: int, chunk: int) -> list[DelayedRecord]:
        return s.delayed_records(
            map(text_out, await conn.fetch(pg.STATEMENTS[s.SELECT_DELAYED], after, chunk))
        )

    @staticmethod
    async def _read_dedup(conn: Any) -> list[DedupRecord]:
        rows = map(text_out, await conn.fetch(pg.STATEMENTS[s.SELECT_DEDUP]))
        return [DedupRecord(v, k, o, bytes(key), e) for v, k, o, key, e in rows]

    @staticmethod
    async def _read_move_jobs(conn: Any) -> list[MoveJobRecord]:
        return s.move_job_records(map(text_out, await conn.fetch(pg.STATEMENTS[s.SELECT_MOVE_JOBS])))

    @staticmethod
    async def _nothing(conn: Any) -> None:
        return None

    async def stats(self) -> dict[str, int]:
        """``messages``, ``queues``, ``bytes_on_disk`` (the schema's tables with their indexes and
        TOAST), ``pending``, ``batches``, ``failed_batches``.

        Raises:
            StoreError: the store is not open; IO_ERRORS: the server is unreachable.
        """
        counters = {"pending": self.pending, "batches": self.batches, "failed_batches": self.failed_batches}
        async with self._lock:
            conn = await self._connection()
            messages = await conn.fetchval(pg.STATEMENTS[s.COUNT_MESSAGES])
            queues = await conn.fetchval(pg.STATEMENTS[s.COUNT_QUEUES])
            size = await conn.fetchval(pg.TABLE_BYTES, self.schema)
        return {"messages": int(messages), "queues": int(queues), "bytes_on_disk": int(size), **counters}


if TYPE_CHECKING:

    def _conforms(store: PostgresStore) -> Store:  # mypy checks PostgresStore against the Protocol
        return store
