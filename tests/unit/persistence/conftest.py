"""Fixtures: the contract suite runs against SQLiteStore (on tmp_path), MemoryStore and PostgresStore (a
schema of its own per test, on the throwaway server ``postgres_url`` gives)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ottermq.persistence.engine as engine
import pytest
from ottermq.persistence import MemoryStore, SQLiteStore
from ottermq.persistence.batching import BatchingStore
from ottermq.persistence.postgres import PostgresStore

AnyStore = MemoryStore | SQLiteStore | PostgresStore
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """``TEST_POSTGRES_URL`` (``make test`` starts one server for every test process), or a
    server started for this session by ``.ci/postgres.py``; fails (not skips) when PostgreSQL is not
    installed."""
    url = os.environ.get("TEST_POSTGRES_URL")
    if url:
        yield url
        return
    script = [sys.executable, str(ROOT / ".ci" / "postgres.py")]
    started = subprocess.run([*script, "start"], capture_output=True, text=True, check=False)
    if started.returncode:
        pytest.fail(f"cannot start a PostgreSQL for the tests:\n{started.stdout}{started.stderr}")
    url, directory = started.stdout.split()
    try:
        yield url
    finally:
        subprocess.run([*script, "stop", directory], check=False)


def drop_schema(url: str, schema: str) -> None:
    async def drop() -> None:
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())


@pytest.fixture(params=["sqlite", "memory", "postgresql"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def new_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[], AnyStore]]:
    """Make a store on the same data: a new SQLiteStore on one file, a new PostgresStore on one schema,
    or the same MemoryStore (closing and reopening it is the in-memory "restart")."""
    memory = MemoryStore()
    url = request.getfixturevalue("postgres_url") if kind == "postgresql" else ""
    schema = f"test_{uuid.uuid4().hex[:12]}"

    def make() -> AnyStore:
        if kind == "postgresql":
            return PostgresStore(url, schema=schema)
        return SQLiteStore(tmp_path / "ottermq.db") if kind == "sqlite" else memory

    yield make
    if kind == "postgresql":
        drop_schema(url, schema)


@pytest.fixture
def fail_next_batch(monkeypatch: pytest.MonkeyPatch) -> Callable[[BatchingStore], None]:
    """Make the next batch fail as a full disk would (SQLite and memory run ``engine``'s SQL;
    PostgreSQL fails as a dropped connection does)."""

    def arm(store: BatchingStore) -> None:
        if isinstance(store, PostgresStore):
            real_apply = PostgresStore._apply

            async def lost(self: PostgresStore, conn: Any, ops: Any) -> None:
                monkeypatch.setattr(PostgresStore, "_apply", real_apply)
                raise ConnectionResetError("connection reset by peer (simulated)")

            monkeypatch.setattr(PostgresStore, "_apply", lost)
            return
        real = engine._executemany

        def full(conn: sqlite3.Connection, statement: str, params: list[tuple[Any, ...]]) -> None:
            monkeypatch.setattr(engine, "_executemany", real)
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(engine, "_executemany", full)

    return arm
