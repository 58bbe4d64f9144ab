"""Sorting rows on the driver exactly as Spark's ``orderBy`` sorts them.

The fused report aggregations (:mod:`ottermq.spark_jobs.fused`) split a few collected results into
many tables and must give each table's rows in the order its reference function's ``orderBy`` gives:
ascending puts nulls first, descending puts them last, and strings compare by code point. A sort
key is ``(column, descending, nulls first)``, made by :func:`asc`, :func:`desc` or
:func:`asc_nulls_last` (Spark's ``asc``, ``desc`` and ``asc_nulls_last``); :func:`ordered` sorts by them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cmp_to_key
from typing import Any

__all__ = ["Key", "asc", "asc_nulls_last", "desc", "ordered"]

Key = tuple[str, bool, bool]  # (column, descending, nulls first)


def asc(name: str) -> Key:
    """Spark's ``asc``: ascending, nulls first."""
    return (name, False, True)


def desc(name: str) -> Key:
    """Spark's ``desc``: descending, nulls last."""
    return (name, True, False)


def asc_nulls_last(name: str) -> Key:
    """Spark's ``asc_nulls_last``."""
    return (name, False, False)


def ordered(rows: list[dict[str, Any]], keys: Sequence[Key]) -> list[dict[str, Any]]:
    """``rows`` sorted by ``keys`` (the first key first), as ``orderBy`` with those keys sorts them."""

    def compare(a: dict[str, Any], b: dict[str, Any]) -> int:
        for name, descending, nulls_first in keys:
            x, y = a[name], b[name]
            if x == y:
                continue
            if x is None or y is None:
                return (-1 if x is None else 1) * (1 if nulls_first else -1)
            result = -1 if x < y else 1
            return -result if descending else result
        return 0

    return sorted(rows, key=cmp_to_key(compare))
