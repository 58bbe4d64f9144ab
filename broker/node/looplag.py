"""How long the event loop keeps everyone waiting: the loop-lag histogram and the slow-turn WARNING.

Rules:

1. A timer on the loop fires every ``TICK`` (20 ms) and records how late it ran: the loop's lag
   (Node.js's ``monitorEventLoopDelay`` measures the same). A turn that holds the loop for ``d``
   shows as one observation between ``d - TICK`` and ``d``; an idle loop records about 0. The
   observations go into ``counts`` over :data:`BUCKETS` (which include 0.25 s and 1 s), ``total``
   and ``worst`` (since start), exported as ``ottermq_event_loop_lag_seconds{worker}`` and
   ``ottermq_event_loop_lag_max_seconds{worker}`` (``broker/management/node_metrics.py``).
2. Naming the culprit costs next to nothing while the loop is healthy. uvloop has no per-callback
   hook (asyncio's debug mode and ``slow_callback_duration`` would wrap every callback), so a
   watchdog thread wakes every ``threshold / 2`` (125 ms), reads when the next tick is due, and only
   when the tick is already ``threshold / 2`` late samples the loop thread's Python stack
   (``sys._current_frames``), then every ``threshold / 5`` (at most 50 ms) until the loop is back:
   the outermost frame is the callback or task that is running, the innermost where it is now.
3. When the late tick finally runs with a lag of at least ``threshold``
   (``OTTERMQ_LOOP_LAG_WARNING``, 250 ms; 0 turns the WARNING and the thread off), one WARNING
   names the lag, how much of it the loop's thread spent computing (``time.thread_time``: far less
   than the lag means it waited, for a CPU of a busy machine, the GIL or a system call) and the
   sampled stack. A loop that has not come back after ``STUCK`` seconds is
   reported by the thread itself, once per stall, so that a loop stuck for good is seen too.
"""

from __future__ import annotations

import asyncio
import bisect
import inspect
import logging
import os
import sys
import threading
import time
from collections import Counter
from types import CodeType, FrameType

log = logging.getLogger(__name__)

TICK = 0.02
"""Seconds between two timer ticks (rule 1)."""

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the lag histogram's buckets; a last one, +Inf, follows."""

STUCK = 10.0
"""Seconds after which the watchdog reports a loop that has not come back (rule 3)."""

FRAMES_SHOWN = 8  # innermost frames named in a WARNING, after the outermost one


