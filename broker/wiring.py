"""The one place that chooses implementations from settings: TTL manager and dead-letter sink."""

from __future__ import annotations

import asyncio

from ottermq.dlx.deadletter import DeadLetterer
from ottermq.ttl.default import DefaultTTLManager
from ottermq.ttl.manager import TTLManager, wall_clock_ms
from ottermq.ttl.noop import NoopTTLManager
from ottermq.vhost.vhost import VHost

from .config import Settings


def make_ttl_manager(settings: Settings, loop: asyncio.AbstractEventLoop) -> TTLManager:
    """``OTTERMQ_ENABLE_TTL``: per-queue timers, or nothing at all."""
    if settings.enable_ttl:
        return DefaultTTLManager(loop, wall_clock_ms)
    return NoopTTLManager()


def make_vhost(name: str, settings: Settings, ttl: TTLManager) -> VHost:
    """A virtual host wired with the TTL manager, the dead-letter sink and length limits."""
    vhost = VHost(name, settings.max_priority, ttl=ttl, limits=settings.enable_qll)
    vhost.sink = DeadLetterer(vhost, ttl.now, enabled=settings.enable_dlx)
    return vhost
