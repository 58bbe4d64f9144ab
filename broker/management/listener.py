"""An aiohttp listener in the broker process: ``bind`` claims the port at start-up (before anything
is on disk), ``start`` serves once the broker is ready, ``stop`` closes it. The management API and
the Prometheus endpoint are each one of these."""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from ..server import Broker

log = logging.getLogger(__name__)


class HTTPListener:
    """One HTTP port of the broker, on ``OTTERMQ_WEB_HOST`` (or the broker's host).

    Args:
        broker: the broker whose state the app shows.
        port: the port to bind.
        path: the path announced in the log line.
        what: what is served, for the log line.
        make_app: builds the aiohttp application from the broker.
        tls_port, tls_context: an HTTPS port served with the same app (``OTTERMQ_WEB_SSL``).
    """

    def __init__(
        self,
        broker: Broker,
        port: int,
        path: str,
        what: str,
        make_app: Callable[[Broker], web.Application],
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

    @property
    def host(self) -> str:
        settings = self.broker.settings
        return settings.web_host or settings.broker_host

    def bind(self) -> None:
        """Bind and listen without serving yet: ``port`` (plain HTTP) and, with a TLS context,
        ``tls_port`` (HTTPS).

        Raises:
            OSError: an address is in use or cannot be bound.
        """
        self.sockets, self._tls = [], set()
        try:
            self.sockets.append(self._bind(self.port))
            if self.tls_context is not None and self.tls_port is not None:
                sock = self._bind(self.tls_port)
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
        runner = web.AppRunner(self.make_app(self.broker), access_log=None, handle_signals=False)
        await runner.setup()
        self._runner = runner
        for sock in self.sockets:
            context = self.tls_context if sock.fileno() in self._tls else None
            await web.SockSite(runner, sock, ssl_context=context).start()
        urls = ", ".join(f"{scheme}://{f'[{ip}]' if ':' in ip else ip}:{port}{self.path}"
                         for scheme, ip, port in self.listeners())  # fmt: skip
        log.info("%s on %s", self.what, urls)

    def close_sockets(self) -> None:
        for sock in self.sockets:
            sock.close()

    async def stop(self) -> None:
        """Stop serving and close the sockets."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.close_sockets()
