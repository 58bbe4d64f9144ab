"""DefaultTTLManager: one head timer per queue, re-armed only when earlier; queue-expiry timers."""

from __future__ import annotations

import logging
from typing import Any

from ottermq.ttl.default import DefaultTTLManager
from ottermq.ttl.noop import NoopTTLManager


class Handle:
    def __init__(self, when: float, cb: Any, args: tuple[Any, ...]) -> None:
        self.when, self.cb, self.args, self.cancelled = when, cb, args, False

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    def __init__(self) -> None:
        self.handles: list[Handle] = []

    def call_later(self, delay: float, cb: Any, *args: Any) -> Handle:
        h = Handle(delay, cb, args)
        self.handles.append(h)
        return h

    def live(self) -> list[Handle]:
        return [h for h in self.handles if not h.cancelled]


class Target:
    def __init__(self) -> None:
        self.expired: list[int] = []
        self.queue_expired: list[int] = []

    def expire(self, now: int) -> None:
        self.expired.append(now)

    def expire_queue(self, now: int) -> None:
        self.queue_expired.append(now)


def test_schedule_keeps_earlier_timer_and_replaces_later_one():
    loop, now = Loop(), [10_000]
    m = DefaultTTLManager(loop, lambda: now[0])  # type: ignore[arg-type]
    t = Target()
    m.schedule(t, 10_500)
    m.schedule(t, 10_900)  # later: keep the armed one
    assert [h.when for h in loop.live()] == [0.5]
    m.schedule(t, 10_100)  # earlier: re-arm
    assert [h.when for h in loop.live()] == [0.1]
    h = loop.live()[0]
    now[0] = 10_100
    h.cancelled = True  # fired
    h.cb(*h.args)
    assert t.expired == [10_100]
    m.schedule(t, 10_200)  # after firing, a new timer can be armed
    assert len(loop.live()) == 1


def test_past_deadline_fires_immediately_and_cancel_drops_all():
    loop, now = Loop(), [5_000]
    m = DefaultTTLManager(loop, lambda: now[0])  # type: ignore[arg-type]
    t = Target()
    m.schedule(t, 4_000)
    assert loop.live()[0].when == 0
    m.schedule_queue_expiry(t, 6_000)
    m.cancel(t)
    assert loop.live() == []


def test_queue_expiry_is_replaced_on_touch():
    loop, now = Loop(), [0]
    m = DefaultTTLManager(loop, lambda: now[0])  # type: ignore[arg-type]
    t = Target()
    m.schedule_queue_expiry(t, 1_000)
    m.schedule_queue_expiry(t, 2_000)
    live = loop.live()
    assert [h.when for h in live] == [2.0]
    live[0].cb(*live[0].args)
    assert t.queue_expired == [0]


def test_noop_manager_gives_no_deadlines():
    m = NoopTTLManager()
    assert m.expires_at(1, 5, 5) is None
    m.schedule(Target(), 1)  # nothing armed, nothing raised


def test_a_target_that_raises_is_logged_and_its_timer_can_be_armed_again() -> None:
    class Failing(Target):
        def expire(self, now: int) -> None:
            raise RuntimeError("a bug")

        def expire_queue(self, now: int) -> None:
            raise RuntimeError("a bug")

    class Records(logging.Handler):  # on the logger itself: another test may have set up the broker's logging
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.seen.append(record)

    loop, now = Loop(), [1_000]
    m = DefaultTTLManager(loop, lambda: now[0])  # type: ignore[arg-type]
    t = Failing()
    m.schedule(t, 1_000)
    m.schedule_queue_expiry(t, 1_000)
    records = Records()
    logger = logging.getLogger("ottermq.ttl.default")
    logger.addHandler(records)
    try:
        for h in loop.live():
            h.cancelled = True
            h.cb(*h.args)  # nothing escapes into the loop
    finally:
        logger.removeHandler(records)
    errors = [r.exc_info[1] for r in records.seen if r.exc_info]
    assert [str(e) for e in errors] == ["a bug", "a bug"]
    m.schedule(t, 2_000)
    assert [h.when for h in loop.live()] == [1.0]
