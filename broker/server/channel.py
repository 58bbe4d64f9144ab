"""One AMQP channel: method dispatch, content assembly, consumers, acks, QoS, confirms, tx.

Rules:
- Frames reach ``handle`` in order. A ``basic.publish`` must be followed by its content header and
  exactly ``body_size`` bytes of body frames; anything else is a 505 connection error.
- Hot frames (publish, ack) are decoded by ``ottermq.amqp.fastpath``; everything else by pamqp and
  dispatched through ``_handlers`` ({pamqp class: handler}).
- Domain errors are raised as ``ChannelException``/``ConnectionException``; the connection turns
  them into ``Channel.Close``/``Connection.Close`` using ``method_key`` for class/method ids.
- Delivery tags count up from 1 per channel; ``_unacked`` keeps them in ascending order.
- Closing the channel (either side) requeues every unacked message and cancels its consumers.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ottermq.amqp import fastpath
from ottermq.amqp.errors import (
    AccessRefused,
    AMQPNotImplemented,
    ChannelError,
    CommandInvalid,
    NotAllowed,
    PreconditionFailed,
    UnexpectedFrame,
)
from ottermq.amqp.fastpath import (
    BASIC_ACK,
    BASIC_NACK,
    BASIC_PUBLISH,
    BASIC_REJECT,
    FRAME_METHOD,
)
from ottermq.vhost.message import Entry, Message
from ottermq.vhost.queue import Queue
from ottermq.vhost.vhost import generated_name
from pamqp import commands as spec
from pamqp.base import Frame

from ..node.info import ChannelInfo, ChannelRef, ConsumerInfo
from ..node.operations import withdraw
from ..node.stats import MessageStats
from .confirms import Confirms
from .publishing import INTERN_MAX, PublisherMethods
from .reply_to import REPLY_QUEUE, ReplyConsumer
from .topology import TopologyMethods

if TYPE_CHECKING:
    from .connection import AMQPConnection

log = logging.getLogger(__name__)

_PUBLISH_KEY = BASIC_PUBLISH
KNOWN_METHODS = frozenset(spec.INDEX_MAPPING)
ACCESS_REQUEST = 0x001E000A  # access.request (class 30, method 10)
TX_COMMIT = spec.Tx.Commit.index
_CLOSE_KEYS = (spec.Channel.Close.index, spec.Channel.CloseOk.index)  # read after Channel.Close


class UnknownMethod(Exception):
    """A method frame with a class/method id outside AMQP 0-9-1.

    RabbitMQ's reader fails on these without a ``Connection.Close``: the TCP connection is dropped.
    """

    def __init__(self, key: int) -> None:
        super().__init__(f"unknown method id: class {key >> 16}, method {key & 0xFFFF}")


class ChannelConsumer:
    """A ``basic.consume`` subscription on a channel (implements ``vhost.queue.Consumer``)."""

    __slots__ = ("channel", "queue", "tag", "no_ack", "exclusive", "prefetch", "unacked", "arguments")

    def __init__(
        self, channel: Channel, queue: Queue, tag: str, no_ack: bool, exclusive: bool, prefetch: int
    ) -> None:
        self.channel = channel
        self.queue = queue
        self.tag = tag
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.unacked = 0
        self.arguments: dict[str, Any] = {}  # basic.consume's arguments (x-priority, ...)

    def info(self, ref: ChannelRef | None = None) -> ConsumerInfo:
        """A snapshot (``ottermq.broker.node.info``); ``ref`` is the channel's, computed if not given."""
        return ConsumerInfo(
            tag=self.tag,
            queue=self.queue.name,
            vhost=self.channel.vhost.name,
            channel=ref if ref is not None else self.channel.ref(),
            ack_required=not self.no_ack,
            exclusive=self.exclusive,
            prefetch=self.prefetch,
            arguments=self.arguments,
        )

    def can_deliver(self) -> bool:
        channel = self.channel
        if channel.conn.paused or channel.closing:
            return False
        if self.no_ack:
            return True
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        limit = channel.global_prefetch
        return not (limit and channel.unacked_count >= limit)

    def deliver(self, queue: Queue, entry: Entry) -> None:
        self.channel.deliver(self, queue, entry)

    def on_queue_deleted(self, queue: Queue) -> None:
        self.channel.server_cancel(self)


