"""Spill files: where queues page the ready messages beyond their window (``vhost/paging.py``).

Rules:
- One directory per broker process (``<spill dir>/<pid>``), removed at exit and, when a process died
  without removing it, by the next process that starts: nothing here is ever recovered (persistent
  messages are in the store as well; transient ones die with the process, as in memory).
- A queue's pager (one per priority level) is a FIFO of segment files of at most ``SEGMENT_BYTES``:
  records are appended at the tail, read from the head with ``pread``; a segment read to its end is
  deleted, so the disk used follows the backlog. Writes are buffered (one ``write`` per
  ``WRITE_BUFFER`` octets) and flushed before the buffered records are read.
- A record is every field of an ``Entry`` and its ``Message`` (``spill_record.py``).
- A pager that cannot write (disk full, I/O error) keeps the entries it could not write, and every later
  one until it is empty again, in memory, in order: the queue goes on, the memory alarm takes over.
- Dropped entries (withdrawn, moved, over a delivery limit while on disk) are remembered by seq and left
  out when read; only entries not pulled yet can be dropped (``drop``: pulls are in push order, so an
  entry is still on disk when its seq is above every seq pulled so far).
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import shutil
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from ottermq.vhost.message import GONE, PAGED, READY, Entry

from .archive.files import pid_alive
from .spill_record import (
    BIG_BODY,
    FLAGS_AT,
    HEADER,
    HEADER_SIZE,
    IN_MEMORY,
    decode,
    encode,
    encode_parts,
    stub,
)

log = logging.getLogger(__name__)

__all__ = ["BIG_BODY", "SpillDir", "SpillPager", "decode", "encode"]

SEGMENT_BYTES: Final = 64 << 20
WRITE_BUFFER: Final = 256 << 10
READ_BLOCK: Final = 256 << 10
_IOV: Final = 1000  # buffers per pwritev (IOV_MAX is 1024 on Linux)


class _Segment:
    __slots__ = ("path", "fd", "size", "read_at", "left")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1
        self.size = 0  # octets written (the write buffer not included)
        self.read_at = 0  # offset of the next record to pull
        self.left = 0  # records not pulled yet

    def open(self) -> int:
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        return self.fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def remove(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class SpillDir:
    """One broker's spill directory (``<root>/<pid>.<n>``), made when the first queue pages, and the
    pagers in it.

    Args:
        root: the spill directory (``OTTERMQ_SPILL_DIR``, by default ``<data dir>/spill``).
    """

    _instances = itertools.count(1)  # brokers started in this process (tests start several)

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / f"{os.getpid()}.{next(SpillDir._instances)}"
        self._names = itertools.count(1)
        self._open = False

    def _make(self) -> None:
        """Create the directory, removing what dead processes left (their spill is worthless now)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for child in self.root.iterdir():
            pid = child.name.split(".", 1)[0]
            if not pid.isdigit() or pid_alive(int(pid)):
                continue  # this process, a sibling worker, or another broker on the same data dir
            shutil.rmtree(child, ignore_errors=True)
            log.info("removed the spill files of an earlier process (%s)", child)
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir()
        self._open = True

    def close(self) -> None:
        """Remove the directory (the broker stops; a later start in this process makes a new one)."""
        if self._open:
            shutil.rmtree(self.path, ignore_errors=True)
            self._open = False

    def pager(self) -> SpillPager:
        """A new pager (``vhost.paging.PagerFactory``).

        Raises:
            OSError: the directory cannot be made.
        """
        if not self._open:
            self._make()
        return SpillPager(self.path, f"q{next(self._names)}")


