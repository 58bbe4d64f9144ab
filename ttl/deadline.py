"""Pure deadline arithmetic (epoch milliseconds)."""

from __future__ import annotations


def expires_at(now: int, queue_ttl: int | None, message_ttl: int | None) -> int | None:
    """Absolute expiry of a message enqueued at ``now``.

    The effective TTL is the lower of the queue's ``x-message-ttl`` and the message's
    ``expiration`` (RabbitMQ's rule; not OtterMQ's "message wins").

    Args:
        now: enqueue time, epoch ms.
        queue_ttl: the queue's ``x-message-ttl`` in ms, or None.
        message_ttl: the message's ``expiration`` in ms, or None.

    Returns:
        The deadline in epoch ms, or None when neither TTL applies.
    """
    if queue_ttl is None:
        if message_ttl is None:
            return None
        return now + message_ttl
    if message_ttl is None or queue_ttl < message_ttl:
        return now + queue_ttl
    return now + message_ttl


def is_expired(deadline: int | None, now: int) -> bool:
    """RabbitMQ's test: a message is expired once ``now >= deadline``."""
    return deadline is not None and now >= deadline
