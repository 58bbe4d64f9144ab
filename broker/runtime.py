"""Broker start-up, serving and graceful shutdown.

Start-up order (``serve``), so that a broker that cannot start leaves nothing behind:

1. read ``OTTERMQ_DEFINITIONS_FILE`` (read only);
2. bind the listening sockets, not yet accepting (``start_serving=False``): a port in use stops
   here, before anything exists on disk; the management API's port (``OTTERMQ_WEB_PORT``) and the
   Prometheus port (``OTTERMQ_PROMETHEUS_PORT``) too;
3. check ``OTTERMQ_DLX_ARCHIVE_DIR`` is writable (creating it), lock ``OTTERMQ_DATA_DIR`` (creating
   it);
4. open the store, import the definitions, seed the defaults, recover durable state;
5. start accepting connections, then serve the management API and the Prometheus metrics.

Every failure of 1-4 is a :class:`StartupError`: one line naming the setting, its value, the cause
and what to do (``cannot start: OTTERMQ_BROKER_PORT=5672: address already in use (...)``).
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import shutil
import signal
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ottermq.amqp.errors import NotAllowed
from ottermq.persistence.archive import NullArchive
from ottermq.persistence.memory import MemoryStore
from ottermq.persistence.store import Definitions, Store, StoreError, UserRecord
from ottermq.vhost.vhost import VHost

from . import VERSION
from .config import Settings, env_name
from .management import ManagementServer
from .management.policies import policy_of
from .management.prometheus import PrometheusServer
from .node import tls
from .node.auth import AuthDB
from .node.definitions import DefinitionsError, import_definitions, load_definitions_file
from .node.delayed import DedupPersistence, DelayService
from .node.limits import Limits
from .node.operations import Operations
from .node.recovery import recover
from .node.stats import Churn, MessageStats
from .node.tls import TLSConfigError, amqps_context, amqps_files, web_context, web_files
from .node.wiring import (
    Archive,
    make_call_at,
    make_hook,
    make_ttl_manager,
    make_vhost,
    open_store,
    shared_archive,
)
from .server.ack_timeout import AckTimeouts
from .server.connection import AMQPConnection
from .server.reply_to import ReplyRegistry
from .server.sasl import server_properties

log = logging.getLogger(__name__)


class StartupError(Exception):
    """The broker cannot start; ``str()`` is one line: ``SETTING=value: cause (what to do)``.

    Args:
        field: the ``Settings`` field at fault (``broker_port``).
        value: its value.
        cause: what went wrong, in a few words.
        fix: what to do about it (optional).
    """

    def __init__(self, field: str, value: object, cause: str, fix: str = "") -> None:
        self.setting = env_name(field)
        text = f"{self.setting}={'' if value is None else value}: {cause}"
        super().__init__(f"{text} ({fix})" if fix else text)


def os_cause(exc: OSError) -> str:
    """``[Errno 98] error while attempting to bind ...`` -> ``address already in use``."""
    if isinstance(exc, FileExistsError):  # mkdir on a file
        return "not a directory"
    if exc.errno:  # uvloop's strerror is a whole sentence
        return os.strerror(exc.errno).lower()
    return (exc.strerror or str(exc)).lower()


class Broker:
    """Process-wide state: settings, virtual hosts, live connections, the listening socket.

    Args:
        settings: the loaded configuration.
        loop: the running event loop.
        store: the store (default: a ``MemoryStore``).
        archive: the dead-letter archive (default: ``shared_archive(settings)``, which starts it).
    """

    def __init__(
        self,
        settings: Settings,
        loop: asyncio.AbstractEventLoop,
        store: Store | None = None,
        archive: Archive | None = None,
    ) -> None:
        self.settings = settings
        self.loop = loop
        self.ttl = make_ttl_manager(settings, loop)
        self.store: Store = store if store is not None else MemoryStore()
        self.hook = make_hook(self.store, self.ttl)
        self.auth = AuthDB(self.store, loopback_users=settings.loopback_users)
        # OTTERMQ_DLX_ARCHIVE_DIR, or a null archive
        self.archive = shared_archive(settings) if archive is None else archive
        self.vhosts: dict[str, VHost] = {}
        self.connections: set[AMQPConnection] = set()
        self.replies = ReplyRegistry()  # direct reply-to consumers, node-wide like RabbitMQ's
        # message counters of closed channels, node-wide and per vhost (broker/stats.py)
        self.retired_stats = MessageStats()
        self.churn = Churn()
        self.started_at = time.time()  # process_start_time_seconds
        self.retired_vhost_stats: dict[str, MessageStats] = {}
        self.server_properties: dict[str, Any] = server_properties(VERSION)
        self._servers: list[asyncio.Server] = []  # plain AMQP and/or AMQPS
        self.auth_attempts: dict[str, list[int]] = {}  # protocol -> [succeeded, failed]
        self.limits = Limits()  # vhost and user limits (broker/limits.py)
        # the one front door: every way in performs its operations through it (broker/operations.py)
        self.ops = Operations(self.auth, self.store, self.limits, self.apply_limits)
        self.tls_context: ssl.SSLContext | None = None
        self.web_tls_context: ssl.SSLContext | None = None
        self.web: ManagementServer | None = None  # OTTERMQ_ENABLE_WEB_API, bound by listen()
        self.prometheus: PrometheusServer | None = None  # OTTERMQ_ENABLE_PROMETHEUS, bound by listen()
        self.memory_limit = memory_limit(settings.memory_high_watermark)
        self.alarm = False  # the memory alarm
        self.disk_free_limit = disk_limit(settings)
        self.disk_alarm = False
        self.disk_free_probe: Callable[[], int | None] = self._disk_free  # tests put a fake one here
        self._memory_timer: asyncio.TimerHandle | None = None
        self.ack_timeouts = AckTimeouts(self)  # OTTERMQ_CONSUMER_TIMEOUT and per-queue ones
        # x-delayed-message exchanges and persistent deduplication caches (broker/delayed.py)
        self.delays = DelayService(self.vhosts, self.store, loop, self.ttl.now)
        self.dedup = DedupPersistence(self.store, self.ttl.now)

    def ensure_vhost(self, name: str) -> VHost:
        """The vhost called ``name``, created (and wired to the store) if missing."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = make_vhost(name, self.settings, self.ttl, self.archive)
            vhost.store = self.hook
            vhost.delayer = self.delays
            vhost.dedup_store = self.dedup
            vhost.call_at = make_call_at(self.loop, self.ttl.now)
        return vhost

    # -- memory alarm ---------------------------------------------------------------------
    def _load_policies(self, defs: Definitions) -> None:
        """Apply the stored policies to the recovered vhosts (a stored one that no longer validates is
        logged and skipped)."""
        for record in defs.policies:
            vhost = self.vhosts.get(record.vhost)
            if vhost is None:
                continue
            try:
                vhost.set_policy(policy_of(record))
            except ValueError as exc:  # PolicyError, or a definition that is no JSON object
                log.warning("ignoring stored policy '%s' in vhost '%s': %s", record.name, record.vhost, exc)

    def retire_stats(self, vhost: str, stats: MessageStats) -> None:
        """Keep a closing channel's counts in the node's and its vhost's totals."""
        self.retired_stats.add(stats)
        retired = self.retired_vhost_stats.get(vhost)
        if retired is None:
            retired = self.retired_vhost_stats[vhost] = MessageStats()
        retired.add(stats)

    def message_stats(self, vhost: str | None = None) -> MessageStats:
        """Message counts since start-up, node-wide or of one vhost: closed channels' and open ones'."""
        if vhost is None:
            retired = self.retired_stats
            conns = self.connections
        else:
            retired = self.retired_vhost_stats.get(vhost, MessageStats())
            conns = {c for c in self.connections if c.vhost is not None and c.vhost.name == vhost}
        return MessageStats.total([retired, *(ch.stats for c in conns for ch in c.channels.values())])

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
        self.check_disk()
        self._memory_timer = self.loop.call_later(1.0, self.check_memory)

    def set_alarm(self, on: bool) -> None:
        """Block (or unblock) publishing connections, as RabbitMQ's memory alarm does."""
        self.alarm = on
        self._block_publishers()

    # -- disk alarm -----------------------------------------------------------------------
    def _disk_free(self) -> int | None:
        try:
            return shutil.disk_usage(self.settings.data_dir).free
        except OSError:
            return None

    def check_disk(self) -> None:
        """Raise or clear the disk alarm from the free space where the data directory is (RabbitMQ's
        disk_free_limit); the memory timer calls it every second."""
        limit = self.disk_free_limit
        free = self.disk_free_probe() if limit else None
        if free is None:
            return
        if not self.disk_alarm and free < limit:
            log.warning(
                "disk alarm: %d bytes free on %s, limit %d; blocking publishers",
                free,
                self.settings.data_dir,
                limit,
            )
            self.disk_alarm = True
            self._block_publishers()
        elif self.disk_alarm and free >= limit:
            log.info("disk alarm cleared: %d bytes free", free)
            self.disk_alarm = False
            self._block_publishers()

    @property
    def alarm_reason(self) -> str | None:
        """Why publishers are blocked (``connection.blocked``'s reason), None when they are not."""
        if self.disk_alarm:
            return "low on disk"
        return "low on memory" if self.alarm else None

    def _block_publishers(self) -> None:
        reason = self.alarm_reason
        for conn in list(self.connections):
            conn.set_blocked(reason is not None, reason or "")

    def authenticate(
        self, username: str, password: str, peer_host: str, protocol: str = "amqp091"
    ) -> UserRecord | None:
        """Check credentials; loopback-only users are refused from other addresses. Counted by
        ``protocol`` (``amqp091``, ``http``) for ``rabbitmq_auth_attempts_*``."""
        return self._count_auth(protocol, self.auth.authenticate(username, password, peer_host))

    def authenticate_external(self, username: str | None, peer_host: str) -> UserRecord | None:
        """SASL EXTERNAL: the user named by a verified client certificate (None: no name in it)."""
        user = self.auth.authenticate_external(username, peer_host) if username else None
        return self._count_auth("amqp091", user)

    # -- limits -------------------------------------------------------------------------------
    def check_connection_limits(self, conn: AMQPConnection, vhost: str) -> None:
        """``connection.open``: the vhost's, then the user's connection limit (broker/limits.py).

        Raises:
            NotAllowed: a limit is reached (530, RabbitMQ's texts).
        """
        opened = [c for c in self.connections if c is not conn and c.vhost is not None]
        limit = self.limits.limit("vhost", vhost, "max-connections")
        if limit is not None and sum(1 for c in opened if c.vhost.name == vhost) >= limit:
            raise NotAllowed(
                f"access to vhost '{vhost}' refused for user '{conn.username}': connection limit"
                f" ({limit}) is reached"
            )
        limit = self.limits.limit("user", conn.username, "max-connections")
        if limit is not None and sum(1 for c in opened if c.username == conn.username) >= limit:
            raise NotAllowed(
                f"connection refused for user '{conn.username}': user connection limit ({limit}) is reached"
            )

    def user_channels(self, username: str) -> int:
        """Channels open on ``username``'s connections (the ``max-channels`` limit counts them all)."""
        return sum(len(c.channels) for c in self.connections if c.username == username)

    def apply_limits(self) -> None:
        """Give each vhost its ``max-queues`` limit (after recovery and on every change)."""
        for name, vhost in self.vhosts.items():
            vhost.max_queues = self.limits.limit("vhost", name, "max-queues")

    def _count_auth(self, protocol: str, user: UserRecord | None) -> UserRecord | None:
        counts = self.auth_attempts.setdefault(protocol, [0, 0])
        counts[0 if user is not None else 1] += 1
        return user

    async def listen(self) -> list[asyncio.Server]:
        """Bind the listening sockets without accepting yet (``start`` does that at the end): plain
        AMQP on ``OTTERMQ_BROKER_PORT`` (unless 0), AMQPS on ``OTTERMQ_SSL_PORT`` with ``OTTERMQ_SSL``.

        Raises:
            StartupError: the address is in use or cannot be bound, a TLS file is unusable, or no
                AMQP listener is configured.
        """
        if not self._servers:
            settings = self.settings
            if not settings.broker_port and not settings.ssl:
                raise StartupError("broker_port", 0, "no AMQP listener", "set it, or OTTERMQ_SSL=true")
            try:
                self.tls_context = amqps_context(settings) if settings.ssl else None
                self.web_tls_context = web_context(settings)
            except TLSConfigError as exc:
                raise StartupError(exc.field, exc.value, exc.reason) from None
            try:
                if settings.broker_port:
                    self._servers.append(await self._create_server(settings.broker_port, None))
                if self.tls_context is not None:
                    self._servers.append(await self._create_server(settings.ssl_port, self.tls_context))
            except OSError as exc:
                self.close_listeners()
                tls_failed = bool(self._servers) or not settings.broker_port
                field = "ssl_port" if tls_failed else "broker_port"
                port = getattr(settings, field)
                fix = f"set {env_name(field)} to a free port" if exc.errno == errno.EADDRINUSE else ""
                if settings.broker_host and exc.errno == errno.EADDRNOTAVAIL:
                    raise StartupError("broker_host", settings.broker_host, os_cause(exc)) from None
                raise StartupError(field, port, os_cause(exc), fix) from None
            if settings.enable_web_api:
                self.web = ManagementServer(self)
                try:
                    self.web.bind()
                except OSError as exc:
                    self.close_listeners()
                    raise web_startup_error(settings, exc) from None
            if settings.enable_prometheus:
                self.prometheus = PrometheusServer(self)
                try:
                    self.prometheus.bind()
                except OSError as exc:
                    self.close_listeners()
                    if self.web is not None:
                        self.web.close_sockets()
                    raise prometheus_startup_error(settings, exc) from None
        return self._servers

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

    def close_listeners(self) -> None:
        for server in self._servers:
            server.close()

    def reload_tls(self) -> None:
        """SIGHUP: read the certificate files again; open connections keep their session."""
        settings = self.settings
        if self.tls_context is not None:
            tls.reload(self.tls_context, amqps_files(settings))
        if self.web_tls_context is not None:
            tls.reload(self.web_tls_context, web_files(settings))

    def amqp_addresses(self) -> list[tuple[str, int]]:
        """``(ip, port)`` of each AMQP listening socket (plain and TLS)."""
        return [
            (str(s.getsockname()[0]), int(s.getsockname()[1]))
            for server in self._servers
            for s in server.sockets
        ]

    def amqp_listeners(self) -> list[tuple[str, str, int]]:
        """``(protocol, ip, port)``: ``amqp`` and ``amqp/ssl`` listeners, as RabbitMQ names them."""
        out = []
        for server in self._servers:
            protocol = "amqp/ssl" if server is self._tls_server() else "amqp"
            out += [(protocol, str(s.getsockname()[0]), int(s.getsockname()[1])) for s in server.sockets]
        return out

    def _tls_server(self) -> asyncio.Server | None:
        return self._servers[-1] if self.tls_context is not None and self._servers else None

    def web_addresses(self) -> list[tuple[str, int]]:
        """``(ip, port)`` of each management API socket (none when disabled)."""
        return self.web.addresses() if self.web is not None else []

    def web_listeners(self) -> list[tuple[str, str, int]]:
        """``(protocol, ip, port)`` of the management listener: ``http`` and/or ``https``."""
        return self.web.listeners() if self.web is not None else []

    async def start(self, definitions: Definitions | None = None) -> None:
        """Bind (if ``listen`` was not called), open the store, import ``definitions`` (default:
        read ``OTTERMQ_DEFINITIONS_FILE``), recover durable state, then accept connections.

        Raises:
            StartupError: the port, the data dir or the definitions file is unusable.
        """
        settings = self.settings
        servers = await self.listen()
        if definitions is None and settings.definitions_file is not None:
            definitions = read_definitions(settings)
        try:
            await self.store.open()
            if definitions is not None:
                await import_definitions(self.store, definitions)
                log.info("imported definitions from %s", settings.definitions_file)
            defs = await self.store.load_definitions()
            self.auth.load(defs)
            if self.auth.seed_defaults(settings):
                log.info("first start: created user '%s' and vhosts %s", settings.username, settings.vhosts)
            elif "password" in settings.model_fields_set and self.auth.password_differs(
                settings.username, settings.password
            ):
                log.warning(
                    "OTTERMQ_PASSWORD is not the stored password of user '%s' and is ignored: the default"
                    " user is created at the first start only (see README 'Changing a password')",
                    settings.username,
                )
            await self.store.flush()
        except StoreError as exc:
            raise StartupError("data_dir", settings.data_dir, str(exc)) from None
        except DefinitionsError as exc:
            raise StartupError("definitions_file", settings.definitions_file, str(exc)) from None
        for name in self.auth.vhosts:
            self.ensure_vhost(name)
        await recover(self, self.store, self.hook)
        self._load_policies(defs)
        self.limits.load(defs.limits)
        self.apply_limits()
        try:
            for server in servers:
                await server.start_serving()
        except OSError as exc:  # listen() lost a race for the port to another process since bind
            raise StartupError(
                "broker_port", settings.broker_port, os_cause(exc), "set OTTERMQ_BROKER_PORT to a free port"
            ) from None
        addresses = ", ".join(
            f"{ip}:{port}" + (" (TLS)" if proto == "amqp/ssl" else "")
            for proto, ip, port in self.amqp_listeners()
        )
        log.info("OtterMQ %s listening on %s", VERSION, addresses)
        if self.web is not None:
            await self.web.start()
        if self.prometheus is not None:
            await self.prometheus.start()
        self.check_memory()
        self.ack_timeouts.start()

    async def shutdown(self, timeout: float = 5.0) -> None:
        """Stop accepting, close every connection with 320, wait for them to go."""
        self.close_listeners()
        if self.web is not None:
            await self.web.stop()
        if self.prometheus is not None:
            await self.prometheus.stop()
        if self._memory_timer is not None:
            self._memory_timer.cancel()
        self.ack_timeouts.stop()
        self.delays.stop()
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


