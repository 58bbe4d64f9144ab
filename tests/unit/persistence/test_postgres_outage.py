"""PostgreSQL outages (issue 39): what the store and the lease do when the database stops answering,
drops a connection, loses the answer to a ``COMMIT`` or restarts.

* The store's confirms wait through an outage: a batch that fails for an I/O reason is tried again
  until it commits, and the commit token keeps a batch whose ``COMMIT`` answer was lost from being
  written twice; a call the server does not answer is dropped at its deadline.
* A store that gives up on a batch that may have committed (``abandon``: the lease is lost) never
  says ``False`` for it while the broker still has clients; a batch it knows did not commit is.
* The lease ends an active whose database went silent within its lease (the renewal has a deadline);
  a database restart shorter than the lease is not a failover, a dead active still is one at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from ottermq.persistence import MessageRecord, QueueRecord
from ottermq.persistence.lease import ACTIVE, LOST, Lease
from ottermq.persistence.postgres import PostgresStore

from .conftest import drop_schema

asyncpg = pytest.importorskip("asyncpg")


def message(queue_id: int, seq: int) -> MessageRecord:
    return MessageRecord(queue_id, seq, "", "q", b"", b"x" * 10, 0)


async def stored(store: PostgresStore, queue_id: int) -> list[int]:
    return [m.seq async for chunk in store.iter_messages(queue_id) for m in chunk]


@pytest.fixture
def schema(postgres_url: str) -> Iterator[str]:
    name = f"test_{uuid.uuid4().hex[:12]}"
    yield name
    drop_schema(postgres_url, name)


class Proxy:
    """A TCP proxy in the test's event loop whose ``cut`` makes the database silent (nothing is
    forwarded, nothing is closed), as a dropped-packet partition does."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.cut = False
        self.server: asyncio.base_events.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    if not self.cut:
                        dst.write(data)
            with contextlib.suppress(OSError):
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for writer in self.writers:
            writer.close()


@contextlib.asynccontextmanager
async def proxied(postgres_url: str) -> AsyncIterator[tuple[Proxy, str]]:
    port = int(postgres_url.rsplit(":", 1)[1].split("/")[0])
    proxy = Proxy(port)
    local = await proxy.start()
    try:
        yield proxy, postgres_url.replace(f":{port}/", f":{local}/")
    finally:
        await proxy.close()


async def store_with_queue(url: str, schema: str, **options: Any) -> tuple[PostgresStore, int]:
    """An open store holding one committed queue, and that queue's id."""
    store = PostgresStore(url, schema=schema, **options)
    await store.open()
    queue_id = store.put_queue(QueueRecord("/", "q"))
    await store.flush()
    return store, queue_id


