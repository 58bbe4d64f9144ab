"""The control socket between the first worker and each other worker: typed messages with file
descriptors.

Rules:
- One Unix stream socket per worker (a ``socketpair`` made before the worker is started; the worker
  inherits its end). Each frame is a 5-byte header (the payload's length, 4 bytes big-endian, then
  how many file descriptors travel with it, 1 byte) and the payload: one message of ``messages.py``
  as JSON (``messages.pack``). A frame's descriptors travel with its first byte as ``SCM_RIGHTS``
  ancillary data.
- Received descriptors wait in arrival order until their frame is complete: the kernel delivers a
  frame's descriptors no later than its first byte, so a complete frame's are always there.
- A frame that is not a message (``messages.MessageError``: not JSON, an unknown type, a field
  missing, left over or of another type), a descriptor count other than its type's (``FDS``), or a
  payload over ``MAX_MESSAGE`` is logged and closes the channel (``on_closed``): the other side is a
  different version or broken, and worker 0 starts a worker again once it has exited.
- Sending never blocks the event loop: what the socket does not take now waits in an outbox and is
  written when the socket is writable. A descriptor given to ``send`` belongs to the channel from
  then on (closed once it is sent, or when the channel closes).
- The other end closing (EOF or an error) calls ``on_closed`` once; descriptors not yet handed to
  ``on_message`` are closed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from collections import deque
from collections.abc import Callable, Sequence

from .messages import Message, MessageError, pack, unpack

log = logging.getLogger(__name__)

MAX_MESSAGE = 256 * 1024 * 1024  # a definitions snapshot of a very large broker fits
_HEADER = struct.Struct("!IB")  # payload length, descriptors
_RECV = 256 * 1024
_MAX_FDS = 64


class Control:
    """One end of a control socket (see the module rules).

    Args:
        sock: the connected Unix stream socket (made non-blocking here).
        loop: the running event loop.
        on_message: called with each message and its file descriptors (the callee owns them).
        on_closed: called once when the other end is gone, or the channel closed.
        name: what the log calls this channel.
    """

    def __init__(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        on_message: Callable[[Message, list[int]], None],
        on_closed: Callable[[], None] = lambda: None,
        name: str = "worker control socket",
    ) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.loop = loop
        self.on_message = on_message
        self.on_closed = on_closed
        self.name = name
        self.closed = False
        self._inbox = bytearray()
        self._fds: deque[int] = deque()
        self._outbox: deque[tuple[memoryview, list[int]]] = deque()
        self._writing = False
        loop.add_reader(sock.fileno(), self._readable)

    @property
    def queued(self) -> int:
        """The bytes sent but not yet taken by the socket (waiting for it to be writable)."""
        return sum(len(data) for data, _fds in self._outbox)

    # -- sending ----------------------------------------------------------------------------------
    def send(self, message: Message, fds: Sequence[int] = ()) -> bool:
        """Queue ``message`` with ``fds`` (which the channel closes once sent). False: the other end
        is gone (now or before), the message is dropped.

        Raises:
            MessageError: ``message`` does not encode (``messages.encode``), or ``fds`` is not as many
                descriptors as its type carries; the descriptors are closed.
        """
        try:
            if len(fds) != message.FDS:
                raise MessageError(
                    f"control message {message.TYPE!r} carries {message.FDS} fds, not {len(fds)}"
                )
            body = pack(message)
        except MessageError:
            for fd in fds:
                os.close(fd)
            raise
        if self.closed:
            for fd in fds:
                os.close(fd)
            return False
        self._outbox.append((memoryview(_HEADER.pack(len(body), len(fds)) + body), list(fds)))
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
                log.warning("%s: %s", self.name, exc)
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
            log.warning("%s: %s", self.name, exc)
            self._close()
            return
        self._fds.extend(fds)
        if not data:
            self._close()
            return
        inbox = self._inbox
        inbox += data
        while len(inbox) >= _HEADER.size:
            size, count = _HEADER.unpack_from(inbox)
            if size > MAX_MESSAGE:
                self._refuse(f"a message of {size} bytes")
                return
            end = _HEADER.size + size
            if len(inbox) < end:
                break
            payload = bytes(inbox[_HEADER.size : end])
            del inbox[:end]
            if count > len(self._fds):
                self._refuse(f"a message with {count} fds, {len(self._fds)} received")
                return
            taken = [self._fds.popleft() for _ in range(count)]
            try:
                message = unpack(payload)
                if count != message.FDS:
                    raise MessageError(
                        f"control message {message.TYPE!r} with {count} fds, not {message.FDS}"
                    )
            except MessageError as exc:
                for fd in taken:
                    os.close(fd)
                self._refuse(str(exc))
                return
            try:
                self.on_message(message, taken)
            except Exception:  # a bug of ours must not stop the channel
                log.exception("%s: message %r failed", self.name, message.TYPE)
            if self.closed:
                return

    def _refuse(self, why: str) -> None:
        log.error("%s: %s; closing it", self.name, why)
        self._close()

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
        """Close this end (queued messages are dropped); ``on_closed`` is called if it was open."""
        self._close()
