"""compact: JSON Lines to date-partitioned Parquet that reads back to the same records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

try:
    from ottermq.spark_jobs import compact, io
except ImportError:  # no pyspark: the spark fixture skips (or, under CI, fails) every test
    compact = io = None  # type: ignore[assignment]

pytestmark = pytest.mark.spark


def _sorted_rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


def test_compact_round_trip(spark: Any, archive_dir: Path, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "compacted"
    assert compact.main([str(archive_dir), "--out", str(out)]) == 0
    assert "compacted 12 records" in capsys.readouterr().out

    assert sorted(p.name for p in out.glob("date=*")) == ["date=2024-05-01", "date=2024-05-02"]
    assert len(list((out / "date=2024-05-02").glob("*.parquet"))) >= 1
    marker = json.loads((out / "_ottermq_compact.json").read_text())
    assert marker["archive_schema"] == 2
    assert [(r["mode"], r["records"], r["bad"]) for r in marker["runs"]] == [("overwrite", 12, 0)]

    from_json, _ = io.read_archive(spark, str(archive_dir))
    from_parquet, bad = io.read_archive(spark, str(out))  # detected as Parquet
    assert bad == 0
    assert from_parquet.columns == from_json.columns
    assert _sorted_rows(from_parquet) == _sorted_rows(from_json)

    # One date re-compacted: the other date is kept, the run is recorded.
    day2 = archive_dir / "2024-05-02"
    compact.compact(spark, str(day2), str(out), mode="overwrite-dates")
    assert io.read_archive(spark, str(out))[0].count() == 12
    compact.compact(spark, str(day2), str(out), mode="append")
    assert io.read_archive(spark, str(out))[0].count() == 14
    marker = json.loads((out / "_ottermq_compact.json").read_text())
    assert [r["mode"] for r in marker["runs"]] == ["overwrite", "overwrite-dates", "append"]


def test_compact_rejects_unknown_mode(spark: Any, archive_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        compact.compact(spark, str(archive_dir), str(tmp_path / "out"), mode="merge")
