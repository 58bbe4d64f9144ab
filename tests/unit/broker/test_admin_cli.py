"""Pure parts of the admin subcommands: table formatting and argument parsing."""

from __future__ import annotations

import pytest
from ottermq.broker.cli.admin import cell, format_table
from ottermq.broker.cli.main import main


def test_table_aligns_columns_under_a_dashed_rule() -> None:
    rows = [{"name": "orders", "messages": 12}, {"name": "q", "messages": 0}]
    assert format_table(rows, ["name", "messages"]) == (
        "name    messages\n------  --------\norders  12\nq       0\n"
    )


def test_table_without_items_says_none() -> None:
    assert format_table([], ["name"]) == "(none)\n"


def test_wide_header_sets_the_width_and_trailing_spaces_are_cut() -> None:
    assert format_table([{"a": "x", "long_header": ""}], ["a", "long_header"]) == (
        "a  long_header\n-  -----------\nx\n"
    )


@pytest.mark.parametrize(
    ("item", "column", "text"),
    [
        ({"queue": {"name": "q"}}, "queue.name", "q"),
        ({"queue": None}, "queue.name", ""),
        ({}, "missing", ""),
        ({"durable": True}, "durable", "true"),
        ({"tags": ["administrator", "monitoring"]}, "tags", "administrator,monitoring"),
        ({"arguments": {"b": 1, "a": "x"}}, "arguments", '{"a": "x", "b": 1}'),
        ({"payload": "two\nlines"}, "payload", "two\nlines"),
    ],
)
def test_cell_text(item: dict[str, object], column: str, text: str) -> None:
    assert cell(item, column) == text


def test_newlines_in_values_do_not_break_rows() -> None:
    assert format_table([{"p": "a\nb"}], ["p"]).splitlines() == ["p", "---", "a b"]


def test_unknown_list_kind_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["list", "nodes"])
    assert info.value.code == 2
    assert "invalid choice: 'nodes'" in capsys.readouterr().err


def test_unreachable_api_exits_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "queues", "--url", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ottermq list: cannot reach http://127.0.0.1:9") and err.count("\n") == 1
