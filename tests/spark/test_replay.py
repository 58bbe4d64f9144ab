"""Replay: selecting a replay set, rebuilding messages, and republishing them into a real broker (a private
ottermq process, or the broker at AMQP_URL)."""

from __future__ import annotations

import base64
import datetime
import io as stdio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

try:
    from ottermq.spark_jobs import replay
except ImportError:  # no pyspark: the spark fixture skips (or, under CI, fails) every test
    replay = None  # type: ignore[assignment]

pytestmark = pytest.mark.spark


def _ids(df: Any) -> list[tuple[str, int]]:
    return [(r.queue, r.time_ms) for r in df.orderBy("time_ms").collect()]


def _select(records_df: Any, **filters: Any) -> list[int]:
    """Positions (1-based, as numbered in conftest.RECORDS) of the selected records."""
    times = sorted(r.time_ms for r in records_df.select("time_ms").collect())
    chosen = replay.select_records(records_df, replay.Selection(**filters)).select("time_ms").collect()
    return sorted(times.index(r.time_ms) + 1 for r in chosen)


@pytest.mark.usefixtures("pyspark_installed")
def test_parse_time() -> None:
    assert replay.parse_time("1714521600000") == 1714521600000
    assert replay.parse_time("2024-05-01") == 1714521600000
    assert replay.parse_time("2024-05-01T02:00:00+02:00") == 1714521600000
    assert replay.parse_time("2024-05-01T00:00:00.250Z") == 1714521600250
    with pytest.raises(ValueError):
        replay.parse_time("yesterday")


def test_selection_filters(records_df: Any, data: Any) -> None:
    T0, HOUR = data.T0, data.HOUR
    assert _select(records_df) == list(range(1, 13))
    assert _select(records_df, reasons=("expired",)) == [5, 6, 7, 8, 11]
    assert _select(records_df, reasons=("maxlen", "delivery_limit")) == [4, 9, 10]
    assert _select(records_df, queues=("payments",), vhosts=("/",)) == [6, 7, 8, 11]
    assert _select(records_df, vhosts=("tenant-a",)) == [9, 10]
    assert _select(records_df, outcomes=("dropped",)) == [9, 10, 12]
    assert _select(records_df, since_ms=T0 + HOUR, until_ms=T0 + 2 * HOUR) == [4, 5, 6]  # until is exclusive
    assert _select(records_df, headers=(("x-message-type", "Click"),)) == [9, 10]
    assert _select(records_df, headers=(("attempt", "3"),)) == [9]
    assert _select(records_df, headers=(("attempt", None),)) == [9]  # present
    assert _select(records_df, headers=(("x-message-type", None), ("attempt", None))) == [9]
    assert _select(records_df, where="death_count >= 3") == [2, 3, 4, 10]
    assert _select(records_df, reasons=("rejected",), limit=2) == [1, 2]


