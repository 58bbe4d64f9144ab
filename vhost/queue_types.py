"""The queue types by ``x-queue-type`` (RabbitMQ's ``rabbit_queue_type`` registry): a new type is one
more module and one more line here."""

from __future__ import annotations

from .classic import CLASSIC
from .queue_type import QueueType
from .quorum import QUORUM

QUEUE_TYPES: dict[str, QueueType] = {t.name: t for t in (CLASSIC, QUORUM)}


def queue_type(name: str) -> QueueType:
    """The type named ``name`` (``classic`` for a name no type has: arguments were validated)."""
    return QUEUE_TYPES.get(name, CLASSIC)
