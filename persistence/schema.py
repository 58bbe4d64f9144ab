"""The statements every store runs, the rows they take, and the message ids' layout.

Rules:
- Every statement here is written in SQLite's dialect, with its column lists taken from ``tables``
  (``insert``, ``select``, ``delete``): the SQLite stores run it as it is (``engine``), the PostgreSQL
  store translated (``postgres_sql.STATEMENTS``, by ``postgres_dialect.translate``).
- Every write statement is one op kind: a store queues ``(statement, params)`` tuples and runs them
  in batches (``engine.write_batch``, ``PostgresStore._apply``); the params and a read's rows follow
  the table's column order (the row codecs below).
- A message's id is its rowid and its key: ``(queue_id << SEQ_BITS) | seq``. A queue's messages are
  one contiguous rowid range (``queue_range``), so recovery is a range scan in seq order and a delete
  by id is a rowid lookup, with no secondary index. Measured for 100k 100-byte messages (routing
  key "orders", 3 property bytes): 137.3 bytes/message on disk, against 155.4 for an ``id`` rowid
  plus a ``(queue_id, seq)`` index and 152.2 for a ``WITHOUT ROWID`` table keyed by
  ``(queue_id, seq)`` (which would also spill 1-4 KB bodies to overflow pages).
- At open every store tidies the ids the same way (``orphan_ranges``, ``compaction``,
  ``last_seqs``; run by ``engine.load_counters`` and ``postgres_conn.load_counters``): it deletes
  the messages of queues that no longer exist, renumbers the queues once too many ids are used, and
  reads each queue's highest seq.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from .store import (
    BindingRecord,
    DedupRecord,
    Definitions,
    DelayedRecord,
    ExchangeRecord,
    LimitRecord,
    MessageRecord,
    MoveJobRecord,
    ParameterRecord,
    PermissionRecord,
    PolicyRecord,
    QueueRecord,
    UserRecord,
    VHostRecord,
)
from .tables import (
    BINDINGS,
    DEDUP,
    DELAYED,
    EXCHANGES,
    LIMITS,
    MESSAGES,
    MOVE_JOB_IDS,
    MOVE_JOBS,
    PARAMETERS,
    PERMISSIONS,
    POLICIES,
    QUEUES,
    USERS,
    VHOSTS,
    Table,
)

log = logging.getLogger(__name__)

# Message ids: 19 bits of queue id, 44 bits of per-queue sequence (a 63-bit positive rowid).
# 2**44 messages per queue id is 5.5 years at 100k msg/s; queue ids are compacted at open once
# more than half of the 524287 have been used (durable queues declared over the data dir's life).
SEQ_BITS = 44
SEQ_MASK = (1 << SEQ_BITS) - 1
MAX_QUEUE_ID = (1 << (63 - SEQ_BITS)) - 1
COMPACT_QUEUE_IDS_ABOVE = MAX_QUEUE_ID // 2


def queue_range(queue_id: int) -> tuple[int, int]:
    """The first and last message id a queue can hold (inclusive)."""
    low = queue_id << SEQ_BITS
    return low, low | SEQ_MASK


# -- statement builders: the column lists come from the table ----------------------------------------
def insert(table: Table, *, replace: bool = False, markers: Mapping[str, str] | None = None) -> str:
    """``INSERT [OR REPLACE] INTO table (every column) VALUES (?, ...)``; ``markers`` writes some
    columns' values otherwise (``{"body": "zeroblob(?)"}``)."""
    verb = "INSERT OR REPLACE" if replace else "INSERT"
    values = ", ".join((markers or {}).get(name, "?") for name in table.names)
    return f"{verb} INTO {table.name} ({', '.join(table.names)}) VALUES ({values})"


def select(table: Table, tail: str = "") -> str:
    """``SELECT every column FROM table tail``."""
    return f"SELECT {', '.join(table.names)} FROM {table.name}" + (f" {tail}" if tail else "")


def delete(table: Table, *columns: str) -> str:
    """``DELETE FROM table WHERE column = ? AND ...`` (default: the table's key)."""
    return f"DELETE FROM {table.name} WHERE " + " AND ".join(f"{c} = ?" for c in columns or table.key)