# -- the store: confirms wait ----------------------------------------------------------------------
def test_confirms_wait_through_a_dropped_connection(
    postgres_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        store, q = await store_with_queue(postgres_url, schema)
        real = PostgresStore._apply

        async def dropped(self: PostgresStore, conn: Any, ops: Any) -> None:
            monkeypatch.setattr(PostgresStore, "_apply", real)
            conn.terminate()  # the server went away in the middle of the batch
            raise ConnectionResetError("connection reset by peer (simulated)")

        monkeypatch.setattr(PostgresStore, "_apply", dropped)
        oks: list[bool] = []
        store.insert_message(message(q, 1))
        store.after_commit(oks.append)
        await store.flush()
        assert oks == [True] and store.failed_batches == 1
        assert await stored(store, q) == [1]
        await store.close()

    asyncio.run(main())


def test_a_commit_whose_answer_was_lost_is_not_written_twice(
    postgres_url: str, schema: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        store, q = await store_with_queue(postgres_url, schema)
        real = PostgresStore._apply

        async def answer_lost(self: PostgresStore, conn: Any, ops: Any) -> None:
            monkeypatch.setattr(PostgresStore, "_apply", real)
            await real(self, conn, ops)
            await conn.execute("COMMIT")  # it commits; the answer never reaches the broker
            conn.terminate()
            raise ConnectionResetError("connection reset by peer (simulated)")

        monkeypatch.setattr(PostgresStore, "_apply", answer_lost)
        oks: list[bool] = []
        store.insert_message(message(q, 1))
        store.insert_message(message(q, 2))
        store.after_commit(oks.append)
        await store.flush()
        assert oks == [True]
        assert store.refused_ops == 0  # not tried again: the inserts would have collided
        assert await stored(store, q) == [1, 2]
        await store.close()

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    assert any("had committed after all" in r.getMessage() for r in caplog.records)


def test_a_silent_server_is_dropped_at_the_deadline(
    postgres_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        async with proxied(postgres_url) as (proxy, url):
            store, q = await store_with_queue(url, schema, timeout=0.5)
            proxy.cut = True
            oks: list[bool] = []
            store.insert_message(message(q, 1))
            store.after_commit(oks.append)
            await asyncio.sleep(1.2)  # the commit passed its deadline: its connection was dropped
            assert store.timeouts >= 1 and oks == []  # the confirm waits
            proxy.cut = False
            await asyncio.wait_for(store.flush(), 10)
            assert oks == [True]
            assert await stored(store, q) == [1]
            await store.close()

    asyncio.run(main())


def test_abandoning_withholds_an_uncertain_batch_and_refuses_the_next(
    postgres_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        async with proxied(postgres_url) as (proxy, url):
            store, q = await store_with_queue(url, schema, timeout=30)
            proxy.cut = True  # the batch's BEGIN leaves; no answer comes back
            uncertain: list[bool] = []
            store.insert_message(message(q, 1))
            store.after_commit(uncertain.append)
            await asyncio.sleep(0.3)
            store.abandon("the lease ran out")  # what the broker does when its lease is lost
            certain: list[bool] = []
            store.insert_message(message(q, 2))
            store.after_commit(certain.append)
            for _ in range(100):
                if certain:
                    break
                await asyncio.sleep(0.02)
            assert certain == [False]  # refused before reaching the database: truly not stored
            assert uncertain == []  # may have committed: withheld while clients could hear it
            await asyncio.wait_for(store.close(), 10)
            assert uncertain == [False]  # told last, once the broker's connections are gone

    asyncio.run(main())


# -- the lease ------------------------------------------------------------------------------------
def test_an_active_cut_off_from_its_database_stops_within_its_lease(postgres_url: str, schema: str) -> None:
    async def main() -> None:
        async with proxied(postgres_url) as (proxy, url):
            lease = Lease(url, schema=schema, lease_seconds=1.2)
            lost: list[float] = []
            lease.on_lost = lambda reason: lost.append(time.monotonic())
            assert await lease.try_acquire()
            await asyncio.sleep(0.5)
            proxy.cut = True  # silent: the renewal's query never gets an answer
            cut = time.monotonic()
            for _ in range(300):
                if lost:
                    break
                await asyncio.sleep(0.01)
            assert lease.role == LOST
            assert lost[0] - cut <= 1.2 + 0.05  # within the lease, counted from the last renewal
            await lease.release()

    asyncio.run(main())


async def _sql(url: str, schema: str, statement: str) -> None:
    conn = await asyncpg.connect(url, server_settings={"search_path": schema})
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def test_a_database_restart_is_not_a_failover_but_a_dead_active_is(postgres_url: str, schema: str) -> None:
    """What a restart looks like to the standby, made without restarting the shared server: every
    session of the active ends (its lock is free) and its last renewal predates the server's start
    (the chaos harness restarts a real server: e2e/test_chaos.py)."""

    async def main() -> None:
        active = Lease(postgres_url, schema=schema, lease_seconds=3, holder="active:1")
        standby = Lease(postgres_url, schema=schema, lease_seconds=3, holder="standby:2")
        assert await active.try_acquire()
        epoch = active.epoch
        assert not await standby.try_acquire()
        renewer = active._renewer
        assert renewer is not None
        renewer.cancel()  # the active renews by hand below
        conn = active._conn
        assert conn is not None
        conn.terminate()  # the "restart": the active's session and its lock are gone ...
        await _sql(  # ... and its last renewal was before the server started
            postgres_url,
            schema,
            "UPDATE ottermq_leader SET renewed_at = pg_postmaster_start_time() - interval '1 second'",
        )
        for _ in range(5):
            assert not await standby.try_acquire(), "a database restart became a failover"
            assert not standby._locked  # it let the lock go again for the active
        await active.renew()  # the active comes back: its lock again, and a renewal after the start
        assert active._locked and active.role == ACTIVE
        for _ in range(3):
            assert not await standby.try_acquire()
        # the active dies (its sessions end, as with kill -9): the standby takes over at once
        active._conn.terminate()
        died = time.monotonic()
        while not await standby.try_acquire():
            await asyncio.sleep(0.05)
        assert time.monotonic() - died < 1  # not a lease later
        assert standby.epoch == epoch + 1 and standby.failovers == 1
        await standby.release()

    asyncio.run(main())


def test_a_connected_active_without_its_lock_is_not_replaced(postgres_url: str, schema: str) -> None:
    """After a restart the standby may hold the lock for a moment when the active reconnects: the
    active renews without it, and the standby, seeing it connected, does not take over."""

    async def main() -> None:
        active = Lease(postgres_url, schema=schema, lease_seconds=3, holder="active:1")
        standby = Lease(postgres_url, schema=schema, lease_seconds=3, holder="standby:2")
        assert await active.try_acquire()
        renewer = active._renewer
        assert renewer is not None
        renewer.cancel()
        assert active._conn is not None
        await active._unlock(active._conn)  # as if its session had been new since a restart
        assert not await standby.try_acquire()
        assert not standby._locked
        await active.renew()
        assert active._locked
        await active.release()
        await standby.release()

    asyncio.run(main())


def test_two_standbys_seeing_one_expired_lease_take_over_once(postgres_url: str, schema: str) -> None:
    """Both standbys read the lease as run out; the second's take-over finds the epoch moved on and
    changes nothing (it was a second, needless failover that deposed a fresh active)."""

    async def main() -> None:
        active = Lease(postgres_url, schema=schema, lease_seconds=0.5, holder="active:1")
        first = Lease(postgres_url, schema=schema, lease_seconds=2, holder="first:2")
        second = Lease(postgres_url, schema=schema, lease_seconds=2, holder="second:3")
        assert await active.try_acquire()
        seen = active.epoch
        renewer = active._renewer
        assert renewer is not None
        renewer.cancel()  # it stops renewing: the lease runs out
        await asyncio.sleep(0.7)
        assert await first.try_acquire()
        assert first.epoch == seen + 1
        conn = await second._connection(5)
        assert not await second.take_over(conn, seen)  # read before the first one's take-over
        assert second.epoch == 0
        assert not await second.try_acquire()  # and now: the first one's lease is fresh
        await first.release()
        await second.release()
        active._conn.terminate()

    asyncio.run(main())


def test_a_driver_that_lost_its_protocol_state_is_dropped_and_the_batch_retried(
    postgres_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        store, q = await store_with_queue(postgres_url, schema)
        broken = store._conn
        real = PostgresStore._apply

        async def confused(self: PostgresStore, conn: Any, ops: Any) -> None:
            monkeypatch.setattr(PostgresStore, "_apply", real)
            raise asyncpg.exceptions.InternalClientError("cannot switch to state 15 (simulated)")

        monkeypatch.setattr(PostgresStore, "_apply", confused)
        oks: list[bool] = []
        store.insert_message(message(q, 1))
        store.after_commit(oks.append)
        await asyncio.wait_for(store.flush(), 10)
        assert oks == [True]
        assert broken.is_closed() and store._conn is not broken
        assert await stored(store, q) == [1]
        await store.close()

    asyncio.run(main())
