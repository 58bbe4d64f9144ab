"""`make bench` runs benchmarks/run.py and benchmarks/recovery.py as scripts with PYTHONSAFEPATH=1
(no script directory on sys.path): run both the same way on tiny counts, so a broken import or a
wrong result shows up here rather than on the day someone measures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )


def test_recovery_benchmark_recovers_every_message(tmp_path: Path) -> None:
    out = tmp_path / "recovery.json"
    result = _run("recovery.py", "--messages", "3000", "--json", str(out), cwd=BENCH)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["recovered"] == 3000 and figures["publish_confirm_msgs_per_s"] > 0
    assert figures["bytes_per_message"] > 100 and figures["recovery_log_s"] is not None


def test_side_by_side_runner_quick_noack(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = _run(
        str(BENCH / "run.py"), "--quick", "--scenarios", "noack,dlx", "--json", str(out), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = {r["scenario"]: r for r in json.loads(out.read_text())["runs"]}
    assert runs["noack"]["values"]["msgs/s"] > 0 and runs["dlx"]["values"]["msgs/s"] > 0
    assert "noack" in result.stdout and "ottermq" in result.stdout


def test_hot_path_ab_runs_every_scenario_on_a_tree(tmp_path: Path) -> None:
    """benchmarks/hotpath.py over this checkout (a tree of its own): every scenario runs and checks
    what the broker did, and the table and JSON hold a figure for each."""
    out = tmp_path / "hotpath.json"
    repo = BENCH.parent
    result = _run(
        "hotpath.py",
        "--ottermq-src",
        str(repo),
        "--reps",
        "1",
        "--messages",
        "300",
        "--json",
        str(out),
        cwd=BENCH,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [run] = json.loads(out.read_text())["runs"][str(repo)]
    assert set(run) == {"publish", "noack", "ack-each", "confirms", "fanout10", "persistent"}
    assert all(0 < v < 10_000 for v in run.values())
    assert "persistent" in result.stdout


def test_postgresql_benchmark_measures_confirms_failovers_and_bytes(tmp_path: Path) -> None:
    out = tmp_path / "postgres.json"
    result = _run(str(BENCH / "postgres.py"), "--quick", "--json", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures["confirms"]) == {"ottermq sqlite", "ottermq postgresql"}
    assert all(v > 0 for rates in figures["confirms"].values() for v in rates.values())
    assert len(figures["failover_s"]) == 3 and all(0 < s < 60 for s in figures["failover_s"])
    assert figures["bytes_per_message"]["postgresql"] > 100 and figures["bytes_per_message"]["sqlite"] > 100
