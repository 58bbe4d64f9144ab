"""A channel's consumers and deliveries: basic.consume/cancel/qos/get/recover, acks, direct reply-to.

Rules:
- ``Consumers`` owns what a channel hands out: its ``basic.consume`` subscriptions
  (``ChannelConsumer``, by tag), its direct reply-to consumer, the delivery tags (counting up from 1
  per channel, deliveries and basic.get alike) and the unacked deliveries, kept in ascending tag
  order with the counters QoS reads (``unacked_count``, each consumer's ``unacked``).
- QoS: ``prefetch`` applies to consumers created afterwards, ``global_prefetch`` to the whole
  channel; a consumer takes a delivery only while both allow it, the socket's output is not backed
  up and the channel is open. As RabbitMQ 3.10, consuming from a quorum queue after a
  ``basic.qos(global=true)`` with a non-zero prefetch count is a 540 connection error (``global_qos``
  records the last global qos as sent, whatever ``spec_qos`` makes of it).
- An ack, nack or reject names a delivery tag (``multiple``: every tag up to it; tag 0 with
  ``multiple``: all); an unknown tag is a 406. In a transaction they are held (``hold_acks``) and
  carried out at commit, in order.
- ``shutdown`` (the channel closes, either side): the consumers leave their queues, the reply
  consumer ends, and every unacked delivery is requeued (redelivered; ``down`` for quorum queues).
- What goes out is ``Queue.outgoing``: the stored message, with ``x-delivery-count`` where the
  queue adds it.
- It knows its channel only by what ``Channel`` passes in: the connection (``ConnectionPort``), the
  channel number and its counters. The queue a consume or get names is resolved by the channel.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any, Final

from ottermq.amqp import fastpath
from ottermq.amqp.errors import AccessRefused, AMQPNotImplemented, NotAllowed, PreconditionFailed
from ottermq.vhost.arguments import check_consume_arguments
from ottermq.vhost.consumers import WAITING
from ottermq.vhost.message import Entry, Message
from ottermq.vhost.queue import Queue
from ottermq.vhost.vhost import generated_name
from pamqp import commands as spec

from ..node.info import ChannelRef, ConsumerInfo
from ..node.stats import MessageStats
from .interfaces import ConnectionPort, HeldAck
from .reply_to import ReplyConsumer

# The channel's logger: the log lines (and operators' filters on them) did not move with the code.
log: Final = logging.getLogger(__name__.rpartition(".")[0] + ".channel")


class ChannelConsumer:
    """A ``basic.consume`` subscription on a channel (implements ``vhost.queue.Consumer``)."""

    __slots__ = ("owner", "queue", "tag", "no_ack", "exclusive", "prefetch", "unacked", "arguments")

    def __init__(
        self, owner: Consumers, queue: Queue, tag: str, no_ack: bool, exclusive: bool, prefetch: int
    ) -> None:
        self.owner = owner
        self.queue = queue
        self.tag = tag
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.unacked = 0
        self.arguments: dict[str, Any] = {}  # basic.consume's arguments (x-priority, ...)

    def info(self, ref: ChannelRef | None = None) -> ConsumerInfo:
        """A snapshot (``ottermq.broker.node.info``); ``ref`` is the channel's, computed if not given."""
        owner = self.owner
        status = self.queue.selection.status(self)
        return ConsumerInfo(
            tag=self.tag,
            queue=self.queue.name,
            vhost=owner.vhost.name,
            channel=ref if ref is not None else owner.conn.channel_ref(owner.number),
            ack_required=not self.no_ack,
            exclusive=self.exclusive,
            prefetch=self.prefetch,
            arguments=self.arguments,
            active=status != WAITING,
            activity_status=status,
        )

    def can_deliver(self) -> bool:
        owner = self.owner
        if owner.flow.paused or owner.closing:
            return False
        if self.no_ack:
            return True
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        limit = owner.global_prefetch
        return not (limit and owner.unacked_count >= limit)

    def deliver(self, queue: Queue, entry: Entry) -> None:
        self.owner.deliver(self, queue, entry)

    def on_queue_deleted(self, queue: Queue) -> None:
        self.owner.server_cancel(self)