def test_write_replay_set(spark: Any, archive_dir: Path, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "set"
    argv = [str(archive_dir), "--out", str(out), "--reason", "expired", "--since", "2024-05-01T01:00:00Z"]
    assert replay.select_main(argv) == 0
    assert "5 records, 4 with a replayable body" in capsys.readouterr().out  # 11's body was truncated
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["count"] == 5 and manifest["with_body"] == 4
    assert manifest["filter"]["reasons"] == ["expired"]
    assert manifest["filter"]["since"] == "2024-05-01T01:00:00.000+00:00"
    written = spark.read.parquet(str(out / "data"))
    assert set(written.columns) == set(replay.FIELDS) | {"replay_id"}
    ids = [r.replay_id for r in written.orderBy("time_ms").collect()]
    assert len(set(ids)) == 5 and all(len(i) == 24 for i in ids)
    # replay_id is a function of the record: the same from a second selection
    again = replay.with_replay_id(replay.select_records(written.drop("replay_id"), replay.Selection()))
    assert [r.replay_id for r in again.orderBy("time_ms").collect()] == ids


def test_select_main_bad_where(spark: Any, archive_dir: Path, tmp_path: Path) -> None:
    assert (
        replay.select_main([str(archive_dir), "--out", str(tmp_path / "s"), "--where", "no_such_col > 1"])
        == 2
    )


@pytest.mark.usefixtures("pyspark_installed")
def test_message_properties_rebuild_amqp_types(data: Any) -> None:
    rec = data.record(
        data.T0,
        1,
        message_id="m",
        correlation_id="c",
        content_type="text/plain",
        headers={
            "x-death": {"t": "A", "v": [{"t": "F", "v": {"count": {"t": "l", "v": 2}}}]},
            "x-first-death-queue": {"t": "S", "v": "q"},
            "when": {"t": "T", "v": 1714521600},
            "price": {"t": "D", "v": "9.99"},
            "raw": {"t": "x", "v": "AA=="},
        },
    )
    props = replay.message_properties(rec)
    assert props == {
        "delivery_mode": 2,
        "message_id": "m",
        "correlation_id": "c",
        "content_type": "text/plain",
        "headers": {
            "x-death": [{"count": 2}],
            "x-first-death-queue": "q",
            "when": datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC),
            "price": Decimal("9.99"),
            "raw": b"\x00",
        },
    }
    stripped = replay.message_properties(rec, strip_death_headers=True, delivery_mode=1)
    assert stripped["headers"] == {"when": props["headers"]["when"], "price": Decimal("9.99"), "raw": b"\x00"}
    assert stripped["delivery_mode"] == 1
    assert "headers" not in replay.message_properties(data.record(data.T0, 1))


class FakeChannel:
    """Records publishes; raises pika's confirm errors for chosen routing keys."""

    def __init__(self, fail: dict[str, Exception]) -> None:
        self.fail = fail
        self.published: list[tuple[str, str, bytes, Any, bool]] = []

    def basic_publish(
        self, exchange: str, routing_key: str, body: bytes, properties: Any, mandatory: bool
    ) -> None:
        self.published.append((exchange, routing_key, body, properties, mandatory))
        if routing_key in self.fail:
            raise self.fail[routing_key]


@pytest.mark.usefixtures("pyspark_installed")
def test_publish_records_statuses_and_log(data: Any) -> None:
    import pika.exceptions

    def rec(i: int, **kw: Any) -> dict[str, Any]:
        return {**data.record(data.T0 + i, 1, **kw), "replay_id": f"id{i}"}

    records = [
        rec(1, routing_keys=["a", "b"], body_b64=base64.b64encode(b"one").decode()),
        rec(2, body_b64=None),
        rec(3, body_truncated=True),
        rec(4),
        rec(5, routing_keys=["unroutable"]),
        rec(6, routing_keys=["nacked"]),
        rec(7, headers={"bad": {"t": "?", "v": 1}}),
    ]
    channel = FakeChannel(
        {"unroutable": pika.exceptions.UnroutableError([]), "nacked": pika.exceptions.NackError([])}
    )
    log = stdio.StringIO()
    stats = replay.publish_records(records, channel, exchange="ex", done=frozenset({"id4"}), log_file=log)
    assert (stats.confirmed, stats.skipped_no_body, stats.skipped_truncated, stats.skipped_done) == (
        1,
        1,
        1,
        1,
    )
    assert (stats.returned, stats.nacked, stats.failed) == (1, 1, 1)
    assert not stats.ok
    assert [(p[0], p[1], p[2], p[4]) for p in channel.published] == [
        ("ex", "a", b"one", True),  # the first routing key by default
        ("ex", "unroutable", b"abc", True),
        ("ex", "nacked", b"abc", True),
    ]
    entries = [json.loads(line) for line in log.getvalue().splitlines()]
    assert [(e["replay_id"], e["status"], e["published"]) for e in entries] == [
        ("id1", "confirmed", True),
        ("id2", "skipped_no_body", False),
        ("id3", "skipped_truncated", False),
        ("id4", "skipped_done", False),
        ("id5", "returned", True),
        ("id6", "nacked", True),
        ("id7", "failed", False),
    ]
    assert "unknown header type tag" in entries[-1]["error"]


