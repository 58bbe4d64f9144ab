"""Dead letters: browse them in place and send them back (an ottermq extension).

Rules:

- Browsing reads a queue's ready entries where they are: nothing is delivered, redelivered or
  reordered. A message's deaths are its ``x-death`` entries (most recent first); filters and the
  summary use the most recent one, ``x-death[0]``.
- A move takes messages out of a queue and publishes each to a target exchange: the exchange and
  first routing key of its ``x-death[0]`` (the original; ``""`` is the default exchange), or a
  chosen exchange and routing key. ``x-death``, ``x-first-death-*`` and ``x-last-death-*`` are
  removed unless ``keep_death_headers``; every other property octet stays as published.
- Each message moves in one synchronous step: the target queues' entries are enqueued, then the
  source entry is withdrawn, with no ``await`` between, so both store writes land in the same batch
  and a crash leaves the message in exactly one place. A message the target does not route
  anywhere (or whose original exchange is gone) stays where it is and counts as ``unroutable``; one
  a consumer holds, or that is gone, counts as ``skipped``. ``moved`` counts a batch once the store
  committed it (the publisher-confirm point); a failed commit stops the job (``failed``).
- Jobs run as asyncio tasks in the broker, in batches of at most ``BATCH`` per loop turn, at most
  ``rate`` messages a second when set; a browser that goes away changes nothing. They can be paused,
  resumed and cancelled. With a state file (a broker with a data directory) jobs are written down
  on every state change and a running or paused job resumes at the next start: it re-selects from
  what is still in the queue, which cannot include what was already moved.
- A job selects its messages when it starts (or resumes), so messages that arrive later, or that a
  move sends back into the same queue, are not taken again.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ottermq.amqp.errors import AMQPError, FrameError
from ottermq.amqp.props import get_headers, rewrite_props
from ottermq.amqp.table import encode_table
from ottermq.vhost.message import READY, Entry, Message

from .operations import publish_target, withdraw

if TYPE_CHECKING:
    from ottermq.vhost.queue import Queue
    from ottermq.vhost.vhost import VHost

    from .node import Node

log = logging.getLogger(__name__)

BATCH = 100
SCAN_CHUNK = 2000  # entries looked at between two yields to the event loop (~20 ms)
DEATH_HEADERS = (
    "x-death",
    "x-first-death-reason",
    "x-first-death-queue",
    "x-first-death-exchange",
    "x-last-death-reason",
    "x-last-death-queue",
    "x-last-death-exchange",
)
STATES = ("running", "paused", "done", "failed", "cancelled")


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def deaths_of(headers: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """A message's ``x-death`` entries as JSON-ready dicts (most recent first; none: ``[]``)."""
    raw = (headers or {}).get("x-death")
    if not isinstance(raw, list):
        return []
    out = []
    for death in raw:
        if not isinstance(death, dict):
            continue
        keys = death.get("routing-keys")
        when = death.get("time")
        if isinstance(when, datetime.datetime):
            when = int(when.timestamp())
        out.append(
            {
                "reason": _text(death.get("reason")),
                "queue": _text(death.get("queue")),
                "exchange": _text(death.get("exchange")),
                "routing_keys": [_text(k) for k in keys] if isinstance(keys, list) else [],
                "count": int(death["count"]) if isinstance(death.get("count"), int) else None,
                "time": int(when) if isinstance(when, int) else None,
                "original_expiration": _text(death.get("original-expiration")),
            }
        )
    return out


def first_death(headers: Mapping[str, Any] | None) -> dict[str, str | None] | None:
    """``x-first-death-*`` as a dict, or None when the message never died."""
    headers = headers or {}
    if "x-first-death-reason" not in headers:
        return None
    return {k: _text(headers.get(f"x-first-death-{k}")) for k in ("reason", "queue", "exchange")}


LastDeath = tuple[str | None, str | None, str | None, str | None]  # reason, queue, exchange, first key


