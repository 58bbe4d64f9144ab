"""One schema for every store: SQLite's tables (built in memory) and PostgreSQL's (built on the throwaway
server) are read back from the databases and compared: the same tables, columns in the same order,
types (mapped), nullability, keys and indexes. What differs is what ``postgres_dialect``'s rules say
differs, and each difference is checked here by name."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path

import asyncpg
import pytest
from ottermq.persistence import postgres_dialect, postgres_sql, sqlite_schema, tables
from ottermq.persistence.postgres import PostgresStore

from .conftest import drop_schema
from .layouts import Collations, TableLayout, postgres_layout, sqlite_layout

POSTGRES_OWN = {"ottermq_schema", "ottermq_leader", "ottermq_commit"}  # the version, the lease, the token


def sqlite_tables() -> dict[str, TableLayout]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        sqlite_schema.migrate(conn, Path(":memory:"), 0)
        return sqlite_layout(conn)
    finally:
        conn.close()


def postgres_tables(url: str) -> tuple[dict[str, TableLayout], Collations]:
    schema = f"test_equal_{uuid.uuid4().hex[:8]}"

    async def main() -> tuple[dict[str, TableLayout], Collations]:
        store = PostgresStore(url, schema=schema)
        await store.open()
        await store.close()
        conn = await asyncpg.connect(url)
        try:
            return await postgres_layout(conn, schema)
        finally:
            await conn.close()

    try:
        return asyncio.run(main())
    finally:
        drop_schema(url, schema)


@pytest.fixture(scope="module")
def postgres(postgres_url: str) -> tuple[dict[str, TableLayout], Collations]:
    return postgres_tables(postgres_url)


def test_sqlite_builds_every_table_of_tables() -> None:
    built = sqlite_tables()
    assert set(built) == {t.name for t in tables.TABLES}
    for table in tables.TABLES:
        assert [c[0] for c in built[table.name].columns] == list(table.names)


def test_both_databases_have_the_same_tables_columns_types_keys_and_indexes(
    postgres: tuple[dict[str, TableLayout], Collations],
) -> None:
    sqlite, (pg, _) = sqlite_tables(), postgres
    assert set(pg) - set(sqlite) == POSTGRES_OWN
    store_tables = {name: layout for name, layout in pg.items() if name not in POSTGRES_OWN}
    # dedup: a rowid table without a rowid alias; PostgreSQL's seq stands for the rowid
    dedup = store_tables["dedup"]
    assert dedup.columns[-1] == ("seq", "integer", False)
    store_tables["dedup"] = TableLayout(dedup.columns[:-1], dedup.keys, dedup.indexes)
    assert store_tables == sqlite


def test_postgresql_keys_of_blobs_are_md5_indexes_and_text_sorts_as_sqlite(
    postgres_url: str, postgres: tuple[dict[str, TableLayout], Collations]
) -> None:
    _, collations = postgres
    store_text = {k: v for k, v in collations.items() if k[0] not in POSTGRES_OWN}
    assert store_text and set(store_text.values()) == {"C"}  # byte order, as SQLite's

    async def main() -> dict[str, str]:
        store = PostgresStore(url, schema=schema)
        await store.open()
        await store.close()
        conn = await asyncpg.connect(url)
        try:
            query = "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1"
            rows = await conn.fetch(query, schema)
            return {r["indexname"]: r["indexdef"] for r in rows}
        finally:
            await conn.close()

    url, schema = postgres_url, f"test_keys_{uuid.uuid4().hex[:8]}"
    try:
        indexes = asyncio.run(main())
    finally:
        drop_schema(url, schema)
    assert "md5(arguments)" in indexes["bindings_key"] and "UNIQUE" in indexes["bindings_key"]
    assert "md5(key)" in indexes["dedup_key"] and "UNIQUE" in indexes["dedup_key"]


def test_every_statement_prepares_on_postgresql(postgres_url: str) -> None:
    """Every translated statement is valid SQL on the server (the contract tests run most; this
    catches one no test runs)."""
    schema = f"test_prepare_{uuid.uuid4().hex[:8]}"

    async def main() -> list[str]:
        store = PostgresStore(postgres_url, schema=schema)
        await store.open()
        await store.close()
        conn = await asyncpg.connect(postgres_url, server_settings={"search_path": schema})
        failed = []
        try:
            for sqlite_text, text in postgres_sql.STATEMENTS.items():
                try:
                    await conn.prepare(text)
                except asyncpg.PostgresError as exc:
                    failed.append(f"{sqlite_text}: {exc}")
        finally:
            await conn.close()
        return failed

    try:
        assert asyncio.run(main()) == []
    finally:
        drop_schema(postgres_url, schema)


def test_the_names_postgresql_reserves_are_quoted(postgres_url: str) -> None:
    async def main() -> set[str]:
        conn = await asyncpg.connect(postgres_url)
        try:
            rows = await conn.fetch("SELECT word FROM pg_get_keywords() WHERE catcode IN ('R', 'T')")
            return {r["word"] for r in rows}
        finally:
            await conn.close()

    reserved = asyncio.run(main())
    assert reserved <= postgres_dialect.RESERVED  # the list the dialect keeps is the server's
    names = {name for t in tables.TABLES for name in (t.name, *t.names)}
    assert names & reserved == set(postgres_dialect.QUOTED_NAMES) == {"user"}


def test_postgresql_history_brings_every_store_version_once_in_order() -> None:
    brought = [v for span in postgres_sql.HISTORY.values() if span for v in range(span[0], span[1] + 1)]
    assert brought == list(range(1, tables.SCHEMA_VERSION + 1))
    assert list(postgres_sql.HISTORY) == list(range(1, postgres_sql.SCHEMA_VERSION + 1))


def test_a_table_the_rules_refuse_fails_at_import() -> None:
    ok = tables.Table("t", 1, (tables.integer("id"), tables.text("note", nullable=True)), primary_key=("id",))
    tables.check((ok,))
    bad = [
        tables.Table("t", 1, (tables.integer("id"),)),  # no key
        tables.Table("t", 1, (tables.integer("id"),), primary_key=("nope",)),
        tables.Table("t", 1, (tables.text("k", nullable=True),), unique=("k",)),
        tables.Table("t", 1, (tables.integer("id"), tables.text("late", since=2)), primary_key=("id",)),
        tables.Table(
            "t",
            1,
            (tables.integer("id"), tables.text("late", True, since=2), tables.text("x")),
            primary_key=("id",),
        ),
        tables.Table("t", 1, (tables.text("k"),), unique=("k",), rowid=False),
    ]
    for table in bad:
        with pytest.raises(ValueError):
            tables.check((table,))


def test_a_column_added_later_is_added_by_both_databases() -> None:
    later = tables.Table(
        "t", 1, (tables.integer("id"), tables.text("note", nullable=True, since=2)), primary_key=("id",)
    )
    assert "note" not in sqlite_schema.create_table(later, 1)[0]
    assert "note" in sqlite_schema.create_table(later, 2)[0]
    assert sqlite_schema.add_column(later, later.columns[1]) == "ALTER TABLE t ADD COLUMN note TEXT"
    assert "note" not in postgres_dialect.create_table(later, 1)[0]
