"""Raw AMQP 0-9-1 client for the load generator.

pamqp is used for the handshake and the few control methods (declare, bind, consume, qos,
confirm.select, close). The hot path never touches pamqp:

- publishing writes pre-encoded ``basic.publish`` + content header + body bytes (``publish_frames``);
- receiving scans the buffer frame by frame with ``struct`` and only counts ``basic.deliver`` frames;
  the delivery tag is decoded once per received chunk (the last deliver's), never per message;
- acks are slices of a pre-encoded run of ``basic.ack`` frames (``AckFrames``), one write per chunk;
- publisher confirms are ``basic.ack``/``basic.nack`` frames decoded with one ``struct`` call each.

Rules: one consuming channel and one confirming channel per connection at most (scenarios use one
connection per consumer, as real clients do); heartbeats are negotiated off (``heartbeat=0``).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import urllib.parse
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp.base import Frame
from pamqp.body import ContentBody
from pamqp.common import FieldTable
from pamqp.header import ContentHeader, ProtocolHeader

log = logging.getLogger(__name__)

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = 0xCE
BASIC_DELIVER = 60 << 16 | 60
BASIC_ACK = 60 << 16 | 80
BASIC_NACK = 60 << 16 | 120

_HEADER = struct.Struct(">BHI")  # frame type, channel, payload size
_METHOD_ID = struct.Struct(">I")  # class id << 16 | method id
_TAG = struct.Struct(">Q")
_TAG_BITS = struct.Struct(">QB")
_ACK_FRAME = struct.Struct(">BHIHHQBB")  # a whole basic.ack frame, frame-end included
_STAMP = struct.Struct(">d")

F = TypeVar("F", bound=Frame)


class BrokerError(Exception):
    """The broker closed a channel or the connection, or the connection was lost."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code} {text}")
        self.code = code
        self.text = text


@dataclass(frozen=True)
class BrokerURL:
    """Where a broker listens: ``amqp://user:pass@host:port/vhost`` (vhost ``%2F`` is ``/``)."""

    host: str = "127.0.0.1"
    port: int = 5672
    user: str = "guest"
    password: str = "guest"
    vhost: str = "/"

    @classmethod
    def parse(cls, url: str) -> BrokerURL:
        """Parse an ``amqp://`` URL; missing parts take RabbitMQ's defaults.

        Raises:
            ValueError: not an ``amqp`` URL.
        """
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "amqp":
            raise ValueError(f"not an amqp:// URL: {url!r}")
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5672,
            user=urllib.parse.unquote(parts.username or "guest"),
            password=urllib.parse.unquote(parts.password or "guest"),
            vhost=urllib.parse.unquote(path) if path else "/",
        )

    def __str__(self) -> str:
        vhost = urllib.parse.quote(self.vhost, safe="")
        return f"amqp://{self.user}@{self.host}:{self.port}/{vhost}"


# ------------------------------------------------------------------------------------------------
# pre-encoding
# ------------------------------------------------------------------------------------------------
def publish_frames(
    channel: int, exchange: str, routing_key: str, body: bytes, *, persistent: bool = False
) -> bytes:
    """One message as wire bytes: ``basic.publish`` + content header + one body frame."""
    props = spec.Basic.Properties(delivery_mode=2 if persistent else None)
    return (
        pframe.marshal(spec.Basic.Publish(exchange=exchange, routing_key=routing_key), channel)
        + pframe.marshal(ContentHeader(0, len(body), props), channel)
        + pframe.marshal(ContentBody(body), channel)
    )


def stamped_publish(channel: int, routing_key: str, size: int) -> tuple[bytes, bytes]:
    """Split pre-encoded publish bytes around the body's first 8 bytes (a ``perf_counter`` double).

    Returns:
        ``(head, tail)``: a message is ``head + _STAMP.pack(t) + tail``.
    """
    marker = b"\xa5" * 8
    whole = publish_frames(channel, "", routing_key, marker + b"x" * (size - 8))
    cut = whole.rindex(marker)
    return whole[:cut], whole[cut + 8 :]


def stamp(t: float) -> bytes:
    """The 8-byte timestamp that ``stamped_publish`` leaves room for."""
    return _STAMP.pack(t)