Unacked = tuple[Entry, Queue, ChannelConsumer | None]
"""An unacked delivery: the entry, its queue, and its consumer (None for basic.get)."""


class Consumers:
    """The consuming side of one channel (see the module rules).

    Args:
        conn: the channel's connection.
        number: the channel number.
        stats: the channel's counters (deliveries, acks, gets are counted here).
    """

    # Slots: the delivery and ack paths read these per message.
    __slots__ = (
        "_delivery_clock",
        "_frame_max",
        "_held",
        "_next_tag",
        "_send",
        "_unacked",
        "closing",
        "conn",
        "consumers",
        "flow",
        "global_prefetch",
        "global_qos",
        "number",
        "prefetch",
        "reply",
        "reply_id",
        "stats",
        "unacked_count",
        "vhost",
    )

    def __init__(self, conn: ConnectionPort, number: int, stats: MessageStats) -> None:
        self.conn = conn
        self.number = number
        self.vhost = conn.vhost
        self.stats = stats
        self.flow = conn.flow  # paused: the socket's output is backed up
        self.closing = False
        self.consumers: dict[str, ChannelConsumer] = {}
        self.reply: ReplyConsumer | None = None  # direct reply-to consumer (broker/server/reply_to.py)
        self.reply_id: str | None = None  # this channel's id in reply addresses, once it has one
        self._unacked: dict[int, Unacked] = {}
        self._delivery_clock: deque[tuple[int, float]] = deque()  # (delivery tag, time): overdue_ack
        self._next_tag = 0
        self.unacked_count = 0
        self.prefetch = 0  # applies to consumers created afterwards
        self.global_prefetch = 0
        self.global_qos = False  # the last basic.qos(global=true) had a non-zero prefetch count
        self._held: list[HeldAck] | None = None  # a transaction's acks; None: not transactional
        self._send = conn.send
        self._frame_max = conn.frame_max  # fixed once the connection runs

    # -- delivering -----------------------------------------------------------------------
    def deliver(self, consumer: ChannelConsumer, queue: Queue, entry: Entry) -> None:
        """Send one entry to a consumer on this channel."""
        self._next_tag += 1
        tag = self._next_tag
        stats = self.stats
        counts = queue.stats
        if entry.redelivered:
            stats.redelivered += 1
            counts.redeliver += 1
        if consumer.no_ack:
            stats.delivered_consume_auto_ack += 1
            counts.deliver_no_ack += 1
            if entry.store_id:
                queue.forget([entry])
        else:
            stats.delivered_consume_manual_ack += 1
            counts.deliver += 1
            self._unacked[tag] = (entry, queue, consumer)
            consumer.unacked += 1
            self.unacked_count += 1
            queue.unacked += 1
            if entry.store_id:
                queue.delivered(entry)
        message = entry.message if not entry.delivery_count else queue.outgoing(entry)
        self._send(
            fastpath.encode_deliver(
                self.number,
                consumer.tag,
                tag,
                entry.redelivered,
                message.exchange,
                message.routing_key,
                message.raw_props,
                message.body,
                self._frame_max,
            )
        )

    def deliver_reply(self, consumer: ReplyConsumer, message: Message) -> None:
        """A direct reply: no ack, no bookkeeping; RabbitMQ sends the next delivery tag unused."""
        if self.reply is consumer and not self.closing:
            self._send(
                fastpath.encode_deliver(
                    self.number,
                    consumer.tag,
                    self._next_tag + 1,
                    False,
                    message.exchange,
                    message.routing_key,
                    message.raw_props,
                    message.body,
                    self._frame_max,
                )
            )

    def kick(self) -> None:
        """Let the queues of this channel's consumers deliver again (QoS raised, output drained)."""
        for queue in {c.queue for c in self.consumers.values()}:
            queue.dispatch()

    def server_cancel(self, consumer: ChannelConsumer) -> None:
        """The queue went away: forget the consumer and tell the client if it listens."""
        if self.consumers.get(consumer.tag) is consumer:
            del self.consumers[consumer.tag]
            log.info(
                "consumer '%s' on channel %d of %s cancelled by the broker: queue '%s' deleted",
                consumer.tag,
                self.number,
                self.conn.peer,
                consumer.queue.name,
            )
            if self.conn.capabilities.consumer_cancel_notify and not self.closing:
                self.conn.send_method(self.number, spec.Basic.Cancel(consumer.tag, nowait=True))

    def shutdown(self) -> None:
        """The channel closes: consumers go, the reply consumer ends, unacked messages are requeued."""
        self.closing = True
        self.conn.replies.channel_closed(self)
        self.reply = None
        consumers = list(self.consumers.values())
        self.consumers.clear()
        for consumer in consumers:  # no dispatch yet: a new single active consumer gets the requeued first
            self.vhost.consumer_removed(consumer.queue, consumer, dispatch=False)
        self.requeue_all(down=True)
        for queue in {c.queue for c in consumers}:
            if not queue.deleted:
                queue.dispatch()

    # -- the read API (snapshots, the consumer timeout): never per message -------------------
    def infos(self, ref: ChannelRef) -> tuple[ConsumerInfo, ...]:
        """Snapshots of the consumers, in tag order."""
        return tuple(self.consumers[tag].info(ref) for tag in sorted(self.consumers))

    def count_unacked_bytes(self, into: dict[Queue, int]) -> None:
        """Add the body sizes of the unacked messages to ``into``, per queue."""
        for entry, queue, _consumer in self._unacked.values():
            into[queue] = into.get(queue, 0) + len(entry.message.body)

    def overdue_ack(self, now: float, default_ms: int | None) -> int | None:
        """The consumer timeout (ms) the oldest unacked delivery has outlived, else None.

        Called by ``broker/server/ack_timeout.py`` at every check, never per message: a call records
        ``(highest delivery tag so far, now)`` when there were deliveries since the last record and
        the last is older than 1/60 of the timeout in force (so a channel keeps at most about 60),
        and a delivery tag's delivery time is bounded by the first record at or above it (late by
        at most that granularity plus one check, never early). As RabbitMQ
        (``evaluate_consumer_timeout``), only the oldest unacked delivery is looked at, against the
        lower of its queue's timeout (``x-consumer-timeout``/policy) and the node's ``default_ms``.
        """
        clock = self._delivery_clock
        if not self._unacked:
            clock.clear()
            return None
        oldest_tag, (_entry, queue, _consumer) = next(iter(self._unacked.items()))
        limits = [t for t in (queue.ack_timeout, default_ms) if t]
        timeout = min(limits) if limits else None
        if not clock or (clock[-1][0] != self._next_tag and now - clock[-1][1] >= (timeout or 0) / 60000):
            clock.append((self._next_tag, now))
        while len(clock) > 1 and clock[0][0] < oldest_tag:
            clock.popleft()
        if timeout is None or clock[0][0] < oldest_tag:  # not yet recorded (granularity)
            return None
        return timeout if (now - clock[0][1]) * 1000 >= timeout else None

    # -- acks -----------------------------------------------------------------------------
    def _take_unacked(self, tag: int, multiple: bool) -> list[Unacked]:
        unacked = self._unacked
        if multiple and tag == 0:
            taken = list(unacked.values())
            unacked.clear()
        elif tag not in unacked:
            raise PreconditionFailed(f"unknown delivery tag {tag}")
        elif multiple:
            taken = []
            for key in list(unacked):
                if key > tag:
                    break
                taken.append(unacked.pop(key))
        else:
            taken = [unacked.pop(tag)]
        self.unacked_count -= len(taken)
        return taken

    def _settle(self, taken: list[Unacked]) -> set[Queue]:
        """Release unacked bookkeeping (does not decide the entries' fate)."""
        queues: set[Queue] = set()
        for _entry, queue, consumer in taken:
            if consumer is not None:
                consumer.unacked -= 1
            queue.unacked -= 1
            queues.add(queue)
        return queues

    def _acked(self, taken: list[Unacked]) -> None:
        self.stats.acknowledged += len(taken)
        for entry, queue, _consumer in taken:
            queue.stats.ack += 1
            if entry.store_id:
                queue.forget([entry])
        for queue in self._settle(taken):
            if queue.consumers:
                queue.dispatch()

    def on_ack(self, tag: int, multiple: bool) -> None:
        """basic.ack.

        Raises:
            PreconditionFailed: unknown delivery tag.
        """
        held = self._held
        if held is not None:
            self._check_tag(tag, multiple)
            held.append((tag, multiple, "ack", False))
            return
        taken = self._take_unacked(tag, multiple)
        if len(taken) == 1:
            self.stats.acknowledged += 1
            entry, queue, consumer = taken[0]
            queue.stats.ack += 1
            if consumer is not None:
                consumer.unacked -= 1
            queue.unacked -= 1
            if entry.store_id:
                queue.forget([entry])
            if queue.consumers:
                queue.dispatch()
            return
        self._acked(taken)

    def on_reject(self, tag: int, multiple: bool, requeue: bool, failed: bool = True) -> None:
        """basic.reject (``failed``) or basic.nack (not a failure, for RabbitMQ 4.3's delayed retry).

        Raises:
            PreconditionFailed: unknown delivery tag.
        """
        held = self._held
        if held is not None:
            self._check_tag(tag, multiple)
            held.append((tag, multiple, "reject" if failed else "nack", requeue))
            return
        self._reject(self._take_unacked(tag, multiple), requeue, failed)

    def _reject(self, taken: list[Unacked], requeue: bool, failed: bool = True, down: bool = False) -> None:
        queues = self._settle(taken)
        by_queue: dict[Queue, list[Entry]] = {}
        for entry, queue, _consumer in taken:
            by_queue.setdefault(queue, []).append(entry)
        for queue, entries in by_queue.items():
            if requeue:
                queue.requeue(entries, failed, down)
            else:
                queue.reject(entries)
        for queue in queues:
            if queue.consumers:
                queue.dispatch()

    def _check_tag(self, tag: int, multiple: bool) -> None:
        if not (multiple and tag == 0) and tag not in self._unacked:
            raise PreconditionFailed(f"unknown delivery tag {tag}")

    def requeue_all(self, failed: bool = True, down: bool = False) -> None:
        """Requeue every unacked message (channel close: a failed delivery, ``down``; basic.recover:
        not one)."""
        if self._unacked:
            taken = list(self._unacked.values())
            self._unacked.clear()
            self.unacked_count = 0
            self._reject(taken, True, failed, down)

    # -- a transaction's acks (interfaces.HeldAcks, used by the publisher's tx methods) ------
    def hold_acks(self) -> None:
        if self._held is None:
            self._held = []

    def take_held_acks(self) -> list[HeldAck]:
        held = self._held
        if held is None:
            return []
        self._held = []
        return held

    def settle_held_acks(self, held: list[HeldAck]) -> None:
        for tag, multiple, kind, requeue in held:
            taken = self._take_unacked(tag, multiple)
            if kind == "ack":
                self._acked(taken)
            else:
                self._reject(taken, requeue, kind == "reject")

    def drop_held_acks(self) -> None:
        if self._held is not None:
            self._held = []

    @property
    def held_acks(self) -> int:
        return len(self._held) if self._held is not None else 0

    # -- basic class ----------------------------------------------------------------------
    def on_basic_qos(self, m: spec.Basic.Qos) -> None:
        if m.prefetch_size:
            raise AMQPNotImplemented(f"prefetch_size!=0 ({m.prefetch_size})")
        if m.global_:
            self.global_qos = m.prefetch_count > 0
        if m.global_ or self.conn.capabilities.spec_qos:  # spec_qos: see handshake.ClientCapabilities
            self.global_prefetch = m.prefetch_count
        else:
            self.prefetch = m.prefetch_count
        self.conn.send_method(self.number, spec.Basic.QosOk())
        self.kick()

    def consume_replies(self, m: spec.Basic.Consume) -> None:
        """basic.consume on ``amq.rabbitmq.reply-to`` (see ``broker/server/reply_to.py``)."""
        tag = m.consumer_tag or generated_name("amq.ctag-")
        self.reply = self.conn.replies.consume(self, tag, m.no_ack, self.consumers)
        self.reply_id = self.reply.channel_id
        if not m.nowait:
            self.conn.send_method(self.number, spec.Basic.ConsumeOk(tag))

    def on_basic_consume(self, m: spec.Basic.Consume, queue: Queue) -> None:
        """basic.consume on ``queue`` (resolved, read permission checked).

        Raises:
            NotAllowed: the tag is in use on this channel (530).
            PreconditionFailed: ``x-priority`` is not an integer (406).
            AMQPNotImplemented: a quorum queue and a global prefetch count (540, as RabbitMQ 3.10).
            AccessRefused: the queue has an exclusive consumer, or this one asks to be and others exist
                or the queue has single active consumer (``vhost/consumers.py``).
        """
        tag = m.consumer_tag or generated_name("amq.ctag-")
        if tag in self.consumers:
            raise NotAllowed(f"attempt to reuse consumer tag '{tag}'")
        check_consume_arguments(m.arguments, queue.name, self.vhost.name)
        if self.global_qos and not queue.kind.global_qos:
            raise AMQPNotImplemented(
                f"queue '{queue.name}' in vhost '{self.vhost.name}' does not support global qos"
            )
        if not queue.selection.admits(m.exclusive):
            raise AccessRefused(f"queue '{queue.name}' in vhost '{self.vhost.name}' in exclusive use")
        consumer = ChannelConsumer(self, queue, tag, m.no_ack, m.exclusive, self.prefetch)
        consumer.arguments = m.arguments or {}  # shown by the management API's consumer_details
        self.consumers[tag] = consumer
        if not m.nowait:
            self.conn.send_method(self.number, spec.Basic.ConsumeOk(tag))
        queue.add_consumer(consumer, consumer.arguments)

    def on_basic_cancel(self, m: spec.Basic.Cancel) -> None:
        consumer: ChannelConsumer | None
        if self.reply is not None and m.consumer_tag == self.reply.tag:
            self.reply = consumer = None
        else:
            consumer = self.consumers.pop(m.consumer_tag or "", None)
        if not m.nowait:
            self.conn.send_method(self.number, spec.Basic.CancelOk(m.consumer_tag))
        if consumer is not None:
            self.vhost.consumer_removed(consumer.queue, consumer)

    def on_basic_get(self, m: spec.Basic.Get, queue: Queue) -> None:
        """basic.get from ``queue`` (resolved, read permission checked)."""
        queue.touch()
        entry = queue.pop()
        if entry is None:
            self.stats.get_empty += 1
            queue.stats.get_empty += 1
            self.conn.send_method(self.number, spec.Basic.GetEmpty())
            return
        self._next_tag += 1
        tag = self._next_tag
        stats = self.stats
        counts = queue.stats
        if entry.redelivered:
            stats.redelivered += 1
            counts.redeliver += 1
        if m.no_ack:
            stats.delivered_get_auto_ack += 1
            counts.get_no_ack += 1
            queue.forget([entry])
        else:
            stats.delivered_get_manual_ack += 1
            counts.get += 1
            self._unacked[tag] = (entry, queue, None)
            self.unacked_count += 1
            queue.unacked += 1
            queue.delivered(entry)
        message = queue.outgoing(entry, get=True)
        self._send(
            fastpath.encode_get_ok(
                self.number,
                tag,
                entry.redelivered,
                message.exchange,
                message.routing_key,
                queue.message_count,
                message.raw_props,
                message.body,
                self._frame_max,
            )
        )

    def on_basic_recover_async(self, m: spec.Basic.RecoverAsync) -> None:
        if not m.requeue:
            raise AMQPNotImplemented("requeue=false")
        self.requeue_all(failed=False)

    def on_basic_recover(self, m: spec.Basic.Recover) -> None:
        if not m.requeue:
            raise AMQPNotImplemented("requeue=false")
        self.requeue_all(failed=False)
        self.conn.send_method(self.number, spec.Basic.RecoverOk())
