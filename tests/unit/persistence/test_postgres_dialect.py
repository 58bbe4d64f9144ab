"""The SQL tokenizer (``persistence/sql_tokens.py``) and the translation of SQLite's statements into
PostgreSQL's (``persistence/postgres_dialect.py``): what is inside a string literal, a quoted identifier
or a comment is never rewritten; parameters, upserts, ``rowid`` and ``LIMIT`` are; what has no faithful
translation is refused."""

from __future__ import annotations

import pytest
from ottermq.persistence import schema as s
from ottermq.persistence.postgres_dialect import quote_ident, translate
from ottermq.persistence.sql_tokens import (
    BLOB,
    COMMENT,
    NUMBER,
    OP,
    PARAM,
    QUOTED,
    SPACE,
    STRING,
    WORD,
    identifier,
    tokenize,
    untokenize,
)

TRICKY = (
    "SELECT 'it''s a user? -- no', \"we\"\"ird\", [br ack], `back``tick`, x'00ff', 1.5e3, a||b, c::d "
    "FROM t -- user? ?\n/* ? 'x' user */ WHERE user = ?7 AND :name = @at AND $dollar <> ?"
)


def test_tokens_give_the_text_back_exactly() -> None:
    assert untokenize(tokenize(TRICKY)) == TRICKY


def test_each_kind_of_token_is_told_apart() -> None:
    kinds = [(t.kind, t.text) for t in tokenize(TRICKY) if t.kind != SPACE]
    assert kinds[:6] == [
        (WORD, "SELECT"),
        (STRING, "'it''s a user? -- no'"),
        (OP, ","),
        (QUOTED, '"we""ird"'),
        (OP, ","),
        (QUOTED, "[br ack]"),
    ]
    assert (QUOTED, "`back``tick`") in kinds
    assert (BLOB, "x'00ff'") in kinds
    assert (NUMBER, "1.5e3") in kinds
    assert (OP, "||") in kinds and (OP, "::") in kinds
    assert (COMMENT, "-- user? ?") in kinds and (COMMENT, "/* ? 'x' user */") in kinds
    assert [text for kind, text in kinds if kind == PARAM] == ["?7", ":name", "@at", "$dollar", "?"]


def test_quoted_identifiers_name_what_they_quote() -> None:
    names = [identifier(t) for t in tokenize('"we""ird" [br ack] `back``tick` plain') if t.kind != SPACE]
    assert names == ['we"ird', "br ack", "back`tick", "plain"]


@pytest.mark.parametrize(
    "text, what",
    [
        ("SELECT 'open", "string literal"),
        ('SELECT "open', "quoted identifier"),
        ("SELECT [open", "quoted identifier"),
        ("SELECT 1 /* open", "comment"),
    ],
)
def test_what_is_left_open_is_refused(text: str, what: str) -> None:
    with pytest.raises(ValueError, match=f"unterminated {what}"):
        tokenize(text)


def test_literals_and_comments_are_left_alone_and_parameters_numbered() -> None:
    sqlite = (
        "SELECT 'user ? -- not a comment', \"user\" FROM permissions -- which user? ?\n"
        "/* a user ? */ WHERE user = ? AND vhost = ? AND configure = 'it''s ?'"
    )
    assert translate(sqlite) == (
        "SELECT 'user ? -- not a comment', \"user\" FROM permissions -- which user? ?\n"
        "/* a user ? */ WHERE \"user\" = $1 AND vhost = $2 AND configure = 'it''s ?'"
    )


def test_a_reserved_column_is_quoted_in_any_case() -> None:
    assert translate("SELECT User FROM permissions") == 'SELECT "user" FROM permissions'


