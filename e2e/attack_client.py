"""AMQP 0-9-1 spoken frame by frame for the adversarial suite (``e2e/test_attack_*.py``).

:class:`RawClient` is one connection with one channel over a blocking socket. Every method frame that
carries a field table takes it encoded by ``e2e/hostile.py`` (``Queue.Declare``, ``Exchange.Declare``,
``Queue.Bind``, the content header), so a value no client library would send goes out as it is, and
what comes back is never decoded by a recursive decoder: a delivery's content header stays octets
(:class:`Delivery`). Publisher confirms are tracked per publish; a ``Channel.Close`` or
``Connection.Close`` from the broker is answered and raised as :class:`BrokerClosed` with its reply
code and text.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pamqp.commands as C
import pamqp.frame

from .hostile import Field, encode_table

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = b"\xce"

# basic property flags (AMQP 0-9-1 class 60) the suite sets or skips, in property-list order
P_CONTENT_TYPE, P_CONTENT_ENCODING, P_HEADERS, P_DELIVERY_MODE, P_EXPIRATION = (
    0x8000,
    0x4000,
    0x2000,
    0x1000,
    0x100,
)


class BrokerClosed(Exception):
    """The broker closed the channel (``connection=False``) or the connection."""

    def __init__(self, connection: bool, code: int, text: str) -> None:
        super().__init__(f"{'connection' if connection else 'channel'} closed {code} {text}")
        self.connection, self.code, self.text = connection, code, text


def shortstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return bytes([len(raw)]) + raw


def properties(
    headers: bytes | None = None,
    *,
    persistent: bool = False,
    expiration: str | None = None,
) -> tuple[int, bytes]:
    """``(property flags, property list)`` of a content header; ``headers`` an encoded field table."""
    flags, out = 0, bytearray()
    if headers is not None:
        flags |= P_HEADERS
        out += headers
    if persistent:
        flags |= P_DELIVERY_MODE
        out.append(2)
    if expiration is not None:
        flags |= P_EXPIRATION
        out += shortstr(expiration)
    return flags, bytes(out)


def frame(kind: int, channel: int, payload: bytes | memoryview) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + bytes(payload) + FRAME_END


@dataclass
class Delivery:
    """A message fetched with ``basic.get``: content header and body as octets."""

    delivery_tag: int
    redelivered: bool
    header: bytes
    body: bytes

    def headers_table(self) -> bytes | None:
        """The encoded headers table, or None (content type and encoding skipped, nothing decoded)."""
        flags = struct.unpack_from(">H", self.header, 12)[0]
        pos = 14
        if not flags & P_HEADERS:
            return None
        for bit in (P_CONTENT_TYPE, P_CONTENT_ENCODING):
            if flags & bit:
                pos += 1 + self.header[pos]
        size = struct.unpack_from(">I", self.header, pos)[0]
        return self.header[pos : pos + 4 + size]


class RawClient:
    """One AMQP connection with one channel (1), spoken frame by frame; see the module docstring."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        confirms: bool = True,
        timeout: float = 15.0,
    ) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = bytearray()
        self.frame_max = 131072
        self.next_seq = 1
        self.confirmed: set[int] = set()
        self.nacked: set[int] = set()
        self.closed: BrokerClosed | None = None
        self._handshake(user, password, vhost)
        self.channel_open(confirms)

    # -- frames ---------------------------------------------------------------------------------
    def _read_frame(self, deadline: float) -> tuple[int, int, bytes]:
        while True:
            if len(self.buf) >= 7:
                kind, channel, size = struct.unpack_from(">BHI", self.buf)
                if len(self.buf) >= 8 + size:
                    payload = bytes(self.buf[7 : 7 + size])
                    del self.buf[: 8 + size]
                    return kind, channel, payload
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame from the broker in time")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the broker closed the socket")
            self.buf += chunk

    def _method(self, payload: bytes) -> Any:
        _, _, value = pamqp.frame.unmarshal(frame(FRAME_METHOD, 0, payload))
        return value

    def next_frame(self, timeout: float | None = None) -> tuple[int, int, Any]:
        """The next frame other than a heartbeat, confirm or close: ``(kind, channel, method or
        octets)``; confirms are recorded, a close is answered and raised."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            kind, channel, payload = self._read_frame(deadline)
            if kind == FRAME_HEARTBEAT:
                continue
            if kind != FRAME_METHOD:
                return kind, channel, payload
            method = self._method(payload)
            if isinstance(method, C.Basic.Ack | C.Basic.Nack):
                self._settle(method)
                continue
            if isinstance(method, C.Connection.Close):
                with contextlib.suppress(OSError):
                    self.send_method(0, C.Connection.CloseOk())
                self.closed = BrokerClosed(True, method.reply_code, method.reply_text)
                raise self.closed
            if isinstance(method, C.Channel.Close):
                self.send_method(channel, C.Channel.CloseOk())
                self.closed = BrokerClosed(False, method.reply_code, method.reply_text)
                raise self.closed
            return kind, channel, method

    def _settle(self, method: Any) -> None:
        tags = (
            [t for t in range(1, method.delivery_tag + 1) if t not in self.confirmed and t not in self.nacked]
            if method.multiple
            else [method.delivery_tag]
        )
        (self.confirmed if isinstance(method, C.Basic.Ack) else self.nacked).update(tags)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_method(self, channel: int, method: Any) -> None:
        self.send(pamqp.frame.marshal(method, channel))

    def send_raw_method(self, class_id: int, method_id: int, arguments: bytes) -> None:
        self.send(frame(FRAME_METHOD, 1, struct.pack(">HH", class_id, method_id) + arguments))

    def expect(self, kind: type, timeout: float | None = None) -> Any:
        while True:
            frame_kind, _, got = self.next_frame(timeout)
            if frame_kind == FRAME_METHOD and isinstance(got, kind):
                return got
            if isinstance(got, C.Basic.Return):  # its content follows
                self.next_frame(timeout)
                continue
            if frame_kind in (FRAME_HEADER, FRAME_BODY):
                continue
            raise AssertionError(f"expected {kind.__name__}, got {got!r}")

    def rpc(self, method: Any, reply: type) -> Any:
        self.send_method(1, method)
        return self.expect(reply)

    # -- connection and channel -----------------------------------------------------------------
    def _handshake(self, user: str, password: str, vhost: str) -> None:
        self.send(b"AMQP\x00\x00\x09\x01")
        self.expect(C.Connection.Start)
        self.send_method(
            0,
            C.Connection.StartOk(
                client_properties={"product": "ottermq-attack"},
                mechanism="PLAIN",
                response=f"\0{user}\0{password}",
                locale="en_US",
            ),
        )
        tune = self.expect(C.Connection.Tune)
        self.frame_max = tune.frame_max or 131072
        self.send_method(
            0, C.Connection.TuneOk(channel_max=tune.channel_max, frame_max=self.frame_max, heartbeat=0)
        )
        self.send_method(0, C.Connection.Open(virtual_host=vhost))
        self.expect(C.Connection.OpenOk)

    def channel_open(self, confirms: bool = True) -> None:
        self.rpc(C.Channel.Open(), C.Channel.OpenOk)
        if confirms:
            self.rpc(C.Confirm.Select(), C.Confirm.SelectOk)

    def close(self) -> None:
        with contextlib.suppress(OSError, ConnectionError, TimeoutError, BrokerClosed, AssertionError):
            if self.closed is None or not self.closed.connection:
                self.send_method(
                    0, C.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
                )
                self.expect(C.Connection.CloseOk, timeout=2)
        with contextlib.suppress(OSError):
            self.sock.close()

    # -- declarations with raw tables -----------------------------------------------------------
    def queue_declare(
        self,
        name: str,
        arguments: bytes | Sequence[tuple[bytes, Field]] = b"\0\0\0\0",
        *,
        durable: bool = False,
        passive: bool = False,
    ) -> int:
        """Declare (or check) a queue; returns its message count."""
        table = arguments if isinstance(arguments, bytes) else encode_table(arguments)
        bits = (1 if passive else 0) | (2 if durable else 0)
        self.send_raw_method(50, 10, b"\0\0" + shortstr(name) + bytes([bits]) + table)
        return int(self.expect(C.Queue.DeclareOk).message_count)

    def exchange_declare(
        self,
        name: str,
        kind: str = "direct",
        arguments: bytes | Sequence[tuple[bytes, Field]] = b"\0\0\0\0",
        *,
        durable: bool = False,
    ) -> None:
        table = arguments if isinstance(arguments, bytes) else encode_table(arguments)
        self.send_raw_method(
            40, 10, b"\0\0" + shortstr(name) + shortstr(kind) + bytes([2 if durable else 0]) + table
        )
        self.expect(C.Exchange.DeclareOk)

    def queue_bind(
        self,
        queue: str,
        exchange: str,
        routing_key: str = "",
        arguments: bytes | Sequence[tuple[bytes, Field]] = b"",
    ) -> None:
        table = arguments if isinstance(arguments, bytes) and arguments else encode_table(arguments or [])
        self.send_raw_method(
            50, 20, b"\0\0" + shortstr(queue) + shortstr(exchange) + shortstr(routing_key) + b"\0" + table
        )
        self.expect(C.Queue.BindOk)

    def queue_delete(self, name: str) -> None:
        self.rpc(C.Queue.Delete(queue=name), C.Queue.DeleteOk)

    def exchange_delete(self, name: str) -> None:
        self.rpc(C.Exchange.Delete(exchange=name), C.Exchange.DeleteOk)

    # -- messages -------------------------------------------------------------------------------
    def publish(
        self,
        exchange: str,
        routing_key: str,
        props: tuple[int, bytes],
        body: bytes,
        *,
        mandatory: bool = False,
    ) -> int:
        """Send one message; returns its publish sequence number (its confirm's delivery tag)."""
        flags, plist = props
        out = [
            pamqp.frame.marshal(
                C.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory), 1
            )
        ]
        out.append(frame(FRAME_HEADER, 1, struct.pack(">HHQH", 60, 0, len(body), flags) + plist))
        step = self.frame_max - 8
        view = memoryview(body)
        out.extend(frame(FRAME_BODY, 1, view[i : i + step]) for i in range(0, len(body), step))
        self.sock.settimeout(max(self.timeout, len(body) / 2**20))  # a second per MB for a big body
        self.send(b"".join(out))
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        return seq

    def wait_confirms(self, seqs: Iterable[int], timeout: float = 15.0) -> None:
        """Until every one of ``seqs`` is acked or nacked (a close or a timeout raises)."""
        wanted = set(seqs)
        deadline = time.monotonic() + timeout
        while not wanted <= (self.confirmed | self.nacked):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no confirm for {sorted(wanted - self.confirmed - self.nacked)[:5]}")
            self.send_method(1, C.Basic.Qos(prefetch_count=0))  # a round trip that lets the confirms in
            self.expect(C.Basic.QosOk, timeout=remaining)

    def get(self, queue: str, *, no_ack: bool = True) -> Delivery | None:
        self.send_method(1, C.Basic.Get(queue=queue, no_ack=no_ack))
        while True:
            kind, _, got = self.next_frame()
            if kind == FRAME_METHOD and isinstance(got, C.Basic.GetEmpty):
                return None
            if kind == FRAME_METHOD and isinstance(got, C.Basic.GetOk):
                break
            if kind == FRAME_METHOD and isinstance(got, C.Basic.Return):
                self.next_frame()
        kind, _, header = self.next_frame()
        assert kind == FRAME_HEADER, kind
        size = struct.unpack_from(">Q", header, 4)[0]
        body = bytearray()
        while len(body) < size:
            kind, _, chunk = self.next_frame()
            assert kind == FRAME_BODY, kind
            body += chunk
        return Delivery(int(got.delivery_tag), bool(got.redelivered), header, bytes(body))

    def reject(self, tag: int, requeue: bool = False) -> None:
        self.send_method(1, C.Basic.Reject(delivery_tag=tag, requeue=requeue))

    def nack(self, tag: int, *, multiple: bool = False, requeue: bool = False) -> None:
        self.send_method(1, C.Basic.Nack(delivery_tag=tag, multiple=multiple, requeue=requeue))

    def ack(self, tag: int, *, multiple: bool = False) -> None:
        self.send_method(1, C.Basic.Ack(delivery_tag=tag, multiple=multiple))

    def sync(self) -> None:
        """A round trip: everything sent before has been handled (or a close is raised)."""
        self.rpc(C.Basic.Qos(prefetch_count=0), C.Basic.QosOk)


