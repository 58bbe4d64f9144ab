"""How the PostgreSQL store finds its server: a libpq URL, libpq's own ``PG*`` variables for what the URL
leaves out, a password file; and what it refuses (another program's schema, a newer OtterMQ's)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import asyncpg
import pytest
from ottermq.persistence import postgres_sql as pg
from ottermq.persistence.postgres import PostgresStore
from ottermq.persistence.store import QueueRecord, StoreError

from .conftest import drop_schema


def _run_sql(url: str, sql: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())


def test_the_pg_variables_fill_in_what_the_url_leaves_out(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = urlsplit(postgres_url)
    monkeypatch.setenv("PGHOST", str(parts.hostname))
    monkeypatch.setenv("PGPORT", str(parts.port))
    monkeypatch.setenv("PGUSER", str(parts.username))
    monkeypatch.setenv("PGDATABASE", parts.path.lstrip("/"))

    async def main() -> None:
        store = PostgresStore(None, schema="test_pg_variables")
        await store.open()
        assert store.put_queue(QueueRecord("/", "q")) == 1
        await store.close()

    try:
        asyncio.run(main())
    finally:
        drop_schema(postgres_url, "test_pg_variables")


def test_a_schema_of_another_program_is_refused_and_left_alone(postgres_url: str) -> None:
    _run_sql(postgres_url, "CREATE SCHEMA test_foreign; CREATE TABLE test_foreign.orders (id int)")

    async def main() -> None:
        with pytest.raises(StoreError, match="another program"):
            await PostgresStore(postgres_url, schema="test_foreign").open()

    try:
        asyncio.run(main())
    finally:
        drop_schema(postgres_url, "test_foreign")


def test_a_newer_schema_is_refused(postgres_url: str) -> None:
    async def main() -> None:
        store = PostgresStore(postgres_url, schema="test_newer")
        await store.open()
        await store.close()

    async def reopen() -> None:
        with pytest.raises(StoreError, match="newer OtterMQ"):
            await PostgresStore(postgres_url, schema="test_newer").open()

    try:
        asyncio.run(main())
        _run_sql(postgres_url, f"UPDATE test_newer.ottermq_schema SET version = {pg.SCHEMA_VERSION + 1}")
        asyncio.run(reopen())
    finally:
        drop_schema(postgres_url, "test_newer")


def test_an_unreachable_server_is_a_store_error() -> None:
    async def main() -> None:
        with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
            await PostgresStore("postgresql://nobody@127.0.0.1:1/none", schema="x").open()

    asyncio.run(main())