# -- write statements: one per op kind --------------------------------------------------------------
PUT_VHOST = insert(VHOSTS, replace=True)
DELETE_VHOST = delete(VHOSTS)
DELETE_VHOST_PERMISSIONS = delete(PERMISSIONS, "vhost")
DELETE_VHOST_EXCHANGES = delete(EXCHANGES, "vhost")
DELETE_VHOST_BINDINGS = delete(BINDINGS, "vhost")
DELETE_VHOST_QUEUES = delete(QUEUES, "vhost")
PUT_USER = insert(USERS, replace=True)
DELETE_USER = delete(USERS)
DELETE_USER_PERMISSIONS = delete(PERMISSIONS, "user")
PUT_PERMISSION = insert(PERMISSIONS, replace=True)
DELETE_PERMISSION = delete(PERMISSIONS)
PUT_EXCHANGE = insert(EXCHANGES, replace=True)
DELETE_EXCHANGE = delete(EXCHANGES)
DELETE_EXCHANGE_BINDINGS = (
    "DELETE FROM bindings WHERE vhost = ? "
    "AND (source = ? OR (destination_kind = 'exchange' AND destination = ?))"
)
PUT_QUEUE = insert(QUEUES, replace=True)
DELETE_QUEUE = delete(QUEUES)
DELETE_QUEUE_BINDINGS = (
    "DELETE FROM bindings WHERE vhost = ? AND destination_kind = 'queue' AND destination = ?"
)
TOUCH_QUEUE = "UPDATE queues SET expires_at = ? WHERE id = ?"
PUT_BINDING = insert(BINDINGS, replace=True)
DELETE_BINDING = delete(BINDINGS)
INSERT_MESSAGE = insert(MESSAGES)
DELETE_MESSAGE = delete(MESSAGES)
PUT_POLICY = insert(POLICIES, replace=True)
DELETE_POLICY = delete(POLICIES)
DELETE_VHOST_POLICIES = delete(POLICIES, "vhost")
PUT_LIMIT = insert(LIMITS, replace=True)
DELETE_LIMIT = delete(LIMITS)
DELETE_OWNER_LIMITS = delete(LIMITS, "kind", "owner")
PUT_PARAMETER = insert(PARAMETERS, replace=True)
DELETE_PARAMETER = delete(PARAMETERS)
DELETE_VHOST_PARAMETERS = delete(PARAMETERS, "vhost")
MARK_DELIVERED = "UPDATE messages SET deliveries = ? WHERE id = ?"
INSERT_DELAYED = insert(DELAYED)
DELETE_DELAYED = delete(DELAYED)
DELETE_DELAYED_EXCHANGE = delete(DELAYED, "vhost", "exchange")
DELETE_VHOST_DELAYED = delete(DELAYED, "vhost")
PUT_DEDUP = insert(DEDUP, replace=True)
DELETE_DEDUP = delete(DEDUP)
DELETE_DEDUP_OWNER = delete(DEDUP, "vhost", "kind", "owner")
DELETE_VHOST_DEDUP = delete(DEDUP, "vhost")
DELETE_MESSAGES = "DELETE FROM messages WHERE id BETWEEN ? AND ?"  # a whole queue's range
PUT_MOVE_JOB = insert(MOVE_JOBS, replace=True)
PUT_MOVE_JOB_IDS = insert(MOVE_JOB_IDS, replace=True)
UPDATE_MOVE_JOB = (
    "UPDATE move_jobs SET state = ?, selected = ?, moved = ?, unroutable = ?, skipped = ?, refused = ?, "
    "error = ?, finished = ? WHERE id = ?"
)
DELETE_MOVE_JOB = delete(MOVE_JOBS)
DELETE_MOVE_JOB_IDS = delete(MOVE_JOB_IDS)

# Multi-row forms of the hot statements: one statement (one sqlite3_step, one GIL release) per
# MULTI_ROWS rows instead of per row; 1.5x (insert) to 4x (delete) faster than executemany alone.
# 9 x 100 parameters stay under SQLite's historical 999-variable limit.
MULTI_ROWS = 100
MULTI_ROW: dict[str, str] = {
    INSERT_MESSAGE: INSERT_MESSAGE.split("VALUES")[0]
    + "VALUES "
    + ", ".join(["(" + ", ".join("?" * len(MESSAGES.columns)) + ")"] * MULTI_ROWS),
    DELETE_MESSAGE: "DELETE FROM messages WHERE id IN (" + ", ".join(["?"] * MULTI_ROWS) + ")",
}

