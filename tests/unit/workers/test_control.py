"""The control socket (broker/workers/control.py) over a real Unix socket pair and a real event loop:
the frames, a frame cut into many reads and several in one, large messages, descriptors passed with
SCM_RIGHTS and received in order, the outbox while the socket is full, the end of the other side
(EOF, or a peer that dies in the middle of a frame): ``on_closed`` once and no descriptor left open,
and what closes the channel (a frame that is not a message) or does not (a handler that fails)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import struct
from typing import Any

import pytest
from ottermq.broker.workers.control import MAX_MESSAGE, Control
from ottermq.broker.workers.messages import (
    ChannelsElsewhere,
    Connection,
    Message,
    MessageError,
    Metadata,
    Ready,
    Taken,
    pack,
)

from .conftest import Received, Run, pipe, read_end_open


def pair(loop: asyncio.AbstractEventLoop, a: Received, b: Received) -> tuple[Control, Control]:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return Control(left, loop, a.on_message, a.on_closed), Control(right, loop, b.on_message, b.on_closed)


def raw_pair(loop: asyncio.AbstractEventLoop, received: Received) -> tuple[Control, socket.socket]:
    """A control end and a bare socket as its peer (non-blocking), to write frames by hand."""
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    right.setblocking(False)
    return Control(left, loop, received.on_message, received.on_closed), right


def frame(payload: bytes, fds: int = 0) -> bytes:
    return struct.pack("!IB", len(payload), fds) + payload


def no_loop_errors(loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    """Collects what reaches the loop's exception handler (an exception out of a callback)."""
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    return errors


def test_messages_cross_both_ways_in_order(run: Run) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        zero, one = Received(), Received()
        to_zero, to_one = pair(loop, zero, one)
        for_one: list[Message] = [Metadata(i, {"n": i}, ("a",)) for i in range(50)] + [
            ChannelsElsewhere({"u": 1})
        ]
        for_zero: list[Message] = [Taken(i) for i in range(50)] + [Ready(1, None)]
        assert all(to_zero.send(m) for m in for_one)
        assert all(to_one.send(m) for m in for_zero)
        await one.until(lambda: len(one.messages) == len(for_one))
        await zero.until(lambda: len(zero.messages) == len(for_zero))
        assert one.only() == for_one and zero.only() == for_zero
        to_zero.close()
        await one.until(lambda: one.closed > 0)
        assert (zero.closed, one.closed) == (1, 1)

    run(main())


def test_a_frame_is_a_length_a_descriptor_count_and_the_message_as_json(run: Run) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        control, peer = raw_pair(loop, Received())
        read, write = pipe()
        control.send(Taken(5))
        control.send(Connection(1, b"\x00", b"", None), [read])
        taken = b'{"type":"taken","id":5}'
        connection = b'{"type":"connection","id":1,"before":"AA==","rest":"","endpoints":null}'
        expected = (
            struct.pack("!IB", len(taken), 0) + taken + struct.pack("!IB", len(connection), 1) + connection
        )
        data, fds = b"", []
        while len(data) < len(expected):  # both were written at once: the socket had room
            more, more_fds, _flags, _addr = socket.recv_fds(peer, 4096, 4)
            data, fds = data + more, fds + more_fds
        assert data == expected and data[:5] == b"\x00\x00\x00\x17\x00"
        assert len(fds) == 1 and read_end_open(write)  # the sender closed its copy, this one is open
        for fd in fds:
            os.close(fd)
        assert not read_end_open(write)
        control.close()
        peer.close()

    run(main())


def test_a_frame_cut_into_many_reads_and_frames_sharing_one(run: Run) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        received = Received()
        control, peer = raw_pair(loop, received)
        big = Metadata(7, {"names": ["x" * 100] * 20}, ("a", "b"))
        data = frame(pack(big))
        for i in range(len(data) - 1):  # one byte a turn of the loop: the header is cut too
            await loop.sock_sendall(peer, data[i : i + 1])
            await asyncio.sleep(0)
        assert received.messages == []
        await loop.sock_sendall(peer, data[-1:])
        await received.until(lambda: len(received.messages) == 1)
        three = [Taken(1), Ready(None, None), Taken(2)]
        await loop.sock_sendall(peer, b"".join(frame(pack(m)) for m in three))
        await received.until(lambda: len(received.messages) == 4)
        assert received.only() == [big, *three] and received.closed == 0
        control.close()
        peer.close()

    run(main())


