"""``BatchingStore``: the group commit, ids, coalescing, callbacks and reads both stores share.

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
- Coalescing within the current (not yet committing) batch: deleting a message whose insert is
  pending cancels both; ``mark_delivered`` on a pending insert rewrites the insert;
  ``mark_delivered``/``touch_queue`` keep only the last op per id (moved to its latest position).
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
- Reads (``load_definitions``, ``iter_messages``, ``iter_delayed``, ``load_dedup``,
  ``load_move_jobs``) first wait for the writes queued before them, so a caller reads its own writes
  (what failed to commit is not there).
- Ids: queue ids from a counter (a redeclared name keeps its id); message id =
  ``(queue_id << SEQ_BITS) | seq`` where seq is the record's seq, or the queue's previous seq + 1
  when the record's is not above it (then ``record.seq`` is updated to match).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, TypeVar

from . import engine
from . import schema as s
from .engine import DATA_ERRORS, Op
from .store import (
    BindingRecord,
    CommitCallback,
    DedupRecord,
    Definitions,
    DelayedRecord,
    ExchangeRecord,
    LimitRecord,
    MessageRecord,
    MoveJobRecord,
    PermissionRecord,
    PolicyRecord,
    QueueRecord,
    StoreError,
    StoreFenced,
    UserRecord,
    VHostRecord,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_MIN, RETRY_MAX = 0.05, 2.0  # pause before a failed batch is tried again (s)


class BatchingStore:
    """The op queue, coalescing, id allocation, commit callbacks and reads of ``MemoryStore`` and
    ``SQLiteStore``; subclasses provide ``_sql`` (where the connection is), opening, closing and
    ``stats``."""

    _needs_open = True  # SQLiteStore: writes before open() raise; MemoryStore works without open()
    # failures of a batch caused by a value (split the batch) or by the database (retry it)
    _data_errors: tuple[type[BaseException], ...] = DATA_ERRORS
    _io_errors: tuple[type[BaseException], ...] = (sqlite3.Error, StoreError)

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._ops: list[Op | None] = []
        self._dead = 0  # cancelled ops (None) in _ops
        self._inserts: dict[int, int] = {}  # message id -> index of its pending insert
        self._marks: dict[int, int] = {}  # message id -> index of its pending mark_delivered
        self._touches: dict[int, int] = {}  # queue id -> index of its pending touch_queue
        # (mark, callback): the callback owns the ops queued since the previous callback's mark
        self._callbacks: list[tuple[int, CommitCallback]] = []
        self._inflight_callbacks: list[tuple[int, CommitCallback]] | None = None
        self._inflight = 0
        self._task: asyncio.Task[None] | None = None
        self._queue_ids: dict[tuple[str, str], int] = {}
        self._last_delayed = 0  # highest delayed-message id handed out
        self._queue_keys: dict[int, tuple[str, str]] = {}
        self._last_seq: dict[int, int] = {}  # queue id -> highest seq allocated
        self._next_queue_id = 1
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

    def _load_ids(
        self, queues: Iterable[tuple[int, str, str]], last_seq: dict[int, int], last_delayed: int = 0
    ) -> None:
        self._last_delayed = last_delayed
        self._queue_ids = {(vhost, name): qid for qid, vhost, name in queues}
        self._queue_keys = {qid: key for key, qid in self._queue_ids.items()}
        self._last_seq = {qid: last_seq.get(qid, 0) for qid in self._queue_keys}
        self._next_queue_id = max(self._queue_keys, default=0) + 1

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
                self._inserts, self._marks, self._touches = {}, {}, {}
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
        self._inserts = {k: i + n for k, i in self._inserts.items()}
        self._marks = {k: i + n for k, i in self._marks.items()}
        self._touches = {k: i + n for k, i in self._touches.items()}
        log.warning("store: the %d ops of the failed batch go first in the next one", n)

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

    # -- Store: definitions -------------------------------------------------------------------------
    def put_vhost(self, record: VHostRecord) -> None:
        self._add(s.PUT_VHOST, s.vhost_row(record))

    def put_policy(self, record: PolicyRecord) -> None:
        self._add(s.PUT_POLICY, s.policy_row(record))

    def delete_policy(self, vhost: str, name: str, operator: bool) -> None:
        self._add(s.DELETE_POLICY, (vhost, name, int(operator)))

    def put_limit(self, record: LimitRecord) -> None:
        self._add(s.PUT_LIMIT, s.limit_row(record))

    def delete_limit(self, kind: str, owner: str, name: str) -> None:
        self._add(s.DELETE_LIMIT, (kind, owner, name))

    def delete_vhost(self, name: str) -> None:
        """Delete the vhost with its permissions, exchanges, bindings, queues and messages."""
        self._add(s.DELETE_VHOST_PERMISSIONS, (name,))
        self._add(s.DELETE_VHOST_POLICIES, (name,))
        self._add(s.DELETE_OWNER_LIMITS, ("vhost", name))
        self._add(s.DELETE_VHOST_BINDINGS, (name,))
        self._add(s.DELETE_VHOST_EXCHANGES, (name,))
        for qid, (vhost, _) in list(self._queue_keys.items()):
            if vhost == name:
                self._forget_queue(qid)
                self._add(s.DELETE_MESSAGES, s.queue_range(qid))
        self._add(s.DELETE_VHOST_QUEUES, (name,))
        self._add(s.DELETE_VHOST_DELAYED, (name,))
        self._add(s.DELETE_VHOST_DEDUP, (name,))
        self._add(s.DELETE_VHOST, (name,))

    def put_user(self, record: UserRecord) -> None:
        self._add(s.PUT_USER, s.user_row(record))

    def delete_user(self, name: str) -> None:
        """Delete the user and its permissions."""
        self._add(s.DELETE_USER_PERMISSIONS, (name,))
        self._add(s.DELETE_OWNER_LIMITS, ("user", name))
        self._add(s.DELETE_USER, (name,))

    def put_permission(self, record: PermissionRecord) -> None:
        self._add(s.PUT_PERMISSION, s.permission_row(record))

    def delete_permission(self, user: str, vhost: str) -> None:
        self._add(s.DELETE_PERMISSION, (user, vhost))

    def put_exchange(self, record: ExchangeRecord) -> None:
        self._add(s.PUT_EXCHANGE, s.exchange_row(record))

    def delete_exchange(self, vhost: str, name: str) -> None:
        """Delete the exchange and the bindings from or to it."""
        self._add(s.DELETE_EXCHANGE_BINDINGS, (vhost, name, name))
        self._add(s.DELETE_EXCHANGE, (vhost, name))

    def put_queue(self, record: QueueRecord) -> int:
        """Insert or replace a durable queue; returns (and sets) ``record.id``.

        A queue keeps its id when redeclared (``record.id == 0`` and a known vhost/name). Giving
        a known name another id replaces the old queue: its messages are deleted.

        Raises:
            StoreError: all queue ids are used (restart: ids are compacted at open) or bad id.
        """
        key = (record.vhost, record.name)
        known = self._queue_ids.get(key)
        qid = record.id or known or self._next_queue_id
        if not 0 < qid <= s.MAX_QUEUE_ID:
            raise StoreError(f"queue id {qid} not in 1..{s.MAX_QUEUE_ID} (restart to compact queue ids)")
        if known is not None and known != qid:
            self._forget_queue(known)
            self._add(s.DELETE_MESSAGES, s.queue_range(known))
            self._add(s.DELETE_QUEUE, (known,))
        previous = self._queue_keys.get(qid)
        if previous is not None and previous != key:
            del self._queue_ids[previous]
        self._queue_ids[key] = qid
        self._queue_keys[qid] = key
        self._last_seq.setdefault(qid, 0)
        self._next_queue_id = max(self._next_queue_id, qid + 1)
        record.id = qid
        self._add(s.PUT_QUEUE, s.queue_row(record))
        return qid

    def _forget_queue(self, queue_id: int) -> None:
        key = self._queue_keys.pop(queue_id, None)
        if key is not None:
            del self._queue_ids[key]
        self._last_seq.pop(queue_id, None)

    def delete_queue(self, queue_id: int) -> None:
        """Delete the queue row, its messages and the bindings to it."""
        key = self._queue_keys.get(queue_id)
        self._forget_queue(queue_id)
        if key is not None:
            self._add(s.DELETE_QUEUE_BINDINGS, key)
        self._add(s.DELETE_MESSAGES, s.queue_range(queue_id))
        self._add(s.DELETE_QUEUE, (queue_id,))

    def touch_queue(self, queue_id: int, expires_at: int | None) -> None:
        """Record the queue's current x-expires deadline (coalesced per batch)."""
        index = self._touches.get(queue_id)
        if index is not None:
            self._cancel(index)
        if self._task is None:
            self._kick()
        self._touches[queue_id] = len(self._ops)
        self._ops.append((s.TOUCH_QUEUE, (expires_at, queue_id)))

    def put_binding(self, record: BindingRecord) -> None:
        self._add(s.PUT_BINDING, s.binding_row(record))

    def delete_binding(self, record: BindingRecord) -> None:
        self._add(s.DELETE_BINDING, s.binding_row(record))

    # -- Store: messages (the hot path) ---------------------------------------------------------
    def insert_message(self, record: MessageRecord) -> int:
        """Queue an insert; returns (and sets) ``record.id`` (and ``record.seq`` if it was raised).

        Raises:
            StoreError: unknown queue id (not put, or deleted), or the queue used all 2**44 seqs.
        """
        if self._task is None:
            self._kick()
        qid = record.queue_id
        last = self._last_seq.get(qid)
        if last is None:
            raise StoreError(f"insert_message: unknown queue id {qid} (put_queue first)")
        seq = record.seq
        if seq <= last:
            seq = last + 1
        if seq > s.SEQ_MASK:
            raise StoreError(f"queue id {qid} has used all {s.SEQ_MASK} message seqs")
        self._last_seq[qid] = record.seq = seq
        mid = record.id = (qid << s.SEQ_BITS) | seq
        ops = self._ops
        self._inserts[mid] = len(ops)
        keys = record.extra_keys
        delivered = record.delivered or record.delivery_count
        ops.append(
            (
                s.INSERT_MESSAGE,
                (
                    mid,
                    record.exchange,
                    record.routing_key,
                    record.props,
                    record.body,
                    record.enqueued_at,
                    record.deadline,
                    json.dumps(list(keys)) if keys else None,
                    record.delivery_count if delivered else None,
                ),
            )
        )
        return mid

    def delete_message(self, message_id: int) -> None:
        """Queue a delete (cancels a not-yet-committed insert instead)."""
        index = self._inserts.pop(message_id, None)
        if index is not None:
            self._cancel(index)
            return
        if self._marks:
            index = self._marks.pop(message_id, None)
            if index is not None:
                self._cancel(index)
        ops = self._ops
        last = ops[-1] if ops else None
        if last is not None:  # a run of ids (a queue drained in order) is one range delete: a drain
            statement, params = last  # outrunning the disk keeps one op per run, not one per message
            if statement == s.DELETE_MESSAGE and params[0] + 1 == message_id:
                ops[-1] = (s.DELETE_MESSAGES, (params[0], message_id))
                return
            if statement == s.DELETE_MESSAGES and params[1] + 1 == message_id:
                ops[-1] = (s.DELETE_MESSAGES, (params[0], message_id))
                return
        if self._task is None:
            self._kick()
        ops.append((s.DELETE_MESSAGE, (message_id,)))

    def mark_delivered(self, message_id: int, delivery_count: int) -> None:
        """Remember the message was delivered (recovered as redelivered); coalesced per batch."""
        ops = self._ops
        index = self._inserts.get(message_id)
        if index is not None:
            op = ops[index]
            assert op is not None
            ops[index] = (op[0], op[1][:8] + (delivery_count,))
            return
        index = self._marks.get(message_id)
        if index is not None:
            self._cancel(index)
        if self._task is None:
            self._kick()
        self._marks[message_id] = len(ops)
        ops.append((s.MARK_DELIVERED, (delivery_count, message_id)))

    def purge_queue(self, queue_id: int) -> None:
        """Delete every message of the queue."""
        self._add(s.DELETE_MESSAGES, s.queue_range(queue_id))

    # -- Store: delayed messages and deduplication caches (issue 19) -------------------------------
    def insert_delayed(self, record: DelayedRecord) -> int:
        """Queue the insert of a delayed message; returns (and sets) ``record.id`` (publish order)."""
        self._last_delayed += 1
        record.id = self._last_delayed
        self._add(s.INSERT_DELAYED, s.delayed_row(record))
        return record.id

    def delete_delayed(self, delayed_id: int) -> None:
        self._add(s.DELETE_DELAYED, (delayed_id,))

    def delete_delayed_exchange(self, vhost: str, exchange: str) -> None:
        self._add(s.DELETE_DELAYED_EXCHANGE, (vhost, exchange))

    def put_dedup(self, record: DedupRecord) -> None:
        self._add(s.PUT_DEDUP, s.dedup_row(record))

    def delete_dedup(self, vhost: str, kind: str, owner: str, key: bytes) -> None:
        self._add(s.DELETE_DEDUP, (vhost, kind, owner, bytes(key)))

    def delete_dedup_owner(self, vhost: str, kind: str, owner: str) -> None:
        self._add(s.DELETE_DEDUP_OWNER, (vhost, kind, owner))

    # -- Store: dead-letter move jobs (issue 38) ------------------------------------------------------
    def put_move_job(self, record: MoveJobRecord) -> None:
        """Write a job, and its ids when it selects by ids (once: updates leave them alone)."""
        self._add(s.PUT_MOVE_JOB, s.move_job_row(record))
        if record.ids is not None:
            self._add(s.PUT_MOVE_JOB_IDS, (record.id, record.ids))

    def update_move_job(self, record: MoveJobRecord) -> None:
        """Write a job's state and counters (a small row: the ids are a row of their own)."""
        self._add(s.UPDATE_MOVE_JOB, s.move_job_progress(record))

    def delete_move_job(self, job_id: int) -> None:
        self._add(s.DELETE_MOVE_JOB_IDS, (job_id,))
        self._add(s.DELETE_MOVE_JOB, (job_id,))

    # -- Store: reads -------------------------------------------------------------------------------
    async def load_definitions(self) -> Definitions:
        """Every committed vhost, user, permission, exchange, queue, binding, policy and limit (after
        the writes queued so far)."""
        await self._settle()
        return await self._sql(engine.read_definitions)

    async def iter_messages(self, queue_id: int, chunk: int = 10000) -> AsyncIterator[list[MessageRecord]]:
        """The queue's committed messages in seq order, ``chunk`` rows at a time.

        Each chunk is one keyset query (``id > last id``) on the queue's rowid range, so no
        statement stays open between chunks and writes may run in between.
        """
        await self._settle()
        low, high = s.queue_range(queue_id)
        after = low
        while True:
            records = await self._sql(engine.read_messages, queue_id, after, high, chunk)
            if records:
                yield records
            if len(records) < chunk:
                return
            after = records[-1].id

    async def iter_delayed(self, chunk: int = 10000) -> AsyncIterator[list[DelayedRecord]]:
        """Every committed delayed message in id order, ``chunk`` rows at a time (keyset queries)."""
        await self._settle()
        after = 0
        while True:
            records = await self._sql(engine.read_delayed, after, chunk)
            if records:
                yield records
            if len(records) < chunk:
                return
            after = records[-1].id

    async def load_dedup(self) -> list[DedupRecord]:
        """Every committed deduplication key, in the order they were remembered."""
        await self._settle()
        return await self._sql(engine.read_dedup)

    async def load_move_jobs(self) -> list[MoveJobRecord]:
        """Every committed dead-letter move job with its ids, in id order."""
        await self._settle()
        return await self._sql(engine.read_move_jobs)


def _fire(callback: CommitCallback, ok: bool) -> None:
    try:
        callback(ok)
    except Exception:
        log.exception("after_commit callback %r failed", callback)
