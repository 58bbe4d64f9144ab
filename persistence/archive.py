"""Dead-letter archive: every dead letter as one JSON line, written off the event loop.

The record format (archive schema v1) is the contract with ``spark_jobs/``; see ``SCHEMA_KEYS``
and README "Dead-letter archive". Rules:

- ``DeadLetterArchive.record`` runs on the event loop, once per death event (the entries one
  queue dead-letters at once), and only extends a deque with references: the names, and per dead
  letter the immutable ``Message`` and four small values (one flat, atomic ``extend``; no object
  per event survives for the cyclic GC to track). Beyond ``queue_limit`` dead letters waiting it
  drops new ones and counts them in ``lost`` (a warning at most every 10 s): it never blocks.
- One daemon writer thread wakes every ``FLUSH_INTERVAL`` s, or as soon as ``WAKE_AT`` dead
  letters are waiting, and takes them in chunks of ``CHUNK``: per chunk it decodes properties,
  builds the JSON lines (from cached templates: a burst differs only in times and bodies) and
  writes them with one ``write`` per file. No fsync: this is an archive, not the message store.
- The thread starts with ``start()`` (the broker's wiring) or the first dead letter, and
  finishes stale ``.part`` files first (below); ``close()`` (broker shutdown) writes what is left
  and renames the open files, and an ``atexit`` hook does the same if nobody called it.
- Files: ``<dir>/YYYY-MM-DD/HH/deadletters-<first record ms>-<pid>-<n>.jsonl`` (UTC, by the
  records' death time). A file is written as ``….jsonl.part`` and renamed to ``….jsonl`` when it
  is closed: when its hour is over, when the next line would take it past ``max_bytes`` (a single
  larger line gets a file of its own), and at ``close()``. Readers only ever see complete files.
- A write that fails (full disk, unwritable dir) is logged (at most every 10 s), counted in
  ``write_errors``, and the file is cut back to its last complete line and closed; the lines stay
  pending and are retried on the next wake (the oldest are dropped into ``lost`` beyond
  ``queue_limit``). Nothing is ever raised into the event loop.
- At start the writer closes ``.part`` files left behind by a process that is gone (a crash, or a
  second signal): they are cut after their last newline and renamed.

What ``x-death`` says about a death (``routing-keys``, ``count``) is computed by functions the
wiring passes in (``ottermq.dlx``), so this module does not depend on the dead-lettering package.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import datetime
import json
import logging
import math
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from decimal import Decimal
from itertools import chain
from pathlib import Path
from typing import Any, Final

from ottermq.amqp.errors import FrameError
from ottermq.amqp.props import PROPERTY_FLAGS, split_props
from ottermq.amqp.table import (
    Float,
    Long,
    LongLong,
    Octet,
    Short,
    ShortShort,
    Timestamp,
    ULong,
    UShort,
    decode_table,
)

__all__ = [
    "ITEM_FIELDS",
    "SCHEMA_KEYS",
    "SCHEMA_VERSION",
    "ArchiveFiles",
    "DeadLetterArchive",
    "NullArchive",
    "headers_from_json",
    "headers_to_json",
    "read_props",
    "typed_value",
]

log = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 1
SCHEMA_KEYS: Final = (
    "schema", "time_ms", "reason", "vhost", "queue", "exchange", "routing_keys", "dlx",
    "dlx_routing_key", "outcome", "drop_reason", "death_count", "original_expiration",
    "enqueued_ms", "message_id", "correlation_id", "content_type", "headers", "body_size",
    "body_b64", "body_truncated",
)  # fmt: skip
FLUSH_INTERVAL: Final = 0.5  # seconds between writes at most
RETRY_INTERVAL: Final = 1.0  # seconds before retrying after the disk refused a write
WAKE_AT: Final = 4096  # buffered dead letters that wake the writer early
CHUNK: Final = 4096  # dead letters serialized and written at a time
MAX_OPEN_FILES: Final = 4  # files of different hours kept open at once (out-of-order export)
LOG_EVERY: Final = 10.0  # seconds between repeated warnings/errors
HOUR_MS: Final = 3_600_000

RoutingKeys = Callable[[str, "Mapping[str, object] | None"], list[str]]
"""``(routing_key, headers) -> x-death routing-keys`` (``ottermq.dlx.xdeath.dead_letter_routing_keys``)."""
DeathCount = Callable[["Mapping[str, object] | None", str, str], int]
"""``(headers before the death, queue, reason) -> x-death count after it`` (``ottermq.dlx``)."""

ITEM_FIELDS: Final = 5
"""Values per dead letter in ``record``'s flat ``items`` list: ``message, enqueued_at,
death_count, dlx_routing_key, drop_reason`` (flat: no tuple per dead letter for the cyclic GC to
track while it waits for the writer)."""
Record = tuple[int, str, str, str, "str | None", int]
"""A death event in the writer's buffer: ``(time_ms, vhost, queue, reason, dlx, n)``, then ``n``
dead letters of :data:`ITEM_FIELDS` values each."""
Group = tuple[int, list[bytes], int]
"""Lines waiting to be written: ``(time_ms, lines, total bytes)``, one hour's worth."""


