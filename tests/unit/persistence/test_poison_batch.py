"""One bad value in a busy batch: only its owner is refused, every other write commits (both stores).

A value SQLite cannot hold (an integer over 64 bits) reaching the store used to fail the whole batch,
which was retried at the front of every later one: every persistent publish of every client was
nacked until a restart. Now the batch is split and only the op that carries the value is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ottermq.persistence import MemoryStore, MessageRecord, PolicyRecord, QueueRecord, SQLiteStore

Factory = Callable[[], MemoryStore | SQLiteStore]


def message(queue_id: int, seq: int, **fields: Any) -> MessageRecord:
    fields.setdefault("deadline", None)
    return MessageRecord(queue_id, seq, "", "q", b"\x10\x00\x02", b"body", 1_700_000_000_000, **fields)


def test_a_poison_op_is_refused_alone_and_the_rest_commits(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        qid = store.put_queue(QueueRecord("/", "q"))
        await store.flush()
        outcomes: dict[int, bool] = {}
        for client in range(200):  # 200 publishers' confirms waiting on one batch
            deadline = 10**30 if client == 117 else None  # one poison value in the middle
            store.insert_message(message(qid, client + 1, deadline=deadline))
            store.after_commit(lambda ok, c=client: outcomes.__setitem__(c, ok))
        await store.flush()  # the store keeps working: a later flush succeeds
        assert len(outcomes) == 200
        assert outcomes[117] is False
        assert all(ok for c, ok in outcomes.items() if c != 117)
        stored = [m async for chunk in store.iter_messages(qid) for m in chunk]
        assert len(stored) == 199 and 118 not in {m.seq for m in stored}
        # later batches are not held up by the refused op (it is not retried)
        store.insert_message(message(qid, 1000))
        await store.flush()
        assert store.refused_ops == 1 and store.failed_batches == 0
        await store.close()

    asyncio.run(main())


def test_a_poison_definition_does_not_stop_other_writes(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        seen: list[bool] = []
        store.put_policy(PolicyRecord("/", "big", ".*", "all", 2**63, "{}", False))
        store.after_commit(seen.append)
        qid = store.put_queue(QueueRecord("/", "after"))
        store.after_commit(seen.append)
        await store.flush()
        assert seen == [False, True]
        defs = await store.load_definitions()
        assert [q.name for q in defs.queues] == ["after"] and defs.policies == []
        assert qid
        await store.close()

    asyncio.run(main())


def test_a_value_sqlite_cannot_bind_is_refused_alone(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        seen: list[bool] = []
        bad: Any = ["not", "a", "string"]  # no SQLite storage class: refused at bind time
        store.put_policy(PolicyRecord("/", "bad", ".*", "all", 1, bad, False))
        store.after_commit(seen.append)
        store.put_policy(PolicyRecord("/", "good", ".*", "all", 1, "{}", False))
        store.after_commit(seen.append)
        await store.flush()
        assert seen == [False, True] and store.refused_ops == 1
        assert [p.name for p in (await store.load_definitions()).policies] == ["good"]
        await store.close()

    asyncio.run(main())


def test_a_memory_store_keeping_no_messages_still_refuses_what_sqlite_cannot_hold() -> None:
    async def main() -> None:
        store = MemoryStore(keep_messages=False)
        qid = store.put_queue(QueueRecord("/", "q"))
        seen: list[bool] = []
        store.insert_message(message(qid, 1, deadline=2**64))
        store.after_commit(seen.append)
        store.insert_message(message(qid, 2))
        store.after_commit(seen.append)
        await store.flush()
        assert seen == [False, True] and store.refused_ops == 1
        assert [m async for chunk in store.iter_messages(qid) for m in chunk] == []

    asyncio.run(main())
