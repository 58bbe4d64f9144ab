"""docs/configuration.md's settings tables are generated from ``broker/config.py``: every ``Settings``
field (its variable, default and description) and the admin commands' ``OTTERMQ_ADMIN_*`` variables.

The page must hold exactly what :func:`settings_table` and :func:`admin_table` render between the
``<!-- settings: begin -->`` / ``<!-- settings: end -->`` (and ``admin``) markers. After changing a
setting, rewrite the page with ``UPDATE_DOCS=1 .venv/bin/pytest tests/unit/docs``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ottermq.broker.config import ADMIN_DEFAULTS, Settings, env_name
from pydantic_core import PydanticUndefined

PAGE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"

# Descriptions are written for `ottermq serve --help`; on the page, references to the old README
# become links and project-internal references are dropped.
_REWRITES = (
    (
        re.compile(r"see 'Changing a password' in docs/configuration.md"),
        "see [Changing a password](#changing-a-password)",
    ),
)


def _default(info: Any) -> str:
    if info.default_factory is not None:
        value = info.default_factory()
    else:
        value = "" if info.default is PydanticUndefined else info.default
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(value)
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _cell(text: str) -> str:
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def settings_table() -> str:
    """Every broker setting: variable, default, description."""
    rows = ["| variable | default | what |", "|---|---|---|"]
    for field, info in Settings.model_fields.items():
        default = _default(info)
        shown = f"`{default}`" if default else "(empty)"
        rows.append(f"| `{env_name(field)}` | {shown} | {_cell(info.description or '')} |")
    return "\n".join(rows)


def admin_table() -> str:
    """The admin commands' connection variables."""
    rows = ["| variable | default |", "|---|---|"]
    rows += [f"| `{name}` | `{default}` |" for name, default in ADMIN_DEFAULTS.items()]
    return "\n".join(rows)


def _generated(text: str, name: str, table: str) -> str:
    begin, end = f"<!-- {name}: begin -->\n", f"\n<!-- {name}: end -->"
    start, stop = text.index(begin) + len(begin), text.index(end)
    return text[:start] + table + text[stop:]


def expected_page() -> str:
    text = PAGE.read_text()
    text = _generated(text, "settings", settings_table())
    return _generated(text, "admin", admin_table())


def test_the_configuration_page_lists_every_setting_as_config_py_describes_it() -> None:
    expected = expected_page()
    if os.environ.get("UPDATE_DOCS") and expected != PAGE.read_text():
        PAGE.write_text(expected)
    assert PAGE.read_text() == expected, (
        "docs/configuration.md is not what broker/config.py says; rewrite it with"
        " UPDATE_DOCS=1 .venv/bin/pytest tests/unit/docs"
    )


def test_every_setting_has_a_description() -> None:
    assert [f for f, info in Settings.model_fields.items() if not info.description] == []


def test_the_tables_name_no_issue_numbers() -> None:
    assert not re.search(r"\bissue\b", settings_table() + admin_table(), re.I)