def ack_frame(channel: int, tag: int, multiple: bool) -> bytes:
    """One ``basic.ack`` frame."""
    return _ACK_FRAME.pack(FRAME_METHOD, channel, 13, 60, 80, tag, 1 if multiple else 0, FRAME_END)


class AckFrames:
    """Pre-encoded single ``basic.ack`` frames for tags 1..n on one channel, grown on demand."""

    SIZE = _ACK_FRAME.size

    def __init__(self, channel: int, initial: int = 4096) -> None:
        self.channel = channel
        self._data = b""  # immutable: a transport may still hold a view of the old one after a grow
        self._count = 0
        self._grow(initial)

    def _grow(self, upto: int) -> None:
        pack, ch = _ACK_FRAME.pack, self.channel
        more = (
            pack(FRAME_METHOD, ch, 13, 60, 80, tag, 0, FRAME_END) for tag in range(self._count + 1, upto + 1)
        )
        self._data += b"".join(more)
        self._count = upto

    def span(self, after: int, upto: int) -> memoryview:
        """Acks for tags ``after+1 .. upto``, one frame each."""
        if upto > self._count:
            self._grow(max(upto, 2 * self._count))
        return memoryview(self._data)[after * self.SIZE : upto * self.SIZE]


# ------------------------------------------------------------------------------------------------
# connection
# ------------------------------------------------------------------------------------------------
class RawConnection(asyncio.Protocol):
    """An AMQP client connection whose hot path is byte scanning; see the module rules.

    Counters are public for the scenarios: ``delivered`` (``basic.deliver`` frames seen),
    ``first_delivery``/``last_delivery`` (``perf_counter`` at the chunk that carried them),
    ``confirmed``/``nacked`` (publisher confirms resolved), ``latencies`` (seconds, when enabled).
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._inbox: defaultdict[int, asyncio.Queue[Frame | BrokerError]] = defaultdict(asyncio.Queue)
        self._can_write = asyncio.Event()
        self._can_write.set()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.error: BrokerError | None = None
        self.blocked = False
        self.server_properties: dict[str, Any] = {}
        # consuming
        self.delivered = 0
        self.first_delivery = 0.0
        self.last_delivery = 0.0
        self.latencies: list[float] | None = None
        self._ack_channel = 0
        self._ack_every = 0  # 0: no acks (no-ack consumer), 1: one ack per delivery, n: multiple per n
        self._acks: AckFrames | None = None
        self._acked_upto = 0
        self._last_tag = 0
        # confirming
        self._confirm_floor = 0  # every tag <= floor is resolved
        self._confirm_above: set[int] = set()
        self.confirmed = 0
        self.nacked = 0
        # waiters: (counter name, target, future)
        self._waiters: list[tuple[str, int, asyncio.Future[None]]] = []

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.set_write_buffer_limits(high=1 << 20)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(self.error or BrokerError(0, f"connection lost: {exc or 'closed'}"))
        self._can_write.set()
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        size = len(buf)
        pos = 0
        delivered = 0
        last_deliver = -1
        latencies = self.latencies
        now = time.perf_counter()
        header = _HEADER.unpack_from
        method_id = _METHOD_ID.unpack_from
        while size - pos >= 8:
            ftype, channel, length = header(buf, pos)
            end = pos + length + 8
            if end > size:
                break
            if ftype == FRAME_METHOD:
                mid = method_id(buf, pos + 7)[0]
                if mid == BASIC_DELIVER:
                    delivered += 1
                    last_deliver = pos
                elif mid == BASIC_ACK or mid == BASIC_NACK:
                    tag, bits = _TAG_BITS.unpack_from(buf, pos + 11)
                    self._on_confirm(tag, bool(bits & 1), mid == BASIC_NACK)
                else:
                    self._on_control(bytes(buf[pos:end]))
            elif ftype == FRAME_BODY and latencies is not None:
                latencies.append(now - _STAMP.unpack_from(buf, pos + 7)[0])
            pos = end
        if delivered:
            if not self.delivered:
                self.first_delivery = now
            self.delivered += delivered
            self.last_delivery = now
            if self._ack_every:
                ctag_len = buf[last_deliver + 11]
                self._last_tag = _TAG.unpack_from(buf, last_deliver + 12 + ctag_len)[0]
                self._send_acks(final=False)
        del buf[:pos]
        if self._waiters:
            self._wake()

    # -- hot-path helpers -------------------------------------------------------------------
    def _send_acks(self, final: bool) -> None:
        last, done = self._last_tag, self._acked_upto
        if last <= done or self.transport is None:
            return
        if self._ack_every == 1:
            assert self._acks is not None
            self.transport.write(self._acks.span(done, last))
            self._acked_upto = last
            return
        every = self._ack_every
        upto = last if final else done + (last - done) // every * every
        if upto > done:
            self.transport.write(ack_frame(self._ack_channel, upto, True))
            self._acked_upto = upto

    def _on_confirm(self, tag: int, multiple: bool, nack: bool) -> None:
        floor, above = self._confirm_floor, self._confirm_above
        if tag <= floor:
            return
        if multiple:
            already = sum(1 for t in above if t <= tag) if above else 0
            resolved = tag - floor - already
            if above:
                self._confirm_above = above = {t for t in above if t > tag}
            floor = tag
        elif tag in above:
            return
        else:
            resolved = 1
            above.add(tag)
        while floor + 1 in above:
            floor += 1
            above.discard(floor)
        self._confirm_floor = floor
        if nack:
            self.nacked += resolved
        self.confirmed += resolved

    def _wake(self) -> None:
        keep = []
        for name, target, fut in self._waiters:
            if fut.done():
                continue
            if getattr(self, name) >= target:
                fut.set_result(None)
            else:
                keep.append((name, target, fut))
        self._waiters = keep

    # -- control frames ---------------------------------------------------------------------
    def _on_control(self, raw: bytes) -> None:
        _, channel, frame = pframe.unmarshal(raw)
        if isinstance(frame, spec.Connection.Close):
            self.send_method(0, spec.Connection.CloseOk())
            self._fail(BrokerError(frame.reply_code or 0, str(frame.reply_text)))
            if self.transport is not None:
                self.transport.close()
        elif isinstance(frame, spec.Channel.Close):
            self.send_method(channel, spec.Channel.CloseOk())
            self._inbox[channel].put_nowait(BrokerError(frame.reply_code or 0, str(frame.reply_text)))
        elif isinstance(frame, spec.Connection.Blocked | spec.Connection.Unblocked):
            self.blocked = isinstance(frame, spec.Connection.Blocked)
            log.warning("broker %s the connection", "blocked" if self.blocked else "unblocked")
        elif isinstance(frame, Frame):
            self._inbox[channel].put_nowait(frame)

    def _fail(self, error: BrokerError) -> None:
        if self.error is None:
            self.error = error
        for queue in self._inbox.values():
            queue.put_nowait(error)
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(error)
        self._waiters = []

    # -- API --------------------------------------------------------------------------------
    @classmethod
    async def open(cls, url: BrokerURL, timeout: float = 10.0, name: str = "ottermq-bench") -> RawConnection:
        """Connect and complete the AMQP handshake (PLAIN auth, heartbeats off).

        Raises:
            BrokerError: the broker refused us; TimeoutError: no handshake within ``timeout``.
        """
        loop = asyncio.get_running_loop()
        conn: RawConnection | None = None
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(cls, url.host, url.port)
                await conn._handshake(url, name)
        except BaseException:
            if conn is not None and conn.transport is not None:
                conn.transport.abort()
            raise
        return conn

    async def _handshake(self, url: BrokerURL, name: str) -> None:
        self.write(ProtocolHeader().marshal())
        start = await self.wait_frame(0, spec.Connection.Start)
        self.server_properties = dict(start.server_properties or {})
        mechanisms = start.mechanisms.decode() if isinstance(start.mechanisms, bytes) else start.mechanisms
        if "PLAIN" not in str(mechanisms).split():
            raise BrokerError(0, f"broker offers no PLAIN auth: {mechanisms}")
        capabilities: FieldTable = {
            "publisher_confirms": True,
            "basic.nack": True,
            "consumer_cancel_notify": True,
            "connection.blocked": True,
        }
        self.send_method(
            0,
            spec.Connection.StartOk(
                client_properties={"product": name, "connection_name": name, "capabilities": capabilities},
                mechanism="PLAIN",
                response=f"\0{url.user}\0{url.password}",
                locale="en_US",
            ),
        )
        tune = await self.wait_frame(0, spec.Connection.Tune)
        self.send_method(
            0,
            spec.Connection.TuneOk(
                channel_max=tune.channel_max or 2047, frame_max=tune.frame_max or 131072, heartbeat=0
            ),
        )
        self.send_method(0, spec.Connection.Open(virtual_host=url.vhost))
        await self.wait_frame(0, spec.Connection.OpenOk)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Queue bytes on the socket.

        Raises:
            BrokerError: the connection is gone.
        """
        if self.error is not None:
            raise self.error
        assert self.transport is not None
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait while the socket's write buffer is over its high-water mark."""
        if not self._can_write.is_set():
            await self._can_write.wait()
        if self.error is not None:
            raise self.error

    def send_method(self, channel: int, method: Frame) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(pframe.marshal(method, channel))

    async def wait_frame(self, channel: int, kind: type[F]) -> F:
        """The next control frame of type ``kind`` on ``channel``; other frames there are skipped.

        Raises:
            BrokerError: the channel or connection was closed.
        """
        queue = self._inbox[channel]
        while True:
            if self.error is not None and queue.empty():
                raise self.error
            item = await queue.get()
            if isinstance(item, BrokerError):
                raise item
            if isinstance(item, kind):
                return item
            log.debug("skipping %s on channel %d", item.name, channel)

    async def rpc(self, channel: int, method: Frame, reply: type[F]) -> F:
        """Send a synchronous method and wait for its ``-Ok``."""
        self.send_method(channel, method)
        return await self.wait_frame(channel, reply)

    async def channel(self, channel: int = 1) -> int:
        await self.rpc(channel, spec.Channel.Open(), spec.Channel.OpenOk)
        return channel

    async def confirm_select(self, channel: int) -> None:
        await self.rpc(channel, spec.Confirm.Select(), spec.Confirm.SelectOk)

    async def consume(
        self,
        channel: int,
        queue: str,
        *,
        no_ack: bool = True,
        prefetch: int = 0,
        ack_every: int = 1,
        latency: bool = False,
    ) -> None:
        """Open ``channel`` and start the connection's one consumer on ``queue``.

        Args:
            ack_every: with manual acks, 1 acks each delivery, n > 1 acks ``multiple`` every n.
            latency: record ``now - stamp`` for every body (see ``stamped_publish``).
        """
        await self.channel(channel)
        if prefetch:
            await self.rpc(channel, spec.Basic.Qos(prefetch_count=prefetch), spec.Basic.QosOk)
        if latency:
            self.latencies = []
        if not no_ack:
            self._ack_channel, self._ack_every = channel, ack_every
            if ack_every == 1:
                self._acks = AckFrames(channel)
        await self.rpc(channel, spec.Basic.Consume(queue=queue, no_ack=no_ack), spec.Basic.ConsumeOk)

    def flush_acks(self) -> None:
        """Ack everything delivered so far (the tail a multiple-ack policy leaves behind)."""
        if self._ack_every:
            self._send_acks(final=True)

    def until(self, counter: str, target: int) -> asyncio.Future[None]:
        """A future resolved once ``getattr(self, counter) >= target`` (``delivered``, ``confirmed``)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.error is not None:
            fut.set_exception(self.error)
        elif getattr(self, counter) >= target:
            fut.set_result(None)
        else:
            self._waiters.append((counter, target, fut))
        return fut

    async def close(self, timeout: float = 5.0) -> None:
        """Close politely (``connection.close``/``close-ok``), then drop the socket."""
        if self.transport is None:
            return
        if self.error is None and not self.transport.is_closing():
            self.send_method(
                0, spec.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
            )
            try:
                async with asyncio.timeout(timeout):
                    await self.wait_frame(0, spec.Connection.CloseOk)
            except (TimeoutError, BrokerError):
                pass
        self.transport.close()
        if not self.closed.done():
            try:
                async with asyncio.timeout(timeout):
                    await self.closed
            except TimeoutError:
                self.transport.abort()
