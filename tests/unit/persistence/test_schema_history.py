"""Old SQLite files keep working: the DDL every schema version (``PRAGMA user_version`` 1-5) shipped with,
kept here as it was written, builds exactly what ``tables`` now renders for that version (every pragma
SQLite has about a table compared), and a file of every older version opens, migrates to what a new
file is created with, and keeps its data. PostgreSQL's history: ``test_postgres_history.py``."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from ottermq.persistence import MessageRecord, SQLiteStore, sqlite_schema

from .layouts import sqlite_pragmas

SEQ_BITS = 44  # message id = (queue id << 44) | seq, in every version

# -- SQLite: the migrations as persistence/schema.py wrote them up to schema 5 ----------------------------
SQLITE_SHIPPED: dict[int, list[str]] = {
    1: """
CREATE TABLE vhosts (
    name TEXT NOT NULL PRIMARY KEY,
    description TEXT NOT NULL,
    tags TEXT NOT NULL                         -- JSON array
) WITHOUT ROWID;
CREATE TABLE users (
    name TEXT NOT NULL PRIMARY KEY,
    password_hash TEXT NOT NULL,
    hashing_algorithm TEXT NOT NULL,
    tags TEXT NOT NULL                         -- JSON array
) WITHOUT ROWID;
CREATE TABLE permissions (
    user TEXT NOT NULL,
    vhost TEXT NOT NULL,
    configure TEXT NOT NULL,
    write TEXT NOT NULL,
    read TEXT NOT NULL,
    PRIMARY KEY (user, vhost)
) WITHOUT ROWID;
CREATE TABLE exchanges (
    vhost TEXT NOT NULL,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    auto_delete INTEGER NOT NULL,
    internal INTEGER NOT NULL,
    arguments BLOB NOT NULL,                   -- AMQP field table, as encoded
    PRIMARY KEY (vhost, name)
) WITHOUT ROWID;
CREATE TABLE queues (
    id INTEGER PRIMARY KEY,                    -- allocated by the store, never 0
    vhost TEXT NOT NULL,
    name TEXT NOT NULL,
    auto_delete INTEGER NOT NULL,
    arguments BLOB NOT NULL,
    expires_at INTEGER,                        -- x-expires deadline, epoch ms
    UNIQUE (vhost, name)
);
CREATE TABLE bindings (
    vhost TEXT NOT NULL,
    source TEXT NOT NULL,
    destination_kind TEXT NOT NULL,            -- 'queue' | 'exchange'
    destination TEXT NOT NULL,
    routing_key TEXT NOT NULL,
    arguments BLOB NOT NULL,
    PRIMARY KEY (vhost, source, destination_kind, destination, routing_key, arguments)
) WITHOUT ROWID;
CREATE INDEX bindings_by_destination ON bindings (vhost, destination_kind, destination);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,                    -- (queue_id << 44) | seq: key, order and handle
    exchange TEXT NOT NULL,
    routing_key TEXT NOT NULL,
    props BLOB NOT NULL,                       -- content-header property octets, as published
    body BLOB NOT NULL,
    enqueued_at INTEGER NOT NULL,              -- epoch ms
    deadline INTEGER,                          -- epoch ms, NULL = never expires
    extra_keys TEXT,                           -- JSON array of CC/BCC keys, NULL = none
    deliveries INTEGER                         -- NULL = never delivered, else delivery_count
)
""".split(";"),
    2: [
        """CREATE TABLE policies (
            vhost TEXT NOT NULL,
            name TEXT NOT NULL,
            operator INTEGER NOT NULL,             -- 1: an operator policy
            pattern TEXT NOT NULL,
            apply_to TEXT NOT NULL,
            priority INTEGER NOT NULL,
            definition TEXT NOT NULL,              -- JSON object
            PRIMARY KEY (vhost, name, operator)
        ) WITHOUT ROWID"""
    ],
    3: [
        """CREATE TABLE limits (
            kind TEXT NOT NULL,                    -- 'vhost' or 'user'
            owner TEXT NOT NULL,
            name TEXT NOT NULL,                    -- max-connections, max-queues, max-channels
            value INTEGER NOT NULL,
            PRIMARY KEY (kind, owner, name)
        ) WITHOUT ROWID"""
    ],
    4: [
        """CREATE TABLE delayed (
            id INTEGER PRIMARY KEY,                -- assigned by the store: publish order
            vhost TEXT NOT NULL,
            exchange TEXT NOT NULL,
            due INTEGER NOT NULL,                  -- epoch ms
            delay INTEGER NOT NULL,                -- ms, as published
            routing_key TEXT NOT NULL,
            props BLOB NOT NULL,
            body BLOB NOT NULL,
            extra_keys TEXT                        -- JSON array of CC/BCC keys, NULL = none
        )""",
        "CREATE INDEX delayed_by_exchange ON delayed (vhost, exchange)",
        """CREATE TABLE dedup (
            vhost TEXT NOT NULL,
            kind TEXT NOT NULL,                    -- 'exchange' or 'queue'
            owner TEXT NOT NULL,
            key BLOB NOT NULL,                     -- the header value with its type tag
            expires_at INTEGER,                    -- epoch ms, NULL = until evicted
            UNIQUE (vhost, kind, owner, key)       -- rowid order = the order keys were remembered
        )""",
    ],
    5: [
        """CREATE TABLE move_jobs (
            id INTEGER PRIMARY KEY,
            vhost TEXT NOT NULL,
            queue TEXT NOT NULL,
            spec TEXT NOT NULL,                    -- JSON: selection without ids, target, options
            state TEXT NOT NULL,
            selected INTEGER NOT NULL,
            moved INTEGER NOT NULL,
            unroutable INTEGER NOT NULL,
            skipped INTEGER NOT NULL,
            refused INTEGER NOT NULL,
            error TEXT,
            started INTEGER NOT NULL,              -- epoch ms
            finished INTEGER                       -- epoch ms, NULL while running or paused
        )""",
        """CREATE TABLE move_job_ids (
            job INTEGER PRIMARY KEY,
            ids BLOB NOT NULL                      -- 8 bytes per id, big-endian, sorted
        )""",
    ],
    6: [
        """CREATE TABLE parameters (
            vhost TEXT NOT NULL,
            component TEXT NOT NULL,               -- 'shovel'
            name TEXT NOT NULL,
            value TEXT NOT NULL,                   -- the JSON value
            PRIMARY KEY (vhost, component, name)
        ) WITHOUT ROWID""",
    ],
}


def shipped_sqlite(conn: sqlite3.Connection, version: int) -> None:
    """Build schema ``version`` as the OtterMQ of that version did, and mark it so."""
    for v in range(1, version + 1):
        for statement in SQLITE_SHIPPED[v]:
            conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {sqlite_schema.APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {version}")


def test_sqlite_versions_ship_and_migrate_in_order() -> None:
    assert sorted(SQLITE_SHIPPED) == list(sqlite_schema.MIGRATIONS) == list(range(1, 7))
    assert sqlite_schema.SCHEMA_VERSION == 6  # a new version: add its DDL above as it ships


@pytest.mark.parametrize("version", range(1, 7))
def test_each_sqlite_version_builds_what_it_shipped_with(version: int) -> None:
    shipped, rendered = sqlite3.connect(":memory:"), sqlite3.connect(":memory:")
    shipped_sqlite(shipped, version)
    for v in range(1, version + 1):
        sqlite_schema.MIGRATIONS[v](rendered)
    assert sqlite_pragmas(rendered) == sqlite_pragmas(shipped)


@pytest.mark.parametrize("version", range(1, 6))
def test_a_sqlite_file_of_every_older_version_opens_with_its_data(tmp_path: Path, version: int) -> None:
    path = tmp_path / "ottermq.db"
    conn = sqlite3.connect(path)
    shipped_sqlite(conn, version)
    conn.execute("INSERT INTO vhosts VALUES ('/', '', '[]')")
    conn.execute("INSERT INTO queues VALUES (1, '/', 'q', 0, x'', NULL)")
    conn.execute(
        "INSERT INTO messages (id, exchange, routing_key, props, body, enqueued_at) "
        "VALUES (?, '', 'k', x'', x'6869', 1)",
        (1 << SEQ_BITS | 1,),
    )
    conn.commit()
    conn.close()

    async def main() -> None:
        store = SQLiteStore(path)
        await store.open()
        definitions = await store.load_definitions()
        assert [(q.id, q.name) for q in definitions.queues] == [(1, "q")]
        assert [m.body async for batch in store.iter_messages(1) for m in batch] == [b"hi"]
        assert store.insert_message(MessageRecord(1, 0, "", "k", b"", b"", 2)) == 1 << SEQ_BITS | 2
        await store.close()

    asyncio.run(main())
    fresh = sqlite3.connect(":memory:", isolation_level=None)
    sqlite_schema.migrate(fresh, Path(":memory:"), 0)
    migrated = sqlite3.connect(path)
    assert migrated.execute("PRAGMA user_version").fetchone() == (sqlite_schema.SCHEMA_VERSION,)
    assert sqlite_pragmas(migrated) == sqlite_pragmas(fresh)