def test_large_messages_and_small_ones_between_them(run: Run) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        zero, one = Received(), Received()
        sender, _receiver = pair(loop, zero, one)
        sent: list[Message] = []
        for i in range(3):
            definitions = {"queues": [f"{i}-{n}-" + "q" * 1000 for n in range(4000)]}  # 4 MB each
            sent += [Metadata(i, definitions, ()), Taken(i)]
        for m in sent:
            assert sender.send(m)
        assert sender.queued > 4_000_000  # the socket took a little; the rest waits in the outbox
        await one.until(lambda: len(one.messages) == len(sent))
        assert one.only() == sent and sender.queued == 0

    run(main())


def test_a_frame_over_the_limit_closes_the_channel(run: Run, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        received = Received()
        control, peer = raw_pair(loop, received)
        await loop.sock_sendall(peer, struct.pack("!IB", MAX_MESSAGE + 1, 0))
        await received.until(lambda: received.closed > 0)
        assert control.closed and received.messages == []
        assert await loop.sock_recv(peer, 10) == b""  # the peer sees the end
        peer.close()

    run(main())
    assert f"worker control socket: a message of {MAX_MESSAGE + 1} bytes; closing it" in caplog.messages


def test_descriptors_arrive_with_their_messages_in_order(run: Run) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        zero, one = Received(), Received()
        sender, _receiver = pair(loop, zero, one)
        pipes = [pipe() for _ in range(6)]
        for i, (read, _write) in enumerate(pipes):
            assert sender.send(Connection(i, b"AMQP", b"", None), [read])
            assert sender.send(Taken(i))
        await one.until(lambda: len(one.messages) == 2 * len(pipes))
        connections = [(m, fds) for m, fds in one.messages if isinstance(m, Connection)]
        assert [m.id for m, _fds in connections] == list(range(len(pipes)))
        assert [fds for m, fds in one.messages if not isinstance(m, Connection)] == [[]] * len(pipes)
        for (m, fds), (_read, write) in zip(connections, pipes, strict=True):
            assert len(fds) == 1
            os.write(write, f"pipe {m.id}".encode())
            assert os.read(fds[0], 100) == f"pipe {m.id}".encode()  # this message's pipe
            os.close(fds[0])
            assert not read_end_open(write)  # the sender closed its own once sent
            os.close(write)

    run(main())


def test_the_outbox_holds_what_a_full_socket_does_not_take(run: Run) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sender = Control(left, loop, Received().on_message)
        sent: list[Message] = []
        while sender.queued == 0:  # nobody reads yet: the socket's buffers fill up
            sent.append(Metadata(len(sent), {"pad": "p" * 65536}, ()))
            assert sender.send(sent[-1])
            assert len(sent) < 1000
        read, write = pipe()
        sent.append(Connection(99, b"", b"", None))
        assert sender.send(sent[-1], [read])  # queued behind the others, its descriptor with it
        sent.append(Taken(99))
        assert sender.send(sent[-1])
        assert read_end_open(write)  # the outbox owns it until it is sent
        received = Received()
        Control(right, loop, received.on_message, received.on_closed)  # now the other end reads
        await received.until(lambda: len(received.messages) == len(sent))
        assert [m for m, _fds in received.messages] == sent and sender.queued == 0
        fds = {type(m).__name__: f for m, f in received.messages if f}
        assert list(fds) == ["Connection"] and len(fds["Connection"]) == 1
        os.close(fds["Connection"][0])
        assert not read_end_open(write)
        os.close(write)

    run(main())


def test_the_peer_gone_closes_what_the_outbox_holds(run: Run) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        errors = no_loop_errors(loop)
        received = Received()
        control, peer = raw_pair(loop, received)
        while control.queued == 0:
            control.send(Metadata(0, {"pad": "p" * 65536}, ()))
        read, write = pipe()
        control.send(Connection(1, b"", b"", None), [read])
        peer.close()
        await received.until(lambda: received.closed > 0)
        assert control.closed and control.queued == 0 and not read_end_open(write)
        read, write2 = pipe()
        assert control.send(Connection(2, b"", b"", None), [read]) is False  # dropped, its fd closed
        assert not read_end_open(write2)
        control.close()
        assert received.closed == 1 and errors == []
        os.close(write)
        os.close(write2)

    run(main())


def test_eof_calls_on_closed_once(run: Run) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        errors = no_loop_errors(loop)
        received = Received()
        control, peer = raw_pair(loop, received)
        await loop.sock_sendall(peer, frame(pack(Taken(1))))
        peer.shutdown(socket.SHUT_WR)
        await received.until(lambda: received.closed > 0)
        assert received.only() == [Taken(1)] and control.closed
        control.close()
        assert received.closed == 1 and not control.send(Taken(2)) and errors == []
        peer.close()

    run(main())


def test_a_peer_that_dies_in_the_middle_of_a_frame(run: Run, caplog: pytest.LogCaptureFixture) -> None:
    """Half a frame with its descriptor, then the peer is gone: ``on_closed`` once, no message, no
    exception, and the descriptor that came with the half frame is closed."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        errors = no_loop_errors(loop)
        received = Received()
        _control, peer = raw_pair(loop, received)
        read, write = pipe()
        data = frame(pack(Connection(1, b"AMQP" * 100, b"", None)), 1)
        assert socket.send_fds(peer, [data[: len(data) // 2]], [read]) == len(data) // 2
        os.close(read)
        await asyncio.sleep(0)
        peer.close()
        await received.until(lambda: received.closed > 0)
        assert received.messages == [] and received.closed == 1 and errors == []
        assert not read_end_open(write)
        os.close(write)

    caplog.set_level(logging.DEBUG)
    run(main())
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


BAD_FRAMES = [
    (b"not json", 0, 0, "a control message that is not JSON: Expecting value: line 1 column 1 (char 0)"),
    (b'{"type":"bogus"}', 0, 0, "unknown control message type 'bogus'"),
    (b'{"type":"taken","number":1}', 0, 0, "control message 'taken': missing 'id'; unexpected 'number'"),
    (b'{"type":"taken","id":"1"}', 0, 0, "control message field taken.id: str, not int"),
    (pack(Connection(1, b"", b"", None)), 0, 0, "control message 'connection' with 0 fds, not 1"),
    (pack(Taken(1)), 1, 1, "control message 'taken' with 1 fds, not 0"),
    (pack(Connection(1, b"", b"", None)), 2, 1, "a message with 2 fds, 1 received"),
]


@pytest.mark.parametrize(("payload", "count", "fds", "reason"), BAD_FRAMES, ids=[r for *_x, r in BAD_FRAMES])
def test_a_frame_that_is_not_a_message_closes_the_channel(
    run: Run, caplog: pytest.LogCaptureFixture, payload: bytes, count: int, fds: int, reason: str
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        errors = no_loop_errors(loop)
        received = Received()
        control, peer = raw_pair(loop, received)
        pipes = [pipe() for _ in range(fds)]
        data = frame(pack(Taken(1))) + frame(payload, count) + frame(pack(Taken(2)))
        assert socket.send_fds(peer, [data], [read for read, _write in pipes]) == len(data)
        for read, _write in pipes:
            os.close(read)
        await received.until(lambda: received.closed > 0)
        assert received.only() == [Taken(1)] and control.closed and errors == []
        assert [read_end_open(write) for _read, write in pipes] == [False] * fds
        assert await loop.sock_recv(peer, 10) == b""
        peer.close()
        for _read, write in pipes:
            os.close(write)

    run(main())
    assert f"worker control socket: {reason}; closing it" in caplog.messages


def test_send_refuses_what_the_other_side_would(run: Run) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        zero, one = Received(), Received()
        sender, _receiver = pair(loop, zero, one)
        read, write = pipe()
        with pytest.raises(MessageError, match="^control message 'taken' carries 0 fds, not 1$"):
            sender.send(Taken(1), [read])
        assert not read_end_open(write)  # given to the channel: closed
        with pytest.raises(MessageError, match="^control message 'connection' carries 1 fds, not 0$"):
            sender.send(Connection(1, b"", b"", None))
        with pytest.raises(MessageError, match="taken.id: str, not int"):
            sender.send(Taken("1"))  # type: ignore[arg-type]
        assert sender.send(Taken(2))  # the channel is still up
        await one.until(lambda: len(one.messages) == 1)
        assert one.only() == [Taken(2)] and one.closed == 0
        os.close(write)

    run(main())


def test_a_handler_that_fails_does_not_stop_the_channel(run: Run, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        received = Received()

        def on_message(message: Message, fds: list[int]) -> None:
            if message == Taken(1):
                raise RuntimeError("a bug")
            received.on_message(message, fds)

        left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sender = Control(left, loop, Received().on_message)
        Control(right, loop, on_message, received.on_closed, name="test socket")
        sender.send(Taken(1))
        sender.send(Taken(2))
        await received.until(lambda: len(received.messages) == 1)
        assert received.only() == [Taken(2)] and received.closed == 0

    run(main())
    assert "test socket: message 'taken' failed" in caplog.messages


def test_the_json_on_the_wire_is_what_messages_pack_makes() -> None:
    assert json.loads(pack(Ready(15672, None))) == {
        "type": "ready",
        "web": 15672,
        "prometheus": None,
        "report": None,
    }
