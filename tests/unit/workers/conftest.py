"""The workers' unit tests run on real event loops, asyncio's and uvloop's (the worker processes run on
uvloop), over real Unix socket pairs: no mock of the socket, the loop or the kernel's SCM_RIGHTS."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop
from ottermq.broker.workers.messages import Message

Run = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    """Run a coroutine to its end on a new event loop of the parametrized kind."""

    def runner(coro: Coroutine[Any, Any, Any]) -> Any:
        if request.param == "uvloop":
            return uvloop.run(coro)
        return asyncio.run(coro)

    return runner


class Received:
    """What one end of a control socket was given: messages with their descriptors, and how many times
    it was told the other end is gone (``on_closed``)."""

    def __init__(self) -> None:
        self.messages: list[tuple[Message, list[int]]] = []
        self.closed = 0
        self._changed = asyncio.Event()

    def on_message(self, message: Message, fds: list[int]) -> None:
        self.messages.append((message, fds))
        self._changed.set()

    def on_closed(self) -> None:
        self.closed += 1
        self._changed.set()

    def only(self) -> list[Message]:
        """The messages, after checking none came with a descriptor."""
        assert [fds for _m, fds in self.messages if fds] == []
        return [m for m, _fds in self.messages]

    async def until(self, done: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``done()`` holds, checked whenever something arrives."""
        async with asyncio.timeout(timeout):
            while not done():
                self._changed.clear()
                await self._changed.wait()


def read_end_open(write_end: int) -> bool:
    """Whether any descriptor of the pipe's read end is still open in this process (the kernel
    answers a write to a pipe without readers with EPIPE): how the tests see a descriptor leak."""
    try:
        os.write(write_end, b"x")
    except BrokenPipeError:
        return False
    except OSError as exc:  # pragma: no cover - EAGAIN: the pipe is full, so it has a reader
        return exc.errno == errno.EAGAIN
    return True


def pipe() -> tuple[int, int]:
    """A pipe (read end, non-blocking write end)."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    return read, write
