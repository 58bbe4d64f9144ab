"""One client connection: the asyncio adapter around the state machine in ``broker.states``.

Rules:
- Bytes in: the protocol header, then frames cut by ``FrameReader``. Before RUNNING frames are cut
  one at a time, because Tune-Ok changes the frame size limit for the frames after it.
- Each frame goes through ``states.route`` (the table of what a frame means in each state); this
  module only carries out the step: a handler for the expected connection method, the channel's
  own rules for channel frames, or ``_fail`` -- the one place an error becomes a silent close
  (STARTING, TUNING) or a Connection.Close (OPENING, RUNNING). State changes go through ``to``,
  which checks ``states.TRANSITIONS``.
- A ``ChannelException`` closes its channel (the channel then ignores all but Close/Close-Ok);
  a ``ConnectionException`` sends ``Connection.Close`` and moves to CLOSING, where only Close-Ok
  (or Close) is read, and the socket is closed on Close-Ok or after ``CLOSE_TIMEOUT``.
- Anything else raised while handling a frame is logged and closes the connection with 541.
- Bytes out go through ``Output`` (one write per event-loop turn, confirms coalesced into it);
  when the transport's buffer is full, ``FlowControl`` stops deliveries and reading.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, cast

from ottermq.amqp import fastpath, legacy
from ottermq.amqp.errors import (
    AMQPError,
    ChannelCrashed,
    ChannelException,
    ConnectionException,
    ConnectionForced,
    FrameError,
    InternalError,
    NotAllowed,
    UnexpectedFrame,
)
from ottermq.amqp.fastpath import FRAME_HEARTBEAT, FRAME_METHOD, HEARTBEAT
from ottermq.amqp.reader import FrameReader, payload_snippet
from pamqp import commands as spec
from pamqp.base import Frame

from ..node.info import ChannelRef, ConnectionInfo
from ..node.stats import MessageStats
from .channel import Channel, UnknownMethod, expect_open
from .endpoints import Endpoints
from .flow import FlowControl
from .handshake import FRAME_MIN_SIZE, ClientCapabilities
from .heartbeat import Heartbeat
from .opening import Opening
from .output import Output
from .states import Routed, State, Step, check_transition, route

if TYPE_CHECKING:
    from ottermq.persistence.store import UserRecord
    from ottermq.vhost.queue import Queue
    from ottermq.vhost.vhost import VHost

    from .interfaces import ChannelPort, ServerPort

log: Final = logging.getLogger(__name__)

# Final: compiled by mypyc, a Final module constant is a C global (else a module dict lookup per use)
CLOSE_TIMEOUT: Final = 3.0
WRITE_HIGH_WATER: Final = 1024 * 1024

AWAIT_HEADER: Final = State.AWAIT_HEADER
STARTING: Final = State.STARTING
TUNING: Final = State.TUNING
OPENING: Final = State.OPENING
RUNNING: Final = State.RUNNING
CLOSING: Final = State.CLOSING
CLOSED: Final = State.CLOSED
SILENT_CLOSE_DELAY: Final = 3.0  # RabbitMQ's ?SILENT_CLOSE_DELAY before dropping a bad handshake
# A read's frames are handled for at most FRAME_BUDGET seconds in one event-loop turn (the clock is
# read every FRAME_CHECK frames); the rest wait for the next turn, reading paused meanwhile: 13,000
# tiny frames fit in one 256 KiB read (100,000 basic.qos or consumes in a row held the loop ~0.5 s)
FRAME_BUDGET: Final = 0.02
FRAME_CHECK: Final = 128


class _NoMethod(NotAllowed):
    """Raised where RabbitMQ reports class/method ids 0/0 (its error carries method 'none')."""


class _NoMethodFrameError(FrameError):
    """A frame RabbitMQ's reader cannot parse (class/method ids 0/0)."""