def web_startup_error(settings: Settings, exc: OSError) -> StartupError:
    """The one-line start-up error for a management API address that cannot be bound."""
    if exc.errno == errno.EADDRINUSE:
        fix = "set OTTERMQ_WEB_PORT to a free port, or OTTERMQ_ENABLE_WEB_API=false"
        return StartupError("web_port", settings.web_port, os_cause(exc), fix)
    if settings.web_host or settings.broker_host:  # unknown or foreign address
        field = "web_host" if settings.web_host else "broker_host"
        return StartupError(field, settings.web_host or settings.broker_host, os_cause(exc))
    return StartupError("web_port", settings.web_port, os_cause(exc))


def prometheus_startup_error(settings: Settings, exc: OSError) -> StartupError:
    """The one-line start-up error for a metrics address that cannot be bound."""
    if exc.errno == errno.EADDRINUSE:
        fix = "set OTTERMQ_PROMETHEUS_PORT to a free port, or OTTERMQ_ENABLE_PROMETHEUS=false"
        return StartupError("prometheus_port", settings.prometheus_port, os_cause(exc), fix)
    if settings.web_host or settings.broker_host:
        field = "web_host" if settings.web_host else "broker_host"
        return StartupError(field, settings.web_host or settings.broker_host, os_cause(exc))
    return StartupError("prometheus_port", settings.prometheus_port, os_cause(exc))


