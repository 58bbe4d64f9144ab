"""PostgreSQL connections for the store and the lease: the driver and its errors, connecting and closing,
and what opening a schema does (create or migrate it, tidy the ids and load the counters).

Rules:
- asyncpg is optional (the ``postgresql`` extra): without it the error tuples are empty and
  ``require_driver`` says how to install it. Only asyncpg's public API is used.
- A failure is a data error (``DATA_ERRORS``: the op's values; the batch is split) or an I/O error
  (``IO_ERRORS``: the server or the connection; the batch is tried again after reconnecting).
- Where a store is (``describe``, ``server``) is said from what we know: the URL without its user
  and password before connecting, and what the server reports about itself once connected.
- ``migrate`` creates the schema and its tables, or checks and migrates them
  (``postgres_sql.migrations``), in one transaction under the migration lock; ``load_counters`` is
  ``engine.load_counters`` on PostgreSQL: the same tidy-up (``schema``'s rules), with a run of range
  deletes as one statement and the highest seqs read pipelined.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any
from urllib.parse import urlsplit

from . import postgres_sql as pg
from . import schema as s
from .postgres_dialect import quote_ident
from .postgres_text import unescape
from .store import StoreError

try:
    import asyncpg
except ImportError:  # pragma: no cover - the postgresql extra is not installed
    asyncpg = None

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0


def _errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    if asyncpg is None:
        return (), ()
    x = asyncpg.exceptions
    data = (
        OverflowError,
        TypeError,
        ValueError,
        x.DataError,  # SQLSTATE class 22, and the driver's "invalid input for query argument"
        x.IntegrityConstraintViolationError,  # 23
        x.ProgramLimitExceededError,  # 54: e.g. a key too long for a B-tree entry
    )
    # InternalClientError: the driver's protocol state went wrong (seen once after SIGSTOP, "another
    # operation is in progress"): the connection is dropped and the batch tried again like a dropped one
    io = (
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
        x.InternalClientError,
        OSError,
        asyncio.TimeoutError,
        StoreError,
    )
    return data, io


DATA_ERRORS, IO_ERRORS = _errors()
_BROKEN: tuple[type[BaseException], ...] = (asyncpg.exceptions.InternalClientError,) if asyncpg else ()


def require_driver() -> None:
    """Raises: StoreError: asyncpg is not installed."""
    if asyncpg is None:
        raise StoreError(
            "OTTERMQ_STORE=postgresql needs the asyncpg driver: pip install 'ottermq[postgresql]'"
        )


async def connect(
    url: str | None,
    schema: str,
    password: str | None,
    application_name: str,
    timeout: float = CONNECT_TIMEOUT,
) -> Any:
    """A connection whose unqualified names are ``schema``'s, named ``application_name`` in
    ``pg_stat_activity`` (a standby ends an old active's sessions by that name).

    Raises:
        IO_ERRORS: the server is unreachable or refuses us.
    """
    kwargs: dict[str, Any] = {} if password is None else {"password": password}
    return await asyncpg.connect(
        url,
        timeout=timeout,
        server_settings={"search_path": quote_ident(schema), "application_name": application_name},
        **kwargs,
    )


def describe(url: str | None) -> str:
    """The server and database a URL names, without its user and password (``PG*`` defaults when
    the URL leaves them out)."""
    if not url:
        return "the server of the PG* defaults"
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    return f"{hosts or 'the default server'}{parts.path or '/'}"


_SERVER = "SELECT host(inet_server_addr()), inet_server_port(), current_database()"


async def server(conn: Any, timeout: float) -> str:
    """Where ``conn`` is connected, as the server says: ``address:port/database`` (a Unix socket
    has no address).

    Raises:
        IO_ERRORS: the server did not answer.
    """
    address, port, database = await conn.fetchrow(_SERVER, timeout=timeout)
    return f"{address}:{port}/{database}" if address else f"a local socket/{database}"


async def close_quietly(conn: Any, timeout: float) -> None:
    """Close ``conn``, or drop it when the server does not answer (logged)."""
    try:
        await conn.close(timeout=timeout)
    except IO_ERRORS as exc:
        log.warning("closing a PostgreSQL connection: %s", exc)
        conn.terminate()


async def rollback(conn: Any) -> None:
    """Roll back the open transaction, if the connection is still there to do it; a connection whose
    driver lost track of its protocol state (``InternalClientError``) is dropped instead."""
    if conn.is_closed():
        return
    if isinstance(sys.exc_info()[1], _BROKEN):
        conn.terminate()
        return
    if not conn.is_in_transaction():
        return
    try:
        await conn.execute("ROLLBACK")
    except IO_ERRORS as exc:
        log.warning("rollback failed (%s): closing the connection", exc)
        conn.terminate()


async def migrate(conn: Any, schema: str) -> None:
    """Create the schema and its tables, or check and migrate them, in one transaction under the
    migration lock (brokers starting together migrate once).

    Raises:
        StoreError: the schema holds another program's tables or a newer OtterMQ's.
    """
    _, _, migration_key = pg.lock_keys(schema)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", pg.LOCK_CLASS, migration_key)
        if not await conn.fetchval(pg.SCHEMA_EXISTS, schema):
            await conn.execute(f"CREATE SCHEMA {quote_ident(schema)}")
        if await conn.fetchval(pg.HAS_VERSION_TABLE, schema):
            version = int(await conn.fetchval(pg.SELECT_VERSION))
        elif await conn.fetchval(pg.COUNT_TABLES, schema):
            raise StoreError(
                f"PostgreSQL schema {schema!r} holds tables of another program; refusing to use it "
                "(choose another with OTTERMQ_POSTGRES_SCHEMA)"
            )
        else:
            version = 0
            await conn.execute(pg.CREATE_VERSION_TABLE)
            await conn.execute(pg.INSERT_VERSION, 0)
        if version > pg.SCHEMA_VERSION:
            raise StoreError(
                f"PostgreSQL schema {schema!r} was written by a newer OtterMQ (schema {version}, this "
                f"version understands up to {pg.SCHEMA_VERSION}); refusing to use it"
            )
        steps = pg.migrations(schema)
        for target in range(version + 1, pg.SCHEMA_VERSION + 1):
            for statement in steps[target]:
                await conn.execute(statement)
        if version != pg.SCHEMA_VERSION:
            await conn.execute(pg.SET_VERSION, pg.SCHEMA_VERSION)
            if version:
                log.info("migrated PostgreSQL schema %s from %d to %d", schema, version, pg.SCHEMA_VERSION)


async def load_counters(conn: Any) -> tuple[s.QueueIds, dict[int, int], int]:
    """``engine.load_counters`` on PostgreSQL: delete orphaned messages, compact queue ids once too
    many are used, read each queue's highest seq and the highest delayed-message id."""
    statements = pg.STATEMENTS
    rows = await conn.fetch(statements[s.SELECT_QUEUE_IDS])
    queues = [(int(i), unescape(v), unescape(n)) for i, v, n in rows]
    async with conn.transaction():
        ranges = s.orphan_ranges(queues)
        lows, highs = [low for low, _ in ranges], [high for _, high in ranges]
        orphans = await conn.fetchval(pg.DELETE_MESSAGE_RANGES, lows, highs)
        compacted, moves = s.compaction(queues)
        for statement, params in moves:
            await conn.execute(statements[statement], *params)
    s.tidied(int(orphans), queues, compacted)
    ranges = [s.queue_range(q[0]) for q in compacted]
    tops = await conn.fetchmany(statements[s.MAX_SEQ], ranges) if ranges else []
    last_delayed = await conn.fetchval(statements[s.SELECT_MAX_DELAYED])
    return compacted, s.last_seqs(compacted, [top for (top,) in tops]), int(last_delayed or 0)
