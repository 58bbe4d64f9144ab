"""Delayed delivery (issue 19): the ``x-delayed-message`` exchange type and the delay heap.

Pure: no I/O, no clock. The broker's ``DelayService`` (``broker/node/delayed.py``) owns the timer, the
store rows and the routing when a delay ends; this module decides what is delayed, for how long,
and in which order messages come due.

Rules (the ``rabbitmq_delayed_message_exchange`` plugin's, read from its source):
1. ``exchange.declare`` of type ``x-delayed-message`` needs ``x-delayed-type``, a long string naming
   an exchange type (``direct``, ``fanout``, ``topic``, ``headers``): otherwise 406 with the plugin's
   own text. An unknown type name is refused like any unknown exchange type (503). The exchange
   routes like its delayed type; bindings, alternate exchange and policies work as on that type.
2. ``x-delay`` header (milliseconds): an integer type is taken as it is, a long string is parsed as
   an integer, a float, double or decimal is truncated. A message without headers, without
   ``x-delay``, with another type or a string that is not an integer is not delayed; neither is one
   whose delay is not in ``1 .. 2**32 - 1`` (0, negative, too large): it is routed at once.
3. A delayed message is routed when its delay ends, with its ``x-delay`` header set to the negated
   delay as a signed 32-bit integer (so a further delayed exchange does not delay it again).
4. Messages come due in due-time order; equal due times in publish order (a sequence number that
   survives restarts through the store's row order).
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ottermq.amqp.props import rewrite_props
from ottermq.amqp.table import Long, encode_table

from .message import Message
from .values import amqp_type_name

__all__ = [
    "DELAYED_EXCHANGE_TYPE",
    "DelayHeap",
    "Delayed",
    "MAX_DELAY",
    "delay_of",
    "DELAYED_TYPE_ERROR",
    "swap_delay_header",
]

DELAYED_EXCHANGE_TYPE = "x-delayed-message"
MAX_DELAY = 2**32 - 1  # the plugin's ?ERL_MAX_T: the longest Erlang timer
DELAYED_TYPE_ERROR = "Invalid argument, 'x-delayed-type' must bean existing exchnage type"
"""The plugin's 406 text, typos included (two Erlang strings joined without a space)."""

_INTEGERS = frozenset({"byte", "short", "signedint", "long", "unsignedbyte", "unsignedshort", "unsignedint"})
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")


def delay_of(headers: Mapping[str, Any] | None) -> int | None:
    """The delay of a message published to a delayed exchange (rule 2), or None: route it now."""
    if not headers or "x-delay" not in headers:
        return None
    value = headers["x-delay"]
    kind = amqp_type_name(value)
    delay: int | None = None
    if kind in _INTEGERS and isinstance(value, int) and not isinstance(value, bool):
        delay = int(value)
    elif isinstance(value, str | bytes) and kind == "longstr":
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        delay = int(text) if _INTEGER_TEXT.fullmatch(text) else None  # Erlang's binary_to_integer
    elif isinstance(value, float | Decimal) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        delay = int(value)  # trunc
    if delay is None or delay <= 0 or delay > MAX_DELAY:
        return None
    return delay


def swap_delay_header(message: Message, delay: int) -> Message:
    """The message as routed when its delay ends: ``x-delay`` = -delay, a signed 32-bit integer."""
    headers = dict(message.headers or {})
    headers["x-delay"] = Long(-delay)
    return message.with_props(rewrite_props(message.raw_props, encode_table(headers), drop_expiration=False))


class Delayed:
    """One delayed message: where it goes, when, and its store row (0: not stored)."""

    __slots__ = ("due", "seq", "vhost", "exchange", "message", "delay", "store_id", "live")

    def __init__(
        self, due: int, vhost: str, exchange: str, message: Message, delay: int, store_id: int = 0
    ) -> None:
        self.due = due  # epoch ms
        self.seq = 0  # set by DelayHeap.push
        self.vhost = vhost
        self.exchange = exchange
        self.message = message
        self.delay = delay
        self.store_id = store_id
        self.live = True  # False once routed, withdrawn or dropped with its exchange

    def __repr__(self) -> str:
        return f"<Delayed {self.vhost}/{self.exchange} due={self.due} seq={self.seq} live={self.live}>"


class DelayHeap:
    """Delayed messages by due time (rule 4): push and pop are O(log n).

    Removed items (withdrawn, their exchange deleted) stay in the heap, dead, until they reach its
    top; the heap is rebuilt when more than half of it is dead, so memory stays bounded by the
    live count.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Delayed]] = []
        self._seq = 0
        self._live = 0
        self.pending: dict[tuple[str, str], int] = {}  # (vhost, exchange) -> live delayed messages

    def __len__(self) -> int:
        return self._live

    def push(self, item: Delayed) -> None:
        self._seq += 1
        item.seq = self._seq
        heapq.heappush(self._heap, (item.due, item.seq, item))
        self._live += 1
        key = (item.vhost, item.exchange)
        self.pending[key] = self.pending.get(key, 0) + 1

    def next_due(self) -> int | None:
        """The earliest due time of a live item (None: nothing is delayed)."""
        heap = self._heap
        while heap and not heap[0][2].live:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, now: int, limit: int | None = None) -> list[Delayed]:
        """Live items due at ``now`` or earlier, in order (at most ``limit``); they leave the heap."""
        heap = self._heap
        out: list[Delayed] = []
        while heap and heap[0][0] <= now and (limit is None or len(out) < limit):
            item = heapq.heappop(heap)[2]
            if item.live:
                self._forget(item)
                out.append(item)
        return out

    def remove(self, item: Delayed) -> bool:
        """Take a live item out (a failed store write). Returns False if it was not live."""
        if not item.live:
            return False
        self._forget(item)
        self._compact()
        return True

    def drop_exchange(self, vhost: str, exchange: str | None) -> list[Delayed]:
        """Every live item of a deleted exchange (or of a deleted vhost when ``exchange`` is None)."""
        if not self.pending:
            return []
        gone = [
            e
            for _, _, e in self._heap
            if e.live and e.vhost == vhost and (exchange is None or exchange == e.exchange)
        ]
        for item in gone:
            self._forget(item)
        self._compact()
        return gone

    def items(self, vhost: str, exchange: str) -> list[Delayed]:
        """The live items of one exchange, in due order (management browsing, tests)."""
        return sorted(
            (e for _, _, e in self._heap if e.live and e.vhost == vhost and e.exchange == exchange),
            key=lambda e: (e.due, e.seq),
        )

    def _forget(self, item: Delayed) -> None:
        item.live = False
        self._live -= 1
        key = (item.vhost, item.exchange)
        left = self.pending[key] - 1
        if left:
            self.pending[key] = left
        else:
            del self.pending[key]

    def _compact(self) -> None:
        if len(self._heap) > 64 and self._live * 2 < len(self._heap):
            self._heap = [t for t in self._heap if t[2].live]
            heapq.heapify(self._heap)
