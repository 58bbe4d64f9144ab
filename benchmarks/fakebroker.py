"""A trivial AMQP "broker" for measuring the load generator's own ceiling.

It answers the handshake and every synchronous method with its ``-Ok`` (queue.declare reports an
empty queue) and does no routing: every ``basic.publish`` it reads becomes one canned delivery
(``basic.deliver`` + header + 100-byte body, increasing tags) to *every* consumer, on any
connection. So one consumer gets one delivery per publish (noack, acks, confirms) and ten get ten
(fanout10). Publishes on a confirm-mode channel are acked with one ``multiple`` confirm per
received chunk. Prefetch is ignored and client acks are read and discarded.

Run it on its own core: ``python benchmarks/fakebroker.py --port 0`` prints ``READY <port>``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import struct
import sys
from collections.abc import Callable
from typing import cast

from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp.base import Frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">BHI")
_METHOD_ID = struct.Struct(">I")
_TAG = struct.Struct(">Q")
BASIC_PUBLISH = 60 << 16 | 40
BASIC_ACK = 60 << 16 | 80
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
CANNED = 256  # deliveries per write


def canned_deliveries(channel: int, consumer_tag: str, body_size: int = 100) -> tuple[bytearray, list[int]]:
    """``CANNED`` deliveries as one buffer, plus the offset of each delivery tag to patch."""
    tag_marker = 0x5A5A5A5A5A5A5A5A
    one = (
        pframe.marshal(
            spec.Basic.Deliver(consumer_tag=consumer_tag, delivery_tag=tag_marker, routing_key="q"), channel
        )
        + pframe.marshal(ContentHeader(0, body_size), channel)
        + pframe.marshal(ContentBody(b"x" * body_size), channel)
    )
    at = one.index(_TAG.pack(tag_marker))
    return bytearray(one * CANNED), [i * len(one) + at for i in range(CANNED)]


class Consumer:
    """One ``basic.consume``: deliveries owed to it, written in canned chunks by ``run``."""

    def __init__(self, conn: FakeBroker, channel: int, consumer_tag: str) -> None:
        self.conn = conn
        self.pending = 0
        self.wake = asyncio.Event()
        self.chunk, self.offsets = canned_deliveries(channel, consumer_tag)
        self.one = len(self.chunk) // CANNED
        self.tag = 0
        self.task = asyncio.ensure_future(self.run())

    def owe(self, count: int) -> None:
        self.pending += count
        self.wake.set()

    async def run(self) -> None:
        conn, chunk, pack_into = self.conn, self.chunk, _TAG.pack_into
        while conn.transport is not None and not conn.transport.is_closing():
            await self.wake.wait()
            self.wake.clear()
            while self.pending and not conn.transport.is_closing():
                n = min(self.pending, CANNED)
                self.pending -= n
                for at in self.offsets[:n]:
                    self.tag += 1
                    pack_into(chunk, at, self.tag)
                conn.transport.write(bytes(chunk[: n * self.one]))
                if not conn.can_write.is_set():
                    await conn.can_write.wait()
                else:
                    await asyncio.sleep(0)


CONSUMERS: set[Consumer] = set()


class FakeBroker(asyncio.Protocol):
    """One client connection to the fake broker."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.greeted = False
        self.confirming: dict[int, int] = {}  # channel -> publishes seen
        self.streams: dict[int, Consumer] = {}
        self.can_write = asyncio.Event()
        self.can_write.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.set_write_buffer_limits(high=1 << 20)

    def connection_lost(self, exc: Exception | None) -> None:
        for channel in list(self.streams):
            self.stop_stream(channel)
        self.can_write.set()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def send(self, channel: int, method: Frame) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(pframe.marshal(method, channel))

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        if not self.greeted:
            if len(buf) < 8:
                return
            pos = 8 if buf[:8] == PROTOCOL_HEADER else 0
            self.greeted = True
            self.send(
                0,
                spec.Connection.Start(
                    server_properties={"product": "fakebroker", "capabilities": {"publisher_confirms": True}},
                    mechanisms="PLAIN",
                    locales="en_US",
                ),
            )
        size = len(buf)
        published: dict[int, int] = {}
        header, method_id = _HEADER.unpack_from, _METHOD_ID.unpack_from
        while size - pos >= 8:
            _, channel, length = header(buf, pos)
            end = pos + length + 8
            if end > size:
                break
            if buf[pos] == 1:
                mid = method_id(buf, pos + 7)[0]
                if mid == BASIC_PUBLISH:
                    published[channel] = published.get(channel, 0) + 1
                elif mid != BASIC_ACK:
                    self.on_method(bytes(buf[pos:end]))
            pos = end
        del buf[:pos]
        total = sum(published.values())
        if total:
            for consumer in CONSUMERS:
                consumer.owe(total)
        for channel, count in published.items():
            if channel in self.confirming:
                seq = self.confirming[channel] = self.confirming[channel] + count
                self.send(channel, spec.Basic.Ack(delivery_tag=seq, multiple=True))

    def on_method(self, raw: bytes) -> None:
        _, channel, m = pframe.unmarshal(raw)
        if not isinstance(m, Frame):
            return
        reply: Frame | None = None
        if isinstance(m, spec.Connection.StartOk):
            reply = spec.Connection.Tune(channel_max=2047, frame_max=131072, heartbeat=0)
        elif isinstance(m, spec.Connection.Open):
            reply = spec.Connection.OpenOk()
        elif isinstance(m, spec.Connection.Close):
            for stream in list(self.streams):
                self.stop_stream(stream)
            self.send(0, spec.Connection.CloseOk())
            if self.transport is not None:
                self.transport.close()
        elif isinstance(m, spec.Channel.Open):
            reply = spec.Channel.OpenOk()
        elif isinstance(m, spec.Channel.Close):
            self.stop_stream(channel)
            reply = spec.Channel.CloseOk()
        elif isinstance(m, spec.Queue.Declare):
            reply = spec.Queue.DeclareOk(queue=m.queue or "amq.gen-fake", message_count=0, consumer_count=0)
        elif isinstance(m, spec.Confirm.Select):
            self.confirming[channel] = 0
            reply = spec.Confirm.SelectOk()
        elif isinstance(m, spec.Basic.Consume):
            tag = m.consumer_tag or f"ctag-fake-{channel}"
            self.send(channel, spec.Basic.ConsumeOk(consumer_tag=tag))
            self.streams[channel] = consumer = Consumer(self, channel, tag)
            CONSUMERS.add(consumer)
        elif isinstance(m, spec.Basic.Cancel):
            self.stop_stream(channel)
            reply = spec.Basic.CancelOk(consumer_tag=m.consumer_tag)
        else:
            kind = _SIMPLE_REPLIES.get(type(m))
            reply = kind() if kind is not None else None
        if reply is not None and not getattr(m, "nowait", False):
            self.send(channel, reply)

    def stop_stream(self, channel: int) -> None:
        consumer = self.streams.pop(channel, None)
        if consumer is not None:
            CONSUMERS.discard(consumer)
            consumer.task.cancel()


_SIMPLE_REPLIES: dict[type[Frame], Callable[[], Frame]] = {
    spec.Exchange.Declare: spec.Exchange.DeclareOk,
    spec.Exchange.Delete: spec.Exchange.DeleteOk,
    spec.Exchange.Bind: spec.Exchange.BindOk,
    spec.Queue.Bind: spec.Queue.BindOk,
    spec.Queue.Unbind: spec.Queue.UnbindOk,
    spec.Queue.Purge: lambda: spec.Queue.PurgeOk(message_count=0),
    spec.Queue.Delete: lambda: spec.Queue.DeleteOk(message_count=0),
    spec.Basic.Qos: spec.Basic.QosOk,
}


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(FakeBroker, host, port, reuse_address=True, backlog=1024)
    bound = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"READY {bound}\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        asyncio.run(serve(args.host, args.port))
    else:
        uvloop.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
