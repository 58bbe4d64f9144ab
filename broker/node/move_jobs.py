"""Dead-letter move jobs: send dead letters back, in the broker (an ottermq extension). What a move
selects and how each copy is made is ``dlq_move.py``.

Rules:

- A job's settings and progress are a ``MoveJob`` (``move_job.py``).
- Store first, then forget. A job moves its messages a slice at a time, each message in two steps:
  its copy is published through the one publish operation (``Operations.publish``: route, store,
  confirm, withdraw on failure) as the broker itself (the user's permissions were checked when the
  job was started, and are again when it is paused, resumed or cancelled); once the store has
  committed the copy (its confirm), the source entry is withdrawn, and its row's delete goes to
  the store in one batch with the job's progress. A crash between the two leaves both: a
  duplicate, never a loss. A copy the store refuses is withdrawn again and the source stays; a
  source that left meanwhile (a consumer took it, it expired) has its stored copies withdrawn.
- One message's failure stays with that message: a copy that cannot be made (``Unmovable``), one
  the publish refuses, or one a ``reject-publish`` queue or the store refuses leaves the message
  where it is and counts as ``refused``; a WARNING names the queue (the first ``WARNINGS`` messages
  of a job each, then one line with the count when the job ends). The job goes on. A message the
  target does not route (or whose original exchange is gone) stays and counts as ``unroutable``;
  one that is no longer ready as ``skipped``. ``moved`` counts a message once its copy is committed;
  a batch the store cannot commit stops the job (``failed``).
- Bounds (what a request can make the broker do): the ids of one request (``OTTERMQ_DLQ_MOVE_MAX_IDS``,
  checked by the API), jobs running or paused at once (``OTTERMQ_DLQ_MOVE_MAX_JOBS``: one more is
  ``TooManyJobs``), finished jobs kept (``KEEP``: the oldest is deleted when another ends).
- A budget for the event loop: every slice of dead-letter work (a job's selection scan and its
  moves, the scans of a browse and of a move request) takes turns (``turns.Turns``): one slice of at
  most ``SLICE_SECONDS`` per loop iteration, with the loop polling its sockets in between, however
  many jobs and requests there are. A job moves at most ``BATCH`` messages a slice, and at most
  ``rate`` a second when set.
- State lives in the store, incrementally: a job is one row written when it starts (its ids a row of
  their own, written once), then only its small progress row is updated, per slice and per state
  change. A running or paused job resumes at the next start, re-selecting from what is still in the
  queue, which cannot include what already moved. The ``dlq-moves.json`` of an older ottermq is read
  into the store once, at the first start with this version, and renamed ``dlq-moves.json.migrated``.
- A job selects its messages when it starts (or resumes): messages arriving later, or that a move
  sends back into the same queue, are not taken again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ottermq.amqp.errors import AccessRefused, AMQPError, NotFound
from ottermq.persistence.store import StoreError
from ottermq.vhost.message import PAGED, READY, Entry

from .dlq_move import LastDeaths, Selection, Unmovable, copy_for
from .move_job import ACTIVE, KEEP, MoveJob, TooManyJobs, legacy_records
from .operations import withdraw
from .turns import Turns

if TYPE_CHECKING:
    from ottermq.vhost.queue import Queue
    from ottermq.vhost.vhost import PublishResult, VHost

    from .view import NodeView

log = logging.getLogger(__name__)

__all__ = ["ACTIVE", "LEGACY_FILE", "MoveJob", "MoveJobs", "TooManyJobs"]

BATCH = 100  # messages a job moves per slice
WARNINGS = 10  # messages a job names in the log, then it only counts them
CLOSE_TIMEOUT = 5.0  # how long shutting down waits for the jobs' slices in flight
LEGACY_FILE = "dlq-moves.json"


class _Copy:
    """A message whose copy was published, waiting for the store's word on it."""

    __slots__ = ("entry", "result", "ok")

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.result: PublishResult | None = None
        self.ok: bool | None = None

    def settle(self, ok: bool) -> None:
        self.ok = ok


