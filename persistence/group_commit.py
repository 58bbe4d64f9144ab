"""``GroupCommit``: the op queue and its commit loop that every store shares (``batching.py`` adds ids,
coalescing and the ``Store`` operations on top).

Rules:
- A write method appends one or more ``(statement, params)`` ops (statements from ``schema``) to
  the current batch, synchronously, and returns. The first op of a batch, when no commit is in
  flight, creates the commit task (its first step runs via ``call_soon``, so everything queued in
  this event-loop turn joins the batch). While a batch commits, new ops fill the next batch, which
  the same task commits right after.
- ``_commit(ops)`` applies one batch atomically (all or nothing: ``engine.write_batch``) or raises;
  ``None`` entries in ``ops`` are cancelled ops and are skipped. Every commit and every read is an
  ``engine`` function run on the store's connection through ``_sql``: ``SQLiteStore`` runs it on
  its worker thread, ``MemoryStore`` runs it at once, on the event loop's thread.
- ``after_commit(cb)`` joins the current batch if it holds anything, else the batch in flight,
  else (everything queued before it is settled) fires on the next loop turn with ``True``.
  Callbacks run in registration order with their batch's outcome; a failed batch is logged and
  reported as ``ok=False``.
- A batch that fails for a reason in its data, not the disk (``DATA_ERRORS``: an integer SQLite
  cannot hold, a type it cannot bind, a constraint), is split: ``_commit_each`` applies it again op
  by op in one transaction (``engine.write_each``), the offending ops alone are refused and the rest
  commits. Each callback owns the ops queued since the callback before it (its ``mark``), so only the
  callback owning a refused op sees ``ok=False`` (its caller nacks, answers 406/400 and takes back
  what it did); every other client's confirm goes out. One bad value never stops other clients'
  writes.
- A batch that fails for an I/O reason (disk full, read-only file) is not forgotten: its ops go back
  to the front of the next batch, which is tried after a pause (``RETRY_MIN`` doubling to
  ``RETRY_MAX``), so memory and store agree again once the disk recovers. The broker answers the
  failure itself (a nack, a failed transaction) and takes back what it refused by queueing deletes
  behind the retried inserts; removals it cannot take back (acks, dead-letter moves) reach the disk
  with the retry. Only ``close()`` gives up: the ops of a batch that fails while closing are logged
  as lost. That is SQLite's rule (a local commit either happened or not). A store whose commit can
  fail without saying whether it happened (PostgreSQL: the answer to ``COMMIT`` lost on the network)
  sets ``_confirms_wait``: the failed batch is tried again alone, its callbacks waiting, after asking
  the database whether a try had committed (``_committed``); when the store gives up on a batch that
  may have committed (fenced, abandoned, closing) its callbacks are withheld, never told ``False``.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from . import engine
from .engine import DATA_ERRORS, Op
from .store import CommitCallback, StoreError, StoreFenced

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_MIN, RETRY_MAX = 0.05, 2.0  # pause before a failed batch is tried again (s)


class GroupCommit:
    """Ops queued synchronously, committed in batches by one task, with callbacks per batch; subclasses
    provide ``_sql`` (where the connection is), opening, closing and ``stats``."""

    _needs_open = True  # SQLiteStore: writes before open() raise; MemoryStore works without open()
    # failures of a batch caused by a value (split the batch) or by the database (retry it)
    _data_errors: tuple[type[BaseException], ...] = DATA_ERRORS
    _io_errors: tuple[type[BaseException], ...] = (sqlite3.Error, StoreError)

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._ops: list[Op | None] = []
        self._dead = 0  # cancelled ops (None) in _ops
        # (mark, callback): the callback owns the ops queued since the previous callback's mark
        self._callbacks: list[tuple[int, CommitCallback]] = []
        self._inflight_callbacks: list[tuple[int, CommitCallback]] | None = None
        self._inflight = 0
        self._task: asyncio.Task[None] | None = None
        self.batches = 0
        self.failed_batches = 0
        self.refused_ops = 0  # ops left out of a split batch (DATA_ERRORS)
        self._retry_delay = 0.0
        self._closing = False
        self._withheld: list[CommitCallback] = []  # see _drain

    # -- the database: engine functions run on the store's connection ---------------------------
    async def _sql(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(connection, *args)`` (an ``engine`` function) on the store's connection, in order
        with the batches.

        Raises:
            StoreError: the store is not open (SQLiteStore); whatever ``fn`` raises.
        """
        raise NotImplementedError

    async def _commit(self, ops: list[Op | None]) -> None:
        await self._sql(engine.write_batch, ops)

    async def release_memory(self) -> None:
        """Give back the page cache's memory (``PRAGMA shrink_memory``), e.g. after a backlog drained:
        the cache fills while a backlog is written and would stay full; pages are read back as
        needed. In order with the batches (on ``SQLiteStore``'s thread).

        Raises:
            StoreError: the store is not open (SQLiteStore).
        """
        await self._sql(engine.shrink_memory)

    async def _commit_each(self, ops: list[Op | None]) -> set[int]:
        """Apply ``ops`` one by one in one transaction, leaving out (and returning the indexes of)
        those that fail with one of ``DATA_ERRORS``.

        Raises:
            Exception: an I/O failure (nothing is applied).
        """
        return await self._sql(engine.write_each, ops)

    def _kick(self) -> None:
        """Start the commit task for a new batch (the caller checked no task is running)."""
        if self._closed:
            raise StoreError("the store is closed")
        loop = self._loop
        if loop is None:
            if self._needs_open:
                raise StoreError("the store is not open")
            loop = self._loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run())

    async def _run(self) -> None:
        try:
            while self._ops or self._callbacks:
                ops, callbacks = self._ops, self._callbacks
                live = len(ops) - self._dead
                self._ops, self._callbacks, self._dead = [], [], 0
                self._batch_taken()
                ok: bool | None = True
                give_up, refused = False, set[int]()
                if live:
                    self._inflight, self._inflight_callbacks = live, callbacks
                    try:
                        ok, give_up, refused = await self._write(ops, live)
                    finally:
                        self._inflight, self._inflight_callbacks = 0, None
                    self.batches += 1
                if ok is None:  # the batch may have committed: its callbacks are withheld
                    self._withheld += [callback for _, callback in callbacks]
                    log.error(
                        "store: a batch of %d ops may or may not have committed; its %d callbacks are "
                        "withheld (their clients see their connections close)",
                        live,
                        len(callbacks),
                    )
                    continue
                start = 0
                for mark, callback in callbacks:
                    mine = ok and not any(start <= i < mark for i in refused) if refused else ok
                    _fire(callback, mine)
                    start = max(start, mark)
                if ok:
                    self._retry_delay = 0.0
                elif give_up:
                    log.error("store: %d ops of the failed batch are not written", live)
                else:
                    self._requeue([op for op in ops if op is not None])
                    await self._pause()
        finally:
            self._task = None

    async def _pause(self) -> None:
        """Wait before trying the database again (``RETRY_MIN`` doubling to ``RETRY_MAX``)."""
        self._retry_delay = min(max(self._retry_delay * 2, RETRY_MIN), RETRY_MAX)
        await asyncio.sleep(self._retry_delay)

    async def _write(self, ops: list[Op | None], live: int) -> tuple[bool | None, bool, set[int]]:
        """Commit one batch: ``(ok, give_up, refused)``; ``ok`` is None when the batch may or may
        not have committed and the store gave up on it (``_confirms_wait``: fenced or closing)."""
        self._new_batch()
        while True:
            try:
                try:
                    await self._commit(ops)
                    return True, False, set()
                except self._data_errors as exc:  # a value, not the disk: split the batch
                    refused = await self._commit_each(ops)
                    self.refused_ops += len(refused)
                    log.error(
                        "store: %d of %d ops refused (%s: %s); the rest committed",
                        len(refused),
                        live,
                        type(exc).__name__,
                        exc,
                    )
                    return True, False, refused
            except StoreFenced as exc:  # another broker is active: this one writes no more
                self.failed_batches += 1
                log.error("store: a batch of %d ops is not written: %s", live, exc)
                return (None if self._uncertain() else False), True, set()
            except self._io_errors as exc:  # "database or disk is full", I/O errors
                self.failed_batches += 1
                if not self._confirms_wait or self._closing:
                    log.error("store: a batch of %d ops failed and was rolled back: %s", live, exc)
                    return (None if self._uncertain() else False), self._closing, set()
                log.error("store: a batch of %d ops failed (%s); its confirms wait for a retry", live, exc)
                committed = await self._resolved()
                if committed is None:  # gave up (fenced, abandoned or closing) before knowing
                    return (None if self._uncertain() else False), True, set()
                if committed:
                    log.warning("store: the failed batch of %d ops had committed after all", live)
                    return True, False, set()
            except Exception:
                self.failed_batches += 1
                log.exception("store: a batch of %d ops failed and was rolled back", live)
                return False, self._closing, set()

    async def _resolved(self) -> bool | None:
        """After a failed try (``_confirms_wait``): wait until the database answers whether it had
        committed (``_committed``): True when it had, False when not (try again), None when the store
        gave up first (fenced, abandoned or closing)."""
        while True:
            await self._pause()
            try:
                committed = await self._committed()
            except StoreFenced:
                return None
            except self._io_errors as exc:
                if self._closing:
                    return None
                log.warning("store: the database is still unreachable (%s)", exc)
                continue
            return committed  # the pause keeps growing until a try commits

    # -- the commit token (stores whose commits can be uncertain: ``_confirms_wait``) -------------
    _confirms_wait = False  # an I/O failure is retried with its confirms waiting (PostgreSQL)

    def _uncertain(self) -> bool:
        """A try of the batch being written may have committed (unknown to the store)."""
        return False

    def _new_batch(self) -> None:
        """A new batch is about to be written (forget the tries of the last one)."""

    async def _committed(self) -> bool:
        """Whether a failed try of the batch being written committed after all."""
        return False

    def _requeue(self, failed: list[Op | None]) -> None:
        """Put a failed batch's ops in front of the ops queued since (indexes shift by its length)."""
        n = len(failed)
        self._ops = failed + self._ops
        self._callbacks = [(mark + n, callback) for mark, callback in self._callbacks]
        self._batch_shifted(n)
        log.warning("store: the %d ops of the failed batch go first in the next one", n)

    def _batch_taken(self) -> None:
        """The current batch is taken for its commit (a subclass forgets its indexes into it)."""

    def _batch_shifted(self, n: int) -> None:
        """``n`` ops went in front of the current batch (a subclass shifts its indexes into it)."""

    def _add(self, statement: str, params: tuple[Any, ...]) -> None:
        if self._task is None:
            self._kick()
        self._ops.append((statement, params))

    def _cancel(self, index: int) -> None:
        self._ops[index] = None
        self._dead += 1

    # -- Store: batching --------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Ops queued and not yet committed (the current batch and the one in flight)."""
        return len(self._ops) - self._dead + self._inflight

    def after_commit(self, callback: CommitCallback) -> None:
        """Call ``callback(ok)`` once everything queued so far is committed (ok) or failed."""
        if len(self._ops) > self._dead or self._callbacks:
            self._callbacks.append((len(self._ops), callback))
        elif self._inflight_callbacks is not None:
            self._inflight_callbacks.append((self._inflight_end(), callback))
        else:  # everything queued before is committed (or failed and was reported)
            loop = self._loop or asyncio.get_running_loop()
            loop.call_soon(_fire, callback, True)

    def _inflight_end(self) -> int:
        """A mark after every op of the batch in flight (a callback joining it owns none of them)."""
        callbacks = self._inflight_callbacks
        return callbacks[-1][0] if callbacks else 0

    async def flush(self) -> None:
        """Wait until everything queued so far is committed.

        Raises:
            StoreError: the batch holding the last queued op failed (it was logged).
        """
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def done(ok: bool) -> None:
            if not future.done():
                future.set_result(ok)

        self.after_commit(done)
        if not await future:
            raise StoreError("the store could not commit queued writes (see the log)")

    async def _settle(self) -> None:
        """Wait until everything queued so far is committed or failed (reads see their own writes)."""
        if self.pending or self._task is not None:
            future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self.after_commit(lambda ok: None if future.done() else future.set_result(ok))
            await future

    async def _drain(self) -> None:
        """Flush, then wait for a batch queued by the callbacks themselves; log failures (a batch
        failing now is not retried: closing must end). Callbacks withheld from batches that may have
        committed are told ``False`` last: the broker closes the store after its connections, so no
        client hears of it."""
        self._closing = True
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.after_commit(lambda ok: None if done.done() else done.set_result(ok))
        while not done.done() and self._task is not None:  # its callback may be withheld
            waiters: set[asyncio.Future[Any]] = {done, asyncio.shield(self._task)}
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if done.done() and not done.result():
            log.error("closing the store: the last writes could not be committed (see the log)")
        while self._task is not None:
            await asyncio.shield(self._task)
        withheld, self._withheld = self._withheld, []
        for callback in withheld:
            _fire(callback, False)
        self._closing = False  # a reopened store retries again


def _fire(callback: CommitCallback, ok: bool) -> None:
    try:
        callback(ok)
    except Exception:
        log.exception("after_commit callback %r failed", callback)
