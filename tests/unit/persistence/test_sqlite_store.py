"""SQLiteStore specifics: file checks, schema versions, crash consistency, disk full, batching on disk."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ottermq.persistence.engine as engine
import ottermq.persistence.schema as schema
import ottermq.persistence.sqlite as sqlite_module
import ottermq.persistence.sqlite_schema as sqlite_schema
import pytest
from ottermq.persistence import MessageRecord, QueueRecord, SQLiteStore, StoreError, VHostRecord
from ottermq.persistence.store import MoveJobRecord


def message(queue_id: int, seq: int, body: bytes = b"x" * 100, **fields: Any) -> MessageRecord:
    fields.setdefault("exchange", "")
    fields.setdefault("routing_key", "rk")
    fields.setdefault("props", b"\x10\x00\x02")
    fields.setdefault("enqueued_at", 1_700_000_000_000)
    return MessageRecord(queue_id=queue_id, seq=seq, body=body, **fields)


async def messages(store: SQLiteStore, queue_id: int) -> list[MessageRecord]:
    return [m async for batch in store.iter_messages(queue_id) for m in batch]


def run(main: Callable[[], Any]) -> Any:
    return asyncio.run(main())


async def sql(store: SQLiteStore, statement: str) -> list[Any]:
    """Run a statement on the store's own connection (worker thread)."""
    conn = store._connection()
    return await store._call(lambda: conn.execute(statement).fetchall())


def make_db(path: Path, queues: int = 1, per_queue: int = 0) -> list[int]:
    """A closed store file with ``queues`` queues of ``per_queue`` messages; returns the queue ids."""

    async def main() -> list[int]:
        store = SQLiteStore(path)
        await store.open()
        ids = [store.put_queue(QueueRecord("/", f"q{i}")) for i in range(queues)]
        for q in ids:
            for seq in range(1, per_queue + 1):
                store.insert_message(message(q, seq, body=b"%d" % seq))
        await store.close()
        return ids

    return list(run(main))


def open_fails(path: Path, match: str) -> StoreError:
    async def main() -> None:
        await SQLiteStore(path).open()

    with pytest.raises(StoreError, match=match) as info:
        run(main)
    return info.value


# -- the file -----------------------------------------------------------------------------------
def test_new_file_uses_wal_and_the_sync_setting(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path, synchronous="normal")  # a directory: ottermq.db inside
        await store.open()
        assert store.path == tmp_path / "ottermq.db"
        assert await sql(store, "PRAGMA journal_mode") == [("wal",)]
        assert await sql(store, "PRAGMA synchronous") == [(1,)]
        assert await sql(store, "PRAGMA user_version") == [(sqlite_schema.SCHEMA_VERSION,)]
        assert await sql(store, "PRAGMA auto_vacuum") == [(2,)]  # incremental
        await store.close()
        store = SQLiteStore(tmp_path / "ottermq.db")
        await store.open()
        assert await sql(store, "PRAGMA synchronous") == [(2,)]  # FULL by default
        await store.close()

    run(main)
    with pytest.raises(ValueError):
        SQLiteStore(tmp_path, synchronous="OFF")


def test_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "ottermq.db"
    make_db(path, per_queue=3)
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {sqlite_schema.SCHEMA_VERSION + 1}")
    conn.close()
    before = path.read_bytes()
    error = open_fails(path, "newer OtterMQ")
    assert str(error) == (
        f"data dir {path} was written by a newer OtterMQ (schema {sqlite_schema.SCHEMA_VERSION + 1}, "
        f"this version understands up to {sqlite_schema.SCHEMA_VERSION}); refusing to open it"
    )
    assert path.read_bytes() == before


def test_garbage_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "ottermq.db"
    garbage = b"this is not a database\n" * 500
    path.write_bytes(garbage)
    error = open_fails(path, "corrupt or unreadable")
    assert str(path) in str(error)
    assert path.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ottermq.db"]


def test_corrupt_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "ottermq.db"
    make_db(path, per_queue=300)
    data = bytearray(path.read_bytes())
    page = 4096
    data[3 * page : 6 * page] = os.urandom(3 * page)  # damage b-tree pages, keep the header
    path.write_bytes(bytes(data))
    error = open_fails(path, "corrupt or unreadable")
    assert str(path) in str(error)
    assert path.read_bytes() == bytes(data)


