"""The PostgreSQL store's database layout: its versions and migrations, its own tables (the leadership
and the commit token), and every statement in its dialect.

Rules:
- The store's tables are ``tables``', rendered by ``postgres_dialect`` (``TEXT COLLATE "C"``, ``md5``
  key indexes for blob keys, ``seq`` for a rowid); the statements are ``schema``'s, translated once
  at import by ``postgres_dialect.translate``. ``STATEMENTS`` maps every write and read statement of
  ``schema`` to its PostgreSQL text, so a store queues the very same ``(statement, params)`` ops for
  either database and one lookup per run of ops picks the dialect. Only what PostgreSQL does another
  way (a run of deletes as one ``= ANY``, the catalog, the lease) is written here in its dialect.
- The version lives in the table ``ottermq_schema`` (one row). A schema holding tables but no version
  table belongs to another program and is refused; a newer version is refused before anything is
  written; an older one is migrated step by step (``migrations(schema)[v]`` turns ``v - 1`` into
  ``v``) in one transaction, under an advisory lock so that brokers starting together migrate once.
  PostgreSQL's versions have their own numbers: ``HISTORY`` says which store schema versions
  (``tables``) each one brought, beside the statements of its own tables.
- ``ottermq_leader`` (one row) is the leadership record of the brokers sharing the schema: the epoch
  (raised by every take-over), who holds it, until when (the database's clock) and how many take-overs
  there were. ``ottermq_fence(epoch)`` is what every commit of the active runs first, inside its
  transaction: it takes the fence lock shared (a take-over takes it exclusively, so it waits for
  commits in flight and later commits see its new epoch) and raises ``FENCED`` when the epoch moved.
  ``renewed_at`` is when the active last renewed its lease (a standby compares it with the server's
  start: a lock freed by a database restart is not a dead active, see ``lease``).
- ``ottermq_commit`` (one row) is the commit token: every batch of the active writes its
  ``(epoch, batch)`` there inside its transaction (``begin_batch``). A batch whose ``COMMIT`` got no
  answer (the connection dropped, a deadline passed) is looked up after reconnecting: the token tells
  whether it committed, so it is neither written twice nor reported failed when it is stored.
"""

from __future__ import annotations

import zlib

from . import schema as s
from . import tables
from .postgres_dialect import ddl, translate

LOCK_CLASS = 0x4F74724D  # "OtrM": first key of every advisory lock the brokers take
FENCED = "OT001"  # SQLSTATE raised by ottermq_fence when the epoch moved


def lock_keys(schema: str) -> tuple[int, int, int]:
    """The advisory lock keys (second halves, with ``LOCK_CLASS`` first) of one schema: the
    leadership lock, the fence lock and the migration lock."""
    base = zlib.crc32(schema.encode()) & 0x0FFFFFFF
    return base << 2 | 0, base << 2 | 1, base << 2 | 2


# -- PostgreSQL's own tables ---------------------------------------------------------------------------
_LEADER = [
    """CREATE TABLE ottermq_leader (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch BIGINT NOT NULL,
    holder TEXT,
    lease_until TIMESTAMPTZ,
    failovers BIGINT NOT NULL
)""",
    "INSERT INTO ottermq_leader VALUES (1, 0, NULL, NULL, 0)",
]


def _fence_function(schema: str) -> str:
    _, fence, _ = lock_keys(schema)
    return f"""
CREATE OR REPLACE FUNCTION ottermq_fence(mine BIGINT) RETURNS VOID LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared({LOCK_CLASS}, {fence});
    IF NOT EXISTS (SELECT 1 FROM ottermq_leader WHERE id = 1 AND epoch = mine) THEN
        RAISE EXCEPTION 'leadership epoch % was taken over', mine USING ERRCODE = '{FENCED}';
    END IF;
END $$"""


