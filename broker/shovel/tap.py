"""The shovel's transport under aiormq: message properties cross the shovel byte for byte.

aiormq decodes a delivered message's properties with pamqp and encodes a published one's again,
which changes header types (pamqp picks the smallest integer type, 32-bit floats) and adds a
``message-id``. The shovel's connections therefore read and write through a ``Tap``:

Rules:

1. Incoming: after a ``basic.deliver`` on a channel, that channel's content header keeps its
   property octets aside, keyed by ``(channel, delivery tag)`` (``Tap.take``), and aiormq is handed
   the header with no properties (pamqp never decodes what a client put in them). Every other frame
   passes unchanged.
2. Outgoing: a content header whose properties are exactly a placeholder (``Tap.placeholder``: only
   a ``message-id`` holding a token this tap handed out) gets the octets registered for that token
   instead; every other frame passes unchanged.
3. Frames are cut by their 7-octet header and size (``frame-end`` included); the AMQP protocol
   header passes unchanged. The tap keeps nothing once a message is taken or published, and a
   connection's tap goes with it.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any, cast

from aiormq.connection import TransportFactory
from pamqp import commands
from yarl import URL

__all__ = ["Tap", "TapReader", "TapWriter"]

_HEADER = struct.Struct(">BHI")
_METHOD = 1
_CONTENT_HEADER = 2
_DELIVER = (60 << 16) | 60
_TOKEN_PREFIX = "ottermq-shovel-"


def _frame(kind: int, channel: int, payload: bytes) -> bytes:
    return _HEADER.pack(kind, channel, len(payload)) + payload + b"\xce"


def _delivery_tag(payload: bytes) -> int | None:
    """The delivery tag of a ``basic.deliver`` method payload, None for another method."""
    if len(payload) < 5 or int.from_bytes(payload[:4], "big") != _DELIVER:
        return None
    end = 5 + payload[4]
    if len(payload) < end + 8:
        return None
    return int.from_bytes(payload[end : end + 8], "big")


class Tap(TransportFactory):
    """A transport factory for one aiormq connection (see the module rules).

    Args:
        tls: the TLS context for ``amqps`` (None: plain TCP).
        server_hostname: the name TLS checks and sends (SNI); ``""``: none.
    """

    def __init__(self, tls: Any = None, server_hostname: str | None = None) -> None:
        self.tls = tls
        self.server_hostname = server_hostname
        self._delivered: dict[tuple[int, int], bytes] = {}
        self._deliver_tag: dict[int, int] = {}
        self._outgoing: dict[bytes, bytes] = {}
        self._tokens = itertools.count(1)

    async def create(self, url: URL, **kwargs: Any) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        kwargs.pop("ssl_context_provider", None)
        if self.tls is not None:
            kwargs["ssl"] = self.tls
            if self.server_hostname is not None:
                kwargs["server_hostname"] = self.server_hostname or None
        reader, writer = await asyncio.open_connection(host=url.host, port=url.port, **kwargs)
        return cast(asyncio.StreamReader, TapReader(reader, self)), cast(
            asyncio.StreamWriter, TapWriter(writer, self)
        )

    # -- rule 1 -------------------------------------------------------------------------------------
    def incoming(self, kind: int, channel: int, payload: bytes) -> bytes:
        if kind == _METHOD:
            tag = _delivery_tag(payload)
            if tag is not None:
                self._deliver_tag[channel] = tag
        elif kind == _CONTENT_HEADER and channel in self._deliver_tag and len(payload) >= 14:
            tag = self._deliver_tag.pop(channel)
            self._delivered[(channel, tag)] = payload[12:]
            return payload[:12] + b"\x00\x00"
        return payload

    def take(self, channel: int, delivery_tag: int) -> bytes:
        """The property octets of a delivered message (empty properties if none were kept)."""
        return self._delivered.pop((channel, delivery_tag), b"\x00\x00")

    # -- rule 2 -------------------------------------------------------------------------------------
    def placeholder(self, raw_props: bytes) -> commands.Basic.Properties:
        """Properties to hand aiormq's ``basic_publish``: the tap writes ``raw_props`` instead."""
        token = f"{_TOKEN_PREFIX}{next(self._tokens)}"
        self._outgoing[self._encoded(token)] = raw_props
        return commands.Basic.Properties(message_id=token)

    @staticmethod
    def _encoded(token: str) -> bytes:
        data = token.encode()
        return b"\x00\x80" + bytes((len(data),)) + data

    def forget(self, props: commands.Basic.Properties) -> None:
        """Drop a placeholder whose publish was never written (a cancelled publish)."""
        if props.message_id:
            self._outgoing.pop(self._encoded(props.message_id), None)

    @property
    def publishing(self) -> bool:
        """Whether a placeholder waits to be replaced (otherwise writes pass untouched)."""
        return bool(self._outgoing)

    def outgoing(self, kind: int, channel: int, payload: bytes) -> bytes:
        if kind == _CONTENT_HEADER and len(payload) > 14 and self._outgoing:
            raw = self._outgoing.pop(payload[12:], None)
            if raw is not None:
                return payload[:12] + raw
        return payload


