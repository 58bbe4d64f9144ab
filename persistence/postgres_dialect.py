"""The store's tables and statements in PostgreSQL's dialect: the DDL of ``tables``, and ``translate``,
which turns one of ``schema``'s statements (SQLite's dialect) into PostgreSQL's, token by token.

Rules:
- Types: ``text`` is ``TEXT COLLATE "C"`` (byte order, as SQLite's: every ``ORDER BY`` reads back in
  the same order on both stores, and comparisons skip the locale), ``integer`` is ``BIGINT`` (SQLite's
  integers are 64-bit), ``blob`` is ``BYTEA``. ``NOT NULL`` and keys as in ``tables``.
- A key holding a blob (a binding's argument table, a deduplication key) is unique through an ``md5``
  expression index named ``<table>_key``: a B-tree entry must stay under ~2.7 kB, and SQLite has no
  such limit. Other keys are ``PRIMARY KEY`` and ``UNIQUE`` constraints, as on SQLite.
- A rowid table without a rowid alias (``dedup``) gets a column ``seq`` from the sequence
  ``<table>_order``: it stands for SQLite's rowid (``ORDER BY rowid``), drawn on insert and again on
  replace (SQLite's ``REPLACE`` deletes and inserts, so the row gets a new rowid).
- A name of ``tables`` that PostgreSQL reserves (the column ``user``) is quoted, in the DDL and in
  the statements; nothing else is.
- ``translate`` reads tokens (``sql_tokens``): string literals, quoted identifiers and comments pass
  through untouched. ``?`` becomes ``$1``, ``$2``, ... in order; ``INSERT OR REPLACE`` becomes
  ``INSERT ... ON CONFLICT (key) DO UPDATE SET`` the other columns (``DO NOTHING`` when every column
  is the key), ``INSERT OR IGNORE`` ``ON CONFLICT DO NOTHING``; ``rowid`` the table's rowid alias or
  ``seq``; ``LIMIT ?`` (SQLite reads a negative limit as none, PostgreSQL refuses one) ``LIMIT CASE
  WHEN $n < 0 THEN NULL ELSE $n END``; a blob literal ``x'00'`` ``'\\x00'::BYTEA``; ``[name]`` and
  backquoted names ``"name"``. What it cannot translate faithfully (a numbered or named parameter,
  ``zeroblob``, ``rowid`` of a join, another conflict clause) it refuses (``ValueError``).
"""

from __future__ import annotations

from . import tables
from .sql_tokens import (
    BLOB,
    NUMBER,
    OP,
    PARAM,
    QUOTED,
    WORD,
    Token,
    identifier,
    keyword,
    significant,
    tokenize,
    untokenize,
)
from .tables import Column, Table

TYPES = {"text": 'TEXT COLLATE "C"', "integer": "BIGINT", "blob": "BYTEA"}
SEQ = "seq"  # the column standing for the rowid of a rowid table without an alias

# PostgreSQL's reserved key words (pg_get_keywords() with catcode R or T: no bare column or table
# name may be one); tests/unit/persistence/test_schema_equal.py checks them against the server
RESERVED = frozenset(
    """all analyse analyze and any array as asc asymmetric authorization binary both case cast check
    collate collation column concurrently constraint create cross current_catalog current_date
    current_role current_schema current_time current_timestamp current_user default deferrable desc
    distinct do else end except false fetch for foreign freeze from full grant group having ilike in
    initially inner intersect into is isnull join lateral leading left like limit localtime
    localtimestamp natural not notnull null offset on only or order outer overlaps placing primary
    references returning right select session_user similar some symmetric system_user table
    tablesample then to trailing true union unique user using variadic verbose when where window
    with""".split()
)
# the names of tables that need quotes on PostgreSQL
QUOTED_NAMES = frozenset(
    name for t in tables.TABLES for name in (t.name, *t.names) if name.lower() in RESERVED
)


def quote_ident(name: str) -> str:
    """``name`` as a PostgreSQL identifier (double quotes, doubled inside)."""
    return '"' + name.replace('"', '""') + '"'


