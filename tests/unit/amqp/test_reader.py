"""FrameReader: splitting, buffering across feeds, and frame validation."""

from __future__ import annotations

import random
import struct

import pytest
from ottermq.amqp.errors import FrameError
from ottermq.amqp.reader import FrameReader

# installed (compiled by mypyc) and pure-Python modules, the same expectations (tests/conftest.py)
pytestmark = pytest.mark.hot_path


def frame(ftype: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + bytes([end])


HEARTBEAT = frame(8, 0, b"")
FRAMES = [
    (1, 1, b"\x00\x3c\x00\x28" + b"\x00\x00\x00\x02rk\x00"),
    (2, 1, b"\x00\x3c\x00\x00" + struct.pack(">Q", 5) + b"\x00\x00"),
    (3, 1, b"hello"),
    (8, 0, b""),
    (3, 65535, bytes(range(256)) * 40),
    (1, 0, b"\x00\x0a\x00\x33"),
]
STREAM = b"".join(frame(*f) for f in FRAMES)


def test_whole_stream_in_one_feed() -> None:
    reader = FrameReader()
    frames = reader.feed(STREAM)
    assert frames == FRAMES
    assert all(type(payload) is bytes for _, _, payload in frames)
    assert reader.error is None


def test_one_byte_at_a_time() -> None:
    reader = FrameReader()
    out = []
    for i in range(len(STREAM)):
        out.extend(reader.feed(STREAM[i : i + 1]))
    assert out == FRAMES
    assert all(type(payload) is bytes for _, _, payload in out)


@pytest.mark.parametrize("seed", range(20))
def test_random_chunking(seed: int) -> None:
    rnd = random.Random(seed)
    reader = FrameReader()
    out = []
    pos = 0
    while pos < len(STREAM):
        size = rnd.choice([1, 2, 6, 7, 8, 9, 100, 5000, 20000])
        out.extend(reader.feed(STREAM[pos : pos + size]))
        pos += size
    assert out == FRAMES


def test_partial_input_yields_nothing_until_complete() -> None:
    reader = FrameReader()
    data = frame(3, 2, b"abcdef")
    assert reader.feed(data[:3]) == []
    assert reader.feed(data[3:9]) == []
    assert reader.feed(b"") == []
    assert reader.feed(data[9:] + HEARTBEAT[:4]) == [(3, 2, b"abcdef")]
    assert reader.feed(HEARTBEAT[4:]) == [(8, 0, b"")]


def test_frame_max_boundary() -> None:
    # RabbitMQ lets the payload reach frame_max (8 octets of fudge for the frame overhead)
    reader = FrameReader(frame_max=4096)
    assert reader.feed(frame(3, 1, b"x" * 4096)) == [(3, 1, b"x" * 4096)]
    assert reader.feed(frame(3, 1, b"x" * 4097)) == []
    assert isinstance(reader.error, FrameError)
    assert reader.error.reply_code == 501
    assert reader.error.text == "type 3, all octets = <<>>: {frame_too_large,4097,4088}"


def test_frame_max_zero_is_unlimited() -> None:
    reader = FrameReader(frame_max=0)
    assert reader.feed(frame(3, 1, b"y" * 300_000)) == [(3, 1, b"y" * 300_000)]


def test_frame_max_can_be_changed_after_tune() -> None:
    reader = FrameReader()
    assert reader.feed(frame(3, 1, b"z" * 10_000))
    reader.frame_max = 8192
    assert reader.feed(frame(3, 1, b"z" * 10_000)) == []
    assert reader.error is not None


def test_oversized_frame_is_rejected_from_its_header_alone() -> None:
    reader = FrameReader(frame_max=4096)
    assert reader.feed(struct.pack(">BHI", 3, 1, 2**31)) == []
    assert reader.error is not None


def test_oversized_frame_detected_when_header_arrives_in_pieces() -> None:
    reader = FrameReader(frame_max=4096)
    header = struct.pack(">BHI", 3, 1, 10_000)
    assert reader.feed(header[:3]) == []
    assert reader.error is None
    assert reader.feed(header[3:]) == []
    assert reader.error is not None


@pytest.mark.parametrize("ftype", [0, 4, 5, 7, 9, 65, 255])
def test_invalid_frame_type(ftype: int) -> None:
    reader = FrameReader()
    good = frame(1, 1, b"\x00\x0a\x00\x33")
    frames = reader.feed(good + frame(ftype, 1, b"abc") + good)
    assert frames == [(1, 1, b"\x00\x0a\x00\x33")]
    assert isinstance(reader.error, FrameError)
    assert f"type {ftype}" in reader.error.text
    assert reader.feed(good) == []


def test_protocol_header_is_not_a_frame() -> None:
    reader = FrameReader()
    assert reader.feed(b"AMQP\x00\x00\x09\x01") == []
    assert reader.error is not None


def test_bad_frame_end_returns_earlier_frames_then_stops() -> None:
    reader = FrameReader()
    data = frame(3, 1, b"ok") + frame(3, 1, b"bad", end=0x00) + frame(3, 1, b"never")
    assert reader.feed(data) == [(3, 1, b"ok")]
    assert isinstance(reader.error, FrameError)
    assert reader.error.text == 'type 3, all octets = <<"bad">>: {invalid_frame_end_marker,0}'
    assert reader.feed(frame(8, 0, b"")) == []


def test_bad_frame_end_in_buffered_frame() -> None:
    reader = FrameReader()
    data = frame(3, 1, b"payload", end=0xCD)
    assert reader.feed(data[:5]) == []
    assert reader.feed(data[5:]) == []
    assert reader.error is not None


def test_invalid_type_in_buffered_header() -> None:
    reader = FrameReader()
    assert reader.feed(frame(8, 0, b"") + b"\x05\x00") == [(8, 0, b"")]
    assert reader.error is None
    # as RabbitMQ, the type is judged once the whole frame (and its end octet) is in
    assert reader.feed(b"\x01\x00\x00\x00\x02\x00\x01\xce") == []
    assert reader.error is not None
    assert reader.error.text == "type 5, all octets = <<0,1>>: unknown_frame"


def test_buffer_holds_only_the_incomplete_frame() -> None:
    reader = FrameReader()
    body = frame(3, 1, b"q" * 1000)
    assert len(reader.feed(body * 3 + body[:10])) == 3
    assert len(reader._buf) == 10
    assert reader.feed(body[10:]) == [(3, 1, b"q" * 1000)]
    assert len(reader._buf) == 0