class Channel(PublisherMethods, TopologyMethods):
    """State of one open channel on a connection (publishing in ``broker.publishing``, exchange.*
    and queue.* methods in ``broker.topology``)."""

    # Slots, not a __dict__: attribute access on the hot path stays specialised (a class whose
    # instances grow past 30 attributes loses CPython 3.11's shared-key inline values).
    __slots__ = (
        "_body",
        "_body_size",
        "_confirms",
        "_delivery_clock",
        "_handlers",
        "_interned",
        "_interned_props",
        "_next_tag",
        "_props",
        "_publish",
        "_publish_seq",
        "_received",
        "_tx_acks",
        "_tx_publishes",
        "_unacked",
        "_write_ok",
        "closing",
        "confirm",
        "conn",
        "consumers",
        "global_prefetch",
        "last_queue",
        "method_key",
        "number",
        "prefetch",
        "reply",
        "reply_id",
        "stats",
        "tx",
        "unacked_count",
        "vhost",
    )

    def __init__(self, conn: AMQPConnection, number: int) -> None:
        self.conn = conn
        self.number = number
        self.vhost = conn.vhost
        self.stats = MessageStats()  # plain counters, retired at shutdown (broker/stats.py)
        self.closing = False
        self.method_key = 0
        self.last_queue = ""  # most recently declared queue, for empty queue names
        self._write_ok: str | None = None  # exchange last allowed for basic.publish
        self._interned: dict[str, str] = {}
        self._interned_props: dict[bytes, bytes] = {}
        # content assembly
        self._publish: tuple[str, str, bool, bool] | None = None
        self._props = b""
        self._body_size = 0
        self._body: list[bytes] = []
        self._received = 0
        # consuming
        self.consumers: dict[str, ChannelConsumer] = {}
        self.reply: ReplyConsumer | None = None  # direct reply-to consumer (broker/reply_to.py)
        self.reply_id: str | None = None  # this channel's id in reply addresses, once it has one
        self._unacked: dict[int, tuple[Entry, Queue, ChannelConsumer | None]] = {}
        self._delivery_clock: deque[tuple[int, float]] = deque()  # (delivery tag, time): overdue_ack
        self._next_tag = 0
        self.unacked_count = 0
        self.prefetch = 0  # applies to consumers created afterwards
        self.global_prefetch = 0
        # publisher side
        self.confirm = False
        self._publish_seq = 0
        self._confirms = Confirms()
        self.tx = False
        self._tx_publishes: list[tuple[Message, bool, str]] = []
        self._tx_acks: list[tuple[int, bool, str, bool]] = []  # (tag, multiple, kind, requeue)
        self._handlers: dict[type[Frame], Callable[[Any], None]] = {
            spec.Channel.Close: self.on_channel_close,
            spec.Channel.CloseOk: self.on_channel_close_ok,
            spec.Channel.Flow: self.on_channel_flow,
            spec.Channel.FlowOk: lambda _f: None,
            spec.Channel.Open: self.on_channel_open,
            spec.Exchange.Declare: self.on_exchange_declare,
            spec.Exchange.Delete: self.on_exchange_delete,
            spec.Exchange.Bind: self.on_exchange_bind,
            spec.Exchange.Unbind: self.on_exchange_unbind,
            spec.Queue.Declare: self.on_queue_declare,
            spec.Queue.Bind: self.on_queue_bind,
            spec.Queue.Unbind: self.on_queue_unbind,
            spec.Queue.Purge: self.on_queue_purge,
            spec.Queue.Delete: self.on_queue_delete,
            spec.Basic.Qos: self.on_basic_qos,
            spec.Basic.Consume: self.on_basic_consume,
            spec.Basic.Cancel: self.on_basic_cancel,
            spec.Basic.Get: self.on_basic_get,
            spec.Basic.Recover: self.on_basic_recover,
            spec.Basic.RecoverAsync: self.on_basic_recover_async,
            spec.Confirm.Select: self.on_confirm_select,
            spec.Tx.Select: self.on_tx_select,
            spec.Tx.Commit: self.on_tx_commit,
            spec.Tx.Rollback: self.on_tx_rollback,
        }

    # -- frame entry point ----------------------------------------------------------------
    def handle(self, frame_type: int, payload: bytes) -> None:
        """Process one frame addressed to this channel."""
        if self._publish is not None:
            self._on_content(frame_type, payload)
            return
        if frame_type != FRAME_METHOD:
            if self.closing:
                return
            self.method_key = 0  # RabbitMQ's command assembler reports no method here (class 0/0)
            raise UnexpectedFrame("expected method frame, got non method frame instead")
        key = fastpath.method_key(payload)
        self.method_key = key
        if self.closing:
            # after Channel.Close only Close / Close-Ok matter
            if key in _CLOSE_KEYS:
                method = fastpath.decode_method(payload)
                self._handlers[type(method)](method)
            return
        if key == _PUBLISH_KEY:
            exchange, routing_key, mandatory, immediate = fastpath.decode_publish(payload)
            # Queued messages share equal routing keys and property octets: one object each
            # instead of one per message (~90 bytes per queued message).
            interned = self._interned
            rk = interned.get(routing_key)
            if rk is None:
                if len(interned) >= INTERN_MAX:
                    interned.clear()
                rk = interned[routing_key] = routing_key
            self._publish = (exchange, rk, mandatory, immediate)
            self._body_size = -1
            return
        if key == BASIC_ACK:
            tag, multiple = fastpath.decode_ack(payload)
            self.on_ack(tag, multiple)
            return
        if key == BASIC_REJECT:
            tag, requeue = fastpath.decode_reject(payload)
            self.on_reject(tag, False, requeue)
            return
        if key == BASIC_NACK:
            tag, multiple, requeue = fastpath.decode_nack(payload)
            self.on_reject(tag, multiple, requeue, failed=False)
            return
        if key not in KNOWN_METHODS:
            if key == ACCESS_REQUEST:
                # AMQP 0-8's access.request (pamqp knows no class 30): RabbitMQ still grants ticket 1
                self.conn.send(struct.pack(">BHIHHH", 1, self.number, 6, 30, 11, 1) + b"\xce")
                return
            raise UnknownMethod(key)
        method = fastpath.decode_method(payload)
        handler = self._handlers.get(type(method))
        if handler is None:
            raise CommandInvalid("unimplemented method")
        handler(method)

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
        message = entry.message
        self.conn.send(
            fastpath.encode_deliver(
                self.number,
                consumer.tag,
                tag,
                entry.redelivered,
                message.exchange,
                message.routing_key,
                message.raw_props,
                message.body,
                self.conn.frame_max,
            )
        )

    def deliver_reply(self, consumer: ReplyConsumer, message: Message) -> None:
        """A direct reply: no ack, no bookkeeping; RabbitMQ sends the next delivery tag unused."""
        if self.reply is consumer and not self.closing:
            self.conn.send(
                fastpath.encode_deliver(
                    self.number,
                    consumer.tag,
                    self._next_tag + 1,
                    False,
                    message.exchange,
                    message.routing_key,
                    message.raw_props,
                    message.body,
                    self.conn.frame_max,
                )
            )

    def overdue_ack(self, now: float, default_ms: int | None) -> int | None:
        """The consumer timeout (ms) the oldest unacked delivery has outlived, else None.

        Called by ``broker/ack_timeout.py`` at every check, never per message: a call records
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

    @property
    def unconfirmed(self) -> int:
        """Publishes on this confirm-mode channel not yet confirmed to the client."""
        return self._confirms.pending

    @property
    def uncommitted(self) -> tuple[int, int]:
        """``(publishes, acks)`` held by an open transaction."""
        return len(self._tx_publishes), len(self._tx_acks)

    def ref(self) -> ChannelRef:
        conn = self.conn
        peer_host, peer_port = conn._address("peername")
        return ChannelRef(self.number, conn.name, peer_host, peer_port, conn.username)

    def info(self, ref: ChannelRef | None = None) -> ChannelInfo:
        """A snapshot of this channel (``ottermq.broker.node.info``); ``ref`` as ``ref()`` returns."""
        ref = ref if ref is not None else self.ref()
        return ChannelInfo(
            key=id(self),
            ref=ref,
            vhost=self.vhost.name,
            consumers=tuple(self.consumers[tag].info(ref) for tag in sorted(self.consumers)),
            unacked=self.unacked_count,
            unconfirmed=self.unconfirmed,
            uncommitted=self.uncommitted,
            prefetch=self.prefetch,
            global_prefetch=self.global_prefetch,
            confirm=self.confirm,
            transactional=self.tx,
            stats=MessageStats.total([self.stats]),
        )

    def count_unacked_bytes(self, into: dict[Queue, int]) -> None:
        """Add the body sizes of this channel's unacked messages to ``into``, per queue (for the
        management API's ``message_bytes_unacknowledged``; never on the hot path)."""
        for entry, queue, _consumer in self._unacked.values():
            into[queue] = into.get(queue, 0) + len(entry.message.body)

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
            if self.conn.consumer_cancel_notify and not self.closing:
                self.conn.send_method(self.number, spec.Basic.Cancel(consumer.tag, nowait=True))

    # -- acks -----------------------------------------------------------------------------
    def _take_unacked(self, tag: int, multiple: bool) -> list[tuple[Entry, Queue, ChannelConsumer | None]]:
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

    def _settle(self, taken: list[tuple[Entry, Queue, ChannelConsumer | None]]) -> set[Queue]:
        """Release unacked bookkeeping (does not decide the entries' fate)."""
        queues: set[Queue] = set()
        for _entry, queue, consumer in taken:
            if consumer is not None:
                consumer.unacked -= 1
            queue.unacked -= 1
            queues.add(queue)
        return queues

    def _acked(self, taken: list[tuple[Entry, Queue, ChannelConsumer | None]]) -> None:
        self.stats.acknowledged += len(taken)
        for entry, queue, _consumer in taken:
            queue.stats.ack += 1
            if entry.store_id:
                queue.forget([entry])
        for queue in self._settle(taken):
            if queue.consumers:
                queue.dispatch()

    def on_ack(self, tag: int, multiple: bool) -> None:
        if self.tx:
            self._check_tag(tag, multiple)
            self._tx_acks.append((tag, multiple, "ack", False))
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
        """basic.reject (``failed``) or basic.nack (not a failure, for RabbitMQ 4.3's delayed retry)."""
        if self.tx:
            self._check_tag(tag, multiple)
            self._tx_acks.append((tag, multiple, "reject" if failed else "nack", requeue))
            return
        self._reject(self._take_unacked(tag, multiple), requeue, failed)

    def _reject(
        self, taken: list[tuple[Entry, Queue, ChannelConsumer | None]], requeue: bool, failed: bool = True
    ) -> None:
        queues = self._settle(taken)
        by_queue: dict[Queue, list[Entry]] = {}
        for entry, queue, _consumer in taken:
            by_queue.setdefault(queue, []).append(entry)
        for queue, entries in by_queue.items():
            if requeue:
                queue.requeue(entries, failed)
            else:
                queue.reject(entries)
        for queue in queues:
            if queue.consumers:
                queue.dispatch()

    def _check_tag(self, tag: int, multiple: bool) -> None:
        if not (multiple and tag == 0) and tag not in self._unacked:
            raise PreconditionFailed(f"unknown delivery tag {tag}")

    def requeue_all(self, failed: bool = True) -> None:
        """Requeue every unacked message (channel close: a failed delivery; basic.recover: not one)."""
        if self._unacked:
            taken = list(self._unacked.values())
            self._unacked.clear()
            self.unacked_count = 0
            self._reject(taken, True, failed)

    # -- channel class --------------------------------------------------------------------
    def on_channel_open(self, method: spec.Channel.Open) -> None:
        raise ChannelError("second 'channel.open' seen")

    def on_channel_close(self, method: spec.Channel.Close) -> None:
        self.shutdown()
        self.conn.send_method(self.number, spec.Channel.CloseOk())
        self.conn.channel_closed(self.number)

    def on_channel_close_ok(self, method: spec.Channel.CloseOk) -> None:
        if self.closing:
            self.conn.channel_closed(self.number)

    def on_channel_flow(self, method: spec.Channel.Flow) -> None:
        """RabbitMQ 3.x accepts only ``active=true``; pausing deliveries is refused with 540 (a
        connection error), which amqp091-go's own suite relies on. Consumers use ``basic.qos``."""
        if not method.active:
            raise AMQPNotImplemented("active=false")
        self.conn.send_method(self.number, spec.Channel.FlowOk(active=True))

    def _kick_consumers(self) -> None:
        for queue in {c.queue for c in self.consumers.values()}:
            queue.dispatch()

    def shutdown(self) -> None:
        """Release everything the channel holds: consumers go, unacked messages are requeued."""
        if not self.closing:
            self.conn.node.churn.channels_closed += 1
        self.closing = True
        self._publish = None
        self._body = []
        self.conn.node.retire_stats(self.vhost.name, self.stats)
        self.stats = MessageStats()
        self.conn.server.replies.channel_closed(self)
        self.reply = None
        consumers = list(self.consumers.values())
        self.consumers.clear()
        for consumer in consumers:
            self.vhost.consumer_removed(consumer.queue, consumer)
        self.requeue_all()

    # -- basic class ----------------------------------------------------------------------
    def on_basic_qos(self, m: spec.Basic.Qos) -> None:
        if m.prefetch_size:
            raise AMQPNotImplemented(f"prefetch_size!=0 ({m.prefetch_size})")
        if m.global_ or self.conn.spec_qos:  # spec_qos: see AMQPConnection._on_start_ok
            self.global_prefetch = m.prefetch_count
        else:
            self.prefetch = m.prefetch_count
        self.conn.send_method(self.number, spec.Basic.QosOk())
        self._kick_consumers()

    def on_basic_consume(self, m: spec.Basic.Consume) -> None:
        if (m.queue or self.last_queue) == REPLY_QUEUE:
            tag = m.consumer_tag or generated_name("amq.ctag-")
            self.reply = self.conn.server.replies.consume(self, tag, m.no_ack, self.consumers)
            self.reply_id = self.reply.channel_id
            if not m.nowait:
                self.conn.send_method(self.number, spec.Basic.ConsumeOk(tag))
            return
        queue = self._queue(m.queue, "read")
        tag = m.consumer_tag or generated_name("amq.ctag-")
        if tag in self.consumers:
            raise NotAllowed(f"attempt to reuse consumer tag '{tag}'")
        if queue.consumers and (m.exclusive or queue.has_exclusive_consumer()):
            raise AccessRefused(f"queue '{queue.name}' in vhost '{self.vhost.name}' in exclusive use")
        consumer = ChannelConsumer(self, queue, tag, m.no_ack, m.exclusive, self.prefetch)
        consumer.arguments = m.arguments or {}  # shown by the management API's consumer_details
        self.consumers[tag] = consumer
        if not m.nowait:
            self.conn.send_method(self.number, spec.Basic.ConsumeOk(tag))
        queue.add_consumer(consumer)

    def on_basic_cancel(self, m: spec.Basic.Cancel) -> None:
        if self.reply is not None and m.consumer_tag == self.reply.tag:
            self.reply = consumer = None
        else:
            consumer = self.consumers.pop(m.consumer_tag or "", None)
        if not m.nowait:
            self.conn.send_method(self.number, spec.Basic.CancelOk(m.consumer_tag))
        if consumer is not None:
            self.vhost.consumer_removed(consumer.queue, consumer)

    def on_basic_get(self, m: spec.Basic.Get) -> None:
        queue = self._queue(m.queue, "read")
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
        message = entry.message
        self.conn.send(
            fastpath.encode_get_ok(
                self.number,
                tag,
                entry.redelivered,
                message.exchange,
                message.routing_key,
                queue.message_count,
                message.raw_props,
                message.body,
                self.conn.frame_max,
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

    # -- confirm and tx -------------------------------------------------------------------
    def on_confirm_select(self, m: spec.Confirm.Select) -> None:
        if self.tx:
            raise PreconditionFailed("cannot switch from tx to confirm mode")
        self.confirm = True
        if not m.nowait:
            self.conn.send_method(self.number, spec.Confirm.SelectOk())

    def on_tx_select(self, m: spec.Tx.Select) -> None:
        if self.confirm:
            raise PreconditionFailed("cannot switch from confirm to tx mode")
        self.tx = True
        self.conn.send_method(self.number, spec.Tx.SelectOk())

    def on_tx_commit(self, m: spec.Tx.Commit) -> None:
        if not self.tx:
            raise PreconditionFailed("channel is not transactional")
        publishes, self._tx_publishes = self._tx_publishes, []
        acks, self._tx_acks = self._tx_acks, []
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
        for tag, multiple, kind, requeue in acks:
            taken = self._take_unacked(tag, multiple)
            if kind == "ack":
                self._acked(taken)
            else:
                self._reject(taken, requeue, kind == "reject")
        if refused:  # RabbitMQ: a queue refused part of the transaction (what fit stays)
            raise PreconditionFailed("partial tx completion")
        store = self.conn.node.store
        if store.pending:  # a commit is durable once its writes are (RabbitMQ: after fsync)
            store.after_commit(lambda ok: self._on_tx_stored(ok, stored))
        else:
            self.conn.send_method(self.number, spec.Tx.CommitOk())

    def _on_tx_stored(self, ok: bool, stored: list[tuple[Queue, Entry]]) -> None:
        if ok:
            self._send_if_open(spec.Tx.CommitOk())
            return
        withdraw(stored)  # memory agrees with the store: the transaction's messages are not in
        if not self.closing and self.conn.channels.get(self.number) is self:
            self.method_key = TX_COMMIT
            self.conn.close_channel(self, PreconditionFailed("partial tx completion"))

    def _send_if_open(self, method: Frame) -> None:
        if not self.closing and self.conn.channels.get(self.number) is self:
            self.conn.send_method(self.number, method)

    def on_tx_rollback(self, m: spec.Tx.Rollback) -> None:
        if not self.tx:
            raise PreconditionFailed("channel is not transactional")
        self._tx_publishes = []
        self._tx_acks = []
        self.conn.send_method(self.number, spec.Tx.RollbackOk())
