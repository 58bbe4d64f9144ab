"""A worker other than the first: a broker for the vhosts it owns, fed connections by worker 0.

Rules:
- Started by worker 0 (``python -m ottermq.broker.workers INDEX FD``) with one end of its control
  socket (``control.Control``) as file descriptor FD. The first message is ``Start``: worker 0's
  settings and metadata snapshot (``messages.py`` lists the messages). The worker then starts as
  any broker does (``Broker.prepare_dirs``, ``Broker.start``, ``internal``): its own store under
  ``OTTERMQ_DATA_DIR/worker-INDEX``, recovered; worker 0's metadata applied before it serves; no
  AMQP listener of its own; its management API and Prometheus endpoint on ``127.0.0.1`` ports the
  system picks, which it reports in ``Ready``, with its part of the start-up definitions file's
  import report (what it declared or skipped of ``Start.topology``; worker 0 logs the skipped items
  and joins the report into the file's, so the worker does not log them itself).
- What worker 0 sends is dispatched by its type (``HANDLERS``, one method per message of
  ``messages.TO_WORKER``); anything else closes the control socket, as a message that does not
  decode does. ``Connection``: a client socket (plain TCP, or worker 0's end of a TLS connection it
  terminates) with the bytes of its handshake, replayed (``AMQPServer.adopt``), answered with
  ``Taken`` (and ``Closed`` when it closes). ``Metadata``: a new snapshot, applied
  (``metadata.sync``) and answered with ``Synced`` and its number.
- Worker 0 gone (the control socket closed) or SIGTERM/SIGINT: shut down as a broker does (320 to
  every connection, the store committed), then exit; before ``Start``, exit at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any, ClassVar

from ottermq.persistence.archive import NullArchive

from ..config import Settings
from ..node.definitions import ImportReport, apply_definitions, definitions_from_json
from ..node.wiring import open_store
from ..runtime import Broker
from ..server.endpoints import RelayedEndpoints
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

log = logging.getLogger(__name__)


def worker_settings(settings: Settings, index: int) -> Settings:
    """Worker ``index``'s settings: its own data dir, internal listeners only, no definitions file
    (worker 0 imports it and sends the result)."""
    return settings.model_copy(
        update={
            "data_dir": settings.data_dir / f"worker-{index}",
            "web_host": "127.0.0.1",
            "web_port": 0,
            "web_max_connections_per_address": 0,  # every request comes from worker 0, at 127.0.0.1
            "web_ssl": False,
            "prometheus_port": 0,
            "prometheus_ssl": False,
            "definitions_file": None,
            "ssl": False,
        }
    )


class Worker:
    """One worker process (see the module rules)."""

    def __init__(self, index: int, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.index = index
        self.loop = loop
        self.broker: Broker | None = None
        self.owned: set[str] = set()  # the vhosts worker 0 gave this worker
        self._reporting = False  # a report of this worker's channels per limited user is scheduled
        # this process among the workers (its node joins it at start-up)
        self.cluster = WorkerCluster(index, lambda name: name in self.owned, self._report_soon)
        self.stop = asyncio.Event()
        self._syncing = asyncio.Lock()  # metadata messages are applied one at a time, in order
        self._syncs: set[asyncio.Task[None]] = set()
        self._started: asyncio.Future[Start] = loop.create_future()
        self.control = Control(sock, loop, self._on_message, self.stop.set, name="control socket to worker 0")

    # -- what worker 0 sends ----------------------------------------------------------------------
    def _on_message(self, message: Message, fds: list[int]) -> None:
        handler = self.HANDLERS.get(type(message))
        if handler is None:
            for fd in fds:
                os.close(fd)
            log.error(
                "worker %d: worker 0 sent %r, a message for worker 0; closing", self.index, message.TYPE
            )
            self.control.close()
            return
        handler(self, message, fds)

    def _on_start(self, message: Start, fds: list[int]) -> None:
        if not self._started.done():
            self._started.set_result(message)

    def _on_connection(self, message: Connection, fds: list[int]) -> None:
        broker = self.broker
        if broker is None:  # not started (worker 0 hands connections over once it is ready)
            for fd in fds:
                os.close(fd)
            return
        sock = socket.socket(fileno=fds[0])
        relayed = RelayedEndpoints(message.endpoints) if message.endpoints is not None else None
        offer = message.id

        def gone() -> None:
            self.control.send(Closed(offer))

        task = self.loop.create_task(broker.amqp.adopt(sock, message.before, message.rest, relayed, gone))
        task.add_done_callback(_log_failure)
        task.add_done_callback(lambda _t: self.control.send(Taken(offer)))

    def _on_metadata(self, message: Metadata, fds: list[int]) -> None:
        broker = self.broker
        if broker is not None:
            self._syncs.add(task := self.loop.create_task(self._sync(broker, message)))
            task.add_done_callback(self._syncs.discard)

    def _on_channels_elsewhere(self, message: ChannelsElsewhere, fds: list[int]) -> None:
        if self.broker is not None:
            self.cluster.channels = dict(message.counts)

    HANDLERS: ClassVar[dict[type[Message], Callable[[Worker, Any, list[int]], None]]] = {
        Start: _on_start,
        Connection: _on_connection,
        Metadata: _on_metadata,
        ChannelsElsewhere: _on_channels_elsewhere,
    }

    async def _sync(self, broker: Broker, message: Metadata) -> None:
        """Apply worker 0's metadata, in the order it came: its policies' patterns are first matched
        off the event loop (``metadata.prepare``), then everything is applied at once."""
        async with self._syncing:
            try:
                await metadata.prepare(broker.node, message.definitions)
            except Exception:
                log.exception("worker %d: policy patterns of worker 0's metadata not prepared", self.index)
            self.owned = set(message.owned)
            try:
                metadata.sync(broker.node, message.definitions)
            except Exception:
                log.exception("worker %d: metadata from worker 0 not applied", self.index)
            self.control.send(Synced(message.seq))
            self._report_channels()  # the limited users may have changed

    # -- this worker's channels per limited user ----------------------------------------------------
    def _report_soon(self) -> None:
        """A limited user's channels changed here: report them once this event-loop turn is over."""
        if not self._reporting:
            self._reporting = True
            self.loop.call_soon(self._report_channels)

    def _report_channels(self) -> None:
        self._reporting = False
        if self.broker is not None:
            self.control.send(Channels(self.broker.node.connections.limited_user_channels()))

    # -- start and stop -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Wait for ``Start``, start as a broker does (see the module rules), say ``Ready``, serve
        until stopped, shut down."""
        stopped: asyncio.Future[Any] = self.loop.create_task(self.stop.wait())
        await asyncio.wait([self._started, stopped], return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not self._started.done():  # worker 0 gone, or a signal, before it said how to start
            self.control.close()
            return
        start = self._started.result()
        settings = worker_settings(start.read_settings(), self.index)
        broker = Broker(settings, self.loop, open_store(settings), archive=NullArchive(), internal=True)
        node = broker.node
        if start.secret:  # worker 0's internal principal: its shovels' connections to this worker's vhosts
            node.services.auth.set_internal(start.secret)
        self.owned = set(start.owned)
        node.join(self.cluster)
        report: ImportReport | None = None  # the start-up definitions file's part here, for worker 0

        async def apply_metadata() -> None:
            nonlocal report
            await metadata.prepare(node, start.definitions)
            metadata.sync(node, start.definitions)
            if start.topology:  # the start-up definitions file's part in this worker's vhosts
                report = ImportReport(quiet=True)  # worker 0 logs what was skipped
                apply_definitions(node, definitions_from_json(start.topology), report=report)

        broker.prepare_dirs()
        await broker.start(before_serving=apply_metadata)
        self.broker = broker
        self.control.send(
            Ready(
                web=broker.web.addresses()[0][1] if broker.web is not None else None,
                prometheus=broker.prometheus.addresses()[0][1] if broker.prometheus is not None else None,
                report=report.to_json() if report is not None else None,
            )
        )
        log.info("worker %d ready (vhosts from worker 0)", self.index)
        await self.stop.wait()
        await broker.shutdown()
        self.control.close()


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("taking over a connection failed: %s", task.exception())


async def serve_worker(index: int, fd: int) -> None:
    loop = asyncio.get_running_loop()
    worker = Worker(index, socket.socket(fileno=fd), loop)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.stop.set)
    await worker.run()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    index, fd = int(args[0]), int(args[1])
    level = args[2] if len(args) > 2 else "INFO"
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO),
        format=f"%(asctime)s [worker {index}] %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiosqlite").setLevel(max(logging.WARNING, logging.root.level))
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        asyncio.run(serve_worker(index, fd))
    else:
        uvloop.run(serve_worker(index, fd))
    return 0
