"""``ottermq dlq watch``: the streaming job over a live archive (files added while it runs, restart
from the checkpoint without double counting, alerts)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

T0 = 1_714_521_600_000  # 2024-05-01T00:00:00Z
MIN = 60_000


def rec(time_ms: int, reason: str = "expired", queue: str = "orders", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schema": 1,
        "time_ms": time_ms,
        "reason": reason,
        "vhost": "/",
        "queue": queue,
        "exchange": "ex",
        "routing_keys": ["k"],
        "outcome": "routed",
        "drop_reason": None,
        "death_count": 1,
        "enqueued_ms": time_ms - 1500,
        "original_expiration": "1000",
    }
    base.update(fields)
    return base


def write(root: Path, name: str, records: list[dict[str, Any]], hour: str = "2024-05-01/00") -> Path:
    folder = root / hour
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    tmp = path.with_name(path.name + ".part")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    tmp.rename(path)  # as the broker does: a file appears complete
    return path


def minutes(spark: Any, out: Path) -> dict[tuple[int, str, str], int]:
    rows = spark.read.parquet(str(out / "minutes")).collect()
    return {(r["minute_ms"], r["reason"], r["queue"]): r["deaths"] for r in rows}


def run_once(spark: Any, archive: Path, out: Path, **kw: Any) -> Any:
    from ottermq.spark_jobs.watch import start_watch

    queries, handler = start_watch(spark, str(archive), str(out), once=True, quiet=True, **kw)
    for query in queries:
        query.awaitTermination(120)
    return handler


def test_parse_alert() -> None:
    from ottermq.spark_jobs.watch import parse_alert

    rule = parse_alert("reason=expired, queue=orders, rate>100/min")
    assert rule.match == (("reason", "expired"), ("queue", "orders"))
    assert not rule.fires(100) and rule.fires(101)
    assert parse_alert("rate >= 5 / min").fires(5)
    for bad in ("queue=orders", "colour=red,rate>1/min", "rate>lots/min"):
        with pytest.raises(ValueError):
            parse_alert(bad)


def test_restart_from_the_checkpoint_counts_each_file_once(spark: Any, tmp_path: Path) -> None:
    archive, out = tmp_path / "archive", tmp_path / "out"
    write(archive, "a.jsonl", [rec(T0 + 1000), rec(T0 + 2000), rec(T0 + MIN + 5, reason="rejected")])
    write(archive, "b.jsonl", [rec(T0 + 3000, queue="pay")], hour="2024-05-01/01")
    (archive / "2024-05-01" / "00" / "c.jsonl.part").write_text(json.dumps(rec(T0)) + "\n")  # not complete
    run_once(spark, archive, out)
    assert minutes(spark, out) == {
        (T0, "expired", "orders"): 2,
        (T0 + MIN, "rejected", "orders"): 1,
        (T0, "expired", "pay"): 1,
    }
    row = spark.read.parquet(str(out / "minutes")).filter("queue = 'orders' AND reason = 'expired'").first()
    assert row["lateness_p50_ms"] == 500 and row["lateness_p99_ms"] == 500
    # a restart: the old files are not read again, the new one is
    write(archive, "d.jsonl", [rec(T0 + 4000), rec(T0 + 5000, outcome="dropped", drop_reason="no_route")])
    run_once(spark, archive, out)
    assert minutes(spark, out)[(T0, "expired", "orders")] == 4
    drops = spark.read.parquet(str(out / "drops")).collect()
    assert [(r["minute_ms"], r["drop_reason"], r["dropped"]) for r in drops] == [(T0, "no_route", 1)]
    run_once(spark, archive, out)  # nothing new: same totals
    assert sum(minutes(spark, out).values()) == 6


def test_a_new_checkpoint_keeps_two_state_partitions_per_core_not_sparks_200(
    spark: Any, tmp_path: Path
) -> None:
    archive, out = tmp_path / "archive", tmp_path / "out"
    write(archive, "a.jsonl", [rec(T0 + 1000)])
    key, before = "spark.sql.shuffle.partitions", spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set(key, "200")  # Spark's default: fitted (local[1]: 4)
    try:
        run_once(spark, archive, out)
        assert spark.conf.get(key) == "200"  # put back once the queries started
    finally:
        spark.conf.set(key, before)
    offsets = (out / "_checkpoint" / "minutes" / "offsets" / "0").read_text()
    assert f'"{key}":"4"' in offsets
    run_once(spark, archive, tmp_path / "set")  # a count set on purpose (the fixture's 1) is kept
    assert (
        f'"{key}":"{before}"' in (tmp_path / "set" / "_checkpoint" / "minutes" / "offsets" / "0").read_text()
    )


def test_files_added_while_it_runs_and_alerts(spark: Any, tmp_path: Path) -> None:
    from ottermq.spark_jobs.watch import parse_alert, start_watch

    archive, out = tmp_path / "archive", tmp_path / "out"
    write(archive, "a.jsonl", [rec(T0 + i) for i in range(3)])
    rules = [parse_alert("reason=expired,queue=orders,rate>4/min")]
    queries, handler = start_watch(spark, str(archive), str(out), rules=rules, interval=0.5, quiet=True)
    try:
        deadline = time.monotonic() + 60
        while handler.batches < 1:
            assert time.monotonic() < deadline, "no batch within 60 s"
            time.sleep(0.2)
        assert not (out / "alerts.jsonl").exists() or (out / "alerts.jsonl").read_text() == ""
        write(archive, "b.jsonl", [rec(T0 + 10 + i) for i in range(3)])  # 6 in that minute now

        def total() -> int:
            try:  # the job may be rewriting the table right now
                return sum(minutes(spark, out).values())
            except Exception:
                return -1

        while total() < 6:
            assert time.monotonic() < deadline, "the new file was not picked up within 60 s"
            time.sleep(0.2)
        while not (out / "alerts.jsonl").exists() or not (out / "alerts.jsonl").read_text():
            assert time.monotonic() < deadline, "no alert within 60 s"
            time.sleep(0.2)
    finally:
        for query in queries:
            query.stop()
    alerts = [json.loads(line) for line in (out / "alerts.jsonl").read_text().splitlines()]
    assert alerts == [
        {
            "rule": "reason=expired,queue=orders,rate>4/min",
            "minute": "2024-05-01T00:00Z",
            "minute_ms": T0,
            "deaths": 6,
            "threshold": 4.0,
        }
    ]


def test_main_refuses_bad_input_before_spark(tmp_path: Path) -> None:
    from ottermq.spark_jobs.watch import main

    assert main([str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert main([str(tmp_path), "--out", str(tmp_path / "o"), "--alert", "queue=x"]) == 2
