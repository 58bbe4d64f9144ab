"""The services a node is built with and keeps unchanged: what most of the broker reads of it.

``Services`` is made once, by ``Node``, from the settings, the event loop, the store and the archive;
nothing in it is replaced afterwards (each service keeps its own state). Readers take what they use
from it: the AMQP server the operations layer, auth and logins; recovery the hook and the delays; the
management API reads it through its view (``broker/node/view.py``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ottermq.persistence.hook import DurableHook
from ottermq.persistence.spill import SpillDir
from ottermq.persistence.store import Store, UserRecord
from ottermq.ttl.manager import TTLManager
from ottermq.vhost.paging import Paging

from ..config import Settings
from ..shovel import Shovels
from .auth import AuthDB
from .delayed import DedupPersistence, DelayService
from .limits import Limits
from .operations import Operations
from .parameters import Parameters
from .wiring import Archive


class Logins:
    """Password and certificate logins, counted by protocol for ``rabbitmq_auth_attempts_*``.

    Args:
        auth: the users and their credentials.
    """

    def __init__(self, auth: AuthDB) -> None:
        self.auth = auth
        self.attempts: dict[str, list[int]] = {}  # protocol -> [succeeded, failed]

    def authenticate(
        self, username: str | bytes, password: str | bytes, peer_host: str, protocol: str = "amqp091"
    ) -> UserRecord | None:
        """A password login (``auth.AuthDB.authenticate``: empty passwords and password-less users
        never log in; loopback-only users from loopback only), counted under ``protocol``
        (``amqp091``, ``http``)."""
        return self._count(protocol, self.auth.authenticate(username, password, peer_host))

    def authenticate_external(self, username: str | None, peer_host: str) -> UserRecord | None:
        """SASL EXTERNAL: the user named by a verified client certificate (None: no name in it)."""
        user = self.auth.authenticate_external(username, peer_host) if username else None
        return self._count("amqp091", user)

    def _count(self, protocol: str, user: UserRecord | None) -> UserRecord | None:
        counts = self.attempts.setdefault(protocol, [0, 0])
        counts[0 if user is not None else 1] += 1
        return user


@dataclass(frozen=True, slots=True)
class Services:
    """One node's services (see the module docstring)."""

    settings: Settings
    loop: asyncio.AbstractEventLoop
    ttl: TTLManager
    store: Store
    hook: DurableHook  # what queues call to make their changes durable
    auth: AuthDB  # vhosts, users, permissions, topic permissions
    logins: Logins
    limits: Limits  # vhost and user limits (broker/node/limits.py)
    # the one front door: every way in performs its operations through it (broker/node/operations.py)
    ops: Operations
    # runtime parameters and their components: dynamic shovels (broker/node/parameters.py)
    parameters: Parameters
    shovels: Shovels
    archive: Archive  # OTTERMQ_DLX_ARCHIVE_DIR, or a null archive
    # x-delayed-message exchanges and persistent deduplication caches (broker/node/delayed.py)
    delays: DelayService
    dedup: DedupPersistence
    # backlogs larger than memory: queues page to this process's spill directory (vhost/paging.py)
    spill: SpillDir
    paging: Paging | None = field(default=None)