@pytest.mark.usefixtures("pyspark_installed")
def test_publish_records_rate_limit(data: Any) -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(round(seconds, 3))
        now[0] += seconds

    records = [{**data.record(data.T0 + i, 1), "replay_id": str(i)} for i in range(4)]
    stats = replay.publish_records(
        records, FakeChannel({}), exchange="", routing_key="q", rate=10, clock=lambda: now[0], sleep=sleep
    )
    assert stats.confirmed == 4
    assert slept == [0.1, 0.1, 0.1]


@pytest.fixture
def amqp_url(tmp_path: Path, free_port: Callable[[], int]) -> Iterator[str]:
    """``AMQP_URL`` when set (e.g. RabbitMQ under ``make conformance``), else a private ottermq process."""
    url = os.environ.get("AMQP_URL")
    if url:
        yield url
        return
    port = free_port()
    env = {
        **os.environ,
        "OTTERMQ_BROKER_HOST": "127.0.0.1",
        "OTTERMQ_BROKER_PORT": str(port),
        "OTTERMQ_DATA_DIR": str(tmp_path / "data"),
        "PYTHONSAFEPATH": "1",
        "OTTERMQ_ENABLE_WEB_API": "false",
        "OTTERMQ_ENABLE_PROMETHEUS": "false",
    }
    log = tmp_path / "broker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ottermq.broker"], env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.05)
        yield f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    finally:
        proc.terminate()
        proc.wait(10)


def test_replay_into_a_real_broker(spark: Any, amqp_url: str, archive_dir: Path, tmp_path: Path) -> None:
    import pika

    set_dir = tmp_path / "set"
    assert (
        replay.select_main(
            [str(archive_dir), "--out", str(set_dir), "--queue", "events", "--queue", "orders"]
        )
        == 0
    )
    queue = f"ottermq.replay-test.{uuid.uuid4().hex[:8]}"
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = connection.channel()
        channel.queue_declare(queue, auto_delete=False, arguments={"x-expires": 60_000})
        argv = [str(set_dir), "--url", amqp_url, "--exchange", "", "--routing-key", queue, "--rate", "1000"]
        assert replay.publish_main(argv) == 0
        got = []
        while (message := channel.basic_get(queue, auto_ack=True))[0] is not None:
            got.append(message)
        # orders: 1 2 3 4 5 12 and events: 9 (no body: skipped) 10
        assert len(got) == 7
        bodies = {body for _, _, body in got}
        assert bodies == {b"abc"}
        props = {p.message_id: p for _, p, _ in got if p.message_id}
        assert set(props) == {"m1", "m2", "m4"}
        event = next(p for _, p, _ in got if p.message_id is None)
        assert event.headers == {"x-message-type": "Click"}
        assert all(p.delivery_mode == 2 and p.content_type in ("application/json", None) for _, p, _ in got)
        logs = list(set_dir.glob("replay-*.jsonl"))
        assert len(logs) == 1
        statuses = [json.loads(line)["status"] for line in logs[0].read_text().splitlines()]
        assert sorted(statuses) == ["confirmed"] * 7 + ["skipped_no_body"]

        # --resume: nothing left to publish; an unroutable key is reported, not lost silently.
        assert replay.publish_main([*argv, "--resume"]) == 0
        assert channel.basic_get(queue, auto_ack=True)[0] is None
        nowhere = [str(set_dir), "--url", amqp_url, "--exchange", "", "--routing-key", queue + ".missing"]
        assert replay.publish_main(nowhere) == 1
        # mistakes are refused before Spark starts: a missing exchange, a folder that is not a set
        missing = f"{queue}.no-such-exchange"
        assert replay.publish_main([str(set_dir), "--url", amqp_url, "--exchange", missing]) == 2
        assert replay.publish_main([str(tmp_path), "--url", amqp_url, "--exchange", ""]) == 2
    finally:
        if connection.is_open:
            connection.channel().queue_delete(queue)
            connection.close()
