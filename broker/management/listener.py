"""An aiohttp listener in the broker process: ``bind`` claims the port at start-up (before anything
is on disk), ``start`` serves once the broker is ready, ``stop`` closes it. The management API and
the Prometheus endpoint are each one of these: a plain HTTP port, an HTTPS port, or both (a plain
port of 0 in the settings means none: HTTPS only).

Rules (every port of a listener, plain and HTTPS; the settings are ``OTTERMQ_WEB_*``):

- The listener accepts connections itself (``loop.sock_accept``) and hands each to aiohttp's
  protocol (``AppRunner.server``) with ``loop.connect_accepted_socket``, so it counts sockets from
  the moment they are accepted, TLS handshakes in progress included.
- ``MAX_CONNECTIONS``: with that many connections open, a new one is refused at once: on a plain
  port it gets a fixed ``503`` (RabbitMQ's JSON error shape, ``Connection: close``) and is closed; on
  an HTTPS port it is closed before any handshake, so a flood costs no TLS work.
- ``MAX_CONNECTIONS_PER_ADDRESS`` (0: none): with that many connections open from one client IP
  address, a new one from it is refused the same way, so one address (260 half-open sockets, say)
  cannot take every place and starve the others. Both counts cover all ports of the listener.
- ``HEADER_TIMEOUT``: from its accept, a connection has this long to finish its TLS handshake (if
  any) and the head of its first request (the blank line after the headers). Late, it gets
  ``408 Request Timeout`` and is closed if it sent anything, else it is closed silently (cowboy, under
  RabbitMQ's management API, does the same).
- ``IDLE_TIMEOUT`` is aiohttp's ``keepalive_timeout``: a connection that has not delivered a whole
  request that long after its previous answer (a half-sent next head included) is closed.
- Bodies are bounded by aiohttp's own limits; the time a client takes to send one is not.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from ..node.view import NodeView

log = logging.getLogger(__name__)

# Answers written by the listener itself, before aiohttp has a request (the API's own headers)
_SAFE_HEADERS = b"Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n"
_BUSY_BODY = json.dumps(
    {"error": "service_unavailable", "reason": "too many HTTP connections"}, separators=(",", ":")
).encode()
OVER_CAPACITY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    + _SAFE_HEADERS
    + b"Content-Length: %d\r\n\r\n" % len(_BUSY_BODY)
    + _BUSY_BODY
)
REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\n" + _SAFE_HEADERS + b"Content-Length: 0\r\n\r\n"
# accept() failures that mean "out of resources for now": wait and try again (as asyncio's own servers)
_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_RETRY = 1.0
_FULL_LOG_EVERY = 60.0


@dataclass(frozen=True)
class Limits:
    """What one listener allows its clients (see the module rules)."""

    header_timeout: float = 10.0
    idle_timeout: float = 15.0
    max_connections: int = 256
    max_per_address: int = 32  # 0: no per-address cap


def head_complete(tail: bytes, data: bytes) -> tuple[bool, bytes]:
    """Whether the blank line that ends a request head is in ``tail + data``.

    Lenient on purpose (a bare ``\\n\\n`` counts, as aiohttp's parser may accept it): a head seen too
    early only leaves the connection to the idle timeout, a head missed would cut a served request.

    Args:
        tail: the last bytes of what came before (at most 3, as returned by the previous call).
        data: what has just arrived.

    Returns:
        ``(complete, tail)``: the tail to pass with the next data.
    """
    window = tail + data
    return b"\n\n" in window.replace(b"\r", b""), window[-3:]


class GuardedProtocol(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind the header deadline; ``release`` is called once
    when the connection ends.

    Args:
        inner: the protocol that serves HTTP (``AppRunner.server()``); it gets the real transport.
        deadline: loop time by which the first request head must be complete.
        release: frees the connection's place under the cap.
    """

    def __init__(self, inner: asyncio.Protocol, deadline: float, release: Callable[[], None]) -> None:
        self._inner = inner
        self._deadline = deadline
        self._release = release
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tail = b""
        self._waiting = True  # for the end of the first head
        self._sent_anything = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # a stream transport (uvloop's too)
        self._timer = asyncio.get_running_loop().call_at(self._deadline, self._head_late)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._waiting:
            self._sent_anything = True
            done, self._tail = head_complete(self._tail, data)
            if done:
                self._waiting = False
                self._cancel_timer()
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self._release()
        self._inner.connection_lost(exc)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_late(self) -> None:
        self._timer = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        log.debug("HTTP client %s: no complete request head in time", transport.get_extra_info("peername"))
        if self._sent_anything:
            transport.write(REQUEST_TIMEOUT)
        if transport.get_write_buffer_size():
            transport.abort()  # a client that does not read gets no time
        else:
            transport.close()


def refuse(conn: socket.socket, tls: bool) -> None:
    """Close an accepted socket over the cap: a 503 first on a plain port (what the client has
    already sent is read first, so closing does not reset the answer away); nothing on a TLS one."""
    try:
        if not tls:
            conn.setblocking(False)
            try:
                conn.recv(65536)
            except BlockingIOError:
                pass
            conn.send(OVER_CAPACITY)
            conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        conn.close()


class HTTPListener:
    """One HTTP port of the broker, on ``OTTERMQ_WEB_HOST`` (or the broker's host).

    Args:
        broker: the broker whose state the app shows.
        port: the plain HTTP port to bind (0: any free one); None: no plain HTTP port.
        path: the path announced in the log line.
        what: what is served, for the log line.
        make_app: builds the aiohttp application from the broker.
        tls_port, tls_context: an HTTPS port served with the same app (``OTTERMQ_WEB_SSL``).
    """

    def __init__(
        self,
        broker: NodeView,
        port: int | None,
        path: str,
        what: str,
        make_app: Callable[[NodeView], web.Application],
        tls_port: int | None = None,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.broker = broker
        self.port = port
        self.tls_port = tls_port
        self.tls_context = tls_context
        self._tls: set[int] = set()  # file numbers of the HTTPS sockets
        self.path = path
        self.what = what
        self.make_app = make_app
        self.sockets: list[socket.socket] = []
        self._runner: web.AppRunner | None = None
        settings = broker.settings
        self.limits = Limits(
            settings.web_header_timeout,
            settings.web_idle_timeout,
            settings.web_max_connections,
            settings.web_max_connections_per_address,
        )
        self.open_connections = 0  # accepted and not yet closed, handshakes included
        self.by_address: dict[str, int] = {}  # the same, per client IP address (none at 0)
        self._tasks: set[asyncio.Task[None]] = set()
        self._full_logged = float("-inf")
        self._address_full_logged = float("-inf")
        self.failed_on_tls = False  # the last bind failed on the HTTPS port (not the plain one)

    @property
    def host(self) -> str:
        settings = self.broker.settings
        return settings.web_host or settings.broker_host

    def bind(self) -> None:
        """Bind and listen without serving yet: ``port`` (plain HTTP; not when None) and, with a TLS
        context, ``tls_port`` (HTTPS).

        Raises:
            OSError: an address is in use or cannot be bound (``failed_on_tls`` says which).
        """
        self.sockets, self._tls = [], set()
        self.failed_on_tls = False
        try:
            if self.port is not None:
                self.sockets.append(self._bind(self.port))
            if self.tls_context is not None and self.tls_port is not None:
                self.failed_on_tls = True
                sock = self._bind(self.tls_port)
                self.failed_on_tls = False
                self.sockets.append(sock)
                self._tls.add(sock.fileno())
        except OSError:
            self.close_sockets()
            raise

    def _bind(self, port: int) -> socket.socket:
        if self.host:
            sock = socket.create_server((self.host, port), backlog=128)
        elif socket.has_dualstack_ipv6():
            sock = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=128)
        else:  # pragma: no cover - hosts without IPv6
            sock = socket.create_server(("", port), backlog=128)
        sock.setblocking(False)
        return sock

    def addresses(self) -> list[tuple[str, int]]:
        """``(ip, port)`` of each bound socket."""
        return [(ip, port) for _scheme, ip, port in self.listeners()]

    def listeners(self) -> list[tuple[str, str, int]]:
        """``(scheme, ip, port)`` of each bound socket: ``http`` or ``https``."""
        out = []
        for sock in self.sockets:
            ip, port = sock.getsockname()[:2]
            out.append(("https" if sock.fileno() in self._tls else "http", str(ip), int(port)))
        return out

    async def start(self) -> None:
        """Serve on the bound sockets."""
        runner = web.AppRunner(
            self.make_app(self.broker),
            access_log=None,
            handle_signals=False,
            keepalive_timeout=self.limits.idle_timeout,
        )
        await runner.setup()
        self._runner = runner
        for sock in self.sockets:
            context = self.tls_context if sock.fileno() in self._tls else None
            self._spawn(self._accept(sock, context))
        log.info("%s on %s", self.what, self.urls(self.path))

    def urls(self, path: str) -> str:
        """``http://127.0.0.1:15672/api, https://...``: ``path`` on each bound socket."""
        return ", ".join(
            f"{scheme}://{f'[{ip}]' if ':' in ip else ip}:{port}{path}"
            for scheme, ip, port in self.listeners()
        )

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, sock: socket.socket, context: ssl.SSLContext | None) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, address = await loop.sock_accept(sock)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue
            except OSError as exc:
                level = logging.ERROR if exc.errno in _RESOURCE_ERRORS else logging.WARNING
                log.log(
                    level,
                    "%s: accepting a connection failed (%s); retrying in %.0f s",
                    self.what,
                    exc,
                    _ACCEPT_RETRY,
                )
                await asyncio.sleep(_ACCEPT_RETRY)
                continue
            ip = str(address[0]) if isinstance(address, tuple) else str(address)
            if self.open_connections >= self.limits.max_connections:
                self._log_full(loop.time())
                refuse(conn, context is not None)
                continue
            if 0 < self.limits.max_per_address <= self.by_address.get(ip, 0):
                self._log_address_full(loop.time(), ip)
                refuse(conn, context is not None)
                continue
            self.open_connections += 1
            self.by_address[ip] = self.by_address.get(ip, 0) + 1
            self._spawn(self._serve(conn, context, loop.time() + self.limits.header_timeout, ip))

    async def _serve(
        self, conn: socket.socket, context: ssl.SSLContext | None, deadline: float, ip: str
    ) -> None:
        """Hand an accepted socket to aiohttp behind the header deadline (a TLS handshake within it)."""
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.open_connections -= 1
                left = self.by_address[ip] - 1
                if left:
                    self.by_address[ip] = left
                else:
                    del self.by_address[ip]

        runner = self._runner
        if runner is None or runner.server is None:
            release()
            conn.close()
            return
        server = runner.server
        loop = asyncio.get_running_loop()
        handshake = max(deadline - loop.time(), 0.001) if context is not None else None
        try:
            await loop.connect_accepted_socket(
                lambda: GuardedProtocol(server(), deadline, release),
                conn,
                ssl=context,
                ssl_handshake_timeout=handshake,
            )
        except Exception as exc:  # a failed or slow TLS handshake: the client's problem
            log.debug("%s: connection not set up: %r", self.what, exc)
            release()
        except BaseException:
            release()
            raise

    def _log_full(self, now: float) -> None:
        if now - self._full_logged >= _FULL_LOG_EVERY:
            self._full_logged = now
            log.warning(
                "%s: %d HTTP connections open (OTTERMQ_WEB_MAX_CONNECTIONS); refusing new ones",
                self.what,
                self.limits.max_connections,
            )

    def _log_address_full(self, now: float, ip: str) -> None:
        if now - self._address_full_logged >= _FULL_LOG_EVERY:
            self._address_full_logged = now
            log.warning(
                "%s: %d HTTP connections open from %s (OTTERMQ_WEB_MAX_CONNECTIONS_PER_ADDRESS); refusing"
                " new ones from it",
                self.what,
                self.limits.max_per_address,
                ip,
            )

    def close_sockets(self) -> None:
        for sock in self.sockets:
            sock.close()

    async def stop(self) -> None:
        """Stop accepting, close the connections (aiohttp lets running requests finish) and the sockets."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.close_sockets()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
