"""The one place that chooses implementations from settings: store, durable hook, TTL manager,
dead-letter sink, archive."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ottermq.dlx.deadletter import DeadLetterer, death_count
from ottermq.dlx.xdeath import dead_letter_routing_keys
from ottermq.persistence.archive import DeadLetterArchive, NullArchive
from ottermq.persistence.hook import DurableHook
from ottermq.persistence.lease import Lease
from ottermq.persistence.memory import MemoryStore
from ottermq.persistence.postgres import PostgresStore
from ottermq.persistence.sqlite import SQLiteStore
from ottermq.persistence.store import Store
from ottermq.ttl.default import DefaultTTLManager
from ottermq.ttl.manager import TTLManager, wall_clock_ms
from ottermq.ttl.noop import NoopTTLManager
from ottermq.vhost.vhost import VHost

from ..config import Settings
from .startup import StartupError

log = logging.getLogger(__name__)

Archive = DeadLetterArchive | NullArchive

_NULL_ARCHIVE = NullArchive()
_archives: dict[Path, DeadLetterArchive] = {}


def open_store(settings: Settings, lease: Lease | None = None) -> Store:
    """``OTTERMQ_STORE``: SQLite under ``OTTERMQ_DATA_DIR`` (default), PostgreSQL (fenced by
    ``lease``: see ``make_lease``) or memory."""
    if settings.store == "memory":
        return MemoryStore()
    if settings.store == "postgresql":
        return PostgresStore(
            settings.postgres_url,
            schema=settings.postgres_schema,
            password=postgres_password(settings),
            lease=lease,
            application_name=lease.application_name if lease is not None else "ottermq",
            # a commit unanswered for two leases is dropped and tried again (its confirms wait)
            timeout=max(2 * settings.lease_seconds, 5.0),
        )
    return SQLiteStore(settings.data_dir / "ottermq.db", synchronous=settings.sync.upper())


def make_lease(settings: Settings) -> Lease | None:
    """The leadership of the brokers sharing ``OTTERMQ_POSTGRES_SCHEMA`` (None: not PostgreSQL)."""
    if settings.store != "postgresql":
        return None
    return Lease(
        settings.postgres_url,
        schema=settings.postgres_schema,
        password=postgres_password(settings),
        lease_seconds=settings.lease_seconds,
        poll_seconds=settings.standby_poll_seconds,
        start_timeout=settings.postgres_start_timeout,
    )


def redact_url(url: str | None) -> str | None:
    """``url`` without its password (for messages and logs)."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def store_setting(settings: Settings) -> tuple[str, object]:
    """The setting that names where the store is, and its value (for ``StartupError``)."""
    if settings.store == "postgresql":
        return "postgres_url", redact_url(settings.postgres_url)
    return "data_dir", settings.data_dir


def postgres_password(settings: Settings) -> str | None:
    """``OTTERMQ_POSTGRES_PASSWORD_FILE``'s first line (None: the URL's or libpq's own).

    Raises:
        StartupError: the file cannot be read.
    """
    path = settings.postgres_password_file
    if path is None:
        return None
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise StartupError("postgres_password_file", path, f"cannot be read ({exc.strerror})") from None
    return lines[0] if lines else ""


def make_hook(store: Store, ttl: TTLManager) -> DurableHook:
    """What durable queues write through: the store, stamped with the TTL manager's clock."""
    return DurableHook(store, ttl.now)


def make_ttl_manager(settings: Settings, loop: asyncio.AbstractEventLoop) -> TTLManager:
    """``OTTERMQ_ENABLE_TTL``: per-queue timers, or nothing at all."""
    if settings.enable_ttl:
        return DefaultTTLManager(loop, wall_clock_ms)
    return NoopTTLManager()


def shared_archive(settings: Settings) -> Archive:
    """``OTTERMQ_DLX_ARCHIVE_DIR``: the process's dead-letter archive for that directory (one for
    every vhost, so one writer thread and one file sequence), or a ``NullArchive`` when unset.

    A closed archive is replaced by a new one (a broker started again in the same process).
    """
    if settings.dlx_archive_dir is None:
        return _NULL_ARCHIVE
    directory = Path(settings.dlx_archive_dir).absolute()
    archive = _archives.get(directory)
    if archive is None or archive.closed:
        archive = _archives[directory] = DeadLetterArchive(
            directory,
            routing_keys=dead_letter_routing_keys,
            death_count=death_count,
            max_bytes=settings.dlx_archive_max_bytes,
            body_bytes=settings.dlx_archive_body_bytes,
            queue_limit=settings.dlx_archive_queue,
            idle_close=settings.dlx_archive_idle_close,
            clock=wall_clock_ms,
        )
        archive.start()  # finishes .part files a crash left, before any new dead letter
        size = settings.dlx_archive_body_bytes
        bodies = f"first {size} body bytes" if size else "no bodies"
        log.info("dead-letter archive on: every dead letter is written to %s (%s)", directory, bodies)
    return archive


def make_call_at(
    loop: asyncio.AbstractEventLoop, clock: Callable[[], int]
) -> Callable[..., asyncio.TimerHandle]:
    """A timer at an epoch-ms time (queues' delayed retry), on ``loop``."""

    def call_at(at: int, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return loop.call_later(max(0.0, (at - clock()) / 1000), callback)

    return call_at


def make_vhost(name: str, settings: Settings, ttl: TTLManager, archive: Archive | None = None) -> VHost:
    """A virtual host wired with the TTL manager, the dead-letter sink, length limits and quorum
    queues' default delivery limit.

    ``archive`` defaults to :func:`shared_archive`; the broker closes it at shutdown.
    """
    vhost = VHost(name, settings.max_priority, ttl=ttl, limits=settings.enable_qll)
    vhost.quorum_delivery_limit = settings.quorum_delivery_limit
    if archive is None:
        archive = shared_archive(settings)
    vhost.sink = DeadLetterer(vhost, ttl.now, enabled=settings.enable_dlx, archive=archive)
    return vhost
