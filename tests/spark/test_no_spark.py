"""Typed-JSON headers, the synthetic archive generator and the CLI shims: plain Python, no Spark needed."""

from __future__ import annotations

import datetime
import json
import sys
from decimal import Decimal
from pathlib import Path

import pytest
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
    assert lines[0].keys() == {
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
    }


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


@pytest.mark.parametrize("entry", [cli.report_main, cli.compact_main, cli.select_main, cli.replay_main])
def test_cli_without_pyspark_gives_a_hint(
    entry: object, monkeypatch: pytest.MonkeyPatch, capsys: object
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark -> ImportError
    assert entry(["anything"]) == 2  # type: ignore[operator]
    assert "pip install 'ottermq[spark]'" in capsys.readouterr().err  # type: ignore[attr-defined]
