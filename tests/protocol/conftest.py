"""Protocol-test harness: an AMQPConnection over a MockTransport with a fake event loop.

``client`` builds client frames with pamqp and decodes what the broker wrote, so these tests
exercise the real connection/channel code without sockets or sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from ottermq.broker.config import Settings
from ottermq.broker.node import wiring
from ottermq.broker.node.node import Node
from ottermq.broker.server.connection import AMQPConnection
from ottermq.broker.server.listener import AMQPServer
from pamqp import body as pbody
from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp import header as pheader
from pamqp.heartbeat import Heartbeat


class FakeTimer:
    def __init__(self, loop: FakeLoop, when: float, cb: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.loop, self.when, self.cb, self.args, self.cancelled = loop, when, cb, args, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """Just enough of an event loop: time, call_soon, call_later; ``advance`` fires timers."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.timers: list[FakeTimer] = []
        self.soon: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def time(self) -> float:
        return self.now

    def call_soon(self, cb: Callable[..., Any], *args: Any) -> None:
        self.soon.append((cb, args))

    def call_later(self, delay: float, cb: Callable[..., Any], *args: Any) -> FakeTimer:
        timer = FakeTimer(self, round(self.now + delay, 6), cb, args)  # exact decimal times
        self.timers.append(timer)
        return timer

    def run_soon(self) -> None:
        while self.soon:
            batch, self.soon = self.soon, []
            for cb, args in batch:
                cb(*args)

    def advance(self, seconds: float) -> None:
        end = round(self.now + seconds, 6)
        while True:
            self.run_soon()
            due = sorted((t for t in self.timers if not t.cancelled and t.when <= end), key=lambda t: t.when)
            if not due:
                break
            timer = due[0]
            self.timers.remove(timer)
            self.now = max(self.now, timer.when)
            timer.cb(*timer.args)
        self.now = end
        self.run_soon()


class FakeSSLObject:
    """What a TLS transport's ``ssl_object`` tells about a verified client certificate."""

    def __init__(self, cert: dict[str, Any]) -> None:
        self.cert = cert

    def getpeercert(self) -> dict[str, Any]:
        return self.cert

    def version(self) -> str:
        return "TLSv1.3"

    def cipher(self) -> tuple[str, str, int]:
        return ("TLS_AES_256_GCM_SHA384", "TLSv1.3", 256)


