"""A queue's consumers: which one takes the next message, and who may join.

Rules (RabbitMQ 3.10.8: ``rabbit_queue_consumers`` and ``rabbit_amqqueue_process`` for classic queues,
``rabbit_fifo`` for quorum queues):
- ``items`` holds every consumer in registration order, waiting ones included (what the consumer
  counts of declare-ok, the management API and Prometheus report).
- Without single active consumer, deliveries go round-robin to the consumers that can take one
  (``Consumer.can_deliver``: prefetch, flow, a closing channel).
- With ``x-single-active-consumer`` the first consumer registered while there is no active one is
  the active consumer (``active``); a consumer's ``x-priority`` does not change that, and a later
  consumer waits whatever its priority. Only the active consumer is delivered to, within its own
  prefetch; waiting consumers get nothing. When the active consumer goes (``basic.cancel``, its
  channel closing, its connection lost, a consumer timeout closing its channel) the next one is
  active at once:
  - classic queues: the remaining consumer with the highest ``x-priority``, the earliest registered
    among equals (``rabbit_queue_consumers:get_consumer`` on its priority queue);
  - quorum queues: the earliest registered remaining consumer, priorities ignored (``rabbit_fifo``'s
    ``waiting_consumers`` list).
  A waiting consumer that goes changes nothing. The queue, not this part, hands the new active
  consumer what is ready (``Queue.remove_consumer``): a quorum queue at once after a
  ``basic.cancel`` (``rabbit_fifo`` checks out); a classic queue at its next delivery run (a
  publish, an ack, a requeue, a new consumer), as ``rabbit_amqqueue_process`` hands over on
  ``basic.cancel`` without running the queue. (RabbitMQ 3.10.8 waits for a requeue or a new
  consumer; a publish in that state crashes its queue process, ``badmatch`` in ``attempt_delivery``,
  and transient messages are lost: measured, not copied.) When a channel closes,
  both requeue its unacked deliveries first, so the new active consumer gets them ahead of the
  ready ones, redelivered.
- Exclusive consumers: on a classic queue an exclusive consumer joins only a queue without
  consumers and no one joins it; a classic single-active-consumer queue refuses every exclusive
  ``basic.consume``, even with no consumers (``exclusive_consume_unavailable``). Quorum queues
  (3.10) ignore the flag: an exclusive consumer joins like any other, and others join it.
- ``declared_count``: ``queue.declare-ok`` counts every consumer, but a quorum queue with single active
  consumer counts only the active one (``rabbit_fifo:query_stat``; the management API and Prometheus
  count the waiting ones too). RabbitMQ also counts a cancelled quorum consumer that still holds
  unacked messages; here a cancelled consumer leaves the queue at once and is not counted.
- ``status`` is what the management API shows per consumer (``activity_status``): ``up`` without
  single active consumer, else ``single_active`` or ``waiting``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Generic, Protocol, TypeVar

UP: Final = "up"
SINGLE_ACTIVE: Final = "single_active"
WAITING: Final = "waiting"


class Candidate(Protocol):
    """What choosing needs from a consumer (``vhost.queue.Consumer`` has more)."""

    exclusive: bool

    def can_deliver(self) -> bool: ...


Consumer = TypeVar("Consumer", bound=Candidate)


def consumer_priority(arguments: object) -> int:
    """A consumer's ``x-priority`` from its ``basic.consume`` arguments (0 when absent or not an integer)."""
    if isinstance(arguments, dict):
        value = arguments.get("x-priority")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


class QueueConsumers(Generic[Consumer]):
    """The consumers of one queue (see the module rules).

    Args:
        single_active: the queue has ``x-single-active-consumer: true``.
        quorum: the queue is a quorum queue (its own hand-over order and exclusivity).
    """

    __slots__ = ("items", "active", "single_active", "quorum", "_rr", "_priority")

    def __init__(self, single_active: bool = False, quorum: bool = False) -> None:
        self.items: list[Consumer] = []  # never replaced: the queue reads it as ``Queue.consumers``
        self.active: Consumer | None = None  # the single active consumer (None without one)
        self.single_active = single_active
        self.quorum = quorum
        self._rr = 0
        # x-priority of consumers that have one (only a classic single-active queue reads it)
        self._priority: dict[Consumer, int] = {}

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __iter__(self) -> Iterator[Consumer]:
        return iter(self.items)

    def __contains__(self, consumer: object) -> bool:
        return consumer in self.items

    @property
    def declared_count(self) -> int:
        """The consumer count of ``queue.declare-ok``: every consumer, except on a quorum queue with
        single active consumer, whose count (``rabbit_fifo:query_stat``) leaves the waiting ones out."""
        if self.quorum and self.single_active:
            return 1 if self.active is not None else 0
        return len(self.items)

    # -- joining and leaving ---------------------------------------------------------------
    def admits(self, exclusive: bool) -> bool:
        """Whether a ``basic.consume`` (``exclusive`` or not) may join (else ACCESS_REFUSED, in use)."""
        if self.quorum:
            return True
        if self.single_active:
            return not exclusive
        return not (self.items and (exclusive or self.has_exclusive()))

    def has_exclusive(self) -> bool:
        """An exclusive consumer is always alone on a classic queue (no other may join it, it joins
        only an idle queue): one look, however many consumers there are."""
        items = self.items
        return len(items) == 1 and items[0].exclusive and not self.quorum

    def add(self, consumer: Consumer, priority: int = 0) -> None:
        """Register a consumer (``priority``: its ``x-priority``); it is active if none is."""
        self.items.append(consumer)
        if priority:
            self._priority[consumer] = priority
        if self.single_active and self.active is None:
            self.active = consumer

    def remove(self, consumer: Consumer) -> bool:
        """Unregister a consumer; the next one becomes active if it was. Returns whether it was here."""
        try:
            self.items.remove(consumer)
        except ValueError:
            return False
        self._priority.pop(consumer, None)
        if consumer is self.active:
            self.active = self._successor()
        return True

    def _successor(self) -> Consumer | None:
        items = self.items
        if not items:
            return None
        if self.quorum or not self._priority:
            return items[0]
        priority = self._priority
        best = items[0]
        top = priority.get(best, 0)
        for consumer in items:
            p = priority.get(consumer, 0)
            if p > top:
                best, top = consumer, p
        return best

    def clear(self) -> list[Consumer]:
        """Unregister every consumer (the queue is deleted); returns them."""
        items = list(self.items)
        self.items.clear()
        self.active = None
        self._priority.clear()
        self._rr = 0
        return items

    # -- choosing --------------------------------------------------------------------------
    def next(self) -> Consumer | None:
        """The consumer to take the next message: the active one, or the next one round-robin that
        can take it; None when none can."""
        active = self.active
        if active is not None:
            return active if active.can_deliver() else None
        items = self.items
        n = len(items)
        if n == 1:
            consumer = items[0]
            return consumer if consumer.can_deliver() else None
        for _ in range(n):
            self._rr = (self._rr + 1) % n
            consumer = items[self._rr]
            if consumer.can_deliver():
                return consumer
        return None

    def status(self, consumer: Consumer) -> str:
        """``activity_status`` of a consumer: ``up``, ``single_active`` or ``waiting``."""
        if not self.single_active:
            return UP
        return SINGLE_ACTIVE if consumer is self.active else WAITING
