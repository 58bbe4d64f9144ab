"""The Store contract, run against SQLiteStore and MemoryStore (see conftest ``new_store``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ottermq.persistence import (
    BindingRecord,
    ExchangeRecord,
    LimitRecord,
    MemoryStore,
    MessageRecord,
    PermissionRecord,
    PolicyRecord,
    QueueRecord,
    SQLiteStore,
    StoreError,
    UserRecord,
    VHostRecord,
    engine,
)
from ottermq.persistence.batching import BatchingStore
from ottermq.persistence.store import DedupRecord, DelayedRecord, MoveJobRecord, ParameterRecord

Factory = Callable[[], MemoryStore | SQLiteStore]


def message(queue_id: int, seq: int, body: bytes = b"x" * 100, **fields: Any) -> MessageRecord:
    fields.setdefault("exchange", "amq.direct")
    fields.setdefault("routing_key", "rk")
    fields.setdefault("props", b"\x10\x00\x02")
    fields.setdefault("enqueued_at", 1_700_000_000_000)
    return MessageRecord(queue_id=queue_id, seq=seq, body=body, **fields)


async def messages(store: MemoryStore | SQLiteStore, queue_id: int, chunk: int = 100) -> list[MessageRecord]:
    return [m async for batch in store.iter_messages(queue_id, chunk) for m in batch]


def run(main: Callable[[], Any]) -> Any:
    return asyncio.run(main())


def test_definitions_round_trip_and_survive_reopen(new_store: Factory) -> None:
    vhosts = [VHostRecord("/", "default", ["x"]), VHostRecord("prod", "", [])]
    users = [UserRecord("guest", "c2FsdGhhc2g=", tags=["administrator"]), UserRecord("bob", "aGFzaA==")]
    permissions = [PermissionRecord("guest", "/"), PermissionRecord("bob", "prod", "^bob", "", ".*")]
    exchanges = [
        ExchangeRecord("/", "logs", "topic", auto_delete=True, internal=False),
        ExchangeRecord("prod", "dlx", "fanout", internal=True, arguments=b"\x00\x00\x00\x05\x01kt\x01"),
    ]
    bindings = [
        BindingRecord("/", "logs", "queue", "q1", "a.#"),
        BindingRecord("/", "logs", "exchange", "other", "b.*", b"\x00\x00\x00\x00"),
    ]

    async def write() -> list[QueueRecord]:
        store = new_store()
        await store.open()
        for v in vhosts:
            store.put_vhost(v)
        for u in users:
            store.put_user(u)
        for p in permissions:
            store.put_permission(p)
        for e in exchanges:
            store.put_exchange(e)
        queues = [
            QueueRecord("/", "q1", arguments=b"\x00\x00\x00\x0dx-max-lengthI\x00\x00\x00\x05"),
            QueueRecord("prod", "q2", auto_delete=True, expires_at=1_700_000_000_123),
        ]
        ids = [store.put_queue(q) for q in queues]
        assert ids == [q.id for q in queues] and len(set(ids)) == 2 and 0 not in ids
        for b in bindings:
            store.put_binding(b)
        await store.close()
        return queues

    async def read() -> Any:
        store = new_store()
        await store.open()
        try:
            return await store.load_definitions()
        finally:
            await store.close()

    queues = run(write)
    loaded = run(read)
    key = repr
    assert sorted(loaded.vhosts, key=key) == sorted(vhosts, key=key)
    assert sorted(loaded.users, key=key) == sorted(users, key=key)
    assert sorted(loaded.permissions, key=key) == sorted(permissions, key=key)
    assert sorted(loaded.exchanges, key=key) == sorted(exchanges, key=key)
    assert loaded.queues == sorted(queues, key=lambda q: q.id)
    assert sorted(loaded.bindings, key=key) == sorted(bindings, key=key)


def test_puts_replace_and_deletes_cascade(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        for vhost in ("/", "other"):
            store.put_vhost(VHostRecord(vhost))
            store.put_permission(PermissionRecord("guest", vhost))
            store.put_exchange(ExchangeRecord(vhost, "ex", "direct"))
            store.put_binding(BindingRecord(vhost, "ex", "queue", "q", "k"))
        store.put_user(UserRecord("guest", "h1"))
        store.put_user(UserRecord("guest", "h2"))  # replaces
        store.put_exchange(ExchangeRecord("/", "ex", "fanout"))  # replaces
        store.put_exchange(ExchangeRecord("/", "ex2", "direct"))
        store.put_binding(BindingRecord("/", "ex2", "exchange", "ex", "k"))  # to ex
        store.put_binding(BindingRecord("/", "ex2", "exchange", "ex3", "k"))  # unrelated to ex
        q = store.put_queue(QueueRecord("/", "q"))
        store.insert_message(message(q, 1))
        await store.flush()
        d = await store.load_definitions()
        assert [u.password_hash for u in d.users] == ["h2"]
        assert [(e.vhost, e.name, e.type) for e in d.exchanges] == [
            ("/", "ex", "fanout"),
            ("/", "ex2", "direct"),
            ("other", "ex", "direct"),
        ]

        store.delete_exchange("/", "ex")  # bindings from and to it go too
        await store.flush()
        d = await store.load_definitions()
        assert sorted((b.vhost, b.source, b.destination) for b in d.bindings) == [
            ("/", "ex2", "ex3"),
            ("other", "ex", "q"),
        ]

        store.delete_queue(q)  # its bindings and messages go too
        await store.flush()
        assert await messages(store, q) == []
        assert (await store.load_definitions()).queues == []

        store.delete_user("guest")  # its permissions go too
        store.delete_vhost("other")  # everything in it goes
        await store.flush()
        d = await store.load_definitions()
        assert d.users == [] and d.permissions == []
        assert [v.name for v in d.vhosts] == ["/"]
        assert [(e.vhost, e.name) for e in d.exchanges] == [("/", "ex2")]
        assert [(b.vhost, b.source) for b in d.bindings] == [("/", "ex2")]

        store.put_permission(PermissionRecord("bob", "/"))
        store.delete_permission("bob", "/")
        store.delete_binding(BindingRecord("/", "ex2", "exchange", "ex3", "k"))
        await store.flush()
        d = await store.load_definitions()
        assert d.permissions == [] and d.bindings == []
        await store.close()

    run(main)


def test_queue_ids_kept_on_redeclare_never_reused(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        a = store.put_queue(QueueRecord("/", "a"))
        assert store.put_queue(QueueRecord("/", "a", auto_delete=True)) == a  # redeclare keeps id
        b = store.put_queue(QueueRecord("/", "b"))
        store.insert_message(message(a, 1))
        store.delete_queue(a)
        a2 = store.put_queue(QueueRecord("/", "a"))  # same batch: deleted, then declared anew
        assert len({a, b, a2}) == 3
        store.insert_message(message(a2, 1, body=b"new"))
        await store.flush()
        assert [m.body for m in await messages(store, a2)] == [b"new"]
        assert await messages(store, a) == []
        d = await store.load_definitions()
        assert [(q.name, q.id) for q in d.queues] == [("b", b), ("a", a2)]
        await store.close()

    run(main)


def test_message_round_trip_every_field(new_store: Factory) -> None:
    async def main() -> list[MessageRecord]:
        store = new_store()
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        records = [
            message(q, 1),
            message(q, 2, body=b"", exchange="", routing_key="ключ", props=b"\x00\x00"),
            message(
                q, 3, deadline=1_700_000_060_000, extra_keys=("cc1", "bcc"), delivered=True, delivery_count=3
            ),
            message(q, 4, body=bytes(range(256)) * 40, delivered=True),
        ]
        for r in records:
            r.id = store.insert_message(r)
        await store.close()
        store = new_store()
        await store.open()
        got = await messages(store, q)
        await store.close()
        assert got == records
        return got

    got = run(main)
    assert got[2].extra_keys == ("cc1", "bcc") and got[0].extra_keys == ()
    assert got[3].delivered is True and got[0].delivered is False


def test_large_bodies_are_written_in_pieces_and_read_back_whole(
    new_store: Factory, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body over ``engine.LARGE_BLOB`` (lowered here) goes in as a zeroblob written piece by piece
    (the sqlite3 bind would copy it whole holding the GIL): messages and delayed messages, in one
    batch with small ones, read back byte for byte; an insert and its delete in one batch cancel."""
    monkeypatch.setattr(engine, "LARGE_BLOB", 1000)
    monkeypatch.setattr(engine, "BLOB_CHUNK", 300)
    pieces: list[int] = []
    real = engine._insert_large

    def counting(conn: Any, statement: str, params: tuple[Any, ...]) -> None:
        pieces.append(len(params[4 if statement.startswith("INSERT INTO messages") else 7]))
        real(conn, statement, params)

    monkeypatch.setattr(engine, "_insert_large", counting)
    big = bytes(range(256)) * 9 + b"end"  # 2307 octets: eight pieces of 300 and one of 7

    async def main() -> tuple[list[MessageRecord], list[DelayedRecord]]:
        store = new_store()
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        records = [message(q, 1), message(q, 2, body=big), message(q, 3, body=b"y" * 1000)]
        for r in records:
            r.id = store.insert_message(r)
        gone = message(q, 4, body=big)
        store.delete_message(store.insert_message(gone))
        store.insert_delayed(DelayedRecord("/", "dx", 5, 1, "k", b"\x00\x00", big))
        await store.close()
        store = new_store()
        await store.open()
        got = await messages(store, q)
        delayed = [r async for chunk in store.iter_delayed() for r in chunk]
        await store.close()
        assert got == records
        return got, delayed

    got, delayed = run(main)
    assert got[1].body == big and delayed[0].body == big
    if kind != "postgresql":  # SQLite's blob I/O: the message and the delayed one, the cancelled pair not
        assert pieces == [len(big), len(big)]


