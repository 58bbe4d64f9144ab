"""Why messages die: the report's findings (causes in words, with share and trend), the ``by_limit``
table over archive schema 2 (``limit``, ``limit_value``, ``limit_source``; schema-1 lines read as
null and fall back to ``reason``), and retry loops that count every death of a message.

Hand-made archives: each number below is worked out from the records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

T0 = 1_714_521_600_000  # 2024-05-01T00:00:00Z
MIN = 60_000
HOUR = 3_600_000


def v2(record: dict[str, Any], limit: str | None, value: int | None, source: str | None) -> dict[str, Any]:
    return {**record, "schema": 2, "limit": limit, "limit_value": value, "limit_source": source}


def causes_archive(data: Any) -> list[dict[str, Any]]:
    """65 deaths over four hours (the last quarter from T0 + 3 h): four causes."""
    out = []
    ttl = {"reason": "expired", "queue": "orders", "policy": "ttl-60s"}
    for i in range(10):  # earlier: one every 18 min
        out.append(v2(data.record(T0 + i * 18 * MIN, 60_000, **ttl), "message-ttl", 60_000, "policy"))
    for i in range(14):  # recent: 14 in the last hour, the last at T0 + 4 h
        out.append(
            v2(
                data.record(T0 + 3 * HOUR + 8 * MIN + i * 4 * MIN, 60_000, **ttl),
                "message-ttl",
                60_000,
                "policy",
            )
        )
    pay = {
        "reason": "delivery_limit",
        "queue": "payments",
        "exchange": "payments",
        "policy": "payments-limits",
    }
    for i in range(18):
        out.append(v2(data.record(T0 + i * 10 * MIN, 5, **pay), "delivery-limit", 3, "policy"))
    for i in range(2):
        out.append(
            v2(data.record(T0 + 3 * HOUR + 30 * MIN + i * MIN, 5, **pay), "delivery-limit", 3, "policy")
        )
    for i in range(15):
        out.append(v2(data.record(T0 + 1 + i * 12 * MIN, 5), None, None, None))  # rejected, no limit
    for i in range(5):
        out.append(v2(data.record(T0 + 3 * HOUR + 10 * MIN + i * MIN, 5), None, None, None))
    out.append(data.record(T0 + HOUR, 60_000, reason="expired"))  # schema 1: no limit fields at all
    return out


def test_trend_and_cause_words(pyspark_installed: None) -> None:
    from ottermq.spark_jobs.render import cause_text, trend

    hour = 3_600_000
    assert trend(10, 14, hour) == "rising"  # 14 in a quarter of the span against 10 in three quarters
    assert trend(30, 15, hour) == "rising"  # exactly 1.5 times the earlier rate
    assert trend(30, 10, hour) == "steady"
    assert trend(30, 6, hour) == "falling"  # 0.6 of the earlier rate
    assert trend(0, 25, hour) == "new"
    assert trend(10, 9, hour) is None  # fewer than 20 deaths
    assert trend(100, 100, 9 * 60_000) is None  # a span under 10 minutes
    base = {"vhost": "/", "queue": "orders", "policy": None}
    assert (
        cause_text(
            {
                **base,
                "reason": "expired",
                "limit": "message-ttl",
                "limit_value": 60000,
                "limit_source": "policy",
                "policy": "ttl-60s",
            }
        )
        == "expired by the queue's message-ttl of 60000 ms (policy ttl-60s) in queue orders"
    )
    assert (
        cause_text(
            {
                **base,
                "reason": "expired",
                "limit": "expiration",
                "limit_value": 5000,
                "limit_source": "message",
            }
        )
        == "expired by the message's own expiration of 5000 ms in queue orders"
    )
    assert (
        cause_text(
            {
                **base,
                "vhost": "t",
                "reason": "maxlen",
                "limit": "max-length-bytes",
                "limit_value": 1024,
                "limit_source": "operator-policy",
            }
        )
        == "overflowed the queue's max-length-bytes of 1024 bytes (operator policy) in queue orders "
        "in vhost t"
    )
    assert (
        cause_text(
            {**base, "reason": "maxlen", "limit": "max-length", "limit_value": 10, "limit_source": "argument"}
        )
        == "overflowed the queue's max-length of 10 messages (queue argument) in queue orders"
    )
    assert cause_text(
        {**base, "reason": "rejected", "limit": None, "limit_value": None, "limit_source": None}
    ) == ("rejected by a consumer (basic.reject or basic.nack without requeue) in queue orders")


def test_report_opens_with_the_findings(spark: Any, data: Any, tmp_path: Path) -> None:
    from ottermq.spark_jobs.report import run_report

    data.write_lines(tmp_path / "a" / "2024-05-01" / "00" / "deadletters-1.jsonl", causes_archive(data))
    summary = run_report(spark, str(tmp_path / "a"), str(tmp_path / "out"), charts=False)
    assert summary["records"] == 65
    want = [
        "37% expired by the queue's message-ttl of 60000 ms (policy ttl-60s) in queue orders, rising",
        "31% rejected by a consumer (basic.reject or basic.nack without requeue) in queue orders, steady",
        "31% reached the queue's delivery-limit of 3 deliveries (policy payments-limits) in queue payments, "
        "falling",
        "1.5% expired (no limit recorded) in queue orders",
    ]
    assert summary["findings"] == want
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert list(written)[0] == "findings" and written["findings"] == want
    assert written["recent_from"] == "2024-05-01T03:00:00.000Z"
    first = written["causes"][0]
    assert (first["count"], first["earlier"], first["recent"], first["share"], first["trend"]) == (
        24,
        10,
        14,
        0.3692,
        "rising",
    )
    report = (tmp_path / "out" / "report.md").read_text()
    assert report.startswith(
        "# Dead-letter report\n\n## Findings\n\n- 37% expired by the queue's message-ttl"
    )
    assert "last quarter of the archive's time span (from 2024-05-01T03:00:00.000Z)" in report
    assert "<li>37% expired by the queue&#x27;s message-ttl" in (tmp_path / "out" / "report.html").read_text()

    by_limit = (tmp_path / "out" / "tables" / "by_limit.csv").read_text().splitlines()
    assert by_limit == [
        "cause,limit_value,limit_source,reason,count",
        "message-ttl,60000,policy,expired,24",
        "delivery-limit,3,policy,delivery_limit,20",
        "rejected,,,rejected,20",
        "expired,,,expired,1",  # the schema-1 line: no limit, its reason instead
    ]
    assert summary["by_limit"][0] == {
        "cause": "message-ttl",
        "limit_value": 60000,
        "limit_source": "policy",
        "reason": "expired",
        "count": 24,
    }


def test_schema_2_fields_read_compact_and_fall_back(spark: Any, data: Any, tmp_path: Path, rows: Any) -> None:
    """Schema-1 and schema-2 lines side by side; Parquet compacted before schema 2 reads as null."""
    from ottermq.spark_jobs import compact, io, report

    lines = causes_archive(data)
    data.write_lines(tmp_path / "a" / "2024-05-01" / "00" / "deadletters-1.jsonl", lines)
    scan = io.scan_archive(spark, str(tmp_path / "a"))
    assert (scan.valid, scan.bad) == (65, 0)
    assert rows(report.count_by_limit(scan.records)) == [
        ("message-ttl", 60000, "policy", "expired", 24),
        ("delivery-limit", 3, "policy", "delivery_limit", 20),
        ("rejected", None, None, "rejected", 20),
        ("expired", None, None, "expired", 1),
    ]
    compact.compact(spark, str(tmp_path / "a"), str(tmp_path / "p"))
    kept = io.read_archive(spark, str(tmp_path / "p"))[0]
    assert sorted(rows(kept.select("limit", "limit_value", "limit_source").distinct()), key=repr) == sorted(
        [("message-ttl", 60000, "policy"), ("delivery-limit", 3, "policy"), (None, None, None)], key=repr
    )
    # Parquet written before schema 2 has no limit columns at all
    old = spark.read.parquet(str(tmp_path / "p")).drop("limit", "limit_value", "limit_source")
    old.write.parquet(str(tmp_path / "v1.parquet"))
    from_v1 = io.read_archive(spark, str(tmp_path / "v1.parquet"))[0]
    assert from_v1.count() == 65
    assert rows(from_v1.select("limit", "limit_value", "limit_source").distinct()) == [(None, None, None)]
    assert rows(report.count_by_limit(from_v1))[0] == ("expired", None, None, "expired", 25)


def loops_archive(data: Any) -> list[dict[str, Any]]:
    rec = data.record
    return [
        # loop-1 dies three times in orders (death_count 1, 2, 3) and once in orders.retry between
        rec(T0, 10, message_id="loop-1"),
        rec(T0 + 5_000, 5_000, message_id="loop-1", queue="orders.retry", reason="expired"),
        rec(T0 + MIN, 10, message_id="loop-1", death_count=2),
        rec(T0 + 2 * MIN, 10, message_id="loop-1", death_count=3),
        # loop-2: twice only (below the threshold of 3)
        rec(T0 + 3 * MIN, 10, message_id="loop-2"),
        rec(T0 + 4 * MIN, 10, message_id="loop-2", death_count=2),
        # loop-3: six deaths, the last one by its delivery limit
        *[
            rec(T0 + (10 + i) * MIN, 10, message_id="loop-3", queue="jobs", death_count=i + 1)
            for i in range(5)
        ],
        rec(T0 + 20 * MIN, 10, message_id="loop-3", queue="jobs", reason="delivery_limit"),
        # the same id in two queues, once each
        rec(T0 + 30 * MIN, 10, message_id="fan", queue="payments"),
        rec(T0 + 30 * MIN + 5, 10, message_id="fan", queue="audit"),
        # no id: two unrelated messages, one of them at death_count 4
        rec(T0 + 40 * MIN, 10, queue="jobs", death_count=4),
        rec(T0 + 41 * MIN, 10, queue="jobs", death_count=1),
    ]


def test_retry_loops_count_every_death(spark: Any, data: Any, tmp_path: Path, rows: Any) -> None:
    from ottermq.spark_jobs import io, report
    from ottermq.spark_jobs.fused_ids import fused_id_rows

    data.write_lines(tmp_path / "a" / "2024-05-01" / "00" / "deadletters-1.jsonl", loops_archive(data))
    records = io.read_archive(spark, str(tmp_path / "a"))[0].cache()
    want = [
        # loop-3 reached death_count 5 (rejected) and 1 (delivery_limit): all six deaths count
        ("/", "jobs", "loop-3", 6, 5, ["delivery_limit", "rejected"], T0 + 10 * MIN, T0 + 20 * MIN),
        ("/", "jobs", None, 1, 4, ["rejected"], T0 + 40 * MIN, T0 + 40 * MIN),  # the id-less one at 4 only
        ("/", "orders", "loop-1", 3, 3, ["rejected"], T0, T0 + 2 * MIN),  # 3 deaths, not 1
    ]
    assert rows(report.retry_loops(records)) == want
    fused = fused_id_rows(records, threshold=3, top=3)
    assert [tuple(r.values()) for r in fused["retry_loops"]] == want
    assert rows(report.top_message_ids(records, 3)) == [
        ("loop-3", 6, 1, 5),
        ("loop-1", 4, 2, 3),
        ("fan", 2, 2, 1),
    ]
    assert [tuple(r.values()) for r in fused["top_message_ids"]] == [
        ("loop-3", 6, 1, 5),
        ("loop-1", 4, 2, 3),
        ("fan", 2, 2, 1),
    ]
    assert [r[2] for r in rows(report.retry_loops(records, threshold=2))] == [
        "loop-3",
        None,
        "loop-1",
        "loop-2",
    ]

    summary = report.run_report(spark, str(tmp_path / "a"), str(tmp_path / "out"), charts=False)
    csv = (tmp_path / "out" / "tables" / "retry_loops.csv").read_text().splitlines()
    assert csv[1].startswith("/,jobs,loop-3,6,5,delivery_limit;rejected,")
    assert csv[3].startswith("/,orders,loop-1,3,3,rejected,")
    assert summary["table_rows"]["retry_loops"] == 3
    assert summary["findings"][-1] == (
        "3 retry loops (a message dying 3+ times in one queue); the worst, loop-3, died 6 times in queue "
        "jobs (death_count up to 5)"
    )
    records.unpersist()