def test_insert_or_replace_becomes_an_upsert_before_a_closing_semicolon() -> None:
    sqlite = "INSERT OR REPLACE INTO limits (kind, owner, name, value) VALUES (?, ?, ?, ?); -- set 'a' limit"
    assert translate(sqlite) == (
        "INSERT INTO limits (kind, owner, name, value) VALUES ($1, $2, $3, $4) "
        "ON CONFLICT (kind, owner, name) DO UPDATE SET value = EXCLUDED.value; -- set 'a' limit"
    )
    assert translate("REPLACE INTO vhosts (name, description, tags) VALUES (?, 'x', '[]')") == (
        "INSERT INTO vhosts (name, description, tags) VALUES ($1, 'x', '[]') "
        "ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description, tags = EXCLUDED.tags"
    )
    assert translate("INSERT OR IGNORE INTO vhosts (name) VALUES (?)") == (
        "INSERT INTO vhosts (name) VALUES ($1) ON CONFLICT DO NOTHING"
    )


def test_the_stores_upserts_take_the_tables_keys() -> None:
    assert translate(s.PUT_PERMISSION) == (
        'INSERT INTO permissions ("user", vhost, configure, write, read) VALUES ($1, $2, $3, $4, $5) '
        'ON CONFLICT ("user", vhost) DO UPDATE SET configure = EXCLUDED.configure, '
        "write = EXCLUDED.write, read = EXCLUDED.read"
    )
    # a key holding a blob is an md5 index; every column in the key: nothing to update
    assert translate(s.PUT_BINDING).endswith(
        "ON CONFLICT (vhost, source, destination_kind, destination, routing_key, md5(arguments)) DO NOTHING"
    )
    # a dedup key remembered again moves last, as SQLite's REPLACE gives it a new rowid
    assert translate(s.PUT_DEDUP).endswith(
        "ON CONFLICT (vhost, kind, owner, md5(key)) DO UPDATE SET expires_at = EXCLUDED.expires_at, "
        "seq = nextval('dedup_order')"
    )


def test_rowid_limit_and_blob_literals() -> None:
    assert translate(s.SELECT_DEDUP).endswith("FROM dedup ORDER BY seq")
    assert translate("SELECT rowid FROM queues WHERE rowid > ?") == "SELECT id FROM queues WHERE id > $1"
    assert translate(s.SELECT_DELAYED).endswith("ORDER BY id LIMIT CASE WHEN $2 < 0 THEN NULL ELSE $2 END")
    assert translate("SELECT id FROM delayed LIMIT -1") == "SELECT id FROM delayed LIMIT ALL"
    assert translate("SELECT id FROM delayed LIMIT 5") == "SELECT id FROM delayed LIMIT 5"
    assert (
        translate("DELETE FROM dedup WHERE key = x'00Ff'") == "DELETE FROM dedup WHERE key = '\\x00Ff'::BYTEA"
    )
    assert translate("SELECT [name], `tags` FROM vhosts") == 'SELECT "name", "tags" FROM vhosts'


@pytest.mark.parametrize(
    "sqlite, why",
    [
        ("SELECT * FROM queues WHERE id = ?1", "only \\? parameters"),
        ("SELECT * FROM queues WHERE id = :id", "only \\? parameters"),
        ("INSERT INTO messages (id, body) VALUES (?, zeroblob(?))", "zeroblob"),
        ("INSERT OR ABORT INTO vhosts (name) VALUES (?)", "INSERT OR ABORT"),
        ("INSERT OR REPLACE INTO orders (id) VALUES (?)", "not a table of the store"),
        ("INSERT OR REPLACE INTO vhosts VALUES (?, ?, ?)", "needs a column list"),
        ("SELECT j.rowid FROM move_jobs j JOIN move_job_ids i ON i.job = j.id", "more than one table"),
        ("SELECT rowid FROM bindings", "without one"),
        ("SELECT 1 FROM vhosts WHERE x = x'0'", "not a blob literal"),
        ("SELECT 'open", "unterminated"),
    ],
)
def test_what_has_no_faithful_translation_is_refused(sqlite: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        translate(sqlite)


def test_identifiers_are_quoted() -> None:
    assert quote_ident('we"ird') == '"we""ird"'
