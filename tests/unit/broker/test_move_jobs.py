"""Dead-letter move jobs (``broker/node/move_jobs.py``) on a real Node and MemoryStore: store first then
forget, one message's failure kept to it, the bounds, the state in the store (resumption, the legacy
file read once) and the turns that bound the event loop's slices."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ottermq.amqp.props import HEADERS_BIT, PROPERTY_FLAGS, join_props
from ottermq.amqp.table import encode_table
from ottermq.broker.config import Settings
from ottermq.broker.node import move_jobs
from ottermq.broker.node.dlq_move import Selection, pack_ids
from ottermq.broker.node.move_jobs import ACTIVE, MoveJob, MoveJobs, TooManyJobs
from ottermq.broker.node.node import Node
from ottermq.broker.node.turns import Turns
from ottermq.broker.node.view import NodeView
from ottermq.dlx.xdeath import record_death
from ottermq.persistence import MemoryStore
from ottermq.persistence import schema as s
from ottermq.persistence.engine import Op
from ottermq.persistence.store import StoreError
from ottermq.vhost.queue import Queue

DELIVERY_MODE_BIT = PROPERTY_FLAGS["delivery_mode"]


def run(main: Callable[[], Any]) -> Any:
    return asyncio.run(main())


async def until(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """The poll helper of these tests: ``check()``'s first truthy value, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.001)
    return value


async def boot(store: MemoryStore, **settings: Any) -> Node:
    node = Node(Settings(_env_file=None, **settings), asyncio.get_running_loop(), store)  # type: ignore[call-arg]
    await node.open()
    return node


def dead_props(headers: bytes | None = None) -> bytes:
    """Persistent properties with the x-death of a message rejected from ``work``."""
    if headers is None:
        headers = encode_table(record_death({"n": 1}, "work", "rejected", "", ["work"], None, 1_700_000_000))
    return join_props({HEADERS_BIT: headers, DELIVERY_MODE_BIT: b"\x02"})


def queues(node: Node, *names: str) -> list[Queue]:
    vhost = node.vhosts["/"]
    return [node.services.ops.declare_queue(None, vhost, name, durable=True).queue for name in names]  # type: ignore[misc]


def fill(node: Node, queue: str, count: int, props: bytes | None = None) -> None:
    for i in range(count):
        node.services.ops.publish(None, node.vhosts["/"], "", queue, props or dead_props(), b"m%d" % i)


async def stored(store: MemoryStore, queue: Queue) -> list[bytes]:
    return [m.body async for chunk in store.iter_messages(queue.store_id) for m in chunk]


async def finished(job: MoveJob) -> MoveJob:
    await until(lambda: job.state not in ACTIVE)
    return job


class RecordingStore(MemoryStore):
    """Remembers every committed batch's ops; ``fail_on`` makes the first batch holding such an op
    fail once, as a full disk would (the batch is then retried)."""

    def __init__(self) -> None:
        super().__init__()
        self.committed: list[list[Op]] = []
        self.fail_on: Callable[[Op], bool] | None = None

    async def _commit(self, ops: list[Op | None]) -> None:
        live = [op for op in ops if op is not None]
        if self.fail_on is not None and any(self.fail_on(op) for op in live):
            self.fail_on = None
            raise StoreError("database or disk is full (simulated)")
        await super()._commit(ops)
        self.committed.append(live)


def in_queue(queue: Queue, op: Op, statement: str) -> bool:
    low, high = s.queue_range(queue.store_id)
    return op[0] == statement and low <= op[1][0] <= high


def deletes_in(queue: Queue, op: Op) -> int:
    """Rows of ``queue`` an op deletes: one, or a run of ids (the store coalesces consecutive deletes)."""
    if in_queue(queue, op, s.DELETE_MESSAGE):
        return 1
    if in_queue(queue, op, s.DELETE_MESSAGES):
        return int(op[1][1] - op[1][0] + 1)
    return 0


def test_every_copy_is_stored_before_its_source_is_deleted():
    async def main() -> None:
        store = RecordingStore()
        node = await boot(store)
        dlq, work = queues(node, "dlq", "work")
        fill(node, "dlq", 250)
        moves = MoveJobs(NodeView(node))
        job = await finished(moves.create("/", "dlq", Selection(all_=True), None, False, 0))
        await store.flush()
        assert (job.state, job.selected, job.moved, job.unroutable, job.skipped, job.refused) == (
            "done",
            250,
            250,
            0,
            0,
            0,
        )
        copies = deleted = 0
        for batch in store.committed:
            deleted += sum(deletes_in(dlq, op) for op in batch)
            assert deleted <= copies, "a source row was deleted before its copy was committed"
            copies += sum(in_queue(work, op, s.INSERT_MESSAGE) for op in batch)
        assert (copies, deleted) == (250, 250)
        assert len(await stored(store, work)) == 250 and await stored(store, dlq) == []
        [row] = await store.load_move_jobs()
        assert (row.state, row.moved, row.selected) == ("done", 250, 250)
        await node.close()

    run(main)


