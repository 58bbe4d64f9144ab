"""The AMQP listeners and what the AMQP server keeps node-wide.

``AMQPServer`` binds plain AMQP on ``OTTERMQ_BROKER_PORT`` (unless 0) and AMQPS on
``OTTERMQ_SSL_PORT`` (with ``OTTERMQ_SSL``), creates an ``AMQPConnection`` per client, and holds
what connections share beyond the node's services: the direct reply-to registry, the consumer
timeout checker and the ``server_properties`` sent in ``connection.start``. Open connections are
registered both here (the server's own view, with their channels) and in ``Node.connections`` (the
read API everyone else uses).
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import Callable
from typing import Any

from .. import VERSION
from ..config import env_name
from ..node import tls
from ..node.node import Node
from ..node.sasl import server_properties
from ..node.startup import StartupError, os_cause
from ..node.tls import TLSConfigError, amqps_context, amqps_files
from .ack_timeout import AckTimeouts
from .connection import AMQPConnection
from .endpoints import Endpoints
from .handoff import HandOff
from .reply_to import ReplyRegistry


class AMQPServer:
    """The AMQP side of one node (see the module docstring).

    Args:
        node: the node whose services connections use.
    """

    def __init__(self, node: Node) -> None:
        self.node = node
        self.settings = node.services.settings
        self.loop = node.services.loop
        self.connections: set[AMQPConnection] = set()
        self.replies = ReplyRegistry()  # direct reply-to consumers, node-wide like RabbitMQ's
        self.server_properties: dict[str, Any] = server_properties(VERSION)
        self.ack_timeouts = AckTimeouts(
            self.settings, self.loop, self.connections
        )  # OTTERMQ_CONSUMER_TIMEOUT and per-queue ones
        self.tls_context: ssl.SSLContext | None = None
        self._servers: list[asyncio.Server] = []  # plain AMQP and/or AMQPS
        # With several workers, in the first: gives a connection to the worker owning its vhost
        # (``ottermq.broker.workers``); returns False for the vhosts this process owns.
        self.router: Callable[[HandOff, str], bool] | None = None
        self._gone: dict[AMQPConnection, Callable[[], None]] = {}  # adopted: tell worker 0 when closed
        node.listings.add(self.listeners)

    @property
    def takes_over(self) -> bool:
        return self.router is not None

    def hand_off(self, conn: HandOff, vhost: str) -> bool:
        router = self.router
        return router is not None and router(conn, vhost)

    async def adopt(
        self,
        sock: socket.socket,
        before_open: bytes,
        rest: bytes,
        endpoints: Endpoints | None = None,
        gone: Callable[[], None] = lambda: None,
    ) -> None:
        """Serve a connection another worker accepted: its handshake is replayed from its bytes
        (``before_open`` answered already; ``rest`` from its connection.open on). ``endpoints``:
        the client's TLS connection as worker 0, which relays it, saw it. ``gone`` is called once
        when the connection is closed (at once if the replay closed it)."""
        made: list[AMQPConnection] = []

        def factory() -> AMQPConnection:
            conn = AMQPConnection(self, (before_open, rest), endpoints)
            self._gone[conn] = gone  # before connection_made, which may close it already
            made.append(conn)
            return conn

        try:
            await self.loop.connect_accepted_socket(factory, sock)
        except BaseException:
            for conn in made:
                self._gone.pop(conn, None)
            gone()
            raise

    def register(self, conn: AMQPConnection) -> None:
        """A connection was made: count it and make it visible to the node."""
        self.connections.add(conn)
        self.node.connections.add(conn)
        self.node.connections.churn.connections_opened += 1

    def unregister(self, conn: AMQPConnection) -> None:
        """A connection is gone (once; later calls do nothing)."""
        if conn in self.connections:
            self.connections.discard(conn)
            self.node.connections.discard(conn)
            self.node.connections.churn.connections_closed += 1
            gone = self._gone.pop(conn, None)
            if gone is not None:
                gone()

    async def listen(self) -> list[asyncio.Server]:
        """Bind the listening sockets without accepting yet (``start_serving`` does that).

        Raises:
            StartupError: the address is in use or cannot be bound, a TLS file is unusable, or no
                AMQP listener is configured.
        """
        if self._servers:
            return self._servers
        settings = self.settings
        self.prepare_tls()
        try:
            if settings.broker_port:
                self._servers.append(await self._create_server(settings.broker_port, None))
            if self.tls_context is not None:
                self._servers.append(await self._create_server(settings.ssl_port, self.tls_context))
        except OSError as exc:
            self.close()
            tls_failed = bool(self._servers) or not settings.broker_port
            field = "ssl_port" if tls_failed else "broker_port"
            port = getattr(settings, field)
            fix = f"set {env_name(field)} to a free port" if exc.errno == errno.EADDRINUSE else ""
            if settings.broker_host and exc.errno == errno.EADDRNOTAVAIL:
                raise StartupError("broker_host", settings.broker_host, os_cause(exc)) from None
            in_use = exc.errno == errno.EADDRINUSE
            raise StartupError(field, port, os_cause(exc), fix, in_use=in_use) from None
        return self._servers

    def prepare_tls(self) -> None:
        """Check the listener settings and read the AMQPS certificate files (before binding).

        Raises:
            StartupError: no AMQP listener is configured, or a TLS file is unusable.
        """
        settings = self.settings
        if not settings.broker_port and not settings.ssl:
            raise StartupError("broker_port", 0, "no AMQP listener", "set it, or OTTERMQ_SSL=true")
        if self.tls_context is None and settings.ssl:
            try:
                self.tls_context = amqps_context(settings)
            except TLSConfigError as exc:
                raise StartupError(exc.field, exc.value, exc.reason) from None

    async def _create_server(self, port: int, context: ssl.SSLContext | None) -> asyncio.Server:
        return await self.loop.create_server(
            lambda: AMQPConnection(self),
            host=self.settings.broker_host or None,
            port=port,
            reuse_address=True,
            backlog=1024,
            start_serving=False,
            ssl=context,
            ssl_handshake_timeout=self.settings.handshake_timeout if context is not None else None,
        )

    async def start_serving(self) -> None:
        """Accept connections on the bound sockets and start the consumer-timeout checks.

        Raises:
            StartupError: a port was lost to another process since ``listen``.
        """
        settings = self.settings
        try:
            for server in self._servers:
                await server.start_serving()
        except OSError as exc:  # listen() lost a race for the port to another process since bind
            raise StartupError(
                "broker_port", settings.broker_port, os_cause(exc), "set OTTERMQ_BROKER_PORT to a free port"
            ) from None
        self.ack_timeouts.start()

    def close(self) -> None:
        """Stop accepting (open connections stay)."""
        for server in self._servers:
            server.close()

    async def shutdown(self, timeout: float, reason: str = "shutdown") -> None:
        """Stop the checks, close every connection with 320 (``broker forced connection closure with
        reason '<reason>'``), wait for them to go, abort the rest."""
        self.ack_timeouts.stop()
        for conn in list(self.connections):
            conn.force_close(reason)
        deadline = self.loop.time() + timeout
        while self.connections and self.loop.time() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()

    def reload_tls(self) -> None:
        """SIGHUP: read the certificate files again; open connections keep their session."""
        if self.tls_context is not None:
            tls.reload(self.tls_context, amqps_files(self.settings))

    def addresses(self) -> list[tuple[str, int]]:
        """``(ip, port)`` of each AMQP listening socket (plain and TLS)."""
        return [(ip, port) for _protocol, ip, port in self.listeners()]

    def listeners(self) -> list[tuple[str, str, int]]:
        """``(protocol, ip, port)``: ``amqp`` and ``amqp/ssl`` listeners, as RabbitMQ names them."""
        out = []
        for server in self._servers:
            protocol = "amqp/ssl" if server is self._tls_server() else "amqp"
            # uvloop lists None for a listening socket whose handle it has closed (seen once, on a
            # machine under heavy load): the others are still reported, the caller does not crash
            alive = [s for s in server.sockets if s is not None]
            out += [(protocol, str(s.getsockname()[0]), int(s.getsockname()[1])) for s in alive]
        return out

    def _tls_server(self) -> asyncio.Server | None:
        return self._servers[-1] if self.tls_context is not None and self._servers else None