class LastDeaths:
    """Each message's most recent death (``x-death[0]``: reason, queue, exchange, first routing key,
    or None when it never died), memoised by property octets: dead letters of one burst share
    theirs, so a queue of them is decoded once per burst. Headers are decoded without being kept on
    the message, so scanning a long queue does not grow it (at most ``limit`` memo entries)."""

    __slots__ = ("_memo", "_limit")

    def __init__(self, limit: int = 50_000) -> None:
        self._memo: dict[bytes, LastDeath | None] = {}
        self._limit = limit

    def __call__(self, message: Message) -> LastDeath | None:
        raw = message.raw_props
        try:
            return self._memo[raw]
        except KeyError:
            pass
        try:
            deaths = deaths_of(get_headers(raw))
        except FrameError:  # a raw client's malformed table, kept as it came: no death to read
            deaths = []
        last: LastDeath | None = None
        if deaths:
            d = deaths[0]
            keys = d["routing_keys"]
            last = (d["reason"], d["queue"], d["exchange"], keys[0] if keys else None)
        if len(self._memo) >= self._limit:
            self._memo.clear()
        self._memo[raw] = last
        return last


@dataclass(frozen=True, slots=True)
class Selection:
    """Which messages of the queue: ``ids`` (entry seq numbers), or those whose most recent death
    matches ``reason``/``source_queue`` (None = any), or all of them (``all_``)."""

    ids: frozenset[int] | None = None
    reason: str | None = None
    source_queue: str | None = None
    all_: bool = False

    def matches(self, entry: Entry, last_deaths: LastDeaths) -> bool:
        if self.ids is not None:
            return entry.seq in self.ids
        if self.all_:
            return True
        last = last_deaths(entry.message) or (None, None, None, None)
        return (self.reason is None or last[0] == self.reason) and (
            self.source_queue is None or last[1] == self.source_queue
        )

    def as_json(self) -> dict[str, Any]:
        if self.ids is not None:
            return {"ids": sorted(self.ids)}
        if self.all_:
            return {"all": True}
        return {"filter": {"reason": self.reason, "source_queue": self.source_queue}}


def strip_death_headers(message: Message) -> bytes:
    """The message's property octets without the dead-letter headers (other headers keep their
    AMQP types; no headers left: no headers property)."""
    headers = get_headers(message.raw_props)
    if not headers or not any(key in headers for key in DEATH_HEADERS):
        return message.raw_props
    kept = {k: v for k, v in headers.items() if k not in DEATH_HEADERS}
    return rewrite_props(message.raw_props, encode_table(kept) if kept else None, drop_expiration=False)


def target_of(
    message: Message, target: tuple[str, str] | None, last_deaths: LastDeaths
) -> tuple[str, str] | None:
    """``(exchange, routing key)`` to send ``message`` to: the chosen ``target``, else its most recent
    death's exchange and first routing key (None: the message never died, nowhere to send it)."""
    if target is not None:
        return target
    last = last_deaths(message)
    if last is None or last[2] is None:
        return None
    return last[2], last[3] or ""


def move_one(
    vhost: VHost,
    queue: Queue,
    entry: Entry,
    target: tuple[str, str] | None,
    keep: bool,
    last_deaths: LastDeaths,
) -> tuple[str, list[Any]]:
    """Move one ready entry (rule 3). Returns ``(outcome, stored target entries)`` with outcome
    ``moved``, ``unroutable`` or ``skipped``."""
    if entry.state != READY or queue.deleted:
        return "skipped", []
    message = entry.message
    where = target_of(message, target, last_deaths)
    if where is None:
        return "unroutable", []
    exchange_name, routing_key = where
    try:  # the same target rule as any publish: it exists and is not internal
        exchange = publish_target(vhost, exchange_name)
    except AMQPError:
        return "unroutable", []
    raw = message.raw_props if keep else strip_death_headers(message)
    copy = Message(
        exchange_name,
        routing_key,
        raw,
        message.body,
        message.persistent,
        message.priority,
        message.expiration,
    )
    result = vhost.publish(exchange, copy)
    if not result.routed:
        return "unroutable", []
    queue.withdraw(entry)  # same loop turn as the enqueue above: one store batch
    return "moved", list(result.stored or [])


