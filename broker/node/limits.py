"""Vhost and user limits, as RabbitMQ's ``set_vhost_limits`` / ``set_user_limits``.

Rules (checked against RabbitMQ 3.10.8):
- Vhost limits ``max-connections`` and ``max-queues``; user limits ``max-connections`` and
  ``max-channels``. A value is an integer; a negative one means no limit, 0 allows none.
- ``connection.open``: the vhost's connection limit is checked first (530 ``access to vhost 'v'
  refused for user 'u': connection limit (N) is reached``), then the user's (530 ``connection
  refused for user 'u': user connection limit (N) is reached``), then the user's access to the vhost.
- ``queue.declare`` of a new queue in a vhost holding its limit: 406 ``cannot declare queue 'q':
  queue limit in vhost 'v' (N) is reached`` (redeclaring an existing queue is fine).
- ``channel.open`` over the user's channel limit (all its connections together): 530 ``number of
  channels opened for user 'u' has reached the maximum allowed user limit of (N)``.
- Validation texts of the API: ``max-queues should be a number, actually was <<"x">>`` and
  ``Unrecognised terms [{<<"max-bogus">>,1}] in limits`` (``in user-limits`` for users).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ottermq.amqp.erlang import format_term
from ottermq.persistence.store import LimitRecord
from ottermq.vhost.bounds import OutOfBounds, check_int64
from ottermq.vhost.policy import json_term

VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")


class LimitError(ValueError):
    """A limit RabbitMQ would refuse; ``str(error)`` is its reason."""


def _term(value: Any) -> str:
    return json_term(value) if not isinstance(value, float) else repr(value)


def validate(kind: str, name: str, value: Any) -> int:
    """The limit's value, checked.

    Raises:
        LimitError: an unknown limit name or a value that is not an integer (RabbitMQ's text).
    """
    known = VHOST_LIMITS if kind == "vhost" else USER_LIMITS
    if name not in known:
        where = "limits" if kind == "vhost" else "user-limits"
        raise LimitError(f"Unrecognised terms [{{{format_term(name)},{_term(value)}}}] in {where}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise LimitError(f"{name} should be a number, actually was {_term(value)}")
    try:
        return int(check_int64(value, name))  # what the store holds (vhost.bounds)
    except OutOfBounds as exc:
        raise LimitError(str(exc)) from None


class Limits:
    """The limits in force: ``{kind: {owner: {name: value}}}``."""

    def __init__(self) -> None:
        self.by_kind: dict[str, dict[str, dict[str, int]]] = {"vhost": {}, "user": {}}

    def load(self, records: Iterable[LimitRecord]) -> None:
        for r in records:
            self.set(r.kind, r.owner, r.name, r.value)

    def of(self, kind: str, owner: str) -> dict[str, int]:
        return self.by_kind[kind].get(owner, {})

    def set(self, kind: str, owner: str, name: str, value: int) -> None:
        self.by_kind[kind].setdefault(owner, {})[name] = value

    def clear(self, kind: str, owner: str, name: str | None = None) -> None:
        """One limit (or all of ``owner``'s when ``name`` is None)."""
        if name is None:
            self.by_kind[kind].pop(owner, None)
            return
        limits = self.by_kind[kind].get(owner)
        if limits is not None:
            limits.pop(name, None)
            if not limits and kind == "user":  # a vhost stays listed with no limits, as RabbitMQ's
                del self.by_kind[kind][owner]

    def limit(self, kind: str, owner: str, name: str) -> int | None:
        """The limit in force (None: no limit; a negative value is no limit too)."""
        value = self.by_kind[kind].get(owner, {}).get(name)
        return value if value is not None and value >= 0 else None

    def records(self) -> list[LimitRecord]:
        return [
            LimitRecord(kind, owner, name, value)
            for kind, owners in sorted(self.by_kind.items())
            for owner, limits in sorted(owners.items())
            for name, value in sorted(limits.items())
        ]
