"""Worker 0's relay of a TLS connection another worker serves.

A TLS session cannot change process, so worker 0 keeps it: the owner gets one end of a Unix socket
pair, and worker 0 copies bytes both ways between the client's TLS transport and the other end.
Each side's full write buffer pauses reading from the other (asyncio's flow control), so a slow
client or worker does not make worker 0 buffer without bound. Either side closing closes the other.
"""

from __future__ import annotations

import asyncio
import socket
from typing import cast


class _Half(asyncio.Protocol):
    """Reads one transport and writes what it reads to its peer's."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Half | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)

    def eof_received(self) -> bool:
        return False  # close our side; connection_lost closes the peer

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


async def relay(client: asyncio.Transport, inner: socket.socket) -> None:
    """Copy bytes between ``client`` (paused, its protocol replaced here) and ``inner``."""
    loop = asyncio.get_running_loop()
    outside, inside = _Half(), _Half()
    outside.transport = client
    outside.peer, inside.peer = inside, outside
    await loop.connect_accepted_socket(lambda: inside, inner)
    client.set_protocol(outside)
    client.resume_reading()