class LoopMonitor:
    """The loop-lag histogram and the slow-turn watchdog of one process (see the module rules).

    Args:
        loop: the event loop to watch; :meth:`start` must be called on its thread.
        threshold: seconds of lag that log a WARNING (0: none, and no watchdog thread).
        tick: seconds between ticks.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold: float, tick: float = TICK) -> None:
        self.loop = loop
        self.threshold = threshold
        self.tick = tick
        self.counts = [0] * (len(BUCKETS) + 1)  # per bucket, not cumulative; the last is +Inf
        self.total = 0.0  # sum of the observations (seconds)
        self.worst = 0.0  # the largest observation since start (seconds)
        self.slow_turns = 0  # observations of at least ``threshold``
        self._due = 0.0  # time.monotonic() when the pending tick is due; 0: not running
        self._cpu = 0.0  # the loop thread's CPU time when the pending tick was scheduled
        self._handle: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._loop_thread = 0
        self._base: tuple[CodeType, ...] = ()  # the frames below the loop's callbacks (loop_base)
        self._sampled_for = 0.0  # the due time the samples belong to
        self._samples: Counter[str] = Counter()  # what the loop thread was running (rule 2)
        self._stuck_for = 0.0  # the due time the watchdog reported as stuck

    @property
    def observations(self) -> int:
        return sum(self.counts)

    def start(self) -> None:
        """Start ticking (and the watchdog thread); call it on the loop's thread."""
        if self._handle is not None:
            return
        self._loop_thread = threading.get_ident()
        self._base = loop_base()
        self._schedule()
        if self.threshold > 0 and self._thread is None:
            self._stopping.clear()
            self._thread = threading.Thread(target=self._watch, name="ottermq-loop-watchdog", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop ticking and the watchdog."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._due = 0.0
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(1.0)
            self._thread = None

    def observe(self, lag: float) -> None:
        """Count one lag (seconds) into the histogram."""
        self.counts[bisect.bisect_left(BUCKETS, lag)] += 1
        self.total += lag
        if lag > self.worst:
            self.worst = lag

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, count)`` pairs as Prometheus wants them: cumulative, ending with ``+Inf``."""
        out, running = [], 0
        for bound, n in zip([*BUCKETS, None], self.counts, strict=True):
            running += n
            out.append(("+Inf" if bound is None else repr(bound), running))
        return out

    # -- on the loop ---------------------------------------------------------------------------------
    def _schedule(self) -> None:
        self._due = time.monotonic() + self.tick
        self._cpu = time.thread_time()
        self._handle = self.loop.call_later(self.tick, self._on_tick)

    def _on_tick(self) -> None:
        lag = max(0.0, time.monotonic() - self._due)
        self.observe(lag)
        if self.threshold > 0 and lag >= self.threshold:
            self.slow_turns += 1
            # the loop thread's own CPU time since the last tick: far below the lag means it was
            # waiting (for the machine's CPUs, the GIL or a system call), not computing
            log.warning(
                "event loop held for %.3f s (over %.3f s, OTTERMQ_LOOP_LAG_WARNING; its thread computed"
                " for %.3f s of it): %s",
                lag,
                self.threshold,
                time.thread_time() - self._cpu,
                self._report(),
            )
        self._schedule()

    # -- the watchdog thread -------------------------------------------------------------------------
    def _watch(self) -> None:
        calm, close = self.threshold / 2, min(0.05, self.threshold / 5)
        wait = calm
        while not self._stopping.wait(wait):
            due = self._due
            late = time.monotonic() - due if due else 0.0
            if late < calm:
                wait = calm  # a healthy loop: a look every threshold / 2
                continue
            wait = close  # a late one: a sample every 50 ms until it comes back
            if self._sampled_for != due:  # a new stall: its samples start afresh
                self._samples = Counter()
                self._sampled_for = due
            where = self._where()
            self._samples[where] += 1
            if late >= STUCK and self._stuck_for != due:
                self._stuck_for = due
                log.warning("event loop has not come back for %.1f s: %s", late, where)

    def _where(self) -> str:
        """What the loop thread is running now (its stack without the frames below the loop)."""
        frames = sys._current_frames()
        described = describe(frames.get(self._loop_thread), self._base)
        if described:
            return described
        names = {t.ident: t.name for t in threading.enumerate()}
        others = [
            f"{names.get(ident, ident)} in {_frame_name(frame)}"
            for ident, frame in frames.items()
            if ident not in (self._loop_thread, threading.get_ident())
        ]
        listed = "; ".join(others) or "none"
        return f"no callback running (the loop's own I/O, or waiting for the GIL; other threads: {listed})"

    def _report(self) -> str:
        """The samples of the stall that just ended, most frequent first (rule 3)."""
        if self._sampled_for != self._due or not self._samples:
            # the watchdog did not run either: the process was not scheduled, or C code held the GIL
            return "not sampled (the watchdog thread did not get to run meanwhile)"
        total = sum(self._samples.values())
        (where, n), *_ = self._samples.most_common(1)
        return where if n == total else f"{where} ({n} of {total} samples)"


def describe(frame: FrameType | None, base: tuple[CodeType, ...] = ()) -> str:
    """The callback a thread is running, from its innermost Python ``frame``, without the frames
    ``base`` names (the program's frames below the event loop): the outermost remaining frame (the
    callback, or the task's coroutine), then the innermost ``FRAMES_SHOWN`` frames. Empty when no
    frame is left (the loop is in its own C code)."""
    frames: list[FrameType] = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()  # outermost first
    skip = 0
    while skip < len(frames) and skip < len(base) and frames[skip].f_code is base[skip]:
        skip += 1
    frames = frames[skip:]
    if not frames:
        return ""
    shown = [frames[0], *frames[1:][-FRAMES_SHOWN:]]
    parts = [_frame_name(f) for f in shown]
    if len(frames) > len(shown):
        parts.insert(1, "...")
    return " > ".join(parts)


def loop_base() -> tuple[CodeType, ...]:
    """The code objects of the calling thread's frames below the running coroutine or callback
    (``asyncio.run``/``uvloop.run`` and what called it), outermost first: what :func:`describe`
    leaves out. Call it from a coroutine the loop runs."""
    frames: list[FrameType] = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()
    base = []
    for f in frames:
        if f.f_code.co_flags & inspect.CO_COROUTINE:
            break
        base.append(f.f_code)
    return tuple(base)


def _frame_name(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    at = path.rfind("/ottermq/")  # ottermq/broker/..., aiohttp/web_protocol.py, ...
    if at >= 0:
        path = path[at + 1 :]
    elif "/site-packages/" in path:
        path = path[path.rindex("/site-packages/") + len("/site-packages/") :]
    else:
        path = os.path.basename(path)
    return f"{code.co_qualname} ({path}:{frame.f_lineno})"
