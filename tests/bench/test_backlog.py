"""benchmarks/backlog.py as `make bench` runs it (a script, PYTHONSAFEPATH=1), against a fresh ottermq on
tiny counts: every confirmed message is held and drained, the table and JSON hold the figures; a memory
alarm (a watermark below the idle broker's RSS) shows as connection.blocked and as the broker's alarm; the
RSS guard stops the publishing with the exact counts. Needs `cc` and librabbitmq-dev for the C generator
(`bash .ci/install-cgen.sh`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SHORT = ("--hold", "0.5", "--idle", "0.5", "--stall", "5")


def _backlog(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "backlog.json"
    env = {**os.environ, "PYTHONSAFEPATH": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, str(BENCH / "backlog.py"), "--broker", "ottermq", "--json", str(out), *SHORT, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.exists(), result.stderr[-3000:]
    doc: dict[str, Any] = json.loads(out.read_text())["results"][0]
    return result, doc


def test_backlog_publishes_holds_and_drains_every_message(tmp_path: Path) -> None:
    result, r = _backlog(tmp_path, "--messages", "5000", "--size", "1024")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (r["published"], r["held"], r["drained"], r["left"]) == (5000, 5000, 5000, 0)
    assert [p["name"] for p in r["phases"]] == ["idle", "publish", "hold", "drain", "settle"]
    assert r["publish_msgs_s"] > 0 and r["drain_msgs_s"] > 0 and r["idle_rss"] > 0
    assert r["bytes_per_message"] is not None and r["arguments"] == {"x-queue-mode": "lazy"}
    assert r["blocked_events"] == [] and not any(a["mem_alarm"] for a in r["alarms"])
    assert len(r["samples"]) >= 5 and r["processes"] >= 1
    assert "| peak RSS, MB |" in result.stdout and "OtterMQ" in result.stdout


def test_memory_alarm_blocks_publishers_and_is_reported(tmp_path: Path) -> None:
    """A 10 MB watermark: the alarm is on from the start; the publishers get connection.blocked
    ('low on memory'), the phase stalls and fails with a note, the broker's /api/nodes says mem_alarm."""
    result, r = _backlog(
        tmp_path, "--messages", "5000", "--ottermq-env", "OTTERMQ_MEMORY_HIGH_WATERMARK=10000000"
    )
    publishers = [e for e in r["blocked_events"] if e["conn"].startswith("publisher") and e["blocked"]]
    assert publishers and all(e["reason"] == "low on memory" for e in publishers), r["blocked_events"]
    assert any(a["mem_alarm"] for a in r["alarms"]) and not any(a["disk_free_alarm"] for a in r["alarms"])
    assert any(n.startswith("publish: ") for n in r["notes"]), r["notes"]
    assert "'low on memory' from publish" in result.stdout


def test_rss_guard_stops_publishing_with_exact_counts(tmp_path: Path) -> None:
    """--max-rss below the idle broker's RSS: the generator is stopped (SIGTERM) at once and still
    reports what was confirmed; the hold and drain go on over what the queue holds."""
    result, r = _backlog(tmp_path, "--messages", "2000000", "--max-rss", "0.01")
    assert any("stopped: broker RSS passed --max-rss" in n for n in r["notes"]), r["notes"]
    assert r["published"] < 2_000_000 and r["held"] >= r["published"]
    assert r["drained"] == r["held"] and r["left"] == 0
