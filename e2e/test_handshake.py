"""Malformed handshakes, answered as RabbitMQ 3.10 answers them (issue 12, items 7 and 8).

Before ``connection.tune-ok`` is accepted RabbitMQ sends nothing back for a bad frame or method: it stops
reading and drops the socket about 3 s later. A well-formed login with wrong credentials from a client
announcing ``authentication_failure_close`` is the one exception (403, see test_connection.py). While
awaiting ``connection.open`` every error gets a ``Connection.Close``, with class/method 0/0 for frames
RabbitMQ's reader rejects before decoding a method.

The silent cases all take RabbitMQ's 3 s delay, so each table runs its cases concurrently. The errors
while tuning and every bad frame of a running connection are protocol tests
(tests/protocol/test_handshake.py, tests/protocol/test_connection_errors.py); this file keeps one table
per stage against both brokers.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pamqp.commands as C
import pamqp.frame

HEADER = b"AMQP\x00\x00\x09\x01"
AFC = {"capabilities": {"authentication_failure_close": True}}


def raw_frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + b"\xce"


def method(channel: int, frame: Any) -> bytes:
    return pamqp.frame.marshal(frame, channel)


def start_ok(response: str = "\0guest\0guest", mechanism: str = "PLAIN", props: Any = None) -> bytes:
    start = C.Connection.StartOk(client_properties=props or {}, mechanism=mechanism, response=response)
    return method(0, start)


def tune_ok(channel_max: int = 2047, frame_max: int = 131072) -> bytes:
    return method(0, C.Connection.TuneOk(channel_max=channel_max, frame_max=frame_max, heartbeat=0))


CLOSE = method(0, C.Connection.Close(200, "bye", 0, 0))

# after Connection.Start
STARTING = {
    "garbage": b"hello world, this is not a frame\r\n",
    "header-frame": raw_frame(2, 0, struct.pack(">HHQH", 60, 0, 0, 0)),
    "body-frame": raw_frame(3, 0, b"abc"),
    "start-ok-on-channel-1": start_ok()[:1] + b"\x00\x01" + start_ok()[3:],
    "bad-frame-end": start_ok()[:-1] + b"\x00",
    "frame-too-large": raw_frame(1, 0, b"\x00\x0a\x00\x0b" + b"x" * 5000),
    "close": CLOSE,
    "plain-without-nuls": start_ok("guestguest", props=AFC),
    "plain-two-fields": start_ok("\0guest", props=AFC),
    "amqplain-garbage": start_ok("\x7f\x7f\x7f", mechanism="AMQPLAIN", props=AFC),
    "unknown-mechanism": start_ok(mechanism="FOO", props=AFC),
}
# after Tune-Ok, before Open: (bytes, reply code, reply text, class id, method id)
UNEXPECTED_OPENING = "CHANNEL_ERROR - unexpected method in connection state opening"
OPENING = {
    "close": (CLOSE, 504, UNEXPECTED_OPENING, 10, 50),
    "tune-ok-twice": (tune_ok(), 504, UNEXPECTED_OPENING, 10, 31),
    "update-secret": (
        method(0, C.Connection.UpdateSecret(new_secret="guest", reason="r")),
        504,
        UNEXPECTED_OPENING,
        10,
        70,
    ),
    "queue-declare-on-0": (
        method(0, C.Queue.Declare(queue="x")),
        504,
        UNEXPECTED_OPENING,
        50,
        10,
    ),
    "channel-open": (
        method(1, C.Channel.Open()),
        505,
        "UNEXPECTED_FRAME - type 1, all octets = <<0,20,0,10,1,48>>",
        0,
        0,
    ),
    "heartbeat-on-1": (raw_frame(8, 1, b""), 505, "UNEXPECTED_FRAME - type 8, all octets = <<>>", 0, 0),
    "header-on-0": (
        raw_frame(2, 0, struct.pack(">HHQH", 60, 0, 0, 0)),
        505,
        "UNEXPECTED_FRAME - type 2, all octets = <<0,60,0,0,0,0,0,0,0,0,0,0,0,0>>",
        0,
        0,
    ),
    "garbage": (
        b"garbage garbage garbage",
        501,
        "FRAME_ERROR - type 103, all octets = <<>>: {frame_too_large,1650550629,131064}",
        0,
        0,
    ),
}


def _run_all(cases: dict[str, Any], fn: Callable[[Any], Any]) -> dict[str, Any]:
    with ThreadPoolExecutor(len(cases)) as pool:
        futures = {name: pool.submit(fn, case) for name, case in cases.items()}
    return {name: future.result() for name, future in futures.items()}


def _silently_dropped(raw: Any) -> str:
    """What the broker did: 'dropped' (no frame, socket closed) or a description of what came instead."""
    try:
        channel, frame = raw.recv_frame(timeout=8)
    except ConnectionError:
        return "dropped"
    except TimeoutError:
        return "still open after 8 s"
    return f"sent {frame!r} on channel {channel}"


def _starting(raw_connect: Callable[..., Any], data: bytes) -> str:
    raw = raw_connect(handshake=False)
    raw.send(HEADER)
    raw.expect(C.Connection.Start)
    raw.send(data)
    return _silently_dropped(raw)


def test_errors_while_starting_drop_the_socket_without_a_close(raw_connect):
    results = _run_all(STARTING, lambda data: _starting(raw_connect, data))
    assert results == {name: "dropped" for name in STARTING}


def _opening(raw_connect: Callable[..., Any], data: bytes) -> tuple[int, str, int, int]:
    raw = raw_connect(handshake=False)
    raw.handshake(open_vhost=False)
    raw.send(data)
    close = raw.expect_close()
    return (close.reply_code, close.reply_text, close.class_id, close.method_id)


def test_errors_while_opening_get_a_connection_close(raw_connect):
    results = _run_all(OPENING, lambda case: _opening(raw_connect, case[0]))
    assert results == {name: case[1:] for name, case in OPENING.items()}
