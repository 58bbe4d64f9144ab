"""A queue's consumers: which one takes the next message, and who may join.

Rules (RabbitMQ 3.10.8: ``rabbit_queue_consumers`` and ``rabbit_amqqueue_process`` for classic queues,
``rabbit_fifo`` for quorum queues):
- ``QueueConsumers`` (round-robin) and ``SingleActiveConsumers`` (``x-single-active-consumer``) share one
  interface; ``make_consumers`` picks the one a queue needs, so the choice per message has no branch
  for the other. ``items`` holds every consumer in registration order, waiting ones included (what
  the management API and Prometheus count).
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
  and transient messages are lost: measured, not copied.) When a channel closes or its connection
  is lost without a cancel first, both requeue its unacked deliveries before the hand-over runs,
  so the new active consumer gets them ahead of the ready ones, redelivered.
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
from typing import Any, Final, Generic, Protocol, TypeVar

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
    """The consumers of one queue, served round-robin (see the module rules); ``SingleActiveConsumers``
    for ``x-single-active-consumer``. ``make_consumers`` picks the one a queue needs.

    Args:
        quorum: the queue is a quorum queue (its exclusivity and, with single active consumer, its
            hand-over order).
    """

    __slots__ = ("items", "active", "quorum", "_rr")

    def __init__(self, quorum: bool = False) -> None:
        self.items: list[Consumer] = []  # never replaced: the queue reads it as ``Queue.consumers``
        self.active: Consumer | None = None  # the single active consumer (None without one)
        self.quorum = quorum
        self._rr = 0

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __iter__(self) -> Iterator[Consumer]:
        return iter(self.items)

    def __contains__(self, consumer: object) -> bool:
        return consumer in self.items

    @property
    def single_active(self) -> bool:
        """``x-single-active-consumer`` is on."""
        return False

    @property
    def declared_count(self) -> int:
        """The consumer count of ``queue.declare-ok``: every consumer."""
        return len(self.items)

    # -- joining and leaving ---------------------------------------------------------------
    def admits(self, exclusive: bool) -> bool:
        """Whether a ``basic.consume`` (``exclusive`` or not) may join (else ACCESS_REFUSED, in use)."""
        if self.quorum:
            return True
        return not (self.items and (exclusive or self.has_exclusive()))

    def has_exclusive(self) -> bool:
        """An exclusive consumer is always alone on a classic queue (no other may join it, it joins
        only an idle queue): one look, however many consumers there are."""
        items = self.items
        return len(items) == 1 and items[0].exclusive and not self.quorum

    def add(self, consumer: Consumer, priority: int = 0) -> None:
        """Register a consumer (``priority``: its ``x-priority``)."""
        self.items.append(consumer)

    def remove(self, consumer: Consumer) -> bool:
        """Unregister a consumer. Returns whether it was here."""
        try:
            self.items.remove(consumer)
        except ValueError:
            return False
        return True

    def clear(self) -> list[Consumer]:
        """Unregister every consumer (the queue is deleted); returns them."""
        items = list(self.items)
        self.items.clear()
        self.active = None
        self._rr = 0
        return items

    # -- choosing --------------------------------------------------------------------------
    def next(self) -> Consumer | None:
        """The consumer to take the next message: the next one round-robin that can take it; None
        when none can."""
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
        """``activity_status`` of a consumer: ``up`` (``single_active`` or ``waiting`` with single
        active consumer)."""
        return UP


class SingleActiveConsumers(QueueConsumers[Consumer]):
    """The consumers of a queue with ``x-single-active-consumer: true``: ``active`` takes every message."""

    __slots__ = ("_priority",)

    def __init__(self, quorum: bool = False) -> None:
        super().__init__(quorum)
        # x-priority of the consumers that have one (a classic queue's hand-over reads it)
        self._priority: dict[Consumer, int] = {}

    @property
    def single_active(self) -> bool:
        return True

    @property
    def declared_count(self) -> int:
        """A quorum queue counts the active consumer only (``rabbit_fifo:query_stat``)."""
        if self.quorum:
            return 1 if self.active is not None else 0
        return len(self.items)

    def admits(self, exclusive: bool) -> bool:
        return self.quorum or not exclusive

    def add(self, consumer: Consumer, priority: int = 0) -> None:
        """Register a consumer; it is active if none is."""
        self.items.append(consumer)
        if priority and not self.quorum:
            self._priority[consumer] = priority
        if self.active is None:
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
        priority = self._priority
        best = items[0]
        if not priority:  # a quorum queue, or no priorities: the earliest registered
            return best
        top = priority.get(best, 0)
        for consumer in items:
            p = priority.get(consumer, 0)
            if p > top:
                best, top = consumer, p
        return best

    def clear(self) -> list[Consumer]:
        self._priority.clear()
        return super().clear()

    def next(self) -> Consumer | None:
        """The active consumer if it can take a message, else None (the waiting ones never do)."""
        active = self.active
        return active if active is not None and active.can_deliver() else None

    def status(self, consumer: Consumer) -> str:
        return SINGLE_ACTIVE if consumer is self.active else WAITING


def make_consumers(single_active: bool, quorum: bool) -> QueueConsumers[Any]:
    """The consumers part a queue needs: round-robin, or single active consumer."""
    return SingleActiveConsumers(quorum) if single_active else QueueConsumers(quorum)
