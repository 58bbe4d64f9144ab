"""Broker start-up, serving and graceful shutdown."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
from pathlib import Path
from typing import Any

from ottermq.persistence.hook import DurableHook
from ottermq.persistence.memory import MemoryStore
from ottermq.persistence.sqlite import SQLiteStore
from ottermq.persistence.store import Store, StoreError, UserRecord
from ottermq.vhost.vhost import VHost

from .auth import AuthDB
from .config import Settings
from .connection import AMQPConnection, server_properties
from .definitions import import_definitions, load_definitions_file
from .recovery import recover
from .reply_to import ReplyRegistry
from .wiring import make_ttl_manager, make_vhost, shared_archive

log = logging.getLogger(__name__)

VERSION = "0.1.0"


class Broker:
    """Process-wide state: settings, virtual hosts, live connections, the listening socket.

    Args:
        settings: the loaded configuration.
        loop: the running event loop.
    """

    def __init__(
        self, settings: Settings, loop: asyncio.AbstractEventLoop, store: Store | None = None
    ) -> None:
        self.settings = settings
        self.loop = loop
        self.ttl = make_ttl_manager(settings, loop)
        self.store: Store = store if store is not None else MemoryStore()
        self.hook = DurableHook(self.store, self.ttl.now)
        self.auth = AuthDB(self.store, loopback_users=settings.loopback_users)
        self.archive = shared_archive(settings)  # OTTERMQ_DLX_ARCHIVE_DIR, or a null archive
        self.vhosts: dict[str, VHost] = {}
        self.connections: set[AMQPConnection] = set()
        self.replies = ReplyRegistry()  # direct reply-to consumers, node-wide like RabbitMQ's
        self.server_properties: dict[str, Any] = server_properties(VERSION)
        self._server: asyncio.AbstractServer | None = None
        self.memory_limit = memory_limit(settings.memory_high_watermark)
        self.alarm = False
        self._memory_timer: asyncio.TimerHandle | None = None

    def ensure_vhost(self, name: str) -> VHost:
        """The vhost called ``name``, created (and wired to the store) if missing."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = make_vhost(name, self.settings, self.ttl, self.archive)
            vhost.store = self.hook
        return vhost

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

    def authenticate(self, username: str, password: str, peer_host: str) -> UserRecord | None:
        """Check credentials; loopback-only users are refused from other addresses."""
        return self.auth.authenticate(username, password, peer_host)

    async def start(self) -> None:
        """Open the store, recover durable state, then listen."""
        await self.store.open()
        if self.settings.definitions_file is not None:
            await import_definitions(self.store, load_definitions_file(self.settings.definitions_file))
            log.info("imported definitions from %s", self.settings.definitions_file)
        defs = await self.store.load_definitions()
        self.auth.load(defs)
        if self.auth.seed_defaults(self.settings):
            log.info(
                "first start: created user '%s' and vhosts %s", self.settings.username, self.settings.vhosts
            )
        await self.store.flush()
        for name in self.auth.vhosts:
            self.ensure_vhost(name)
        await recover(self, self.store, self.hook)
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
        await self.store.close()  # commits what is pending: nothing confirmed is lost
        await self.archive.close()  # writes buffered dead-letter records, finishes .part files
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


def open_store(settings: Settings) -> Store:
    """The configured store: SQLite under ``OTTERMQ_DATA_DIR`` (default) or memory."""
    if settings.store == "memory":
        return MemoryStore()
    return SQLiteStore(settings.data_dir / "ottermq.db", synchronous=settings.sync.upper())


def lock_data_dir(data_dir: Path) -> int:
    """Take an exclusive lock on the data dir so two brokers never share one store.

    Raises:
        StoreError: another process holds the lock.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StoreError(f"data dir {data_dir} is in use by another OtterMQ process") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


async def serve(settings: Settings) -> None:
    """Run the broker until SIGTERM/SIGINT; a second signal exits at once."""
    loop = asyncio.get_running_loop()
    if settings.store == "sqlite":
        lock_data_dir(settings.data_dir)
    broker = Broker(settings, loop, open_store(settings))
    await broker.start()
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("second signal: exiting now without flushing")
            os._exit(1)
        log.info("received %s: shutting down", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    await stop.wait()
    await broker.shutdown()
