"""The SQL both stores run: synchronous functions over one ``sqlite3.Connection``.

Rules:
- There is one implementation of the schema: ``SQLiteStore`` runs these functions on its worker
  thread (one ``Worker.call`` each), ``MemoryStore`` on the event loop's thread against its own
  ``:memory:`` database (no I/O, so no thread: a call there costs what the SQL costs). Statements
  and row codecs come from ``schema``, DDL, migrations and transactions from ``sqlite_schema``.
- ``write_batch``: one batch, one transaction: ``BEGIN IMMEDIATE``, one ``executemany`` per run of
  consecutive ops with the same statement (queue order is kept: a queue deleted and redeclared, or a
  dead-letter move, lands exactly as queued), ``COMMIT``; message inserts and deletes go
  ``MULTI_ROWS`` rows per statement. Anything raised rolls the whole batch back.
- ``write_each``: a batch that failed on a value, again, one savepoint per op in one transaction:
  the ops failing with one of ``DATA_ERRORS`` are rolled back to their savepoint and left out; the
  rest commits. SQLite itself refuses the bad values (an integer over 64 bits, a type it cannot
  bind, a constraint), for both stores alike.
- A message body over ``LARGE_BLOB`` octets (messages and delayed messages) is inserted as a
  ``zeroblob`` and written through SQLite's incremental blob I/O in ``BLOB_CHUNK`` pieces: bound as a
  parameter, sqlite3 copies it whole while holding the GIL (0.25 s for 100 MB on a 2-core VM, during
  which the event loop cannot run); ``Blob.write`` releases the GIL around each piece.
- The connection is in autocommit mode (``isolation_level=None``): these functions issue
  ``BEGIN``/``COMMIT`` themselves, and reads see everything committed.
"""

from __future__ import annotations

import sqlite3
from itertools import chain, groupby
from operator import itemgetter
from typing import Any

from . import schema
from .sqlite_schema import transaction
from .store import DedupRecord, Definitions, DelayedRecord, MessageRecord, MoveJobRecord
from .tables import DELAYED, MESSAGES

Op = tuple[str, tuple[Any, ...]]  # (statement, params): one queued write
# Failures caused by an op's values, not by the disk: the batch is split and only that op refused
DATA_ERRORS = (
    OverflowError,
    TypeError,
    ValueError,
    sqlite3.IntegrityError,
    sqlite3.InterfaceError,
    sqlite3.DataError,
    sqlite3.ProgrammingError,
)


def load_counters(conn: sqlite3.Connection) -> tuple[schema.QueueIds, dict[int, int], int]:
    """Tidy the message ranges and read what id allocation starts from (``schema``'s rules: delete
    orphaned messages, compact queue ids once too many are used, read each queue's highest seq).

    Returns:
        ``[(queue_id, vhost, name)]`` in id order, ``{queue_id: highest stored seq}`` and the
        highest delayed-message id (0: none).
    """
    queues = [(int(i), str(v), str(n)) for i, v, n in conn.execute(schema.SELECT_QUEUE_IDS)]
    with transaction(conn):
        orphans = sum(conn.execute(schema.DELETE_MESSAGES, r).rowcount for r in schema.orphan_ranges(queues))
        compacted, moves = schema.compaction(queues)
        for statement, params in moves:
            conn.execute(statement, params)
    schema.tidied(orphans, queues, compacted)
    tops = [conn.execute(schema.MAX_SEQ, schema.queue_range(q[0])).fetchone()[0] for q in compacted]
    last_delayed = conn.execute(schema.SELECT_MAX_DELAYED).fetchone()[0] or 0
    return compacted, schema.last_seqs(compacted, tops), int(last_delayed)


# -- writes -----------------------------------------------------------------------------------------
LARGE_BLOB = 1 << 20
"""Bodies over this many octets are written in pieces (see the module rules)."""
BLOB_CHUNK = 1 << 20

# statement -> (its form with zeroblob(?) for the body, its table, the body's index in the params)
_BLOB_FORMS = {
    schema.INSERT_MESSAGE: (
        schema.insert(MESSAGES, markers={"body": "zeroblob(?)"}),
        MESSAGES.name,
        MESSAGES.names.index("body"),
    ),
    schema.INSERT_DELAYED: (
        schema.insert(DELAYED, markers={"body": "zeroblob(?)"}),
        DELAYED.name,
        DELAYED.names.index("body"),
    ),
}


def _executemany(conn: sqlite3.Connection, statement: str, params: list[tuple[Any, ...]]) -> None:
    conn.executemany(statement, params)  # one name for tests to make a batch fail as a disk would


def _large(statement: str, params: tuple[Any, ...]) -> bool:
    form = _BLOB_FORMS.get(statement)
    return form is not None and len(params[form[2]]) > LARGE_BLOB


