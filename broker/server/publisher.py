"""The publishing side of a channel: ``basic.publish``, publisher confirms, transactions.

Rules:
- ``Publisher`` gets each message whole from the channel (which assembles the content frames) and
  runs the operations layer's publish pipeline (``Operations`` rule 4) with the protocol around it:
  write permission, exchange exists (404) and is not internal (403) (``Operations.publish_exchange``,
  its answer cached per channel), ``user_id``, ``expiration``, CC/BCC types (406, also in a
  transaction; ``vhost.message.incoming_message``), ``VHost.publish``, then ``Operations.settle``.
- ``_published`` does the protocol: basic.return for an unroutable mandatory message, then the
  confirm. A message written to the store is confirmed after the commit; a failed commit withdraws
  it and nacks (see ``broker.confirms``).
- Direct reply-to: ``reply_to = amq.rabbitmq.reply-to`` is rewritten, and a publish to a reply
  address on the default exchange is delivered at publish time, in a transaction too.
- A channel is in confirm mode or transactional, never both (406). A transaction holds its
  publishes here and its acks in ``Consumers`` (``interfaces.HeldAcks``); ``tx.commit`` publishes,
  then settles the acks, then answers once the store commit holding its writes is durable.
- It knows its channel only by what ``Channel`` passes in: the connection (``ConnectionPort``), the
  number, the counters, the consumers' held acks and reply consumer, ``is_open`` and ``close``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ottermq.amqp import fastpath
from ottermq.amqp.errors import AMQPNotImplemented, ChannelException, PreconditionFailed
from ottermq.vhost.message import Entry, Message, incoming_message
from ottermq.vhost.queue import Queue
from ottermq.vhost.vhost import ROUTED, PublishResult
from pamqp import commands as spec
from pamqp.base import Frame

from ..node.auth import IMPERSONATOR
from ..node.stats import MessageStats
from .confirms import Confirms
from .interfaces import ConnectionPort, HeldAcks
from .reply_to import REPLY_PREFIX, ReplyTarget, fast_reply_to

TX_COMMIT: Final = spec.Tx.Commit.index

Publish = tuple[str, str, bool, bool]
"""A ``basic.publish``'s ``(exchange, routing key, mandatory, immediate)``."""