def x_death_counts(delivery: Delivery) -> list[int]:
    """The ``count`` of each ``x-death`` entry of a delivery whose headers are small (a plain
    recursive decoder: only for messages the test built itself, never for a deep one)."""
    raw = delivery.headers_table()
    if raw is None:
        return []
    deaths = decode_table(raw, 0, depth=0)[0].get("x-death", [])
    return [d["count"] for d in deaths if isinstance(d, dict) and "count" in d]


def decode_table(data: bytes, pos: int, depth: int) -> tuple[dict[str, Any], int]:
    if depth > 64:
        raise ValueError("table nested too deep for this test decoder")
    size = struct.unpack_from(">I", data, pos)[0]
    pos += 4
    end, out = pos + size, {}
    while pos < end:
        klen = data[pos]
        key = data[pos + 1 : pos + 1 + klen].decode("utf-8", "replace")
        value, pos = _decode_value(data, pos + 1 + klen, depth)
        out[key] = value
    return out, end


def _decode_value(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    tag = chr(data[pos])
    pos += 1
    fixed = {
        "b": ">b",
        "B": ">B",
        "s": ">h",
        "u": ">H",
        "I": ">i",
        "i": ">I",
        "l": ">q",
        "T": ">Q",
        "f": ">f",
        "d": ">d",
    }
    if tag in fixed:
        fmt = fixed[tag]
        return struct.unpack_from(fmt, data, pos)[0], pos + struct.calcsize(fmt)
    if tag == "t":
        return bool(data[pos]), pos + 1
    if tag == "D":
        return struct.unpack_from(">BI", data, pos), pos + 5
    if tag in ("S", "x"):
        size = struct.unpack_from(">I", data, pos)[0]
        return data[pos + 4 : pos + 4 + size], pos + 4 + size
    if tag == "V":
        return None, pos
    if tag == "F":
        return decode_table(data, pos, depth + 1)
    if tag == "A":
        size = struct.unpack_from(">I", data, pos)[0]
        end, items = pos + 4 + size, []
        pos += 4
        while pos < end:
            value, pos = _decode_value(data, pos, depth + 1)
            items.append(value)
        return items, end
    raise ValueError(f"unknown field tag {tag!r}")


def drain(client: RawClient, queues: Iterable[str]) -> Counter[str]:
    """Every message left in ``queues`` (taken with ``basic.get``, auto-ack), by body."""
    found: Counter[str] = Counter()
    for queue in queues:
        while (got := client.get(queue)) is not None:
            found[got.body.decode("utf-8", "replace")] += 1
    return found
