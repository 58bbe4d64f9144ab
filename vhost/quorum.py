"""The quorum queue type (RabbitMQ 3.10's ``rabbit_quorum_queue`` and ``rabbit_fifo``, on one node).

Rules:
- Every message is stored, persistent or not.
- Every return counts in ``delivery_count`` and goes out with ``x-delivery-count`` (a long), and
  ``basic.get`` always carries it (0 on the first get); the stored message never carries it (nor do its
  dead letters). A delivery cut short by a restart counts as a return.
- No original positions (``QuorumReady``): a return goes first, in return order, when the consumer's
  channel went away (``down``) or the queue has a delivery limit; a nack, reject or recover without a
  delivery limit puts the message at the back (``rabbit_fifo``'s requeue).
- Limits are soft (``limits.SoftLimits``): ``reject-publish`` accepts the publish that goes over and
  refuses the next ones until the queue is down to 80 %; ``reject-publish-dlx`` acts as ``drop-head``.
- Declare: never server-named; durable, not exclusive, not auto-delete (``check_properties``, in
  RabbitMQ's order); ``x-delivery-limit`` is taken whatever its value (``arguments.py``).
- Single active consumer: the next active consumer takes what is ready on the cancel itself;
  ``basic.get`` is refused (``rabbit_fifo``), and so is a consume on a channel with a global prefetch.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ottermq.amqp.errors import PreconditionFailed

from .consumers import QueueConsumers, make_consumers
from .limits import Limits, make_limits
from .message import GONE, Entry
from .queue_type import QueueType
from .ready import Ready

if TYPE_CHECKING:
    from .queue_args import QueueArgs

QUORUM_ARGUMENTS = (
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-overflow",
    "x-single-active-consumer",
    "x-queue-type",
    "x-quorum-initial-group-size",
    "x-delivery-limit",
    "x-message-ttl",
    "x-queue-leader-locator",
)
"""The arguments of a quorum queue (``rabbit_quorum_queue`` ``queue_arguments``), in RabbitMQ 3.10's
order: those it validates on declare and compares on redeclare."""


class QuorumReady(Ready):
    """A quorum queue's ready entries: its returns (served first, in return order), then the rest."""

    __slots__ = ("_returns",)

    def __init__(self) -> None:
        super().__init__()
        self._returns: deque[Entry] = deque()

    def __len__(self) -> int:
        return len(self._returns) + len(self._q) - self._dead + self._paged

    def popleft(self) -> Entry:
        returns = self._returns
        while returns:
            entry = returns.popleft()
            if entry.state != GONE:
                return entry
            self._dead -= 1
        return super().popleft()

    def peek(self) -> Entry | None:
        returns = self._returns
        while returns and returns[0].state == GONE:
            returns.popleft()
            self._dead -= 1
        return returns[0] if returns else super().peek()

    def peek_in_memory(self) -> Entry | None:
        for e in self._returns:
            if e.state != GONE:
                return e
        return super().peek_in_memory()

    def clear(self) -> list[Entry]:
        entries = [e for e in self._returns if e.state != GONE]
        self._returns.clear()
        return entries + super().clear()

    def __iter__(self) -> Iterator[Entry]:
        for e in self._returns:
            if e.state != GONE:
                yield e
        yield from super().__iter__()

    def scan(self) -> Iterator[Entry]:
        returns = [e for e in self._returns if e.state != GONE]
        return itertools.chain(returns, super().scan())

    def requeue(self, entries: list[Entry]) -> None:
        self._returns.extend(entries)


class QuorumQueueType(QueueType):
    """Quorum queues."""

    def __init__(self) -> None:
        super().__init__("quorum", "rabbit_quorum_queue", QUORUM_ARGUMENTS)
        self.server_named = False
        self.stores_every_message = True
        self.counts_every_return = True
        self.lenient_delivery_limit = True
        self.get_with_single_active = False
        self.global_qos = False
        self.interrupted_delivery_returns = True

    def check_properties(
        self, name: str, durable: bool, exclusive: bool, auto_delete: bool, vhost: str = "/"
    ) -> None:
        """RabbitMQ 3.10's order of checks.

        Raises:
            PreconditionFailed: ``invalid property 'auto-delete' for queue 'q' in vhost '/'`` (then
                ``exclusive-owner``, then ``non-durable``).
        """
        for wrong, prop in (
            (auto_delete, "auto-delete"),
            (exclusive, "exclusive-owner"),
            (not durable, "non-durable"),
        ):
            if wrong:
                raise PreconditionFailed(f"invalid property '{prop}' for queue '{name}' in vhost '{vhost}'")

    def ready(self, args: QueueArgs) -> Ready:
        return QuorumReady()

    def consumers(self, single_active: bool) -> QueueConsumers[Any]:
        return make_consumers(single_active, quorum=True)

    def limits(self, max_length: int | None, max_bytes: int | None, overflow: str) -> Limits | None:
        return make_limits(max_length, max_bytes, overflow, soft=True)

    def put_back(self, ready: Ready, entries: list[Entry], first: bool) -> None:
        if first:
            ready.requeue(entries)  # the returns, served first
        else:
            for entry in entries:
                ready.append(entry)

    def hands_over_at_once(self) -> bool:
        return True


QUORUM = QuorumQueueType()
