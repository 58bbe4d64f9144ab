"""``DeadLetterArchive``: dead letters buffered on the event loop, written by one daemon thread.

See the package docstring for the rules (buffering, ``lost``, the writer's wake-ups, shutdown,
write errors). ``NullArchive`` is the same interface doing nothing (archive disabled).
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from itertools import chain
from pathlib import Path
from typing import Any, Final

from .files import HOUR_MS, ArchiveFiles, Group
from .records import LINE_HEAD, Limit, fragment, headers_to_json, killer, read_props

log = logging.getLogger(__name__)

FLUSH_INTERVAL: Final = 0.5  # seconds between writes at most
RETRY_INTERVAL: Final = 1.0  # seconds before retrying after the disk refused a write
WAKE_AT: Final = 4096  # buffered dead letters that wake the writer early
CHUNK: Final = 4096  # dead letters serialized and written at a time
LOG_EVERY: Final = 10.0  # seconds between repeated warnings/errors

RoutingKeys = Callable[[str, "Mapping[str, object] | None"], list[str]]
"""``(routing_key, headers) -> x-death routing-keys`` (``ottermq.dlx.xdeath.dead_letter_routing_keys``)."""
DeathCount = Callable[["Mapping[str, object] | None", str, str], int]
"""``(headers before the death, queue, reason) -> x-death count after it`` (``ottermq.dlx``)."""

ITEM_FIELDS: Final = 5
"""Values per dead letter in ``record``'s flat ``items`` list: ``message, enqueued_at,
death_count, dlx_routing_key, drop_reason`` (flat: no tuple per dead letter for the cyclic GC to
track while it waits for the writer)."""
Record = tuple[int, str, str, str, "str | None", "str | None", "Limit | None", int]
"""A death event in the writer's buffer: ``(time_ms, vhost, queue, reason, dlx, policy, limit, n)``,
then ``n`` dead letters of :data:`ITEM_FIELDS` values each."""
HEADER_FIELDS: Final = 8  # len(Record)


# --- the archive -----------------------------------------------------------------------------------


def _wall_ms() -> int:
    return int(time.time() * 1000)


class DeadLetterArchive:
    """Appends every dead letter to JSON Lines files under ``directory``, off the event loop.

    Args:
        directory: ``OTTERMQ_DLX_ARCHIVE_DIR`` (created when needed).
        routing_keys: ``x-death`` ``routing-keys`` of a message (see :data:`RoutingKeys`).
        death_count: ``x-death`` ``count`` after a death (see :data:`DeathCount`).
        max_bytes: ``OTTERMQ_DLX_ARCHIVE_MAX_BYTES``, size rotation.
        body_bytes: ``OTTERMQ_DLX_ARCHIVE_BODY_BYTES``: archive up to this many body bytes (0: none).
        queue_limit: ``OTTERMQ_DLX_ARCHIVE_QUEUE``: records buffered before new ones are lost.
        clock: epoch ms, for closing the previous hour's files.
        idle_close: ``OTTERMQ_DLX_ARCHIVE_IDLE_CLOSE`` seconds: a file nothing was written to for
            this long is closed (renamed to ``.jsonl``) so readers see it; 0 or None: only at the
            end of its hour, on rotation and at shutdown.
        threaded: start the writer thread on the first record; ``False`` (tests) writes only
            when :meth:`write_pending` or :meth:`close_sync` is called.
    """

    enabled = True

    def __init__(
        self,
        directory: Path,
        *,
        routing_keys: RoutingKeys,
        death_count: DeathCount,
        max_bytes: int = 67_108_864,
        body_bytes: int = 0,
        queue_limit: int = 100_000,
        clock: Callable[[], int] = _wall_ms,
        threaded: bool = True,
        idle_close: float | None = 60.0,
    ) -> None:
        self.directory = Path(directory)
        self.body_bytes = body_bytes
        self.queue_limit = queue_limit
        self.files = ArchiveFiles(self.directory, max_bytes, clock=clock)
        self.idle_close_ms = int(idle_close * 1000) if idle_close else None
        self._lost_on_loop = 0  # each counter is written by one thread only
        self._lost_in_writer = 0
        self._added = 0  # dead letters recorded (event loop)
        self._taken = 0  # dead letters taken by the writer
        self.write_errors = 0  # failed write attempts
        self._routing_keys = routing_keys
        self._death_count = death_count
        self._clock = clock
        self._threaded = threaded
        self._buf: deque[Any] = deque()  # flat: per death event a Record header, then the items
        # (vhost, queue, reason, dlx) -> (count, key, drop, exchange, routing key, props) -> parts
        self._templates: dict[tuple[Any, ...], dict[tuple[Any, ...], tuple[bytes, bytes, bytes]]] = {}
        self._pending: deque[Group] = deque()  # serialized, not yet written
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._closed = False
        self._recovered = False
        self._last_warning = -math.inf
        self._last_error = -math.inf
        self._suppressed = 0

    # -- event loop side ----------------------------------------------------------------------
    def record(
        self,
        time_ms: int,
        vhost: str,
        queue: str,
        reason: str,
        dlx: str | None,
        items: list[Any],
        policy: str | None = None,
        limit: Limit | None = None,
    ) -> None:
        """Archive the dead letters of one death event (cheap: appends references; never blocks
        or raises).

        Args:
            time_ms: time of death, epoch ms.
            vhost, queue, reason: where and why they died.
            dlx: the queue's dead-letter exchange in force (``None`` when it has none).
            policy: the policy that set the queue's dead-letter exchange or message TTL (``None``
                when they came from its arguments).
            limit: the queue's limit behind ``reason`` (``ottermq.dlx.limits``): for ``expired`` its
                TTL, which each line compares with the message's own ``expiration`` (``killer``).
            items: flat, :data:`ITEM_FIELDS` values per dead letter: ``message, enqueued_at,
                death_count, dlx_routing_key, drop_reason``: the ``Message`` as it died (headers
                before this death), ``Entry.enqueued_at`` (0 = unknown), the ``x-death``
                ``count`` after this death
                (``None``: computed by the writer from the headers), the key the dead letter was
                routed with (``None`` when dropped before routing), and ``None`` when routed, else
                ``dlx_disabled``/``no_dlx``/``dlx_missing``/``no_route``/``cycle``.
        """
        n = len(items) // ITEM_FIELDS
        before = self._added - self._taken
        if before + n > self.queue_limit or self._closing:
            room = 0 if self._closing else max(self.queue_limit - before, 0)
            self._overflow(n - room)
            if not room:
                return
            items, n = items[: room * ITEM_FIELDS], room
        # one flat extend (atomic: C-level iteration, no bytecode runs, so the writer cannot
        # see half an event) and no object per event for the cyclic GC to track
        self._buf.extend(chain((time_ms, vhost, queue, reason, dlx, policy, limit, n), items))
        self._added += n
        if self._thread is None:
            if self._threaded:
                self._start()
        elif before < WAKE_AT <= before + n:
            with self._cond:
                self._cond.notify()

    def _overflow(self, n: int) -> None:
        self._lost_on_loop += n
        now = time.monotonic()
        if now - self._last_warning >= LOG_EVERY:
            self._last_warning = now
            why = "closed" if self._closing else f"full ({self.queue_limit} dead letters waiting)"
            log.warning("dead-letter archive %s: %d dead letter(s) not archived so far", why, self.lost)

    @property
    def lost(self) -> int:
        """Dead letters not archived: buffer full or closed, unserializable, retry backlog full."""
        return self._lost_on_loop + self._lost_in_writer

    def start(self) -> None:
        """Start the writer thread now (it finishes ``.part`` files a crash left behind) rather
        than with the first dead letter; idempotent."""
        if self._thread is None and not self._closing:
            self._start()

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ottermq-dlx-archive", daemon=True)
        self._thread.start()
        atexit.register(self.close_sync)  # flushes even when shutdown does not call close()

    # -- writer side ----------------------------------------------------------------------------
    def _run(self) -> None:
        cond = self._cond
        ok = True
        while True:
            with cond:
                if not self._closing and (not ok or self._added - self._taken < WAKE_AT):
                    cond.wait(FLUSH_INTERVAL if ok else RETRY_INTERVAL)
                closing = self._closing
            ok = self.write_pending()
            if closing:  # record() takes nothing more: that was the last step
                break
        self._close_files()

    def write_pending(self) -> bool:
        """Serialize everything buffered and write it (the writer thread's step; tests call it).

        Returns:
            False when the disk refused (logged, counted, retried on the next call).
        """
        try:
            if not self._recovered:
                self._recovered = True
                self.files.recover()
            while True:  # in chunks: bounded memory, one write per chunk and file
                flat = self._take(CHUNK)
                if flat:
                    self._serialize(flat)
                if self._pending:
                    self.files.write(self._pending)
                if not flat:
                    break
            self.files.close_stale(self._clock(), self.idle_close_ms)
            return True
        except OSError as exc:
            self.write_errors += 1
            pending = self._pending
            waiting = sum(len(group[1]) for group in pending)
            while waiting > self.queue_limit:  # drop the oldest beyond the limit
                t, lines, nbytes = pending[0]
                cut = min(waiting - self.queue_limit, len(lines))
                if cut == len(lines):
                    pending.popleft()
                else:
                    pending[0] = (t, lines[cut:], nbytes - sum(map(len, lines[:cut])))
                waiting -= cut
                self._lost_in_writer += cut
            self._error(
                "dead-letter archive: cannot write to %s: %s (%d line(s) waiting, %d lost)",
                self.directory,
                exc,
                waiting,
                self.lost,
            )
        except Exception:  # never let the writer die
            self.write_errors += 1
            self._error("dead-letter archive: unexpected error", exc_info=True)
        return False

    def _error(self, msg: str, *args: Any, exc_info: bool = False) -> None:
        now = time.monotonic()
        if now - self._last_error < LOG_EVERY:
            self._suppressed += 1
            return
        self._last_error = now
        if self._suppressed:
            msg += f" ({self._suppressed} similar error(s) not logged)"
            self._suppressed = 0
        log.error(msg, *args, exc_info=exc_info)

    def _take(self, budget: int) -> list[Any]:
        """Death events from the buffer, ``budget`` dead letters at most (a larger event is split:
        the header of its rest goes back in front of the rest)."""
        buf = self._buf
        popleft = buf.popleft
        out: list[Any] = []
        taken = 0
        while buf and taken < budget:  # record() extends atomically: whole events only
            header = [popleft() for _ in range(HEADER_FIELDS)]
            n = header[-1]
            k = min(n, budget - taken)
            header[-1] = k
            out += header
            out += [popleft() for _ in range(k * ITEM_FIELDS)]
            if k < n:  # record() only appends on the right: the front is ours
                buf.extendleft(reversed((*header[:-1], n - k)))
            taken += k
        self._taken += taken
        return out

    def _serialize(self, flat: list[Any]) -> None:
        """Turn buffered death events (see :data:`Record`) into pending lines, grouped by hour.

        Dead letters of one burst differ only in their times and bodies: everything else comes
        from a template cached per (names, reason, outcome, count, property octets), so most
        lines are one ``bytes`` formatting operation, not a ``json.dumps``.
        """
        body_bytes = self.body_bytes
        templates = self._templates
        if len(templates) > 256:
            templates.clear()
        out = self._pending
        tail = b',"body_b64":null,"body_truncated":false'
        last_enqueued, enqueued = -1, b"null"
        last_time, head = -1, b""
        context: tuple[Any, ...] = ()
        cache: dict[tuple[Any, ...], tuple[bytes, bytes, bytes]] = {}
        group_hour, group_time, nbytes = -1, 0, 0
        lines: list[bytes] = []
        i, end = 0, len(flat)
        while i < end:
            time_ms, vhost, queue, reason, dlx, policy, limit, n = flat[i : i + HEADER_FIELDS]
            i += HEADER_FIELDS
            stop = i + n * ITEM_FIELDS
            event = (vhost, queue, reason, dlx, policy, limit)
            if event != context:
                context = event
                cached = templates.get(context)
                if cached is None or len(cached) > 4096:
                    cached = templates[context] = {}
                cache = cached
            if time_ms != last_time:
                last_time = time_ms
                head = b"%b%d" % (LINE_HEAD, time_ms)
                if time_ms // HOUR_MS != group_hour:
                    if lines:
                        out.append((group_time, lines, nbytes))
                    group_hour, group_time, nbytes, lines = time_ms // HOUR_MS, time_ms, 0, []
            for j in range(i, stop, ITEM_FIELDS):
                message, enqueued_at, count, dlx_key, drop_reason = flat[j : j + ITEM_FIELDS]
                try:
                    key = (
                        count,
                        dlx_key,
                        drop_reason,
                        message.exchange,
                        message.routing_key,
                        message.raw_props,
                    )
                    parts = cache.get(key)
                    if parts is None:
                        parts = cache[key] = self._template(context, key)
                    if enqueued_at != last_enqueued:
                        last_enqueued = enqueued_at
                        enqueued = b"%d" % enqueued_at if enqueued_at else b"null"
                    body = message.body
                    if body_bytes:
                        cut = b"true" if len(body) > body_bytes else b"false"
                        b64 = base64.b64encode(body[:body_bytes])
                        tail = b',"body_b64":"%b","body_truncated":%b' % (b64, cut)
                    line = b"%b%b%b%b%d%b%b" % (head, parts[0], enqueued, parts[1], len(body), tail, parts[2])
                except Exception:
                    self._lost_in_writer += 1
                    self._error(
                        "dead-letter archive: cannot serialize a dead letter from queue '%s'",
                        queue,
                        exc_info=True,
                    )
                    continue
                lines.append(line)
                nbytes += len(line)
            i = stop
        if lines:
            out.append((group_time, lines, nbytes))

    def _template(self, context: tuple[Any, ...], key: tuple[Any, ...]) -> tuple[bytes, bytes, bytes]:
        """The constant parts of a line: from ``reason`` to ``original_expiration``, from
        ``message_id`` to ``headers``, and the ``limit`` fields that end it (JSON fragments, each with
        its leading comma; the last one closes the line)."""
        vhost, queue, reason, dlx, policy, limit = context
        count, dlx_key, drop_reason, exchange, routing_key, raw = key
        content_type, correlation_id, expiration, message_id, headers = read_props(raw)
        middle = fragment(
            {
                "reason": reason,
                "vhost": vhost,
                "queue": queue,
                "exchange": exchange,
                "routing_keys": self._routing_keys(routing_key, headers),
                "dlx": dlx,
                "dlx_routing_key": dlx_key,
                "policy": policy,
                "outcome": "routed" if drop_reason is None else "dropped",
                "drop_reason": drop_reason,
                "death_count": count if count is not None else self._death_count(headers, queue, reason),
                "original_expiration": expiration,
            }
        )
        props = fragment(
            {
                "message_id": message_id,
                "correlation_id": correlation_id,
                "content_type": content_type,
                "headers": headers_to_json(headers) if headers is not None else None,
            }
        )
        name, value, source = killer(reason, limit, expiration) or (None, None, None)
        end = fragment({"limit": name, "limit_value": value, "limit_source": source}) + b"}\n"
        return middle + b',"enqueued_ms":', props + b',"body_size":', end

    def _close_files(self) -> None:
        try:
            self.files.close()
        except OSError as exc:
            self.write_errors += 1
            self._error("dead-letter archive: cannot close files in %s: %s", self.directory, exc)

    # -- shutdown ---------------------------------------------------------------------------------
    def close_sync(self, timeout: float = 10.0) -> None:
        """Write what is buffered, close and rename the open files; idempotent.

        After it, :meth:`record` counts dead letters as lost.
        """
        with self._cond:
            if self._closed:
                return
            self._closed = self._closing = True
            self._cond.notify()
        thread = self._thread
        if thread is not None:
            atexit.unregister(self.close_sync)
            thread.join(timeout)
            if thread.is_alive():
                log.error("dead-letter archive: writer did not finish within %g s", timeout)
                return
        else:
            self.write_pending()
            self._close_files()
        if self._pending:
            log.error("dead-letter archive: %d line(s) could not be written at shutdown", self.waiting)
        if self.lost:
            log.warning("dead-letter archive: %d dead letter(s) were not archived", self.lost)

    async def close(self) -> None:
        """Async :meth:`close_sync` for broker shutdown (runs in a worker thread)."""
        await asyncio.to_thread(self.close_sync)

    @property
    def closed(self) -> bool:
        """True once :meth:`close_sync` has started."""
        return self._closed

    @property
    def waiting(self) -> int:
        """Dead letters buffered or serialized but not yet written."""
        return self._added - self._taken + sum(len(group[1]) for group in self._pending)

    @property
    def written(self) -> int:
        """Lines written so far."""
        return self.files.lines_written


class NullArchive:
    """The archive when ``OTTERMQ_DLX_ARCHIVE_DIR`` is unset: same interface, does nothing."""

    enabled = False
    closed = False
    lost = 0
    write_errors = 0
    written = 0
    waiting = 0

    def record(
        self,
        time_ms: int,
        vhost: str,
        queue: str,
        reason: str,
        dlx: str | None,
        items: list[Any],
        policy: str | None = None,
        limit: Limit | None = None,
    ) -> None:
        """Ignore dead letters."""

    def start(self) -> None:
        """Nothing to start."""

    def write_pending(self) -> bool:
        """Nothing to write."""
        return True

    def close_sync(self, timeout: float = 10.0) -> None:
        """Nothing to close."""

    async def close(self) -> None:
        """Nothing to close."""
