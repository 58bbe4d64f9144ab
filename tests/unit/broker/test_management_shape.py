"""``columns``/``sort``/``sort_reverse`` shaping of management GET answers (RabbitMQ's rules)."""

from __future__ import annotations

from ottermq.broker.management.common import shape

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
