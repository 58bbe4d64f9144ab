"""Old PostgreSQL schemas keep working: the DDL every PostgreSQL schema version (1-3) shipped with, kept
here as it was written, builds what ``tables`` and ``postgres_sql`` now render, and a schema of every
version opens, migrates to the newest, keeps its rows and has the same tables as one created new."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest
from ottermq.persistence import postgres_sql
from ottermq.persistence.postgres import PostgresStore
from ottermq.persistence.postgres_dialect import quote_ident
from ottermq.persistence.store import DedupRecord

from .conftest import drop_schema
from .layouts import postgres_layout

SEQ_BITS = 44  # message id = (queue id << 44) | seq, in every version

# the migrations as persistence/postgres_sql.py wrote them up to schema 4
_T = 'TEXT COLLATE "C" NOT NULL'
POSTGRES_SHIPPED: dict[int, str] = {
    1: f"""
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
""",
    2: f"""
CREATE TABLE move_jobs (
    id BIGINT PRIMARY KEY, vhost {_T}, queue {_T}, spec {_T}, state {_T}, selected BIGINT NOT NULL,
    moved BIGINT NOT NULL, unroutable BIGINT NOT NULL, skipped BIGINT NOT NULL, refused BIGINT NOT NULL,
    error TEXT, started BIGINT NOT NULL, finished BIGINT
);
CREATE TABLE move_job_ids (job BIGINT PRIMARY KEY, ids BYTEA NOT NULL)
""",
    3: """
ALTER TABLE ottermq_leader ADD COLUMN renewed_at TIMESTAMPTZ;
CREATE TABLE ottermq_commit (
    id INTEGER PRIMARY KEY CHECK (id = 1), epoch BIGINT NOT NULL, batch BIGINT NOT NULL
);
INSERT INTO ottermq_commit VALUES (1, 0, 0)
""",
    4: f"""
CREATE TABLE parameters (
    vhost {_T}, component {_T}, name {_T}, value {_T}, PRIMARY KEY (vhost, component, name)
)
""",
}


def fence_function(schema: str) -> str:
    """The commit fence, as schema 1 created it."""
    _, fence, _ = postgres_sql.lock_keys(schema)
    return f"""
CREATE OR REPLACE FUNCTION ottermq_fence(mine BIGINT) RETURNS VOID LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared({postgres_sql.LOCK_CLASS}, {fence});
    IF NOT EXISTS (SELECT 1 FROM ottermq_leader WHERE id = 1 AND epoch = mine) THEN
        RAISE EXCEPTION 'leadership epoch % was taken over', mine USING ERRCODE = '{postgres_sql.FENCED}';
    END IF;
END $$"""


async def shipped_postgres(conn: Any, schema: str, version: int) -> None:
    """Build PostgreSQL schema ``version`` in ``schema`` as the OtterMQ of that version did."""
    await conn.execute(f"CREATE SCHEMA {quote_ident(schema)}; SET search_path = {quote_ident(schema)}")
    await conn.execute("CREATE TABLE ottermq_schema (version INTEGER NOT NULL)")
    await conn.execute("INSERT INTO ottermq_schema VALUES ($1)", version)
    for v in range(1, version + 1):
        for statement in POSTGRES_SHIPPED[v].split(";"):
            if statement.strip():
                await conn.execute(statement)
        if v == 1:
            await conn.execute(fence_function(schema))


def test_postgresql_versions_ship_in_order() -> None:
    assert sorted(POSTGRES_SHIPPED) == list(postgres_sql.migrations("x")) == list(range(1, 5))
    assert postgres_sql.SCHEMA_VERSION == 4  # a new version: add its DDL above as it ships


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_a_postgresql_schema_of_every_version_opens_with_its_data(postgres_url: str, version: int) -> None:
    """Built as that version shipped, it opens (migrated to the newest), keeps its rows, and has the
    same tables, columns, keys and indexes as one the current code creates (the collation of three
    nullable text columns, never compared or sorted, stays the default in schemas created before
    every text column got "C": the layouts leave collations out)."""
    old, fresh = f"test_old_{uuid.uuid4().hex[:8]}", f"test_new_{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        conn = await asyncpg.connect(postgres_url)
        try:
            await shipped_postgres(conn, old, version)
            await conn.execute("INSERT INTO vhosts VALUES ('/', '', '[]')")
            await conn.execute("INSERT INTO queues VALUES (1, '/', 'q', 0, '', NULL)")
            await conn.execute(
                "INSERT INTO messages (id, exchange, routing_key, props, body, enqueued_at) "
                "VALUES ($1, '', 'k', '', 'hi', 1)",
                1 << SEQ_BITS | 1,
            )
            await conn.execute("INSERT INTO dedup (vhost, kind, owner, key) VALUES ('/', 'queue', 'q', 'a')")
        finally:
            await conn.close()
        for schema in (old, fresh):
            store = PostgresStore(postgres_url, schema=schema)
            await store.open()
            if schema == old:
                assert [q.name for q in (await store.load_definitions()).queues] == ["q"]
                assert [m.body async for batch in store.iter_messages(1) for m in batch] == [b"hi"]
                store.put_dedup(DedupRecord("/", "queue", "q", b"b", None))
                store.put_dedup(DedupRecord("/", "queue", "q", b"a", None))  # remembered again: now last
                assert [d.key for d in await store.load_dedup()] == [b"b", b"a"]
            await store.close()
        conn = await asyncpg.connect(postgres_url)
        try:
            (migrated, _), (created, _) = await postgres_layout(conn, old), await postgres_layout(conn, fresh)
            assert (
                await conn.fetchval(f"SELECT version FROM {quote_ident(old)}.ottermq_schema")
                == postgres_sql.SCHEMA_VERSION
            )
        finally:
            await conn.close()
        assert migrated == created

    try:
        asyncio.run(main())
    finally:
        drop_schema(postgres_url, old)
        drop_schema(postgres_url, fresh)
