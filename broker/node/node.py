"""One broker node's state and services, without its network listeners.

``Node`` holds the settings, the store, the virtual hosts, users and permissions (``auth``), limits,
the operations layer (``ops``), the message statistics, the memory and disk alarms, delayed delivery
and deduplication persistence, and the registry of open connections, which it sees only through
``ottermq.broker.node.info`` (``ConnectionHandle``). The AMQP server registers its connections
here; the management plugin reads the node; ``ottermq.broker.runtime`` builds and starts it all.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Callable

from ottermq.amqp.errors import AMQPError, NotAllowed
from ottermq.persistence.lease import Lease
from ottermq.persistence.memory import MemoryStore
from ottermq.persistence.spill import SpillDir
from ottermq.persistence.store import Definitions, Store, StoreError, UserRecord
from ottermq.vhost.paging import Paging
from ottermq.vhost.policy import PolicyError
from ottermq.vhost.vhost import VHost

from ..config import Settings
from .auth import AuthDB, AuthError
from .definitions import DefinitionsError, Restore, apply_definitions
from .delayed import DedupPersistence, DelayService
from .heap import HeapTrimmer
from .info import ConnectionHandle, WorkerPool
from .limits import LimitError, Limits
from .looplag import LoopMonitor
from .operations import Operations
from .recovery import recover
from .startup import StartupError
from .stats import Churn, MessageStats
from .wiring import (
    Archive,
    make_call_at,
    make_hook,
    make_ttl_manager,
    make_vhost,
    shared_archive,
    store_setting,
)

log = logging.getLogger(__name__)

Listing = Callable[[], list[tuple[str, str, int]]]  # () -> [(protocol, ip, port)]


class Node:
    """Process-wide state and services (see the module docstring).

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
        # backlogs larger than memory: queues page to this process's spill directory (vhost/paging.py)
        self.spill = SpillDir(settings.spill_dir or settings.data_dir / "spill")
        self.paging = (
            Paging(self.spill.pager, settings.queue_window, settings.queue_window_bytes)
            if settings.paging
            else None
        )
        self.connections: set[ConnectionHandle] = set()  # open AMQP connections (the server's)
        # message counters of closed channels, node-wide and per vhost (broker/node/stats.py)
        self.retired_stats = MessageStats()
        self.churn = Churn()
        self.started_at = time.time()  # process_start_time_seconds
        self.retired_vhost_stats: dict[str, MessageStats] = {}
        self.auth_attempts: dict[str, list[int]] = {}  # protocol -> [succeeded, failed]
        self.limits = Limits()  # vhost and user limits (broker/node/limits.py)
        # the one front door: every way in performs its operations through it (broker/node/operations.py)
        self.ops = Operations(self.auth, self.store, self.limits, self.apply_limits)
        self.memory_limit = memory_limit(settings.memory_high_watermark)
        self.alarm = False  # the memory alarm
        self.disk_free_limit = disk_limit(settings)
        self.disk_alarm = False
        self.disk_free_probe: Callable[[], int | None] = self._disk_free  # tests put a fake one here
        self._memory_timer: asyncio.TimerHandle | None = None
        # the event loop's lag histogram and slow-turn WARNING (broker/node/looplag.py)
        self.loop_lag = LoopMonitor(loop, settings.loop_lag_warning)
        # hands freed heap pages back after a backlog drains (and the store's page cache, see _drained)
        self.heap = HeapTrimmer(process_rss, on_drained=self._drained)
        self._release: asyncio.Task[None] | None = None
        # x-delayed-message exchanges and persistent deduplication caches (broker/node/delayed.py)
        self.delays = DelayService(self.vhosts, self.store, loop, self.ttl.now)
        self.dedup = DedupPersistence(self.store, self.ttl.now)
        # what each bound listener reports, in registration order: AMQP, HTTP, Prometheus
        self._listings: list[Listing] = []
        # With several workers (``ottermq.broker.workers``): whether this process owns a vhost (the
        # others' are copies of their metadata, with no traffic), and the other workers as the
        # management API reaches them. One process owns every vhost.
        self.owns: Callable[[str], bool] = lambda _name: True
        self.worker_index = 0  # this process's number among the workers (0: the first, or the only one)
        # OTTERMQ_STORE=postgresql: the leadership this broker holds as the active one (health, metrics)
        self.lease: Lease | None = None
        # worker 0 of several: the open connections it handed to other workers, as (vhost, user), so
        # that connection limits count every worker's connections
        self.elsewhere: dict[int, tuple[str, str]] = {}
        self.workers: WorkerPool | None = None
        # several workers: the channels the users with a max-channels limit have open in the other
        # workers (sent by worker 0), and who to tell when this worker's change (see channels_changed)
        self.channels_elsewhere: dict[str, int] = {}
        self.on_channels_changed: Callable[[], None] | None = None

    # -- listeners ---------------------------------------------------------------------------
    def add_listing(self, listing: Listing) -> None:
        """Register a listener's ``(protocol, ip, port)`` report (``amqp``, ``amqp/ssl``, ``http``,
        ``https``, ``http/prometheus``, ``https/prometheus``: RabbitMQ's names)."""
        self._listings.append(listing)

    def listeners(self) -> list[tuple[str, str, int]]:
        """Every bound listener: AMQP first, then the management API, then Prometheus."""
        return [entry for listing in self._listings for entry in listing()]

    def amqp_listeners(self) -> list[tuple[str, str, int]]:
        return [entry for entry in self.listeners() if entry[0] in ("amqp", "amqp/ssl")]

    def web_listeners(self) -> list[tuple[str, str, int]]:
        return [entry for entry in self.listeners() if entry[0] in ("http", "https")]

    def prometheus_listeners(self) -> list[tuple[str, str, int]]:
        return [entry for entry in self.listeners() if entry[0].endswith("/prometheus")]

    def web_addresses(self) -> list[tuple[str, int]]:
        """``(ip, port)`` of each management API socket (none when disabled)."""
        return [(ip, port) for _protocol, ip, port in self.web_listeners()]

    # -- start-up and shut-down ----------------------------------------------------------------
    async def open(self, definitions: Definitions | None = None, seed: bool = True) -> Definitions:
        """Open the store and recover durable state (vhosts, users, permissions, exchanges, queues,
        bindings, messages, policies, limits), apply ``definitions`` (the one applier,
        ``definitions/apply.py``), then seed the default user and vhosts on a first start (unless
        not ``seed``: a worker other than the first, which gets them from worker 0).

        Returns:
            What applying ``definitions`` changed (empty without).

        Raises:
            StartupError: the store cannot be used.
            DefinitionsError: ``definitions`` refer to what does not exist, or an item is refused.
        """
        settings = self.settings
        try:
            await self.store.open()
            defs = await self.store.load_definitions()
        except StoreError as exc:
            raise StartupError(*store_setting(settings), str(exc)) from None
        self.auth.load(defs)
        for name in self.auth.vhosts:
            self.ensure_vhost(name)
        await recover(self, self.store, self.hook)
        recovered = Definitions(policies=defs.policies)
        await self.ops.prepare_definitions(self.owned_vhost, recovered)  # patterns matched off the loop
        apply_definitions(self, recovered, restore=Restore())  # after the messages
        self.limits.load(defs.limits)
        self.apply_limits()
        applied = Definitions()
        if definitions is not None:
            await self.ops.prepare_definitions(self.owned_vhost, definitions)
            try:
                applied = apply_definitions(self, definitions)
            except (AuthError, PolicyError, LimitError, AMQPError) as exc:
                raise DefinitionsError(str(exc)) from None
        if not seed:  # another worker's copy of the metadata: worker 0 sends it
            pass
        elif self.auth.seed_defaults(settings):
            log.info("first start: created user '%s' and vhosts %s", settings.username, settings.vhosts)
        elif "password" in settings.model_fields_set and self.auth.password_differs(
            settings.username, settings.password
        ):
            log.warning(
                "OTTERMQ_PASSWORD is not the stored password of user '%s' and is ignored: the default"
                " user is created at the first start only"
                " (see 'Changing a password' in docs/configuration.md)",
                settings.username,
            )
        for name in self.auth.vhosts:
            self.ensure_vhost(name)
        self.apply_limits()
        try:
            await self.store.flush()
        except StoreError as exc:
            raise StartupError(*store_setting(settings), str(exc)) from None
        return applied

    def start_alarms(self) -> None:
        """Start the memory and disk checks (every second) and the event loop's lag monitor."""
        self.check_memory()
        self.loop_lag.start()

    def stop(self) -> None:
        """Stop the alarm checks, the lag monitor and delayed delivery (shutting down)."""
        if self._memory_timer is not None:
            self._memory_timer.cancel()
        self.loop_lag.stop()
        self.delays.stop()

    async def close(self) -> None:
        """Commit what is pending and close the archive (once the connections are gone: nothing
        confirmed is lost)."""
        if self._release is not None:  # a page-cache release in flight finishes before the store closes
            await asyncio.gather(self._release, return_exceptions=True)
        await self.store.close()  # commits what is pending: nothing confirmed is lost
        await self.archive.close()  # writes buffered dead-letter records, finishes .part files
        self.spill.close()

    def owned_vhost(self, name: str) -> VHost | None:
        """The vhost called ``name`` if this process serves it."""
        vhost = self.vhosts.get(name)
        return vhost if vhost is not None and self.owns(name) else None

    def owned_vhosts(self) -> list[VHost]:
        """The vhosts this process serves (every one, unless there are several workers)."""
        owns = self.owns
        return [vhost for name, vhost in self.vhosts.items() if owns(name)]

    def ensure_vhost(self, name: str) -> VHost:
        """The vhost called ``name``, created (and wired to the store) if missing."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = make_vhost(name, self.settings, self.ttl, self.archive)
            vhost.store = self.hook
            vhost.delayer = self.delays
            vhost.dedup.store = self.dedup
            vhost.call_at = make_call_at(self.loop, self.ttl.now)
            vhost.call_soon = self.loop.call_soon
            vhost.paging = self.paging
        return vhost

    def add_vhost(self, name: str, description: str = "", tags: list[str] | None = None) -> bool:
        """Create (or describe again) the vhost ``name``; returns whether it existed.

        Raises:
            AuthError: an unusable name.
        """
        existed = name in self.auth.vhosts
        self.auth.add_vhost(name, description, tags or [])
        self.ensure_vhost(name)
        return existed

    def delete_vhost(self, name: str) -> None:
        """Delete the vhost: its connections are closed with 320 (RabbitMQ's text), its queues and
        exchanges deleted, its permissions and limits dropped."""
        for conn in list(self.connections):
            if conn.vhost_name == name:
                conn.force_close("vhost deleted", f"vhost '{name}' is deleted")
        vhost = self.vhosts.pop(name, None)
        if vhost is not None:
            for queue in list(vhost.queues.values()):
                vhost.delete_queue(queue)
            for exchange in list(vhost.exchanges):
                if not exchange.startswith("amq."):
                    vhost.delete_exchange(exchange, False)
        self.auth.delete_vhost(name)
        self.limits.clear("vhost", name)  # the store drops them with the vhost

    def delete_user(self, name: str) -> None:
        """Delete the user and its limits, and close its connections with 320 (RabbitMQ 3.10's text,
        ``user '<name>' is deleted``; each worker closes its own when the deletion reaches it).

        Raises:
            AuthError: no such user.
        """
        self.auth.delete_user(name)
        self.limits.clear("user", name)  # the store drops them with the user
        for conn in list(self.connections):
            if conn.username == name:
                conn.force_close("user deleted", f"user '{name}' is deleted")

    # -- memory alarm ---------------------------------------------------------------------
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
            conns = {c for c in self.connections if c.vhost_name == vhost}
        return MessageStats.total([retired, *(stats for c in conns for stats in c.channel_stats())])

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
        self.heap.tick()
        self._memory_timer = self.loop.call_later(1.0, self.check_memory)

    def _drained(self) -> None:
        """A backlog drained (``HeapTrimmer``): trim now, and again once the store gave back its cache."""
        self.heap.trim()
        if self._release is None or self._release.done():
            self._release = self.loop.create_task(self._release_store_memory())

    async def _release_store_memory(self) -> None:
        try:
            await self.store.release_memory()
        except Exception as exc:  # a closed store, an I/O error: memory only, nothing to undo
            log.debug("store memory not released: %s", exc)
            return
        self.heap.trim()

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
        self, username: str | bytes, password: str | bytes, peer_host: str, protocol: str = "amqp091"
    ) -> UserRecord | None:
        """A password login (``auth.AuthDB.login``: empty passwords and password-less users never log
        in; loopback-only users from loopback only). Counted by ``protocol`` (``amqp091``, ``http``)
        for ``rabbitmq_auth_attempts_*``."""
        return self._count_auth(protocol, self.auth.authenticate(username, password, peer_host))

    def authenticate_external(self, username: str | None, peer_host: str) -> UserRecord | None:
        """SASL EXTERNAL: the user named by a verified client certificate (None: no name in it)."""
        user = self.auth.authenticate_external(username, peer_host) if username else None
        return self._count_auth("amqp091", user)

    # -- limits -------------------------------------------------------------------------------
    def check_connection_limits(self, conn: ConnectionHandle, vhost: str) -> None:
        """``connection.open``: the vhost's, then the user's connection limit (broker/node/limits.py).

        Raises:
            NotAllowed: a limit is reached (530, RabbitMQ's texts).
        """
        opened = [
            (c.vhost_name, c.username) for c in self.connections if c is not conn and c.vhost_name is not None
        ]
        opened += self.elsewhere.values()
        limit = self.limits.limit("vhost", vhost, "max-connections")
        if limit is not None and sum(1 for v, _u in opened if v == vhost) >= limit:
            raise NotAllowed(
                f"access to vhost '{vhost}' refused for user '{conn.username}': connection limit"
                f" ({limit}) is reached"
            )
        limit = self.limits.limit("user", conn.username, "max-connections")
        if limit is not None and sum(1 for _v, u in opened if u == conn.username) >= limit:
            raise NotAllowed(
                f"connection refused for user '{conn.username}': user connection limit ({limit}) is reached"
            )

    def user_channels(self, username: str) -> int:
        """Channels open on ``username``'s connections (the ``max-channels`` limit counts them all),
        in every worker: the other workers' as worker 0 last reported them (a few milliseconds old)."""
        here = sum(c.channel_count() for c in self.connections if c.username == username)
        return here + self.channels_elsewhere.get(username, 0)

    def limited_user_channels(self) -> dict[str, int]:
        """This worker's open channels per user that has a ``max-channels`` limit (0s included)."""
        users = self.limits.by_kind["user"]
        counts = {name: 0 for name in users if self.limits.limit("user", name, "max-channels") is not None}
        for c in self.connections:
            if c.username in counts:
                counts[c.username] += c.channel_count()
        return counts

    def channels_changed(self, username: str) -> None:
        """A channel of ``username`` opened or closed here: with several workers, and a ``max-channels``
        limit on that user, the other workers are told (coalesced by the callee)."""
        report = self.on_channels_changed
        if report is not None and self.limits.limit("user", username, "max-channels") is not None:
            report()

    def apply_limits(self) -> None:
        """Give each vhost its ``max-queues`` limit (after recovery and on every change)."""
        for name, vhost in self.vhosts.items():
            vhost.max_queues = self.limits.limit("vhost", name, "max-queues")

    def _count_auth(self, protocol: str, user: UserRecord | None) -> UserRecord | None:
        counts = self.auth_attempts.setdefault(protocol, [0, 0])
        counts[0 if user is not None else 1] += 1
        return user


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
