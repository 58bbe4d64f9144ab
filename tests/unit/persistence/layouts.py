"""What a database's tables are, read back from the database itself (SQLite's pragmas, PostgreSQL's
catalog), in one form both can be compared in: the schema tests compare what was built, not the DDL
that built it."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

# the logical types (persistence/tables.py), as each database reports its columns' types; written out
# here rather than taken from the code under test, so that a wrong mapping fails
SQLITE_TYPES = {"TEXT": "text", "INTEGER": "integer", "BLOB": "blob"}
POSTGRES_TYPES = {"text": "text", "bigint": "integer", "bytea": "blob"}


@dataclass(frozen=True)
class TableLayout:
    """A table as both databases can state it.

    Attributes:
        columns: ``(name, logical type, nullable)`` in column order.
        keys: every unique column list: the primary key, unique constraints and unique indexes (a
            column hashed in a unique expression index, ``md5(col)``, counts as the column).
        indexes: ``(name, columns)`` of every index that is not unique.
    """

    columns: tuple[tuple[str, str, bool], ...]
    keys: frozenset[tuple[str, ...]]
    indexes: frozenset[tuple[str, tuple[str, ...]]]


def sqlite_layout(conn: sqlite3.Connection) -> dict[str, TableLayout]:
    """Every table of a SQLite database but SQLite's own."""
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    layout = {}
    for table in (n for n in names if not n.startswith("sqlite_")):
        info = conn.execute(f"PRAGMA table_info({table})").fetchall()  # cid, name, type, notnull, dflt, pk
        columns = tuple((r[1], SQLITE_TYPES[r[2]], not r[3] and not r[5]) for r in info)
        keys = set()
        primary = tuple(r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5]))
        if primary:
            keys.add(primary)
        indexes = set()
        for _, index, unique, origin, _ in conn.execute(f"PRAGMA index_list({table})").fetchall():
            cols = tuple(r[2] for r in conn.execute(f"PRAGMA index_info({index})").fetchall())
            if origin == "pk":
                continue  # a WITHOUT ROWID table's primary key, already in keys
            if unique:
                keys.add(cols)
            else:
                indexes.add((index, cols))
        layout[table] = TableLayout(columns, frozenset(keys), frozenset(indexes))
    return layout


def sqlite_pragmas(conn: sqlite3.Connection) -> dict[str, Any]:
    """Everything SQLite says about each table (the history tests compare two SQLite databases
    exactly: rowid or not, column order, declared types, defaults, index names and sort orders)."""
    tables = conn.execute("PRAGMA table_list").fetchall()  # schema, name, type, ncol, wr, strict
    result: dict[str, Any] = {}
    for _, name, kind, ncol, wr, strict in tables:
        if name.startswith("sqlite_") or kind != "table":
            continue
        indexes = [
            (row, conn.execute(f"PRAGMA index_xinfo({row[1]})").fetchall())
            for row in conn.execute(f"PRAGMA index_list({name})").fetchall()
        ]
        info = conn.execute(f"PRAGMA table_xinfo({name})").fetchall()
        result[name] = (ncol, wr, strict, info, sorted(indexes))
    return result


def _column_name(term: str) -> str:
    """An index's key term as the column it keys: ``md5(arguments)`` -> ``arguments``, ``"user"`` ->
    ``user``."""
    name = term.removeprefix("md5(").removesuffix(")") if term.startswith("md5(") else term
    return name[1:-1].replace('""', '"') if name.startswith('"') else name


POSTGRES_COLUMNS = """
SELECT table_name, column_name, data_type, is_nullable = 'YES', collation_name
FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, ordinal_position
"""
POSTGRES_INDEXES = """
SELECT t.relname, i.relname, x.indisunique,
       array(SELECT pg_get_indexdef(x.indexrelid, k, true) FROM generate_series(1, x.indnkeyatts) AS k)
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = $1
"""


Collations = dict[tuple[str, str], str]  # (table, text column) -> its collation


async def postgres_layout(conn: Any, schema: str) -> tuple[dict[str, TableLayout], Collations]:
    """Every table of a PostgreSQL schema, and each text column's collation ``{(table, column): ...}``."""
    columns: dict[str, list[tuple[str, str, bool]]] = {}
    collations = {}
    for table, column, kind, nullable, collation in await conn.fetch(POSTGRES_COLUMNS, schema):
        columns.setdefault(table, []).append(
            (column, POSTGRES_TYPES.get(kind, f"PostgreSQL {kind}"), nullable)
        )
        if kind == "text":
            collations[(table, column)] = collation
    keys: dict[str, set[tuple[str, ...]]] = {t: set() for t in columns}
    indexes: dict[str, set[tuple[str, tuple[str, ...]]]] = {t: set() for t in columns}
    for table, index, unique, terms in await conn.fetch(POSTGRES_INDEXES, schema):
        cols = tuple(_column_name(term) for term in terms)
        (keys[table].add(cols) if unique else indexes[table].add((index, cols)))
    layout = {
        t: TableLayout(tuple(cols), frozenset(keys[t]), frozenset(indexes[t])) for t, cols in columns.items()
    }
    return layout, collations
