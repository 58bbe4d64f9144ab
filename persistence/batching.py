"""``BatchingStore``: the ids, coalescing, writes and reads every store shares, over the group commit
(``group_commit.py``: batches, callbacks, splitting a batch a value spoils, retrying one the disk failed).

Rules:
- Coalescing within the current (not yet committing) batch: deleting a message whose insert is
  pending cancels both; ``mark_delivered`` on a pending insert rewrites the insert;
  ``mark_delivered``/``touch_queue`` keep only the last op per id (moved to its latest position).
- Reads (``load_definitions``, ``iter_messages``, ``iter_delayed``, ``load_dedup``,
  ``load_move_jobs``) first wait for the writes queued before them, so a caller reads its own writes
  (what failed to commit is not there).
- Ids: queue ids from a counter (a redeclared name keeps its id); message id =
  ``(queue_id << SEQ_BITS) | seq`` where seq is the record's seq, or the queue's previous seq + 1
  when the record's is not above it (then ``record.seq`` is updated to match).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable

from . import engine
from . import schema as s
from .group_commit import GroupCommit
from .store import (
    BindingRecord,
    DedupRecord,
    Definitions,
    DelayedRecord,
    ExchangeRecord,
    LimitRecord,
    MessageRecord,
    MoveJobRecord,
    ParameterRecord,
    PermissionRecord,
    PolicyRecord,
    QueueRecord,
    StoreError,
    UserRecord,
    VHostRecord,
)

RETRY_MIN, RETRY_MAX = 0.05, 2.0  # pause before a failed batch is tried again (s)


class BatchingStore(GroupCommit):
    """The ids, coalescing, writes and reads of ``MemoryStore``, ``SQLiteStore`` and ``PostgresStore``
    over the group commit (``group_commit.GroupCommit``)."""

    def __init__(self) -> None:
        super().__init__()
        self._inserts: dict[int, int] = {}  # message id -> index of its pending insert
        self._marks: dict[int, int] = {}  # message id -> index of its pending mark_delivered
        self._touches: dict[int, int] = {}  # queue id -> index of its pending touch_queue
        self._queue_ids: dict[tuple[str, str], int] = {}
        self._last_delayed = 0  # highest delayed-message id handed out
        self._queue_keys: dict[int, tuple[str, str]] = {}
        self._last_seq: dict[int, int] = {}  # queue id -> highest seq allocated
        self._next_queue_id = 1

    # -- indexes into the current batch (coalescing) ------------------------------------------------
    def _batch_taken(self) -> None:
        self._inserts, self._marks, self._touches = {}, {}, {}

    def _batch_shifted(self, n: int) -> None:
        self._inserts = {k: i + n for k, i in self._inserts.items()}
        self._marks = {k: i + n for k, i in self._marks.items()}
        self._touches = {k: i + n for k, i in self._touches.items()}

    def _load_ids(
        self, queues: Iterable[tuple[int, str, str]], last_seq: dict[int, int], last_delayed: int = 0
    ) -> None:
        self._last_delayed = last_delayed
        self._queue_ids = {(vhost, name): qid for qid, vhost, name in queues}
        self._queue_keys = {qid: key for key, qid in self._queue_ids.items()}
        self._last_seq = {qid: last_seq.get(qid, 0) for qid in self._queue_keys}
        self._next_queue_id = max(self._queue_keys, default=0) + 1

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

    def put_parameter(self, record: ParameterRecord) -> None:
        self._add(s.PUT_PARAMETER, s.parameter_row(record))

    def delete_parameter(self, vhost: str, component: str, name: str) -> None:
        self._add(s.DELETE_PARAMETER, (vhost, component, name))

    def delete_vhost(self, name: str) -> None:
        """Delete the vhost with its permissions, exchanges, bindings, queues and messages."""
        self._add(s.DELETE_VHOST_PERMISSIONS, (name,))
        self._add(s.DELETE_VHOST_POLICIES, (name,))
        self._add(s.DELETE_OWNER_LIMITS, ("vhost", name))
        self._add(s.DELETE_VHOST_PARAMETERS, (name,))
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