# --- typed JSON for header tables -----------------------------------------------------------------


def _text(value: str) -> str:
    """``value`` as valid Unicode: surrogate escapes of non-UTF-8 octets become U+FFFD."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return value


def _json_float(value: float) -> float | str:
    if math.isfinite(value):
        return float(value)
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def typed_value(value: object) -> dict[str, Any]:
    """One header value as ``{"t": tag, "v": JSON value}`` (tags as in :mod:`ottermq.amqp.table`).

    ``F`` holds an object of typed values, ``A`` a list of them, ``x`` base64, ``D`` a plain
    decimal string (``"12.50"``), ``T`` epoch seconds, ``V`` null. Non-finite floats are the
    strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; a long string that is not valid UTF-8
    has its bad octets replaced by U+FFFD.

    Raises:
        TypeError: a value no field table can hold.
    """
    if value is None:
        return {"t": "V", "v": None}
    if value is True or value is False:
        return {"t": "t", "v": value}
    tag: bytes | None = getattr(type(value), "tag", None)
    if tag is not None:
        t = tag.decode("ascii")
        if t == "S":  # LongStr: octets that are not UTF-8
            return {"t": "S", "v": bytes(value).decode("utf-8", "replace")}  # type: ignore[call-overload]
        if t == "f":
            return {"t": "f", "v": _json_float(value)}  # type: ignore[arg-type]
        return {"t": "l" if t == "L" else t, "v": int(value)}  # type: ignore[call-overload]
    if isinstance(value, str):
        return {"t": "S", "v": _text(value)}
    if isinstance(value, int):
        return {"t": "l", "v": int(value)}
    if isinstance(value, float):
        return {"t": "d", "v": _json_float(value)}
    if isinstance(value, Decimal):
        return {"t": "D", "v": format(value, "f")}
    if isinstance(value, Mapping):
        return {"t": "F", "v": headers_to_json(value)}
    if isinstance(value, list | tuple):
        return {"t": "A", "v": [typed_value(v) for v in value]}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"t": "x", "v": base64.b64encode(value).decode("ascii")}
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return {"t": "T", "v": int(value.timestamp())}
    raise TypeError(f"cannot archive {type(value).__name__} header value {value!r}")


def headers_to_json(table: Mapping[str, object]) -> dict[str, Any]:
    """A decoded header table as typed JSON (see :func:`typed_value`)."""
    return {_text(key): typed_value(value) for key, value in table.items()}


_FROM_INT: dict[str, Callable[[int], int]] = {
    "b": ShortShort, "B": Octet, "s": Short, "u": UShort, "I": Long, "i": ULong, "l": LongLong,
    "T": Timestamp,
}  # fmt: skip


def _float_from_json(v: Any) -> float:
    return float(v.replace("Infinity", "inf")) if isinstance(v, str) else float(v)


def _value_from_json(item: Mapping[str, Any]) -> object:
    t, v = item["t"], item["v"]
    wrap = _FROM_INT.get(t)
    if wrap is not None:
        return wrap(int(v))
    if t == "t":
        return bool(v)
    if t == "S":
        return str(v)
    if t == "f":
        return Float(_float_from_json(v))
    if t == "d":
        return _float_from_json(v)
    if t == "D":
        return Decimal(v)
    if t == "F":
        return headers_from_json(v)
    if t == "A":
        return [_value_from_json(x) for x in v]
    if t == "x":
        return base64.b64decode(v)
    if t == "V":
        return None
    raise ValueError(f"unknown field type tag {t!r}")


def headers_from_json(obj: Mapping[str, Any]) -> dict[str, object]:
    """The inverse of :func:`headers_to_json`: a table ``encode_table`` writes with the same tags.

    Raises:
        ValueError: an unknown tag.
    """
    return {key: _value_from_json(item) for key, item in obj.items()}


# --- properties ------------------------------------------------------------------------------------

def read_props(raw: bytes) -> tuple[str | None, str | None, str | None, str | None, dict[str, object] | None]:
    """What the archive keeps from raw property octets (flags + property list).

    Returns:
        ``(content_type, correlation_id, expiration, message_id, headers)``, ``None`` for absent ones.

    Raises:
        ValueError: truncated or malformed octets (``FrameError`` for a bad table).
    """
    try:
        fields = split_props(raw)[1]
    except FrameError as exc:
        raise ValueError(exc.text) from None

    def shortstr(name: str) -> str | None:
        octets = fields.get(PROPERTY_FLAGS[name])
        return None if octets is None else octets[1:].decode("utf-8", "replace")

    table = fields.get(PROPERTY_FLAGS["headers"])
    headers = None if table is None else decode_table(table, 0)[0]
    content_type, correlation_id = shortstr("content_type"), shortstr("correlation_id")
    return content_type, correlation_id, shortstr("expiration"), shortstr("message_id"), headers


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate in a name that was not valid UTF-8
        return text.encode("utf-8", "replace")


def dumps_line(record: Mapping[str, Any]) -> bytes:
    """One archive line: compact JSON, UTF-8, newline-terminated."""
    return _utf8(json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)) + b"\n"


def _fragment(fields: Mapping[str, Any]) -> bytes:
    """``fields`` as JSON object members with a leading comma (``,"a":1,"b":2``)."""
    return b"," + _utf8(json.dumps(fields, ensure_ascii=False, separators=(",", ":"), allow_nan=False))[1:-1]


# --- files -----------------------------------------------------------------------------------------

_PART_NAME = re.compile(r"^deadletters-(\d+)-(\d+)-(\d+)\.jsonl\.part$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _finish_part(path: Path) -> None:
    """Cut ``path`` after its last newline and rename it to ``.jsonl`` (delete it if empty)."""
    with open(path, "rb") as f:
        size = f.read().rfind(b"\n") + 1
    if size == 0:
        path.unlink()
        return
    os.truncate(path, size)
    os.rename(path, path.with_suffix(""))


_LINE_HEAD = b'{"schema":1,"time_ms":'


def _line_time(line: bytes) -> int:
    """The ``time_ms`` of an archive line (every line starts with ``schema`` then ``time_ms``)."""
    return int(line[len(_LINE_HEAD) : line.index(b",", len(_LINE_HEAD))])


class _OpenFile:
    __slots__ = ("path", "file", "size", "hour")

    def __init__(self, path: Path, file: Any, hour: int) -> None:
        self.path = path
        self.file = file
        self.size = 0
        self.hour = hour


class ArchiveFiles:
    """The archive's files: hourly directories, size rotation, ``.part`` until closed.

    Used by one thread at a time (the archive's writer, or ``ottermq dlq export``).

    Args:
        directory: archive root.
        max_bytes: rotate before a file would exceed this (a larger single line gets its own file).
        pid: in file names (default: this process).
        fsync: fsync a file before closing it (and in :meth:`sync`); the broker's archive does not.
    """

    def __init__(self, directory: Path, max_bytes: int, pid: int | None = None, fsync: bool = False) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.fsync = fsync
        self.pid = os.getpid() if pid is None else pid
        self.lines_written = 0
        self._open: dict[int, _OpenFile] = {}  # hour index -> file, least recently used first
        self._n = 0

    def _new_file(self, time_ms: int) -> _OpenFile:
        hour = time_ms // HOUR_MS
        when = datetime.datetime.fromtimestamp(hour * 3600, tz=datetime.UTC)
        folder = self.directory / when.strftime("%Y-%m-%d") / when.strftime("%H")
        folder.mkdir(parents=True, exist_ok=True)
        while True:
            self._n += 1
            path = folder / f"deadletters-{time_ms}-{self.pid}-{self._n}.jsonl.part"
            if path.with_suffix("").exists():
                continue
            try:
                file = open(path, "xb", buffering=0)  # noqa: SIM115 - closed in _close
            except FileExistsError:
                continue
            return _OpenFile(path, file, hour)

    def _close(self, f: _OpenFile) -> None:
        self._open.pop(f.hour, None)
        try:
            if self.fsync and f.size:
                os.fsync(f.file.fileno())
        finally:
            with contextlib.suppress(OSError):
                f.file.close()
        if f.size == 0:
            with contextlib.suppress(OSError):
                f.path.unlink()
            return
        os.rename(f.path, f.path.with_suffix(""))

    def _file_for(self, time_ms: int, length: int) -> _OpenFile:
        hour = time_ms // HOUR_MS
        f = self._open.get(hour)
        if f is not None and f.size and f.size + length > self.max_bytes:
            self._close(f)  # size rotation
            f = None
        if f is None:
            while len(self._open) >= MAX_OPEN_FILES:
                self._close(next(iter(self._open.values())))
            f = self._new_file(time_ms)
        else:
            del self._open[hour]
        self._open[hour] = f  # (re)inserted last: most recently used
        return f

    def write(self, groups: deque[Group]) -> None:
        """Write groups of lines, removing what is in a file from ``groups``.

        A group is ``(time_ms, lines, their total bytes)``: lines filed under the same hour.
        What goes to the same file goes out in one ``write``.

        Raises:
            OSError: the disk refused; the file is cut back to its last complete line and closed,
                and the unwritten lines are still in ``groups``.
        """
        while groups:
            time_ms, first, _ = groups[0]
            f = self._file_for(time_ms, len(first[0]))
            hour, size, limit = f.hour, f.size, self.max_bytes
            chunk: list[bytes] = []
            whole = 0
            rest: Group | None = None
            for t, lines, nbytes in groups:
                if t // HOUR_MS != hour:
                    break
                if size + nbytes <= limit:
                    chunk += lines
                    size += nbytes
                    whole += 1
                    continue
                k = taken = 0
                for line in lines:  # as many as fit (a fresh file always takes one line)
                    if size + len(line) > limit and (chunk or k):
                        break
                    size += len(line)
                    taken += len(line)
                    k += 1
                chunk += lines[:k]
                if k == len(lines):
                    whole += 1
                elif k:
                    rest = (_line_time(lines[k]), lines[k:], nbytes - taken)
                break
            self._write_chunk(f, b"".join(chunk))
            self.lines_written += len(chunk)
            for _ in range(whole):
                groups.popleft()
            if rest is not None:
                groups[0] = rest

    def _write_chunk(self, f: _OpenFile, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                n = f.file.write(view)
                view = view[n:]
        except OSError:
            self._open.pop(f.hour, None)
            try:
                os.ftruncate(f.file.fileno(), f.size)
            except OSError:  # leave it as .part: the next start cuts it after its last newline
                with contextlib.suppress(OSError):
                    f.file.close()
                raise
            with contextlib.suppress(OSError):
                self._close(f)
            raise
        f.size += len(data)

    def sync(self) -> None:
        """fsync every open file (what was written so far survives a power loss).

        Raises:
            OSError: fsync failed.
        """
        for f in self._open.values():
            os.fsync(f.file.fileno())

    def close_stale(self, now_ms: int) -> None:
        """Close (and rename) the files of every hour but the current one.

        Raises:
            OSError: a rename failed.
        """
        hour = now_ms // HOUR_MS
        for f in [f for f in self._open.values() if f.hour != hour]:
            self._close(f)

    def close(self) -> None:
        """Close and rename every open file.

        Raises:
            OSError: a rename failed (the others are still attempted).
        """
        error: OSError | None = None
        for f in list(self._open.values()):
            try:
                self._close(f)
            except OSError as exc:
                error = exc
        if error is not None:
            raise error

    def recover(self) -> int:
        """Finish ``.part`` files left by processes that are gone; returns how many."""
        done = 0
        for path in self.directory.glob("*/*/deadletters-*.jsonl.part"):
            match = _PART_NAME.match(path.name)
            if match is None:
                continue
            pid = int(match.group(2))
            if pid != self.pid and _pid_alive(pid):
                continue  # another live broker (or export) writing to the same directory
            try:
                _finish_part(path)
            except OSError as exc:
                log.warning("dead-letter archive: cannot finish %s: %s", path, exc)
                continue
            done += 1
        return done


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
    ) -> None:
        self.directory = Path(directory)
        self.body_bytes = body_bytes
        self.queue_limit = queue_limit
        self.files = ArchiveFiles(self.directory, max_bytes)
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
        self._templates: dict[tuple[Any, ...], dict[tuple[Any, ...], tuple[bytes, bytes]]] = {}
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
        self, time_ms: int, vhost: str, queue: str, reason: str, dlx: str | None, items: list[Any]
    ) -> None:
        """Archive the dead letters of one death event (cheap: appends references; never blocks
        or raises).

        Args:
            time_ms: time of death, epoch ms.
            vhost, queue, reason: where and why they died.
            dlx: the queue's ``x-dead-letter-exchange`` (``None`` when it has none).
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
        self._buf.extend(chain((time_ms, vhost, queue, reason, dlx, n), items))
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
            self.files.close_stale(self._clock())
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
            self._error("dead-letter archive: cannot write to %s: %s (%d line(s) waiting, %d lost)",
                        self.directory, exc, waiting, self.lost)
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
            header = [popleft() for _ in range(6)]
            n = header[5]
            k = min(n, budget - taken)
            header[5] = k
            out += header
            out += [popleft() for _ in range(k * ITEM_FIELDS)]
            if k < n:  # record() only appends on the right: the front is ours
                buf.extendleft(reversed((*header[:5], n - k)))
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
        tail = b',"body_b64":null,"body_truncated":false}\n'
        last_enqueued, enqueued = -1, b"null"
        last_time, head = -1, b""
        context: tuple[Any, ...] = ()
        cache: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}
        group_hour, group_time, nbytes = -1, 0, 0
        lines: list[bytes] = []
        i, end = 0, len(flat)
        while i < end:
            time_ms, vhost, queue, reason, dlx, n = flat[i : i + 6]
            i += 6
            stop = i + n * ITEM_FIELDS
            event = (vhost, queue, reason, dlx)
            if event != context:
                context = event
                cached = templates.get(context)
                if cached is None or len(cached) > 4096:
                    cached = templates[context] = {}
                cache = cached
            if time_ms != last_time:
                last_time = time_ms
                head = b"%b%d" % (_LINE_HEAD, time_ms)
                if time_ms // HOUR_MS != group_hour:
                    if lines:
                        out.append((group_time, lines, nbytes))
                    group_hour, group_time, nbytes, lines = time_ms // HOUR_MS, time_ms, 0, []
            for j in range(i, stop, ITEM_FIELDS):
                message, enqueued_at, count, dlx_key, drop_reason = flat[j : j + ITEM_FIELDS]
                try:
                    key = (
                        count, dlx_key, drop_reason, message.exchange, message.routing_key, message.raw_props
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
                        tail = b',"body_b64":"%b","body_truncated":%b}\n' % (b64, cut)
                    line = b"%b%b%b%b%d%b" % (head, parts[0], enqueued, parts[1], len(body), tail)
                except Exception:
                    self._lost_in_writer += 1
                    self._error("dead-letter archive: cannot serialize a dead letter from queue '%s'",
                                queue, exc_info=True)
                    continue
                lines.append(line)
                nbytes += len(line)
            i = stop
        if lines:
            out.append((group_time, lines, nbytes))

    def _template(self, context: tuple[Any, ...], key: tuple[Any, ...]) -> tuple[bytes, bytes]:
        """The constant parts of a line: from ``reason`` to ``original_expiration``, and from
        ``message_id`` to ``headers`` (JSON fragments, each with its leading comma)."""
        vhost, queue, reason, dlx = context
        count, dlx_key, drop_reason, exchange, routing_key, raw = key
        content_type, correlation_id, expiration, message_id, headers = read_props(raw)
        middle = _fragment({
            "reason": reason,
            "vhost": vhost,
            "queue": queue,
            "exchange": exchange,
            "routing_keys": self._routing_keys(routing_key, headers),
            "dlx": dlx,
            "dlx_routing_key": dlx_key,
            "outcome": "routed" if drop_reason is None else "dropped",
            "drop_reason": drop_reason,
            "death_count": count if count is not None else self._death_count(headers, queue, reason),
            "original_expiration": expiration,
        })
        props = _fragment({
            "message_id": message_id,
            "correlation_id": correlation_id,
            "content_type": content_type,
            "headers": headers_to_json(headers) if headers is not None else None,
        })
        return middle + b',"enqueued_ms":', props + b',"body_size":'

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
        self, time_ms: int, vhost: str, queue: str, reason: str, dlx: str | None, items: list[Any]
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