def ident(name: str) -> str:
    """A name of ``tables`` as PostgreSQL takes it: quoted when it reserves it, else bare."""
    return quote_ident(name) if name in QUOTED_NAMES else name


# -- DDL --------------------------------------------------------------------------------------------
def has_seq(table: Table) -> bool:
    """Whether the table gets a ``seq`` column standing for its rowid (see the module rules)."""
    return table.rowid and table.rowid_alias is None


def hashed_key(table: Table) -> bool:
    """Whether the table's key holds a blob, and so is an ``md5`` expression index."""
    return any(table.column(name).type == "blob" for name in table.key)


def key_terms(table: Table) -> list[str]:
    """The key's columns as its unique index or constraint lists them (``ON CONFLICT``'s target)."""
    hashed = hashed_key(table)
    return [
        f"md5({ident(name)})" if hashed and table.column(name).type == "blob" else ident(name)
        for name in table.key
    ]


def _column(table: Table, column: Column) -> str:
    spec = f"{ident(column.name)} {TYPES[column.type]}"
    if table.primary_key == (column.name,) and not hashed_key(table):
        return spec + " PRIMARY KEY"
    return spec if column.nullable else spec + " NOT NULL"


def create_table(table: Table, version: int) -> list[str]:
    """The statements creating ``table`` (with its columns as of store schema ``version``), its
    sequence, key index and indexes."""
    name = ident(table.name)
    parts = [_column(table, c) for c in table.columns_at(version)]
    before, after = [], []
    if has_seq(table):
        before.append(f"CREATE SEQUENCE {table.name}_order")
        parts.append(f"{SEQ} BIGINT NOT NULL DEFAULT nextval('{table.name}_order')")
    if hashed_key(table):
        after.append(f"CREATE UNIQUE INDEX {table.name}_key ON {name} ({', '.join(key_terms(table))})")
    else:
        if len(table.primary_key) > 1:
            parts.append(f"PRIMARY KEY ({', '.join(map(ident, table.primary_key))})")
        if table.unique:
            parts.append(f"UNIQUE ({', '.join(map(ident, table.unique))})")
    after += [f"CREATE INDEX {i.name} ON {name} ({', '.join(map(ident, i.columns))})" for i in table.indexes]
    return [*before, f"CREATE TABLE {name} (\n    " + ",\n    ".join(parts) + "\n)", *after]


def ddl(first: int, last: int) -> list[str]:
    """The statements creating what store schema versions ``first``..``last`` added."""
    created, added = tables.changes(first, last)
    return [
        *(statement for table in created for statement in create_table(table, last)),
        *(f"ALTER TABLE {ident(t.name)} ADD COLUMN {_column(t, c)}" for t, c in added),
    ]


# -- statements ---------------------------------------------------------------------------------------
def _upsert(table: Table, columns: list[str]) -> str:
    """The ``ON CONFLICT`` clause that makes an insert of ``columns`` replace the row with its key."""
    rest = [f"{ident(c)} = EXCLUDED.{ident(c)}" for c in columns if c not in table.key]
    if has_seq(table):
        rest.append(f"{SEQ} = nextval('{table.name}_order')")
    action = "DO UPDATE SET " + ", ".join(rest) if rest else "DO NOTHING"
    return f" ON CONFLICT ({', '.join(key_terms(table))}) {action}"


def _table(tokens: list[Token], at: int) -> Table:
    name = identifier(tokens[at]) if at < len(tokens) else None
    if name is None or name not in tables.BY_NAME:
        raise ValueError(f"not a table of the store: {tokens[at].text if at < len(tokens) else 'nothing'}")
    return tables.BY_NAME[name]


