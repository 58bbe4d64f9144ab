"""The e2e tests' one poll helper: wait for a condition until a deadline, never behind a bare sleep.

``poll_until(fn)`` calls ``fn`` until it returns something truthy and returns that value; at the deadline
the test fails with what was awaited, how long, and ``fn``'s last value. ``poll_until_async`` is the same
helper for coroutines (aio-pika tests), sleeping with ``asyncio.sleep`` so the event loop keeps running.

Import it as a sibling module: ``from .polling import poll_until``. pytest's ``--import-mode=importlib``
imports ``e2e/`` as the namespace package ``e2e`` (no ``__init__.py``, nothing added to ``sys.path``), so
relative imports between its modules work (``tls_certs`` is imported the same way); conftest's
``poll_until`` fixture returns this same function.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

T = TypeVar("T")

REPR_LIMIT = 600  # characters of the last value shown in a failure


def poll_until(
    fn: Callable[[], T],
    timeout: float = 5,
    interval: float = 0.01,
    *,
    what: str | None = None,
    explain: Callable[[], str] | None = None,
) -> T:
    """``fn()``'s first truthy value, calling it every ``interval`` seconds for up to ``timeout`` seconds.

    Args:
        fn: the condition; called at least once, and once more after the deadline has passed.
        timeout: how long to wait, in seconds.
        interval: the pause between two calls, in seconds.
        what: what is awaited, for the failure message (default: ``fn``'s name, or a lambda's source).
        explain: called on timeout; its text is appended to the failure message (a log tail, say).

    Returns:
        The first truthy value ``fn`` returned.

    Raises:
        pytest.fail.Exception: nothing truthy within ``timeout``.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            _fail(fn, timeout, value, what, explain)
        time.sleep(interval)


async def poll_until_async(
    fn: Callable[[], Awaitable[T]],
    timeout: float = 5,
    interval: float = 0.01,
    *,
    what: str | None = None,
    explain: Callable[[], str] | None = None,
) -> T:
    """:func:`poll_until` for a coroutine function: ``await fn()``'s first truthy value.

    Raises:
        pytest.fail.Exception: nothing truthy within ``timeout``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await fn()
        if value:
            return value
        if loop.time() > deadline:
            _fail(fn, timeout, value, what, explain)
        await asyncio.sleep(interval)


def _fail(
    fn: Callable[[], object],
    timeout: float,
    value: object,
    what: str | None,
    explain: Callable[[], str] | None,
) -> None:
    shown = repr(value)
    if len(shown) > REPR_LIMIT:
        shown = shown[:REPR_LIMIT] + "..."
    message = f"{what or _describe(fn)}: not met within {timeout} s (last value: {shown})"
    if explain is not None:
        message += "\n" + explain()
    pytest.fail(message)


def _describe(fn: Callable[[], object]) -> str:
    """``fn``'s qualified name; for a lambda its source line, which says more than ``<lambda>``."""
    name = getattr(fn, "__qualname__", None) or repr(fn)
    if "<lambda>" in name:
        try:
            source = " ".join(inspect.getsource(fn).split())
        except (OSError, TypeError):
            return name
        return source if len(source) <= 200 else source[:200] + "..."
    return name
