"""One broker node: its parts, its virtual hosts and their lifecycle, without its network listeners.

``Node`` is a composition of parts with one job each, which readers take one by one:

- ``services`` (``broker/node/services.py``): what the node is built with and never replaces: the
  settings, the event loop, the TTL manager, the store and its durable hook, users and permissions
  (``auth``), logins, limits, the operations layer (``ops``), the dead-letter archive, delayed
  delivery and deduplication persistence, the spill directory and paging;
- ``connections`` (``broker/node/registry.py``): the open AMQP connections, seen only through
  ``ConnectionHandle``, with the message and churn counts that outlive them and the connection and
  channel limit checks;
- ``alarms`` (``broker/node/alarms.py``): the memory and disk alarms, the heap trimmer and the event
  loop's lag monitor;
- ``cluster`` (``broker/node/cluster.py``): this process among the workers (``SingleProcess`` unless
  ``join`` gives it another);
- ``listings`` (``broker/node/listings.py``): what each bound listener reports.

The node itself keeps the vhosts (created, described and deleted here) and opens and closes the
whole. The AMQP server registers its connections in ``connections``; the management API reads the
node through ``broker/node/view.py``; ``ottermq.broker.runtime`` builds and starts it all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import ssl
import time

from ottermq.amqp.errors import AMQPError
from ottermq.persistence.lease import Lease
from ottermq.persistence.memory import MemoryStore
from ottermq.persistence.spill import SpillDir
from ottermq.persistence.store import Definitions, Store, StoreError
from ottermq.vhost.paging import Paging
from ottermq.vhost.policy import PolicyError
from ottermq.vhost.vhost import VHost

from .. import node_name
from ..config import Settings
from ..shovel import LocalBroker, Shovels
from .alarms import Alarms
from .auth import INTERNAL_USER, AuthDB, AuthError
from .cluster import Cluster
from .definitions import DefinitionsError, DefinitionsFile, ImportReport, Restore, apply_definitions
from .delayed import DedupPersistence, DelayService
from .limits import LimitError, Limits
from .listings import Listings
from .operations import Operations
from .parameters import ParameterError, Parameters
from .recovery import recover
from .registry import ConnectionRegistry
from .services import Logins, Services
from .startup import StartupError
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


class Node:
    """One broker node (see the module docstring).

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
        ttl = make_ttl_manager(settings, loop)
        store = store if store is not None else MemoryStore()
        auth = AuthDB(store, loopback_users=settings.loopback_users)
        limits = Limits()
        parameters = Parameters(store)
        auth.set_internal(secrets.token_urlsafe(32))  # a worker other than the first takes worker 0's
        self.vhosts: dict[str, VHost] = {}
        spill = SpillDir(settings.spill_dir or settings.data_dir / "spill")
        self.services = Services(
            settings=settings,
            loop=loop,
            ttl=ttl,
            store=store,
            hook=make_hook(store, ttl),
            auth=auth,
            logins=Logins(auth),
            limits=limits,
            ops=Operations(auth, store, limits, self.apply_limits, parameters),
            parameters=parameters,
            shovels=Shovels(self.local_broker, node_name(), self._shovel_finished),
            archive=shared_archive(settings) if archive is None else archive,
            delays=DelayService(self.vhosts, store, loop, ttl.now),
            dedup=DedupPersistence(store, ttl.now),
            spill=spill,
            paging=(
                Paging(spill.pager, settings.queue_window, settings.queue_window_bytes)
                if settings.paging
                else None
            ),
        )
        parameters.register("shovel", self.services.shovels)
        self.connections = ConnectionRegistry(limits)
        self.alarms = Alarms(settings, loop, store, self.connections.block)
        self.listings = Listings()
        self.started_at = time.time()  # process_start_time_seconds
        # OTTERMQ_STORE=postgresql: the leadership this broker holds as the active one (health, metrics)
        self.lease: Lease | None = None
        # OTTERMQ_DEFINITIONS_FILE as imported at this start, with its report (the management overview)
        self.definitions_file: DefinitionsFile | None = None

    def use_archive(self, archive: Archive) -> None:
        """Start with ``archive`` instead (the runtime checks the archive directory after binding its
        listeners, before the node opens): the one service set after construction."""
        self.services = dataclasses.replace(self.services, archive=archive)

    @property
    def cluster(self) -> Cluster:
        return self.connections.cluster

    def join(self, cluster: Cluster) -> None:
        """Become one of several workers: ``cluster`` says which vhosts this process owns and what the
        limits count elsewhere (``ottermq.broker.workers``)."""
        self.connections.cluster = cluster

    # -- start-up and shut-down ----------------------------------------------------------------
    async def open(
        self, definitions: Definitions | None = None, seed: bool = True, report: ImportReport | None = None
    ) -> Definitions:
        """Open the store and recover durable state (vhosts, users, permissions, exchanges, queues,
        bindings, messages, policies, limits), apply ``definitions`` (the one applier,
        ``definitions/apply.py``, counting in ``report``), then seed the default user and vhosts on a
        first start (unless not ``seed``: a worker other than the first, which gets them from worker 0).

        Returns:
            What applying ``definitions`` changed (empty without).

        Raises:
            StartupError: the store cannot be used.
            DefinitionsError: ``definitions`` refer to what does not exist, or an item is refused.
        """
        services = self.services
        settings, store, auth, ops = services.settings, services.store, services.auth, services.ops
        try:
            await store.open()
            defs = await store.load_definitions()
        except StoreError as exc:
            raise StartupError(*store_setting(settings), str(exc)) from None
        auth.load(defs)
        for name in auth.vhosts:
            self.ensure_vhost(name)
        await recover(self, store, services.hook)
        recovered = Definitions(policies=defs.policies)
        await ops.prepare_definitions(self.owned_vhost, recovered)  # patterns matched off the loop
        apply_definitions(self, recovered, restore=Restore())  # after the messages
        services.limits.load(defs.limits)
        self.apply_limits()
        if self.cluster.index == 0:  # parameters are worker 0's (parameters.py rule 5)
            services.parameters.restore(defs.parameters, auth.vhosts)
        applied = Definitions()
        if definitions is not None:
            await ops.prepare_definitions(self.owned_vhost, definitions)
            try:
                applied = apply_definitions(self, definitions, report=report)
            except (AuthError, PolicyError, LimitError, ParameterError, AMQPError) as exc:
                raise DefinitionsError(str(exc)) from None
        if not seed:  # another worker's copy of the metadata: worker 0 sends it
            pass
        elif auth.seed_defaults(settings):
            log.info("first start: created user '%s' and vhosts %s", settings.username, settings.vhosts)
        elif "password" in settings.model_fields_set and auth.password_differs(
            settings.username, settings.password
        ):
            log.warning(
                "OTTERMQ_PASSWORD is not the stored password of user '%s' and is ignored: the default"
                " user is created at the first start only"
                " (see 'Changing a password' in docs/configuration.md)",
                settings.username,
            )
        for name in auth.vhosts:
            self.ensure_vhost(name)
        self.apply_limits()
        try:
            await store.flush()
        except StoreError as exc:
            raise StartupError(*store_setting(settings), str(exc)) from None
        return applied

    def stop(self) -> None:
        """Stop the alarm checks, the lag monitor and delayed delivery (shutting down)."""
        self.alarms.stop()
        self.services.delays.stop()

    async def close(self) -> None:
        """Commit what is pending and close the archive (once the connections are gone: nothing
        confirmed is lost)."""
        await self.alarms.close()  # a page-cache release in flight finishes before the store closes
        services = self.services
        await services.store.close()  # commits what is pending: nothing confirmed is lost
        await services.archive.close()  # writes buffered dead-letter records, finishes .part files
        services.spill.close()

    def owned_vhost(self, name: str) -> VHost | None:
        """The vhost called ``name`` if this process serves it."""
        vhost = self.vhosts.get(name)
        return vhost if vhost is not None and self.cluster.owns(name) else None

    def owned_vhosts(self) -> list[VHost]:
        """The vhosts this process serves (every one, unless there are several workers)."""
        owns = self.cluster.owns
        return [vhost for name, vhost in self.vhosts.items() if owns(name)]

    def ensure_vhost(self, name: str) -> VHost:
        """The vhost called ``name``, created (and wired to the store) if missing."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            s = self.services
            vhost = self.vhosts[name] = make_vhost(name, s.settings, s.ttl, s.archive)
            vhost.store = s.hook
            vhost.delayer = s.delays
            vhost.dedup.store = s.dedup
            vhost.call_at = make_call_at(s.loop, s.ttl.now)
            vhost.call_soon = s.loop.call_soon
            vhost.paging = s.paging
        return vhost

    def add_vhost(self, name: str, description: str = "", tags: list[str] | None = None) -> bool:
        """Create (or describe again) the vhost ``name``; returns whether it existed.

        Raises:
            AuthError: an unusable name.
        """
        auth = self.services.auth
        existed = name in auth.vhosts
        auth.add_vhost(name, description, tags or [])
        self.ensure_vhost(name)
        return existed

    def delete_vhost(self, name: str) -> None:
        """Delete the vhost: its connections are closed with 320 (RabbitMQ's text), its queues and
        exchanges deleted, its permissions and limits dropped."""
        self.connections.close_vhost(name)
        vhost = self.vhosts.pop(name, None)
        if vhost is not None:
            for queue in list(vhost.queues.values()):
                vhost.delete_queue(queue)
            for exchange in list(vhost.exchanges):
                if not exchange.startswith("amq."):
                    vhost.delete_exchange(exchange, False)
        self.services.auth.delete_vhost(name)
        self.services.limits.clear("vhost", name)  # the store drops them with the vhost
        self.services.parameters.clear_vhost(name)  # and its parameters (their shovels stop)

    def delete_user(self, name: str) -> None:
        """Delete the user and its limits, and close its connections with 320 (RabbitMQ 3.10's text,
        ``user '<name>' is deleted``; each worker closes its own when the deletion reaches it).

        Raises:
            AuthError: no such user.
        """
        self.services.auth.delete_user(name)
        self.services.limits.clear("user", name)  # the store drops them with the user
        self.connections.close_user(name)

    def local_broker(self) -> LocalBroker | None:
        """Where a shovel's local end connects: this node's AMQP listener over loopback (plain TCP
        first; TLS to itself unverified), as the internal principal (None: no listener)."""
        listeners = self.listings.amqp()
        chosen = [entry for entry in listeners if entry[0] == "amqp"] or listeners
        if not chosen:
            return None
        protocol, ip, port = chosen[0]
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(ip, ip)
        tls = None
        if protocol != "amqp":
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE  # our own listener
        return LocalBroker(host, port, INTERNAL_USER, self.services.auth.internal_secret, tls)

    def _shovel_finished(self, vhost: str, name: str) -> None:
        """A shovel reached its ``src-delete-after``: its parameter goes (``Shovels`` rule 5)."""
        self.services.ops.clear_parameter(vhost, "shovel", name)

    def apply_limits(self) -> None:
        """Give each vhost its ``max-queues`` limit (after recovery and on every change)."""
        limits = self.services.limits
        for name, vhost in self.vhosts.items():
            vhost.max_queues = limits.limit("vhost", name, "max-queues")
