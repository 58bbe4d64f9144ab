"""Typed-JSON headers, the synthetic archive generator and the CLI shims: plain Python, no Spark needed."""

from __future__ import annotations

import datetime
import hashlib
import json
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from ottermq.persistence.archive.records import SCHEMA_KEYS
from ottermq.spark_jobs import cli
from ottermq.spark_jobs.generate import generate_records, write_archive
from ottermq.spark_jobs.headers import decode_headers, decode_value, encode_headers

pytestmark = pytest.mark.spark


def test_decode_every_tag() -> None:
    typed = {
        "flag": {"t": "t", "v": True},
        "b": {"t": "b", "v": -3},
        "B": {"t": "B", "v": 200},
        "s": {"t": "s", "v": -300},
        "u": {"t": "u", "v": 60000},
        "I": {"t": "I", "v": -70000},
        "i": {"t": "i", "v": 4000000000},
        "l": {"t": "l", "v": 2},
        "f": {"t": "f", "v": 1.5},
        "d": {"t": "d", "v": 2},
        "D": {"t": "D", "v": "12.50"},
        "S": {"t": "S", "v": "héllo"},
        "T": {"t": "T", "v": 1714521600},
        "F": {"t": "F", "v": {"inner": {"t": "S", "v": "x"}}},
        "A": {"t": "A", "v": [{"t": "l", "v": 1}, {"t": "S", "v": "two"}, {"t": "V", "v": None}]},
        "x": {"t": "x", "v": "AAEC"},
        "V": {"t": "V", "v": None},
    }
    decoded = decode_headers(json.dumps(typed))
    assert decoded == {
        "flag": True,
        "b": -3,
        "B": 200,
        "s": -300,
        "u": 60000,
        "I": -70000,
        "i": 4000000000,
        "l": 2,
        "f": 1.5,
        "d": 2.0,
        "D": Decimal("12.50"),
        "S": "héllo",
        "T": datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC),
        "F": {"inner": "x"},
        "A": [1, "two", None],
        "x": b"\x00\x01\x02",
        "V": None,
    }
    assert decoded is not None
    assert type(decoded["l"]).__name__ == "long"  # pika.compat.long: pika re-encodes it as 'l', not 'I'
    assert type(decoded["I"]) is int
    assert type(decoded["d"]) is float


def test_decode_rejects_malformed_values() -> None:
    assert decode_headers(None) is None
    assert decode_headers("null") is None
    for bad in (
        {"t": "Q", "v": 1},
        {"t": "l", "v": "7"},
        {"t": "t", "v": 1},
        {"t": "x", "v": "!!"},
        {"t": "R", "v": "RgAAAAA="},  # nested deeper than the broker reads: not replayable
        {"v": 1},
        5,
    ):
        with pytest.raises(ValueError):
            decode_value(bad)
    with pytest.raises(ValueError):
        decode_headers("[1, 2]")


def test_encode_round_trip() -> None:
    plain = {"a": 1, "b": "x", "c": [True, None], "d": {"e": 1.5}, "f": b"\xff", "g": Decimal("1.5")}
    assert decode_headers(encode_headers(plain)) == plain


def test_generator_is_deterministic_whatever_the_worker_count(tmp_path: Path) -> None:
    one = write_archive(tmp_path / "one", 230, chunk_size=100, records_per_file=40, span_hours=3)
    two = write_archive(tmp_path / "two", 230, chunk_size=100, records_per_file=40, span_hours=3, workers=2)
    rel_one = sorted(p.relative_to(tmp_path / "one") for p in one)
    assert rel_one == sorted(p.relative_to(tmp_path / "two") for p in two)
    for rel in rel_one:
        assert (tmp_path / "one" / rel).read_bytes() == (tmp_path / "two" / rel).read_bytes()
    assert {str(p.parent) for p in rel_one} == {"2024-05-01/00", "2024-05-01/01", "2024-05-01/02"}
    lines = [
        json.loads(line) for rel in rel_one for line in (tmp_path / "one" / rel).read_text().splitlines()
    ]
    assert len(lines) == 230
    # schema 2: the broker's key order, the limit fields last
    assert list(lines[0]) == list(SCHEMA_KEYS)
    assert {line["schema"] for line in lines} == {2}


# the broker's writer's key order, which the generator must follow; schema 1 had no limit fields
V1_KEYS = [key for key in SCHEMA_KEYS if not key.startswith("limit")]


def test_generated_records_are_plausible() -> None:
    records = list(generate_records(2000, seed=3))
    assert [r["time_ms"] for r in records] == sorted(r["time_ms"] for r in records)
    assert {r["reason"] for r in records} == {"expired", "rejected", "maxlen", "delivery_limit"}
    assert all((r["outcome"] == "routed") == (r["drop_reason"] is None) for r in records)
    assert all(r["enqueued_ms"] is None or r["enqueued_ms"] <= r["time_ms"] for r in records)
    assert any(r["death_count"] >= 3 for r in records)
    for r in records:
        if r["headers"] is not None:
            decode_headers(r["headers"])  # valid typed JSON
    assert list(generate_records(2000, seed=3, first=1500)) == records[1500:]
    assert (
        list(generate_records(2000, seed=3, first=700, last=900, chunk_size=500))
        == list(generate_records(2000, seed=3, chunk_size=500))[700:900]
    )


