"""persistence.worker.Worker: calls in order on one thread, outcomes handed back, stop joins."""

from __future__ import annotations

import asyncio
import threading

import pytest
from ottermq.persistence.worker import Worker


def test_calls_run_in_order_on_one_thread_and_stop_joins_it() -> None:
    async def main() -> None:
        worker = Worker("test-worker")
        seen: list[tuple[int, str]] = []

        def step(i: int) -> int:
            seen.append((i, threading.current_thread().name))
            return i * 2

        results = await asyncio.gather(*(worker.call(step, i) for i in range(100)))
        assert results == [i * 2 for i in range(100)]
        assert seen == [(i, "test-worker") for i in range(100)]
        worker.stop()
        assert not worker.alive
        with pytest.raises(RuntimeError):
            worker.call(step, 1)

    asyncio.run(main())


def test_an_exception_reaches_the_caller_and_the_worker_goes_on() -> None:
    async def main() -> None:
        worker = Worker("test-worker")

        def boom() -> None:
            raise OSError("disk full")

        with pytest.raises(OSError, match="disk full"):
            await worker.call(boom)
        assert await worker.call(lambda: 42) == 42
        worker.stop()

    asyncio.run(main())


def test_stop_runs_what_is_queued_first() -> None:
    async def main() -> None:
        worker = Worker("test-worker")
        gate = threading.Event()
        done: list[int] = []
        worker.call(gate.wait)
        pending = [worker.call(done.append, i) for i in range(3)]
        gate.set()
        worker.stop()
        assert done == [0, 1, 2]
        await asyncio.gather(*pending)

    asyncio.run(main())


def test_a_cancelled_call_still_runs_and_its_result_is_dropped() -> None:
    async def main() -> None:
        worker = Worker("test-worker")
        gate = threading.Event()
        ran: list[int] = []
        worker.call(gate.wait)
        cancelled = worker.call(ran.append, 1)
        cancelled.cancel()
        gate.set()
        assert await worker.call(lambda: "after") == "after"
        assert ran == [1] and cancelled.cancelled()
        worker.stop()

    asyncio.run(main())
