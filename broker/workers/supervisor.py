"""Worker 0's side: starting the other workers, restarting them, handing them connections.

Rules:
- ``start`` (after worker 0's node is open) starts workers 1..N-1 and waits until each is ready.
- The start-up definitions file (``OTTERMQ_DEFINITIONS_FILE``) is applied as ``POST /definitions``
  is: worker 0's node opens with its metadata (``hold_topology`` keeps the rest back, as which worker
  owns a vhost is known only once that node is open), then each vhost's owner declares the file's
  exchanges, queues and bindings in it: the other workers from their ``Start`` message (again at
  every restart: what a worker has already is left as it is), worker 0 once it joins the workers.
  Each worker's part of the import report comes back in its ``Ready``; worker 0 joins those of the
  first start into the file's report (``ImportReport.add_topology``, as the HTTP import joins the
  workers' answers), logging their skipped items, so the summary logged once every worker has
  started and the overview's ``definitions_file`` cover every worker (a restart's skipped items are
  logged, not joined).
  A worker that exits while the broker runs is started again (after 0.5 s, doubling up to 10 s
  while it keeps failing within a minute); it recovers its vhosts from its store. Meanwhile a
  connection to one of its vhosts is refused as RabbitMQ refuses a vhost that is down
  (``530 NOT_ALLOWED - vhost X is down``), and the other workers keep serving.
- ``route`` (``AMQPServer.router``): at ``connection.open`` of an existing vhost, a connection
  whose vhost another worker owns is given to it: a duplicate of the socket's descriptor and the
  handshake bytes go over the control socket, worker 0 forgets the connection without a word, and
  the owner replays the handshake and answers ``open-ok`` itself. A TLS connection stays
  terminated in worker 0: the owner gets one end of a socket pair, worker 0 copies bytes between
  the TLS socket and the other end.
- ``sync`` sends the metadata snapshot to every running worker and waits for their answers (up to
  ``SYNC_TIMEOUT``): a change made through the management API is answered once every worker has it.
- User channel limits (``max-channels``) count every worker's channels: a worker reports its open
  channels per limited user whenever they change (``channels``, coalesced per event-loop turn), and
  worker 0 sends each worker the sum of the others' (``channels_elsewhere``) when it changes. A
  limit is checked against counts a few milliseconds old.
- ``stop``: SIGTERM to every worker and wait (they close their connections with 320 and commit),
  then SIGKILL what is left.
- What a worker sends is dispatched by its type (``HANDLERS``, one method per message of
  ``messages.TO_WORKER_0``); anything else closes that worker's control socket, as a message that
  does not decode does (``control.Control``): the worker then stops and is started again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ottermq.amqp.errors import AMQPError, NotAllowed
from ottermq.persistence.store import Definitions
from ottermq.vhost.policy import PolicyError

from .. import VERSION
from ..node.definitions import (
    DefinitionsError,
    ImportReport,
    apply_definitions,
    check_references,
    definitions_to_json,
)
from ..node.startup import StartupError
from ..server.endpoints import describe
from . import metadata
from .cluster import WorkerCluster
from .control import Control
from .messages import (
    Channels,
    ChannelsElsewhere,
    Closed,
    Connection,
    Message,
    Metadata,
    Ready,
    Start,
    Synced,
    Taken,
)
from .ownership import FILE_NAME, OwnershipError, VhostOwners
from .relay import relay

if TYPE_CHECKING:
    from ..runtime import Broker
    from ..server.handoff import HandOff

log = logging.getLogger(__name__)

READY_TIMEOUT = 60.0
SYNC_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class Offer:
    """A connection sent to a worker that has not yet said it took it."""

    conn: HandOff
    vhost: str
    relay_end: socket.socket | None  # a TLS connection: worker 0's end of the pair to the owner


@dataclass(eq=False)
class Child:
    """A running worker process as worker 0 sees it."""

    index: int
    process: asyncio.subprocess.Process
    control: Control
    ready: asyncio.Future[Ready]
    web_port: int | None = None
    prometheus_port: int | None = None
    synced: dict[int, asyncio.Future[None]] = field(default_factory=dict)
    offered: dict[int, Offer] = field(default_factory=dict)  # sent, not yet taken
    serving: set[int] = field(default_factory=set)  # taken, not yet closed
    channels: dict[str, int] = field(default_factory=dict)  # its open channels per limited user
    told: dict[str, int] = field(default_factory=dict)  # the other workers' channels, as last sent to it

    @property
    def up(self) -> bool:
        return self.ready.done() and not self.ready.cancelled() and not self.control.closed


class Supervisor:
    """Workers 1..N-1 of a broker whose ``OTTERMQ_WORKERS`` is N > 1 (see the module rules)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.loop = broker.loop
        settings = broker.settings
        self.count = settings.workers
        path = settings.data_dir / FILE_NAME if settings.store == "sqlite" else None
        self.owners = VhostOwners(self.count, path)
        self.children: dict[int, Child] = {}
        self._topology = Definitions()  # the start-up file's exchanges, queues and bindings (hold_topology)
        self._watchers: set[asyncio.Task[None]] = set()
        self._seq = 0
        self._offers = 0
        self._stopping = False
        self._started = False  # ``start`` is done: a worker's Ready is a restart's
        self._spreading = False  # a channels_elsewhere round is scheduled
        # this process among the workers, once they have all started (``start``)
        self.cluster = WorkerCluster(0, lambda name: self.owners.owner(name) == 0, self._spread_soon, self)
        # the processes start at once (importing Python takes a while); they get their settings and
        # the metadata in ``start``, once worker 0's store is open
        self._launching: asyncio.Future[list[Child]] = asyncio.gather(
            *(self._launch(index) for index in range(1, self.count))
        )

    # -- start and stop ---------------------------------------------------------------------------
    def hold_topology(self, definitions: Definitions) -> Definitions:
        """Keep the start-up definitions' exchanges, queues and bindings for their vhosts' owners (see
        the module rules); returns the rest, which worker 0's node applies as it opens."""
        self._topology = Definitions(
            exchanges=definitions.exchanges, queues=definitions.queues, bindings=definitions.bindings
        )
        return dataclasses.replace(definitions, exchanges=[], queues=[], bindings=[])

    def _topology_of(self, index: int) -> Definitions:
        """The held topology in the vhosts worker ``index`` owns."""
        held, owner = self._topology, self.owners.owner
        return Definitions(
            exchanges=[x for x in held.exchanges if owner(x.vhost) == index],
            queues=[q for q in held.queues if owner(q.vhost) == index],
            bindings=[b for b in held.bindings if owner(b.vhost) == index],
        )

    async def start(self) -> None:
        """Give vhosts their workers, start the workers and route connections to them.

        Raises:
            StartupError: the kept assignment needs more workers, or a worker did not start.
        """
        node = self.broker.node
        # vhosts holding exchanges or queues before there was an assignment: worker 0's store has them
        holding = [
            name
            for name, v in node.vhosts.items()
            if v.queues or any(x and not x.startswith("amq.") for x in v.exchanges)
        ]
        try:
            self.owners.load(holding)
        except OwnershipError as exc:
            raise StartupError("workers", self.count, str(exc)) from None
        for name in sorted(node.services.auth.vhosts):
            self.owners.owner(name)
        auth = node.services.auth
        try:  # what the file names exists (worker 0 applied its vhosts and users as its node opened)
            check_references(self._topology, auth.users, auth.vhosts)
        except DefinitionsError as exc:
            raise StartupError("definitions_file", self.broker.settings.definitions_file, str(exc)) from None
        for child in await self._launching:
            self._begin(child)
        imported = node.definitions_file
        for index in range(1, self.count):
            child = self.children[index]
            try:
                ready = await asyncio.wait_for(asyncio.shield(child.ready), READY_TIMEOUT)
            except (TimeoutError, asyncio.CancelledError):
                raise StartupError("workers", self.count, f"worker {index} did not start") from None
            if imported is not None:
                self._join_report(imported.report, ready)
        self.broker.amqp.router = self.route
        node.join(self.cluster)
        own = self._topology_of(0)
        if own.exchanges or own.queues or own.bindings:
            try:  # its skipped items are logged as they are skipped, as in one process
                apply_definitions(node, own, report=imported.report if imported is not None else None)
            except (DefinitionsError, AMQPError, PolicyError) as exc:
                raise StartupError(
                    "definitions_file", self.broker.settings.definitions_file, str(exc)
                ) from None
        self._started = True
        log.info("%d workers: %s", self.count, self.describe())

    @staticmethod
    def _join_report(report: ImportReport, ready: Ready) -> None:
        """A worker's part of the start-up file's import report (``Ready.report``) joined into the
        file's (as the HTTP import joins the workers' answers), its skipped items logged here."""
        if ready.report is None:  # nothing of the file in its vhosts
            return
        for item in report.add_topology(ImportReport.from_json(ready.report)):
            log.warning("definitions: skipped %s", item.describe())

    def describe(self) -> str:
        return "; ".join(
            f"worker {i}: {', '.join(self.owners.owned_by(i)) or 'no vhost yet'}" for i in range(self.count)
        )

    async def _spawn(self, index: int) -> None:
        """Start worker ``index`` and give it its settings and the metadata."""
        self._begin(await self._launch(index))

    async def _launch(self, index: int) -> Child:
        """Start worker ``index``'s process: it imports the broker while worker 0 opens its store."""
        parent, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "ottermq.broker.workers",
                str(index),
                str(child_end.fileno()),
                self.broker.settings.log_level,
                pass_fds=(child_end.fileno(),),
            )
        finally:
            child_end.close()
        ready: asyncio.Future[Ready] = self.loop.create_future()
        control = Control(parent, self.loop, lambda m, f: None, name=f"worker {index}'s control socket")
        child = Child(index, process, control, ready)
        child.control.on_message = lambda message, fds: self._on_message(child, message, fds)
        child.control.on_closed = lambda: self._on_closed(child)
        self.children[index] = child
        return child

    def _begin(self, child: Child) -> None:
        index = child.index
        node = self.broker.node
        topology = definitions_to_json(self._topology_of(index), VERSION)
        child.control.send(
            Start.of(
                self.broker.settings,
                metadata.snapshot(node),
                self.owners.owned_by(index),
                topology,
                node.services.auth.internal_secret,
            )
        )
        watcher = self.loop.create_task(self._watch(child))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    # -- what the workers send ----------------------------------------------------------------------
    def _on_message(self, child: Child, message: Message, fds: list[int]) -> None:
        handler = self.HANDLERS.get(type(message))
        if handler is None:  # a message for the workers (fds: a connection's)
            for fd in fds:
                os.close(fd)
            log.error(
                "worker %d sent %r, a message for the workers; closing its control socket",
                child.index,
                message.TYPE,
            )
            child.control.close()
            return
        handler(self, child, message)

    def _on_ready(self, child: Child, message: Ready) -> None:
        if not child.ready.done():
            child.web_port, child.prometheus_port = message.web, message.prometheus
            child.ready.set_result(message)
            log.info("worker %d ready (pid %d)", child.index, child.process.pid)
            if self._started and message.report is not None:  # a restart: its skipped items, logged
                for item in ImportReport.from_json(message.report).skipped:
                    log.warning("definitions: skipped %s (worker %d restarted)", item.describe(), child.index)

    def _on_taken(self, child: Child, message: Taken) -> None:
        offer = child.offered.pop(message.id, None)
        if offer is None:
            return
        if message.id in self.cluster.handed:  # not closed already
            child.serving.add(message.id)
        if offer.relay_end is None:
            offer.conn.handed_off()
        else:
            task = self.loop.create_task(relay(offer.conn.relayed(), offer.relay_end))
            self._watchers.add(task)
            task.add_done_callback(self._watchers.discard)

    def _on_connection_closed(self, child: Child, message: Closed) -> None:
        child.serving.discard(message.id)
        self.cluster.handed.pop(message.id, None)

    def _on_channels(self, child: Child, message: Channels) -> None:
        child.channels = dict(message.counts)
        self._spread_soon()

    def _on_synced(self, child: Child, message: Synced) -> None:
        waiter = child.synced.pop(message.seq, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    HANDLERS: ClassVar[dict[type[Message], Callable[[Supervisor, Child, Any], None]]] = {
        Ready: _on_ready,
        Taken: _on_taken,
        Closed: _on_connection_closed,
        Channels: _on_channels,
        Synced: _on_synced,
    }

    # -- user channel limits -----------------------------------------------------------------------
    def _spread_soon(self) -> None:
        if not self._spreading:
            self._spreading = True
            self.loop.call_soon(self._spread)

    def _spread(self) -> None:
        """Tell every worker the channels the limited users have open in the other workers."""
        self._spreading = False
        node = self.broker.node
        here = node.connections.limited_user_channels()
        up = [c for c in self.children.values() if c.up]
        users = set(here).union(*(c.channels for c in up))
        total = {u: here.get(u, 0) + sum(c.channels.get(u, 0) for c in up) for u in users}

        def elsewhere(own: dict[str, int]) -> dict[str, int]:
            """The channels of the workers other than the one whose counts are ``own`` (none: left out)."""
            return {u: n - own.get(u, 0) for u, n in total.items() if n > own.get(u, 0)}

        self.cluster.channels = elsewhere(here)
        for child in up:
            others = elsewhere(child.channels)
            if others != child.told:
                child.told = others
                child.control.send(ChannelsElsewhere(others))

    def _on_closed(self, child: Child) -> None:
        if child.channels or child.told:  # its channels closed with it
            child.channels, child.told = {}, {}
            self._spread_soon()
        for number in (*child.serving, *child.offered):  # its connections died with it
            self.cluster.handed.pop(number, None)
        child.serving.clear()
        offered, child.offered = child.offered, {}
        for offer in offered.values():
            if offer.relay_end is not None:
                offer.relay_end.close()
            offer.conn.refuse(NotAllowed(f"vhost {offer.vhost} is down"))
        for waiter in child.synced.values():
            if not waiter.done():
                waiter.set_result(None)
        child.synced.clear()
        if not child.ready.done():
            child.ready.cancel()

    async def _watch(self, child: Child) -> None:
        code = await child.process.wait()
        child.control.close()
        if self._stopping or self.children.get(child.index) is not child:
            return
        log.error(
            "worker %d (pid %d) exited with %s; starting it again", child.index, child.process.pid, code
        )
        delay = 0.5
        while not self._stopping:
            await asyncio.sleep(delay)
            if self._stopping:
                return
            try:
                await self._spawn(child.index)
            except OSError as exc:
                log.error("worker %d: cannot start: %s", child.index, exc)
                delay = min(delay * 2, 10.0)
                continue
            return

    async def stop(self) -> None:
        """Stop every worker (SIGTERM, then SIGKILL after ``STOP_TIMEOUT``)."""
        self._stopping = True
        children = list(self.children.values())
        for child in children:
            if child.process.returncode is None:
                child.process.send_signal(signal.SIGTERM)
        for child in children:
            try:
                await asyncio.wait_for(child.process.wait(), STOP_TIMEOUT)
            except TimeoutError:
                log.error("worker %d did not stop; killing it", child.index)
                child.process.kill()
                await child.process.wait()
            child.control.close()
        for watcher in list(self._watchers):
            watcher.cancel()

    # -- WorkerPool (what the management API uses) -------------------------------------------------
    def owner(self, vhost: str) -> int:
        return self.owners.owner(vhost)

    def web_port(self, index: int) -> int | None:
        child = self.children.get(index)
        return child.web_port if child is not None and child.up else None

    def prometheus_port(self, index: int) -> int | None:
        child = self.children.get(index)
        return child.prometheus_port if child is not None and child.up else None

    # -- connections ------------------------------------------------------------------------------
    def route(self, conn: HandOff, vhost: str) -> bool:
        """Give ``conn`` to the owner of ``vhost``; False when worker 0 owns it.

        Raises:
            NotAllowed: the owner is not running (being started again).
        """
        index = self.owners.owner(vhost)
        if index == 0:
            return False
        child = self.children.get(index)
        if child is None or not child.up:
            raise NotAllowed(f"vhost {vhost} is down")
        transport = conn.transport
        assert transport is not None
        before, rest = conn.handshake_bytes()
        inner: socket.socket | None = None
        endpoints: dict[str, Any] | None = None
        if conn.endpoints.tls:  # the session stays here: the owner gets a socket pair's end
            inner, outer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            endpoints = describe(conn.endpoints)
            fd = os.dup(outer.fileno())
            outer.close()
        else:
            sock: Any = transport.get_extra_info("socket")
            fd = os.dup(sock.fileno())
        self._offers += 1
        message = Connection(self._offers, before, rest, endpoints)
        if not child.control.send(message, [fd]):  # it has just died
            if inner is not None:
                inner.close()
            raise NotAllowed(f"vhost {vhost} is down")
        conn.hold()  # until the worker says it has the socket: if it dies first, this one answers
        child.offered[self._offers] = Offer(conn, vhost, inner)
        self.cluster.handed[self._offers] = (vhost, conn.username)
        return True

    # -- metadata ---------------------------------------------------------------------------------
    async def sync(self) -> None:
        """Send the metadata to every running worker and wait for their answers."""
        self.owners.forget(self.broker.node.services.auth.vhosts)
        for name in sorted(self.broker.node.services.auth.vhosts):
            self.owners.owner(name)
        self._seq += 1
        seq = self._seq
        data = metadata.snapshot(self.broker.node)
        waiters = []
        for child in self.children.values():
            if child.up:
                waiter: asyncio.Future[None] = self.loop.create_future()
                child.synced[seq] = waiter
                child.control.send(Metadata(seq, data, tuple(self.owners.owned_by(child.index))))
                waiters.append(waiter)
        self._spread_soon()  # a max-channels limit set or removed: who is counted changed
        if waiters:
            done, pending = await asyncio.wait(waiters, timeout=SYNC_TIMEOUT)
            if pending:
                log.warning("%d workers did not confirm the metadata in %.0f s", len(pending), SYNC_TIMEOUT)