class AMQPConnection(asyncio.Protocol):
    """asyncio protocol for one AMQP 0-9-1 client."""

    def __init__(
        self,
        server: ServerPort[AMQPConnection],
        replay: tuple[bytes, bytes] | None = None,
        endpoints: Endpoints | None = None,
    ) -> None:
        self.server = server
        self.node = server.node
        self.settings = server.settings
        self.loop = server.loop
        self.replies = server.replies  # direct reply-to, node-wide (broker/server/reply_to.py)
        self.transport: asyncio.Transport | None = None
        self.state = AWAIT_HEADER
        self._steps = self._step_table()
        self.endpoints = Endpoints()  # the socket's two ends (broker/server/endpoints.py)
        self.peer = "?"
        self._backlog: list[tuple[int, int, bytes]] = []  # frames left for the next turn (FRAME_BUDGET)
        self._framing_0_8 = False  # an AMQP 0-8 client (amqp/legacy.py)
        self.reader = FrameReader(FRAME_MIN_SIZE)
        self.channels: dict[int, Channel] = {}
        self.frame_max = FRAME_MIN_SIZE
        self.channel_max = self.settings.channel_max
        self.heartbeat = 0
        self.username = ""
        self.user: UserRecord = None  # type: ignore[assignment]  # set at connection.start-ok
        self.vhost: VHost = None  # type: ignore[assignment]  # set at connection.open
        self.client_properties: dict[str, Any] = {}
        # socket traffic for the management API (RabbitMQ's recv_oct/recv_cnt; send_* in ``output``)
        self.recv_oct = self.recv_cnt = 0
        self.capabilities = ClientCapabilities()  # from connection.start-ok
        self.exclusive_queues: set[Queue] = set()
        self.flow = FlowControl()  # when to read and deliver (broker/server/flow.py)
        self.output = output = Output(self.loop)  # written once per loop turn (broker/server/output.py)
        self.send = output.send
        self.send_method = output.send_method
        self.confirms_ready = output.confirms_ready
        self.flush = output.flush
        self._heartbeat = Heartbeat()  # a beat out when nothing else went, silent clients dropped
        self._timer: asyncio.TimerHandle | None = None
        # from the protocol header to open-ok, and with workers the hand-off (broker/server/opening.py)
        self.opening = Opening(self, server.takes_over, replay)
        self._relayed = endpoints  # a TLS connection worker 0 terminates (``RelayedEndpoints``)

    def to(self, state: State) -> None:
        """Move to ``state`` (``broker.states.TRANSITIONS`` says which moves exist)."""
        self.state = check_transition(self.state, state)
        if state is CLOSED:
            self.flow.stop()

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self.transport = self.output.transport = transport
        self.flow.start(transport)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.endpoints = endpoints = self._relayed or Endpoints(transport)
        self.peer = endpoints.label
        self.server.register(self)
        self._timer = self.loop.call_later(self.settings.handshake_timeout, self._handshake_timeout)
        self.opening.made(transport)

    def data_received(self, data: bytes) -> None:
        self.recv_oct += len(data)
        self.recv_cnt += 1
        flow = self.flow
        if flow.read(len(data)):  # give way for a loop turn (flow.py)
            self.loop.call_soon(flow.next_turn)
        if self.state is CLOSED or flow.held:
            return
        output = self.output
        output.in_receive = True
        try:
            if self.state < RUNNING:
                data = self.opening.received(data)
                if not data:
                    return
            self.feed(data)
            self._check_store_backlog()
        except Exception:  # a bug of ours: it must not escape into the event loop
            self._internal_error()
        finally:
            output.in_receive = False
            self.flush()

    def _check_store_backlog(self) -> None:
        flow = self.flow
        if flow.has_published and not flow.store_wait:  # (the common case, checked here: per read)
            flow.check_store(self.node.services.store)

    def _internal_error(self) -> None:
        log.exception("connection %s: internal error", self.peer)
        if self.state is OPENING or self.state is RUNNING:
            self._close_connection(InternalError("internal error"), 0)
        else:
            self.abort()

    def feed(self, data: bytes) -> None:
        if self._framing_0_8:  # a flag, not a method assigned per instance: mypyc binds methods early
            self._feed_0_8(data)
            return
        frames = self.reader.feed(data)
        if self._backlog:  # still working off an earlier read: these wait behind it
            self._backlog.extend(frames)
            return
        self._run_frames(frames)

    def _run_frames(self, frames: list[tuple[int, int, bytes]]) -> None:
        """Handle ``frames`` in order for at most ``FRAME_BUDGET`` seconds; the rest go to the backlog,
        handled on the next loop turn with reading paused until it is empty."""
        start = 0.0
        n = 0
        for frame_type, channel, payload in frames:
            self._on_frame(frame_type, channel, payload)
            if self.state is CLOSED:
                return
            n += 1
            if n % FRAME_CHECK == 0 and n < len(frames):
                now = time.perf_counter()
                if start == 0.0:
                    start = now
                elif now - start > FRAME_BUDGET:
                    self._backlog = frames[n:]
                    self.flow.backlog = True
                    self.flow.update_reading()
                    self.loop.call_soon(self._next_frames)
                    return
        if self.reader.error is not None:
            self._fail(self.reader.error, 0)

    def _next_frames(self) -> None:
        """A new loop turn: the frames left over from the last one (``_run_frames``)."""
        frames, self._backlog = self._backlog, []
        if self.state is CLOSED:
            return
        output = self.output
        output.in_receive = True
        try:
            self._run_frames(frames)
            self._check_store_backlog()
        except Exception:  # a bug of ours: it must not escape into the event loop
            self._internal_error()
        finally:
            output.in_receive = False
            if not self._backlog:
                self.flow.backlog = False
                self.flow.update_reading()
            self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.to(CLOSED)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._release()
        self.server.unregister(self)
        if self.vhost is not None:  # RabbitMQ logs the close of opened connections at info
            log.info(
                "closing AMQP connection %s (vhost '%s', user '%s')",
                self.label(),
                self.vhost.name,
                self.username,
            )
        else:
            log.debug("connection %s closed", self.peer)

    def pause_writing(self) -> None:
        self.flow.paused = True
        self.flow.update_reading()

    def resume_writing(self) -> None:
        self.flow.paused = False
        self.flow.update_reading()
        for channel in list(self.channels.values()):
            channel.kick_consumers()

    def set_blocked(self, blocked: bool, reason: str) -> None:
        """Memory alarm: publishers stop being read; capable clients are told (connection.blocked)."""
        flow = self.flow
        if self.state is not RUNNING:  # still opening: connection.open-ok applies the node's alarm (and
            return  # tells the client) then; recording it now would make that a no-op, never told
        if blocked == flow.alarm_blocked:
            return
        flow.alarm_blocked = blocked
        if self.capabilities.connection_blocked:
            self.send_method(0, spec.Connection.Blocked(reason) if blocked else spec.Connection.Unblocked())
        flow.update_reading()

    # -- handshake ------------------------------------------------------------------------
    def use_0_8(self) -> None:
        """An AMQP 0-8 client: its method frames are translated both ways (amqp/legacy.py)."""
        self._framing_0_8 = True
        self.send_method = self._send_method_0_8

    def _feed_0_8(self, data: bytes) -> None:
        """``feed`` for an AMQP 0-8 client: its method frames as 0-9-1 reads them."""
        for frame_type, channel, payload in self.reader.feed(data):
            if frame_type == FRAME_METHOD and len(payload) >= 4:
                payload = legacy.from_0_8(payload)
            self._on_frame(frame_type, channel, payload)
            if self.state is CLOSED:
                return
        if self.reader.error is not None:
            self._fail(self.reader.error, 0)

    def _send_method_0_8(self, channel: int, method: Frame) -> None:
        self.send(legacy.to_0_8(fastpath.encode_method(channel, method)))

    def _handshake_timeout(self) -> None:
        self._timer = None
        if self.state < RUNNING:
            log.info("connection %s: handshake timeout", self.peer)
            self.abort()

    def _on_frame(self, frame_type: int, channel: int, payload: bytes) -> None:
        if self.state is RUNNING and channel:  # route()'s first row, inlined: the hot path
            self._on_channel_frame(frame_type, channel, payload)
            return
        routed = route(self.state, frame_type, channel, payload)
        step = routed.step
        if step is not Step.IGNORE:
            self._steps[step](routed)

    def _step_table(self) -> dict[Step, Callable[[Routed], None]]:
        return {
            Step.CHANNEL: lambda r: None,  # handled inline in _on_frame
            Step.START_OK: lambda r: self.opening.start_ok(cast(spec.Connection.StartOk, r.method)),
            Step.TUNE_OK: lambda r: self._guarded(self.opening.tune_ok, r),
            Step.OPEN: lambda r: self._guarded(self.opening.open, r),
            Step.UPDATE_SECRET: lambda r: self._guarded(self.opening.update_secret, r),
            Step.CLOSE: lambda r: self._reply_close_ok(),
            Step.CLOSE_OK: lambda r: self.abort(),
            Step.SILENT: lambda r: self.silent_close(r.reason),
            Step.ERROR: lambda r: self._fail(cast(AMQPError, r.error), r.key),
            Step.ABORT: self._on_abort_step,
        }

    def _guarded(self, handler: Callable[[Any], None], routed: Routed) -> None:
        try:
            handler(routed.method)
        except AMQPError as exc:
            self._fail(exc, routed.key)

    def _on_abort_step(self, routed: Routed) -> None:
        log.warning("connection %s: %s; dropping the connection", self.peer, routed.reason)
        self.abort()

    def _fail(self, exc: AMQPError, key: int) -> None:
        """The one place a connection-level error becomes what RabbitMQ sends: nothing before the
        tune is agreed (a silent close), a Connection.Close after (on channel 0 even a soft code
        closes the connection), nothing more once closing."""
        state = self.state
        if state is STARTING or state is TUNING:
            self.silent_close(exc.text)
        elif state is OPENING or state is RUNNING:
            self._close_connection(exc, key)

    def silent_close(self, reason: str) -> None:
        """Close the socket without a Connection.Close after ``SILENT_CLOSE_DELAY``, reading nothing more
        (RabbitMQ: "we don't trust the client at this point - force them to wait")."""
        log.info("connection %s: handshake error (%s); closing", self.peer, reason)
        self.to(CLOSED)
        if self.transport is not None:
            self.transport.pause_reading()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(SILENT_CLOSE_DELAY, self._close_transport)

    def running(self) -> None:
        """``open-ok`` is sent (``opening.py``): the handshake timer gives way to heartbeats."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.heartbeat:
            self._timer = self.loop.call_later(self.heartbeat / 2, self._heartbeat_tick)

    # -- the hand-off's side (broker/server/handoff.py) ------------------------------------
    @property
    def awaits_open(self) -> bool:
        return self.state is OPENING

    def close_now(self, exc: ConnectionException) -> None:
        self._close_connection(exc, 0)
        self.flush()

    def forget(self) -> None:
        self.opening.handoff = None
        self.flow.held = False
        self.flow.stop()  # the transport is the other worker's (or the relay's) now: left as it is
        self.to(CLOSED)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def detach(self) -> None:
        self.server.unregister(self)

    def label(self) -> str:
        """The peer, with the client-provided ``connection_name`` when there is one (as RabbitMQ)."""
        name = self.client_properties.get("connection_name")
        return f"{self.peer} - {name}" if name else self.peer

    # -- heartbeats -----------------------------------------------------------------------
    def _heartbeat_tick(self) -> None:
        self._timer = None
        if self.state is not RUNNING:
            return
        output = self.output
        beat = self._heartbeat.tick(output.sent, self.recv_cnt)
        output.sent = False
        if beat is None:
            log.warning(
                "connection %s: missed heartbeats from client, timeout: %ss", self.peer, self.heartbeat
            )
            self.abort()
            return
        if beat:
            self.send(HEARTBEAT)
        self._timer = self.loop.call_later(self.heartbeat / 2, self._heartbeat_tick)

    def _on_channel_frame(self, frame_type: int, number: int, payload: bytes) -> None:
        channel = self.channels.get(number)
        try:
            if frame_type == FRAME_METHOD and len(payload) < 4:
                raise _NoMethodFrameError(payload_snippet(frame_type, payload) + ": unknown_frame")
            if channel is None:
                self._open_channel(frame_type, number, payload)
                return
            if frame_type == FRAME_HEARTBEAT:
                channel.method_key = 0
                raise UnexpectedFrame("type 8, all octets = <<>>")
            channel.handle(frame_type, payload)
        # one name per clause: compiled by mypyc, a name shared by the clauses has the first one's type
        except UnknownMethod as unknown:
            log.warning("connection %s: %s; dropping the connection", self.peer, unknown)
            self.abort()
        except ChannelException as soft:
            assert channel is not None
            self._close_channel(channel, soft)
        except ConnectionException as exc:
            if isinstance(exc, (_NoMethod, _NoMethodFrameError, ChannelCrashed)):
                key = 0
            elif channel is not None:
                key = channel.method_key
            elif frame_type == FRAME_METHOD and len(payload) >= 4:
                key = fastpath.method_key(payload)
            else:
                key = 0
            self._fail(exc, key)
        except Exception:
            log.exception("connection %s: internal error on channel %s", self.peer, number)
            self._fail(InternalError("internal error"), channel.method_key if channel else 0)

    def _open_channel(self, frame_type: int, number: int, payload: bytes) -> None:
        expect_open(frame_type, payload)
        if self.channel_max and len(self.channels) >= self.channel_max:
            raise _NoMethod(
                f"number of channels opened ({len(self.channels)}) has reached the "
                f"negotiated channel_max ({self.channel_max})"
            )
        limit = self.node.services.limits.limit("user", self.username, "max-channels")
        if limit is not None and self.node.connections.user_channels(self.username) >= limit:
            raise NotAllowed(
                f"number of channels opened for user '{self.username}' has reached the maximum"
                f" allowed user limit of ({limit})"
            )
        self.channels[number] = Channel(self, number)
        self.node.connections.churn.channels_opened += 1
        self.node.connections.channels_changed(self.username)
        self.send_method(number, spec.Channel.OpenOk())

    def channel_closed(self, number: int) -> None:
        """Forget a channel after the close handshake completed."""
        if self.channels.pop(number, None) is not None:
            self.node.connections.channels_changed(self.username)

    def close_channel(self, channel: ChannelPort, exc: ChannelException) -> None:
        """Close ``channel`` with ``exc`` outside frame handling (e.g. a failed store commit)."""
        self._close_channel(channel, exc)
        self.flush()

    def _close_channel(self, channel: ChannelPort, exc: ChannelException) -> None:
        key = channel.method_key
        log.info("channel %s on %s closed: %s", channel.number, self.peer, exc.reply_text)
        channel.shutdown()
        self.send_method(
            channel.number, spec.Channel.Close(exc.reply_code, exc.reply_text, key >> 16, key & 0xFFFF)
        )

    def _close_connection(self, exc: AMQPError, key: int) -> None:
        if self.state is CLOSING or self.state is CLOSED:
            return
        log.warning("closing connection %s: %s", self.peer, exc.reply_text)
        self.send_method(0, spec.Connection.Close(exc.reply_code, exc.reply_text, key >> 16, key & 0xFFFF))
        self.to(CLOSING)
        self._release()
        self.flush()
        self.set_close_timer()

    def _reply_close_ok(self) -> None:
        """The client closed: answer Close-Ok and, as RabbitMQ, let the client close the socket
        (closing it at once races clients such as amqp091-go); abort after ``CLOSE_TIMEOUT``."""
        self._release()
        self.send_method(0, spec.Connection.CloseOk())
        self.flush()
        self.to(CLOSED)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(CLOSE_TIMEOUT, self._close_transport)

    def _close_transport(self) -> None:
        self._timer = None
        if self.transport is not None:
            self.transport.close()

    def set_close_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(CLOSE_TIMEOUT, self.abort)

    # -- the read API (ottermq.broker.node.info): snapshots, never read per message ---------
    @property
    def vhost_name(self) -> str | None:
        return self.vhost.name if self.vhost is not None else None

    def channel_count(self) -> int:
        return len(self.channels)

    def channel_stats(self) -> Iterator[MessageStats]:
        for channel in self.channels.values():
            yield channel.stats

    def count_unacked_bytes(self, into: dict[Any, int]) -> None:
        for channel in self.channels.values():
            channel.count_unacked_bytes(into)

    def channel_ref(self, number: int) -> ChannelRef:
        """Where channel ``number`` is (for snapshots)."""
        name, _host, _port, peer_host, peer_port = self.endpoints.names()
        return ChannelRef(number, name, peer_host, peer_port, self.username)

    def info(self) -> ConnectionInfo:
        """A snapshot of this open connection and its channels (``ottermq.broker.node.info``)."""
        name, host, port, peer_host, peer_port = self.endpoints.names()
        channels = tuple(
            channel.info(ChannelRef(number, name, peer_host, peer_port, self.username))
            for number, channel in sorted(self.channels.items())
        )
        return ConnectionInfo(
            key=id(self),
            name=name,
            host=host,
            port=port,
            peer_host=peer_host,
            peer_port=peer_port,
            user=self.username,
            vhost=self.vhost_name or "",
            tls=self.endpoints.tls_info(),
            blocked=self.flow.blocked,
            channel_max=self.channel_max,
            frame_max=self.frame_max,
            heartbeat=self.heartbeat,
            client_properties=self.client_properties,
            recv_oct=self.recv_oct,
            send_oct=self.output.send_oct,
            recv_cnt=self.recv_cnt,
            send_cnt=self.output.send_cnt,
            channels=channels,
            flow=self.flow.store_wait and self.flow.has_published,
        )

    def force_close(self, reason: str, text: str | None = None) -> None:
        """Server-initiated close: 320 CONNECTION_FORCED with ``text`` (default: the shutdown
        text, ``broker forced connection closure with reason '<reason>'``)."""
        if self.state is RUNNING:
            if text is None:
                text = f"broker forced connection closure with reason '{reason}'"
            self._close_connection(ConnectionForced(text), 0)
        elif self.state is not CLOSED:
            self.abort()

    def _release(self) -> None:
        """Give back everything this connection holds (idempotent)."""
        channels, self.channels = list(self.channels.values()), {}
        for channel in channels:
            try:
                channel.shutdown()
            except Exception:
                log.exception("error releasing channel %s", channel.number)
        if channels:
            self.node.connections.channels_changed(self.username)
        queues, self.exclusive_queues = self.exclusive_queues, set()
        for queue in queues:
            if not queue.deleted:
                self.vhost.delete_queue(queue)

    def abort(self) -> None:
        if self.state is not CLOSED:
            self.flush()
        self.to(CLOSED)
        if self.transport is not None:
            self.transport.close()
