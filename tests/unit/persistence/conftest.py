"""Fixtures: the contract suite runs against SQLiteStore (on tmp_path) and MemoryStore."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ottermq.persistence.engine as engine
import pytest
from ottermq.persistence import MemoryStore, SQLiteStore
from ottermq.persistence.batching import BatchingStore

AnyStore = MemoryStore | SQLiteStore


@pytest.fixture(params=["sqlite", "memory"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def new_store(kind: str, tmp_path: Path) -> Callable[[], AnyStore]:
    """Make a store on the same data: a new SQLiteStore on one file, or the same MemoryStore
    (closing and reopening it is the in-memory "restart")."""
    memory = MemoryStore()

    def make() -> AnyStore:
        return SQLiteStore(tmp_path / "ottermq.db") if kind == "sqlite" else memory

    return make


@pytest.fixture
def fail_next_batch(monkeypatch: pytest.MonkeyPatch) -> Callable[[BatchingStore], None]:
    """Make the next batch fail as a full disk would (both stores run ``engine``'s SQL)."""

    def arm(store: BatchingStore) -> None:
        real = engine._executemany

        def full(conn: sqlite3.Connection, statement: str, params: list[tuple[Any, ...]]) -> None:
            monkeypatch.setattr(engine, "_executemany", real)
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(engine, "_executemany", full)

    return arm