def _insert_large(conn: sqlite3.Connection, statement: str, params: tuple[Any, ...]) -> None:
    """One insert whose body is over ``LARGE_BLOB``: a zeroblob, then the body in pieces (the row's
    id, its rowid, is the first parameter)."""
    zeroblob, table, at = _BLOB_FORMS[statement]
    body = params[at]
    conn.execute(zeroblob, (*params[:at], len(body), *params[at + 1 :]))
    with conn.blobopen(table, "body", params[0]) as blob, memoryview(body) as view:
        for start in range(0, len(view), BLOB_CHUNK):
            blob.write(view[start : start + BLOB_CHUNK])


def write_batch(conn: sqlite3.Connection, ops: list[Op | None]) -> None:
    """Apply one batch in one transaction (``None`` entries are cancelled ops and are skipped).

    Raises:
        sqlite3.Error: an I/O failure, or one of ``DATA_ERRORS``: nothing is applied.
    """
    with transaction(conn):
        for statement, group in groupby(filter(None, ops), key=itemgetter(0)):
            params = [p for _, p in group]
            form = _BLOB_FORMS.get(statement)
            if form is not None and max(map(len, map(itemgetter(form[2]), params))) > LARGE_BLOB:
                for large in [p for p in params if _large(statement, p)]:  # rare: a scan in C first
                    _insert_large(conn, statement, large)
                params = [p for p in params if not _large(statement, p)]
            multi = schema.MULTI_ROW.get(statement)
            if multi is not None and len(params) >= schema.MULTI_ROWS:
                k = schema.MULTI_ROWS
                full = len(params) - len(params) % k
                rows = [tuple(chain.from_iterable(params[i : i + k])) for i in range(0, full, k)]
                _executemany(conn, multi, rows)
                params = params[full:]
            if params:
                _executemany(conn, statement, params)


def write_each(conn: sqlite3.Connection, ops: list[Op | None]) -> set[int]:
    """Apply ``ops`` one per savepoint in one transaction, leaving out those failing with one of
    ``DATA_ERRORS``. Slow (one statement per op): used only after ``write_batch`` failed on a value.

    Returns:
        The indexes of the ops left out.

    Raises:
        sqlite3.Error: an I/O failure (nothing is applied).
    """
    refused: set[int] = set()
    with transaction(conn):
        for i, op in enumerate(ops):
            if op is None:
                continue
            conn.execute("SAVEPOINT op")
            try:
                if _large(*op):
                    _insert_large(conn, *op)
                else:
                    conn.execute(op[0], op[1])
            except DATA_ERRORS:
                conn.execute("ROLLBACK TO op")
                refused.add(i)
            conn.execute("RELEASE op")
    return refused


# -- reads ------------------------------------------------------------------------------------------
def read_definitions(conn: sqlite3.Connection) -> Definitions:
    """Every vhost, user, permission, exchange, queue, binding, policy and limit."""
    return schema.definitions(
        *(
            conn.execute(query).fetchall()
            for query in (
                schema.SELECT_VHOSTS,
                schema.SELECT_USERS,
                schema.SELECT_PERMISSIONS,
                schema.SELECT_EXCHANGES,
                schema.SELECT_QUEUES,
                schema.SELECT_BINDINGS,
                schema.SELECT_POLICIES,
                schema.SELECT_LIMITS,
                schema.SELECT_PARAMETERS,
            )
        )
    )


def read_messages(
    conn: sqlite3.Connection, queue_id: int, after: int, high: int, chunk: int
) -> list[MessageRecord]:
    """Up to ``chunk`` of the queue's messages with ids in ``(after, high]``, in id (seq) order."""
    rows = conn.execute(schema.SELECT_MESSAGES, (after, high, chunk)).fetchall()
    return schema.message_records(queue_id, rows)


def read_delayed(conn: sqlite3.Connection, after: int, chunk: int) -> list[DelayedRecord]:
    """Up to ``chunk`` delayed messages with ids above ``after`` (``chunk=-1``: all), in id order."""
    return schema.delayed_records(conn.execute(schema.SELECT_DELAYED, (after, chunk)).fetchall())


def read_dedup(conn: sqlite3.Connection) -> list[DedupRecord]:
    """Every deduplication key, in the order they were remembered."""
    rows = conn.execute(schema.SELECT_DEDUP).fetchall()
    return [DedupRecord(v, k, o, bytes(key), e) for v, k, o, key, e in rows]


def read_move_jobs(conn: sqlite3.Connection) -> list[MoveJobRecord]:
    """Every dead-letter move job with its ids, in id order."""
    return schema.move_job_records(conn.execute(schema.SELECT_MOVE_JOBS).fetchall())


def shrink_memory(conn: sqlite3.Connection) -> None:
    """Free the connection's unused cache memory (the data stays; pages are read back as needed)."""
    conn.execute("PRAGMA shrink_memory").fetchall()


def read_counts(conn: sqlite3.Connection) -> tuple[int, int]:
    """The number of messages and of queues."""
    return (
        int(conn.execute(schema.COUNT_MESSAGES).fetchone()[0]),
        int(conn.execute(schema.COUNT_QUEUES).fetchone()[0]),
    )
