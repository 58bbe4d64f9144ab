"""One AMQP channel: frame dispatch, content assembly, the channel class, closing.

Rules:
- ``Channel`` is the coordinator. It owns the channel's state (open or closing, the method being
  handled), assembles content and dispatches methods to its parts, each a class with its own state:
  ``Consumers`` (``broker.server.consumers``: consumers, deliveries, acks, QoS, basic.get, direct
  reply-to consumers), ``Publisher`` (``broker.server.publisher``: basic.publish, confirms, tx) and
  ``Topology`` (``broker.server.topology``: exchange.* and queue.*). The parts never reach each
  other or the channel but through what it passes in (``broker.server.interfaces``).
- Frames reach ``handle`` in order. A ``basic.publish`` must be followed by its content header and
  exactly ``body_size`` octets of body frames; anything else is a 505 connection error (the close
  names basic.publish once the method was read). The assembled message goes to ``Publisher.publish``.
- Hot frames (publish, ack, nack, reject) are decoded by ``ottermq.amqp.fastpath`` and handed to
  bound methods of the parts taken once at setup; everything else is decoded by pamqp and
  dispatched through the class-wide ``_HANDLERS`` ({pamqp class: function of channel and method}:
  no per-channel table, so a channel costs a few hundred bytes less).
- Domain errors are raised as ``ChannelException``/``ConnectionException``; the connection turns
  them into ``Channel.Close``/``Connection.Close`` using ``method_key`` for class/method ids.
- After ``Channel.Close`` (either side) only Close and Close-Ok are read. Closing (``shutdown``)
  retires the channel's counters, cancels its consumers and requeues every unacked message.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ottermq.amqp import fastpath
from ottermq.amqp.errors import (
    AMQPNotImplemented,
    ChannelError,
    ChannelException,
    CommandInvalid,
    PreconditionFailed,
    UnexpectedFrame,
)
from ottermq.amqp.fastpath import (
    BASIC_ACK,
    BASIC_NACK,
    BASIC_PUBLISH,
    BASIC_REJECT,
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
)
from pamqp import commands as spec
from pamqp.base import Frame

from ..node.info import ChannelInfo, ChannelRef
from ..node.stats import MessageStats
from .consumers import Consumers
from .interfaces import ConnectionPort
from .publisher import Publisher
from .reply_to import REPLY_QUEUE
from .topology import Topology

if TYPE_CHECKING:
    from ottermq.vhost.queue import Queue

_PUBLISH_KEY: Final = BASIC_PUBLISH
KNOWN_METHODS: Final = frozenset(spec.INDEX_MAPPING)
ACCESS_REQUEST: Final = 0x001E000A  # access.request (class 30, method 10)
_CLOSE_KEYS: Final = (spec.Channel.Close.index, spec.Channel.CloseOk.index)  # read after Channel.Close
INTERN_MAX: Final = 4096  # distinct routing keys / property octets remembered per channel


class UnknownMethod(Exception):
    """A method frame with a class/method id outside AMQP 0-9-1.

    RabbitMQ's reader fails on these without a ``Connection.Close``: the TCP connection is dropped.
    """

    def __init__(self, key: int) -> None:
        super().__init__(f"unknown method id: class {key >> 16}, method {key & 0xFFFF}")


def expect_open(frame_type: int, payload: bytes) -> None:
    """Check the first frame on a channel number that is not open: it must be ``channel.open``.

    Raises:
        UnexpectedFrame: not a method frame (505).
        ChannelError: another method (504), AMQP 0-8's access.request included.
        UnknownMethod: a class/method id outside AMQP 0-9-1.
    """
    if frame_type == FRAME_HEARTBEAT:
        raise UnexpectedFrame("type 8, all octets = <<>>")
    if frame_type != FRAME_METHOD:
        raise UnexpectedFrame("expected method frame, got non method frame instead")
    key = fastpath.method_key(payload)
    if key == ACCESS_REQUEST:  # known to RabbitMQ (AMQP 0-8), not to pamqp
        raise ChannelError("expected 'channel.open'")
    if key not in KNOWN_METHODS:
        raise UnknownMethod(key)
    if not isinstance(fastpath.decode_method(payload), spec.Channel.Open):
        raise ChannelError("expected 'channel.open'")


def _restart(stats: MessageStats) -> None:
    """Count from zero again (the old counts were retired into the node's totals)."""
    for name in MessageStats.__slots__:
        setattr(stats, name, 0)


class Channel:
    """One open channel on a connection (see the module rules).

    Args:
        conn: the connection it is open on.
        number: its channel number.
    """

    # Slots, not a __dict__: attribute access on the hot path stays specialised.
    __slots__ = (
        "_body",
        "_body_size",
        "_large",
        "_interned",
        "_interned_props",
        "_on_ack",
        "_on_reject",
        "_props",
        "_publish",
        "_publish_message",
        "_received",
        "closing",
        "conn",
        "consumers",
        "method_key",
        "number",
        "publisher",
        "stats",
        "topology",
        "vhost",
    )

    def __init__(self, conn: ConnectionPort, number: int) -> None:
        self.conn = conn
        self.number = number
        self.vhost = conn.vhost
        self.stats = MessageStats()  # plain counters, retired at shutdown (broker/node/stats.py)
        self.closing = False
        self.method_key = 0
        self._interned: dict[str, str] = {}
        self._interned_props: dict[bytes, bytes] = {}
        # content assembly
        self._publish: tuple[str, str, bool, bool] | None = None
        self._props = b""
        self._body_size = 0
        self._body: list[bytes] = []
        self._large: io.BytesIO | None = None  # a body over LARGE_BODY octets, written as it comes
        self._received = 0
        # the parts
        self.consumers = consumers = Consumers(conn, number, self.stats)
        self.topology = Topology(conn, number, consumers)
        self.publisher = publisher = Publisher(
            conn, number, self.stats, consumers, consumers, self._is_open, self._close_with
        )
        self._publish_message = publisher.publish
        self._on_ack = consumers.on_ack
        self._on_reject = consumers.on_reject

    # -- frame entry point ----------------------------------------------------------------
    def handle(self, frame_type: int, payload: bytes) -> None:
        """Process one frame addressed to this channel.

        Raises:
            ChannelException, ConnectionException: what the connection turns into a close.
            UnknownMethod: a class/method id outside AMQP 0-9-1 (the connection drops the socket).
        """
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
                _HANDLERS[type(method)](self, method)
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
            self._on_ack(tag, multiple)
            return
        if key == BASIC_REJECT:
            tag, requeue = fastpath.decode_reject(payload)
            self._on_reject(tag, False, requeue)
            return
        if key == BASIC_NACK:
            tag, multiple, requeue = fastpath.decode_nack(payload)
            self._on_reject(tag, multiple, requeue, False)
            return
        if key not in KNOWN_METHODS:
            if key == ACCESS_REQUEST:
                # AMQP 0-8's access.request (pamqp knows no class 30): RabbitMQ still grants ticket 1
                self.conn.send(struct.pack(">BHIHHH", 1, self.number, 6, 30, 11, 1) + b"\xce")
                return
            raise UnknownMethod(key)
        method = fastpath.decode_method(payload)
        handler = _HANDLERS.get(type(method))
        if handler is None:
            raise CommandInvalid("unimplemented method")
        handler(self, method)

    def _on_content(self, frame_type: int, payload: bytes) -> None:
        """A content header or body frame of the ``basic.publish`` being assembled."""
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
            # a large body goes into a BytesIO, which grows its own bytes object (realloc: no copy)
            # and whose getvalue() returns it, so no turn copies the whole body into fresh memory
            # (a join of 100 MB takes 0.25 s on a 2-core VM)
            self._large = io.BytesIO() if body_size > fastpath.LARGE_BODY else None
            if body_size != 0:
                return
            body = b""
        else:
            if frame_type != FRAME_BODY:
                self._publish = None
                raise UnexpectedFrame("expected content body, got non content body frame instead")
            self._received += len(payload)
            large = self._large
            if large is not None:
                large.write(payload)
                if self._received < self._body_size:
                    return
                self._large = None
                if self._received > self._body_size:
                    self._publish = None
                    raise UnexpectedFrame("content body exceeds the size in its content header")
                body = large.getvalue()
            elif self._received == self._body_size and not self._body:
                body = payload
            else:
                self._body.append(payload)
                if self._received < self._body_size:
                    return
                body = b"".join(self._body)
                self._body = []
                if self._received > self._body_size:
                    self._publish = None
                    raise UnexpectedFrame("content body exceeds the size in its content header")
        # the message is complete
        publish = self._publish
        assert publish is not None
        self._publish = None
        self.method_key = BASIC_PUBLISH
        if self.closing:
            return
        self._publish_message(publish, self._props, body)

    # -- what the parts are given ---------------------------------------------------------
    def _is_open(self) -> bool:
        """Not closing, and still the connection's channel of this number."""
        return not self.closing and self.conn.channels.get(self.number) is self

    def _close_with(self, key: int, exc: ChannelException) -> None:
        """Close the channel outside frame handling, the close naming method ``key``."""
        self.method_key = key
        self.conn.close_channel(self, exc)

    # -- channel class --------------------------------------------------------------------
    def on_channel_open(self, method: spec.Channel.Open) -> None:
        raise ChannelError("second 'channel.open' seen")

    def on_channel_close(self, method: spec.Channel.Close) -> None:
        if self.closing:
            # our Channel.Close crossed the client's (RabbitMQ's rabbit_reader): answer theirs and
            # keep the channel closing until their Close-Ok for ours (frames meanwhile are dropped)
            self.conn.send_method(self.number, spec.Channel.CloseOk())
            return
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

    def shutdown(self) -> None:
        """Release everything the channel holds: consumers go, unacked messages are requeued."""
        if not self.closing:
            self.conn.node.connections.churn.channels_closed += 1
        self.closing = True
        self._publish = None
        self._body = []
        self._large = None
        self.conn.node.connections.retire(self.vhost.name, self.stats)
        _restart(self.stats)
        self.consumers.shutdown()

    def kick_consumers(self) -> None:
        """The connection's output drained: consumers may take deliveries again."""
        self.consumers.kick()

    # -- basic.consume and basic.get: the queue from ``Topology``, the rest in ``Consumers`` -
    def on_basic_consume(self, m: spec.Basic.Consume) -> None:
        if (m.queue or self.topology.last_queue) == REPLY_QUEUE:
            self.consumers.consume_replies(m)
            return
        self.consumers.on_basic_consume(m, self.topology.queue(m.queue, "consume"))

    def on_basic_get(self, m: spec.Basic.Get) -> None:
        self.consumers.on_basic_get(m, self.topology.queue(m.queue, "get"))

    # -- the read API (ottermq.broker.node.info) and the consumer timeout: never per message -
    def ref(self) -> ChannelRef:
        return self.conn.channel_ref(self.number)

    def info(self, ref: ChannelRef | None = None) -> ChannelInfo:
        """A snapshot of this channel (``ottermq.broker.node.info``); ``ref`` as ``ref()`` returns."""
        ref = ref if ref is not None else self.ref()
        consumers, publisher = self.consumers, self.publisher
        return ChannelInfo(
            key=id(self),
            ref=ref,
            vhost=self.vhost.name,
            consumers=consumers.infos(ref),
            unacked=consumers.unacked_count,
            unconfirmed=publisher.unconfirmed,
            uncommitted=(publisher.uncommitted, consumers.held_acks),
            prefetch=consumers.prefetch,
            global_prefetch=consumers.global_prefetch,
            confirm=publisher.confirm,
            transactional=publisher.tx,
            stats=MessageStats.total([self.stats]),
        )

    def count_unacked_bytes(self, into: dict[Queue, int]) -> None:
        """Add the body sizes of this channel's unacked messages to ``into``, per queue (for the
        management API's ``message_bytes_unacknowledged``; never on the hot path)."""
        self.consumers.count_unacked_bytes(into)

    def overdue_ack(self, now: float, default_ms: int | None) -> int | None:
        """The consumer timeout (ms) the oldest unacked delivery has outlived (``Consumers``)."""
        return self.consumers.overdue_ack(now, default_ms)


# The long-tail methods: pamqp class -> what handles it on a channel (one table for every channel).
_HANDLERS: dict[type[Frame], Callable[[Channel, Any], None]] = {
    spec.Channel.Close: Channel.on_channel_close,
    spec.Channel.CloseOk: Channel.on_channel_close_ok,
    spec.Channel.Flow: Channel.on_channel_flow,
    spec.Channel.FlowOk: lambda _ch, _m: None,
    spec.Channel.Open: Channel.on_channel_open,
    spec.Exchange.Declare: lambda ch, m: ch.topology.on_exchange_declare(m),
    spec.Exchange.Delete: lambda ch, m: ch.topology.on_exchange_delete(m),
    spec.Exchange.Bind: lambda ch, m: ch.topology.on_exchange_bind(m),
    spec.Exchange.Unbind: lambda ch, m: ch.topology.on_exchange_unbind(m),
    spec.Queue.Declare: lambda ch, m: ch.topology.on_queue_declare(m),
    spec.Queue.Bind: lambda ch, m: ch.topology.on_queue_bind(m),
    spec.Queue.Unbind: lambda ch, m: ch.topology.on_queue_unbind(m),
    spec.Queue.Purge: lambda ch, m: ch.topology.on_queue_purge(m),
    spec.Queue.Delete: lambda ch, m: ch.topology.on_queue_delete(m),
    spec.Basic.Qos: lambda ch, m: ch.consumers.on_basic_qos(m),
    spec.Basic.Consume: Channel.on_basic_consume,
    spec.Basic.Cancel: lambda ch, m: ch.consumers.on_basic_cancel(m),
    spec.Basic.Get: Channel.on_basic_get,
    spec.Basic.Recover: lambda ch, m: ch.consumers.on_basic_recover(m),
    spec.Basic.RecoverAsync: lambda ch, m: ch.consumers.on_basic_recover_async(m),
    spec.Confirm.Select: lambda ch, m: ch.publisher.on_confirm_select(m),
    spec.Tx.Select: lambda ch, m: ch.publisher.on_tx_select(m),
    spec.Tx.Commit: lambda ch, m: ch.publisher.on_tx_commit(m),
    spec.Tx.Rollback: lambda ch, m: ch.publisher.on_tx_rollback(m),
}
