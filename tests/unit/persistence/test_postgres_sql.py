"""The PostgreSQL store's statements (``persistence/postgres_sql.py``): every statement of ``schema`` has a
translation with the same parameters, in PostgreSQL's spelling (how each construct translates:
``test_postgres_dialect.py``)."""

from __future__ import annotations

import re

import pytest
from ottermq.persistence import postgres_sql as pg
from ottermq.persistence import schema as s

STATEMENT_NAMES = sorted(
    name
    for name in dir(s)
    if name.isupper()
    and isinstance(getattr(s, name), str)
    and getattr(s, name).split(" ", 1)[0] in ("INSERT", "DELETE", "UPDATE", "SELECT")
)


def test_every_statement_of_the_schema_is_translated() -> None:
    assert len(STATEMENT_NAMES) > 40
    missing = [name for name in STATEMENT_NAMES if getattr(s, name) not in pg.STATEMENTS]
    assert missing == []


@pytest.mark.parametrize("name", STATEMENT_NAMES)
def test_a_translation_keeps_the_parameters_in_order(name: str) -> None:
    sqlite, postgres = getattr(s, name), pg.STATEMENTS[getattr(s, name)]
    assert "?" not in postgres and "INSERT OR REPLACE" not in postgres and "rowid" not in postgres
    numbers = [int(n) for n in re.findall(r"\$(\d+)", postgres)]
    assert sorted(set(numbers)) == list(range(1, sqlite.count("?") + 1))
    assert re.search(r'(?<!")\buser\b(?!")', postgres) is None  # a reserved word in PostgreSQL


def test_lock_keys_differ_per_schema_and_per_purpose() -> None:
    a, b = pg.lock_keys("ottermq"), pg.lock_keys("ottermq_worker1")
    assert len(set(a) | set(b)) == 6
    assert all(0 <= key < 2**31 for key in a + b)  # pg_advisory_lock(int4, int4)
