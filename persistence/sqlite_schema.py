"""SQLite's side of the schema: the DDL of ``tables`` in SQLite's dialect, ``PRAGMA user_version``
migrations, the checks before a file is opened, and transactions.

Rules:
- ``PRAGMA user_version`` is the store schema version (``tables.SCHEMA_VERSION``). A database newer
  than ``SCHEMA_VERSION`` is refused before anything is written to it; an older one is migrated step
  by step (``MIGRATIONS[v]`` turns version ``v - 1`` into ``v``: it creates the tables and columns
  ``tables`` says version ``v`` added) in one transaction. To change the schema, change ``tables``.
- The DDL is ``tables`` rendered (``create_table``): an ``integer`` primary key of one column is the
  rowid alias (``INTEGER PRIMARY KEY``), a table with ``rowid=False`` is ``WITHOUT ROWID``. What every
  version rendered is checked against the DDL it shipped with (``test_schema_history.py``).
- A file that is not SQLite, fails ``PRAGMA quick_check`` or belongs to another application is
  refused with a ``StoreError`` naming it; the file is never deleted, replaced or written.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from . import tables
from .store import StoreError
from .tables import SCHEMA_VERSION, Column, Table

log = logging.getLogger(__name__)

APPLICATION_ID = 0x4F74724D  # "OtrM": PRAGMA application_id of every OtterMQ database
SQLITE_HEADER = b"SQLite format 3\x00"
TYPES = {"text": "TEXT", "integer": "INTEGER", "blob": "BLOB"}


# -- DDL ------------------------------------------------------------------------------------------
def _column(table: Table, column: Column) -> str:
    spec = f"{column.name} {TYPES[column.type]}"
    if table.primary_key == (column.name,):  # a one-column key is written on its column
        return spec + (" PRIMARY KEY" if table.rowid_alias == column.name else " NOT NULL PRIMARY KEY")
    return spec if column.nullable else spec + " NOT NULL"


def create_table(table: Table, version: int) -> list[str]:
    """``CREATE TABLE`` (with its columns as of ``version``) and ``CREATE INDEX`` statements."""
    parts = [_column(table, c) for c in table.columns_at(version)]
    if len(table.primary_key) > 1:
        parts.append(f"PRIMARY KEY ({', '.join(table.primary_key)})")
    if table.unique:
        parts.append(f"UNIQUE ({', '.join(table.unique)})")
    body = ",\n    ".join(parts)
    tail = "" if table.rowid else " WITHOUT ROWID"
    return [
        f"CREATE TABLE {table.name} (\n    {body}\n){tail}",
        *(f"CREATE INDEX {i.name} ON {table.name} ({', '.join(i.columns)})" for i in table.indexes),
    ]


def add_column(table: Table, column: Column) -> str:
    """``ALTER TABLE ... ADD COLUMN`` for a column added to an existing table."""
    return f"ALTER TABLE {table.name} ADD COLUMN {_column(table, column)}"


def ddl(version: int) -> list[str]:
    """The statements turning schema ``version - 1`` into ``version``."""
    created, added = tables.changes(version, version)
    return [
        *(statement for table in created for statement in create_table(table, version)),
        *(add_column(table, column) for table, column in added),
    ]


def _step(version: int) -> Callable[[sqlite3.Connection], None]:
    def step(conn: sqlite3.Connection) -> None:
        for statement in ddl(version):
            conn.execute(statement)
        if version == 1:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")

    step.__doc__ = f"Schema {version}: " + ", ".join(t.name for t in tables.changes(version, version)[0])
    return step


# MIGRATIONS[v] turns schema v - 1 into v (1: the empty database into the first schema).
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    v: _step(v) for v in range(1, SCHEMA_VERSION + 1)
}


# -- opening: checks and migrations ---------------------------------------------------------------
def check_header(path: Path) -> None:
    """Refuse a file that exists and is not a SQLite database, without opening it with SQLite.

    Raises:
        StoreError: the file is unreadable or not a SQLite database (it is left untouched).
    """
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"data file {path} is unreadable ({exc}); refusing to open it") from exc
    if head and head != SQLITE_HEADER:
        raise StoreError(
            f"data file {path} is corrupt or unreadable: it is not a SQLite database; refusing to open "
            "it (the file was left untouched: restore it from a backup or move it away)"
        )


def _corrupt(path: Path, detail: str) -> StoreError:
    return StoreError(
        f"data file {path} is corrupt or unreadable ({detail}); refusing to open it (the file was left "
        "untouched: restore it from a backup or move it away)"
    )


def verify(conn: sqlite3.Connection, path: Path) -> int:
    """Read-only checks before anything is written: owner, schema version, ``PRAGMA quick_check``.

    Returns:
        The database's schema version (0 for a new, empty file).

    Raises:
        StoreError: newer schema, another application's database, corrupt or locked file.
    """
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        count = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"data dir {path} was written by a newer OtterMQ (schema {version}, this version "
                f"understands up to {SCHEMA_VERSION}); refusing to open it"
            )
        if app_id not in (0, APPLICATION_ID) or (version == 0 and count):
            raise StoreError(f"data file {path} is a SQLite database of another program; refusing to open it")
        problems = [row[0] for row in conn.execute("PRAGMA quick_check(5)")]
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise StoreError(f"data file {path} is locked by another process ({exc})") from exc
        raise _corrupt(path, str(exc)) from exc
    except sqlite3.DatabaseError as exc:
        raise _corrupt(path, str(exc)) from exc
    if problems != ["ok"]:
        raise _corrupt(path, "PRAGMA quick_check: " + "; ".join(problems))
    return int(version)


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if any (SQLite may already have rolled it back itself)."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            log.exception("rollback failed")


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``: anything raised inside (or by the commit) rolls it back and
    propagates. A transaction left open by a failed rollback is rolled back first, so it cannot
    wedge the connection."""
    rollback(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def migrate(conn: sqlite3.Connection, path: Path, version: int) -> None:
    """Bring a verified database from ``version`` to ``SCHEMA_VERSION`` in one transaction.

    Raises:
        StoreError: a migration step failed (the database is left at ``version``).
    """
    if version == SCHEMA_VERSION:
        return
    try:
        with transaction(conn):
            for target in range(version + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[target](conn)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except Exception as exc:
        raise StoreError(f"migrating {path} from schema {version} to {SCHEMA_VERSION} failed: {exc}") from exc
    if version:
        log.info("migrated %s from schema %d to %d", path, version, SCHEMA_VERSION)
