"""Reading archives: bad lines are counted per kind and reported, never fatal; files in flight are skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

try:
    from ottermq.spark_jobs import io, storage
except ImportError:  # no pyspark: the spark fixture skips (or, under CI, fails) every test
    io = storage = None  # type: ignore[assignment]

pytestmark = pytest.mark.spark


def test_read_archive_counts_every_kind_of_bad_line(spark: Any, tmp_path: Path, data: Any) -> None:
    good = [data.record(data.T0 + i, 10, message_id=f"ok-{i}") for i in range(3)]
    no_queue = data.record(data.T0 + 5, 10)
    no_queue["queue"] = None
    future = data.record(data.T0 + 6, 10)
    future["schema"] = 3
    no_schema = data.record(data.T0 + 7, 10)
    del no_schema["schema"]
    day = tmp_path / "archive" / "2024-05-01" / "00"
    data.write_lines(
        day / "deadletters-1.jsonl",
        [
            good[0],
            "not json at all",
            good[1],
            '{"schema": 1, "time_ms": "yesterday", "reason": "expired"}',  # wrong type
            "",  # blank lines are not records
            no_queue,
            future,
            no_schema,
        ],
    )
    data.write_lines(
        day / "deadletters-2.jsonl", [good[2], '{"schema": 1, "time_ms": 171452160']
    )  # cut short
    data.write_lines(day / "deadletters-3.jsonl.part", [data.record(data.T0, 1)])  # still being written
    (day / "README.txt").write_text("not an archive file\n")

    scan = io.scan_archive(spark, str(tmp_path / "archive"))
    assert (scan.valid, scan.corrupt, scan.unsupported, scan.invalid) == (3, 3, 2, 1)
    assert scan.bad == 6 and scan.total == 9
    assert sorted(r.message_id for r in scan.records.collect()) == ["ok-0", "ok-1", "ok-2"]
    files = {(b.status, Path(b.file).name, b.count) for b in scan.bad_files}
    assert files == {
        ("corrupt", "deadletters-1.jsonl", 2),
        ("corrupt", "deadletters-2.jsonl", 1),
        ("unsupported", "deadletters-1.jsonl", 2),
        ("invalid", "deadletters-1.jsonl", 1),
    }
    samples = {b.status: b.sample for b in scan.bad_files if b.file.endswith("deadletters-2.jsonl")}
    assert samples == {"corrupt": '{"schema": 1, "time_ms": 171452160'}

    df, bad = io.read_archive(spark, str(tmp_path / "archive"))
    assert bad == 6 and df.count() == 3
    assert df.columns == list(io.FIELDS)


def test_read_archive_accepts_globs_files_and_uris(spark: Any, archive_dir: Path) -> None:
    assert io.read_archive(spark, f"file://{archive_dir}")[0].count() == 12
    assert io.read_archive(spark, str(archive_dir / "2024-05-02" / "*"))[0].count() == 2
    one_file = next((archive_dir / "2024-05-01" / "00").glob("*.jsonl"))
    assert io.read_archive(spark, str(one_file))[0].count() == 2
    assert (
        io.read_archive(spark, [str(archive_dir / "2024-05-01"), str(archive_dir / "2024-05-02")])[0].count()
        == 12
    )


def test_headers_stay_raw_json(records_df: Any) -> None:
    import json

    row = records_df.filter("message_id IS NULL AND death_count = 1").first()
    assert json.loads(row.headers) == {
        "x-message-type": {"t": "S", "v": "Click"},
        "attempt": {"t": "l", "v": 3},
    }


def test_detect_format(spark: Any, tmp_path: Path, archive_dir: Path) -> None:
    assert storage.detect_format(spark, str(archive_dir)) == "json"
    assert storage.detect_format(spark, str(tmp_path / "x.parquet")) == "parquet"
    (tmp_path / "compacted" / "date=2024-05-01").mkdir(parents=True)
    (tmp_path / "compacted" / "date=2024-05-01" / "part-0000.snappy.parquet").write_bytes(b"")
    assert storage.detect_format(spark, str(tmp_path / "compacted")) == "parquet"
    assert storage.detect_format(spark, str(tmp_path / "empty-dir-that-does-not-exist")) == "json"
