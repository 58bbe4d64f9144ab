"""Sans-IO AMQP 0-9-1 frame splitter: feed octets in, take complete frames out.

Rules:

* A frame is ``type:1 channel:2 size:4 payload:size frame-end:1`` with frame-end ``0xCE``.
* As RabbitMQ: a payload larger than ``frame_max`` (RabbitMQ allows the 8 octets of frame
  overhead as fudge; ``frame_max == 0`` means unlimited) is refused as soon as the 7-octet header
  is in; then the frame-end octet must be ``0xCE``; then the type must be 1 (method), 2 (content
  header), 3 (content body) or 8 (heartbeat). Each is a ``FrameError`` whose text is RabbitMQ's
  ``type T, all octets = <<...>>: Reason`` (at most the first 16 payload octets are shown).
* Frames before the first malformed one are still returned; then :attr:`FrameReader.error` is
  set and every later :meth:`FrameReader.feed` returns ``[]``: the connection must be closed
  with ``error.reply_code`` (501).
* Partial input is kept and yields nothing. Only the octets of one incomplete frame are ever
  buffered: complete frames are sliced straight out of the ``data`` passed to ``feed``, so a
  payload is copied exactly once (into the ``bytes`` handed out).

The AMQP protocol header (``AMQP\\x00\\x00\\x09\\x01``) is not a frame; the connection consumes
it before feeding the reader.
"""

from __future__ import annotations

import struct
from typing import Final

from .erlang import binary_text
from .errors import FrameError

__all__ = ["FrameReader", "RawFrame"]

RawFrame = tuple[int, int, bytes]
"""``(frame_type, channel, payload)``."""

# Final: compiled by mypyc, a Final module constant is a C global (else a module dict lookup per use)
_HEADER: Final = struct.Struct(">BHI")
_unpack_header: Final = _HEADER.unpack_from
_VALID_TYPE: Final = tuple(t in (1, 2, 3, 8) for t in range(256))
_FRAME_END: Final = 0xCE


def payload_snippet(ftype: int, payload: bytes) -> str:
    """RabbitMQ's description of a frame in errors: ``type T, all octets = <<...>>`` (first 16 shown)."""
    which = "all" if len(payload) <= 16 else "first 16"
    return f"type {ftype}, {which} octets = {binary_text(payload[:16])}"


def frame_error(ftype: int, payload: bytes, reason: str) -> FrameError:
    """RabbitMQ's frame error: ``type T, all octets = <<...>>: Reason`` (first 16 octets shown)."""
    return FrameError(f"{payload_snippet(ftype, payload)}: {reason}")


class FrameReader:
    """Split a byte stream into ``(frame_type, channel, payload)`` tuples.

    Args:
        frame_max: largest accepted frame in octets, header and frame-end included
            (0 = unlimited). May be changed later, e.g. after ``connection.tune-ok``.
    """

    __slots__ = ("_buf", "_need", "error", "frame_max")

    def __init__(self, frame_max: int = 131072) -> None:
        self.frame_max = frame_max
        self.error: FrameError | None = None
        self._buf = bytearray()  # octets of one incomplete frame
        self._need = 0  # size of that frame once its header is in, else 0

    def _check(self, ftype: int, channel: int, size: int) -> FrameError | None:
        frame_max = self.frame_max
        if frame_max and size > frame_max:
            return frame_error(ftype, b"", f"{{frame_too_large,{size},{frame_max - 8}}}")
        return None

    def _fail(self, error: FrameError) -> None:
        self.error = error
        self._buf = bytearray()
        self._need = 0

    def feed(self, data: bytes) -> list[RawFrame]:
        """Consume ``data``; return the frames it completes, in order.

        Returns:
            Complete frames as ``(frame_type, channel, payload)``; ``[]`` if none is complete,
            or once :attr:`error` is set.
        """
        if self.error is not None:
            return []
        # declared: struct's unpack is untyped, and compiled (mypyc) typed ints are native ints
        ftype: int
        channel: int
        size: int
        frames: list[RawFrame] = []
        pos = 0
        n = len(data)
        buf = self._buf
        if buf:  # finish the frame left over from the previous call
            have = len(buf)
            if have < 7:
                pos = min(7 - have, n)
                buf += data[:pos]
                if len(buf) < 7:
                    return frames
                ftype, channel, size = _unpack_header(buf)
                error = self._check(ftype, channel, size)
                if error is not None:
                    self._fail(error)
                    return frames
                self._need = size + 8
            need = self._need
            take = min(need - len(buf), n - pos)
            if take > 0:
                with memoryview(data) as view:
                    buf += view[pos : pos + take]
                pos += take
            if len(buf) < need:
                return frames
            ftype, channel, _ = _unpack_header(buf)
            with memoryview(buf) as view:
                payload = view[7 : need - 1].tobytes()
            if buf[need - 1] != _FRAME_END:
                self._fail(frame_error(ftype, payload, f"{{invalid_frame_end_marker,{buf[need - 1]}}}"))
                return frames
            if not _VALID_TYPE[ftype]:
                self._fail(frame_error(ftype, payload, "unknown_frame"))
                return frames
            frames.append((ftype, channel, payload))
            buf.clear()
            self._need = 0

        valid_type = _VALID_TYPE
        frame_max = self.frame_max
        append = frames.append
        while n - pos >= 7:
            ftype, channel, size = _unpack_header(data, pos)
            end = pos + size + 8
            if frame_max and size > frame_max:
                error = self._check(ftype, channel, size)
                assert error is not None
                self._fail(error)
                return frames
            if end > n:
                self._need = size + 8
                break
            if data[end - 1] != _FRAME_END or not valid_type[ftype]:
                payload = data[pos + 7 : end - 1]
                if data[end - 1] != _FRAME_END:
                    self._fail(frame_error(ftype, payload, f"{{invalid_frame_end_marker,{data[end - 1]}}}"))
                else:
                    self._fail(frame_error(ftype, payload, "unknown_frame"))
                return frames
            append((ftype, channel, data[pos + 7 : end - 1]))
            pos = end
        if pos < n:
            with memoryview(data) as view:
                buf += view[pos:]
        return frames
