"""The read API between the AMQP server and everything that reports on it.

Connections register themselves in ``Node.connections`` as :class:`ConnectionHandle`; the node's
services and the management plugin read them only through this module: snapshots built on demand
(``info()``, as RabbitMQ's ``rabbit_channel:info/2`` and ``rabbit_reader:info/2``), plus the few
commands the node gives a connection (block publishers, close). Nothing here is read per message;
a snapshot is a frozen copy and never changes under its reader.

Rules:
- A connection is open once ``connection.open`` was accepted: ``ConnectionHandle.vhost_name`` is
  ``None`` before, and lists leave such connections out, as RabbitMQ's management does (a snapshot
  taken before shows ``vhost`` as ``""`` and no channels).
- ``key`` fields identify the live object for rate sampling (a connection or channel closed and
  another opened never share one while both exist).
- Channels come in channel-number order, consumers in tag order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .stats import MessageStats


@dataclass(frozen=True, slots=True)
class ChannelRef:
    """Where a channel is: what a consumer's ``channel_details`` shows."""

    number: int
    connection_name: str
    peer_host: str
    peer_port: int
    user: str

    @property
    def name(self) -> str:
        """RabbitMQ's channel name: ``"<connection name> (<number>)"``."""
        return f"{self.connection_name} ({self.number})"


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    """One ``basic.consume`` subscription."""

    tag: str
    queue: str
    vhost: str
    channel: ChannelRef
    ack_required: bool
    exclusive: bool
    prefetch: int
    arguments: dict[str, Any] = field(default_factory=dict)
    active: bool = True  # single active consumer: False while waiting
    activity_status: str = "up"  # up, or single_active / waiting on a single-active-consumer queue


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    """One open channel and its counters (``stats`` is a copy)."""

    key: int
    ref: ChannelRef
    vhost: str
    consumers: tuple[ConsumerInfo, ...]
    unacked: int
    unconfirmed: int
    uncommitted: tuple[int, int]  # (messages, acks) in an open transaction
    prefetch: int
    global_prefetch: int
    confirm: bool
    transactional: bool
    stats: MessageStats

    @property
    def name(self) -> str:
        return self.ref.name


@dataclass(frozen=True, slots=True)
class TLSInfo:
    """The TLS session of a connection: version, cipher and the client certificate (``getpeercert``'s
    dictionary, None without one)."""

    version: str
    cipher: str
    peer_cert: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    """One open connection, its socket counters and its channels."""

    key: int
    name: str
    host: str
    port: int
    peer_host: str
    peer_port: int
    user: str
    vhost: str
    tls: TLSInfo | None
    blocked: bool  # publishing and held by an alarm (RabbitMQ's ``blocked`` state)
    channel_max: int
    frame_max: int
    heartbeat: int
    client_properties: dict[str, Any]
    recv_oct: int
    send_oct: int
    recv_cnt: int
    send_cnt: int
    channels: tuple[ChannelInfo, ...]
    flow: bool = False  # publishing and waiting for the store's write backlog (RabbitMQ's ``flow``)

    def consumers(self) -> Iterator[ConsumerInfo]:
        """Every consumer of every channel, in channel then tag order."""
        for channel in self.channels:
            yield from channel.consumers


class WorkerPool(Protocol):
    """The other worker processes, as worker 0's management API reaches them
    (``ottermq.broker.workers.supervisor.Supervisor``)."""

    @property
    def count(self) -> int:
        """How many workers (worker 0 included)."""
        ...

    def owner(self, vhost: str) -> int:
        """The worker that owns ``vhost`` (given one if it has none yet)."""
        ...

    def web_port(self, index: int) -> int | None:
        """Worker ``index``'s internal management API port on 127.0.0.1; None while it is down."""
        ...

    def prometheus_port(self, index: int) -> int | None:
        """Worker ``index``'s internal Prometheus port on 127.0.0.1; None while it is down."""
        ...

    async def sync(self) -> None:
        """Send every worker the metadata as it is now, and wait until they have it."""
        ...


class ConnectionHandle(Protocol):
    """What the node and its readers may ask of a live connection."""

    username: str

    @property
    def vhost_name(self) -> str | None:
        """The vhost once ``connection.open`` was accepted, else None."""

    def channel_count(self) -> int:
        """Open channels (the ``max-channels`` limit counts them)."""

    def channel_stats(self) -> Iterator[MessageStats]:
        """The live counters of each open channel (for node and vhost totals)."""

    def info(self) -> ConnectionInfo:
        """A snapshot (see the module rules)."""

    def count_unacked_bytes(self, into: dict[Any, int]) -> None:
        """Add the body bytes of this connection's unacknowledged messages to ``into`` per queue."""

    def set_blocked(self, blocked: bool, reason: str) -> None:
        """An alarm went on (``connection.blocked``) or off (``connection.unblocked``)."""

    def force_close(self, reason: str, text: str | None = None) -> None:
        """Close with 320 ``CONNECTION_FORCED`` (shutdown, the management API)."""


@runtime_checkable
class DescribedConsumer(Protocol):
    """A queue's consumer that belongs to a channel (``vhost.queue.Consumer`` implementations that
    are not, such as direct reply-to's, have no ``info``)."""

    def info(self) -> ConsumerInfo: ...
