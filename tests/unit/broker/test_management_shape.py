"""``columns``/``sort``/``sort_reverse`` shaping and pagination of management GET answers (RabbitMQ's
rules)."""

from __future__ import annotations

import pytest
from aiohttp import web
from ottermq.broker.management.common import page_of, shape

ITEMS = [
    {"name": "b", "messages": 2, "totals": {"a": 1, "b": 2}},
    {"name": "a", "messages": 10, "totals": {"a": 3, "b": 4}},
    {"name": "c", "messages": None},
]


def test_no_parameters_leave_the_body_alone() -> None:
    assert shape(ITEMS, {}) == ITEMS


def test_columns_keep_only_those_fields_including_dotted_ones() -> None:
    assert shape(ITEMS, {"columns": "name,totals.b,missing"}) == [
        {"name": "b", "totals": {"b": 2}},
        {"name": "a", "totals": {"b": 4}},
        {"name": "c"},
    ]


def test_columns_apply_to_a_single_object() -> None:
    assert shape({"x": 1, "y": {"z": 2, "w": 3}}, {"columns": "y.z"}) == {"y": {"z": 2}}


def test_sort_numbers_numerically_missing_last_and_reverse() -> None:
    assert [i["name"] for i in shape(ITEMS, {"sort": "messages"})] == ["b", "a", "c"]
    assert [i["name"] for i in shape(ITEMS, {"sort": "name", "sort_reverse": "true"})] == ["c", "b", "a"]
    assert [i["name"] for i in shape(ITEMS, {"sort": "totals.a"})] == ["b", "a", "c"]


# -- pagination (RabbitMQ's rabbit_mgmt_util pagination) ------------------------------------------

NAMED = [{"name": n} for n in ("PG.d", "other", "pg.a", "pg.b", "pg.c")]


def test_page_filters_case_insensitively_and_counts():
    body = page_of(NAMED, {"page": "2", "page_size": "3", "name": "pg"})
    assert body == {
        "filtered_count": 4,
        "item_count": 1,
        "items": [{"name": "pg.c"}],
        "page": 2,
        "page_count": 2,
        "page_size": 3,
        "total_count": 5,
    }


def test_page_regex_is_searched_ignoring_case():
    body = page_of(NAMED, {"page": "1", "name": r"^pg\.[ad]$", "use_regex": "true"})
    assert [i["name"] for i in body["items"]] == ["PG.d", "pg.a"]


def test_page_sorts_before_cutting_and_picks_columns():
    items = [{"name": "b", "n": 2, "x": 0}, {"name": "a", "n": 3, "x": 0}, {"name": "c", "n": 1, "x": 0}]
    body = page_of(items, {"page": "1", "page_size": "2", "sort": "n", "columns": "name"})
    assert body["items"] == [{"name": "c"}, {"name": "b"}]


@pytest.mark.parametrize(
    "query",
    [{"page": "0"}, {"page": "1", "page_size": "501"}, {"page": "x"}, {"page": "4", "page_size": "2"}],
)
def test_bad_pages_are_400(query):
    with pytest.raises(web.HTTPBadRequest):
        page_of(NAMED, query)
