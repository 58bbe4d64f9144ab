"""What becomes of a returned delivery: counted, dead-lettered past the delivery limit, or held back
for a delayed retry before it is ready again.

Rules:
- A return counts in the entry's ``delivery_count`` when the queue type counts every return (quorum
  queues), when the queue has a delivery limit (``x-delivery-limit``) or when a delayed retry covers
  it; an entry already past its TTL deadline is not counted (it is on its way out).
- Past the delivery limit (``delivery_count > limit``) the entry is dead-lettered (``delivery_limit``).
- Delayed retry (RabbitMQ 4.3's ``x-delayed-retry-*``, an extension on classic queues here): a return
  is a failure (``basic.reject``, a channel or connection closed with the delivery) or not
  (``basic.nack``, ``basic.recover``); one that ``x-delayed-retry-type`` covers (``all``, ``failed``,
  ``returned``) is held for ``min(x-delayed-retry-min * delivery count, x-delayed-retry-max)`` ms (the
  count at least 1), then goes back in place. A return with ``failed=None`` (the management API's
  requeueing get) is never held.
- Held entries are in state ``HELD``; one timer, armed for the earliest, releases them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .message import HELD, Entry

if TYPE_CHECKING:
    from .queue_args import QueueArgs

CallAt = Callable[[int, Callable[[], None]], Any]
"""A timer source: ``call_at(epoch ms, callback)`` returns a handle with ``cancel()``."""


class Returns:
    """A queue's returned deliveries: the delivery limit and the delayed retry's held entries."""

    __slots__ = ("limit", "_type", "_min", "_max", "_held", "_timer", "_at")

    def __init__(self, args: QueueArgs) -> None:
        self._held: list[tuple[int, int, Entry]] = []  # (ready at, seq, entry), a heap
        self._timer: Any = None
        self._at: int | None = None
        self.configure(args)

    def configure(self, args: QueueArgs) -> None:
        """The arguments in force (declared, or changed by a policy)."""
        self.limit = args.delivery_limit
        self._type = args.delayed_retry_type
        self._min = args.delayed_retry_min
        self._max = args.delayed_retry_max

    def __len__(self) -> int:
        """Entries held by a delayed retry (management ``messages_delayed``)."""
        return len(self._held)

    def applies(self, failed: bool | None, call_at: CallAt | None) -> bool:
        """Whether a return (``failed``: see the module rules) is held for a delayed retry."""
        kind = self._type
        if kind == "disabled" or failed is None or call_at is None or self._min is None:
            return False
        return kind == "all" or (kind == "failed") == failed

    def delay(self, delivery_count: int) -> int:
        """Milliseconds a returned entry is held: RabbitMQ 4.3's linear back-off, capped."""
        delay = (self._min or 0) * max(1, delivery_count)
        high = self._max
        return min(delay, high) if high is not None else delay

    def sort(
        self, entries: list[Entry], now: int, counts_all: bool, retry: bool
    ) -> tuple[list[Entry], list[Entry], list[Entry]]:
        """Count the returns and mark them redelivered.

        Returns:
            ``(back, held, over_limit)``: ready again now, held for a delayed retry (``retry``),
            past the delivery limit.
        """
        limit = self.limit
        counts = counts_all or retry or limit is not None
        back: list[Entry] = []
        held: list[Entry] = []
        over: list[Entry] = []
        for entry in entries:
            if counts and (entry.deadline is None or now < entry.deadline):
                entry.delivery_count += 1
                if limit is not None and entry.delivery_count > limit:
                    over.append(entry)
                    continue
            entry.redelivered = True
            if retry:
                held.append(entry)
            else:
                back.append(entry)
        return back, held, over

    def over_limit(self, entries: Iterable[Entry]) -> list[Entry]:
        """Recovered entries already past the delivery limit."""
        limit = self.limit
        return [] if limit is None else [e for e in entries if e.delivery_count > limit]

    def hold(self, entries: list[Entry], now: int, call_at: CallAt, release: Callable[[], None]) -> None:
        """Hold returned entries; ``release`` runs when the earliest is due."""
        for entry in entries:
            entry.state = HELD
            heapq.heappush(self._held, (now + self.delay(entry.delivery_count), entry.seq, entry))
        self.arm(call_at, release)

    def arm(self, call_at: CallAt | None, release: Callable[[], None]) -> None:
        """Arm the timer for the earliest held entry (an earlier one armed already stays)."""
        if not self._held or call_at is None:
            return
        due = self._held[0][0]
        if self._at is not None and self._at <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._at = due
        self._timer = call_at(due, release)

    def due(self, now: int) -> list[Entry]:
        """The timer fired: the held entries whose delay is over (the timer is disarmed)."""
        self._timer = None
        self._at = None
        held = self._held
        back: list[Entry] = []
        while held and held[0][0] <= now:
            back.append(heapq.heappop(held)[2])
        return back

    def clear(self) -> None:
        """The queue is deleted: drop the held entries and the timer."""
        self._held.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._at = None
