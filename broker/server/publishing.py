"""The publishing side of a channel: content assembly, ``basic.publish``, confirms.

Rules:
- A ``basic.publish`` is followed by its content header and exactly ``body_size`` octets of body
  frames; anything else is a 505 (the class/method ids of the close name basic.publish).
- Checks in RabbitMQ's order: write permission, exchange exists (404) and is not internal (403)
  (``Operations.publish_exchange``), ``user_id`` (``Operations.check_user_id``), ``expiration``,
  CC/BCC types (406, also in a transaction).
- The message goes through ``VHost.publish`` (``_published`` does the protocol: basic.return for an
  unroutable mandatory message, then the confirm). A message written to the store is confirmed
  after the commit; a failed commit withdraws it and nacks (see ``broker.confirms``).
- Direct reply-to: ``reply_to = amq.rabbitmq.reply-to`` is rewritten, and a publish to a reply
  address on the default exchange is delivered at publish time, in a transaction too.
"""

from __future__ import annotations

from ottermq.amqp import fastpath
from ottermq.amqp.errors import AMQPNotImplemented, PreconditionFailed, UnexpectedFrame
from ottermq.amqp.fastpath import BASIC_PUBLISH, FRAME_BODY, FRAME_HEADER
from ottermq.amqp.props import parse_expiration, quick_props
from ottermq.vhost.message import Entry, Message, sender_selected
from ottermq.vhost.queue import Queue
from ottermq.vhost.vhost import ROUTED, PublishResult

from ..node.operations import withdraw
from .channel_base import ChannelBase
from .reply_to import REPLY_PREFIX, fast_reply_to

INTERN_MAX = 4096  # distinct routing keys / property octets remembered per channel


