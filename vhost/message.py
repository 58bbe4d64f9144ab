"""Messages as the broker holds them.

A ``Message`` is the content shared by every queue it was routed to: the exchange and routing key
it was published with, the content-header property bytes exactly as the publisher sent them, and
the body. Only what routing and queueing need is decoded (delivery mode, priority, expiration),
once, at publish. A per-queue ``Entry`` carries what differs between queues: redelivery state,
deadline and the queue's sequence number.
"""

from __future__ import annotations

from typing import Any

from ottermq.amqp.props import get_headers


class Message:
    """Immutable message content (treat as frozen; ``__slots__`` for memory)."""

    __slots__ = (
        "exchange",
        "routing_key",
        "raw_props",
        "body",
        "persistent",
        "priority",
        "expiration",
        "_headers",
    )

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        raw_props: bytes,
        body: bytes,
        persistent: bool = False,
        priority: int | None = None,
        expiration: int | None = None,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.raw_props = raw_props
        self.body = body
        self.persistent = persistent
        self.priority = priority
        self.expiration = expiration  # milliseconds, already validated
        self._headers: Any = False  # False = not decoded yet

    @property
    def headers(self) -> dict[str, Any] | None:
        """The decoded ``headers`` property (decoded on first use)."""
        if self._headers is False:
            self._headers = get_headers(self.raw_props)
        return self._headers  # type: ignore[no-any-return]

    @property
    def size(self) -> int:
        """Body size in bytes (what ``x-max-length-bytes`` counts)."""
        return len(self.body)



class Entry:
    """A message's place in one queue."""

    __slots__ = ("message", "seq", "redelivered", "deadline", "delivery_count", "store_id")

    def __init__(self, message: Message, seq: int, deadline: float | None = None) -> None:
        self.message = message
        self.seq = seq
        self.redelivered = False
        self.deadline = deadline
        self.delivery_count = 0
        self.store_id = 0