# -- reads: the columns are the write params, in order ----------------------------------------------
SELECT_VHOSTS = select(VHOSTS, "ORDER BY name")
SELECT_USERS = select(USERS, "ORDER BY name")
SELECT_PERMISSIONS = select(PERMISSIONS, "ORDER BY user, vhost")
SELECT_EXCHANGES = select(EXCHANGES, "ORDER BY vhost, name")
SELECT_QUEUES = select(QUEUES, "ORDER BY id")
SELECT_BINDINGS = select(BINDINGS, "ORDER BY " + ", ".join(BINDINGS.names))
SELECT_POLICIES = select(POLICIES, "ORDER BY vhost, operator, name")
SELECT_LIMITS = select(LIMITS, "ORDER BY kind, owner, name")
SELECT_PARAMETERS = select(PARAMETERS, "ORDER BY vhost, component, name")
SELECT_DELAYED = select(DELAYED, "WHERE id > ? ORDER BY id LIMIT ?")  # LIMIT -1: all
SELECT_DEDUP = select(DEDUP, "ORDER BY rowid")  # the order the keys were remembered
SELECT_MAX_DELAYED = "SELECT max(id) FROM delayed"
COUNT_MESSAGES = "SELECT count(*) FROM messages"
COUNT_QUEUES = "SELECT count(*) FROM queues"
SELECT_MOVE_JOBS = (
    "SELECT "
    + ", ".join(f"j.{name}" for name in MOVE_JOBS.names)
    + ", i.ids FROM move_jobs j LEFT JOIN move_job_ids i ON i.job = j.id ORDER BY j.id"
)
SELECT_MESSAGES = select(MESSAGES, "WHERE id > ? AND id <= ? ORDER BY id LIMIT ?")

# -- ids at open (see the module rules) -----------------------------------------------------------------
SELECT_QUEUE_IDS = "SELECT id, vhost, name FROM queues ORDER BY id"
MAX_SEQ = "SELECT max(id) FROM messages WHERE id BETWEEN ? AND ?"
MOVE_QUEUE = "UPDATE queues SET id = ? WHERE id = ?"
MOVE_MESSAGES = "UPDATE messages SET id = id - ? WHERE id BETWEEN ? AND ?"

QueueIds = list[tuple[int, str, str]]  # (queue id, vhost, name)
Row = tuple[Any, ...]


def orphan_ranges(queues: QueueIds) -> list[tuple[int, int]]:
    """The message-id ranges no queue owns (``DELETE_MESSAGES``' params): a failed batch can leave
    messages there. ``queues`` is in id order."""
    ranges: list[tuple[int, int]] = []
    start = 0
    for queue_id in [q[0] for q in queues] + [MAX_QUEUE_ID + 1]:
        if queue_id > start:  # the ids [start, queue_id) hold no queue
            ranges.append((start << SEQ_BITS, (queue_id << SEQ_BITS) - 1))
        start = queue_id + 1
    return ranges


def compaction(queues: QueueIds) -> tuple[QueueIds, list[tuple[str, Row]]]:
    """The queues renumbered 1..n once more than ``COMPACT_QUEUE_IDS_ABOVE`` ids are used (else as
    they are), and the ``(statement, params)`` ops that move them, each queue's message range with it
    (seqs are kept).

    Queues move in ascending id order to ids no larger than their own; the target range is then
    always empty (its previous owner already moved lower), so no id ever collides.
    """
    if not queues or queues[-1][0] <= COMPACT_QUEUE_IDS_ABOVE:
        return queues, []
    compacted: QueueIds = []
    ops: list[tuple[str, Row]] = []
    for new_id, (old_id, vhost, name) in enumerate(queues, start=1):
        if new_id != old_id:
            low, high = queue_range(old_id)
            ops.append((MOVE_QUEUE, (new_id, old_id)))
            ops.append((MOVE_MESSAGES, ((old_id - new_id) << SEQ_BITS, low, high)))
        compacted.append((new_id, vhost, name))
    return compacted, ops


def tidied(orphans: int, before: QueueIds, after: QueueIds) -> None:
    """Log what the tidy-up at open did."""
    if orphans:
        log.warning("deleted %d messages of queues that no longer exist", orphans)
    if after is not before:
        log.warning("compacted queue ids: %d queues now use ids 1..%d", len(after), len(after))


def last_seqs(queues: QueueIds, tops: Iterable[int | None]) -> dict[int, int]:
    """``{queue_id: highest stored seq}`` from each queue's highest message id (``MAX_SEQ``)."""
    return {
        queue_id: 0 if top is None else top - (queue_id << SEQ_BITS)
        for (queue_id, _, _), top in zip(queues, tops, strict=True)
    }


# -- records <-> rows ---------------------------------------------------------------------------------
def vhost_row(r: VHostRecord) -> Row:
    return (r.name, r.description, json.dumps(list(r.tags)))


def user_row(r: UserRecord) -> Row:
    return (r.name, r.password_hash, r.hashing_algorithm, json.dumps(list(r.tags)))


