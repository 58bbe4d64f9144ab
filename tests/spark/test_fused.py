"""The fused report aggregations give the reference table functions' rows, in the same order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def reference(records: Any, top: int) -> dict[str, list[dict[str, Any]]]:
    from ottermq.spark_jobs.fused import FUSED_TABLES
    from ottermq.spark_jobs.report import tables

    return {
        t.name: [row.asDict(recursive=True) for row in t.compute(records).collect()]
        for t in tables(top=top)
        if t.name in FUSED_TABLES
    }


def fused(records: Any, top: int) -> dict[str, list[dict[str, Any]]]:
    from ottermq.spark_jobs.fused import fused_rows
    from ottermq.spark_jobs.report import HISTOGRAM_BUCKETS

    return fused_rows(records, top=top, buckets=HISTOGRAM_BUCKETS)


def test_same_rows_as_the_reference_on_every_record_shape(records_df: Any) -> None:
    want, got = reference(records_df, 20), fused(records_df, 20)
    assert {name for name in got if not name.startswith("_")} == set(want)
    for name in want:
        assert got[name] == want[name], name


def test_same_rows_on_a_generated_archive(spark: Any, tmp_path: Path) -> None:
    from ottermq.spark_jobs.generate import write_archive
    from ottermq.spark_jobs.io import read_archive

    write_archive(tmp_path / "a", 5_000, seed=3, span_hours=5)
    records, bad = read_archive(spark, str(tmp_path / "a"))
    records = records.cache()
    try:
        want, got = reference(records, 3), fused(records, 3)
        for name in want:
            assert got[name] == want[name], name
    finally:
        records.unpersist()


def test_an_empty_archive(spark: Any, records_df: Any) -> None:
    empty = records_df.limit(0)
    want, got = reference(empty, 5), fused(empty, 5)
    for name in want:
        assert got[name] == want[name], name
