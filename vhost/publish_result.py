"""What ``VHost.publish`` tells its caller (the channel, a transaction's commit, dead-lettering, the
delayed exchange, the management API): routed or not, refused, what was stored and must be committed
before a confirm."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .message import Entry

if TYPE_CHECKING:
    from .queue import Queue


class PublishResult:
    """The outcome of ``VHost.publish`` (see there)."""

    __slots__ = ("routed", "refused", "stored", "excluded")

    def __init__(
        self,
        routed: bool,
        refused: bool,
        stored: list[tuple[Queue, Entry]] | None = None,
        excluded: bool = False,
    ) -> None:
        self.routed = routed  # at least one queue took it or refused it
        self.refused = refused  # a reject-publish queue refused it
        self.stored = stored  # (queue, entry) written to the store; None: nothing to wait for
        self.excluded = excluded  # routed only to queues ``exclude`` named: it went nowhere

    def __repr__(self) -> str:
        return (
            f"PublishResult(routed={self.routed}, refused={self.refused}, stored={self.stored!r}, "
            f"excluded={self.excluded})"
        )


UNROUTED: Final = PublishResult(False, False)
DUPLICATE: Final = PublishResult(False, False)  # a deduplicating exchange saw it before: not routed
EXCLUDED: Final = PublishResult(False, False, None, True)
ROUTED: Final = PublishResult(True, False)
REFUSED: Final = PublishResult(True, True)
