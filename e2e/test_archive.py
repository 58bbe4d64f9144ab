"""Dead-letter archive (issue 5): the broker's JSON Lines archive and ``ottermq dlq export``.

* ``extension`` tests start private brokers with ``OTTERMQ_DLX_ARCHIVE_DIR``, cause one dead letter
  of every reason and every drop reason, stop the broker with SIGTERM and check every field of
  every record (archive schema v1).
* ``dlq report`` (the console script, a real local Spark run) on a broker-written archive counts
  every reason and drop reason exactly (also marked ``spark``).
* ``dlq export`` reads a dead-letter queue of the session broker (ottermq, or RabbitMQ under
  ``AMQP_URL``): browse leaves the queue as it was (messages marked redelivered), drain empties it.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pika
import pytest

SCHEMA_KEYS = [
    "schema",
    "time_ms",
    "reason",
    "vhost",
    "queue",
    "exchange",
    "routing_keys",
    "dlx",
    "dlx_routing_key",
    "policy",
    "outcome",
    "drop_reason",
    "death_count",
    "original_expiration",
    "enqueued_ms",
    "message_id",
    "correlation_id",
    "content_type",
    "headers",
    "body_size",
    "body_b64",
    "body_truncated",
    "limit",
    "limit_value",
    "limit_source",
]


def read_archive(root: Path) -> list[dict[str, Any]]:
    """Every record under ``root`` (complete files only), in time order; no ``.part`` may be left."""
    assert list(root.rglob("*.part")) == []
    records = []
    for path in sorted(root.rglob("*.jsonl")):
        rel = path.relative_to(root).parts
        assert len(rel) == 3 and len(rel[0]) == 10 and len(rel[1]) == 2, rel
        assert path.name.startswith("deadletters-")
        for line in path.read_text("utf-8").splitlines():
            record = json.loads(line)
            assert list(record) == SCHEMA_KEYS
            stamp = time.gmtime(record["time_ms"] // 1000)
            assert (time.strftime("%Y-%m-%d", stamp), time.strftime("%H", stamp)) == rel[:2]
            records.append(record)
    return sorted(records, key=lambda r: r["time_ms"])


def by_queue(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        out.setdefault(record["queue"], []).append(record)
    return out


def props(**kw: Any) -> pika.BasicProperties:
    return pika.BasicProperties(**kw)


def dl_to(queue: str) -> dict[str, str]:
    """Queue arguments: dead-letter through the default exchange into ``queue``."""
    return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue}


# ---------------------------------------------------------------------------------------------------------
# the broker's archive (ottermq only)
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.extension
def test_archive_records_every_reason_and_drop_reason(broker_process, tmp_path, poll_until):
    archive = tmp_path / "archive"
    process = broker_process({"OTTERMQ_DLX_ARCHIVE_DIR": str(archive), "OTTERMQ_DLX_ARCHIVE_BODY_BYTES": "4"})
    b = process.start()
    conn = pika.BlockingConnection(b.params())
    ch = conn.channel()
    to_dlq = dl_to("dlq")
    ch.queue_declare("dlq")
    ch.exchange_declare("orders", "direct")
    ch.queue_declare("expired", arguments=to_dlq)
    ch.queue_bind("expired", "orders", "exp")
    ch.queue_declare("rejected", arguments=dl_to("back"))
    ch.queue_declare("back", arguments=dl_to("rejected"))
    ch.queue_declare("maxlen", arguments={**to_dlq, "x-max-length": 1})
    ch.queue_declare("limited", arguments={**to_dlq, "x-delivery-limit": 0})
    ch.queue_declare("no-dlx")
    ch.queue_declare("dlx-missing", arguments={"x-dead-letter-exchange": "missing"})
    ch.queue_declare("no-route", arguments=dl_to("nowhere"))
    ch.queue_declare("cycle", arguments={"x-dead-letter-exchange": ""})  # dead letters route back to itself

    before = int(time.time() * 1000)
    headers = {"CC": ["exp-cc"], "n": 42, "s": "text", "nested": {"ok": True}}
    ch.basic_publish(
        "orders",
        "exp",
        b"hello world",
        props(
            expiration="0", headers=headers, message_id="m-1", correlation_id="c-1", content_type="text/plain"
        ),
    )  # TTL 0, no consumer: expires at once
    ch.basic_publish("", "rejected", b"r", props(expiration="60000"))
    method = poll_until(lambda: ch.basic_get("rejected")[0])
    ch.basic_reject(method.delivery_tag, requeue=False)  # rejected in 'rejected' -> 'back'
    method = poll_until(lambda: ch.basic_get("back")[0])
    ch.basic_reject(method.delivery_tag, requeue=False)  # rejected in 'back' -> 'rejected'
    method = poll_until(lambda: ch.basic_get("rejected")[0])
    ch.basic_reject(method.delivery_tag, requeue=False)  # rejected in 'rejected' again: count 2
    ch.basic_publish("", "maxlen", b"first")
    ch.basic_publish("", "maxlen", b"second")  # drop-head: 'first' dies as maxlen
    ch.basic_publish("", "limited", b"l")
    method = poll_until(lambda: ch.basic_get("limited")[0])
    ch.basic_nack(method.delivery_tag, requeue=True)  # returned once, limit 0: delivery_limit
    for queue in ("no-dlx", "dlx-missing", "no-route", "cycle"):
        ch.basic_publish("", queue, queue.encode(), props(expiration="0"))
    poll_until(lambda: ch.queue_declare("dlq", passive=True).method.message_count == 3)
    ch.queue_declare("no-dlx", passive=True)  # a round trip: every publish above is processed
    after = int(time.time() * 1000)
    conn.close()
    assert process.stop() == 0

    records = read_archive(archive)
    q = by_queue(records)
    assert sorted(q) == sorted(
        ["expired", "rejected", "back", "maxlen", "limited", "no-dlx", "dlx-missing", "no-route", "cycle"]
    )
    for record in records:
        assert record["schema"] == 2 and record["vhost"] == "/"
        assert before <= record["time_ms"] <= after
        assert record["enqueued_ms"] is None or before <= record["enqueued_ms"] <= record["time_ms"]

    (exp,) = q["expired"]
    assert exp == {
        **exp,
        "reason": "expired",
        "exchange": "orders",
        "routing_keys": ["exp", "exp-cc"],
        "dlx": "",
        "dlx_routing_key": "dlq",
        "policy": None,
        "outcome": "routed",
        "drop_reason": None,
        "death_count": 1,
        "original_expiration": "0",
        "message_id": "m-1",
        "correlation_id": "c-1",
        "content_type": "text/plain",
        "body_size": 11,
        "body_b64": base64.b64encode(b"hell").decode(),
        "body_truncated": True,
        "limit": "expiration",  # its own TTL of 0 (the queue has none)
        "limit_value": 0,
        "limit_source": "message",
    }
    assert exp["headers"]["CC"] == {"t": "A", "v": [{"t": "S", "v": "exp-cc"}]}
    assert exp["headers"]["s"] == {"t": "S", "v": "text"}
    assert exp["headers"]["n"]["t"] in "bBsuIil" and exp["headers"]["n"]["v"] == 42  # pika picks the type
    assert exp["headers"]["nested"] == {"t": "F", "v": {"ok": {"t": "t", "v": True}}}
    assert "x-death" not in exp["headers"]  # headers before the death

    first, second = q["rejected"]
    (back,) = q["back"]
    assert [r["death_count"] for r in (first, back, second)] == [1, 1, 2]
    times = [r["time_ms"] for r in (first, back, second)]
    assert times == sorted(times)
    for record, exchange, key, dlx_key in (
        (first, "", "rejected", "back"),
        (back, "", "back", "rejected"),
        (second, "", "rejected", "back"),
    ):
        assert (record["reason"], record["outcome"], record["exchange"], record["dlx"]) == (
            "rejected",
            "routed",
            exchange,
            "",
        )
        assert (record["routing_keys"], record["dlx_routing_key"]) == ([key], dlx_key)
        assert (record["body_size"], record["body_b64"], record["body_truncated"]) == (1, "cg==", False)
    assert first["original_expiration"] == "60000" and first["headers"] is None
    assert {(r["limit"], r["limit_value"], r["limit_source"]) for r in (first, back, second)} == {(None,) * 3}
    assert back["original_expiration"] is None  # dead letters lose their expiration
    assert [d["v"]["queue"]["v"] for d in second["headers"]["x-death"]["v"]] == ["back", "rejected"]
    assert second["headers"]["x-death"]["v"][0]["v"]["count"] == {"t": "l", "v": 1}

    (maxlen,) = q["maxlen"]
    assert (maxlen["reason"], maxlen["outcome"]) == ("maxlen", "routed")
    assert maxlen["body_b64"] == base64.b64encode(b"firs").decode()
    assert (maxlen["limit"], maxlen["limit_value"], maxlen["limit_source"]) == ("max-length", 1, "argument")
    (limited,) = q["limited"]
    assert (limited["reason"], limited["outcome"], limited["death_count"]) == ("delivery_limit", "routed", 1)
    assert (limited["limit"], limited["limit_value"], limited["limit_source"]) == (
        "delivery-limit",
        0,
        "argument",
    )
    assert limited["headers"] is None  # returned once: over the limit before any x-delivery-count

    drops = {name: q[name][0] for name in ("no-dlx", "dlx-missing", "no-route", "cycle")}
    assert {n: (r["reason"], r["outcome"], r["drop_reason"]) for n, r in drops.items()} == {
        "no-dlx": ("expired", "dropped", "no_dlx"),
        "dlx-missing": ("expired", "dropped", "dlx_missing"),
        "no-route": ("expired", "dropped", "no_route"),
        "cycle": ("expired", "dropped", "cycle"),
    }
    assert {n: (r["dlx"], r["dlx_routing_key"]) for n, r in drops.items()} == {
        "no-dlx": (None, None),
        "dlx-missing": ("missing", None),
        "no-route": ("", "nowhere"),
        "cycle": ("", "cycle"),
    }
    for name, record in drops.items():
        assert (record["exchange"], record["routing_keys"], record["death_count"]) == ("", [name], 1)
        assert (
            record["original_expiration"] == "0"
            and record["body_b64"] == base64.b64encode(name.encode()[:4]).decode()
        )


@pytest.mark.extension
def test_archive_records_drops_when_dead_lettering_is_disabled(broker_process, tmp_path):
    archive = tmp_path / "archive"
    process = broker_process({"OTTERMQ_DLX_ARCHIVE_DIR": str(archive), "OTTERMQ_ENABLE_DLX": "false"})
    b = process.start()
    conn = pika.BlockingConnection(b.params())
    ch = conn.channel()
    ch.queue_declare("dlq")
    ch.queue_declare("work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    ch.basic_publish("", "work", b"body", props(expiration="0"))
    assert ch.queue_declare("dlq", passive=True).method.message_count == 0
    conn.close()
    assert process.stop() == 0
    (record,) = read_archive(archive)
    assert (record["queue"], record["reason"], record["outcome"], record["drop_reason"]) == (
        "work",
        "expired",
        "dropped",
        "dlx_disabled",
    )
    assert (record["dlx"], record["dlx_routing_key"]) == ("", None)
    assert (record["body_b64"], record["body_size"], record["body_truncated"]) == (None, 4, False)


@pytest.mark.extension
def test_part_file_left_by_a_crash_is_finished_at_the_next_start(broker_process, tmp_path, poll_until):
    archive = tmp_path / "archive"
    env = {"OTTERMQ_DLX_ARCHIVE_DIR": str(archive)}
    process = broker_process(env)
    b = process.start()
    conn = pika.BlockingConnection(b.params())
    ch = conn.channel()
    ch.queue_declare("work")
    for i in range(5):
        ch.basic_publish("", "work", str(i).encode(), props(expiration="0"))  # no DLX: dropped
    (part,) = poll_until(lambda: list(archive.rglob("*.jsonl.part")))  # written within 0.5 s
    poll_until(lambda: part.read_bytes().count(b"\n") == 5)
    conn.close()
    process.kill()  # SIGKILL: the file stays .part
    assert part.exists() and not list(archive.rglob("*.jsonl"))
    broker_process(env).start()  # another process: finishes files of processes that are gone
    poll_until(lambda: not part.exists())
    records = read_archive(archive)
    assert [(r["queue"], r["drop_reason"]) for r in records] == [("work", "no_dlx")] * 5


@pytest.mark.extension
def test_archive_that_cannot_be_written_later_does_not_stop_the_broker(broker_process, tmp_path):
    # An unwritable OTTERMQ_DLX_ARCHIVE_DIR stops start-up (test_ottermq_process.py); a write that fails
    # later (here: a file where today's folder goes) is logged and dead-lettering goes on.
    archive = tmp_path / "archive"
    process = broker_process({"OTTERMQ_DLX_ARCHIVE_DIR": str(archive)})
    b = process.start()
    now = datetime.datetime.now(datetime.UTC)
    for when in (now, now + datetime.timedelta(minutes=1)):  # the test may straddle midnight
        day = archive / when.strftime("%Y-%m-%d")
        if not day.exists():
            day.write_text("a file, not a directory")
    conn = pika.BlockingConnection(b.params())
    ch = conn.channel()
    ch.queue_declare("dlq")
    ch.queue_declare("work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    ch.basic_publish("", "work", b"body", props(expiration="0"))
    assert ch.queue_declare("dlq", passive=True).method.message_count == 1  # dead-lettering goes on
    conn.close()
    assert process.stop() == 0
    assert "dead-letter archive: cannot write" in process.log_tail(200)


# ---------------------------------------------------------------------------------------------------------
# ottermq dlq report on what the broker archived (ottermq only; needs pyspark and Java)
# ---------------------------------------------------------------------------------------------------------
PNG = b"\x89PNG\r\n\x1a\n"


def _require_spark() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        reason = "pyspark is not installed (pip install 'ottermq[spark]')"
    else:
        if shutil.which("java") or os.environ.get("JAVA_HOME"):
            return
        reason = "Java is not installed (Spark needs a JDK; set JAVA_HOME or put java on PATH)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so this test must run", pytrace=False)
    pytest.skip(reason)


def _ottermq() -> list[str]:
    script = Path(sys.executable).with_name("ottermq")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ottermq.broker"]


@pytest.mark.extension
@pytest.mark.spark
def test_report_on_a_broker_written_archive_counts_every_dead_letter(broker_process, tmp_path, poll_until):
    _require_spark()
    archive = tmp_path / "archive"
    process = broker_process({"OTTERMQ_DLX_ARCHIVE_DIR": str(archive)})
    b = process.start()
    conn = pika.BlockingConnection(b.params())
    ch = conn.channel()
    ch.queue_declare("dlq")
    ch.queue_declare("ttl", arguments={**dl_to("dlq"), "x-message-ttl": 0})
    ch.queue_declare("work", arguments=dl_to("wait"))
    ch.queue_declare("wait", arguments={**dl_to("work"), "x-message-ttl": 1})
    ch.queue_declare("maxlen", arguments={**dl_to("dlq"), "x-max-length": 2})
    ch.queue_declare("limited", arguments={**dl_to("dlq"), "x-delivery-limit": 0})
    ch.queue_declare("no-dlx", arguments={"x-message-ttl": 0})
    ch.queue_declare("dlx-missing", arguments={"x-dead-letter-exchange": "missing", "x-message-ttl": 0})
    ch.queue_declare("no-route", arguments={**dl_to("nowhere"), "x-message-ttl": 0})
    ch.queue_declare("cycle", arguments={"x-dead-letter-exchange": "", "x-message-ttl": 0})

    for i in range(7):  # 7 expired, routed to dlq
        ch.basic_publish("", "ttl", b"t", props(message_id=f"ttl-{i}", content_type="text/plain"))
    # a retry loop: rejected in 'work' 4 times, expiring in 'wait' after each (death counts 1..4)
    ch.basic_publish("", "work", b"job", props(message_id="job-1", content_type="application/json"))
    for _ in range(4):
        method = poll_until(lambda: ch.basic_get("work")[0])
        ch.basic_reject(method.delivery_tag, requeue=False)
    method = poll_until(lambda: ch.basic_get("work")[0])
    ch.basic_ack(method.delivery_tag)
    for i in range(5):  # x-max-length 2, drop-head: 3 maxlen deaths
        ch.basic_publish("", "maxlen", b"m%d" % i)
    for i in range(2):  # returned once each with limit 0: 2 delivery_limit deaths
        ch.basic_publish("", "limited", b"l%d" % i)
        method = poll_until(lambda: ch.basic_get("limited")[0])
        ch.basic_nack(method.delivery_tag, requeue=True)
    drops = {"no-dlx": 4, "dlx-missing": 3, "no-route": 2, "cycle": 1}
    for queue, n in drops.items():
        for _ in range(n):
            ch.basic_publish("", queue, b"d")
    poll_until(lambda: ch.queue_declare("dlq", passive=True).method.message_count == 7 + 3 + 2)
    conn.close()
    assert process.stop() == 0

    records = read_archive(archive)
    assert len(records) == 7 + 8 + 3 + 2 + 10

    out = tmp_path / "report"
    result = subprocess.run(
        [*_ottermq(), "dlq", "report", str(archive), "--out", str(out), "--master", "local[1]"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())

    assert summary["records"] == 30 and summary["bad_lines"] == 0
    assert summary["by_reason"] == {"expired": 7 + 4 + 10, "rejected": 4, "maxlen": 3, "delivery_limit": 2}
    assert summary["by_outcome"] == {"routed": 20, "dropped": 10}
    assert summary["by_drop_reason"] == {"no_dlx": 4, "dlx_missing": 3, "no_route": 2, "cycle": 1}
    assert summary["queues"] == 9 and summary["vhosts"] == 1
    queues = {row["queue"]: row["count"] for row in summary["top"]["queues"]}
    assert queues == {"ttl": 7, "work": 4, "wait": 4, "maxlen": 3, "limited": 2, **drops}
    assert queues == dict(Counter(r["queue"] for r in records))
    # the retry loop: job-1 died with death_count 3 and 4 in 'work' and in 'wait' (threshold 3)
    loops = {(row["queue"], row["message_id"]): row for row in summary["top"]["retry_loops"]}
    assert set(loops) == {("work", "job-1"), ("wait", "job-1")}
    # every death is counted: job-1 died 4 times in each queue (death counts 1..4)
    assert all(row["deaths"] == 4 and row["max_death_count"] == 4 for row in loops.values())
    # which limit killed them: 'ttl' and the others by their queue's x-message-ttl argument
    limits = {(r["cause"], r["limit_value"], r["limit_source"]): r["count"] for r in summary["by_limit"]}
    assert limits[("message-ttl", 0, "argument")] == 7 + 10
    assert limits[("message-ttl", 1, "argument")] == 4
    assert limits[("max-length", 2, "argument")] == 3
    assert limits[("delivery-limit", 0, "argument")] == 2
    assert limits[("rejected", None, None)] == 4
    # the report opens with findings in words; the biggest cause (17 of 30 by message-ttl 0) leads
    assert summary["findings"] and "message-ttl" in summary["findings"][0]
    assert summary["first_death"] is not None and summary["time_in_queue_ms"]["p50_ms"] is not None

    for chart in summary["charts"]:
        assert (out / chart).read_bytes().startswith(PNG), chart
    assert {"charts/deaths_per_hour.png", "charts/deaths_by_queue.png"} <= set(summary["charts"])
    report = (out / "report.md").read_text()
    assert "delivery_limit" in report and "job-1" in report
    assert summary["findings"][0] in report
    assert (out / "tables" / "by_reason.csv").exists()
    assert "30" in result.stdout  # the console summary


# ---------------------------------------------------------------------------------------------------------
# ottermq dlq export (any broker)
# ---------------------------------------------------------------------------------------------------------
def dlq_export(broker, queue: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ottermq.broker.cli.dlq",
            "export",
            "--url",
            broker.url,
            "--queue",
            queue,
            "--out",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=out.parent,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )
    assert result.returncode == 0, result.stderr
    return result


def test_dlq_export_browse_then_drain(broker, channel, unique, tmp_path, poll_until):
    dlq = unique("dlq")
    work = unique("work")
    channel.queue_declare(dlq)
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    before = int(time.time()) * 1000
    for i in range(3):
        channel.basic_publish(
            "",
            work,
            f"body-{i}".encode(),
            props(
                message_id=f"m-{i}",
                correlation_id="c",
                content_type="text/plain",
                expiration="60000",
                headers={"CC": ["also"], "i": i},
            ),
        )
    for _ in range(3):
        method = poll_until(lambda: channel.basic_get(work)[0])
        channel.basic_reject(method.delivery_tag, requeue=False)
    channel.basic_publish("", dlq, b"not a dead letter")  # no x-death: skipped, left in the queue
    poll_until(lambda: channel.queue_declare(dlq, passive=True).method.message_count == 4)
    after = int(time.time()) * 1000

    browsed = tmp_path / "browse"
    result = dlq_export(broker, dlq, browsed, "--body-bytes", "4")
    assert "3 dead letter(s) exported" in result.stderr and "1 message(s) without x-death" in result.stderr
    records = read_archive(browsed)
    assert len(records) == 3
    vhost = broker.vhost
    for i, record in enumerate(sorted(records, key=lambda r: r["message_id"])):
        assert before <= record["time_ms"] <= after and record["time_ms"] % 1000 == 0
        assert record == {
            **record,
            "schema": 2,
            "reason": "rejected",
            "vhost": vhost,
            "queue": work,
            "exchange": "",
            "routing_keys": [work, "also"],
            "dlx": "",
            "dlx_routing_key": dlq,
            "policy": None,
            "outcome": "routed",
            "drop_reason": None,
            "death_count": 1,
            "original_expiration": "60000",
            "enqueued_ms": None,
            "message_id": f"m-{i}",
            "correlation_id": "c",
            "content_type": "text/plain",
            "body_size": 6,
            "body_b64": base64.b64encode(b"body").decode(),
            "body_truncated": True,
            "limit": None,
            "limit_value": None,
            "limit_source": None,
        }
        death = record["headers"]["x-death"]
        assert death["t"] == "A"
        entry = death["v"][0]["v"]
        assert entry["count"] == {"t": "l", "v": 1} and entry["time"]["t"] == "T"
        assert entry["routing-keys"] == {"t": "A", "v": [{"t": "S", "v": work}, {"t": "S", "v": "also"}]}
        assert record["headers"]["i"]["v"] == i

    # browsing left every message in place, marked redelivered
    poll_until(lambda: channel.queue_declare(dlq, passive=True).method.message_count == 4)
    method, _, _ = channel.basic_get(dlq)
    assert method.redelivered
    channel.basic_nack(method.delivery_tag, requeue=True)

    drained = tmp_path / "drain"
    result = dlq_export(broker, dlq, drained, "--drain")
    records = read_archive(drained)
    assert sorted(r["message_id"] for r in records) == ["m-0", "m-1", "m-2"]
    assert all(r["body_b64"] is None and r["body_truncated"] is False for r in records)
    # only the message without x-death is left
    poll_until(lambda: channel.queue_declare(dlq, passive=True).method.message_count == 1)
    _, _, body = channel.basic_get(dlq, auto_ack=True)
    assert body == b"not a dead letter"


def test_dlq_export_limit_and_missing_queue(broker, channel, unique, tmp_path, poll_until):
    dlq = unique("dlq")
    work = unique("work")
    channel.queue_declare(dlq)
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    for i in range(5):
        channel.basic_publish("", work, str(i).encode())
    for _ in range(5):
        method = poll_until(lambda: channel.basic_get(work)[0])
        channel.basic_reject(method.delivery_tag, requeue=False)
    poll_until(lambda: channel.queue_declare(dlq, passive=True).method.message_count == 5)
    out = tmp_path / "limited"
    dlq_export(broker, dlq, out, "--drain", "--limit", "2")
    assert len(read_archive(out)) == 2
    poll_until(lambda: channel.queue_declare(dlq, passive=True).method.message_count == 3)

    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "ottermq.broker.cli.dlq",
            "export",
            "--url",
            broker.url,
            "--queue",
            unique("missing"),
            "--out",
            str(tmp_path / "none"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )
    assert missing.returncode == 1 and "404" in missing.stderr
