"""``Worker``: one thread that runs blocking calls in submission order for an event loop.

Rules:
- ``call(fn, *args)`` (on the event loop) queues the call and returns an ``asyncio.Future``; the
  thread runs the calls one at a time, in the order they were queued, and hands each result or
  exception back with one ``call_soon_threadsafe``. One call = one thread round trip.
- ``stop()`` queues the end after the calls already queued and joins the thread (it returns once
  they have run). A call queued after ``stop()`` raises ``RuntimeError``.
- The thread is a daemon: a worker never stopped (a crash on the way out) does not keep the
  process alive; being cut off in the middle of a call is then the same as ``kill -9``.
- A call whose loop is closed or whose future was cancelled is still run; its result is dropped.

Why not ``loop.run_in_executor`` with a one-thread ``ThreadPoolExecutor``: it costs about 20 µs
more event-loop CPU per call (a ``concurrent.futures.Future`` chained to an asyncio one, the
executor's locks), measured with uvloop; this is the path of every store batch. The design is
aiosqlite's (``aiosqlite/core.py``: a ``SimpleQueue`` feeding one thread), on the stdlib only.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, TypeVar

T = TypeVar("T")

_Call = tuple["asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class Worker:
    """One daemon thread running calls in submission order (see the module rules).

    Args:
        name: the thread's name.
    """

    def __init__(self, name: str) -> None:
        self._calls: SimpleQueue[_Call | None] = SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def call(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue ``fn(*args)``; the future gets its result or exception.

        Raises:
            RuntimeError: the worker is stopped, or there is no running event loop.
        """
        if self._stopped:
            raise RuntimeError("the worker is stopped")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._calls.put((future, fn, args))
        return future

    def stop(self) -> None:
        """Run what is queued, end the thread and join it (at once when nothing is queued)."""
        if not self._stopped:
            self._stopped = True
            self._calls.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def alive(self) -> bool:
        """Whether the thread is still running."""
        return self._thread.is_alive()

    def _run(self) -> None:
        calls = self._calls
        while True:
            item = calls.get()
            if item is None:
                return
            _run_one(*item)
            del item  # hold nothing (a batch's ops) while waiting for the next call


def _run_one(future: asyncio.Future[Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        result = fn(*args)
    except BaseException as exc:  # handed to the caller, as any other outcome
        _hand_back(future, _set_exception, exc)
    else:
        _hand_back(future, _set_result, result)


def _hand_back(
    future: asyncio.Future[Any], setter: Callable[[asyncio.Future[Any], Any], None], value: Any
) -> None:
    try:
        future.get_loop().call_soon_threadsafe(setter, future, value)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass


def _set_result(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # cancelled meanwhile
        future.set_result(result)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
