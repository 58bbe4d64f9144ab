"""The TTL manager interface: deadlines for messages and timers that fire queue expiry.

Two implementations share this interface and one is chosen at start-up
(``broker/node/wiring.py``, from ``OTTERMQ_ENABLE_TTL``): ``ttl.default.DefaultTTLManager`` arms one
timer per queue for its earliest deadline plus one for queue expiry (``x-expires``);
``ttl.noop.NoopTTLManager`` gives no deadlines and arms nothing.
"""

from __future__ import annotations

import time
from typing import Protocol


class Expirable(Protocol):
    """What a TTL manager drives: a queue."""

    def expire(self, now: int) -> None:
        """Dead-letter every message whose deadline has passed; re-arm for the next one."""

    def expire_queue(self, now: int) -> None:
        """The ``x-expires`` timer fired: delete the queue if it is still unused."""


class Clock(Protocol):
    def __call__(self) -> int:
        """Current wall-clock time in epoch milliseconds."""
        ...


def wall_clock_ms() -> int:
    """Epoch milliseconds (deadlines are wall-clock so they survive restarts)."""
    return int(time.time() * 1000)


class TTLManager(Protocol):
    """Deadlines and timers for message TTL and queue expiry."""

    enabled: bool

    def now(self) -> int:
        """Epoch milliseconds."""
        ...

    def expires_at(self, now: int, queue_ttl: int | None, message_ttl: int | None) -> int | None:
        """The deadline of a message enqueued now (None: never expires)."""
        ...

    def schedule(self, target: Expirable, deadline: int) -> None:
        """Make sure ``target.expire`` runs at ``deadline`` (keeps an earlier timer)."""
        ...

    def cancel(self, target: Expirable) -> None:
        """Drop the message timer of ``target`` (queue deleted)."""
        ...

    def schedule_queue_expiry(self, target: Expirable, at: int) -> None:
        """(Re)arm the ``x-expires`` timer of ``target`` for ``at`` (replaces the old one)."""
        ...

    def cancel_queue_expiry(self, target: Expirable) -> None:
        """Drop the ``x-expires`` timer of ``target``."""
        ...