def memory_limit(watermark: float) -> int:
    """Bytes allowed before the memory alarm: a fraction of physical RAM, or bytes if > 1."""
    if watermark > 1:
        return int(watermark)
    return int(physical_memory() * watermark)


def disk_limit(settings: Settings) -> int:
    """Free bytes the disk alarm keeps: ``disk_free_limit_relative`` x RAM, else ``disk_free_limit``."""
    if settings.disk_free_limit_relative is not None:
        return int(physical_memory() * settings.disk_free_limit_relative)
    return settings.disk_free_limit


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 * 1024**3


def process_rss() -> int | None:
    """Resident set size of this process in bytes (None where /proc is unavailable)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def lock_data_dir(data_dir: Path) -> int:
    """Take an exclusive lock on the data dir (created if missing) so two brokers never share one
    store.

    Raises:
        StoreError: another process holds the lock.
        OSError: the directory cannot be created or written (a file, no permission).
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StoreError(f"data dir {data_dir} is {_in_use(data_dir)}") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


def _in_use(data_dir: Path) -> str:
    """``in use by another OtterMQ process (pid N)``: the holder writes its pid into ``.lock``."""
    try:
        holder = (data_dir / ".lock").read_text("ascii", "replace").strip()
    except OSError:
        holder = ""
    return "in use by another OtterMQ process" + (f" (pid {holder})" if holder.isdigit() else "")


