"""The C load generator (benchmarks/cgen, the c:* scenarios): `benchmarks/run.py` builds it with `cc`
against librabbitmq-c and runs it against a fresh ottermq, as `make bench` does, on tiny counts. Every
message published must arrive (the generator fails the run otherwise), and its own CPU share must be
reported. Needs `cc` and librabbitmq-dev (`bash .ci/install-cgen.sh`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SCENARIOS = ("c:ack-multiple50", "c:confirms-consumed", "c:fanout10", "c:dlx")


def test_c_generator_runs_scenarios_against_ottermq(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    env = {**os.environ, "PYTHONSAFEPATH": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--quick", "--scenarios", ",".join(SCENARIOS)]
        + ["--json", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = {r["scenario"]: r for r in json.loads(out.read_text())["runs"]}
    assert set(runs) == set(SCENARIOS)
    notes = {name: r["note"] for name, r in runs.items() if r["note"]}
    if any(note.startswith("unsupported") for note in notes.values()):
        pytest.fail(f"the C generator could not be built: {notes} (install with: bash .ci/install-cgen.sh)")
    assert not notes, notes
    for name, run in runs.items():
        assert run["values"]["msgs/s"] > 0, name
        assert 0 < run["values"]["gen cpu"] <= 101, name  # one thread: at most one core
    # fanout10 counts deliveries: 10 queues, so ten times the messages published
    assert runs["c:fanout10"]["messages"] == 2_000
    assert list((tmp_path / "cache" / "ottermq-bench").glob("ottermq-cgen-*"))
