"""A queue's message expiry (TTL): which ready messages are past their deadline, and when to look next.

Rules (RabbitMQ's model):
- A message's deadline is fixed at enqueue as ``now + min(x-message-ttl, expiration)`` and survives
  requeue. Only the head is watched: a message behind a longer-lived head waits for the head (and is
  counted meanwhile).
- Expired heads are dead-lettered (``expired``) by a timer armed for the head's deadline and, as
  RabbitMQ's ``drop_expired_msgs``, at once after every operation that changes the head: a take
  (``basic.get``, delivery), a ``drop-head`` overflow, a requeue, and an enqueue that makes the new
  message the head. So the counts replies carry (get-ok, and declare-ok/purge-ok/delete-ok after such
  operations) never include an expired head; declare-ok, purge and delete themselves run no check
  (RabbitMQ's ``stat``/``purge``/``delete`` do not), and purge never dead-letters.
- Priority queues expire in delivery order (highest level first, stopping at the first live head).
- Delivered, unacked messages never expire; a requeued message past its deadline is dead-lettered
  once it is at the head, never redelivered. A message whose TTL is 0 goes to a consumer that can take
  it at once, or expires.
- Exact TTL (``x-ottermq-exact-ttl``, an ottermq extension; the policy key ``ottermq-exact-ttl``
  switches it on a live queue): every ready message expires at its own deadline wherever it sits,
  through a deadline heap (O(log n) per message); its expiries become tombstones that takes skip.
  An exact-TTL queue keeps its ready messages in memory (the heap holds them).
- Queue expiry (``x-expires``) is the queue's own clock (``Queue.touch``, ``Queue.expire_queue``): a
  queue with no consumers that is not declared or read for the period is deleted, its messages
  discarded, never dead-lettered.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from .message import READY, Entry
from .ready import Ready


class Expiry:
    """Message deadlines of one queue: the head's (``Ready``), or every entry's (exact TTL's heap)."""

    __slots__ = ("heap",)

    def __init__(self, exact: bool) -> None:
        self.heap: list[tuple[int, int, Entry]] | None = [] if exact else None

    @property
    def exact(self) -> bool:
        return self.heap is not None

    def track(self, entry: Entry) -> None:
        """A ready entry in memory with a deadline (exact TTL watches it)."""
        heap = self.heap
        if heap is not None and entry.deadline is not None:
            heapq.heappush(heap, (entry.deadline, entry.seq, entry))

    def recover(self, entries: Iterable[Entry]) -> None:
        """Stored entries at start-up (``ordered`` follows once they are all in)."""
        heap = self.heap
        if heap is not None:
            heap.extend((e.deadline, e.seq, e) for e in entries if e.deadline is not None)

    def ordered(self) -> None:
        if self.heap is not None:
            heapq.heapify(self.heap)

    def set_exact(self, on: bool, ready: Ready) -> bool:
        """Switch exact TTL; on, every ready entry in memory with a deadline is watched.

        Returns:
            Whether an entry is watched now (the queue then expires what is due).
        """
        if not on:
            self.heap = None
            return False
        self.heap = [(e.deadline, e.seq, e) for e in ready if e.deadline is not None and e.state == READY]
        heapq.heapify(self.heap)
        return bool(self.heap)

    def collect(self, now: int, ready: Ready, out: list[Entry]) -> int:
        """Take every entry due at ``now`` out of ``ready`` into ``out``: with exact TTL wherever they
        are (tombstones left behind), then expired heads.

        Returns:
            The body bytes that left the ready messages.
        """
        gone = 0
        heap = self.heap
        if heap is not None:
            while heap and heap[0][0] <= now:
                entry = heapq.heappop(heap)[2]
                if entry.state == READY:
                    ready.discard(entry)
                    gone += len(entry.message.body)
                    out.append(entry)
        ready.pop_expired(now, out)
        return gone

    def next_deadline(self, ready: Ready) -> int | None:
        """The earliest deadline that can fire next: the head's (None without TTL) or the heap's."""
        heap = self.heap
        if heap is not None:
            while heap and heap[0][2].state != READY:
                heapq.heappop(heap)
            if heap:
                return heap[0][0]
        return ready.head_deadline()

    def clear(self) -> None:
        if self.heap is not None:
            self.heap.clear()