def prepare_data_dir(settings: Settings) -> int | None:
    """Lock ``OTTERMQ_DATA_DIR`` (sqlite store only); returns the lock's descriptor.

    Raises:
        StartupError: the directory is a file, not writable, or in use.
    """
    if settings.store != "sqlite":
        return None
    try:
        return lock_data_dir(settings.data_dir)
    except StoreError:
        raise StartupError(
            "data_dir",
            settings.data_dir,
            _in_use(settings.data_dir),
            "stop it, or set OTTERMQ_DATA_DIR to another directory",
        ) from None
    except OSError as exc:
        raise StartupError(
            "data_dir", settings.data_dir, os_cause(exc), "set OTTERMQ_DATA_DIR to a writable directory"
        ) from None


def check_archive_dir(settings: Settings) -> None:
    """Create ``OTTERMQ_DLX_ARCHIVE_DIR`` if missing and check a file can be written there.

    Raises:
        StartupError: it cannot.
    """
    directory = settings.dlx_archive_dir
    if directory is None:
        return
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise StartupError(
            "dlx_archive_dir",
            directory,
            os_cause(exc),
            "set OTTERMQ_DLX_ARCHIVE_DIR to a writable directory, or empty for no archive",
        ) from None


def read_definitions(settings: Settings) -> Definitions | None:
    """Parse ``OTTERMQ_DEFINITIONS_FILE`` (None when unset); reads only.

    Raises:
        StartupError: missing, unreadable or invalid file.
    """
    path = settings.definitions_file
    if path is None:
        return None
    try:
        return load_definitions_file(path)
    except DefinitionsError as exc:
        cause = str(exc)
        if isinstance(exc.__context__, OSError):
            cause = os_cause(exc.__context__)
        raise StartupError("definitions_file", path, cause) from None


