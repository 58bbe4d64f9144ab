"""The exchange and queue classes of a channel: declare, delete, bind, unbind, purge.

Rules (RabbitMQ's, checked by e2e/test_exchanges.py, test_queues.py, test_permissions.py):
- Frames in, ``broker.node.operations`` does the rest (permissions before existence: configure for
  declare/delete, write on the destination and read on the source for (un)bind; names, existence,
  equivalence), replies out.
- ``Topology`` owns the channel's most recently declared queue: an empty queue name means it (404
  if there is none), here and in basic.consume/basic.get (``queue``).
- ``amq.rabbitmq.reply-to`` and its addresses are declared passively (``broker.reply_to``).
- ``queue.unbind`` is idempotent: a missing queue, exchange or binding answers unbind-ok.
- It knows its channel only by what ``Channel`` passes in: the connection (``ConnectionPort``), the
  number and the channel's reply consumer (``ReplyTarget``).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ottermq.amqp.errors import NotFound
from ottermq.vhost.vhost import generated_name
from pamqp import commands as spec

from .interfaces import ConnectionPort
from .reply_to import REPLY_QUEUE, ReplyTarget

if TYPE_CHECKING:
    from ottermq.vhost.queue import Queue

    from ..node.operations import QueueAccess


def _declare_ok(channel: int, queue: str, message_count: int, consumer_count: int) -> bytes:
    """queue.declare-ok, encoded here because pamqp rejects names RabbitMQ allows (e.g. ``*``)."""
    name = queue.encode()
    counts = struct.pack(">II", message_count, consumer_count)
    payload = struct.pack(">HHB", 50, 11, len(name)) + name + counts
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + b"\xce"


class Topology:
    """``exchange.*`` and ``queue.*`` handlers of one channel (see the module rules).

    Args:
        conn: the channel's connection.
        number: the channel number.
        replies: the channel's reply consumer (``queue.declare`` of a reply address names it).
    """

    __slots__ = ("conn", "last_queue", "number", "replies", "vhost")

    def __init__(self, conn: ConnectionPort, number: int, replies: ReplyTarget) -> None:
        self.conn = conn
        self.number = number
        self.vhost = conn.vhost
        self.replies = replies
        self.last_queue = ""  # most recently declared queue, for empty queue names

    def _queue_name(self, name: str) -> str:
        if not name:
            if not self.last_queue:
                raise NotFound("no previously declared queue")
            return self.last_queue
        return name

    # -- exchange class -------------------------------------------------------------------
    def on_exchange_declare(self, m: spec.Exchange.Declare) -> None:
        self.conn.node.services.ops.declare_exchange(
            self.conn.user,
            self.vhost,
            m.exchange,
            m.exchange_type,
            passive=m.passive,
            durable=m.durable,
            auto_delete=m.auto_delete,
            internal=m.internal,
            arguments=m.arguments,
        )
        if not m.nowait:
            self.conn.send_method(self.number, spec.Exchange.DeclareOk())

    def on_exchange_delete(self, m: spec.Exchange.Delete) -> None:
        self.conn.node.services.ops.delete_exchange(self.conn.user, self.vhost, m.exchange, m.if_unused)
        if not m.nowait:
            self.conn.send_method(self.number, spec.Exchange.DeleteOk())

    def on_exchange_bind(self, m: spec.Exchange.Bind) -> None:
        dest = ("exchange", m.destination)
        self.conn.node.services.ops.bind(
            self.conn.user, self.vhost, m.source, dest, m.routing_key, m.arguments
        )
        if not m.nowait:
            self.conn.send_method(self.number, spec.Exchange.BindOk())

    def on_exchange_unbind(self, m: spec.Exchange.Unbind) -> None:
        dest = ("exchange", m.destination)
        self.conn.node.services.ops.unbind(
            self.conn.user, self.vhost, m.source, dest, m.routing_key, m.arguments
        )
        if not m.nowait:
            self.conn.send_method(self.number, spec.Exchange.UnbindOk())

    # -- queue class ----------------------------------------------------------------------
    def on_queue_declare(self, m: spec.Queue.Declare) -> None:
        name = m.queue
        if name.startswith(REPLY_QUEUE):  # all declares of these are passive (RabbitMQ)
            self.last_queue = name = self.conn.replies.declare(name, self.vhost.name, self.replies)
            if not m.nowait:
                self.conn.send(_declare_ok(self.number, name, 0, 1))
            return
        generated = not name
        if generated:
            if m.passive:
                raise NotFound(f"no queue '' in vhost '{self.vhost.name}'")
            name = generated_name("amq.gen-")
        queue = self.conn.node.services.ops.declare_queue(
            self.conn.user,
            self.vhost,
            name,
            passive=m.passive,
            durable=m.durable,
            exclusive=m.exclusive,
            auto_delete=m.auto_delete,
            arguments=m.arguments,
            owner=self.conn,
            generated=generated,
            server_named=generated,
        ).queue
        assert queue is not None
        if m.exclusive and queue.owner is self.conn:
            self.conn.exclusive_queues.add(queue)
        self.last_queue = name
        if not m.nowait:
            self.conn.send(
                _declare_ok(self.number, name, queue.message_count, queue.selection.declared_count)
            )

    def queue(self, name: str, access: QueueAccess) -> Queue:
        """The queue ``name`` (empty: the most recently declared) names, checked by the operations
        layer for ``access`` (permission, existence, exclusive owner).

        Raises:
            AccessRefused: no permission.
            NotFound: no such queue, or no name and none declared on this channel.
            ResourceLocked: another connection's exclusive queue.
        """
        name = self._queue_name(name)
        return self.conn.node.services.ops.access_queue(self.conn.user, self.vhost, name, access, self.conn)

    def on_queue_bind(self, m: spec.Queue.Bind) -> None:
        name = self._queue_name(m.queue)
        # RabbitMQ: an empty queue name *and* key both mean the most recently declared queue
        key = name if not m.queue and not m.routing_key else m.routing_key
        ops = self.conn.node.services.ops
        ops.bind(self.conn.user, self.vhost, m.exchange, ("queue", name), key, m.arguments, self.conn)
        if not m.nowait:
            self.conn.send_method(self.number, spec.Queue.BindOk())

    def on_queue_unbind(self, m: spec.Queue.Unbind) -> None:
        name = self._queue_name(m.queue)
        key = name if not m.queue and not m.routing_key else m.routing_key
        ops = self.conn.node.services.ops
        ops.unbind(self.conn.user, self.vhost, m.exchange, ("queue", name), key, m.arguments, self.conn)
        self.conn.send_method(self.number, spec.Queue.UnbindOk())

    def on_queue_purge(self, m: spec.Queue.Purge) -> None:
        name = self._queue_name(m.queue)
        count = self.conn.node.services.ops.purge_queue(self.conn.user, self.vhost, name, self.conn)
        if not m.nowait:
            self.conn.send_method(self.number, spec.Queue.PurgeOk(count))

    def on_queue_delete(self, m: spec.Queue.Delete) -> None:
        name = m.queue or self.last_queue
        queue = self.vhost.queues.get(name)
        count = self.conn.node.services.ops.delete_queue(
            self.conn.user, self.vhost, name, if_unused=m.if_unused, if_empty=m.if_empty, owner=self.conn
        )
        if queue is not None:
            self.conn.exclusive_queues.discard(queue)
        if not m.nowait:
            self.conn.send_method(self.number, spec.Queue.DeleteOk(count))