class MoveJobs:
    """The broker's move jobs (see the module rules): create, run, pause/resume, cancel, keep.

    Args:
        broker: the node (its vhosts, operations, store and settings).
        legacy_file: an older ottermq's ``dlq-moves.json`` to read into the store once (None: none).
    """

    def __init__(self, broker: NodeView, legacy_file: Path | None = None) -> None:
        self.broker = broker
        self.store = broker.store
        self.legacy_file = legacy_file
        self.jobs: dict[str, MoveJob] = {}
        self.turns = Turns()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._slices: dict[str, asyncio.Future[None]] = {}  # a job's slice between its two steps
        self._claimed: set[tuple[int, int]] = set()  # messages whose copies are in flight, any job's (_key)
        self._n = 0
        self._stopping = False

    # -- lifecycle ------------------------------------------------------------------------------
    async def load(self) -> None:
        """Read the jobs from the store (first the legacy file, once) and resume the running and
        paused ones (paused ones wait)."""
        if self.legacy_file is not None and self.legacy_file.is_file():
            await self._migrate(self.legacy_file)
        try:
            records = await self.store.load_move_jobs()
        except StoreError as exc:
            log.warning("dead-letter moves: cannot read them from the store (%s); starting without them", exc)
            return
        for record in records:
            try:
                job = MoveJob.from_record(record)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("dead-letter move %d: unreadable (%s); left out", record.id, exc)
                continue
            self.jobs[job.id] = job
            self._n = max(self._n, record.id)
        self._prune()
        for job in self.jobs.values():
            if job.state in ACTIVE:
                log.info(
                    "dead-letter move %s from '%s' in vhost '%s' resumes (%s)",
                    job.id,
                    job.queue,
                    job.vhost,
                    job.state,
                )
                self._start(job)

    async def _migrate(self, path: Path) -> None:
        try:
            records = await asyncio.to_thread(legacy_records, path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("dead-letter moves: cannot read %s (%s); starting without them", path, exc)
            return
        for record in records:
            self.store.put_move_job(record)
        try:
            await self.store.flush()
            path.replace(path.with_name(path.name + ".migrated"))
        except (StoreError, OSError) as exc:
            log.warning("dead-letter moves: %s not moved into the store yet (%s)", path, exc)
            return
        log.info("dead-letter moves: %d jobs of %s moved into the store", len(records), path)

    async def close(self) -> None:
        """Let every job finish the slice it is in, then stop: a running or paused job stays so in the
        store and resumes at the next start."""
        self._stopping = True
        for wake in self._wake.values():
            wake.set()
        tasks = list(self._tasks.values())
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT)
            for task in late:
                task.cancel()
            for task in late:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._tasks.clear()

    @property
    def active(self) -> int:
        """Jobs running or paused."""
        return sum(1 for job in self.jobs.values() if job.state in ACTIVE)

    def check_room(self) -> None:
        """Raises:
        TooManyJobs: ``OTTERMQ_DLQ_MOVE_MAX_JOBS`` jobs are running or paused."""
        limit = self.broker.settings.dlq_move_max_jobs
        if self.active >= limit:
            raise TooManyJobs(
                f"{limit} dead-letter moves are running or paused already (OTTERMQ_DLQ_MOVE_MAX_JOBS): "
                "wait for one to finish, or cancel one"
            )

    # -- API --------------------------------------------------------------------------------------
    def create(
        self,
        vhost: str,
        queue: str,
        selection: Selection,
        target: tuple[str, str] | None,
        keep: bool,
        rate: float,
    ) -> MoveJob:
        """Start a job (its row and ids are written to the store).

        Raises:
            TooManyJobs: ``OTTERMQ_DLQ_MOVE_MAX_JOBS`` jobs are running or paused.
        """
        self.check_room()
        self._n += 1
        # with several workers, each numbers its jobs apart from the others': n * workers + its number
        number = self._n * self.broker.settings.workers + self.broker.cluster.index
        job = MoveJob(str(number), vhost, queue, selection, target, keep, rate)
        self.jobs[job.id] = job
        self.store.put_move_job(job.record(with_ids=True))
        self._start(job)
        return job

    def set_state(self, job: MoveJob, state: str) -> None:
        """``paused`` or ``running`` (resume); anything else is the caller's 400."""
        if job.state not in ACTIVE or state == job.state:
            return
        job.state = state
        self._wake[job.id].set()
        self._save(job)

    def cancel(self, job: MoveJob) -> None:
        if job.state in ACTIVE:
            self._finish(job, "cancelled")
            self._wake[job.id].set()

    async def settled(self, job: MoveJob, timeout: float = CLOSE_TIMEOUT) -> None:
        """Wait until the job's slice in flight (copies published, sources not yet withdrawn) is
        over, so that a pause or a cancel answered after it is final: nothing moves afterwards."""
        pending = self._slices.get(job.id)
        if pending is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(pending), timeout)

    def _save(self, job: MoveJob) -> None:
        self.store.update_move_job(job.record())

    def _finish(self, job: MoveJob, state: str, error: str | None = None) -> None:
        job.state, job.error = state, error
        job.finished = int(time.time() * 1000)
        self._save(job)
        if job.refused > WARNINGS:
            log.warning(
                "dead-letter move %s: %d messages could not be moved and stay in queue '%s' in vhost '%s'",
                job.id,
                job.refused,
                job.queue,
                job.vhost,
            )
        self._prune()

    def _prune(self) -> None:
        """Forget the oldest finished jobs beyond ``KEEP`` (in memory and in the store)."""
        finished = [j for j in self.jobs.values() if j.state not in ACTIVE]
        if len(finished) <= KEEP:
            return
        finished.sort(key=lambda j: (j.started, int(j.id)))
        for job in finished[: len(finished) - KEEP]:
            del self.jobs[job.id]
            self._wake.pop(job.id, None)
            self.store.delete_move_job(int(job.id))

    def _start(self, job: MoveJob) -> None:
        self._wake[job.id] = asyncio.Event()
        task = asyncio.get_running_loop().create_task(self._run(job), name=f"dlq-move-{job.id}")
        self._tasks[job.id] = task
        job_id = job.id

        def forget(_task: asyncio.Task[None]) -> None:
            self._tasks.pop(job_id, None)

        task.add_done_callback(forget)

    # -- the work ---------------------------------------------------------------------------------
    async def _run(self, job: MoveJob) -> None:
        try:
            await self._move(job)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not kill the loop: the job says what happened
            log.exception("dead-letter move %s failed", job.id)
            if job.state in ACTIVE:
                self._finish(job, "failed", f"{type(exc).__name__}: {exc}")

    async def _move(self, job: MoveJob) -> None:
        vhost = self.broker.vhosts.get(job.vhost)
        if vhost is None:
            self._finish(job, "failed", f"vhost '{job.vhost}' not found")
            return
        try:  # the rules of every queue access (exclusivity included), as the broker itself
            queue = self.broker.ops.access_queue(None, vhost, job.queue, "move")
        except AMQPError as exc:
            self._finish(job, "failed", exc.reply_text)
            return
        last_deaths = LastDeaths()
        match = job.selection.matcher(last_deaths)
        matching = [0]

        def count(entry: Entry) -> None:
            if match(entry):
                matching[0] += 1

        await self.turns.each(queue.scan(), count)  # paged messages are read back, not kept
        if job.state not in ACTIVE or self._stopping:
            return
        job.selected = job.done + matching[0]
        self._save(job)
        # the messages to move, a chunk at a time from a second scan (memory stays bounded however many
        # are paged): a message that arrived in between is not taken, one that left is skipped
        source = queue.scan()
        pending: deque[Entry] = deque()
        exhausted = False
        wake = self._wake[job.id]
        while job.state in ACTIVE and not self._stopping:
            if job.state == "paused":
                wake.clear()
                await wake.wait()
                continue
            started = time.monotonic()
            size = BATCH if job.rate <= 0 else max(1, min(BATCH, int(job.rate)))
            async with self.turns.turn() as deadline:
                if job.state != "running" or self._stopping:
                    continue
                if not pending and not exhausted:
                    exhausted = _select(source, match, pending, size, deadline)
                if not pending:
                    if exhausted:
                        self._finish(job, "done")
                        return
                    continue  # the slice's time went on the scan: the next turn goes on
                copies = self._send(job, vhost, queue, pending, size, deadline, last_deaths)
                committed = self._committed()
                in_flight = self._slices[job.id] = asyncio.get_running_loop().create_future()
            try:
                ok = await committed
                self._forget(job, queue, copies)  # even when paused or cancelled meanwhile: no duplicates
            finally:
                for sent in copies:
                    self._claimed.discard(_key(queue, sent.entry))
                del self._slices[job.id]
                in_flight.set_result(None)
            if not ok:
                self._finish(job, "failed", "the store could not commit a batch (see the broker log)")
                return
            if job.rate > 0:
                await asyncio.sleep(max(0.0, size / job.rate - (time.monotonic() - started)))
        # cancelled: messages already moved stay moved; stopping: the job resumes at the next start

    def _committed(self) -> asyncio.Future[bool]:
        """Resolved once the store committed (or failed) what is queued so far."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.store.after_commit(lambda ok: None if done.done() else done.set_result(ok))
        return done

    def _send(
        self,
        job: MoveJob,
        vhost: VHost,
        queue: Queue,
        pending: deque[Entry],
        size: int,
        deadline: float,
        last_deaths: LastDeaths,
    ) -> list[_Copy]:
        """Step 1 of a slice: publish up to ``size`` copies (until ``deadline``)."""
        ops = self.broker.ops
        copies: list[_Copy] = []
        for n in range(1, size + 1):
            if not pending:
                break
            entry = pending.popleft()
            if (
                (entry.state != READY and entry.state != PAGED)
                or queue.deleted
                or _key(queue, entry) in self._claimed
            ):
                job.skipped += 1  # gone, or another job is moving it
                continue
            try:
                copy = copy_for(entry.message, job.target, job.keep_death_headers, last_deaths)
            except Unmovable as exc:
                self._refuse(job, entry, str(exc))
                continue
            if copy is None:
                job.unroutable += 1
                continue
            exchange, routing_key, raw = copy
            sent = _Copy(entry)
            try:
                result = ops.publish(
                    None, vhost, exchange, routing_key, raw, entry.message.body, settled=sent.settle
                )
            except (NotFound, AccessRefused):  # the exchange is gone, or internal
                job.unroutable += 1
                continue
            except Exception as exc:  # anything the publish refuses in this message
                self._refuse(job, entry, f"{type(exc).__name__}: {exc}")
                continue
            if not result.routed:
                job.unroutable += 1
            elif result.refused:  # a reject-publish queue is full: the message stays where it is
                withdraw(result.stored or ())
                self._refuse(job, entry, "a target queue refused it (x-overflow reject-publish)")
            else:
                sent.result = result
                copies.append(sent)
                self._claimed.add(_key(queue, entry))
            if not n & 7 and time.perf_counter() > deadline:
                break
        return copies

    def _forget(self, job: MoveJob, queue: Queue, copies: list[_Copy]) -> None:
        """Step 2 of a slice: the sources of the committed copies leave their queue (their deletes
        and the job's progress go to the store together)."""
        for sent in copies:
            self._claimed.discard(_key(queue, sent.entry))
            if not sent.ok:  # the store refused the copy: Operations.publish withdrew it
                self._refuse(job, sent.entry, "the store did not take its copy")
            elif queue.withdraw(sent.entry):
                job.moved += 1
            else:  # it left the queue meanwhile (a consumer took it, it expired): no second copy
                if sent.result is not None:
                    withdraw(sent.result.stored or ())
                job.skipped += 1
        self._save(job)

    def _refuse(self, job: MoveJob, entry: Entry, why: str) -> None:
        job.refused += 1
        if job.refused <= WARNINGS:
            log.warning(
                "dead-letter move %s: message %d stays in queue '%s' in vhost '%s': %s",
                job.id,
                entry.seq,
                job.queue,
                job.vhost,
                why,
            )


def _key(queue: Queue, entry: Entry) -> tuple[int, int]:
    """A message's key in ``_claimed``: its queue and seq (a paged message is a new object each time it
    is read back)."""
    return id(queue), entry.seq


def _select(
    source: Iterator[Entry], match: Callable[[Entry], bool], pending: deque[Entry], size: int, deadline: float
) -> bool:
    """Take up to ``size`` matching messages from the scan into ``pending``, until ``deadline``;
    returns whether the scan is over."""
    looked = 0
    for entry in source:
        if match(entry):
            pending.append(entry)
            if len(pending) >= size:
                return False
        looked += 1
        if not looked & 63 and time.perf_counter() > deadline:
            return False
    return True
