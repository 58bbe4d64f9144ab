"""The composition root: a node, its AMQP server and its management plugin, started and stopped.

Start-up order (``serve``), so that a broker that cannot start leaves nothing behind:

1. read ``OTTERMQ_DEFINITIONS_FILE`` (read only);
2. bind the listening sockets, not yet accepting (``start_serving=False``): a port in use stops
   here, before anything exists on disk; the management API's port (``OTTERMQ_WEB_PORT``) and the
   Prometheus port (``OTTERMQ_PROMETHEUS_PORT``) too;
3. check ``OTTERMQ_DLX_ARCHIVE_DIR`` is writable (creating it), lock ``OTTERMQ_DATA_DIR`` (creating
   it);
4. open the store, import the definitions, seed the defaults, recover durable state (``Node.open``);
5. start accepting connections, then serve the management API and the Prometheus metrics.

Every failure of 1-4 is a ``StartupError`` (``ottermq.broker.node.startup``). A worker other than the
first (``ottermq.broker.workers``) starts through the same steps 3-5 (``Broker.prepare_dirs``,
``Broker.start``) as an ``internal`` broker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol

from ottermq.amqp import native
from ottermq.persistence.archive import NullArchive
from ottermq.persistence.lease import Lease, Unreachable
from ottermq.persistence.postgres import PostgresStore
from ottermq.persistence.store import Definitions, Store, StoreError

from . import VERSION
from .config import Settings
from .management import ManagementServer
from .management.prometheus import PrometheusServer
from .node import tls
from .node.definitions import DefinitionsError, DefinitionsFile
from .node.node import Node
from .node.startup import (
    StartupError,
    check_archive_dir,
    listener_startup_error,
    prepare_data_dir,
    read_definitions,
)
from .node.tls import TLSConfigError, web_context, web_files
from .node.wiring import Archive, make_lease, open_store, redact_url, shared_archive
from .server.listener import AMQPServer

log = logging.getLogger(__name__)


class Broker:
    """One broker process: ``node`` (state and services), ``amqp`` (the AMQP listeners and
    connections), ``web`` and ``prometheus`` (the management plugin's listeners, when enabled).

    Args:
        settings: the loaded configuration.
        loop: the running event loop.
        store: the store (default: a ``MemoryStore``).
        archive: the dead-letter archive (default: ``shared_archive(settings)``, which starts it).
        internal: a worker other than the first (``ottermq.broker.workers``): no AMQP listener (worker
            0 hands it its connections), the management API and Prometheus on ports the system picks
            (``ephemeral``, left out of the node's listeners), and no default user or vhost seeded
            (worker 0 sends the metadata).
    """

    def __init__(
        self,
        settings: Settings,
        loop: asyncio.AbstractEventLoop,
        store: Store | None = None,
        archive: Archive | None = None,
        internal: bool = False,
    ) -> None:
        self.settings = settings
        self.loop = loop
        self.internal = internal
        self.node = Node(settings, loop, store, archive)
        self.amqp = AMQPServer(self.node)
        self.web_tls_context: ssl.SSLContext | None = None
        self.web: ManagementServer | None = None  # OTTERMQ_ENABLE_WEB_API, bound by listen()
        self.prometheus: PrometheusServer | None = None  # OTTERMQ_ENABLE_PROMETHEUS, bound by listen()
        self._bound = False

    async def listen(self) -> None:
        """Bind every listener without accepting yet (``start`` does that at the end).

        Raises:
            StartupError: an address is in use or cannot be bound, a TLS file is unusable, or no
                AMQP listener is configured.
        """
        if self._bound:
            return
        settings, internal = self.settings, self.internal
        if not internal:
            self.amqp.prepare_tls()
        try:
            self.web_tls_context = web_context(settings)
        except TLSConfigError as exc:
            raise StartupError(exc.field, exc.value, exc.reason) from None
        if not internal:
            await self.amqp.listen()
        self._bound = True
        if settings.enable_web_api and not (internal or settings.web_port or settings.web_ssl):
            log.info("OTTERMQ_WEB_PORT=0 and OTTERMQ_WEB_SSL=false: the management API has no listener")
        elif settings.enable_web_api:
            self.web = web = ManagementServer(self.node, self.web_tls_context, ephemeral=internal)
            try:
                web.bind()
            except OSError as exc:
                self.amqp.close()
                port = "web_ssl_port" if web.failed_on_tls else "web_port"
                raise listener_startup_error(settings, exc, port, "enable_web_api") from None
            if not internal:
                self.node.listings.add(web.listeners)
        if settings.enable_prometheus and not (
            internal or settings.prometheus_port or settings.prometheus_ssl
        ):
            log.info("OTTERMQ_PROMETHEUS_PORT=0 and OTTERMQ_PROMETHEUS_SSL=false: no metrics listener")
        elif settings.enable_prometheus:
            self.prometheus = prometheus = PrometheusServer(
                self.node, self.web_tls_context, ephemeral=internal
            )
            try:
                prometheus.bind()
            except OSError as exc:
                self.amqp.close()
                if self.web is not None:
                    self.web.close_sockets()
                port = "prometheus_ssl_port" if prometheus.failed_on_tls else "prometheus_port"
                raise listener_startup_error(settings, exc, port, "enable_prometheus") from None
            metrics = self.prometheus
            if not internal:
                self.node.listings.add(
                    lambda: [(f"{p}/prometheus", ip, port) for p, ip, port in metrics.listeners()]
                )

    def prepare_dirs(self) -> None:
        """Step 3 of the start-up: check ``OTTERMQ_DLX_ARCHIVE_DIR`` is writable and lock
        ``OTTERMQ_DATA_DIR`` (creating them), then start the dead-letter archive there.

        Raises:
            StartupError: either directory is unusable, or the data dir is locked by another broker.
        """
        check_archive_dir(self.settings)  # before the data dir: a failure here leaves no store behind
        prepare_data_dir(self.settings)
        self.node.use_archive(shared_archive(self.settings))

    async def close_listeners(self) -> None:
        """Stop accepting AMQP connections and stop the management plugin's listeners."""
        self.amqp.close()
        if self.web is not None:
            await self.web.stop()
        if self.prometheus is not None:
            await self.prometheus.stop()

    def reload_tls(self) -> None:
        """SIGHUP: read the certificate files again; open connections keep their session."""
        self.amqp.reload_tls()
        if self.web_tls_context is not None:
            tls.reload(self.web_tls_context, web_files(self.settings))

    async def start(
        self,
        definitions: DefinitionsFile | None = None,
        before_serving: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Bind (if ``listen`` was not called), open the node (store, definitions, recovery), run
        ``before_serving`` (worker 0: the other workers' start; another worker: worker 0's metadata
        applied), then accept connections and serve the management plugin.

        Raises:
            StartupError: a port, the data dir or the definitions file is unusable.
        """
        settings = self.settings
        await self.listen()
        if definitions is None and settings.definitions_file is not None:
            definitions = read_definitions(settings)
        try:
            if definitions is None:
                await self.node.open(seed=not self.internal)
            else:
                await self.node.open(definitions.definitions, not self.internal, definitions.report)
        except DefinitionsError as exc:
            raise StartupError("definitions_file", settings.definitions_file, str(exc)) from None
        if definitions is not None:
            self.node.definitions_file = definitions
        if before_serving is not None:  # worker 0: the other workers' parts join the report
            await before_serving()
        if definitions is not None:  # each skipped item was logged as it was skipped
            log.info("imported definitions from %s: %s", definitions.path, definitions.report.summary())
        await self.amqp.start_serving()  # internal: no socket, the consumer-timeout checks only
        if not self.internal:
            self.node.services.shovels.start()  # they connect to the listener that now accepts
        if not self.internal:
            addresses = ", ".join(
                f"{ip}:{port}" + (" (TLS)" if proto == "amqp/ssl" else "")
                for proto, ip, port in self.amqp.listeners()
            )
            log.info("OtterMQ %s listening on %s", VERSION, addresses)
            log.info("OtterMQ %s", native.status())  # compiled by mypyc or pure Python (setup.py)
        if self.web is not None:
            await self.web.start()
        if self.prometheus is not None:
            await self.prometheus.start()
        self.node.alarms.start()

    async def shutdown(self, timeout: float = 5.0, reason: str = "shutdown") -> None:
        """Stop accepting, close every connection with 320 (``reason`` in its text), wait for them to
        go, then close the store (committing what is pending) and the archive."""
        await self.close_listeners()
        self.node.stop()
        await self.node.services.shovels.stop()  # their unacked messages go back to their sources
        await self.amqp.shutdown(timeout, reason)
        await self.node.close()
        log.info("OtterMQ stopped")


class Extension(Protocol):
    """More processes around the broker (``ottermq.broker.workers.supervisor.Supervisor``)."""

    def hold_topology(self, definitions: Definitions) -> Definitions:
        """Keep the start-up definitions' exchanges, queues and bindings for ``start``; the rest is
        applied as the node opens."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def serve(settings: Settings, extend: Callable[[Broker], Extension] | None = None) -> None:
    """Run the broker until SIGTERM/SIGINT; a second signal exits at once. ``extend`` makes what is
    started before connections are accepted and stopped with the broker (the other workers).

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
    if settings.store == "postgresql" and settings.workers > 1:
        raise StartupError(
            "workers",
            settings.workers,
            "OTTERMQ_STORE=postgresql runs in one worker process (which worker owns a vhost is kept in"
            " the data dir, which a standby on another machine does not have)",
            "set OTTERMQ_WORKERS=1",
        )
    lease = make_lease(settings)  # OTTERMQ_STORE=postgresql: active or standby
    if lease is not None and not await _lead(lease, stop):
        return  # stopped while a standby
    lost = asyncio.Event()
    store = open_store(settings, lease)
    if lease is not None:

        def on_lost(reason: str) -> None:
            # the store gives up first (a commit in flight may or may not land: its confirms are
            # withheld, never nacked), then the broker closes every connection with 320 and stops
            if isinstance(store, PostgresStore):
                store.abandon(reason)
            lost.set()

        lease.on_lost = on_lost
    try:
        # Constructing the broker and its store touches no file; the archive starts once checked.
        broker = Broker(settings, loop, store, archive=NullArchive())
        broker.node.lease = lease
        await _listen(broker, lease)
        reload_tls.append(broker.reload_tls)
        extension: Extension | None = None
        try:
            broker.prepare_dirs()
            extension = extend(broker) if extend is not None else None
            if extension is not None and definitions is not None:  # each vhost's owner declares its own
                definitions.definitions = extension.hold_topology(definitions.definitions)
            await broker.start(definitions, extension.start if extension is not None else None)
        except BaseException:
            await broker.close_listeners()
            if extension is not None:
                await extension.stop()
            raise
        await _first(stop.wait(), lost.wait())
        reason = LEADERSHIP_LOST if lost.is_set() else "shutdown"
        if extension is not None:
            await asyncio.gather(broker.shutdown(reason=reason), extension.stop())
        else:
            await broker.shutdown(reason=reason)
    finally:
        if lease is not None:
            await lease.release()
    if lost.is_set():
        raise LeadershipLost("another broker took the leadership over: this one stopped (see the log)")


LEADERSHIP_LOST = "leadership lost"


class LeadershipLost(Exception):
    """An active broker stopped because another one took over (``Lease``): the process exits with
    ``EXIT_LEADERSHIP_LOST`` so that a service manager starts it again, as a standby."""


EXIT_LEADERSHIP_LOST = 3


async def _first(*waits: Awaitable[object]) -> None:
    """Wait until the first of ``waits`` is done; cancel the others."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def _listen(broker: Broker, lease: Lease | None) -> None:
    """``broker.listen()``; a broker that just took the leadership over waits up to two leases for an
    address the old active still holds (the same port on the same machine: it is stopping).

    Raises:
        StartupError: as ``Broker.listen``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (2 * lease.lease_seconds if lease is not None else 0)
    waited = False
    while True:
        try:
            await broker.listen()
            return
        except StartupError as exc:
            if lease is None or not exc.in_use or loop.time() > deadline:
                raise
            if not waited:
                log.warning("active: %s; waiting for the old active to let go of it", exc)
                waited = True
            await asyncio.sleep(0.1)


async def _lead(lease: Lease, stop: asyncio.Event) -> bool:
    """Wait as a standby (binding nothing) until ``lease`` is this broker's, or ``stop`` is set.

    Returns:
        True once this broker is the active one; False when stopped first.

    Raises:
        StartupError: PostgreSQL is unusable (no driver, a schema of another program or version), or was
            never reached (``Unreachable``: a wrong host, port, role or database).
    """
    acquire = asyncio.ensure_future(lease.acquire())
    await _first(asyncio.shield(acquire), stop.wait())
    if not acquire.done():
        acquire.cancel()
        await asyncio.gather(acquire, return_exceptions=True)
        await lease.release()
        log.info("standby stopped")
        return False
    try:
        acquire.result()
    except StoreError as exc:
        await lease.release()
        fix = exc.fix if isinstance(exc, Unreachable) else ""
        raise StartupError("postgres_url", redact_url(lease.url), str(exc), fix) from None
    return True
