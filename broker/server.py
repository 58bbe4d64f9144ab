"""Broker start-up, serving and graceful shutdown."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import signal
from typing import Any

from ottermq.vhost.vhost import VHost

from .config import Settings
from .connection import AMQPConnection, is_loopback, server_properties
from .wiring import make_ttl_manager, make_vhost

log = logging.getLogger(__name__)

VERSION = "0.1.0"


class Broker:
    """Process-wide state: settings, virtual hosts, live connections, the listening socket.

    Args:
        settings: the loaded configuration.
        loop: the running event loop.
    """

    def __init__(self, settings: Settings, loop: asyncio.AbstractEventLoop) -> None:
        self.settings = settings
        self.loop = loop
        self.ttl = make_ttl_manager(settings, loop)
        self.vhosts: dict[str, VHost] = {
            name: make_vhost(name, settings, self.ttl) for name in settings.vhosts
        }
        self.connections: set[AMQPConnection] = set()
        self.server_properties: dict[str, Any] = server_properties(VERSION)
        self._server: asyncio.AbstractServer | None = None
        self.memory_limit = memory_limit(settings.memory_high_watermark)
        self.alarm = False
        self._memory_timer: asyncio.TimerHandle | None = None

    # -- memory alarm ---------------------------------------------------------------------
    def check_memory(self) -> None:
        """Raise or clear the memory alarm from the process RSS; re-arms itself every second."""
        used = process_rss()
        if used is not None:
            if not self.alarm and used > self.memory_limit:
                log.warning(
                    "memory alarm: %d bytes used, limit %d; blocking publishers", used, self.memory_limit
                )
                self.set_alarm(True)
            elif self.alarm and used <= self.memory_limit:
                log.info("memory alarm cleared: %d bytes used", used)
                self.set_alarm(False)
        self._memory_timer = self.loop.call_later(1.0, self.check_memory)

    def set_alarm(self, on: bool) -> None:
        """Block (or unblock) publishing connections, as RabbitMQ's memory alarm does."""
        self.alarm = on
        for conn in list(self.connections):
            conn.set_blocked(on, "low on memory")

    def authenticate(self, username: str, password: str, peer_host: str) -> bool:
        """Check credentials; loopback-only users are refused from other addresses."""
        settings = self.settings
        ok = hmac.compare_digest(username.encode(), settings.username.encode()) and hmac.compare_digest(
            password.encode(), settings.password.encode()
        )
        if ok and username in settings.loopback_users and not is_loopback(peer_host):
            log.warning("user '%s' can only connect via localhost", username)
            return False
        return ok

    async def start(self) -> None:
        host = self.settings.broker_host or None
        self._server = await self.loop.create_server(
            lambda: AMQPConnection(self),
            host=host,
            port=self.settings.broker_port,
            reuse_address=True,
            backlog=1024,
        )
        addresses = ", ".join(
            f"{s.getsockname()[0]}:{s.getsockname()[1]}" for s in self._server.sockets
        )
        log.info("OtterMQ %s listening on %s", VERSION, addresses)
        self.check_memory()

    async def shutdown(self, timeout: float = 5.0) -> None:
        """Stop accepting, close every connection with 320, wait for them to go."""
        if self._server is not None:
            self._server.close()
        if self._memory_timer is not None:
            self._memory_timer.cancel()
        for conn in list(self.connections):
            conn.force_close("shutdown")
        deadline = self.loop.time() + timeout
        while self.connections and self.loop.time() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        log.info("OtterMQ stopped")


def memory_limit(watermark: float) -> int:
    """Bytes allowed before the memory alarm: a fraction of physical RAM, or bytes if > 1."""
    if watermark > 1:
        return int(watermark)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        total = 8 * 1024**3
    return int(total * watermark)


def process_rss() -> int | None:
    """Resident set size of this process in bytes (None where /proc is unavailable)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


async def serve(settings: Settings) -> None:
    """Run the broker until SIGTERM/SIGINT; a second signal exits at once."""
    loop = asyncio.get_running_loop()
    broker = Broker(settings, loop)
    await broker.start()
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("second signal: exiting now")
            raise SystemExit(1)
        log.info("received %s: shutting down", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    await stop.wait()
    await broker.shutdown()
