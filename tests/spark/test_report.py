"""The report's table functions on the twelve hand-checked records of conftest.RECORDS, then the whole job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

try:
    from ottermq.spark_jobs import report as R
except ImportError:  # no pyspark: the spark fixture skips (or, under CI, fails) every test
    R = None  # type: ignore[assignment]

pytestmark = pytest.mark.spark

ROUTED, DROPPED = "routed", "dropped"


def test_count_by_reason(records_df: Any, rows: Any) -> None:
    assert rows(R.count_by_reason(records_df)) == [
        ("expired", 5),
        ("rejected", 4),
        ("maxlen", 2),
        ("delivery_limit", 1),
    ]


def test_count_by_queue(records_df: Any, rows: Any) -> None:
    # vhost, queue, count, expired, rejected, maxlen, delivery_limit, dropped
    assert rows(R.count_by_queue(records_df)) == [
        ("/", "orders", 6, 1, 4, 0, 1, 1),
        ("/", "payments", 4, 4, 0, 0, 0, 0),
        ("tenant-a", "events", 2, 0, 0, 2, 0, 2),
    ]


def test_count_by_exchange(records_df: Any, rows: Any) -> None:
    assert rows(R.count_by_exchange(records_df)) == [
        ("/", "orders", 6),
        ("/", "payments", 4),
        ("tenant-a", "amq.topic", 2),
    ]


def test_count_by_routing_key_counts_each_key(records_df: Any, rows: Any) -> None:
    assert rows(R.count_by_routing_key(records_df)) == [
        ("/", "orders", "order.created", 6),
        ("/", "payments", "payment.captured", 4),
        ("tenant-a", "amq.topic", "events.click", 2),
        ("/", "orders", "audit", 1),
    ]


def test_count_by_hour_is_utc(records_df: Any, rows: Any, spark: Any) -> None:
    expected = [
        ("2024-05-01T00:00Z", "rejected", 3),
        ("2024-05-01T01:00Z", "delivery_limit", 1),
        ("2024-05-01T01:00Z", "expired", 2),
        ("2024-05-01T02:00Z", "expired", 2),
        ("2024-05-01T02:00Z", "maxlen", 2),
        ("2024-05-02T01:00Z", "expired", 1),
        ("2024-05-02T01:00Z", "rejected", 1),
    ]
    assert rows(R.count_by_hour(records_df)) == expected
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        assert rows(R.count_by_hour(records_df)) == expected
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")


def test_count_by_outcome(records_df: Any, rows: Any) -> None:
    assert rows(R.count_by_outcome(records_df)) == [
        (ROUTED, None, 9),
        (DROPPED, "no_dlx", 2),
        (DROPPED, "cycle", 1),
    ]


def test_count_by_policy(records_df: Any, rows: Any) -> None:
    from pyspark.sql import functions as F

    # payments' dead-lettering comes from a policy, orders' from its arguments (policy null)
    tagged = records_df.withColumn(
        "policy", F.when(F.col("queue") == "payments", F.lit("pay-dlx")).otherwise(F.lit(None))
    )
    table = rows(R.count_by_policy(tagged))
    assert [(vhost, policy) for vhost, policy, *_ in table] == [
        (vhost, policy) for vhost, policy, *_ in sorted(table, key=lambda r: (-r[2], r[0], r[1] or ""))
    ]
    counts = {(vhost, policy): count for vhost, policy, count, *_ in table}
    payments = records_df.filter(F.col("queue") == "payments").count()
    assert counts[("/", "pay-dlx")] == payments
    assert sum(counts.values()) == records_df.count()
    reasons = {(vhost, policy): dict(zip(R.REASONS, rest, strict=True)) for vhost, policy, _c, *rest in table}
    assert sum(reasons[("/", "pay-dlx")].values()) == payments


def test_time_in_queue_overall(records_df: Any, rows: Any) -> None:
    # 11 records with enqueued_ms: 10 20 30 100 200 300 400 500 1010 1050 5000
    assert rows(R.time_in_queue(records_df)) == [(11, 300, 1050, 5000, 5000)]


def test_time_in_queue_by_queue(records_df: Any, rows: Any) -> None:
    assert rows(R.time_in_queue(records_df, ["vhost", "queue"])) == [
        ("/", "orders", 6, 200, 1050, 1050, 1050),  # 10 100 200 300 400 1050
        ("/", "payments", 3, 1010, 5000, 5000, 5000),  # 500 1010 5000 (record 8 has no enqueue time)
        ("tenant-a", "events", 2, 20, 30, 30, 30),
    ]


def test_time_in_queue_of_nothing(records_df: Any, rows: Any) -> None:
    assert rows(R.time_in_queue(records_df.limit(0))) == [(0, None, None, None, None)]


def test_time_in_queue_histogram(records_df: Any, rows: Any) -> None:
    counts = {label: count for _, label, _, _, count in rows(R.time_in_queue_histogram(records_df))}
    assert list(counts) == [label for label, _, _ in R.HISTOGRAM_BUCKETS]
    assert counts == {label: 0 for label in counts} | {"10-100ms": 3, "0.1-1s": 5, "1-10s": 3}


def test_expiry_lateness(records_df: Any, rows: Any) -> None:
    # expired: 5 (late 50), 6 (late 4000), 7 (early: -500), 8 (unmeasurable), 11 (late 10)
    assert rows(R.expiry_lateness(records_df)) == [(5, 4, 1, 50, 4000, 4000, 4000)]
    assert rows(R.expiry_lateness(records_df, ["vhost", "queue"])) == [
        ("/", "payments", 4, 3, 1, 10, 4000, 4000, 4000),
        ("/", "orders", 1, 1, 0, 50, 50, 50, 50),
    ]


def test_expiry_lateness_ignores_non_numeric_expiration(records_df: Any, rows: Any) -> None:
    from pyspark.sql import functions as F

    odd = records_df.withColumn("original_expiration", F.lit("soon"))
    assert rows(R.expiry_lateness(odd)) == [(5, 0, 0, None, None, None, None)]


def test_retry_loops(records_df: Any, rows: Any, data: Any) -> None:
    T0, HOUR, MIN = data.T0, data.HOUR, data.MIN
    # every death of a looping message in its queue counts (m1: death counts 1, 3, 3; m2: 4, then 1);
    # id-less deaths cannot be linked: only the one that reached the threshold (death_count 5) counts
    assert rows(R.retry_loops(records_df)) == [
        ("tenant-a", "events", None, 1, 5, ["maxlen"], T0 + 2 * HOUR + 3 * MIN, T0 + 2 * HOUR + 3 * MIN),
        (
            "/",
            "orders",
            "m2",
            2,
            4,
            ["delivery_limit", "rejected"],
            T0 + HOUR + 5 * MIN,
            T0 + 25 * HOUR + 30 * MIN,
        ),
        ("/", "orders", "m1", 3, 3, ["rejected"], T0 + 10 * MIN, T0 + 30 * MIN),
    ]
    assert [r[2] for r in rows(R.retry_loops(records_df, threshold=5))] == [None]


def test_top_message_ids(records_df: Any, rows: Any) -> None:
    # message_id, count, queues, max_death_count
    assert rows(R.top_message_ids(records_df, 3)) == [("m1", 3, 1, 3), ("m2", 2, 1, 4), ("m5", 2, 1, 1)]


def test_top_content_types(records_df: Any, rows: Any) -> None:
    assert rows(R.top_content_types(records_df)) == [
        ("application/json", 8, 24),
        ("text/plain", 2, 1003),
        (None, 2, 6),
    ]


def test_top_header_values(records_df: Any, rows: Any) -> None:
    assert rows(R.top_header_values(records_df, "x-message-type")) == [
        (None, 9),
        ("Click", 2),
        ("PaymentCaptured", 1),
    ]
    assert rows(R.top_header_values(records_df, "attempt")) == [(None, 11), ("3", 1)]


def test_overview(records_df: Any, rows: Any, data: Any) -> None:
    T0, HOUR, MIN = data.T0, data.HOUR, data.MIN
    assert rows(R.overview(records_df)) == [(12, T0 + 10 * MIN, T0 + 25 * HOUR + 30 * MIN, 2, 3, 9, 3, 1033)]


def test_report_main_writes_everything(spark: Any, archive_dir: Path, tmp_path: Path, capsys: Any) -> None:
    bad = archive_dir.parent / (archive_dir.name + "-with-bad-line")
    if not bad.exists():
        import shutil

        shutil.copytree(archive_dir, bad)
        with (bad / "2024-05-01" / "00" / "deadletters-0.jsonl").open("a") as f:
            f.write('{"schema": 1, "time_ms": 17145\n')
    out = tmp_path / "report"
    from ottermq.spark_jobs import cli

    argv = [str(bad), "--out", str(out), "--type-header", "x-message-type", "--top", "2"]
    assert cli.report_main([*argv, "--complete-only"]) == 0  # the file still being written left out

    summary = json.loads((out / "summary.json").read_text())
    assert summary["records"] == 12
    assert summary["bad_lines"] == 1
    assert summary["input"]["corrupt"] == 1
    assert summary["input"]["bad_files"][0]["sample"] == '{"schema": 1, "time_ms": 17145'
    assert summary["by_reason"] == {"expired": 5, "rejected": 4, "maxlen": 2, "delivery_limit": 1}
    assert summary["by_outcome"] == {"routed": 9, "dropped": 3}
    assert summary["by_drop_reason"] == {"no_dlx": 2, "cycle": 1}
    assert summary["time_in_queue_ms"] == {
        "count": 11,
        "p50_ms": 300,
        "p90_ms": 1050,
        "p99_ms": 5000,
        "max_ms": 5000,
    }
    assert summary["expiry_lateness_ms"]["early"] == 1
    assert [q["queue"] for q in summary["top"]["queues"]] == ["orders", "payments"]  # --top 2
    assert summary["table_rows"]["retry_loops"] == 3
    assert summary["first_death"] == "2024-05-01T00:10:00.000Z"
    assert sorted(summary["charts"]) == [
        "charts/deaths_by_queue.png",
        "charts/deaths_per_hour.png",
        "charts/time_in_queue.png",
    ]

    for chart in summary["charts"]:
        assert (out / chart).read_bytes().startswith(b"\x89PNG")
    report_md = (out / "report.md").read_text()
    assert "![Deaths over time by reason](charts/deaths_per_hour.png)" in report_md
    assert "| vhost | queue | count |" in report_md
    assert "1 more rows in the CSV/Parquet table" in report_md  # by_queue cut to --top 2
    assert "| p50_ms | p90_ms | p99_ms | max_ms |" in report_md  # ms columns hold ms numbers
    assert "| 300 | 1,050 | 5,000 | 5,000 |" in report_md
    report_html = (out / "report.html").read_text()  # self-contained: charts inlined, no file links
    assert report_html.count('src="data:image/png;base64,') == 3 and "charts/" not in report_html
    assert "<th>vhost</th><th>queue</th><th>count</th>" in report_html

    lines = (out / "tables" / "retry_loops.csv").read_text().splitlines()
    assert lines[0] == "vhost,queue,message_id,deaths,max_death_count,reasons,first_ms,last_ms"
    assert lines[3].startswith("/,orders,m1,3,3,rejected,")
    by_queue = spark.read.parquet(str(out / "tables" / "by_queue.parquet")).collect()
    assert [tuple(r)[:3] for r in by_queue] == [
        ("/", "orders", 6),
        ("/", "payments", 4),
        ("tenant-a", "events", 2),
    ]
    assert "dead letters: 12 (1 lines skipped)" in capsys.readouterr().out


def test_report_main_reads_the_complete_lines_of_files_still_being_written(
    spark: Any, archive_dir: Path, tmp_path: Path, caplog: Any
) -> None:
    """The archive's ``.jsonl.part`` file (one record of queue ``partial``) is read by default."""
    out = tmp_path / "report"
    with caplog.at_level("INFO", logger="ottermq.spark_jobs.report"):
        assert R.main([str(archive_dir), "--out", str(out), "--no-charts"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["records"] == 13
    assert "partial" in [q["queue"] for q in summary["top"]["queues"]]
    assert (
        "1 archive file(s) still being written: their 1 complete line(s) so far are read too" in caplog.text
    )
    assert (archive_dir / "2024-05-01" / "00" / "deadletters-9.jsonl.part").exists()  # left as it was


def test_report_main_missing_archive(spark: Any, tmp_path: Path) -> None:
    assert R.main([str(tmp_path / "nope"), "--out", str(tmp_path / "out"), "--no-charts"]) == 2


def test_spark_csv_writes_what_write_csv_writes(spark: Any, tmp_path: Path) -> None:
    from ottermq.spark_jobs.table_files import spark_csv, write_csv
    from pyspark.sql.types import ArrayType, BooleanType, LongType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("name", StringType()),
            StructField("n", LongType()),
            StructField("flag", BooleanType()),
            StructField("keys", ArrayType(StringType())),
        ]
    )
    rows = [
        ("plain", 1, True, ["a", "b"]),
        ('with "quotes"', -2, False, []),
        ("comma, inside", None, None, None),
        ("line\nbreak", 3, True, ["x", None, "y"]),
        ("  spaces  ", 4, False, ["semi;colon"]),
        ("", 0, None, [""]),
        (None, 5, True, ["ü", "✓"]),
    ]
    df = spark.createDataFrame(rows, schema).coalesce(1)
    assert spark_csv(spark, df, str(tmp_path / "spark.csv"))
    write_csv(spark, str(tmp_path / "python.csv"), df.columns, rows)
    assert (tmp_path / "spark.csv").read_bytes() == (tmp_path / "python.csv").read_bytes()
    assert not (tmp_path / "spark.csv.spark").exists()
    doubles = spark.createDataFrame([(1.5,)], "x double")
    assert not spark_csv(spark, doubles, str(tmp_path / "d.csv"))  # floats are left to write_csv


