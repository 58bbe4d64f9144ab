"""No-op TTL manager for ``OTTERMQ_ENABLE_TTL=false``: no deadlines, no timers.

Messages never expire and ``x-expires`` never deletes a queue; the arguments are still
validated at ``queue.declare``.
"""

from __future__ import annotations

from .manager import Expirable, wall_clock_ms


class NoopTTLManager:
    enabled = False

    def now(self) -> int:
        return wall_clock_ms()

    def expires_at(self, now: int, queue_ttl: int | None, message_ttl: int | None) -> int | None:
        return None

    def schedule(self, target: Expirable, deadline: int) -> None:
        pass

    def cancel(self, target: Expirable) -> None:
        pass

    def schedule_queue_expiry(self, target: Expirable, at: int) -> None:
        pass

    def cancel_queue_expiry(self, target: Expirable) -> None:
        pass
