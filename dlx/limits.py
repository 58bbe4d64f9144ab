"""Which limit killed a message, for the dead-letter archive: the setting, its value and where it came from.

A death event (the entries one queue dead-letters at once, one reason) gets ``limit_in_force``:
- ``expired``: the queue's TTL in force; the archive writer compares it with each message's own
  ``expiration`` (``persistence.archive.records.killer``: the lower one killed it, the message's when
  they are equal);
- ``maxlen``: the length limit that is full (the count when both are);
- ``delivery_limit``: the delivery limit;
- None for ``rejected``, and where the queue has no such setting.

Sources are RabbitMQ's ways to set one: the queue's ``x-`` ``argument``, a ``policy`` or an
``operator-policy`` (the lower value of the two applies), and ``message`` for a message's ``expiration``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .reasons import Reason

if TYPE_CHECKING:
    from ottermq.vhost.queue import Queue
    from ottermq.vhost.vhost import VHost

__all__ = ["Limit", "limit_in_force"]

Limit = tuple[str, int, str]
"""``(setting, value, source)``: ``message-ttl`` (ms), ``expiration`` (ms), ``max-length`` (messages),
``max-length-bytes`` (octets), ``delivery-limit`` (deliveries); ``argument``, ``policy``,
``operator-policy`` or ``message``."""

# a policy key -> the queue argument that sets the same thing
ARGUMENTS = {
    "message-ttl": "x-message-ttl",
    "max-length": "x-max-length",
    "max-length-bytes": "x-max-length-bytes",
    "delivery-limit": "x-delivery-limit",
}


def limit_in_force(vhost: VHost, queue: Queue, reason: str) -> Limit | None:
    """The queue's limit behind ``reason`` (see the module doc), or None."""
    args = queue.args
    value: int | None
    if reason == Reason.EXPIRED:
        key, value = "message-ttl", args.message_ttl
    elif reason == Reason.DELIVERY_LIMIT:
        key, value = "delivery-limit", args.delivery_limit
    elif reason == Reason.MAXLEN:
        # the count when it is full (both may be: the count is named), else the octets
        full = args.max_length is not None and queue.message_count >= args.max_length
        if full or args.max_length_bytes is None:
            key, value = "max-length", args.max_length
        else:
            key, value = "max-length-bytes", args.max_length_bytes
    else:
        return None
    if value is None:
        return None
    return key, value, _source(vhost, queue, key, value)


def _source(vhost: VHost, queue: Queue, key: str, value: int) -> str:
    declared = queue.declared_args.raw.get(ARGUMENTS[key])
    if isinstance(declared, int) and not isinstance(declared, bool) and int(declared) == value:
        return "argument"
    operator = vhost.operator_policies.get(queue.operator_policy) if queue.operator_policy else None
    if operator is not None and operator.definition.get(key) == value:
        return "operator-policy"
    return "policy"
