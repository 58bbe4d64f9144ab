"""The PostgreSQL store's database layout: DDL, the version table, migrations and the statement dialect.

Rules:
- The statements are ``schema``'s (the SQLite store's), translated once at import by ``translate``:
  ``?`` becomes ``$n``, ``INSERT OR REPLACE`` becomes ``INSERT ... ON CONFLICT (key) DO UPDATE`` (or
  ``DO NOTHING`` when every column is the key), the column ``user`` is quoted, and the few statements
  whose SQLite form has no PostgreSQL equivalent (``rowid`` order, ``LIMIT -1``) are spelled out in
  ``_SPECIAL``. ``STATEMENTS`` maps every write and read statement of ``schema`` to its PostgreSQL
  text, so a store queues the very same ``(statement, params)`` ops for either database and one
  lookup per run of ops picks the dialect. A statement added to ``schema`` without a translation
  fails ``tests/unit/persistence/test_postgres_sql.py``.
- Text columns use the ``"C"`` collation: byte order, as SQLite's, so every ``ORDER BY`` reads back
  in the same order on both stores (and comparisons skip the locale).
- Keys that may be long (a binding's argument table, a deduplication key) are unique through an
  ``md5`` expression index: a B-tree entry must stay under ~2.7 kB, and SQLite has no such limit.
- The version lives in the table ``ottermq_schema`` (one row). A schema holding tables but no version
  table belongs to another program and is refused; a newer version is refused before anything is
  written; an older one is migrated step by step (``MIGRATIONS[v]`` turns ``v - 1`` into ``v``) in one
  transaction, under an advisory lock so that brokers starting together migrate once.
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

import re
import zlib

from . import schema as s

SCHEMA_VERSION = 3
LOCK_CLASS = 0x4F74724D  # "OtrM": first key of every advisory lock the brokers take
FENCED = "OT001"  # SQLSTATE raised by ottermq_fence when the epoch moved


def lock_keys(schema: str) -> tuple[int, int, int]:
    """The advisory lock keys (second halves, with ``LOCK_CLASS`` first) of one schema: the
    leadership lock, the fence lock and the migration lock."""
    base = zlib.crc32(schema.encode()) & 0x0FFFFFFF
    return base << 2 | 0, base << 2 | 1, base << 2 | 2


def quote_ident(name: str) -> str:
    """``name`` as a PostgreSQL identifier (double quotes, doubled inside)."""
    return '"' + name.replace('"', '""') + '"'


# -- DDL ------------------------------------------------------------------------------------------
_T = 'TEXT COLLATE "C" NOT NULL'
_V1 = f"""
CREATE TABLE vhosts (name {_T} PRIMARY KEY, description {_T}, tags {_T});
CREATE TABLE users (name {_T} PRIMARY KEY, password_hash {_T}, hashing_algorithm {_T}, tags {_T});
CREATE TABLE permissions (
    "user" {_T}, vhost {_T}, configure {_T}, write {_T}, read {_T}, PRIMARY KEY ("user", vhost)
);
CREATE TABLE exchanges (
    vhost {_T}, name {_T}, type {_T}, auto_delete BIGINT NOT NULL, internal BIGINT NOT NULL,
    arguments BYTEA NOT NULL, PRIMARY KEY (vhost, name)
);
CREATE TABLE queues (
    id BIGINT PRIMARY KEY, vhost {_T}, name {_T}, auto_delete BIGINT NOT NULL, arguments BYTEA NOT NULL,
    expires_at BIGINT, UNIQUE (vhost, name)
);
CREATE TABLE bindings (
    vhost {_T}, source {_T}, destination_kind {_T}, destination {_T}, routing_key {_T},
    arguments BYTEA NOT NULL
);
CREATE UNIQUE INDEX bindings_key ON bindings
    (vhost, source, destination_kind, destination, routing_key, md5(arguments));
