"""Client programs in other languages (Java, Ruby, PHP): one scenario per run, one JSON object on stdout.

Each program prints ``{"ok": bool, "error": text|null, "failures": [...], "data": {...}}`` as its last line;
the tests assert on ``data`` and call ``self_check`` for what the program checked itself. A ``recovery``
scenario prints ``ready``, waits for a line on stdin while the test restarts the broker, then finishes.

The programs share their scenarios' output shapes, so the checks every language makes are here:
``check_ttl_deaths`` (the ``ttl-dlx`` scenario, with how the library decodes values as ``Decoded``),
``check_last_death_headers`` (ottermq's extension) and ``channel_error`` (the expected ``channel-error``
data).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

RUN_TIMEOUT = 30
FIRST_DEATH = {"x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason"}
LAST_DEATH = {"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason"}


@dataclass
class ProgramRun:
    data: dict[str, Any]
    failures: list[str]
    ok: bool
    error: str | None = None

    def self_check(self) -> None:
        assert self.ok and self.failures == [], self.failures


def parse(scenario: str, stdout: str, stderr: str, allow_error: bool = False) -> ProgramRun:
    """The run's JSON line; fails the test on no JSON, or on a client error (with the program's output)
    unless ``allow_error`` (a test that expects the client to fail reads ``error``)."""
    lines = stdout.strip().splitlines()
    try:
        result: dict[str, Any] = json.loads(lines[-1] if lines else "")
    except json.JSONDecodeError:
        pytest.fail(f"{scenario} printed no JSON:\n{stdout}\n{stderr[-3000:]}")
    if result.get("error") and not allow_error:
        pytest.fail(f"{scenario}: {result['error']}\n{json.dumps(result, indent=1)}\n{stderr[-3000:]}")
    return ProgramRun(result["data"], result["failures"], result["ok"], result.get("error"))


def run(
    argv: Sequence[str],
    scenario: str,
    timeout: float = RUN_TIMEOUT,
    env: dict[str, str] | None = None,
    allow_error: bool = False,
) -> ProgramRun:
    """Run one scenario to its end; ``env`` is added to this process's environment."""
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{scenario} did not exit within {timeout} s; stdout: {exc.stdout!r}")
    return parse(scenario, proc.stdout, proc.stderr, allow_error)


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


@dataclass(frozen=True)
class Decoded:
    """How a client library decodes header values, as its program prints them (``{"type", "value"}``):
    a long string, an array of values, the ``x-death`` ``count`` of 1, and the class of ``time``."""

    string: Callable[[str], dict[str, Any]]
    array: Callable[[list[Any]], dict[str, Any]]
    count_one: dict[str, Any]
    time_type: str


def check_ttl_deaths(run: ProgramRun, prefix: str, decoded: Decoded) -> dict[str, dict[str, Any]]:
    """The ``ttl-dlx`` scenario: one dead letter from queue TTL (``<prefix>.work``) and one from a
    per-message expiration of 60 (``<prefix>.plain``), each with one ``x-death`` entry as RabbitMQ 3.10
    writes it and no ``expiration`` left. ottermq's ``x-last-death-*`` names are left out (an extension,
    ``check_last_death_headers``). Returns the deaths by body for the language's own assertions."""
    by_body = {d["body"]: d for d in run.data["deaths"]}
    assert set(by_body) == {"message-ttl", "queue-ttl"}
    for body, queue in (("message-ttl", f"{prefix}.plain"), ("queue-ttl", f"{prefix}.work")):
        death = by_body[body]
        assert set(death["header_names"]) - LAST_DEATH == FIRST_DEATH
        assert death["x_death_entries"] == 1 and death["expiration_after"] is None
        fields = dict(death["x_death"])
        assert fields.pop("time")["type"] == decoded.time_type
        expected = {
            "count": decoded.count_one,
            "exchange": decoded.string(""),
            "queue": decoded.string(queue),
            "reason": decoded.string("expired"),
            "routing-keys": decoded.array([decoded.string(queue)]),
        }
        if body == "message-ttl":
            expected["original-expiration"] = decoded.string("60")
        assert fields == expected
    return by_body


def check_last_death_headers(run: ProgramRun) -> None:
    """ottermq writes ``x-last-death-*`` beside ``x-first-death-*`` (as RabbitMQ 3.13+; 3.10 does not)."""
    for death in run.data["deaths"]:
        assert LAST_DEATH <= set(death["header_names"])


def channel_error(run: ProgramRun, vhost: str, text_prefix: str = "", **specific: Any) -> dict[str, Any]:
    """The ``channel-error`` data every program prints after a passive declare of a missing queue: 404
    with RabbitMQ's text (after the library's ``text_prefix``), the channel closed, the connection and a
    new channel fine; ``specific`` adds what the library reports of its own."""
    missing = run.data["missing_queue"]
    return {
        "missing_queue": missing,
        "reply_code": 404,
        "reply_text": f"{text_prefix}NOT_FOUND - no queue '{missing}' in vhost '{vhost}'",
        "channel_open": False,
        "connection_open": True,
        "new_channel_ok": True,
        **specific,
    }
