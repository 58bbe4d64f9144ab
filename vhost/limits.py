"""A queue's length limits and overflow (``x-max-length``, ``x-max-length-bytes``, ``x-overflow``).

Rules:
- The limits count ready messages and their body bytes (delivered, unacked ones do not count).
- ``drop-head``: the queue dead-letters its heads (``maxlen``) while it is over a limit, after every
  enqueue and requeue and when a policy lowers a limit.
- ``reject-publish`` refuses a message that would take the queue over a limit (its publisher gets a
  nack); ``reject-publish-dlx`` refuses it and dead-letters it.
- A quorum queue's limits (``SoftLimits``, RabbitMQ 3.10's ``rabbit_fifo``): ``reject-publish`` is a
  soft limit: the publish that takes the queue over is accepted, the next ones are refused until the
  queue is down to 80 % of its limits (``is_below_soft_limit``); ``reject-publish-dlx`` acts as
  ``drop-head`` (RabbitMQ logs a warning and keeps its default).
- The queue type chooses the kind (``QueueType.limits``); a queue with no limit has none at all, so
  the hot path pays one ``is None`` test.
"""

from __future__ import annotations

from typing import Final

DROP_HEAD: Final = "drop-head"
REJECT_PUBLISH: Final = "reject-publish"
REJECT_PUBLISH_DLX: Final = "reject-publish-dlx"

# what ``admit`` answers
ADMIT: Final = 0
REFUSE: Final = 1
REFUSE_DEAD_LETTER: Final = 2  # refuse, and dead-letter the refused message (``maxlen``)


class Limits:
    """Hard limits (a classic queue's)."""

    __slots__ = ("max_length", "max_bytes", "overflow", "drops_head")

    def __init__(self, max_length: int | None, max_bytes: int | None, overflow: str) -> None:
        self.max_length = max_length
        self.max_bytes = max_bytes
        self.overflow = overflow
        self.drops_head = overflow == DROP_HEAD

    def over(self, count: int, nbytes: int) -> bool:
        """Whether ``count`` ready messages of ``nbytes`` body bytes are over a limit."""
        max_length, max_bytes = self.max_length, self.max_bytes
        return (max_length is not None and count > max_length) or (
            max_bytes is not None and nbytes > max_bytes
        )

    def admit(self, count: int, nbytes: int, size: int) -> int:
        """May a message of ``size`` bytes join ``count`` ready messages of ``nbytes`` bytes?

        Returns:
            ``ADMIT``, ``REFUSE`` or ``REFUSE_DEAD_LETTER``.
        """
        if self.drops_head or not self.over(count + 1, nbytes + size):
            return ADMIT
        return REFUSE_DEAD_LETTER if self.overflow == REJECT_PUBLISH_DLX else REFUSE

    def carry(self, old: Limits) -> None:
        """Take over the state of the limits these replace (a policy changed them)."""

    def returning(self, count: int, nbytes: int) -> None:
        """Returns are about to join ``count`` ready messages of ``nbytes`` bytes (soft limits)."""

    def added(self, count: int, nbytes: int) -> None:
        """Messages joined (an enqueue, a requeue), overflow is done: soft limits block when over."""


class SoftLimits(Limits):
    """A quorum queue's limits: ``reject-publish`` is a soft limit (see the module rules)."""

    __slots__ = ("blocked",)

    def __init__(self, max_length: int | None, max_bytes: int | None, overflow: str) -> None:
        super().__init__(max_length, max_bytes, DROP_HEAD if overflow == REJECT_PUBLISH_DLX else overflow)
        self.blocked = False  # over the limit: publishes are refused until below 80 % of it

    def below_soft_limit(self, count: int, nbytes: int) -> bool:
        """``rabbit_fifo:is_below_soft_limit``: at most 80 % of every limit."""
        max_length, max_bytes = self.max_length, self.max_bytes
        return (max_length is None or count <= int(max_length * 0.8)) and (
            max_bytes is None or nbytes <= int(max_bytes * 0.8)
        )

    def admit(self, count: int, nbytes: int, size: int) -> int:
        if self.drops_head:
            return ADMIT
        if self.blocked and not self.below_soft_limit(count, nbytes):
            return REFUSE
        self.blocked = False
        return ADMIT

    def carry(self, old: Limits) -> None:
        if isinstance(old, SoftLimits):
            self.blocked = old.blocked

    def returning(self, count: int, nbytes: int) -> None:
        if self.blocked and self.below_soft_limit(count, nbytes):
            self.blocked = False

    def added(self, count: int, nbytes: int) -> None:
        if self.over(count, nbytes):
            self.blocked = True


def make_limits(max_length: int | None, max_bytes: int | None, overflow: str, soft: bool) -> Limits | None:
    """The limits part of a queue (None: no limit)."""
    if max_length is None and max_bytes is None:
        return None
    return SoftLimits(max_length, max_bytes, overflow) if soft else Limits(max_length, max_bytes, overflow)
