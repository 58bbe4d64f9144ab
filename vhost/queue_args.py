"""A queue's validated ``x-`` arguments (``arguments.parse_queue_args`` makes them; a policy may change
what is in force: ``policy.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class QueueArgs:
    """Validated queue arguments. ``raw`` (excluded from equality) keeps the table as declared."""

    message_ttl: int | None = None
    expires: int | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_priority: int | None = None
    delivery_limit: int | None = None
    single_active_consumer: bool = False
    queue_mode: str = "default"  # "lazy": a window of zero (vhost/paging.py)
    exact_ttl: bool = False
    queue_type: str = "classic"
    delayed_retry_type: str = "disabled"
    delayed_retry_min: int | None = None
    delayed_retry_max: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