class MockTransport(asyncio.Transport):
    def __init__(
        self, protocol: AMQPConnection, peer: str = "127.0.0.1", cert: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.protocol = protocol
        self.buffer = bytearray()
        self.closed = False
        self.reading = True
        self.peer = peer
        self.ssl_object = FakeSSLObject(cert) if cert is not None else None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return (self.peer, 40000)
        if name == "ssl_object" and self.ssl_object is not None:
            return self.ssl_object
        return default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, "write after close"
        self.buffer += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.protocol.connection_lost(None)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class Client:
    """Drives one AMQPConnection with pamqp-built frames and decodes its output; ``cert`` makes it a
    TLS client with that verified certificate (``getpeercert()``'s shape), offered SASL EXTERNAL."""

    def __init__(
        self, server: AMQPServer, loop: FakeLoop, peer: str = "127.0.0.1", cert: dict[str, Any] | None = None
    ) -> None:
        self.loop = loop
        self.conn = AMQPConnection(server)
        self.transport = MockTransport(self.conn, peer, cert)
        self.conn.connection_made(self.transport)
        self._pending = bytearray()

    def send_raw(self, data: bytes) -> None:
        self.conn.data_received(bytes(data))
        self.loop.run_soon()

    def send(self, channel: int, *frames: Any) -> None:
        self.send_raw(b"".join(pframe.marshal(f, channel) for f in frames))

    def publish(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        body: bytes,
        properties: spec.Basic.Properties | None = None,
        mandatory: bool = False,
    ) -> None:
        props = properties or spec.Basic.Properties()
        self.send(
            channel,
            spec.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory),
            pheader.ContentHeader(0, len(body), props),
            *([pbody.ContentBody(body)] if body else []),
        )

    def frames(self) -> list[tuple[int, Any]]:
        """Everything the broker wrote since the last call, decoded."""
        self._pending += self.transport.buffer
        self.transport.buffer.clear()
        out: list[tuple[int, Any]] = []
        while self._pending:
            if self._pending[:4] == b"AMQP":
                out.append((-1, bytes(self._pending[:8])))
                del self._pending[:8]
                continue
            consumed, channel, value = pframe.unmarshal(bytes(self._pending))
            if not consumed:
                break
            del self._pending[:consumed]
            out.append((channel, value))
        return out

    def methods(self) -> list[tuple[int, Any]]:
        return [(c, f) for c, f in self.frames() if not isinstance(f, Heartbeat)]

    def expect(self, cls: type, channel: int | None = None) -> Any:
        for ch, frame in self.methods():
            if isinstance(frame, cls) and (channel is None or ch == channel):
                return frame
        raise AssertionError(f"no {cls.__name__} in output")

    def handshake(
        self,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        heartbeat: int = 0,
        frame_max: int = 131072,
    ) -> None:
        self.send_raw(b"AMQP\x00\x00\x09\x01")
        self.expect(spec.Connection.Start)
        self.send(
            0,
            spec.Connection.StartOk(
                client_properties={
                    "capabilities": {"consumer_cancel_notify": True, "authentication_failure_close": True}
                },
                mechanism="PLAIN",
                response=f"\0{user}\0{password}",
            ),
        )
        self.expect(spec.Connection.Tune)
        self.send(
            0,
            spec.Connection.TuneOk(channel_max=2047, frame_max=frame_max, heartbeat=heartbeat),
            spec.Connection.Open(virtual_host=vhost),
        )
        self.expect(spec.Connection.OpenOk)

    def open_channel(self, number: int = 1) -> None:
        self.send(number, spec.Channel.Open())
        self.expect(spec.Channel.OpenOk, number)

    def rpc(self, channel: int, method: Any, reply: type) -> Any:
        """Send ``method`` and return the broker's ``reply`` on that channel."""
        self.send(channel, method)
        return self.expect(reply, channel)

    def refused(self, channel: int, method: Any) -> tuple[int, str, tuple[int, int]]:
        """Send ``method``; the broker must close the channel: ``(code, text, (class, method))``."""
        self.send(channel, method)
        close = self.expect(spec.Channel.Close, channel)
        return close.reply_code, close.reply_text, (close.class_id, close.method_id)

    def get(self, queue: str, channel: int = 1, no_ack: bool = True) -> tuple[Any, Any, bytes] | None:
        """basic.get: ``(get-ok, properties, body)``, or None when the queue is empty."""
        self.send(channel, spec.Basic.Get(queue=queue, no_ack=no_ack))
        frames = [f for ch, f in self.methods() if ch == channel]
        if isinstance(frames[0], spec.Basic.GetEmpty):
            return None
        assert isinstance(frames[0], spec.Basic.GetOk), frames
        return frames[0], frames[1].properties, b"".join(f.value for f in frames[2:])

    def drain(self, queue: str, channel: int = 1) -> list[bytes]:
        """The bodies of every message now in ``queue`` (no-ack gets)."""
        bodies = []
        while (got := self.get(queue, channel)) is not None:
            bodies.append(got[2])
        return bodies


