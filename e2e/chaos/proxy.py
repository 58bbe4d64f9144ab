"""A delaying TCP proxy (asyncio, standard library only), steered by a JSON control file.

Run it (inside a host's namespace: ``host.popen(proxy_command(...))``)::

    python proxy.py --listen IP:PORT --target IP:PORT --control FILE [--ready FILE]

The control file holds ``{"delay": 0.2, "loss": 0.0, "rto": 0.2, "cut": false}`` (any key may be left
out); the proxy polls its mtime/inode every 50 ms and applies a change to new and existing connections.
Write it with :class:`ProxyControl` (atomic rename: the proxy never reads half a file).

* ``delay``: seconds each chunk waits before it is forwarded, in each direction, order preserved (a 200 ms
  delay adds 200 ms one way, 400 ms to a round trip, like netem). Chunks already on their way keep the
  delay they were read with.
* ``loss``: the share of chunks that are "lost": such a chunk arrives ``rto`` seconds late (a TCP
  retransmission), and everything behind it waits too (head-of-line blocking); nothing is dropped from the
  stream. Real packet loss is :meth:`net.Host.loss`.
* ``cut``: ``true`` (or ``"both"``) stalls both directions silently, ``"up"`` only client to target,
  ``"down"`` only target to client: nothing is read or forwarded, nothing is closed, and what was held
  flows once the cut is lifted. A new connection is still accepted (the proxy's kernel answers the
  handshake) but reaches nothing; for connects that time out, use :meth:`net.Host.block`.

``--ready FILE``: once listening, the proxy writes ``IP:PORT`` there (port 0 picks a free port).
Each direction buffers at most :data:`BUFFER_LIMIT` bytes before it stops reading (backpressure).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

log = logging.getLogger("chaos.proxy")

POLL_INTERVAL = 0.05
READ_SIZE = 64 * 1024
BUFFER_LIMIT = 1 << 20  # bytes queued per direction before reading stops
CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Settings:
    """What the proxy does to the traffic (see the module docstring)."""

    delay: float = 0.0
    loss: float = 0.0
    rto: float = 0.2
    cut: bool | str = False

    def cuts(self, direction: str) -> bool:
        """Whether ``direction`` (``"up"``: client to target, ``"down"``) is stalled."""
        return self.cut is True or self.cut == "both" or self.cut == direction

    @classmethod
    def from_json(cls, text: str) -> Settings:
        """Settings from the control file's text; missing keys keep their defaults.

        Raises:
            ValueError: not a JSON object, an unknown key or a bad value.
        """
        data = json.loads(text) if text.strip() else {}
        if not isinstance(data, dict):
            raise ValueError("the control file must hold a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        settings = cls(**data)
        if settings.delay < 0 or settings.rto < 0 or not 0 <= settings.loss <= 1:
            raise ValueError(f"out of range: {settings}")
        if settings.cut not in (True, False, "both", "up", "down"):
            raise ValueError(f"cut must be true, false, 'both', 'up' or 'down', not {settings.cut!r}")
        return settings


class ProxyControl:
    """Writes a proxy's control file, atomically.

    Args:
        path: the control file (written now, with ``initial`` over the defaults).
        initial: :class:`Settings` fields (``delay``, ``loss``, ``rto``, ``cut``).
    """

    def __init__(self, path: str | os.PathLike[str], **initial: Any) -> None:
        self.path = Path(path)
        self.settings = Settings()
        self.set(**initial)

    def set(self, **changes: Any) -> Settings:
        """Change some settings (the others keep their values) and write the file; the new settings.

        Raises:
            ValueError: an unknown key or a bad value.
        """
        settings = replace(self.settings, **changes)
        text = json.dumps(asdict(settings))
        Settings.from_json(text)  # validate before a proxy sees it
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        partial.write_text(text)
        os.replace(partial, self.path)
        self.settings = settings
        log.info("proxy control %s: %s", self.path, text)
        return settings

    def close(self) -> None:
        """Delete the control file."""
        self.path.unlink(missing_ok=True)


def proxy_command(
    listen: str,
    target: str,
    control: str | os.PathLike[str],
    *,
    ready: str | os.PathLike[str] | None = None,
    python: str = sys.executable,
) -> list[str]:
    """The argv that runs this proxy (``listen``/``target`` as ``IP:PORT``)."""
    argv = [python, str(Path(__file__).resolve()), "--listen", listen, "--target", target]
    argv += ["--control", os.fspath(control)]
    if ready is not None:
        argv += ["--ready", os.fspath(ready)]
    return argv


class Controls:
    """The proxy's view of the control file: the current settings and a wake-up on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.settings = Settings()
        self._stamp: tuple[int, int, int] | None = None
        self._changed = asyncio.Event()

    def poll(self) -> None:
        """Re-read the file when its mtime, inode or size changed."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return
        stamp = (st.st_mtime_ns, st.st_ino, st.st_size)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            settings = Settings.from_json(self.path.read_text())
        except (OSError, ValueError, TypeError) as exc:
            log.warning("ignoring control file %s: %s", self.path, exc)
            return
        if settings != self.settings:
            log.info("settings: %s", settings)
            self.settings = settings
            self._changed.set()
            self._changed = asyncio.Event()

    async def watch(self) -> None:
        """Poll the file forever."""
        while True:
            self.poll()
            await asyncio.sleep(POLL_INTERVAL)

    async def wait_open(self, direction: str) -> None:
        """Return once ``direction`` is not cut."""
        while self.settings.cuts(direction):
            await self._changed.wait()


class Pipe:
    """One direction of a connection: read chunks, hold each until its due time, write them in order."""

    def __init__(
        self, controls: Controls, direction: str, src: asyncio.StreamReader, dst: asyncio.StreamWriter
    ) -> None:
        self.controls = controls
        self.direction = direction
        self.src = src
        self.dst = dst
        self.queue: deque[tuple[float, bytes]] = deque()
        self.queued = 0
        self.last_due = 0.0
        self.has_data = asyncio.Event()  # the writer waits for a chunk
        self.has_room = asyncio.Event()  # the reader waits for room under BUFFER_LIMIT

    async def read(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self.controls.wait_open(self.direction)
            while self.queued >= BUFFER_LIMIT:
                self.has_room.clear()
                await self.has_room.wait()
            data = await self.src.read(READ_SIZE)
            settings = self.controls.settings
            due = loop.time() + settings.delay
            if settings.loss and data and random.random() < settings.loss:
                due += settings.rto
            self.last_due = due = max(due, self.last_due)
            self.queue.append((due, data))
            self.queued += len(data)
            self.has_data.set()
            if not data:
                return

    async def write(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self.queue:
                self.has_data.clear()
                await self.has_data.wait()
            due, data = self.queue[0]
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if self.controls.settings.cuts(self.direction):
                await self.controls.wait_open(self.direction)
                continue
            self.queue.popleft()
            self.queued -= len(data)
            self.has_room.set()
            if not data:
                if self.dst.can_write_eof():
                    self.dst.write_eof()
                return
            self.dst.write(data)
            await self.dst.drain()

    async def run(self) -> None:
        await asyncio.gather(self.read(), self.write())


async def _connect(controls: Controls, target: tuple[str, int]) -> tuple[Any, Any]:
    await controls.wait_open("up")
    return await asyncio.wait_for(asyncio.open_connection(*target), CONNECT_TIMEOUT)


async def handle(
    controls: Controls, target: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Serve one client connection until both directions have ended or one fails."""
    peer = writer.get_extra_info("peername")
    try:
        up_reader, up_writer = await _connect(controls, target)
    except OSError as exc:  # TimeoutError included
        log.info("%s: cannot reach %s:%s: %s", peer, *target, exc)
        writer.transport.abort()
        return
    log.debug("%s: connected to %s:%s", peer, *target)
    pipes = [Pipe(controls, "up", reader, up_writer), Pipe(controls, "down", up_reader, writer)]
    tasks = [asyncio.create_task(p.run()) for p in pipes]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        failed = [t for t in done if t.exception() is not None]
        if failed:
            log.debug("%s: %s", peer, failed[0].exception())
            for task in pending:
                task.cancel()
            for w in (writer, up_writer):
                w.transport.abort()  # a reset on one side resets the other
        elif pending:
            await asyncio.wait(pending)
    finally:
        for task in tasks:
            task.cancel()
        for w in (writer, up_writer):
            w.close()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host:
        raise argparse.ArgumentTypeError(f"expected IP:PORT, not {text!r}")
    return host, int(port)


