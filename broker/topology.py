"""The exchange and queue classes of a channel: declare, delete, bind, unbind, purge.

Rules (RabbitMQ's, checked by e2e/test_exchanges.py, test_queues.py, test_permissions.py):
- Permissions are checked before existence: configure for declare/delete, write on the
  destination and read on the source for (un)bind.
- An empty queue name means the channel's most recently declared queue (404 if there is none).
- ``amq.rabbitmq.reply-to`` and its addresses are declared passively (``broker.reply_to``).
- ``queue.unbind`` is idempotent: a missing queue, exchange or binding answers unbind-ok.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, cast

from ottermq.amqp.errors import AccessRefused, NotFound, PreconditionFailed
from ottermq.vhost.vhost import generated_name
from pamqp import commands as spec

from .channel_base import ChannelBase
from .reply_to import REPLY_QUEUE

if TYPE_CHECKING:
    from ottermq.vhost.queue import Queue

    from .auth import Permission
    from .reply_to import ReplyTarget


def _declare_ok(channel: int, queue: str, message_count: int, consumer_count: int) -> bytes:
    """queue.declare-ok, encoded here because pamqp rejects names RabbitMQ allows (e.g. ``*``)."""
    name = queue.encode()
    counts = struct.pack(">II", message_count, consumer_count)
    payload = struct.pack(">HHB", 50, 11, len(name)) + name + counts
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + b"\xce"



class TopologyMethods(ChannelBase):
    """``exchange.*`` and ``queue.*`` handlers of ``Channel``."""

    def _queue_name(self, name: str) -> str:
        if not name:
            if not self.last_queue:
                raise NotFound("no previously declared queue")
            return self.last_queue
        return name

    # -- exchange class -------------------------------------------------------------------
    def on_exchange_declare(self, m: spec.Exchange.Declare) -> None:
        if not m.passive:
            self._allow("configure", "exchange", m.exchange)
            ae = (m.arguments or {}).get("alternate-exchange")
            if isinstance(ae, str) and m.exchange not in self.vhost.exchanges:
                self._allow("read", "exchange", m.exchange)
                self._allow("write", "exchange", ae)
        self.vhost.declare_exchange(
            m.exchange, m.exchange_type, m.passive, m.durable, m.auto_delete, m.internal, m.arguments
        )
        if not m.nowait:
            self.conn.send_method(self.number, spec.Exchange.DeclareOk())

    def on_exchange_delete(self, m: spec.Exchange.Delete) -> None:
        self._allow("configure", "exchange", m.exchange)
        self.vhost.delete_exchange(m.exchange, m.if_unused)
        if not m.nowait:
            self.conn.send_method(self.number, spec.Exchange.DeleteOk())

    def on_exchange_bind(self, m: spec.Exchange.Bind) -> None:
        self._allow("write", "exchange", m.destination)
        self._allow("read", "exchange", m.source)
        self.vhost.bind(m.source, ("exchange", m.destination), m.routing_key, m.arguments or {})
        if not m.nowait:
            self.conn.send_method(self.number, spec.Exchange.BindOk())

    def on_exchange_unbind(self, m: spec.Exchange.Unbind) -> None:
        self._allow("write", "exchange", m.destination)
        self._allow("read", "exchange", m.source)
        self.vhost.unbind(m.source, ("exchange", m.destination), m.routing_key, m.arguments or {})
        if not m.nowait:
            self.conn.send_method(self.number, spec.Exchange.UnbindOk())

    # -- queue class ----------------------------------------------------------------------
    def on_queue_declare(self, m: spec.Queue.Declare) -> None:
        name = m.queue
        if name.startswith(REPLY_QUEUE):  # all declares of these are passive (RabbitMQ)
            target = cast("ReplyTarget", self)  # a Channel
            self.last_queue = name = self.conn.broker.replies.declare(name, self.vhost.name, target)
            if not m.nowait:
                self.conn.send(_declare_ok(self.number, name, 0, 1))
            return
        generated = not name
        if generated:
            if m.passive:
                raise NotFound(f"no queue '' in vhost '{self.vhost.name}'")
            name = generated_name("amq.gen-")
        if not m.passive:
            self._allow("configure", "queue", name)
            dlx = (m.arguments or {}).get("x-dead-letter-exchange")
            if isinstance(dlx, str) and name not in self.vhost.queues:
                self._allow("read", "queue", name)
                self._allow("write", "exchange", dlx)
        queue = self.vhost.declare_queue(
            name, m.passive, m.durable, m.exclusive, m.auto_delete, m.arguments, self.conn, generated
        )
        queue.touch()
        if m.exclusive and queue.owner is self.conn:
            self.conn.exclusive_queues.add(queue)
        self.last_queue = name
        if not m.nowait:
            self.conn.send(_declare_ok(self.number, name, queue.message_count, len(queue.consumers)))

    def _queue(self, name: str, permission: Permission | None = None) -> Queue:
        name = self._queue_name(name)
        if permission is not None:
            self._allow(permission, "queue", name)
        return self.vhost.get_queue(name, self.conn)

    def on_queue_bind(self, m: spec.Queue.Bind) -> None:
        self._allow("write", "queue", self._queue_name(m.queue))
        if m.exchange == "":  # before read on the exchange, as RabbitMQ's binding_action
            raise AccessRefused("operation not permitted on the default exchange")
        self._allow("read", "exchange", m.exchange)
        queue = self._queue(m.queue)
        # RabbitMQ: an empty queue name *and* key both mean the most recently declared queue
        key = queue.name if not m.queue and not m.routing_key else m.routing_key
        self.vhost.bind(m.exchange, ("queue", queue.name), key, m.arguments or {})
        if not m.nowait:
            self.conn.send_method(self.number, spec.Queue.BindOk())

    def on_queue_unbind(self, m: spec.Queue.Unbind) -> None:
        # RabbitMQ 3.10 binding_action: write on the queue, the default exchange, read on the exchange;
        # then unbind-ok even when the queue, the exchange or the binding does not exist
        name = self._queue_name(m.queue)
        self._allow("write", "queue", name)
        if m.exchange == "":
            raise AccessRefused("operation not permitted on the default exchange")
        self._allow("read", "exchange", m.exchange)
        key = name if not m.queue and not m.routing_key else m.routing_key
        self.vhost.unbind(m.exchange, ("queue", name), key, m.arguments or {}, self.conn)
        self.conn.send_method(self.number, spec.Queue.UnbindOk())

    def on_queue_purge(self, m: spec.Queue.Purge) -> None:
        count = self._queue(m.queue, "read").purge()
        if not m.nowait:
            self.conn.send_method(self.number, spec.Queue.PurgeOk(count))

    def on_queue_delete(self, m: spec.Queue.Delete) -> None:
        name = m.queue or self.last_queue
        self._allow("configure", "queue", name)
        if name not in self.vhost.queues:
            # deleting a missing queue succeeds in RabbitMQ 3.x
            if not m.nowait:
                self.conn.send_method(self.number, spec.Queue.DeleteOk(0))
            return
        queue = self._queue(name)
        if m.if_unused and queue.consumers:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.vhost.name}' in use")
        if m.if_empty and queue.message_count:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.vhost.name}' not empty")
        count = self.vhost.delete_queue(queue)
        self.conn.exclusive_queues.discard(queue)
        if not m.nowait:
            self.conn.send_method(self.number, spec.Queue.DeleteOk(count))
