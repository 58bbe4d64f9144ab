"""What one connection writes to its socket: frames buffered and written once per event-loop turn.

Rules:
- ``send`` appends encoded frames. The buffer is written by ``flush``: at the end of the turn
  (``call_soon``), at once when it grows past ``FLUSH_THRESHOLD``, or by the connection at the end of
  ``data_received`` (while ``in_receive`` no flush is scheduled: the connection flushes anyway).
- A channel's publisher with settled confirms registers once per turn (``confirms_ready``); its
  ``basic.ack``/``basic.nack`` frames are coalesced into the buffer just before the write.
- One ``transport.write`` per flush; nothing is written once the transport is closing (the bytes
  are dropped). A large body's frames (``fastpath.LARGE_BODY``) arrive as parts and go out with
  one ``transport.writelines``, never joined: the body is not copied. ``send_oct``/``send_cnt``
  count what was written (RabbitMQ's counters), ``sent`` whether anything was since the heartbeat
  last looked.
- Whether the socket's output is backed up (``pause_writing``) is the connection's flow control,
  not this buffer's: a paused connection stops delivering and reading, it never stops writing.
"""

from __future__ import annotations

import asyncio
from typing import Final

from ottermq.amqp import fastpath
from pamqp.base import Frame

from .interfaces import ConfirmSender

FLUSH_THRESHOLD: Final = 256 * 1024


class Output:
    """The output buffer of one connection (see the module rules).

    Args:
        loop: the event loop (``call_soon`` ends the turn's buffering).
    """

    __slots__ = (
        "_confirming",
        "_parts",
        "_loop",
        "_out",
        "_scheduled",
        "_size",
        "in_receive",
        "send_cnt",
        "send_oct",
        "sent",
        "transport",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None  # set once the connection is made
        self._out: list[bytes | memoryview] = []
        self._parts = False  # _out holds a large body's parts: writelines, not join
        self._size = 0
        self._scheduled = False
        self.in_receive = False  # the connection is handling input and flushes after it
        self._confirming: list[ConfirmSender] = []  # publishers with settled confirms
        self.sent = False
        self.send_oct = self.send_cnt = 0

    def send(self, data: fastpath.Encoded) -> None:
        """Queue bytes (or a large body's frame parts) for the client; written once per loop turn."""
        if isinstance(data, list):
            self._out.extend(data)
            self._size += sum([len(part) for part in data])
            self._parts = True
        else:
            self._out.append(data)
            self._size += len(data)
        if self._size > FLUSH_THRESHOLD:
            self.flush()
        elif not self._scheduled and not self.in_receive:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def send_method(self, channel: int, method: Frame) -> None:
        self.send(fastpath.encode_method(channel, method))

    def confirms_ready(self, sender: ConfirmSender) -> None:
        """``sender`` has publisher confirms to send: they go out with this loop turn's output."""
        self._confirming.append(sender)
        if not self._scheduled and not self.in_receive:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write what was queued (confirms first coalesced into it)."""
        self._scheduled = False
        if self._confirming:
            confirming, self._confirming = self._confirming, []
            for sender in confirming:
                sender.send_confirms()
        out = self._out
        if not out:
            return
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if self._parts:
                transport.writelines(out)  # uvloop keeps references: nothing copied
            else:
                transport.write(out[0] if len(out) == 1 else b"".join(out))
            self.sent = True
            self.send_oct += self._size
            self.send_cnt += 1
        out.clear()
        self._size = 0
        self._parts = False
