"""What the parts of the AMQP server ask of each other: Protocols only, no behaviour.

Rules:
- Every other module of ``broker.server`` may import this one; it imports none of them but the
  leaves it names (``reply_to``, ``flow``, ``handshake``, ``handoff``, ``endpoints``, ``states``).
  The connection, the channel and the channel's parts depend on these Protocols, never on each
  other's classes, so no module of the server imports one that imports it back (type-only imports
  included; ``tests/unit/architecture`` checks it).
- ``ServerPort``: what a connection uses of the ``AMQPServer`` (``listener``).
- ``ConnectionPort``: what a channel and its parts use of their connection (``AMQPConnection``).
  What is fixed once the connection runs (``frame_max``, ``user``, ``vhost``, ``flow``) may be
  copied when a channel opens; the rest is read at use.
- ``ChannelPort``: what the connection needs to close a channel from outside frame handling.
- ``OpeningPort``: what the opening handshake (``opening``) carries out on its connection.
- ``ConfirmSender``, ``HeldAcks``: the narrow views the connection has of a channel's publisher
  and the publisher of the channel's consumers (a transaction holds acks).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..node.info import ConnectionHandle
from .handoff import Handed

if TYPE_CHECKING:
    from ottermq.amqp.errors import ChannelException
    from ottermq.amqp.fastpath import Encoded
    from ottermq.amqp.reader import FrameReader
    from ottermq.persistence.store import UserRecord
    from ottermq.vhost.queue import Queue
    from ottermq.vhost.vhost import VHost
    from pamqp.base import Frame

    from ..config import Settings
    from ..node.info import ChannelRef
    from ..node.node import Node
    from .flow import FlowControl
    from .handoff import HandOff
    from .handshake import ClientCapabilities
    from .reply_to import ReplyRegistry
    from .states import State

Conn_contra = TypeVar("Conn_contra", contravariant=True)

HeldAck = tuple[int, bool, str, bool]
"""An ack, nack or reject held by a transaction: ``(delivery tag, multiple, kind, requeue)`` with
``kind`` ``"ack"``, ``"nack"`` or ``"reject"``."""


class ServerPort(Protocol[Conn_contra]):
    """What a connection uses of the server that accepted it (``listener.AMQPServer``)."""

    @property
    def node(self) -> Node: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def replies(self) -> ReplyRegistry: ...

    @property
    def server_properties(self) -> dict[str, Any]: ...

    def register(self, conn: Conn_contra) -> None:
        """A connection was made."""

    def unregister(self, conn: Conn_contra) -> None:
        """A connection is gone."""

    @property
    def takes_over(self) -> bool:
        """Whether connections may be handed to another worker (they keep their handshake bytes)."""
        ...

    def hand_off(self, conn: HandOff, vhost: str) -> bool:
        """Give ``conn`` to the worker that owns ``vhost``; False when that is this process."""
        ...


class ChannelPort(Protocol):
    """A channel as the connection closes it (``Channel``)."""

    @property
    def number(self) -> int: ...

    @property
    def method_key(self) -> int:
        """Class and method ids of the method being handled (``class << 16 | method``)."""

    def shutdown(self) -> None:
        """Release everything the channel holds (idempotent)."""


class ConfirmSender(Protocol):
    """A channel's publisher with settled confirms to send (``Publisher``)."""

    def send_confirms(self) -> None: ...


class ConnectionPort(Protocol):
    """What a channel and its parts use of their connection (``AMQPConnection``)."""

    @property
    def node(self) -> Node: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def replies(self) -> ReplyRegistry:
        """The node-wide direct reply-to registry."""

    @property
    def vhost(self) -> VHost: ...

    @property
    def user(self) -> UserRecord: ...

    @property
    def username(self) -> str: ...

    @property
    def peer(self) -> str:
        """``host:port`` of the client, for logs."""

    @property
    def frame_max(self) -> int: ...

    @property
    def flow(self) -> FlowControl:
        """When the connection reads and delivers (``paused``: no deliveries)."""

    @property
    def capabilities(self) -> ClientCapabilities:
        """What the client said it understands (``consumer_cancel_notify``, ``spec_qos``, ...)."""

    @property
    def exclusive_queues(self) -> set[Queue]: ...

    @property
    def channels(self) -> Mapping[int, object]:
        """The open channels by number."""

    def send(self, data: Encoded) -> None:
        """Queue encoded frames for the client (written once per event-loop turn)."""

    def send_method(self, channel: int, method: Frame) -> None: ...

    def confirms_ready(self, sender: ConfirmSender) -> None:
        """``sender`` has settled confirms: they go out with this loop turn's output."""

    def channel_ref(self, number: int) -> ChannelRef:
        """Where channel ``number`` is, for snapshots."""

    def channel_closed(self, number: int) -> None:
        """Forget a channel after the close handshake completed."""

    def close_channel(self, channel: ChannelPort, exc: ChannelException) -> None:
        """Close ``channel`` with ``exc`` outside frame handling (e.g. a failed store commit)."""


class HeldAcks(Protocol):
    """Acks held by a transaction until ``tx.commit`` (``Consumers``)."""

    def hold_acks(self) -> None:
        """From now on hold acks, nacks and rejects (``tx.select``)."""

    def take_held_acks(self) -> list[HeldAck]:
        """Those held so far, forgotten here (``tx.commit``)."""

    def settle_held_acks(self, held: list[HeldAck]) -> None:
        """Carry out acks ``take_held_acks`` returned, in order.

        Raises:
            PreconditionFailed: a delivery tag is no longer unacked.
        """

    def drop_held_acks(self) -> None:
        """Forget those held (``tx.rollback``)."""

    @property
    def held_acks(self) -> int: ...


class OpeningPort(Handed, ConnectionHandle, Protocol):
    """What the opening handshake (``opening.Opening``) uses of its connection (``AMQPConnection``):
    it fills in what the client said (properties, user, limits, vhost) and moves the state; with
    workers, what a hand-off uses too (``handoff.Handed``)."""

    client_properties: dict[str, Any]
    capabilities: ClientCapabilities
    user: UserRecord
    frame_max: int
    channel_max: int
    heartbeat: int
    vhost: VHost

    @property
    def state(self) -> State: ...

    @property
    def server(self) -> ServerPort[Any]: ...

    @property
    def node(self) -> Node: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def peer(self) -> str: ...

    @property
    def reader(self) -> FrameReader: ...

    def to(self, state: State) -> None:
        """Move to ``state`` (``states.TRANSITIONS`` says which moves exist)."""

    def feed(self, data: bytes) -> None:
        """Frames to handle, as read."""

    def send(self, data: bytes) -> None: ...

    def send_method(self, channel: int, method: Frame) -> None: ...

    def flush(self) -> None:
        """Write what is queued now."""

    def use_0_8(self) -> None:
        """Translate method frames to and from AMQP 0-8."""

    def silent_close(self, reason: str) -> None:
        """Close the socket without a word after a delay (a broken handshake)."""

    def set_close_timer(self) -> None:
        """Close the socket if the client has not within ``CLOSE_TIMEOUT``."""

    def label(self) -> str:
        """The peer, with the client's ``connection_name`` (for logs)."""

    def running(self) -> None:
        """``open-ok`` was sent: start heartbeats."""
