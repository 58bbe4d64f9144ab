"""Which AMQP method needs which permission, as data (``auth.py``'s table, checked against RabbitMQ
3.10.8): ``REQUIRED_PERMISSIONS`` and ``required_permissions``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Permission = Literal["configure", "write", "read"]
ResourceKind = Literal["queue", "exchange"]


@dataclass(frozen=True, slots=True)
class Requirement:
    """One permission check an AMQP method makes.

    Attributes:
        permission: ``configure``, ``write`` or ``read``.
        kind: the resource kind checked (``queue`` or ``exchange``).
        field: the method field naming the resource, or ``arguments[<key>]`` for an argument.
        when: empty when the check is unconditional, otherwise the condition in words.
    """

    permission: Permission
    kind: ResourceKind
    field: str
    when: str = ""


_NEW_AE = "the exchange is created with an alternate-exchange argument"
_NEW_DLX = "the queue is created with an x-dead-letter-exchange argument"
_NOT_PASSIVE = "not passive"

REQUIRED_PERMISSIONS: dict[str, tuple[Requirement, ...]] = {
    "exchange.declare": (
        Requirement("configure", "exchange", "exchange", _NOT_PASSIVE),
        Requirement("read", "exchange", "exchange", _NEW_AE),
        Requirement("write", "exchange", "arguments[alternate-exchange]", _NEW_AE),
    ),
    "exchange.delete": (Requirement("configure", "exchange", "exchange"),),
    "exchange.bind": (
        Requirement("write", "exchange", "destination"),
        Requirement("read", "exchange", "source"),
    ),
    "exchange.unbind": (
        Requirement("write", "exchange", "destination"),
        Requirement("read", "exchange", "source"),
    ),
    "queue.declare": (
        Requirement("configure", "queue", "queue", _NOT_PASSIVE),
        Requirement("read", "queue", "queue", _NEW_DLX),
        Requirement("write", "exchange", "arguments[x-dead-letter-exchange]", _NEW_DLX),
    ),
    "queue.delete": (Requirement("configure", "queue", "queue"),),
    "queue.purge": (Requirement("read", "queue", "queue"),),
    "queue.bind": (
        Requirement("write", "queue", "queue"),
        Requirement("read", "exchange", "exchange"),
    ),
    "queue.unbind": (
        Requirement("write", "queue", "queue"),
        Requirement("read", "exchange", "exchange"),
    ),
    "basic.publish": (Requirement("write", "exchange", "exchange"),),
    "basic.consume": (Requirement("read", "queue", "queue"),),
    "basic.get": (Requirement("read", "queue", "queue"),),
}


def required_permissions(method_name: str) -> tuple[Requirement, ...]:
    """The checks RabbitMQ makes for a method, in order (empty for methods that need none).

    Args:
        method_name: ``"queue.bind"``, ``"Queue.Bind"`` (pamqp's ``name``) or ``"queue_bind"``.
    """
    return REQUIRED_PERMISSIONS.get(method_name.lower().replace("_", "."), ())
