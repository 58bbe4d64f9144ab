"""The classic queue type (RabbitMQ's ``rabbit_classic_queue``).

Rules:
- Ready messages wait in publish order (``Ready``), one line per priority level with
  ``x-max-priority`` (``PriorityReady``); a return goes back to its original position.
- Only persistent messages of a durable queue are stored.
- Length limits are hard (``limits.Limits``): ``reject-publish`` refuses the message that would go over.
- Single active consumer hands what is ready to the next active consumer at the queue's next delivery
  run, not on the cancel itself (``consumers.py``).
- ottermq extensions: ``x-delivery-limit`` and the delayed retry (``retry.py``) count returns here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .consumers import QueueConsumers, make_consumers
from .limits import Limits, make_limits
from .message import Entry
from .queue_type import QueueType
from .ready import PriorityReady, Ready

if TYPE_CHECKING:
    from .queue_args import QueueArgs

CLASSIC_ARGUMENTS = (
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-version",
    "x-single-active-consumer",
    "x-queue-type",
    "x-queue-master-locator",
)
"""The arguments RabbitMQ 3.10 validates on declare of a classic queue and compares on redeclare, in its
order (``rabbit_classic_queue`` ``queue_arguments``)."""


class ClassicQueueType(QueueType):
    """Classic queues."""

    def __init__(self) -> None:
        super().__init__("classic", "rabbit_classic_queue", CLASSIC_ARGUMENTS)
        self.foreign_arguments = frozenset({"x-delivery-limit"})  # an ottermq extension here

    def ready(self, args: QueueArgs) -> Ready:
        return PriorityReady(args.max_priority) if args.max_priority else Ready()

    def consumers(self, single_active: bool) -> QueueConsumers[Any]:
        return make_consumers(single_active, quorum=False)

    def limits(self, max_length: int | None, max_bytes: int | None, overflow: str) -> Limits | None:
        return make_limits(max_length, max_bytes, overflow, soft=False)

    def put_back(self, ready: Ready, entries: list[Entry], first: bool) -> None:
        ready.requeue(entries)  # in place


CLASSIC = ClassicQueueType()