@dataclass
class MoveJob:
    """One move's settings and progress (the JSON the API shows)."""

    id: str
    vhost: str
    queue: str
    selection: Selection
    target: tuple[str, str] | None
    keep_death_headers: bool
    rate: float
    state: str = "running"
    selected: int = 0
    moved: int = 0
    unroutable: int = 0
    skipped: int = 0
    error: str | None = None
    started: int = field(default_factory=lambda: int(time.time() * 1000))
    finished: int | None = None

    def as_json(self) -> dict[str, Any]:
        target = {"exchange": self.target[0], "routing_key": self.target[1]} if self.target else None
        return {
            "id": self.id,
            "vhost": self.vhost,
            "queue": self.queue,
            "state": self.state,
            **self.selection.as_json(),
            "target": target,
            "keep_death_headers": self.keep_death_headers,
            "rate": self.rate,
            "selected": self.selected,
            "moved": self.moved,
            "unroutable": self.unroutable,
            "skipped": self.skipped,
            "error": self.error,
            "started": self.started,
            "finished": self.finished,
        }

    def record(self) -> dict[str, Any]:
        """What the state file keeps."""
        data = asdict(self)
        data["selection"] = self.selection.as_json()
        data["target"] = list(self.target) if self.target else None
        return data

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> MoveJob:
        data = dict(data)
        data["selection"] = selection_from_json(data["selection"])
        data["target"] = tuple(data["target"]) if data.get("target") else None
        return cls(**data)


def selection_from_json(body: Mapping[str, Any]) -> Selection:
    """A selection from a request body or a state record.

    Raises:
        ValueError: none or several of ``ids``/``filter``/``all``, or ill-typed values.
    """
    given = [k for k in ("ids", "filter", "all") if body.get(k) not in (None, False)]
    if len(given) != 1:
        raise ValueError("give exactly one of ids, filter or all")
    if given[0] == "ids":
        ids = body["ids"]
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise ValueError("ids must be a list of message ids (integers)")
        return Selection(ids=frozenset(ids))
    if given[0] == "all":
        if body["all"] is not True:
            raise ValueError("all must be true")
        return Selection(all_=True)
    spec = body["filter"]
    if not isinstance(spec, dict):
        raise ValueError("filter must be an object with reason and/or source_queue")
    reason, source = spec.get("reason"), spec.get("source_queue")
    for value in (reason, source):
        if value is not None and not isinstance(value, str):
            raise ValueError("filter values must be strings or null")
    return Selection(reason=reason or None, source_queue=source or None)


