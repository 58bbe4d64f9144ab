"""The fused report aggregations give the reference table functions' rows, in the same order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def reference(records: Any, top: int, threshold: int = 3) -> dict[str, list[dict[str, Any]]]:
    from ottermq.spark_jobs.fused import FUSED_TABLES, ID_TABLES
    from ottermq.spark_jobs.report_tables import tables

    return {
        t.name: [row.asDict(recursive=True) for row in t.compute(records).collect()]
        for t in tables(retry_threshold=threshold, top=top)
        if t.name in FUSED_TABLES | ID_TABLES
    }


def fused(records: Any, top: int, threshold: int = 3) -> dict[str, list[dict[str, Any]]]:
    from ottermq.spark_jobs.fused import fused_rows
    from ottermq.spark_jobs.report_tables import HISTOGRAM_BUCKETS

    return fused_rows(records, top=top, buckets=HISTOGRAM_BUCKETS, threshold=threshold)


def test_same_rows_as_the_reference_on_every_record_shape(records_df: Any) -> None:
    for threshold in (1, 3, 5):
        want, got = reference(records_df, 20, threshold), fused(records_df, 20, threshold)
        assert {name for name in got if not name.startswith("_")} == set(want)
        for name in want:
            assert got[name] == want[name], (name, threshold)


@pytest.mark.parametrize("shape", ["retry-loops", "uniform"])
def test_same_rows_on_a_generated_archive(spark: Any, tmp_path: Path, shape: str) -> None:
    from ottermq.spark_jobs.generate import write_archive
    from ottermq.spark_jobs.io import read_archive

    write_archive(tmp_path / "a", 5_000, seed=3, span_hours=5, shape=shape)
    records, bad = read_archive(spark, str(tmp_path / "a"))
    records = records.cache()
    try:
        want, got = reference(records, 3), fused(records, 3)
        assert len(want["retry_loops"]) > 50
        for name in want:
            assert got[name] == want[name], name
    finally:
        records.unpersist()


def test_an_empty_archive(spark: Any, records_df: Any) -> None:
    empty = records_df.limit(0)
    want, got = reference(empty, 5), fused(empty, 5)
    for name in want:
        assert got[name] == want[name], name


def test_unknown_reasons_in_a_loop(spark: Any, records_df: Any, tmp_path: Path) -> None:
    """A reason outside the broker's four (hand-written archives) still lists: the report then takes
    the reference function for retry loops."""
    from ottermq.spark_jobs.report import run_report
    from pyspark.sql import functions as F

    odd = records_df.withColumn(
        "reason", F.when(F.col("message_id") == "m2", F.lit("zz-custom")).otherwise(F.col("reason"))
    )
    odd.write.parquet(str(tmp_path / "odd.parquet"))
    summary = run_report(spark, str(tmp_path / "odd.parquet"), str(tmp_path / "out"), charts=False)
    assert [r["reasons"] for r in summary["top"]["retry_loops"] if r["message_id"] == "m2"] == [["zz-custom"]]


def test_table_schemas_are_the_reference_ones(records_df: Any) -> None:
    """The rows are written with fused.TABLE_SCHEMAS: exactly what Spark's analysis of the reference gives."""
    from ottermq.spark_jobs.fused import FUSED_TABLES, TABLE_SCHEMAS
    from ottermq.spark_jobs.report_tables import tables

    todo = [t for t in tables(retry_threshold=3, top=20) if t.name in FUSED_TABLES]
    assert set(TABLE_SCHEMAS) == {t.name for t in todo}
    for t in todo:
        assert TABLE_SCHEMAS[t.name] == t.compute(records_df).schema, t.name
