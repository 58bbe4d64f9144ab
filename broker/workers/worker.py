"""A worker other than the first: a broker for the vhosts it owns, fed connections by worker 0.

Rules:
- Started by worker 0 (``python -m ottermq.broker.workers INDEX FD``) with one end of its control
  socket (``control.Control``) as file descriptor FD. The first message is ``start``: worker 0's
  settings and metadata snapshot. The worker then runs with its own store under
  ``OTTERMQ_DATA_DIR/worker-INDEX`` (recovering it as any broker does), no AMQP listener of its
  own, and its management API and Prometheus endpoint on ``127.0.0.1`` ports the system picks,
  which it reports in ``ready``.
- ``connection``: a client socket (plain TCP, or worker 0's end of a TLS connection it terminates)
  with the bytes of its handshake, replayed (``AMQPServer.adopt``). ``metadata``: a new snapshot,
  applied (``metadata.sync``) and answered with ``synced`` and its number.
- Worker 0 gone (the control socket closed) or SIGTERM/SIGINT: shut down as a broker does (320 to
  every connection, the store committed), then exit.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import signal
import socket
import sys
from typing import Any

from ..config import Settings
from ..management import ManagementServer
from ..management.prometheus import PrometheusServer
from ..node.startup import check_archive_dir, prepare_data_dir
from ..node.wiring import open_store, shared_archive
from ..runtime import Broker
from ..server.endpoints import RelayedEndpoints
from . import metadata
from .cluster import WorkerCluster
from .control import Control, Message

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
        self._started: asyncio.Future[Message] = loop.create_future()
        self.control = Control(sock, loop, self._on_message, self.stop.set)

    def _on_message(self, message: Message, fds: list[int]) -> None:
        kind = message.get("type")
        if kind == "start":
            if not self._started.done():
                self._started.set_result(message)
            return
        broker = self.broker
        if kind == "connection" and broker is not None and fds:
            sock = socket.socket(fileno=fds[0])
            before = base64.b64decode(message["before"])
            rest = base64.b64decode(message["rest"])
            offer = message.get("id")
            described = message.get("endpoints")
            relayed = RelayedEndpoints(described) if described is not None else None

            def gone() -> None:
                self.control.send({"type": "closed", "id": offer})

            task = self.loop.create_task(broker.amqp.adopt(sock, before, rest, relayed, gone))
            task.add_done_callback(_log_failure)
            task.add_done_callback(lambda _t: self.control.send({"type": "taken", "id": offer}))
            return
        if kind == "metadata" and broker is not None:
            self._syncs.add(task := self.loop.create_task(self._sync(broker, message)))
            task.add_done_callback(self._syncs.discard)
            return
        if kind == "channels_elsewhere" and broker is not None:
            counts = message.get("counts") or {}
            self.cluster.channels = {str(k): int(v) for k, v in counts.items()}
            return
        for fd in fds:
            socket.socket(fileno=fd).close()

    async def _sync(self, broker: Broker, message: Message) -> None:
        """Apply worker 0's metadata, in the order it came: its policies' patterns are first matched
        off the event loop (``metadata.prepare``), then everything is applied at once."""
        async with self._syncing:
            try:
                await metadata.prepare(broker.node, message["definitions"])
            except Exception:
                log.exception("worker %d: policy patterns of worker 0's metadata not prepared", self.index)
            self.owned = set(message.get("owned") or ())
            try:
                metadata.sync(broker.node, message["definitions"])
            except Exception:
                log.exception("worker %d: metadata from worker 0 not applied", self.index)
            self.control.send({"type": "synced", "seq": message.get("seq")})
            self._report_channels()  # the limited users may have changed

    def _report_soon(self) -> None:
        """A limited user's channels changed here: report them once this event-loop turn is over."""
        if not self._reporting:
            self._reporting = True
            self.loop.call_soon(self._report_channels)

    def _report_channels(self) -> None:
        self._reporting = False
        if self.broker is not None:
            self.control.send(
                {"type": "channels", "counts": self.broker.node.connections.limited_user_channels()}
            )

    async def run(self) -> None:
        start = await self._started
        settings = worker_settings(Settings(_env_file=None, **start["settings"]), self.index)  # type: ignore[call-arg]
        check_archive_dir(settings)
        prepare_data_dir(settings)
        broker = Broker(settings, self.loop, open_store(settings), archive=shared_archive(settings))
        self.owned = set(start.get("owned") or ())
        broker.node.join(self.cluster)
        await broker.node.open(seed=False)
        await metadata.prepare(broker.node, start["definitions"])
        metadata.sync(broker.node, start["definitions"])
        self.broker = broker
        web = prometheus = None
        if settings.enable_web_api:
            web = broker.web = ManagementServer(broker.node, None, ephemeral=True)
            web.bind()
            await web.start()
        if settings.enable_prometheus:
            prometheus = broker.prometheus = PrometheusServer(broker.node, None, ephemeral=True)
            prometheus.bind()
            await prometheus.start()
        broker.amqp.ack_timeouts.start()
        broker.node.alarms.start()
        self.control.send(
            {
                "type": "ready",
                "web": web.addresses()[0][1] if web is not None else None,
                "prometheus": prometheus.addresses()[0][1] if prometheus is not None else None,
            }
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


def _start_message(settings: Settings, definitions: dict[str, Any], owned: list[str]) -> Message:
    return {
        "type": "start",
        "settings": settings.model_dump(mode="json"),
        "definitions": definitions,
        "owned": owned,
    }