# the lease's last renewal and the commit token (issue 39)
_COMMIT_TOKEN = [
    "ALTER TABLE ottermq_leader ADD COLUMN renewed_at TIMESTAMPTZ",
    """CREATE TABLE ottermq_commit (
    id INTEGER PRIMARY KEY CHECK (id = 1), epoch BIGINT NOT NULL, batch BIGINT NOT NULL
)""",
    "INSERT INTO ottermq_commit VALUES (1, 0, 0)",
]

# PostgreSQL version -> (the store schema versions it brought (first, last), or None), in order
HISTORY: dict[int, tuple[int, int] | None] = {
    1: (1, 4),  # the store's tables as SQLite's schema 4 had them, the leadership and its fence
    2: (5, 5),  # dead-letter move jobs (issue 38)
    3: None,  # the lease's last renewal and the commit token (issue 39)
    4: (6, 6),  # runtime parameters: dynamic shovels (issue 42)
}
SCHEMA_VERSION = max(HISTORY)


def begin_batch(epoch: int | None, batch: int) -> str:
    """The first round trip of a batch: ``BEGIN``, the fence check when fenced (``epoch``), and the
    commit token ``(epoch or 0, batch)``; one simple query (integers only, no parameters)."""
    fence = "" if epoch is None else f"SELECT ottermq_fence({int(epoch)}); "
    token = f"UPDATE ottermq_commit SET epoch = {int(epoch or 0)}, batch = {int(batch)} WHERE id = 1"
    return f"BEGIN; {fence}{token}"


SELECT_COMMIT_TOKEN = "SELECT epoch, batch FROM ottermq_commit WHERE id = 1"


def migrations(schema: str) -> dict[int, list[str]]:
    """``{v: statements}`` turning PostgreSQL schema ``v - 1`` into ``v``, for one schema (the fence
    function names the schema's lock): the store's tables of ``HISTORY[v]``, then its own."""
    own = {1: [*_LEADER, _fence_function(schema)], 3: _COMMIT_TOKEN}
    steps = {}
    for version, brought in HISTORY.items():
        steps[version] = [*(ddl(*brought) if brought else ()), *own.get(version, ())]
    return steps


CREATE_VERSION_TABLE = "CREATE TABLE ottermq_schema (version INTEGER NOT NULL)"
SELECT_VERSION = "SELECT version FROM ottermq_schema"
SET_VERSION = "UPDATE ottermq_schema SET version = $1"
INSERT_VERSION = "INSERT INTO ottermq_schema VALUES ($1)"
COUNT_TABLES = "SELECT count(*) FROM pg_tables WHERE schemaname = $1"
HAS_VERSION_TABLE = "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'ottermq_schema'"
SCHEMA_EXISTS = "SELECT count(*) FROM pg_namespace WHERE nspname = $1"
TABLE_BYTES = (
    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'"
)


# -- statements ---------------------------------------------------------------------------------------
def _statements() -> dict[str, str]:
    texts = (getattr(s, name) for name in dir(s) if name.isupper())
    return {
        text: translate(text)
        for text in texts
        if isinstance(text, str) and text.split(" ", 1)[0] in ("INSERT", "DELETE", "UPDATE", "SELECT")
    }


STATEMENTS: dict[str, str] = _statements()

MESSAGE_COLUMNS = tables.MESSAGES.names  # schema.INSERT_MESSAGE's columns: the COPY of a run of inserts
DELETE_MESSAGE_IDS = "DELETE FROM messages WHERE id = ANY($1::BIGINT[])"  # a run of DELETE_MESSAGE
# a run of DELETE_MESSAGES (the ranges of schema.orphan_ranges), counting what it deleted
DELETE_MESSAGE_RANGES = (
    "WITH gone AS (DELETE FROM messages m USING unnest($1::BIGINT[], $2::BIGINT[]) AS g(low, high) "
    "WHERE m.id BETWEEN g.low AND g.high RETURNING 1) SELECT count(*) FROM gone"
)