def test_another_programs_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    conn.close()
    open_fails(path, "another program")


def test_second_store_on_the_same_file_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        first = SQLiteStore(tmp_path / "ottermq.db")
        await first.open()
        with pytest.raises(StoreError, match="in use"):
            await SQLiteStore(tmp_path / "ottermq.db").open()
        await first.close()
        second = SQLiteStore(tmp_path / "ottermq.db")
        await second.open()
        await second.close()

    run(main)


# -- schema versions -------------------------------------------------------------------------------
def test_migration_to_a_next_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ottermq.db"
    (q,) = make_db(path, per_queue=2)

    def to_next(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE queues ADD COLUMN note TEXT")

    following = sqlite_schema.SCHEMA_VERSION + 1
    with monkeypatch.context() as m:
        m.setattr(sqlite_schema, "SCHEMA_VERSION", following)
        m.setitem(sqlite_schema.MIGRATIONS, following, to_next)

        async def main() -> None:
            store = SQLiteStore(path)
            await store.open()
            assert await sql(store, "PRAGMA user_version") == [(following,)]
            assert await sql(store, "SELECT note FROM queues") == [(None,)]
            assert [m.body for m in await messages(store, q)] == [b"1", b"2"]
            await store.close()

        run(main)
    open_fails(path, "newer OtterMQ")  # and the real version 1 refuses it


def test_a_schema_4_file_gets_the_move_job_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Schema 5 (issue 38): dead-letter move jobs move from a JSON file into the store."""
    path = tmp_path / "ottermq.db"
    with monkeypatch.context() as m:
        m.setattr(sqlite_schema, "SCHEMA_VERSION", 4)
        (q,) = make_db(path, per_queue=1)

    async def main() -> None:
        store = SQLiteStore(path)
        await store.open()
        assert await sql(store, "PRAGMA user_version") == [(sqlite_schema.SCHEMA_VERSION,)]
        assert [m.body for m in await messages(store, q)] == [b"1"]
        store.put_move_job(MoveJobRecord(1, "/", "dlq", "{}", "running", ids=b"\x00" * 8))
        assert [j.ids for j in await store.load_move_jobs()] == [b"\x00" * 8]
        await store.close()

    run(main)


def test_queue_ids_are_compacted_at_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ottermq.db"
    ids = make_db(path, queues=6, per_queue=3)
    monkeypatch.setattr(schema, "COMPACT_QUEUE_IDS_ABOVE", 3)

    async def main() -> None:
        store = SQLiteStore(path)
        await store.open()
        for q in ids[:2] + ids[3:5]:
            store.delete_queue(q)  # left: q2 (id 3) and q5 (id 6)
        await store.close()
        store = SQLiteStore(path)
        await store.open()
        d = await store.load_definitions()
        assert [(q.id, q.name) for q in d.queues] == [(1, "q2"), (2, "q5")]
        for q in (1, 2):
            assert [(m.seq, m.body) for m in await messages(store, q)] == [(1, b"1"), (2, b"2"), (3, b"3")]
        assert store.put_queue(QueueRecord("/", "new")) == 3
        assert store.insert_message(message(2, 0)) == (2 << schema.SEQ_BITS) | 4
        await store.close()

    run(main)


def test_orphaned_messages_are_dropped_at_open(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "ottermq.db"
    (q,) = make_db(path, per_queue=2)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO messages (id, exchange, routing_key, props, body, enqueued_at) "
            "VALUES (?, '', '', x'', x'', 0)",
            ((q + 5) << schema.SEQ_BITS | 1,),
        )
    conn.close()

    async def main() -> None:
        store = SQLiteStore(path)
        await store.open()
        assert (await store.stats())["messages"] == 2
        await store.close()

    with caplog.at_level(logging.WARNING):
        run(main)
    assert any("no longer exist" in r.getMessage() for r in caplog.records)


# -- batching on disk ----------------------------------------------------------------------------
def test_cancelled_insert_never_reaches_sqlite(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "ottermq.db")
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        await store.flush()
        traced: list[str] = []
        conn = store._connection()
        await store._call(conn.set_trace_callback, traced.append)
        gone = store.insert_message(message(q, 1, body=b"consumed before commit"))
        kept = store.insert_message(message(q, 2))
        store.delete_message(gone)
        await store.flush()
        await store._call(conn.set_trace_callback, None)
        writes = [t for t in traced if "messages" in t]
        assert len(writes) == 1 and writes[0].startswith("INSERT INTO messages")
        assert str(kept) in writes[0] and "consumed" not in writes[0]
        assert "BEGIN IMMEDIATE" in traced and "COMMIT" in traced
        await store.close()

    run(main)


def test_many_inserts_and_deletes_use_multi_row_statements(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "ottermq.db")
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        ids = [store.insert_message(message(q, seq, body=b"%d" % seq)) for seq in range(1, 251)]
        await store.flush()
        for i in ids[:100] + ids[101:231]:
            store.delete_message(i)
        await store.flush()
        got = await messages(store, q)
        assert [m.seq for m in got] == [101] + list(range(232, 251))
        assert got[0].body == b"101"
        await store.close()

    run(main)


def test_dead_letter_move_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ottermq.db"
    source, target = make_db(path, queues=2)

    async def main() -> None:
        store = SQLiteStore(path)
        await store.open()
        mid = store.insert_message(message(source, 1))
        await store.flush()
        real = engine._executemany

        def crash_after_delete(conn: sqlite3.Connection, statement: str, params: list[Any]) -> None:
            real(conn, statement, params)  # the delete runs inside the transaction...
            if statement.startswith("DELETE FROM messages"):
                raise sqlite3.OperationalError("disk I/O error")  # ...then the writer dies

        monkeypatch.setattr(engine, "_executemany", crash_after_delete)
        oks: list[bool] = []
        store.delete_message(mid)
        store.insert_message(message(target, 1))
        store.after_commit(oks.append)
        with pytest.raises(StoreError):
            await store.flush()
        assert oks == [False]
        await store.close()  # still failing: closing gives the batch up instead of retrying it
        monkeypatch.setattr(engine, "_executemany", real)
        store = SQLiteStore(path)
        await store.open()
        assert [m.id for m in await messages(store, source)] == [mid]  # nothing of the move applied
        assert await messages(store, target) == []
        await store.close()

    run(main)


def test_a_failed_dead_letter_move_lands_whole_with_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ottermq.db"
    source, target = make_db(path, queues=2)

    async def main() -> None:
        store = SQLiteStore(path)
        await store.open()
        mid = store.insert_message(message(source, 1))
        await store.flush()
        real = engine._executemany

        def fail_once(conn: sqlite3.Connection, statement: str, params: list[Any]) -> None:
            monkeypatch.setattr(engine, "_executemany", real)
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(engine, "_executemany", fail_once)
        store.delete_message(mid)
        moved = store.insert_message(message(target, 1))
        with pytest.raises(StoreError):
            await store.flush()
        await store.flush()  # the retry commits the whole move
        assert await messages(store, source) == []
        assert [m.id for m in await messages(store, target)] == [moved]
        await store.close()

    run(main)


def test_kill_9_in_the_middle_of_a_dead_letter_move(tmp_path: Path) -> None:
    path = tmp_path / "ottermq.db"
    source, target = make_db(path, queues=2, per_queue=1)  # one message in each
    child = textwrap.dedent(f"""
        import asyncio, os, signal
        from pathlib import Path
        import ottermq.persistence.engine as sq
        from ottermq.persistence import MessageRecord, SQLiteStore

        async def main():
            store = SQLiteStore(Path({str(path)!r}))
            await store.open()
            (moved,) = [m async for batch in store.iter_messages({source}) for m in batch]
            real = sq._executemany
            def die(conn, statement, params):
                real(conn, statement, params)
                if statement.startswith("DELETE FROM messages"):
                    os.kill(os.getpid(), signal.SIGKILL)
            sq._executemany = die
            store.delete_message(moved.id)
            store.insert_message(MessageRecord({target}, 1, "", "rk", b"", b"dead", 0))
            await store.flush()

        asyncio.run(main())
    """)
    env = dict(os.environ, PYTHONSAFEPATH="1")
    done = subprocess.run(
        [sys.executable, "-c", child], cwd=tmp_path, env=env, capture_output=True, timeout=60
    )
    assert done.returncode == -9, done.stderr.decode()

    async def main() -> None:
        store = SQLiteStore(path)
        await store.open()
        assert [m.body for m in await messages(store, source)] == [b"1"]
        assert [m.body for m in await messages(store, target)] == [b"1"]  # not b"dead"
        await store.close()

    run(main)


def test_one_worker_thread_joined_at_close(tmp_path: Path) -> None:
    def workers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith(sqlite_module.THREAD_NAME)]

    async def main() -> None:
        store = SQLiteStore(tmp_path / "ottermq.db")
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        for seq in range(1, 50):
            store.insert_message(message(q, seq))
            await store.flush()
        assert len(workers()) == 1
        await store.close()
        assert workers() == []

    run(main)


def test_a_store_never_closed_does_not_keep_the_process_alive(tmp_path: Path) -> None:
    child = textwrap.dedent(f"""
        import asyncio
        from pathlib import Path
        from ottermq.persistence import QueueRecord, SQLiteStore

        async def main():
            store = SQLiteStore(Path({str(tmp_path / "ottermq.db")!r}))
            await store.open()
            store.put_queue(QueueRecord("/", "q"))
            await store.flush()
            await store.stats()

        asyncio.run(main())
    """)
    env = dict(os.environ, PYTHONSAFEPATH="1")
    done = subprocess.run(
        [sys.executable, "-c", child], cwd=tmp_path, env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()


def test_full_disk_fails_the_batch_then_recovers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "ottermq.db")
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        await store.flush()
        pages = (await sql(store, "PRAGMA page_count"))[0][0]
        await sql(store, f"PRAGMA max_page_count = {pages + 4}")  # the "disk" holds 4 more pages
        oks: list[bool] = []
        for seq in range(1, 51):
            store.insert_message(message(q, seq, body=os.urandom(1000)))
        store.after_commit(oks.append)
        with pytest.raises(StoreError):
            await store.flush()
        assert oks == [False]
        store.put_vhost(VHostRecord("small"))  # queued behind the retried inserts: fails with them
        store.after_commit(oks.append)
        with pytest.raises(StoreError):
            await store.flush()
        await sql(store, "PRAGMA max_page_count = 1073741823")  # space again
        store.insert_message(message(q, 51))
        store.after_commit(oks.append)
        await store.flush()
        assert oks == [False, False, True]
        assert [m.seq for m in await messages(store, q)] == list(range(1, 52))  # nothing lost
        await store.close()

    with caplog.at_level(logging.ERROR):
        run(main)
    assert any("database or disk is full" in r.getMessage() for r in caplog.records)


def test_free_pages_are_given_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_module, "MAINTAIN_EVERY", 1)
    monkeypatch.setattr(sqlite_module, "VACUUM_MIN_FREE_PAGES", 8)

    async def main() -> None:
        store = SQLiteStore(tmp_path / "ottermq.db")
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        ids = [store.insert_message(message(q, seq, body=os.urandom(2000))) for seq in range(1, 201)]
        await store.flush()
        full = (await sql(store, "PRAGMA page_count"))[0][0]
        for i in ids:
            store.delete_message(i)
        await store.flush()
        store.put_vhost(VHostRecord("/"))  # the next batch checks the free list
        await store.flush()
        assert (await sql(store, "PRAGMA page_count"))[0][0] < full // 2
        await store.close()

    run(main)


def test_stats_report_bytes_on_disk(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "ottermq.db")
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        for seq in range(1, 101):
            store.insert_message(message(q, seq))
        await store.checkpoint()
        stats = await store.stats()
        assert stats["messages"] == 100 and stats["wal_bytes"] == 0
        assert stats["bytes_on_disk"] == stats["db_bytes"] == (tmp_path / "ottermq.db").stat().st_size
        await store.close()

    run(main)


def test_release_memory_keeps_the_data_and_needs_an_open_store(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "ottermq.db")
        await store.open()
        q = store.put_queue(QueueRecord("/", "q"))
        for seq in range(1, 2001):
            store.insert_message(message(q, seq))
        await store.release_memory()  # in order with the batch before it: the inserts are committed
        assert [m.seq for m in await messages(store, q)] == list(range(1, 2001))
        await store.close()
        with pytest.raises(StoreError):
            await store.release_memory()

    run(main)