class PublisherMethods(ChannelBase):
    """Content assembly, publishing and publisher confirms of ``Channel``."""

    def _on_content(self, frame_type: int, payload: bytes) -> None:
        if self._body_size < 0:
            if frame_type != FRAME_HEADER:
                self._publish = None
                raise UnexpectedFrame(
                    "expected content header for class 60, got non content header frame instead"
                )
            class_id, body_size, raw_props = fastpath.decode_header(payload)
            if class_id != 60:
                self._publish = None
                raise UnexpectedFrame(
                    f"expected content header for class 60, got one for class {class_id} instead"
                )
            limit = self.conn.settings.max_message_size
            if body_size > limit:
                self._publish = None
                raise PreconditionFailed(
                    f"message size {body_size} is larger than configured max size {limit}"
                )
            props = self._interned_props.get(raw_props)
            if props is None:
                if len(self._interned_props) >= INTERN_MAX:
                    self._interned_props.clear()
                props = self._interned_props[raw_props] = raw_props
            self._props = props
            self._body_size = body_size
            self._received = 0
            if body_size == 0:
                self._finish_publish(b"")
            return
        if frame_type != FRAME_BODY:
            self._publish = None
            raise UnexpectedFrame("expected content body, got non content body frame instead")
        self._received += len(payload)
        if self._received == self._body_size and not self._body:
            self._finish_publish(payload)
            return
        self._body.append(payload)
        if self._received >= self._body_size:
            body = b"".join(self._body)
            self._body = []
            if self._received > self._body_size:
                self._publish = None
                raise UnexpectedFrame("content body exceeds the size in its content header")
            self._finish_publish(body)

    def _finish_publish(self, body: bytes) -> None:
        publish = self._publish
        assert publish is not None
        self._publish = None
        self.method_key = BASIC_PUBLISH
        if self.closing:
            return
        conn = self.conn
        if not conn.has_published:
            conn.has_published = True
            if conn.alarm_blocked:
                conn.update_reading()
        exchange_name, routing_key, mandatory, immediate = publish
        if immediate:
            raise AMQPNotImplemented("immediate=true")
        raw_props = self._props
        ops = conn.node.ops
        permitted = exchange_name == self._write_ok  # write permission is cached per channel
        exchange = ops.publish_exchange(conn.user, self.vhost, exchange_name, permitted)
        self._write_ok = exchange_name
        delivery_mode, priority, expiration, user_id = quick_props(raw_props)
        if raw_props[0] & 0x02:  # reply-to is set (flag 0x0200): maybe amq.rabbitmq.reply-to
            raw_props = fast_reply_to(raw_props, self.reply)
        if user_id is not None:
            ops.check_user_id(conn.username, user_id)
        ttl = parse_expiration(expiration) if expiration is not None else None
        message = Message(exchange_name, routing_key, raw_props, body, delivery_mode == 2, priority, ttl)
        keys = None
        cc = b"CC" in raw_props
        if cc:  # sender-selected distribution (CC/BCC headers), rare
            message, keys = sender_selected(message)  # 406 here, also in tx mode (as RabbitMQ)
        stats = self.stats
        stats.received += 1
        if self.confirm:
            stats.received_confirm += 1
            self._publish_seq += 1
        if exchange is None and (cc or routing_key.startswith(REPLY_PREFIX)):
            self.conn.server.replies.route(message, keys)  # at publish time, even in tx (as RabbitMQ)
        if self.tx:
            self._tx_publishes.append((message, mandatory, exchange_name))
            return
        result = self.vhost.publish(exchange, message, None, mandatory)
        if result is ROUTED and not self.confirm:  # nothing to send back: the common case
            stats.routed += 1
            return
        self._count_routing(result, mandatory)
        self._published(message, result, mandatory)

    def _count_routing(self, result: PublishResult, mandatory: bool) -> None:
        stats = self.stats
        if result.routed:
            stats.routed += 1
        elif mandatory:
            stats.unroutable_returned += 1
        else:
            stats.unroutable_dropped += 1

    def _published(self, message: Message, result: PublishResult, mandatory: bool) -> None:
        """The protocol side of ``VHost.publish``: basic.return, then the confirm (after the store
        commit when the message was written; a failed commit withdraws it and nacks)."""
        if mandatory and not result.routed:
            self._return_unroutable(message)
        stored = result.stored
        seq = self._publish_seq if self.confirm else 0
        if stored is not None:  # confirm once the write is durable
            if seq:
                self._confirms.wait(seq)
            refused = result.refused
            self.conn.node.store.after_commit(lambda ok: self._on_stored(ok, seq, refused, stored))
        elif seq:
            self._confirm(seq, not result.refused)

    def _on_stored(self, ok: bool, seq: int, refused: bool, stored: list[tuple[Queue, Entry]]) -> None:
        if not ok:  # not on disk: not in memory either (unless a consumer already has it)
            withdraw(stored)
        if seq:
            self._confirm(seq, ok and not refused)

    def _return_unroutable(self, message: Message) -> None:
        if self._confirms.settled:  # earlier publishes' confirms go out before this return
            self.send_confirms()
        self.conn.send(
            fastpath.encode_return(
                self.number,
                312,
                "NO_ROUTE",
                message.exchange,
                message.routing_key,
                message.raw_props,
                message.body,
                self.conn.frame_max,
            )
        )

    def _confirm(self, seq: int, ok: bool) -> None:
        """A publish is confirmed or refused: sent with the others settled in this loop turn."""
        confirms = self._confirms
        if not confirms.settled:
            self.conn.confirms_ready(self)
        confirms.settle(seq, ok)
        if ok:
            self.stats.confirmed += 1

    def send_confirms(self) -> None:
        """Send what was settled since the last call, coalesced (see ``broker.confirms``)."""
        frames = self._confirms.take()
        if self.closing or self.conn.channels.get(self.number) is not self:
            return
        number, send = self.number, self.conn.send
        for tag, multiple, ack in frames:
            send((fastpath.encode_ack if ack else fastpath.encode_nack)(number, tag, multiple))
