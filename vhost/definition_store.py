"""What a virtual host needs to keep its durable definitions (implemented by ``persistence.hook``)."""

from __future__ import annotations

from typing import Any, Protocol

from .exchange import Destination, Exchange
from .queue import Queue


class DefinitionStore(Protocol):
    """Persistence of durable exchanges, queues and bindings (filled by ``persistence.hook``).

    The vhost only reports durable entities: exchanges declared durable, queues declared
    durable and not exclusive, and bindings whose two ends are both durable. A declare or an added
    binding is reported before it is applied in memory; ``ValueError`` or ``TypeError`` from the
    report (a value the store cannot hold) refuses it, and nothing is applied.
    """

    def exchange_declared(self, vhost: str, exchange: Exchange) -> None: ...

    def exchange_deleted(self, vhost: str, name: str) -> None: ...

    def queue_declared(self, queue: Queue) -> None:
        """Store the queue and give it its ``MessageStore`` (``queue.store``/``store_id``)."""

    def queue_deleted(self, queue: Queue) -> None: ...

    def binding_added(
        self, vhost: str, source: str, dest: Destination, routing_key: str, arguments: dict[str, Any]
    ) -> None: ...

    def binding_removed(
        self, vhost: str, source: str, dest: Destination, routing_key: str, arguments: dict[str, Any]
    ) -> None: ...
