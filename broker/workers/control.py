"""The control socket between the first worker and each other worker: messages with file descriptors.

Rules:
- One Unix stream socket per worker (a ``socketpair`` made before the worker is started; the worker
  inherits its end). Each message is a 4-byte big-endian length and a JSON object; a message that
  carries file descriptors says how many in ``"fds"``, and they travel with its first byte as
  ``SCM_RIGHTS`` ancillary data.
- Received descriptors wait in arrival order until their message is complete: the kernel delivers
  a message's descriptors no later than its first byte, so a complete message's are always there.
- Sending never blocks the event loop: what the socket does not take now waits in an outbox and is
  written when the socket is writable. A descriptor given to ``send`` belongs to the channel from
  then on (closed once it is sent, or when the channel closes).
- The other end closing (EOF or an error) calls ``on_closed`` once; descriptors not yet handed to
  ``on_message`` are closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

MAX_MESSAGE = 256 * 1024 * 1024  # a definitions snapshot of a very large broker fits
_HEADER = 4
_RECV = 256 * 1024
_MAX_FDS = 64

Message = dict[str, Any]


class Control:
    """One end of a control socket (see the module rules).

    Args:
        sock: the connected Unix stream socket (made non-blocking here).
        loop: the running event loop.
        on_message: called with each message and its file descriptors (the callee owns them).
        on_closed: called once when the other end is gone.
    """

    def __init__(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        on_message: Callable[[Message, list[int]], None],
        on_closed: Callable[[], None] = lambda: None,
    ) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.loop = loop
        self.on_message = on_message
        self.on_closed = on_closed
        self.closed = False
        self._inbox = bytearray()
        self._fds: deque[int] = deque()
        self._outbox: deque[tuple[memoryview, list[int]]] = deque()
        self._writing = False
        loop.add_reader(sock.fileno(), self._readable)

    # -- sending ----------------------------------------------------------------------------------
    def send(self, message: Message, fds: Sequence[int] = ()) -> bool:
        """Queue ``message`` with ``fds`` (which the channel closes once sent). False: the other end
        is gone (now or before), the message is dropped."""
        if self.closed:
            for fd in fds:
                os.close(fd)
            return False
        if fds:
            message = {**message, "fds": len(fds)}
        body = json.dumps(message, separators=(",", ":")).encode()
        self._outbox.append((memoryview(len(body).to_bytes(_HEADER, "big") + body), list(fds)))
        if not self._writing:
            self._write()
        return not self.closed

    def _write(self) -> None:
        while self._outbox:
            data, fds = self._outbox[0]
            try:
                sent = socket.send_fds(self.sock, [data], fds) if fds else self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                log.warning("worker control socket: %s", exc)
                self._close()
                return
            for fd in fds:  # they went with the first byte sent
                os.close(fd)
            if sent < len(data):
                self._outbox[0] = (data[sent:], [])
                break
            self._outbox.popleft()
        if self._outbox and not self._writing:
            self._writing = True
            self.loop.add_writer(self.sock.fileno(), self._writable)
        elif not self._outbox and self._writing:
            self._writing = False
            self.loop.remove_writer(self.sock.fileno())

    def _writable(self) -> None:
        self._write()

    # -- receiving --------------------------------------------------------------------------------
    def _readable(self) -> None:
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.sock, _RECV, _MAX_FDS)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.warning("worker control socket: %s", exc)
            self._close()
            return
        self._fds.extend(fds)
        if not data:
            self._close()
            return
        inbox = self._inbox
        inbox += data
        while len(inbox) >= _HEADER:
            size = int.from_bytes(inbox[:_HEADER], "big")
            if size > MAX_MESSAGE:
                log.error("worker control socket: a message of %d bytes; closing", size)
                self._close()
                return
            if len(inbox) < _HEADER + size:
                break
            message = json.loads(bytes(inbox[_HEADER : _HEADER + size]))
            del inbox[: _HEADER + size]
            count = int(message.pop("fds", 0))
            taken = [self._fds.popleft() for _ in range(min(count, len(self._fds)))]
            try:
                self.on_message(message, taken)
            except Exception:  # a bug of ours must not stop the channel
                log.exception("worker control message %r failed", message.get("type"))
            if self.closed:
                return

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        fileno = self.sock.fileno()
        if fileno >= 0:
            self.loop.remove_reader(fileno)
            if self._writing:
                self.loop.remove_writer(fileno)
        self.sock.close()
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        for _data, fds in self._outbox:
            for fd in fds:
                os.close(fd)
        self._outbox.clear()
        self.on_closed()

    def close(self) -> None:
        """Close this end (queued messages are dropped)."""
        self._close()
