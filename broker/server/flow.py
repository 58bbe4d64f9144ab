"""When a connection reads and delivers: the transport's backpressure and the memory alarm.

Rules (uvicorn's ``flow_control.py``, plus RabbitMQ's ``connection.blocked``):
- The transport's write buffer above its high-water mark (``asyncio.Protocol.pause_writing``)
  pauses deliveries (``paused``: every consumer's ``can_deliver`` reads it) and reading, until it
  drains (``resume_writing``; the connection then lets its consumers deliver again).
- The memory alarm (``alarm_blocked``) stops reading only once the connection has published
  (``has_published``): RabbitMQ blocks publishers, not consumers.
- The store's write backlog (``store_wait``): a connection that has published is not read while
  more than ``STORE_HIGH_WATER`` writes wait for the store, until what was queued when it stopped
  is committed (RabbitMQ's credit flow: publishers faster than the disk are slowed down to it,
  not left to fill memory with writes waiting). Clients are not told (no ``connection.blocked``).
- A connection read ``READ_BUDGET`` octets since it last gave way pauses reading until the next
  event-loop turn (``read`` says when; the connection schedules ``next_turn``): libuv reads a socket
  that keeps having data up to 32 times per turn, and a fast publisher (256 KiB per read) would hold
  the loop for hundreds of milliseconds, while the other connections of the process (handshakes,
  heartbeats, consumers) wait.
- A connection whose last read held more frames than one turn's budget handles (``backlog``,
  ``connection.FRAME_BUDGET``) is not read until they are handled.
- A connection offered to another worker (``held``) is not read until that worker takes it or
  cannot; none of the other switches resumes it.
- Reading is paused or resumed only when the wanted state changes, and never once the connection
  is closed (``stop``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ottermq.persistence.store import Store

STORE_HIGH_WATER = 50_000  # writes waiting for the store (a persistent publish is one)
READ_BUDGET = 256 * 1024  # octets read from one connection before it gives way for a loop turn


class FlowControl:
    """The read and delivery switches of one connection (see the module rules)."""

    __slots__ = (
        "_reading",
        "_transport",
        "alarm_blocked",
        "backlog",
        "has_published",
        "held",
        "paused",
        "read_octets",
        "store_wait",
        "yielding",
    )

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None  # set once the connection is made
        self._reading = True
        self.paused = False  # transport buffer full: no deliveries, no reading
        self.alarm_blocked = False  # memory alarm on (RabbitMQ's connection.blocked)
        self.has_published = False
        self.store_wait = False  # the store's write backlog is over its high-water mark
        self.read_octets = 0  # read since the connection last gave way (READ_BUDGET)
        self.yielding = False  # not read until the next loop turn
        self.held = False  # offered to another worker: nothing is read until it answers
        self.backlog = False  # frames already read wait for the next loop turn (connection.FRAME_BUDGET)

    def start(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def stop(self) -> None:
        """The connection is closed: reading is left as it is."""
        self._transport = None

    @property
    def blocked(self) -> bool:
        """Whether the alarm keeps this connection from being read (RabbitMQ's ``blocked``)."""
        return self.alarm_blocked and self.has_published

    def published(self) -> None:
        """The connection's first basic.publish: from now on the memory alarm applies to it."""
        self.has_published = True
        if self.alarm_blocked:
            self.update_reading()

    def read(self, octets: int) -> bool:
        """Count ``octets`` just read; True when they used up the budget: reading pauses, and the
        caller schedules ``next_turn`` for the event loop's next turn."""
        self.read_octets += octets
        if self.read_octets <= READ_BUDGET or self.yielding:
            return False
        self.yielding = True
        self.update_reading()
        return True

    def next_turn(self) -> None:
        """A new event-loop turn: the connection is read again (unless another switch says no)."""
        self.read_octets = 0
        self.yielding = False
        self.update_reading()

    def check_store(self, store: Store) -> None:
        """After a read of a connection that has published: stop reading while the store's write
        backlog is over ``STORE_HIGH_WATER``, until what is queued now is committed (or failed: its
        publishers are told by their confirms)."""
        if self.has_published and not self.store_wait and store.pending > STORE_HIGH_WATER:
            self.store_wait = True
            self.update_reading()
            store.after_commit(self._store_caught_up)

    def _store_caught_up(self, _ok: bool) -> None:
        self.store_wait = False
        self.update_reading()

    def update_reading(self) -> None:
        """Read from the socket unless its output is backed up or the memory alarm blocks us."""
        want = (
            not self.paused
            and not self.yielding
            and not self.held
            and not self.backlog
            and not ((self.alarm_blocked or self.store_wait) and self.has_published)
        )
        transport = self._transport
        if want == self._reading or transport is None:
            return
        self._reading = want
        if want:
            transport.resume_reading()
        else:
            transport.pause_reading()