class SpillPager:
    """A FIFO of entries in segment files (``vhost.paging.Pager``); see the module rules."""

    def __init__(self, directory: Path, name: str) -> None:
        self._dir = directory
        self._name = name
        self._files = itertools.count(1)
        self._segments: deque[_Segment] = deque()
        self._parts: list[bytes] = []  # records not written yet (in parts), at the end of the last segment
        self._pending = 0  # their octets
        self._buffered = 0  # and records
        self._count = 0
        self._transient = 0
        self._transient_bytes = 0
        self._bytes = 0
        self._dropped: set[int] = set()
        self._max_pulled = -1
        self._front: deque[Entry] = deque()  # older than every segment, the disk did not take them
        self._big: dict[int, Entry] = {}  # seq -> entry of a stub record (``BIG_BODY``)
        self._memory: deque[Entry] | None = None  # entries the disk did not take (see the rules)

    def __len__(self) -> int:
        return self._count

    @property
    def transient(self) -> tuple[int, int]:
        return self._transient, self._transient_bytes

    @property
    def nbytes(self) -> int:
        return self._bytes

    # -- writing ------------------------------------------------------------------------------
    def push(self, entry: Entry) -> None:
        entry.state = PAGED
        self._count_in((entry,))
        if self._memory is not None:
            self._memory.append(entry)
            return
        tail = self._segments[-1] if self._segments else None
        if tail is None or tail.size + self._pending >= SEGMENT_BYTES:
            tail = self._new_segment() if self._flush() else None
            if tail is None:  # the disk failed: memory mode (see the rules)
                self._keep(entry)
                return
        parts, total = self._record(entry)
        self._parts += parts
        self._pending += total
        self._buffered += 1
        tail.left += 1
        if self._pending >= WRITE_BUFFER:
            self._flush()

    def _record(self, entry: Entry) -> tuple[tuple[bytes, ...], int]:
        """``entry``'s record in parts and its length: a stub when its body stays in memory."""
        if len(entry.message.body) > BIG_BODY:
            self._big[entry.seq] = entry
            return stub(entry.seq), HEADER_SIZE
        return encode_parts(entry)

    def _keep(self, entry: Entry) -> None:
        if self._memory is None:
            self._memory = deque()
        self._memory.append(entry)

    def push_front(self, entries: list[Entry]) -> None:
        if not entries:
            return
        parts: list[bytes] = []
        size = 0
        for e in entries:
            e.state = PAGED
            record, total = self._record(e)
            parts += record
            size += total
        segment = _Segment(self._dir / f"{self._name}-{next(self._files)}.seg")
        try:
            _write_parts(segment.open(), parts, 0)
        except OSError as exc:
            segment.remove()
            for e in entries:
                self._big.pop(e.seq, None)
            log.warning("spill: cannot page out %d messages (%s): they stay in memory", len(entries), exc)
            self._memory_front(entries)
            return
        segment.size = size
        segment.left = len(entries)
        self._segments.appendleft(segment)
        self._count_in(entries)
        self._max_pulled = min(self._max_pulled, entries[0].seq - 1)

    def _memory_front(self, entries: list[Entry]) -> None:
        """Entries older than every paged one that the disk did not take: in memory, first."""
        self._front.extendleft(reversed(entries))
        self._count_in(entries)
        self._max_pulled = min(self._max_pulled, entries[0].seq - 1)

    def _count_in(self, entries: list[Entry] | tuple[Entry, ...]) -> None:
        self._count_by(entries, 1)

    def _count_out(self, entries: list[Entry] | tuple[Entry, ...]) -> None:
        self._count_by(entries, -1)

    def _count_by(self, entries: list[Entry] | tuple[Entry, ...], sign: int) -> None:
        for entry in entries:
            size = len(entry.message.body) * sign
            self._count += sign
            self._bytes += size
            if not entry.message.persistent:
                self._transient += sign
                self._transient_bytes += size

    def _new_segment(self) -> _Segment | None:
        tail = self._segments[-1] if self._segments else None
        if tail is not None and tail is not self._segments[0]:
            tail.close()  # only the head is read, only the tail written
        segment = _Segment(self._dir / f"{self._name}-{next(self._files)}.seg")
        try:
            segment.open()
        except OSError as exc:
            log.warning("spill: cannot create %s (%s): new messages stay in memory", segment.path, exc)
            return None
        self._segments.append(segment)
        return segment

    def _flush(self) -> bool:
        """Write the buffered records; on failure they (and every later entry) stay in memory."""
        parts = self._parts
        if not parts:
            return True
        tail = self._segments[-1]
        try:
            _write_parts(tail.open(), parts, tail.size)
        except OSError as exc:
            log.warning(
                "spill: cannot write %d messages to %s (%s): they and later ones stay in memory",
                self._buffered,
                tail.path,
                exc,
            )
            try:
                os.ftruncate(tail.fd, tail.size)
            except OSError:
                pass
            kept: deque[Entry] = deque()
            at = 0
            view = b"".join(parts)
            while at < len(view):
                entry, n = self._decode(view, at, True)
                entry.state = PAGED
                kept.append(entry)
                at += n
            tail.left -= len(kept)
            self._memory = kept
            self._unbuffer()
            return False
        tail.size += self._pending
        self._unbuffer()
        return True

    def _unbuffer(self) -> None:
        self._parts = []
        self._pending = 0
        self._buffered = 0

    # -- reading ------------------------------------------------------------------------------
    def pull(self, count: int, nbytes: int) -> list[Entry]:
        out: list[Entry] = []
        got = 0
        dropped = self._dropped
        if self._front:
            got = self._from_memory(self._front, out, count, nbytes, got)
        segments = self._segments
        while len(out) < count and got < nbytes and segments:
            segment = segments[0]
            if segment is segments[-1] and self._parts:
                self._flush()
            if segment.left == 0:
                if segment is segments[-1] and self._memory is None:
                    break  # the tail, empty: keep it for the next writes
                segments.popleft().remove()
                continue
            try:
                block = os.pread(segment.open(), max(READ_BLOCK, min(nbytes - got, 8 << 20)), segment.read_at)
                if len(block) < HEADER.size:
                    raise OSError(errno.EIO, "short read")
                view = block
                at = 0
                while at + HEADER.size <= len(view) and segment.left and len(out) < count and got < nbytes:
                    total = HEADER.unpack_from(view, at)[0]
                    if at + total > len(view):
                        if at == 0:  # one record larger than the block
                            view = os.pread(segment.fd, total, segment.read_at)
                            if len(view) < total:
                                raise OSError(errno.EIO, "short read")
                        else:
                            break
                    entry, n = self._decode(view, at, True)
                    at += n
                    segment.read_at += n
                    segment.left -= 1
                    seq = entry.seq
                    if seq > self._max_pulled:
                        self._max_pulled = seq
                    if dropped and seq in dropped:
                        dropped.discard(seq)
                        continue
                    out.append(entry)
                    got += len(entry.message.body)
            except OSError as exc:
                log.error(
                    "spill: cannot read %s (%s): its %d remaining messages are lost from memory "
                    "(persistent ones come back from the store at the next start)",
                    segment.path,
                    exc,
                    segment.left,
                )
                self._count -= segment.left
                segment.left = 0
                if segment is segments[-1]:
                    self._unbuffer()
        if len(out) < count and got < nbytes and self._memory:
            self._from_memory(self._memory, out, count, nbytes, got)
            if not self._memory:
                self._memory = None
        self._count_out(out)
        for entry in out:
            entry.state = READY
        return out

    def _from_memory(self, memory: deque[Entry], out: list[Entry], count: int, nbytes: int, got: int) -> int:
        dropped = self._dropped
        while memory and len(out) < count and got < nbytes:
            entry = memory.popleft()
            if entry.state != PAGED or (dropped and entry.seq in dropped):
                dropped.discard(entry.seq)
                continue  # dropped while in memory
            if entry.seq > self._max_pulled:
                self._max_pulled = entry.seq
            out.append(entry)
            got += len(entry.message.body)
        return got

    def _decode(self, buf: bytes, at: int, take: bool) -> tuple[Entry, int]:
        """``decode``, or the entry a stub stands for (``take``: it leaves the pager)."""
        if buf[at + FLAGS_AT] & IN_MEMORY:
            seq = HEADER.unpack_from(buf, at)[1]
            return (self._big.pop(seq) if take else self._big[seq]), HEADER_SIZE
        return decode(buf, at)

    def drop(self, entry: Entry) -> bool:
        seq = entry.seq
        if seq <= self._max_pulled or seq in self._dropped:
            return False
        self._dropped.add(seq)
        entry.state = GONE
        self._count_out([entry])
        self._skip_dropped_head()
        return True

    def _skip_dropped_head(self) -> None:
        """Step over dropped records at the head, forgetting their seqs: a move that takes a paged
        backlog from its head keeps no seq per message it moved."""
        dropped = self._dropped
        segments = self._segments
        while dropped and segments:
            segment = segments[0]
            if segment.left == 0:
                return
            if segment is segments[-1] and self._parts:
                self._flush()
            try:
                head = os.pread(segment.open(), HEADER_SIZE, segment.read_at)
            except OSError:
                return  # a pull reports it
            if len(head) < HEADER_SIZE:
                return
            total, seq = HEADER.unpack_from(head, 0)[:2]
            if seq not in dropped:
                return
            dropped.discard(seq)
            self._big.pop(seq, None)
            segment.read_at += total
            segment.left -= 1
            if seq > self._max_pulled:
                self._max_pulled = seq
            if segment.left == 0 and segment is not segments[-1]:
                segments.popleft().remove()

    def entries(self) -> Iterator[Entry]:
        self._flush()
        dropped = self._dropped
        yield from (e for e in list(self._front) if e.state == PAGED and e.seq not in dropped)
        for segment in list(self._segments):
            at, left = segment.read_at, segment.left
            try:
                fd = os.open(segment.path, os.O_RDONLY)
            except OSError:
                continue
            try:
                while left:
                    head = os.pread(fd, HEADER.size, at)
                    if len(head) < HEADER.size:
                        break
                    total = HEADER.unpack_from(head, 0)[0]
                    entry, n = self._decode(os.pread(fd, total, at), 0, False)
                    at += n
                    left -= 1
                    if entry.seq not in dropped:
                        entry.state = PAGED
                        yield entry
            finally:
                os.close(fd)
        if self._memory:
            yield from (e for e in list(self._memory) if e.state == PAGED and e.seq not in dropped)

    def clear(self) -> None:
        for segment in self._segments:
            segment.remove()
        self._segments.clear()
        self._unbuffer()
        self._memory = None
        self._front.clear()
        self._big.clear()
        self._dropped.clear()
        self._count = self._transient = self._transient_bytes = self._bytes = 0


def _write_parts(fd: int, parts: list[bytes], offset: int) -> None:
    """Write ``parts`` at ``offset``, up to ``_IOV`` buffers per system call."""
    for i in range(0, len(parts), _IOV):
        chunk = parts[i : i + _IOV]
        want = sum(map(len, chunk))
        n = os.pwritev(fd, chunk, offset)
        if n < want:  # a short write: the rest in one piece
            _write_all(fd, b"".join(chunk)[n:], offset + n)
        offset += want


def _write_all(fd: int, data: bytes | bytearray, offset: int = 0) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n