class InstantStore:
    """A ``Store`` for the fake loop: ids are counted, every batch "commits" on the next loop turn."""

    def __init__(self, loop: FakeLoop) -> None:
        self.loop = loop
        self.ids = 0
        self.ops: list[tuple[str, Any]] = []
        self.fail_batches = 0  # the next N batches fail (a full disk): callbacks get ok=False
        self._callbacks: list[Callable[[bool], None]] = []

    @property
    def pending(self) -> int:
        return len(self.ops)

    async def release_memory(self) -> None:
        pass  # no cache to give back

    def after_commit(self, callback: Callable[[bool], None]) -> None:
        if not self._callbacks:
            self.loop.call_soon(self._commit)
        self._callbacks.append(callback)

    def _commit(self) -> None:
        ok = self.fail_batches <= 0
        if not ok:
            self.fail_batches -= 1
        self.ops.clear()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(ok)

    def _next(self) -> int:
        self.ids += 1
        return self.ids

    def put_queue(self, record: Any) -> int:
        record.id = self._next()
        self.ops.append(("put_queue", record))
        return record.id

    def insert_message(self, record: Any) -> int:
        record.id = self._next()
        self.ops.append(("insert_message", record))
        return record.id

    def __getattr__(self, name: str) -> Callable[..., None]:  # every other write just records
        return lambda *args: self.ops.append((name, args))


@pytest.fixture
def loop() -> FakeLoop:
    return FakeLoop()


EPOCH_MS = 1_700_000_000_000  # the wall-clock time (ms) the fake loop's time 0 stands for


@pytest.fixture
def settings() -> Settings:
    """The broker's settings; a test module overrides this fixture to change them."""
    return Settings(_env_file=None)  # type: ignore[call-arg]


@pytest.fixture
def broker(loop: FakeLoop, monkeypatch: pytest.MonkeyPatch, settings: Settings) -> Node:
    # TTL deadlines, x-expires and x-death stamps follow the fake loop: ``loop.advance`` expires messages
    monkeypatch.setattr(wiring, "wall_clock_ms", lambda: EPOCH_MS + round(loop.now * 1000))
    b = Node(settings, loop, InstantStore(loop))  # type: ignore[arg-type]
    b.services.auth.seed_defaults(settings)  # what start() does on a first boot
    for name in b.services.auth.vhosts:
        b.ensure_vhost(name)
    return b


@pytest.fixture
def server(broker: Node) -> AMQPServer:
    """The AMQP server over ``broker`` (the node): its connections, reply-to registry, timeouts."""
    return AMQPServer(broker)


@pytest.fixture
def make_client(server: AMQPServer, loop: FakeLoop) -> Callable[..., Client]:
    def make(peer: str = "127.0.0.1", cert: dict[str, Any] | None = None) -> Client:
        return Client(server, loop, peer, cert)

    return make


@pytest.fixture
def client(make_client: Callable[..., Client]) -> Client:
    c = make_client()
    c.handshake()
    c.open_channel(1)
    return c


@pytest.fixture
def add_user(broker: Node) -> Callable[..., None]:
    """``add_user(name, password, permissions=(configure, write, read), vhost="/")``: a user (kept when
    it exists), and its permissions on ``vhost`` (created when missing); ``permissions=None``: none."""

    def add(
        name: str, password: str, permissions: tuple[str, str, str] | None = None, vhost: str = "/"
    ) -> None:
        broker.services.auth.add_vhost(vhost)
        broker.ensure_vhost(vhost)
        if name not in broker.services.auth.users:
            broker.services.auth.add_user(name, password)
        if permissions is not None:
            broker.services.auth.set_permissions(name, vhost, *permissions)

    return add


@pytest.fixture
def set_limit(broker: Node) -> Callable[[str, str, str, Any], None]:
    """``set_limit(kind, owner, name, value)``: a vhost or user limit, as the management API sets it."""
    return broker.services.ops.set_limit


@pytest.fixture
def set_policy(broker: Node) -> Callable[..., None]:
    """``set_policy(name, pattern, definition, apply_to="all", vhost="/")``, as the management API sets it."""

    def put(
        name: str, pattern: str, definition: dict[str, Any], apply_to: str = "all", vhost: str = "/"
    ) -> None:
        broker.services.ops.set_policy(broker.vhosts[vhost], name, pattern, definition, apply_to)

    return put


@pytest.fixture
def consumer_timeouts(server: AMQPServer) -> None:
    """Run the consumer-timeout checker on the fake loop (``start()`` does it in a real broker)."""
    server.ack_timeouts.start()