def test_messages_in_seq_order_per_queue(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        q1 = store.put_queue(QueueRecord("/", "q1"))
        q2 = store.put_queue(QueueRecord("/", "q2"))
        for seq in (1, 2, 5, 9, 10, 100, 101):
            store.insert_message(message(q1, seq, body=b"a%d" % seq))
            store.insert_message(message(q2, seq * 2, body=b"b%d" % seq))
        await store.flush()
        first = await messages(store, q1)
        assert [m.seq for m in first] == [1, 2, 5, 9, 10, 100, 101]
        assert all(m.queue_id == q1 and m.body == b"a%d" % m.seq for m in first)
        assert [m.seq for m in await messages(store, q2)] == [2, 4, 10, 18, 20, 200, 202]
        await store.close()

    run(main)


def test_seq_not_above_the_last_is_stored_after_it(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        store.insert_message(message(q, 5))
        late = message(q, 3)
        store.insert_message(late)
        assert late.seq == 6  # documented: ids are (queue, seq) and must increase per queue
        await store.flush()
        assert [m.seq for m in await messages(store, q)] == [5, 6]
        await store.close()
        store = new_store()
        await store.open()  # after a restart the queue continues after its highest stored seq
        again = message(q, 1)
        store.insert_message(again)
        assert again.seq == 7
        await store.close()

    run(main)


@pytest.mark.parametrize(("count", "chunk", "sizes"), [(10, 3, [3, 3, 3, 1]), (10, 5, [5, 5]), (0, 4, [])])
def test_iter_messages_chunks(new_store: Factory, count: int, chunk: int, sizes: list[int]) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        other = store.put_queue(QueueRecord("/", "other"))
        for seq in range(1, count + 1):
            store.insert_message(message(q, seq))
            store.insert_message(message(other, seq))
        await store.flush()
        batches = [batch async for batch in store.iter_messages(q, chunk)]
        assert [len(b) for b in batches] == sizes
        assert [m.seq for b in batches for m in b] == list(range(1, count + 1))
        await store.close()

    run(main)


def test_insert_then_delete_in_one_batch_cancels_both(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        await store.flush()
        batches = store.batches
        ids = [store.insert_message(message(q, seq)) for seq in (1, 2, 3)]
        store.mark_delivered(ids[0], 1)  # folded into the pending insert
        assert store.pending == 3
        oks: list[bool] = []
        store.after_commit(oks.append)
        store.delete_message(ids[0])
        store.delete_message(ids[1])
        assert store.pending == 1
        await store.flush()
        assert oks == [True]
        assert store.batches == batches + 1
        assert [m.id for m in await messages(store, q)] == [ids[2]]
        for _ in ids:
            store.delete_message(store.insert_message(message(q, 0)))
        assert store.pending == 0
        await store.flush()
        assert store.batches == batches + 1  # nothing left to write: no transaction at all
        await store.close()

    run(main)


def test_mark_delivered_and_touch_queue_coalesce(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        q = store.put_queue(QueueRecord("/", "q", expires_at=1))
        a = store.insert_message(message(q, 1))
        b = store.insert_message(message(q, 2))
        store.mark_delivered(b, 0)  # pending insert: rewritten in place
        assert store.pending == 3
        await store.flush()
        store.mark_delivered(a, 1)
        store.touch_queue(q, 10)
        store.mark_delivered(a, 2)
        store.touch_queue(q, None)
        store.touch_queue(q, 30)
        assert store.pending == 2
        await store.flush()
        got = await messages(store, q)
        assert [(m.delivered, m.delivery_count) for m in got] == [(True, 2), (True, 0)]
        assert [x.expires_at for x in (await store.load_definitions()).queues] == [30]
        store.mark_delivered(a, 3)
        store.delete_message(a)  # the pending mark is dropped with it
        assert store.pending == 1
        await store.flush()
        assert [m.id for m in await messages(store, q)] == [b]
        await store.close()

    run(main)


def test_purge_queue(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        keep = store.put_queue(QueueRecord("/", "keep"))
        for seq in range(1, 4):
            store.insert_message(message(q, seq))
            store.insert_message(message(keep, seq))
        await store.flush()
        store.insert_message(message(q, 4))  # pending: purged in the same batch
        store.purge_queue(q)
        store.insert_message(message(q, 5))  # after the purge: kept
        await store.flush()
        assert [m.seq for m in await messages(store, q)] == [5]
        assert len(await messages(store, keep)) == 3
        await store.close()

    run(main)


def boom(ok: bool) -> None:
    raise RuntimeError("callback bug")


def test_callbacks_fire_in_order_after_their_batch(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        events: list[tuple[str, bool]] = []
        store.after_commit(lambda ok: events.append(("idle", ok)))
        assert events == []  # never synchronously
        await asyncio.sleep(0)
        assert events == [("idle", True)]
        q = store.put_queue(QueueRecord("/", "q"))
        store.after_commit(lambda ok: events.append(("declared", ok)))
        store.insert_message(message(q, 1))
        store.after_commit(lambda ok: events.append(("published", ok)))
        store.after_commit(boom)  # a failing callback is logged, the others still run
        store.after_commit(lambda ok: events.append(("last", ok)))
        await store.flush()
        assert events[1:] == [("declared", True), ("published", True), ("last", True)]
        await store.close()

    run(main)


def test_callback_while_a_batch_is_in_flight_waits_for_it(new_store: Factory, kind: str) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        events: list[str] = []
        store.after_commit(lambda ok: events.append("first"))
        await asyncio.sleep(0)  # the commit task starts
        if kind != "memory":
            assert store.pending == 1 and store._inflight == 1  # committing on a thread or the server
        store.after_commit(lambda ok: events.append(f"second {store.batches}"))
        store.insert_message(message(q, 1))
        store.after_commit(lambda ok: events.append(f"third {store.batches}"))
        await store.flush()
        assert events == ["first", "second 1", "third 2"]
        await store.close()

    run(main)


def test_failed_batch_reports_false_and_is_retried_first_in_the_next(
    new_store: Factory,
    fail_next_batch: Callable[[BatchingStore], None],
    caplog: pytest.LogCaptureFixture,
    kind: str,
) -> None:
    if kind == "postgresql":
        pytest.skip("PostgreSQL's confirms wait through an outage instead (test_postgres_outage.py)")

    async def main() -> None:
        store = new_store()
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        await store.flush()
        fail_next_batch(store)
        oks: list[bool] = []
        retried = store.insert_message(message(q, 1))
        store.after_commit(oks.append)
        with pytest.raises(StoreError):
            await store.flush()
        assert oks == [False] and store.failed_batches == 1
        assert store.pending == 1  # the failed insert waits for the retry
        kept = store.insert_message(message(q, 2))
        store.after_commit(oks.append)
        await store.flush()
        assert oks == [False, True]
        assert [m.id for m in await messages(store, q)] == [retried, kept]
        await store.close()

    with caplog.at_level(logging.ERROR):
        run(main)
    assert any("failed" in r.getMessage() for r in caplog.records)


def test_a_failed_insert_taken_back_by_a_delete_is_never_written(
    new_store: Factory, fail_next_batch: Callable[[BatchingStore], None], kind: str
) -> None:
    if kind == "postgresql":
        pytest.skip("PostgreSQL's confirms wait through an outage, nothing nacked (test_postgres_outage.py)")

    async def main() -> None:
        store = new_store()
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        await store.flush()
        fail_next_batch(store)
        nacked = store.insert_message(message(q, 1))
        with pytest.raises(StoreError):
            await store.flush()
        store.delete_message(nacked)  # what Queue.withdraw does after a nack
        await store.flush()
        assert await messages(store, q) == []
        await store.close()

    run(main)


def test_a_batch_failing_while_closing_is_given_up(
    new_store: Factory, fail_next_batch: Callable[[BatchingStore], None], kind: str
) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        await store.flush()
        fail_next_batch(store)
        store.insert_message(message(q, 1))
        await store.close()  # returns: the failed batch is not retried forever
        if kind == "memory":
            await store.open()
            assert await messages(store, q) == []
            await store.close()

    run(main)


def test_writes_need_an_open_store(new_store: Factory, kind: str) -> None:
    async def main() -> None:
        store = new_store()
        if kind != "memory":
            with pytest.raises(StoreError, match="not open"):
                store.put_vhost(VHostRecord("/"))
        await store.open()
        with pytest.raises(StoreError, match="unknown queue id"):
            store.insert_message(message(42, 1))
        await store.close()
        with pytest.raises(StoreError, match="closed|not open"):
            store.put_vhost(VHostRecord("/"))

    run(main)


def test_stats_count_messages(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        for seq in range(1, 6):
            store.insert_message(message(q, seq))
        assert (await store.stats())["pending"] == 6
        await store.flush()
        stats = await store.stats()
        assert stats["messages"] == 5 and stats["queues"] == 1 and stats["pending"] == 0
        assert stats["bytes_on_disk"] >= 0 and stats["batches"] >= 1
        await store.close()

    run(main)


def test_reads_wait_for_queued_writes(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        store.put_vhost(VHostRecord("/"))
        q = store.put_queue(QueueRecord("/", "q"))
        store.insert_message(message(q, 1))
        assert [v.name for v in (await store.load_definitions()).vhosts] == ["/"]
        store.insert_message(message(q, 2))
        assert [m.seq for m in await messages(store, q)] == [1, 2]
        await store.close()

    run(main)


def test_memory_store_without_messages_and_without_open() -> None:
    async def main() -> None:
        store = MemoryStore(keep_messages=False)  # persistence off: open() is optional
        q = store.put_queue(QueueRecord("/", "q"))
        mid = store.insert_message(message(q, 1))
        oks: list[bool] = []
        store.after_commit(oks.append)
        await store.flush()
        assert oks == [True] and mid
        assert await messages(store, q) == []
        assert [x.name for x in (await store.load_definitions()).queues] == ["q"]

    run(main)


def test_the_memory_store_runs_the_sqlite_stores_schema(tmp_path: Path) -> None:
    """One implementation of the SQL: the in-memory database has the file's tables, indexes and version."""
    query = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"

    async def main() -> None:
        disk = SQLiteStore(tmp_path / "ottermq.db")
        await disk.open()
        conn = disk._connection()
        on_disk = await disk._call(lambda: conn.execute(query).fetchall())
        version = await disk._call(lambda: conn.execute("PRAGMA user_version").fetchone())
        await disk.close()
        memory = MemoryStore()
        assert await memory._sql(lambda c: c.execute(query).fetchall()) == on_disk
        assert await memory._sql(lambda c: c.execute("PRAGMA user_version").fetchone()) == version

    run(main)


def test_policies_round_trip_replace_delete_and_go_with_their_vhost(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        for vhost in ("/", "other"):
            store.put_vhost(VHostRecord(vhost))
            store.put_policy(PolicyRecord(vhost, "ttl", "^q", "queues", 1, '{"message-ttl": 5}'))
        store.put_policy(PolicyRecord("/", "ttl", "^q", "queues", 1, '{"max-length": 5}', operator=True))
        store.put_policy(PolicyRecord("/", "ttl", "^r", "all", 2, '{"message-ttl": 9}'))  # replaces
        await store.flush()
        d = await store.load_definitions()
        assert [(p.vhost, p.name, p.operator, p.pattern, p.priority) for p in d.policies] == [
            ("/", "ttl", False, "^r", 2),
            ("/", "ttl", True, "^q", 1),
            ("other", "ttl", False, "^q", 1),
        ]
        store.delete_policy("/", "ttl", True)
        store.delete_vhost("other")
        await store.flush()
        d = await store.load_definitions()
        left = [(p.vhost, p.operator, p.definition) for p in d.policies]
        assert left == [("/", False, '{"message-ttl": 9}')]
        await store.close()

    run(main)


def test_limits_round_trip_replace_delete_and_go_with_their_owner(new_store: Factory) -> None:
    async def main() -> None:
        store = new_store()
        await store.open()
        store.put_vhost(VHostRecord("v"))
        store.put_user(UserRecord("u", ""))
        store.put_limit(LimitRecord("vhost", "v", "max-queues", 5))
        store.put_limit(LimitRecord("vhost", "v", "max-queues", 7))  # replaces
        store.put_limit(LimitRecord("vhost", "v", "max-connections", 2))
        store.put_limit(LimitRecord("user", "u", "max-channels", 3))
        await store.flush()
        d = await store.load_definitions()
        assert [(x.kind, x.owner, x.name, x.value) for x in d.limits] == [
            ("user", "u", "max-channels", 3),
            ("vhost", "v", "max-connections", 2),
            ("vhost", "v", "max-queues", 7),
        ]
        store.delete_limit("vhost", "v", "max-connections")
        store.delete_user("u")
        await store.flush()
        assert [(x.owner, x.name) for x in (await store.load_definitions()).limits] == [("v", "max-queues")]
        store.delete_vhost("v")
        await store.flush()
        assert (await store.load_definitions()).limits == []
        await store.close()

    run(main)


def test_parameters_round_trip_replace_delete_and_go_with_their_vhost(new_store: Factory) -> None:
    """Issue 42: runtime parameters (a shovel's JSON value) kept across reopen, replaced by name,
    deleted one by one and with their vhost."""

    async def main() -> None:
        store = new_store()
        await store.open()
        store.put_vhost(VHostRecord("v"))
        store.put_vhost(VHostRecord("w"))
        store.put_parameter(ParameterRecord("v", "shovel", "a", '{"src-uri":"amqp://"}'))
        store.put_parameter(ParameterRecord("v", "shovel", "a", '{"src-uri":"amqp://h"}'))  # replaces
        store.put_parameter(ParameterRecord("v", "shovel", "b", "{}"))
        store.put_parameter(ParameterRecord("w", "shovel", "a", '{"\u00e9": "\u0000"}'))
        await store.flush()
        d = await store.load_definitions()
        assert [(p.vhost, p.component, p.name, p.value) for p in d.parameters] == [
            ("v", "shovel", "a", '{"src-uri":"amqp://h"}'),
            ("v", "shovel", "b", "{}"),
            ("w", "shovel", "a", '{"\u00e9": "\u0000"}'),
        ]
        store.delete_parameter("v", "shovel", "b")
        store.delete_vhost("w")
        await store.flush()
        assert [(p.vhost, p.name) for p in (await store.load_definitions()).parameters] == [("v", "a")]
        await store.close()

    run(main)


def test_delayed_messages_and_dedup_keys_round_trip(new_store: Factory) -> None:
    """Issue 19: delayed messages (ids in publish order, kept across reopen, deleted one by one, by
    exchange and with their vhost) and deduplication keys (oldest first; a re-put key moves last)."""

    async def write() -> list[int]:
        store = new_store()
        await store.open()
        ids = [
            store.insert_delayed(DelayedRecord("/", "dx", 1000 + i, 500, "k", b"\x00\x00", b"m%d" % i))
            for i in range(4)
        ]
        store.insert_delayed(DelayedRecord("/", "other", 5, 1, "k", b"\x00\x00", b"o", ("cc",)))
        store.insert_delayed(DelayedRecord("gone", "dx", 5, 1, "k", b"\x00\x00", b"g"))
        store.delete_delayed(ids[1])
        store.delete_delayed_exchange("/", "other")
        store.delete_vhost("gone")
        for key in (b"Sa", b"Sb", b"Sc"):
            store.put_dedup(DedupRecord("/", "queue", "q", key, None))
        store.put_dedup(DedupRecord("/", "queue", "q", b"Sa", 99))  # remembered again: now newest
        store.put_dedup(DedupRecord("/", "exchange", "x", b"Sa", None))
        store.delete_dedup("/", "queue", "q", b"Sb")
        store.put_dedup(DedupRecord("/", "exchange", "y", b"Sz", None))
        store.delete_dedup_owner("/", "exchange", "y")
        await store.close()
        return ids

    async def read() -> tuple[list[Any], list[Any], int]:
        store = new_store()
        await store.open()
        try:
            delayed = [r async for chunk in store.iter_delayed(chunk=2) for r in chunk]
            dedup = await store.load_dedup()
            next_id = store.insert_delayed(DelayedRecord("/", "dx", 1, 1, "k", b"\x00\x00", b"new"))
            return delayed, dedup, next_id
        finally:
            await store.close()

    ids = run(write)
    delayed, dedup, next_id = run(read)
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert [(r.id, r.body, r.due, r.delay) for r in delayed] == [
        (ids[0], b"m0", 1000, 500),
        (ids[2], b"m2", 1002, 500),
        (ids[3], b"m3", 1003, 500),
    ]
    assert next_id > max(r.id for r in delayed)  # after a reopen, new ids follow every stored one
    assert [(r.kind, r.owner, r.key, r.expires_at) for r in dedup] == [
        ("queue", "q", b"Sc", None),
        ("queue", "q", b"Sa", 99),
        ("exchange", "x", b"Sa", None),
    ]


def test_text_holds_the_nul_character_and_every_other(new_store: Factory) -> None:
    """SQLite's text holds NUL; PostgreSQL's does not, so the PostgreSQL store escapes it (and its escape)."""
    names = ["a\x00b", "\x00", "\uffff0", "\uffff\x00\uffff", "\\0", "plain"]

    async def write() -> None:
        store = new_store()
        await store.open()
        for name in names:
            store.put_vhost(VHostRecord(name, name, [name]))
            q = store.put_queue(QueueRecord(name, name))
            store.insert_message(message(q, 1, exchange=name, routing_key=name, extra_keys=(name,)))
            store.put_binding(BindingRecord(name, name, "queue", name, name))
        await store.flush()
        await store.close()

    async def read() -> None:
        store = new_store()
        await store.open()
        defs = await store.load_definitions()
        assert sorted(v.name for v in defs.vhosts) == sorted(names)
        assert all(v.description == v.name and v.tags == [v.name] for v in defs.vhosts)
        assert sorted((q.vhost, q.name) for q in defs.queues) == sorted((n, n) for n in names)
        assert sorted(b.routing_key for b in defs.bindings) == sorted(names)
        for q in defs.queues:
            [m] = await messages(store, q.id)
            assert (m.exchange, m.routing_key, m.extra_keys) == (q.name, q.name, (q.name,))
        store.delete_binding(BindingRecord("a\x00b", "a\x00b", "queue", "a\x00b", "a\x00b"))
        store.delete_vhost("\x00")
        await store.flush()
        defs = await store.load_definitions()
        assert "\x00" not in {v.name for v in defs.vhosts} and len(defs.bindings) == len(names) - 2
        await store.close()

    run(write)
    run(read)


def test_move_jobs_round_trip_update_in_place_and_delete(new_store: Factory) -> None:
    """Dead-letter move jobs (issue 38): a job is written once with its ids, then only its progress row
    is updated; names with NUL survive (PostgreSQL escapes them)."""
    ids = b"".join(i.to_bytes(8, "big") for i in (3, 5, 2**62))
    first = MoveJobRecord(7, "v\x00", "dlq", '{"all": false}', "running", started=1_700_000_000_000, ids=ids)
    second = MoveJobRecord(9, "/", "q\x00", '{"all": true}', "paused", 4, 1, 2, 1, 0, None, 5)

    async def write() -> None:
        store = new_store()
        await store.open()
        store.put_move_job(first)
        store.put_move_job(second)
        first.state, first.moved, first.refused = "done", 2, 1
        first.error, first.finished = "store\x00failed", 1_700_000_000_500
        store.update_move_job(first)
        await store.flush()
        await store.close()

    async def read() -> None:
        store = new_store()
        await store.open()
        assert await store.load_move_jobs() == [first, second]
        store.delete_move_job(7)
        second.moved = 3
        store.update_move_job(second)
        assert await store.load_move_jobs() == [second]
        await store.close()

    run(write)
    run(read)


def test_a_run_of_deletes_is_one_range_and_deletes_exactly_those(new_store: Factory) -> None:
    """A queue drained in order queues one op per run of ids, not one per message (a drain that
    outruns the disk must not hold millions of pending deletes)."""

    async def main() -> tuple[list[int], int]:
        store = new_store()
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        ids = [store.insert_message(message(q, seq)) for seq in range(1, 21)]
        await store.flush()
        for i in (*range(0, 10), *range(11, 15), 16, 17):  # runs 1-10, 12-15, 17-18; 11, 16, 19, 20 stay
            store.delete_message(ids[i])
        pending = store.pending
        await store.close()
        store = new_store()
        await store.open()
        left = [m.seq for m in await messages(store, q)]
        await store.close()
        return left, pending

    left, pending = run(main)
    assert left == [11, 16, 19, 20]
    assert pending == 3