async def serve(
    listen: tuple[str, int], target: tuple[str, int], control: Path, ready: Path | None = None
) -> None:
    """Listen on ``listen`` and forward every connection to ``target`` until cancelled."""
    controls = Controls(control)
    controls.poll()
    watcher = asyncio.create_task(controls.watch())
    server = await asyncio.start_server(
        lambda r, w: handle(controls, target, r, w), listen[0], listen[1], reuse_address=True
    )
    bound = server.sockets[0].getsockname()
    log.info("proxy %s:%s -> %s:%s (control %s)", bound[0], bound[1], *target, control)
    if ready is not None:
        partial = ready.with_name(f".{ready.name}.tmp")
        partial.write_text(f"{bound[0]}:{bound[1]}\n")
        os.replace(partial, ready)
    try:
        async with server:
            await server.serve_forever()
    finally:
        watcher.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", type=_address, required=True, help="IP:PORT to listen on")
    parser.add_argument("--target", type=_address, required=True, help="IP:PORT to forward to")
    parser.add_argument("--control", type=Path, required=True, help="the JSON control file")
    parser.add_argument("--ready", type=Path, help="written with IP:PORT once listening")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s proxy %(levelname)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.listen, args.target, args.control, args.ready))
    return 0


if __name__ == "__main__":
    sys.exit(main())
