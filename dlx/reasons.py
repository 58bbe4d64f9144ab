"""Why a message was dead-lettered: the ``reason`` written into ``x-death`` (RabbitMQ's atoms)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Reason"]


class Reason(StrEnum):
    """Dead-letter reasons, valued as RabbitMQ writes them on the wire (a ``str`` ``Enum``).

    ``REJECTED``: ``basic.reject``/``basic.nack`` with ``requeue=false``.
    ``EXPIRED``: per-queue (``x-message-ttl``) or per-message (``expiration``) TTL ran out.
    ``MAXLEN``: dropped from the head by ``x-max-length``/``x-max-length-bytes`` (``drop-head``
    or ``reject-publish-dlx`` overflow).
    ``DELIVERY_LIMIT``: redelivered more often than ``x-delivery-limit`` allows.
    """

    REJECTED = "rejected"
    EXPIRED = "expired"
    MAXLEN = "maxlen"
    DELIVERY_LIMIT = "delivery_limit"
