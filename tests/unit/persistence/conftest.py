"""Fixtures: the contract suite runs against SQLiteStore (on tmp_path) and MemoryStore."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ottermq.persistence.sqlite as sqlite_module
import pytest
from ottermq.persistence import MemoryStore, SQLiteStore
from ottermq.persistence.memory import BatchingStore

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
    """Make the next batch fail as a full disk would (MemoryStore: its ``fail_batches`` hook)."""

    def arm(store: BatchingStore) -> None:
        if isinstance(store, MemoryStore):
            store.fail_batches = 1
            return
        real = sqlite_module._executemany

        def full(conn: sqlite3.Connection, statement: str, params: list[tuple[Any, ...]]) -> None:
            monkeypatch.setattr(sqlite_module, "_executemany", real)
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(sqlite_module, "_executemany", full)

    return arm
