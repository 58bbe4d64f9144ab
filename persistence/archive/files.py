"""Dead-letter archive files: hourly directories, size rotation, ``.part`` until closed.

``ArchiveFiles`` is used by one thread at a time (the archive's writer, or ``ottermq dlq export``);
see the package docstring for the naming and ``.part`` rules.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from .records import line_time

log = logging.getLogger(__name__)

MAX_OPEN_FILES: Final = 4  # files of different hours kept open at once (out-of-order export)
HOUR_MS: Final = 3_600_000

Group = tuple[int, list[bytes], int]
"""Lines waiting to be written: ``(time_ms, lines, total bytes)``, one hour's worth."""


# --- files -----------------------------------------------------------------------------------------

_PART_NAME = re.compile(r"^deadletters-(\d+)-(\d+)-(\d+)\.jsonl\.part$")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts: it cannot be signalled, but lives)."""
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


class _OpenFile:
    __slots__ = ("path", "file", "size", "hour", "written_at")

    def __init__(self, path: Path, file: Any, hour: int) -> None:
        self.path = path
        self.file = file
        self.size = 0
        self.hour = hour
        self.written_at: int | None = None  # epoch ms of the last write (``close_stale``'s idle rule)


class ArchiveFiles:
    """The archive's files: hourly directories, size rotation, ``.part`` until closed.

    Used by one thread at a time (the archive's writer, or ``ottermq dlq export``).

    Args:
        directory: archive root.
        max_bytes: rotate before a file would exceed this (a larger single line gets its own file).
        pid: in file names (default: this process).
        fsync: fsync a file before closing it (and in :meth:`sync`); the broker's archive does not.
    """

    def __init__(
        self,
        directory: Path,
        max_bytes: int,
        pid: int | None = None,
        fsync: bool = False,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.clock = clock if clock is not None else (lambda: int(time.time() * 1000))  # epoch ms
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
                    rest = (line_time(lines[k]), lines[k:], nbytes - taken)
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
        f.written_at = self.clock()

    def sync(self) -> None:
        """fsync every open file (what was written so far survives a power loss).

        Raises:
            OSError: fsync failed.
        """
        for f in self._open.values():
            os.fsync(f.file.fileno())

    def close_stale(self, now_ms: int, idle_ms: int | None = None) -> None:
        """Close (and rename) the files of every hour but the current one, and, with ``idle_ms``,
        any file nothing was written to for that long (so readers see recent lines while the
        broker is quiet; the next line opens a new file).

        Raises:
            OSError: a rename failed.
        """
        hour = now_ms // HOUR_MS
        for f in list(self._open.values()):
            idle = idle_ms is not None and f.written_at is not None and now_ms - f.written_at >= idle_ms
            if f.hour != hour or idle:
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
            if pid != self.pid and pid_alive(pid):
                continue  # another live broker (or export) writing to the same directory
            try:
                _finish_part(path)
            except OSError as exc:
                log.warning("dead-letter archive: cannot finish %s: %s", path, exc)
                continue
            done += 1
        return done