class SlowStore(MemoryStore):
    """Commits take 10 ms, as on a disk (jobs' slices then overlap the commit of another's)."""

    async def _commit(self, ops: list[Op | None]) -> None:
        await asyncio.sleep(0.01)
        await super()._commit(ops)


def test_jobs_moving_the_same_messages_make_one_copy_of_each():
    async def main() -> None:
        store = SlowStore()
        node = await boot(store)
        dlq, work = queues(node, "dlq", "work")
        fill(node, "dlq", 300)
        moves = MoveJobs(NodeView(node))
        jobs = [moves.create("/", "dlq", Selection(all_=True), None, False, 0) for _ in range(3)]
        for job in jobs:
            await finished(job)
        assert sum(j.moved for j in jobs) == 300 and sum(j.skipped for j in jobs) == 600
        assert work.message_count == 300 and work.stats.publish == 300  # no copy made twice
        await node.close()

    run(main)


def test_a_batch_the_store_cannot_commit_leaves_every_source_and_takes_the_copies_back():
    async def main() -> None:
        store = RecordingStore()
        node = await boot(store)
        dlq, work = queues(node, "dlq", "work")
        fill(node, "dlq", 30)
        await store.flush()
        store.fail_on = lambda op: in_queue(work, op, s.INSERT_MESSAGE)
        moves = MoveJobs(NodeView(node))
        job = await finished(moves.create("/", "dlq", Selection(all_=True), None, False, 0))
        assert job.state == "failed" and "could not commit" in (job.error or "")
        assert job.moved == 0 and 0 < job.refused <= 30  # the first slice (a time budget: up to 30)
        await store.flush()  # the failed batch was retried, then its copies deleted again
        assert dlq.message_count == 30 and work.message_count == 0
        assert len(await stored(store, dlq)) == 30 and await stored(store, work) == []
        await node.close()

    run(main)


def test_one_message_that_cannot_be_rewritten_stays_with_a_warning_and_the_job_goes_on(caplog):
    async def main() -> None:
        store = MemoryStore()
        node = await boot(store)
        dlq, work = queues(node, "dlq", "work")
        fill(node, "dlq", 3)
        fill(node, "dlq", 1, dead_props(b"\x00\x00\x00\x03\x01aZ"))  # a field type no decoder knows
        fill(node, "dlq", 2)
        target = ("", "work")
        with caplog.at_level(logging.WARNING):
            moves = MoveJobs(NodeView(node))
            job = await finished(moves.create("/", "dlq", Selection(all_=True), target, False, 0))
        assert (job.state, job.moved, job.refused, job.selected) == ("done", 5, 1, 6)
        [left] = list(dlq.ready_entries())
        assert left.message.body == b"m0" and work.message_count == 5
        assert f"message {left.seq} stays in queue 'dlq' in vhost '/'" in caplog.text
        await store.flush()
        assert await stored(store, dlq) == [b"m0"]
        await node.close()

    run(main)


def test_a_source_taken_while_its_copy_commits_takes_the_copy_back():
    async def main() -> None:
        store = MemoryStore()
        node = await boot(store)
        dlq, work = queues(node, "dlq", "work")
        fill(node, "dlq", 2)
        moves = MoveJobs(NodeView(node))
        job = MoveJob("1", "/", "dlq", Selection(all_=True), None, False, 0)
        pending = move_jobs.deque(dlq.ready_entries())
        copies = moves._send(
            job, node.vhosts["/"], dlq, pending, 10, time.perf_counter() + 1, move_jobs.LastDeaths()
        )
        taken = dlq.pop()  # a consumer gets the first source meanwhile
        assert taken is not None and await moves._committed()
        moves._forget(job, dlq, copies)
        assert (job.moved, job.skipped) == (1, 1)
        assert [e.message.body for e in work.ready_entries()] == [b"m1"]  # one copy each, never two
        await node.close()

    run(main)