def translate(statement: str) -> str:
    """``statement`` (SQLite's dialect, one statement) in PostgreSQL's (see the module rules).

    Raises:
        ValueError: a construct with no faithful translation, an unknown table in an upsert or
            beside ``rowid``, or text that does not tokenize (an unclosed string or comment).
    """
    tokens = tokenize(statement)
    sig = significant(tokens)
    words = [keyword(tokens[i]) for i in sig]
    out: dict[int, str] = {}  # token index -> its new text ("" drops it)
    clause = ""

    # INSERT OR REPLACE / OR IGNORE / REPLACE INTO: a plain INSERT with an ON CONFLICT clause
    conflict = ""
    if words[:2] == ["INSERT", "OR"] and len(words) > 2:
        conflict = words[2]
        for i in range(sig[0] + 1, sig[2] + 1):  # " OR REPLACE"
            out[i] = ""
    elif words[:1] == ["REPLACE"]:
        conflict, out[sig[0]] = "REPLACE", "INSERT"
    if conflict == "IGNORE":
        clause = " ON CONFLICT DO NOTHING"
    elif conflict == "REPLACE":
        at = words.index("INTO") if "INTO" in words else len(words)
        table = _table(tokens, sig[at + 1] if at + 1 < len(sig) else len(tokens))
        texts = [tokens[i].text for i in sig]
        if texts[at + 2 : at + 3] != ["("] or ")" not in texts[at + 2 :]:
            raise ValueError(f"INSERT OR REPLACE needs a column list: {statement}")
        close = texts.index(")", at + 2)
        listed = [identifier(tokens[sig[k]]) for k in range(at + 3, close) if tokens[sig[k]].text != ","]
        clause = _upsert(table, [name for name in listed if name is not None])
    elif conflict:
        raise ValueError(f"no PostgreSQL form of INSERT OR {conflict}: {statement}")

    # the tables the statement reads or writes (for rowid)
    named = {
        identifier(tokens[sig[k + 1]])
        for k, word in enumerate(words[:-1])
        if word in ("FROM", "INTO", "UPDATE", "JOIN")
    }
    number = 0
    for k, i in enumerate(sig):
        token = tokens[i]
        if i in out:
            continue
        if token.kind == PARAM:
            if token.text != "?":
                raise ValueError(f"only ? parameters translate, not {token.text}: {statement}")
            number += 1
            out[i] = f"${number}"
            if k and words[k - 1] == "LIMIT":  # SQLite: a negative limit is none; PostgreSQL: NULL is
                out[i] = f"CASE WHEN ${number} < 0 THEN NULL ELSE ${number} END"
        elif token.kind == OP and token.text == "-" and k and words[k - 1] == "LIMIT":
            following = tokens[sig[k + 1]] if k + 1 < len(sig) else None
            if following is None or following.kind != NUMBER:
                raise ValueError(f"no PostgreSQL form of this LIMIT: {statement}")
            out[i], out[sig[k + 1]] = "ALL", ""
        elif token.kind == BLOB:
            digits = token.text[2:-1]
            if len(digits) % 2 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"not a blob literal: {token.text}")
            out[i] = f"'\\x{digits}'::BYTEA"
        elif token.kind == QUOTED and token.text[0] in "[`":
            out[i] = quote_ident(identifier(token) or "")
        elif token.kind == WORD:
            lower = token.text.lower()
            if lower == "zeroblob":
                raise ValueError(f"zeroblob is SQLite's alone: {statement}")
            if lower in ("rowid", "_rowid_", "oid"):
                out[i] = _rowid(named, statement)
            elif lower in QUOTED_NAMES:  # SQLite's names are case-blind, PostgreSQL's quoted ones not
                out[i] = quote_ident(lower)

    if clause:  # at the end of the statement, before a closing semicolon
        last = sig[-1] if tokens[sig[-1]].text != ";" else sig[-2]
        out[last] = out.get(last, tokens[last].text) + clause
    return untokenize([Token(t.kind, out.get(i, t.text)) for i, t in enumerate(tokens)])


def _rowid(named: set[str | None], statement: str) -> str:
    if len(named) != 1:
        raise ValueError(f"rowid of more than one table: {statement}")
    (name,) = named
    table = tables.BY_NAME.get(name or "")
    if table is None or not table.rowid:
        raise ValueError(f"rowid of a table without one: {statement}")
    return ident(table.rowid_alias or SEQ)