def permission_row(r: PermissionRecord) -> Row:
    return (r.user, r.vhost, r.configure, r.write, r.read)


def exchange_row(r: ExchangeRecord) -> Row:
    return (r.vhost, r.name, r.type, int(r.auto_delete), int(r.internal), bytes(r.arguments))


def queue_row(r: QueueRecord) -> Row:
    return (r.id, r.vhost, r.name, int(r.auto_delete), bytes(r.arguments), r.expires_at)


def binding_row(r: BindingRecord) -> Row:
    return (r.vhost, r.source, r.destination_kind, r.destination, r.routing_key, bytes(r.arguments))


def policy_row(r: PolicyRecord) -> Row:
    return (r.vhost, r.name, int(r.operator), r.pattern, r.apply_to, r.priority, r.definition)


def limit_row(r: LimitRecord) -> Row:
    return (r.kind, r.owner, r.name, r.value)


def parameter_row(r: ParameterRecord) -> Row:
    return (r.vhost, r.component, r.name, r.value)


def definitions(
    vhosts: Iterable[Row],
    users: Iterable[Row],
    permissions: Iterable[Row],
    exchanges: Iterable[Row],
    queues: Iterable[Row],
    bindings: Iterable[Row],
    policies: Iterable[Row] = (),
    limits: Iterable[Row] = (),
    parameters: Iterable[Row] = (),
) -> Definitions:
    """Build ``Definitions`` from rows shaped like the put statements' params."""
    return Definitions(
        vhosts=[VHostRecord(n, d, json.loads(t)) for n, d, t in vhosts],
        users=[UserRecord(n, h, a, json.loads(t)) for n, h, a, t in users],
        permissions=[PermissionRecord(*r) for r in permissions],
        exchanges=[ExchangeRecord(v, n, t, bool(d), bool(i), a) for v, n, t, d, i, a in exchanges],
        queues=[QueueRecord(v, n, bool(d), a, e, i) for i, v, n, d, a, e in queues],
        bindings=[BindingRecord(*r) for r in bindings],
        policies=[PolicyRecord(v, n, p, a, pr, d, bool(o)) for v, n, o, p, a, pr, d in policies],
        limits=[LimitRecord(*r) for r in limits],
        parameters=[ParameterRecord(*r) for r in parameters],
    )


def delayed_row(r: DelayedRecord) -> Row:
    keys = json.dumps(list(r.extra_keys)) if r.extra_keys else None
    return (r.id, r.vhost, r.exchange, r.due, r.delay, r.routing_key, r.props, r.body, keys)


def delayed_records(rows: Iterable[Row]) -> list[DelayedRecord]:
    return [
        DelayedRecord(v, x, due, d, k, p, b, () if e is None else tuple(json.loads(e)), i)
        for i, v, x, due, d, k, p, b, e in rows
    ]


def dedup_row(r: DedupRecord) -> Row:
    return (r.vhost, r.kind, r.owner, bytes(r.key), r.expires_at)


def move_job_row(r: MoveJobRecord) -> Row:
    return (
        r.id,
        r.vhost,
        r.queue,
        r.spec,
        r.state,
        r.selected,
        r.moved,
        r.unroutable,
        r.skipped,
        r.refused,
        r.error,
        r.started,
        r.finished,
    )


def move_job_progress(r: MoveJobRecord) -> Row:
    """``UPDATE_MOVE_JOB``'s params."""
    return (r.state, r.selected, r.moved, r.unroutable, r.skipped, r.refused, r.error, r.finished, r.id)


_JOB_COLUMNS = len(MOVE_JOBS.columns)


def move_job_records(rows: Iterable[Row]) -> list[MoveJobRecord]:
    """Build ``MoveJobRecord``s from ``SELECT_MOVE_JOBS`` rows (the job's columns, then its ids)."""
    records = []
    for row in rows:
        record = MoveJobRecord(*row[:_JOB_COLUMNS])
        record.ids = None if row[_JOB_COLUMNS] is None else bytes(row[_JOB_COLUMNS])
        records.append(record)
    return records


def message_records(queue_id: int, rows: Iterable[Row]) -> list[MessageRecord]:
    """Build a queue's ``MessageRecord``s from message rows (the recovery hot loop: keep it flat)."""
    base = queue_id << SEQ_BITS
    loads = json.loads
    return [
        MessageRecord(
            queue_id,
            i - base,
            e,
            k,
            p,
            b,
            t,
            d,
            () if x is None else tuple(loads(x)),
            v is not None,
            v or 0,
            i,
        )
        for i, e, k, p, b, t, d, x, v in rows
    ]
