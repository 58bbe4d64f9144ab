"""The multi-vhost benchmark (benchmarks/vhosts.py) and the hand-off cost benchmark (benchmarks/ipc.py),
run as `make bench` runs them, on tiny counts: vhosts.py against fresh ottermq brokers with
OTTERMQ_WORKERS=1 and auto (every message of every vhost must arrive, the generator fails otherwise;
broker CPU includes the worker processes), ipc.py's three ways of moving messages between two processes.
Needs `cc` and librabbitmq-dev for the C generator (`bash .ci/install-cgen.sh`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def run(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONSAFEPATH": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_vhosts_benchmark_counts_every_vhosts_messages_with_one_and_several_workers(tmp_path: Path) -> None:
    out = tmp_path / "vhosts.json"
    result = run(tmp_path, "vhosts.py", "--quick", "--vhosts", "1,2", "--json", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(out.read_text())
    points = {(p["n"], p["broker"].split(" ")[1]): p for p in summary["points"]}
    assert set(points) == {(n, w) for n in (1, 2) for w in ("w=1", f"w=auto({os.cpu_count()})")}
    for (n, _workers), point in points.items():
        (run_,) = point["runs"]
        assert "error" not in run_, run_
        assert run_["messages"] == 5_000 * n  # every vhost's messages, all delivered
        assert point["msgs_per_s"] > 0 and point["broker_us_per_msg"] > 0
    assert points[(1, "w=1")]["scaling"] == 1.0


def test_ipc_benchmark_moves_every_message_three_ways(tmp_path: Path) -> None:
    out = tmp_path / "ipc.json"
    result = run(tmp_path, "ipc.py", "--count", "20000", "--json", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {r["kind"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"socketpair", "socketpair batched", "shm ring"}
    for row in rows.values():
        assert row["count"] == 20_000 and row["msgs_per_s"] > 0
        # CPU times tick every 10 ms: 20,000 messages may show 0.0 on either side
        assert row["producer_us_per_msg"] >= 0 and row["consumer_us_per_msg"] >= 0
