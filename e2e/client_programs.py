"""Client programs in other languages (Java, Ruby, PHP): one scenario per run, one JSON object on stdout.

Each program prints ``{"ok": bool, "error": text|null, "failures": [...], "data": {...}}`` as its last line;
the tests assert on ``data`` and call ``self_check`` for what the program checked itself. A ``recovery``
scenario prints ``ready``, waits for a line on stdin while the test restarts the broker, then finishes.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

RUN_TIMEOUT = 30


@dataclass
class ProgramRun:
    data: dict[str, Any]
    failures: list[str]
    ok: bool

    def self_check(self) -> None:
        assert self.ok and self.failures == [], self.failures


def parse(scenario: str, stdout: str, stderr: str) -> ProgramRun:
    """The run's JSON line; fails the test on no JSON or a client error (with the program's output)."""
    lines = stdout.strip().splitlines()
    try:
        result: dict[str, Any] = json.loads(lines[-1] if lines else "")
    except json.JSONDecodeError:
        pytest.fail(f"{scenario} printed no JSON:\n{stdout}\n{stderr[-3000:]}")
    if result.get("error"):
        pytest.fail(f"{scenario}: {result['error']}\n{json.dumps(result, indent=1)}\n{stderr[-3000:]}")
    return ProgramRun(result["data"], result["failures"], result["ok"])


def run(argv: Sequence[str], scenario: str, timeout: float = RUN_TIMEOUT) -> ProgramRun:
    """Run one scenario to its end."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{scenario} did not exit within {timeout} s; stdout: {exc.stdout!r}")
    return parse(scenario, proc.stdout, proc.stderr)


def run_across_restart(argv: Sequence[str], restart: Callable[[], None], timeout: float = 60) -> ProgramRun:
    """Run a ``recovery`` scenario: wait for its ``ready``, ``restart()`` the broker, let it finish."""
    proc = subprocess.Popen(
        list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        if first.strip() != "ready":
            proc.kill()
            out, err = proc.communicate(timeout=10)
            pytest.fail(f"recovery did not get ready: {first}{out}\n{err[-3000:]}")
        restart()
        out, err = proc.communicate("restarted\n", timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return parse("recovery", out, err)
