"""Queue types behind one interface, in the shape of RabbitMQ's ``rabbit_queue_type``.

A queue (``queue.py``) is one façade over parts with one job each:

==================  =========================  ===========================================
part                module                     job
==================  =========================  ===========================================
consumer selection  ``consumers.py``           who takes the next message (round-robin,
                                               single active consumer, priorities)
storage             ``ready.py``, ``paging.py``  ready messages in delivery order, in memory
                    (``persistence/spill.py``)   or paged to disk beyond the window
expiry              ``expiry.py``              message TTL: head-only or exact deadlines
limits              ``limits.py``              length limits and overflow
retry               ``retry.py``               returns: delivery count and limit, delayed
                                               retry
deduplication       ``dedup.py``               recently seen message ids
==================  =========================  ===========================================

The queue's type (a ``QueueType``: ``classic.py``, ``quorum.py``; looked up by ``x-queue-type`` in
``queue_types.py``) chooses and configures the parts and answers the questions where the types'
semantics differ, so the queue has no branch on its type. A new type (a stream) is a new module with a
``QueueType`` subclass and one line in ``queue_types.py``; the others stay as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .consumers import QueueConsumers
from .limits import Limits
from .message import Entry
from .ready import Ready

if TYPE_CHECKING:
    from .queue_args import QueueArgs


class QueueType:
    """One queue type: its declare rules (RabbitMQ's ``capabilities``) and its semantics.

    Attributes:
        name: the ``x-queue-type`` value.
        module: RabbitMQ's module for the type, as its error texts name it.
        arguments: the type's own ``x-`` arguments (RabbitMQ's ``queue_arguments``), in its order: those
            validated on declare and compared on redeclare.
        foreign_arguments: arguments of other types it accepts anyway (ottermq extensions).
        server_named: a queue of this type may be server-named (``queue.declare`` with no name).
        stores_every_message: transient messages are stored too (not only persistent ones).
        counts_every_return: every return counts in ``delivery_count`` and goes out with
            ``x-delivery-count``; ``basic.get`` always carries it.
        lenient_delivery_limit: ``x-delivery-limit`` is taken whatever its value (RabbitMQ 3.10's
            quorum queues compare with it in Erlang term order).
        get_with_single_active: ``basic.get`` is allowed with single active consumer.
        global_qos: a channel with a global prefetch count may consume.
        interrupted_delivery_returns: a delivery cut short by a restart counts as a return.
    """

    __slots__ = (
        "name",
        "module",
        "arguments",
        "foreign_arguments",
        "server_named",
        "stores_every_message",
        "counts_every_return",
        "lenient_delivery_limit",
        "get_with_single_active",
        "global_qos",
        "interrupted_delivery_returns",
    )

    def __init__(self, name: str, module: str, arguments: tuple[str, ...]) -> None:
        self.name = name
        self.module = module
        self.arguments = arguments
        self.foreign_arguments: frozenset[str] = frozenset()
        self.server_named = True
        self.stores_every_message = False
        self.counts_every_return = False
        self.lenient_delivery_limit = False
        self.get_with_single_active = True
        self.global_qos = True
        self.interrupted_delivery_returns = False

    def __repr__(self) -> str:
        return f"<queue type {self.name}>"

    # -- declare -------------------------------------------------------------------------------
    def check_properties(
        self, name: str, durable: bool, exclusive: bool, auto_delete: bool, vhost: str = "/"
    ) -> None:
        """A new queue's declare flags, after its arguments.

        Raises:
            PreconditionFailed: flags the type does not allow.
        """

    # -- parts ---------------------------------------------------------------------------------
    def ready(self, args: QueueArgs) -> Ready:
        """Where the queue's ready messages wait."""
        raise NotImplementedError

    def consumers(self, single_active: bool) -> QueueConsumers[Any]:
        """Who takes the next message."""
        raise NotImplementedError

    def limits(self, max_length: int | None, max_bytes: int | None, overflow: str) -> Limits | None:
        """The length limits in force (None: no limit)."""
        raise NotImplementedError

    # -- semantics -----------------------------------------------------------------------------
    def put_back(self, ready: Ready, entries: list[Entry], first: bool) -> None:
        """Returned entries are ready again; ``first``: the consumer's channel went away or the queue has
        a delivery limit (a quorum queue then serves them first)."""
        raise NotImplementedError

    def hands_over_at_once(self) -> bool:
        """With single active consumer, the next active consumer takes what is ready as soon as the
        previous one is cancelled (else at the queue's next delivery run)."""
        return False
