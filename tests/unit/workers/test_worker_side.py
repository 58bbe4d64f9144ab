"""A worker other than the first (broker/workers/worker.py) in this process, its control socket's other
end played by the test as worker 0: it starts through the broker's own start-up (``Broker.start``,
``internal``), answers ``Start`` with ``Ready``, dispatches what worker 0 sends by its type, and
stops when worker 0 is gone, also before ``Start``."""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from ottermq.broker.config import Settings
from ottermq.broker.node.node import Node
from ottermq.broker.workers import metadata
from ottermq.broker.workers.control import Control
from ottermq.broker.workers.messages import (
    Channels,
    ChannelsElsewhere,
    Connection,
    Metadata,
    Ready,
    Start,
    Synced,
)
from ottermq.broker.workers.worker import Worker
from ottermq.persistence.archive import NullArchive

from .conftest import Received, Run, pipe, read_end_open


def worker_0_settings(tmp_path: Path) -> Settings:
    return Settings(_env_file=None, data_dir=tmp_path, vhosts=["/", "b"])  # type: ignore[call-arg]


async def worker_0_metadata(settings: Settings) -> dict[str, Any]:
    """What worker 0 sends: the snapshot of a node opened on ``settings`` (its defaults seeded)."""
    node = Node(settings, asyncio.get_running_loop(), archive=NullArchive())
    await node.open()
    try:
        return metadata.snapshot(node)
    finally:
        node.stop()
        await node.close()


def start_worker(
    loop: asyncio.AbstractEventLoop, zero: Received
) -> tuple[Control, Worker, asyncio.Task[None]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    control = Control(ours, loop, zero.on_message, zero.on_closed)
    worker = Worker(1, theirs, loop)
    return control, worker, loop.create_task(worker.run())


def test_a_worker_starts_as_a_broker_and_answers_worker_0(run: Run, tmp_path: Path) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        settings = worker_0_settings(tmp_path)
        definitions = await worker_0_metadata(settings)
        zero = Received()
        control, worker, running = start_worker(loop, zero)
        control.send(Start.of(settings, definitions, ["b"]))
        await zero.until(lambda: len(zero.messages) == 1)
        [ready] = zero.only()
        assert isinstance(ready, Ready) and ready.web is not None and ready.prometheus is not None
        broker = worker.broker
        assert broker is not None and broker.internal and broker.amqp.listeners() == []
        assert broker.web is not None and broker.web.addresses() == [("127.0.0.1", ready.web)]
        node = broker.node
        assert node.services.settings.data_dir == tmp_path / "worker-1"
        assert (tmp_path / "worker-1" / "ottermq.db").exists()  # its own store, opened
        assert metadata.snapshot(node) == definitions  # worker 0's metadata, applied before serving
        assert node.cluster.owns("b") and not node.cluster.owns("/")

        changed = copy.deepcopy(definitions)
        changed["vhosts"].append({**changed["vhosts"][0], "name": "c"})
        control.send(ChannelsElsewhere({"guest": 3}))
        control.send(Metadata(1, changed, ("b", "c")))
        await zero.until(lambda: len(zero.messages) == 3)
        assert zero.only()[1:] == [Synced(1), Channels({})]  # answered, then its channels reported
        assert node.connections.user_channels("guest") == 3  # the other workers', as worker 0 sent them
        assert sorted(node.services.auth.vhosts) == ["/", "b", "c"] and node.cluster.owns("c")

        control.close()  # worker 0 gone: the worker shuts down as a broker does
        async with asyncio.timeout(10):
            await running
        assert worker.control.closed

    run(main())


def test_a_worker_whose_worker_0_is_gone_before_start_exits_at_once(run: Run, tmp_path: Path) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        zero = Received()
        control, worker, running = start_worker(loop, zero)
        read, write = pipe()
        control.send(Connection(1, b"AMQP", b"", None), [read])  # before Start: not taken, closed
        control.close()
        async with asyncio.timeout(10):
            await running
        assert worker.broker is None and worker.control.closed and not read_end_open(write)
        os.close(write)

        control, worker, running = start_worker(loop, zero)
        worker.stop.set()  # SIGTERM
        async with asyncio.timeout(10):
            await running
        assert worker.broker is None and worker.control.closed
        await zero.until(lambda: zero.closed == 2)
        assert zero.messages == []

    run(main())
    assert list(tmp_path.iterdir()) == []  # nothing started: no data dir


def test_a_message_for_worker_0_closes_the_workers_control_socket(
    run: Run, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        settings = worker_0_settings(tmp_path)
        zero = Received()
        control, worker, running = start_worker(loop, zero)
        control.send(Start.of(settings, await worker_0_metadata(settings), ["b"]))
        await zero.until(lambda: len(zero.messages) == 1)
        control.send(Ready(1, 2))
        async with asyncio.timeout(10):
            await running
        await zero.until(lambda: zero.closed == 1)
        assert worker.control.closed

    caplog.set_level(logging.INFO)
    run(main())
    assert "worker 1: worker 0 sent 'ready', a message for worker 0; closing" in caplog.messages
