"""Default TTL manager: one ``loop.call_later`` per queue for its earliest deadline, plus one
per queue for ``x-expires``.

Rules:
- A queue's message timer is re-armed only when the new deadline is earlier than the armed one
  (RabbitMQ's ``ensure_ttl_timer``); when it fires, the queue drops what expired and asks again
  for its next deadline.
- Timers are stored on the manager keyed by the queue object, so queues stay free of loop handles.
- A callback that raises is logged; nothing escapes into the event loop.
"""

from __future__ import annotations

import asyncio
import logging

from .deadline import expires_at
from .manager import Clock, Expirable, wall_clock_ms

log = logging.getLogger(__name__)


class DefaultTTLManager:
    """Per-queue head timers on an asyncio loop.

    Args:
        loop: the event loop that runs the timers.
        clock: epoch-ms clock (injected in tests).
    """

    enabled = True

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock = wall_clock_ms) -> None:
        self._loop = loop
        self._clock = clock
        self._timers: dict[Expirable, tuple[int, asyncio.TimerHandle]] = {}
        self._expiry: dict[Expirable, asyncio.TimerHandle] = {}

    def now(self) -> int:
        return self._clock()

    def expires_at(self, now: int, queue_ttl: int | None, message_ttl: int | None) -> int | None:
        return expires_at(now, queue_ttl, message_ttl)

    def schedule(self, target: Expirable, deadline: int) -> None:
        armed = self._timers.get(target)
        if armed is not None:
            if armed[0] <= deadline:
                return
            armed[1].cancel()
        delay = max(0, deadline - self._clock()) / 1000
        handle = self._loop.call_later(delay, self._fire, target)
        self._timers[target] = (deadline, handle)

    def _fire(self, target: Expirable) -> None:
        self._timers.pop(target, None)
        try:
            target.expire(self._clock())
        except Exception:  # a bug: logged, and the loop's other timers and connections go on
            log.exception("the TTL timer of %r failed", target)

    def cancel(self, target: Expirable) -> None:
        armed = self._timers.pop(target, None)
        if armed is not None:
            armed[1].cancel()
        self.cancel_queue_expiry(target)

    def schedule_queue_expiry(self, target: Expirable, at: int) -> None:
        old = self._expiry.pop(target, None)
        if old is not None:
            old.cancel()
        delay = max(0, at - self._clock()) / 1000
        self._expiry[target] = self._loop.call_later(delay, self._fire_expiry, target)

    def _fire_expiry(self, target: Expirable) -> None:
        self._expiry.pop(target, None)
        try:
            target.expire_queue(self._clock())
        except Exception:
            log.exception("the expiry timer of %r failed", target)

    def cancel_queue_expiry(self, target: Expirable) -> None:
        old = self._expiry.pop(target, None)
        if old is not None:
            old.cancel()