class TapReader:
    """aiormq's reader: what the socket gives, read a chunk at a time, cut into whole frames and
    rewritten by the tap (rule 1); aiormq's small reads are answered from what is already cut."""

    CHUNK = 1 << 16

    def __init__(self, reader: asyncio.StreamReader, tap: Tap) -> None:
        self._reader = reader
        self._tap = tap
        self._raw = bytearray()  # read, not yet cut into frames
        self._buffer = bytearray()  # whole frames, rewritten

    def at_eof(self) -> bool:
        return not self._buffer and not self._raw and self._reader.at_eof()

    async def read(self, n: int = -1) -> bytes:
        data = bytes(self._buffer) + bytes(self._raw) + await self._reader.read(n)
        self._buffer.clear()
        self._raw.clear()
        return data

    def _cut(self) -> None:
        raw, pos = self._raw, 0
        while True:
            if raw.startswith(b"AMQP", pos) and len(raw) - pos >= 8:  # a protocol header
                self._buffer += raw[pos : pos + 8]
                pos += 8
                continue
            if len(raw) - pos < 7:
                break
            kind, channel, size = _HEADER.unpack_from(raw, pos)
            end = pos + 7 + size + 1
            if end > len(raw):
                break
            original = bytes(raw[pos + 7 : end - 1])
            payload = self._tap.incoming(kind, channel, original)
            self._buffer += raw[pos:end] if payload is original else _frame(kind, channel, payload)
            pos = end
        del raw[:pos]

    async def readexactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = await self._reader.read(self.CHUNK)
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(self._buffer), n)
            self._raw += chunk
            self._cut()
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data


class TapWriter:
    """aiormq's writer: each write (whole frames) rewritten by the tap (rule 2)."""

    def __init__(self, writer: asyncio.StreamWriter, tap: Tap) -> None:
        self._writer = writer
        self._tap = tap
        self.transport = writer.transport

    def write(self, data: bytes) -> None:
        if data.startswith(b"AMQP") or not self._tap.publishing:
            self._writer.write(data)
            return
        out = bytearray()
        view = memoryview(data)
        pos = 0
        while pos + 7 <= len(view):
            kind, channel, size = _HEADER.unpack_from(view, pos)
            end = pos + 7 + size + 1
            payload = bytes(view[pos + 7 : end - 1])
            rewritten = self._tap.outgoing(kind, channel, payload)
            out += _frame(kind, channel, rewritten) if rewritten is not payload else view[pos:end]
            pos = end
        out += view[pos:]
        self._writer.write(bytes(out))

    async def drain(self) -> None:
        await self._writer.drain()

    def close(self) -> None:
        self._writer.close()

    def is_closing(self) -> bool:
        return self._writer.is_closing()

    def can_write_eof(self) -> bool:
        return self._writer.can_write_eof()

    def write_eof(self) -> None:
        self._writer.write_eof()

    async def wait_closed(self) -> None:
        await self._writer.wait_closed()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._writer.get_extra_info(name, default)