class Publisher:
    """The publishing side of one channel (see the module rules).

    Args:
        conn: the channel's connection.
        number: the channel number.
        stats: the channel's counters (publishes, routing, confirms are counted here).
        acks: where a transaction's acks are held (the channel's ``Consumers``).
        replies: the channel's reply consumer (the channel's ``Consumers``).
        is_open: whether the channel is still open and the connection's channel of that number.
        close: close the channel with an error, naming the method (class << 16 | method).
    """

    # Slots: the publish path reads these per message.
    __slots__ = (
        "_acks",
        "_close",
        "_confirms",
        "_flow",
        "_is_open",
        "_ops",
        "_publish_seq",
        "_replies",
        "_tx_publishes",
        "_user_id",
        "_write_ok",
        "confirm",
        "conn",
        "number",
        "stats",
        "tx",
        "vhost",
    )

    def __init__(
        self,
        conn: ConnectionPort,
        number: int,
        stats: MessageStats,
        acks: HeldAcks,
        replies: ReplyTarget,
        is_open: Callable[[], bool],
        close: Callable[[int, ChannelException], None],
    ) -> None:
        self.conn = conn
        self.number = number
        self.vhost = conn.vhost
        self.stats = stats
        self._acks = acks
        self._replies = replies
        self._is_open = is_open
        self._close = close
        self._ops = conn.node.services.ops
        # whose user_id a message may claim (None: anyone's, RabbitMQ's impersonator tag)
        user = conn.user
        self._user_id: str | None = None if user is not None and IMPERSONATOR in user.tags else conn.username
        self._flow = conn.flow
        self._write_ok: str | None = None  # exchange last allowed for basic.publish
        self.confirm = False
        self._publish_seq = 0
        self._confirms = Confirms()
        self.tx = False
        self._tx_publishes: list[tuple[Message, bool, str]] = []

    # -- basic.publish --------------------------------------------------------------------
    def publish(self, publish: Publish, raw_props: bytes, body: bytes) -> None:
        """One assembled ``basic.publish`` (the channel checked it is open).

        Raises:
            AMQPNotImplemented: ``immediate`` (540).
            NotFound, AccessRefused, PreconditionFailed: as the module rules list.
        """
        flow = self._flow
        if not flow.has_published:
            flow.published()
        conn = self.conn
        exchange_name, routing_key, mandatory, immediate = publish
        if immediate:
            raise AMQPNotImplemented("immediate=true")
        ops = self._ops
        permitted = exchange_name == self._write_ok  # write permission is cached per channel
        exchange = ops.publish_exchange(conn.user, self.vhost, exchange_name, permitted)
        self._write_ok = exchange_name
        if raw_props[0] & 0x02:  # reply-to is set (flag 0x0200): maybe amq.rabbitmq.reply-to
            raw_props = fast_reply_to(raw_props, self._replies.reply)
        # 406 for user_id, expiration, CC/BCC here, also in tx mode (as RabbitMQ)
        message, keys = incoming_message(exchange_name, routing_key, raw_props, body, self._user_id)
        stats = self.stats
        stats.received += 1
        if self.confirm:
            stats.received_confirm += 1
            self._publish_seq += 1
        if exchange is None and (keys is not None or routing_key.startswith(REPLY_PREFIX)):
            conn.replies.route(message, keys)  # at publish time, even in tx (as RabbitMQ)
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
        seq = self._publish_seq if self.confirm else 0
        refused = result.refused
        if result.stored is not None:  # confirm once the write is durable (a failed one is withdrawn)
            if seq:
                self._confirms.wait(seq)
                self._ops.settle(result.stored, lambda ok: self._confirm(seq, ok and not refused))
            else:
                self._ops.settle(result.stored)
        elif seq:
            self._confirm(seq, not refused)

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

    # -- confirms -------------------------------------------------------------------------
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
        if not self._is_open():
            return
        number, send = self.number, self.conn.send
        for tag, multiple, ack in frames:
            send((fastpath.encode_ack if ack else fastpath.encode_nack)(number, tag, multiple))

    @property
    def unconfirmed(self) -> int:
        """Publishes on this confirm-mode channel not yet confirmed to the client."""
        return self._confirms.pending

    @property
    def uncommitted(self) -> int:
        """Publishes held by an open transaction."""
        return len(self._tx_publishes)

    def on_confirm_select(self, m: spec.Confirm.Select) -> None:
        if self.tx:
            raise PreconditionFailed("cannot switch from tx to confirm mode")
        self.confirm = True
        if not m.nowait:
            self.conn.send_method(self.number, spec.Confirm.SelectOk())

    # -- transactions ---------------------------------------------------------------------
    def on_tx_select(self, m: spec.Tx.Select) -> None:
        if self.confirm:
            raise PreconditionFailed("cannot switch from confirm to tx mode")
        self.tx = True
        self._acks.hold_acks()
        self.conn.send_method(self.number, spec.Tx.SelectOk())

    def on_tx_commit(self, m: spec.Tx.Commit) -> None:
        if not self.tx:
            raise PreconditionFailed("channel is not transactional")
        publishes, self._tx_publishes = self._tx_publishes, []
        acks = self._acks.take_held_acks()
        refused = False
        stored: list[tuple[Queue, Entry]] = []
        for message, mandatory, exchange_name in publishes:
            exchange = self.vhost.exchanges.get(exchange_name) if exchange_name else None
            if exchange_name and exchange is None:
                continue  # exchange deleted since the publish: the message is dropped
            result = self.vhost.publish(exchange, message, None, mandatory)  # CC/BCC were checked at publish
            self._count_routing(result, mandatory)
            if mandatory and not result.routed:
                self._return_unroutable(message)
            refused = refused or result.refused
            if result.stored is not None:
                stored += result.stored
        self._acks.settle_held_acks(acks)
        if refused:  # RabbitMQ: a queue refused part of the transaction (what fit stays)
            raise PreconditionFailed("partial tx completion")
        if not self.conn.node.services.store.pending:  # nothing to wait for
            self.conn.send_method(self.number, spec.Tx.CommitOk())
            return
        # durable once its writes are (RabbitMQ: after fsync); a failed commit withdraws them
        self._ops.settle(stored or None, self._on_tx_stored)

    def _on_tx_stored(self, ok: bool) -> None:
        if ok:
            self._send_if_open(spec.Tx.CommitOk())
        elif self._is_open():  # its messages were withdrawn: memory agrees with the store
            self._close(TX_COMMIT, PreconditionFailed("partial tx completion"))

    def _send_if_open(self, method: Frame) -> None:
        if self._is_open():
            self.conn.send_method(self.number, method)

    def on_tx_rollback(self, m: spec.Tx.Rollback) -> None:
        if not self.tx:
            raise PreconditionFailed("channel is not transactional")
        self._tx_publishes = []
        self._acks.drop_held_acks()
        self.conn.send_method(self.number, spec.Tx.RollbackOk())
