"""What the parts of ``Channel`` share: its state and RabbitMQ's permission check.

``Channel`` (``broker.channel``) is assembled from ``PublisherMethods`` (``broker.publishing``)
and ``TopologyMethods`` (``broker.topology``); both work on the attributes declared here, which
``Channel.__init__`` sets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ottermq.vhost.message import Message
    from ottermq.vhost.vhost import VHost

    from ..node.auth import Permission, ResourceKind
    from ..node.stats import MessageStats
    from .confirms import Confirms
    from .connection import AMQPConnection
    from .reply_to import ReplyConsumer


class ChannelBase:
    """The state every part of a channel reads (see ``Channel.__init__`` for what each means)."""

    conn: AMQPConnection
    number: int
    vhost: VHost
    closing: bool
    method_key: int
    last_queue: str
    reply: ReplyConsumer | None
    # content assembly
    _publish: tuple[str, str, bool, bool] | None
    _props: bytes
    _body_size: int
    _body: list[bytes]
    _received: int
    _interned_props: dict[bytes, bytes]
    _write_ok: str | None
    stats: MessageStats
    # publisher side
    confirm: bool
    _publish_seq: int
    _confirms: Confirms
    tx: bool
    _tx_publishes: list[tuple[Message, bool, str]]

    def _allow(self, permission: Permission, kind: ResourceKind, name: str) -> None:
        """RabbitMQ's permission check (made before existence checks).

        Raises:
            AccessRefused: the user lacks ``permission`` on the resource.
        """
        self.conn.node.auth.check(self.conn.user, self.vhost.name, permission, kind, name or "amq.default")