def test_the_jobs_running_at_once_and_the_finished_jobs_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(move_jobs, "KEEP", 3)

    async def main() -> None:
        store = MemoryStore()
        node = await boot(store, dlq_move_max_jobs=2)
        queues(node, "dlq")
        moves = MoveJobs(NodeView(node))
        first = moves.create("/", "dlq", Selection(all_=True), None, False, 0)
        moves.create("/", "dlq", Selection(all_=True), None, False, 0)
        with pytest.raises(TooManyJobs, match="^2 dead-letter moves are running or paused already"):
            moves.create("/", "dlq", Selection(all_=True), None, False, 0)
        await finished(first)
        for _ in range(4):
            await finished(moves.create("/", "dlq", Selection(all_=True), None, False, 0))
        await until(lambda: moves.active == 0)
        assert len(moves.jobs) == 3
        assert sorted(r.id for r in await store.load_move_jobs()) == sorted(int(i) for i in moves.jobs)
        await node.close()

    run(main)


def test_a_paused_job_resumes_from_the_store_after_a_restart():
    async def main() -> None:
        store = MemoryStore()
        node = await boot(store)
        dlq, work = queues(node, "dlq", "work")
        fill(node, "dlq", 40)
        moves = MoveJobs(NodeView(node))
        ids = [e.seq for e in dlq.ready_entries()][:25]
        job = moves.create("/", "dlq", Selection(ids=pack_ids(ids)), None, False, 0)
        moves.set_state(job, "paused")
        await moves.close()  # a restart: the job stays paused in the store
        again = MoveJobs(NodeView(node))
        await again.load()
        resumed = again.jobs[job.id]
        assert resumed.state == "paused" and resumed.selection.ids == pack_ids(ids)
        again.set_state(resumed, "running")
        await finished(resumed)
        assert (resumed.state, resumed.moved) == ("done", 25)
        assert dlq.message_count == 15 and work.message_count == 25  # each once
        await node.close()

    run(main)


def test_an_older_brokers_json_file_is_read_into_the_store_once(tmp_path: Path):
    async def main() -> None:
        store = MemoryStore()
        node = await boot(store)
        dlq, work = queues(node, "dlq", "work")
        fill(node, "dlq", 4)
        seqs = [e.seq for e in dlq.ready_entries()]
        common = {"vhost": "/", "queue": "dlq", "target": None, "keep_death_headers": False, "rate": 0}
        old = [
            {**common, "id": "3", "selection": {"ids": seqs[:2]}, "state": "running", "started": 1},
            {**common, "id": "2", "selection": {"all": True}, "state": "done", "moved": 7, "started": 0},
        ]
        legacy = tmp_path / "dlq-moves.json"
        legacy.write_text(json.dumps(old))
        moves = MoveJobs(NodeView(node), legacy)
        await moves.load()
        assert not legacy.exists() and (tmp_path / "dlq-moves.json.migrated").is_file()
        resumed = await finished(moves.jobs["3"])
        assert (resumed.state, resumed.moved) == ("done", 2) and moves.jobs["2"].moved == 7
        assert dlq.message_count == 2 and work.message_count == 2
        rows = {r.id: r for r in await store.load_move_jobs()}
        assert sorted(rows) == [2, 3] and rows[3].ids == pack_ids(seqs[:2])
        assert moves.create("/", "dlq", Selection(all_=True), None, False, 0).id == "4"  # ids go on
        await node.close()

    run(main)


def test_turns_give_one_slice_per_loop_iteration_however_many_scans_run():
    """Ten scans at once: between two iterations of the event loop (two ticks of a task that only
    yields) at most one of them works, for at most about ``budget``; with a bare ``sleep(0)`` between
    chunks, each of the ten would run a chunk in every iteration."""

    async def main() -> tuple[dict[int, set[int]], int, float]:
        turns = Turns(budget=0.002)
        ticks, stop = 0, False
        seen: dict[int, set[int]] = {}
        done = 0

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                await asyncio.sleep(0)
                ticks += 1

        def work(scan: int) -> Callable[[int], None]:
            def one(_item: int) -> None:
                nonlocal done
                seen.setdefault(ticks, set()).add(scan)
                done += 1
                end = time.perf_counter() + 0.00002
                while time.perf_counter() < end:
                    pass

            return one

        tick = asyncio.create_task(ticker())
        await asyncio.gather(*(turns.each(list(range(500)), work(k)) for k in range(10)))
        stop = True
        await tick
        return seen, done, turns.budget

    seen, done, _budget = run(main)
    assert done == 5000
    assert max(len(scans) for scans in seen.values()) == 1
    assert len(seen) >= 10  # the work was spread over many iterations