CREATE INDEX bindings_by_destination ON bindings (vhost, destination_kind, destination);
CREATE TABLE messages (
    id BIGINT PRIMARY KEY, exchange {_T}, routing_key {_T}, props BYTEA NOT NULL, body BYTEA NOT NULL,
    enqueued_at BIGINT NOT NULL, deadline BIGINT, extra_keys TEXT, deliveries BIGINT
);
CREATE TABLE policies (
    vhost {_T}, name {_T}, operator BIGINT NOT NULL, pattern {_T}, apply_to {_T},
    priority BIGINT NOT NULL, definition {_T}, PRIMARY KEY (vhost, name, operator)
);
CREATE TABLE limits (
    kind {_T}, owner {_T}, name {_T}, value BIGINT NOT NULL, PRIMARY KEY (kind, owner, name)
);
CREATE TABLE delayed (
    id BIGINT PRIMARY KEY, vhost {_T}, exchange {_T}, due BIGINT NOT NULL, delay BIGINT NOT NULL,
    routing_key {_T}, props BYTEA NOT NULL, body BYTEA NOT NULL, extra_keys TEXT
);
CREATE INDEX delayed_by_exchange ON delayed (vhost, exchange);
CREATE SEQUENCE dedup_order;
CREATE TABLE dedup (
    vhost {_T}, kind {_T}, owner {_T}, key BYTEA NOT NULL, expires_at BIGINT,
    seq BIGINT NOT NULL DEFAULT nextval('dedup_order')
);
CREATE UNIQUE INDEX dedup_key ON dedup (vhost, kind, owner, md5(key));
CREATE TABLE ottermq_leader (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch BIGINT NOT NULL,
    holder TEXT,
    lease_until TIMESTAMPTZ,
    failovers BIGINT NOT NULL
);
INSERT INTO ottermq_leader VALUES (1, 0, NULL, NULL, 0)
"""


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


# schema 2: dead-letter move jobs (issue 38), as SQLite's schema 5
_V2 = f"""
CREATE TABLE move_jobs (
    id BIGINT PRIMARY KEY, vhost {_T}, queue {_T}, spec {_T}, state {_T}, selected BIGINT NOT NULL,
    moved BIGINT NOT NULL, unroutable BIGINT NOT NULL, skipped BIGINT NOT NULL, refused BIGINT NOT NULL,
    error TEXT, started BIGINT NOT NULL, finished BIGINT
);
CREATE TABLE move_job_ids (job BIGINT PRIMARY KEY, ids BYTEA NOT NULL)
"""


# schema 3: the lease's last renewal and the commit token (issue 39)
_V3 = """
ALTER TABLE ottermq_leader ADD COLUMN renewed_at TIMESTAMPTZ;
CREATE TABLE ottermq_commit (
    id INTEGER PRIMARY KEY CHECK (id = 1), epoch BIGINT NOT NULL, batch BIGINT NOT NULL
);
INSERT INTO ottermq_commit VALUES (1, 0, 0)
"""


def begin_batch(epoch: int | None, batch: int) -> str:
    """The first round trip of a batch: ``BEGIN``, the fence check when fenced (``epoch``), and the
    commit token ``(epoch or 0, batch)``; one simple query (integers only, no parameters)."""
    fence = "" if epoch is None else f"SELECT ottermq_fence({int(epoch)}); "
    token = f"UPDATE ottermq_commit SET epoch = {int(epoch or 0)}, batch = {int(batch)} WHERE id = 1"
    return f"BEGIN; {fence}{token}"


SELECT_COMMIT_TOKEN = "SELECT epoch, batch FROM ottermq_commit WHERE id = 1"


def migrations(schema: str) -> dict[int, list[str]]:
    """``MIGRATIONS`` of one schema (the fence function names the schema's lock): ``{v: statements}``
    turning schema ``v - 1`` into ``v``."""
    return {
        1: [*(stmt for stmt in _V1.split(";") if stmt.strip()), _fence_function(schema)],
        2: [stmt for stmt in _V2.split(";") if stmt.strip()],
        3: [stmt for stmt in _V3.split(";") if stmt.strip()],
    }


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
# INSERT OR REPLACE: the key ON CONFLICT names (a unique index's columns or expressions)
_CONFLICT = {
    "vhosts": ("name",),
    "users": ("name",),
    "permissions": ("user", "vhost"),
    "exchanges": ("vhost", "name"),
    "queues": ("id",),
    "bindings": ("vhost", "source", "destination_kind", "destination", "routing_key", "md5(arguments)"),
    "policies": ("vhost", "name", "operator"),
    "limits": ("kind", "owner", "name"),
    "dedup": ("vhost", "kind", "owner", "md5(key)"),
    "move_jobs": ("id",),
    "move_job_ids": ("job",),
}
# a replaced dedup key moves to the end of the order, as SQLite's REPLACE gives it a new rowid
_ON_REPLACE = {"dedup": "seq = nextval('dedup_order')"}

_SPECIAL = {  # written in PostgreSQL's dialect
    s.SELECT_DEDUP: "SELECT vhost, kind, owner, key, expires_at FROM dedup ORDER BY seq",
    # LIMIT -1 is "no limit" in SQLite (read_delayed(chunk=-1)); LIMIT NULL is PostgreSQL's
    s.SELECT_DELAYED: s.SELECT_DELAYED.replace("?", "$1", 1).replace(
        "LIMIT ?", "LIMIT CASE WHEN $2 < 0 THEN NULL ELSE $2 END"
    ),
}

_PLACEHOLDER = re.compile(r"\?")
_USER = re.compile(r"\buser\b")
_REPLACE = re.compile(r"INSERT OR REPLACE INTO (\w+) \(([^)]*)\) VALUES")


def _numbered(statement: str) -> str:
    count = iter(range(1, 1000))
    return _PLACEHOLDER.sub(lambda _: f"${next(count)}", statement)


def _upsert(statement: str) -> str:
    match = _REPLACE.search(statement)
    if match is None:
        return statement
    table, columns = match.group(1), [c.strip() for c in match.group(2).split(",")]
    key = _CONFLICT[table]
    keyed = {k.removeprefix("md5(").removesuffix(")") for k in key}  # md5(col) stands for col
    rest = [f"{c} = EXCLUDED.{c}" for c in columns if c not in keyed]
    rest += [_ON_REPLACE[table]] if table in _ON_REPLACE else []
    action = "DO UPDATE SET " + ", ".join(rest) if rest else "DO NOTHING"
    return statement.replace("INSERT OR REPLACE", "INSERT") + f" ON CONFLICT ({', '.join(key)}) {action}"


def translate(statement: str) -> str:
    """``statement`` (one of ``schema``'s) in PostgreSQL's dialect."""
    special = _SPECIAL.get(statement)
    if special is not None:
        return special
    return _USER.sub('"user"', _numbered(_upsert(statement)))


def _statements() -> dict[str, str]:
    texts = (getattr(s, name) for name in dir(s) if name.isupper())
    return {
        text: translate(text)
        for text in texts
        if isinstance(text, str) and text.split(" ", 1)[0] in ("INSERT", "DELETE", "UPDATE", "SELECT")
    }


STATEMENTS: dict[str, str] = _statements()

MESSAGE_COLUMNS = (
    "id",
    "exchange",
    "routing_key",
    "props",
    "body",
    "enqueued_at",
    "deadline",
    "extra_keys",
    "deliveries",
)  # schema.INSERT_MESSAGE's columns, in its order: the COPY of a run of inserts
DELETE_MESSAGE_IDS = "DELETE FROM messages WHERE id = ANY($1::BIGINT[])"  # a run of DELETE_MESSAGE
MAX_SEQ = "SELECT max(id) FROM messages WHERE id BETWEEN $1 AND $2"
MOVE_QUEUE = "UPDATE queues SET id = $1 WHERE id = $2"
MOVE_MESSAGES = "UPDATE messages SET id = id - $1 WHERE id BETWEEN $2 AND $3"