def test_retry_loops_shape() -> None:
    """~8 % of messages die 2-6 times in one queue with death_count 1..k; ids recur across queues."""
    records = list(generate_records(20_000, seed=5, span_hours=24))
    assert len(records) == 20_000
    assert [r["time_ms"] for r in records] == sorted(r["time_ms"] for r in records)
    deaths: dict[tuple[str, str, str], list[int]] = {}
    queues: dict[str, set[str]] = {}
    for r in records:
        if r["message_id"] is not None:
            deaths.setdefault((r["message_id"], r["queue"], r["reason"]), []).append(r["death_count"])
            queues.setdefault(r["message_id"], set()).add(r["queue"])
    loops = [counts for counts in deaths.values() if len(counts) > 1]
    # every loop counts up from 1, in time order (the generator's x-death counts agree with its deaths)
    assert loops and all(counts == list(range(1, len(counts) + 1)) for counts in loops)
    assert {len(counts) for counts in loops} == {2, 3, 4, 5, 6}
    messages = len(queues) / 0.9  # 10 % have no id
    looping = {m for (m, _, _), counts in deaths.items() if len(counts) > 1}
    assert 0.06 < len(looping) / messages < 0.10
    assert 0.04 < sum(1 for q in queues.values() if len(q) > 1) / messages < 0.16  # fan-outs and orders.retry
    looped = [r for r in records if r["message_id"] in looping]
    gaps = sorted(b["time_ms"] - a["time_ms"] for a, b in zip(looped, looped[1:], strict=False))
    assert gaps[len(gaps) // 2] > 0  # deaths of a loop are apart in time


def test_limits_agree_with_reasons() -> None:
    """Schema 2: the limit that killed each message, as the broker's writer names it."""
    records = list(generate_records(5_000, seed=4))
    limits = {"message-ttl", "expiration", "max-length", "max-length-bytes", "delivery-limit"}
    sources = {"argument", "policy", "operator-policy", "message"}
    for r in records:
        limit, value, source = r["limit"], r["limit_value"], r["limit_source"]
        if r["reason"] == "rejected":
            assert (limit, value, source) == (None, None, None)
            continue
        assert limit in limits and isinstance(value, int) and source in sources
        assert {
            "expired": limit in ("message-ttl", "expiration"),
            "maxlen": limit in ("max-length", "max-length-bytes"),
            "delivery_limit": limit == "delivery-limit",
        }[r["reason"]]
        if limit == "expiration":  # the message's own, and the lower TTL (the message's when equal)
            assert source == "message" and r["original_expiration"] == str(value)
        if limit == "message-ttl" and r["original_expiration"] is not None:
            assert int(r["original_expiration"]) > value
        if source == "policy":
            assert r["policy"] is not None
        if r["enqueued_ms"] is not None and r["reason"] == "expired":
            assert r["time_ms"] - r["enqueued_ms"] >= value
    assert {r["limit_source"] for r in records} == sources | {None}
    assert {r["limit"] for r in records} == limits | {None}


def test_schema_1_and_the_uniform_shape() -> None:
    v2 = list(generate_records(500, seed=9))
    v1 = list(generate_records(500, seed=9, schema=1))
    assert [list(r) for r in v1] == [V1_KEYS] * 500
    assert v1 == [{k: (1 if k == "schema" else v) for k, v in r.items() if k in V1_KEYS} for r in v2]
    # the first generator's records, unchanged (a digest of its output before the retry-loops shape)
    lines = [
        json.dumps(r, separators=(",", ":"))
        for r in generate_records(300, seed=3, span_hours=3, chunk_size=100, shape="uniform")
    ]
    assert hashlib.sha256("\n".join(lines).encode()).hexdigest() == (
        "a63b1c2c621f77d0d2d6d7025416bf43a8457391b39aad9d20d2814400c80654"
    )
    with pytest.raises(ValueError, match="shape must be one of"):
        list(generate_records(10, shape="zipf"))
    with pytest.raises(ValueError, match="schema must be 1 or 2"):
        write_archive(Path("/nonexistent"), 10, schema=3)


@pytest.mark.parametrize("entry", [cli.report_main, cli.compact_main, cli.select_main, cli.replay_main])
def test_cli_without_pyspark_gives_a_hint(
    entry: object, monkeypatch: pytest.MonkeyPatch, capsys: object
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark -> ImportError
    assert entry(["anything"]) == 2  # type: ignore[operator]
    assert "pip install 'ottermq[spark]'" in capsys.readouterr().err  # type: ignore[attr-defined]


def test_a_jvm_that_never_dumped_its_class_archive_leaves_no_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import subprocess
    import tempfile

    from ottermq.spark_jobs import session

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(session.CDS_ENV, raising=False)
    folder = session._cds_folder()
    if folder is None or session._java() is None:
        pytest.skip("no java here")
    dead = subprocess.Popen(["true"])  # a pid that has exited
    dead.wait()
    (folder / "k-1-1.pid").write_text(str(dead.pid))  # killed before its JVM dumped anything
    (folder / "k-2-2.pid").write_text(str(os.getpid()))  # a JVM still running: it dumps at its exit
    (folder / "k-3-3.pid").write_text("garbage")
    session.class_data_options("")
    assert sorted(p.name for p in folder.glob("*.pid")) == ["k-2-2.pid"]