async def serve(settings: Settings) -> None:
    """Run the broker until SIGTERM/SIGINT; a second signal exits at once.

    Raises:
        StartupError: the broker cannot start (see the module rules); nothing was served.
    """
    loop = asyncio.get_running_loop()
    # Handlers first: the port accepts connections (and clients may signal) before start-up ends;
    # a signal during start-up stops the broker gracefully once it has started.
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("second signal: exiting now without flushing")
            os._exit(1)
        log.info("received %s: shutting down", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    reload_tls: list[Callable[[], None]] = []  # SIGHUP: TLS files read again, once the broker exists
    loop.add_signal_handler(signal.SIGHUP, lambda: [f() for f in reload_tls])
    definitions = read_definitions(settings)
    # Constructing the broker and its store touches no file; the archive starts once checked.
    broker = Broker(settings, loop, open_store(settings), archive=NullArchive())
    await broker.listen()
    reload_tls.append(broker.reload_tls)
    try:
        check_archive_dir(settings)  # before the data dir: a failure here leaves no store behind
        prepare_data_dir(settings)
        broker.archive = shared_archive(settings)
        await broker.start(definitions)
    except BaseException:
        broker.close_listeners()
        if broker.web is not None:
            await broker.web.stop()
        if broker.prometheus is not None:
            await broker.prometheus.stop()
        raise
    await stop.wait()
    await broker.shutdown()
