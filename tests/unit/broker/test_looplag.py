"""The event loop's lag monitor (``broker/node/looplag.py``) on a real event loop: an idle loop records
lags near 0, a callback that holds the loop shows as one observation of about its length, in the
buckets the adversarial suite reads (0.25 s, 1 s), and the WARNING names that callback."""

from __future__ import annotations

import asyncio
import logging
import sys
import time

import pytest
from ottermq.broker.node.looplag import BUCKETS, LoopMonitor, describe


def hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # what a turn that computes for that long does to everyone else


LINE = hold_the_loop.__code__.co_firstlineno + 1


async def _ticks(monitor: LoopMonitor, count: int) -> None:
    """Wait until ``count`` more ticks were observed."""
    target = monitor.observations + count
    while monitor.observations < target:
        await asyncio.sleep(0.005)


def test_the_buckets_hold_the_limits_the_tests_assert_on() -> None:
    assert 0.25 in BUCKETS and 1.0 in BUCKETS and list(BUCKETS) == sorted(BUCKETS)


def test_an_idle_loop_records_small_lags() -> None:
    async def body() -> LoopMonitor:
        monitor = LoopMonitor(asyncio.get_running_loop(), threshold=0.25)
        monitor.start()
        try:
            await _ticks(monitor, 5)
        finally:
            monitor.stop()
        return monitor

    monitor = asyncio.run(body())
    assert monitor.observations >= 5
    assert monitor.worst < 0.25  # a loaded 2-core machine, not a stall
    le, count = monitor.cumulative()[-1]
    assert (le, count) == ("+Inf", monitor.observations)


def test_a_turn_that_holds_the_loop_is_one_late_tick_named_in_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> LoopMonitor:
        monitor = LoopMonitor(asyncio.get_running_loop(), threshold=0.1)
        monitor.start()
        try:
            await _ticks(monitor, 2)
            asyncio.get_running_loop().call_soon(hold_the_loop, 0.4)
            await _ticks(monitor, 2)
        finally:
            monitor.stop()
        return monitor

    with caplog.at_level(logging.WARNING, logger="ottermq.broker.node.looplag"):
        monitor = asyncio.run(body())
    # held 0.4 s: the tick due during it ran at least 0.4 - TICK late
    assert 0.35 <= monitor.worst < 2.0
    cumulative = dict(monitor.cumulative())
    assert cumulative["+Inf"] - cumulative["0.25"] == 1  # one observation over 250 ms
    assert monitor.slow_turns == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("event loop held for 0.")
    # the callback, and where it was: nothing of the frames below the loop (asyncio.run and its caller)
    assert warnings[0].endswith(f"hold_the_loop (test_looplag.py:{LINE})"), warnings[0]


def test_no_warning_and_no_thread_with_a_zero_threshold(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> LoopMonitor:
        monitor = LoopMonitor(asyncio.get_running_loop(), threshold=0)
        monitor.start()
        try:
            assert monitor._thread is None
            await _ticks(monitor, 1)
            hold_the_loop(0.1)
            await _ticks(monitor, 2)
        finally:
            monitor.stop()
        return monitor

    with caplog.at_level(logging.WARNING, logger="ottermq.broker.node.looplag"):
        monitor = asyncio.run(body())
    assert monitor.worst >= 0.05
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_describe_names_the_outermost_and_innermost_frames() -> None:
    def inner() -> str:
        return describe(sys._getframe())

    parts = inner().split(" > ")
    line = inner.__code__.co_firstlineno + 1
    assert parts[-1] == f"{inner.__qualname__} (test_looplag.py:{line})"
    assert parts[1] == "..."  # pytest's frames between the outermost and the last few
    assert len(parts) == 2 + 8
    assert describe(None) == ""