def test_big_table_paths_write_the_same_files(
    spark: Any, archive_dir: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    """Tables over the collect limits (written by Spark, CSV by Spark) give the same files as small ones."""
    from ottermq.spark_jobs import table_files

    R.run_report(spark, str(archive_dir), str(tmp_path / "small"), charts=False)
    monkeypatch.setattr(table_files, "SEND_BACK_LIMIT", 1)  # 2..3 rows: written again by Spark
    monkeypatch.setattr(table_files, "COLLECT_LIMIT", 3)  # more: written by Spark, read back, CSV by Spark
    R.run_report(spark, str(archive_dir), str(tmp_path / "big"), charts=False)
    small, big = tmp_path / "small" / "tables", tmp_path / "big" / "tables"
    names = sorted(p.name for p in small.glob("*.csv"))
    assert names == sorted(p.name for p in big.glob("*.csv")) and len(names) == 17
    for name in names:
        assert (big / name).read_bytes() == (small / name).read_bytes(), name
        table = name.removesuffix(".csv") + ".parquet"
        read = spark.read.parquet
        assert read(str(big / table)).collect() == read(str(small / table)).collect(), table


def test_local_frame_is_create_dataframe_without_python_workers(spark: Any) -> None:
    """The report's tables go to Spark as a JSON literal: same rows, same schema (nullability too)."""
    from ottermq.spark_jobs.table_files import local_frame
    from pyspark.sql.types import ArrayType, DoubleType, LongType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("name", StringType(), True),
            StructField("count", LongType(), False),
            StructField("keys", ArrayType(StringType(), False), True),
            StructField("ratio", DoubleType(), True),
        ]
    )
    rows = [
        ("plain", 1, ["a", "b"], 0.1),
        ('quo"te\nnew line ü ✓ 𝄞', 2**62, [], None),
        (None, -5, None, 1e-300),
        ("", 0, ["x"], float("nan")),
    ]
    frame = local_frame(spark, rows, schema)
    assert frame.schema == schema
    want = spark.createDataFrame(rows, schema).collect()
    got = frame.collect()
    assert [tuple(r) for r in got][:3] == [tuple(r) for r in want][:3]
    assert got[3][3] != got[3][3]  # NaN
    assert local_frame(spark, [], schema).collect() == []