class MoveJobs:
    """The broker's move jobs (rule 5): create, run, pause/resume, cancel, and their state file."""

    def __init__(self, broker: Node, state_file: Path | None = None) -> None:
        self.broker = broker
        self.state_file = state_file
        self.jobs: dict[str, MoveJob] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._n = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def resume_saved(self) -> None:
        """Load the state file and restart the jobs that were running (paused ones stay paused)."""
        if self.state_file is None or not self.state_file.is_file():
            return
        try:
            records = json.loads(self.state_file.read_text(encoding="utf-8"))
            jobs = [MoveJob.from_record(r) for r in records]
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("dead-letter moves: cannot read %s (%s); starting without them", self.state_file, exc)
            return
        for job in jobs:
            self.jobs[job.id] = job
            self._n = max(self._n, int(job.id) if job.id.isdigit() else 0)
            if job.state in ("running", "paused"):
                log.info(
                    "dead-letter move %s from '%s' in vhost '%s' resumes (%s)",
                    job.id,
                    job.queue,
                    job.vhost,
                    job.state,
                )
                self._start(job)

    async def close(self) -> None:
        """Stop the tasks; running jobs stay ``running`` in the state file and resume at next start."""
        for task in self._tasks.values():
            task.cancel()
        for task in list(self._tasks.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    def _save(self) -> None:
        if self.state_file is None:
            return
        recent = sorted(self.jobs.values(), key=lambda j: j.started)[-100:]  # keep the last 100
        try:
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps([j.record() for j in recent]), encoding="utf-8")
            tmp.replace(self.state_file)
        except OSError as exc:
            log.warning("dead-letter moves: cannot write %s: %s", self.state_file, exc)

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
        self._n += 1
        # with several workers, each numbers its jobs apart from the others': n * workers + its number
        number = self._n * self.broker.settings.workers + self.broker.worker_index
        job = MoveJob(str(number), vhost, queue, selection, target, keep, rate)
        self.jobs[job.id] = job
        self._start(job)
        self._save()
        return job

    def set_state(self, job: MoveJob, state: str) -> None:
        """``paused`` or ``running`` (resume); anything else is the caller's 400."""
        if job.state not in ("running", "paused") or state == job.state:
            return
        job.state = state
        self._wake[job.id].set()
        self._save()

    def cancel(self, job: MoveJob) -> None:
        if job.state in ("running", "paused"):
            self._finish(job, "cancelled")
            self._wake[job.id].set()

    def _finish(self, job: MoveJob, state: str, error: str | None = None) -> None:
        job.state, job.error = state, error
        job.finished = int(time.time() * 1000)
        self._save()

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
            self._finish(job, "failed", f"{type(exc).__name__}: {exc}")

    async def _move(self, job: MoveJob) -> None:
        vhost = self.broker.vhosts.get(job.vhost)
        queue = vhost.queues.get(job.queue) if vhost is not None else None
        if vhost is None or queue is None:
            self._finish(job, "failed", f"queue '{job.queue}' in vhost '{job.vhost}' not found")
            return
        last_deaths = LastDeaths()
        chosen: list[Entry] = []
        snapshot = list(queue.ready_entries())
        for start in range(0, len(snapshot), SCAN_CHUNK):  # a long queue: let others in between
            part = snapshot[start : start + SCAN_CHUNK]
            chosen += [e for e in part if job.selection.matches(e, last_deaths)]
            await asyncio.sleep(0)
        del snapshot
        job.selected = job.moved + job.unroutable + job.skipped + len(chosen)
        pending = iter(chosen)
        wake = self._wake[job.id]
        store = self.broker.store
        while job.state in ("running", "paused"):
            if job.state == "paused":
                wake.clear()
                await wake.wait()
                continue
            started = time.monotonic()
            size = BATCH if job.rate <= 0 else max(1, min(BATCH, int(job.rate)))
            batch = [e for _, e in zip(range(size), pending, strict=False)]
            if not batch:
                self._finish(job, "done")
                return
            moved, stored = 0, []
            for entry in batch:
                keep = job.keep_death_headers
                outcome, written = move_one(vhost, queue, entry, job.target, keep, last_deaths)
                if outcome == "moved":
                    moved += 1
                    stored.extend(written)
                elif outcome == "unroutable":
                    job.unroutable += 1
                else:
                    job.skipped += 1
            if stored:
                if not await _committed(store):
                    withdraw(stored)
                    self._finish(job, "failed", "the store could not commit a batch (see the broker log)")
                    return
            job.moved += moved
            if job.rate > 0:
                await asyncio.sleep(max(0.0, len(batch) / job.rate - (time.monotonic() - started)))
            else:
                await asyncio.sleep(0)  # let everyone else in between batches
        # cancelled: messages already moved stay moved


async def _committed(store: Any) -> bool:
    """Wait for the store to commit what is queued so far; whether it did."""
    done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def settle(ok: bool) -> None:
        if not done.done():
            done.set_result(ok)

    store.after_commit(settle)
    return await done
