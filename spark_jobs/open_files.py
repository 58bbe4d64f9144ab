"""An archive being written: the complete lines of its open ``*.jsonl.part`` files, read safely.

The broker writes each archive file as ``….jsonl.part`` and renames it to ``….jsonl`` when it closes
it (its hour is over, it is full, ``OTTERMQ_DLX_ARCHIVE_IDLE_CLOSE`` seconds passed without a write,
or the broker stops). Right after dead letters were produced, their lines are only in open files, so
a report that reads complete files alone finds nothing (issue 41). Rules:

- An open file is only ever appended to (unbuffered writes of whole lines) and at most renamed: a
  copy of its bytes up to the last newline is a consistent prefix of it, never a torn line.
- The job then reads an explicit list of files, taken once: the complete files of that listing and
  the copies. A file renamed after the listing is not listed twice (neither its ``.jsonl`` name,
  which Spark would otherwise find in the directory, nor its copy); one renamed between the listing
  and the copy is read under its new name instead.
- Only local directories are looked at; a Hadoop URI, a glob or a compacted (Parquet) archive is read
  as it is, its open files skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ottermq.spark_jobs.storage import COMPACT_MARKER, is_local, local_path

__all__ = ["OPEN_SUFFIX", "OpenFiles", "include_open_files"]

OPEN_SUFFIX = ".jsonl.part"
_COMPLETE = (".jsonl", ".jsonl.gz")


@dataclass(frozen=True)
class OpenFiles:
    """What :func:`include_open_files` found: ``paths`` to read instead of the archive paths."""

    paths: list[str]  # the complete files listed, then the copies of the open ones
    files: int  # open files whose complete lines were copied
    lines: int  # lines copied
    bytes: int  # bytes copied


def include_open_files(paths: list[str], folder: Path) -> OpenFiles | None:
    """Copy the complete lines of the open files under ``paths`` into ``folder`` (see the rules).

    Returns:
        The files to read, or None when there is no open file to include (a path that is no local
        directory or file, or no ``*.jsonl.part`` file): then the paths are read as they are.
    """
    listed: list[Path] = []
    open_files: list[Path] = []
    for uri in paths:
        if not is_local(uri) or any(c in uri for c in "*?["):
            return None
        path = local_path(uri)
        if path.is_file():
            (open_files if path.name.endswith(OPEN_SUFFIX) else listed).append(path)
            continue
        for item in sorted(path.rglob("*")):
            name = item.name
            if name == COMPACT_MARKER or name.endswith(".parquet"):
                return None  # a compacted archive is never written to
            if name.endswith(OPEN_SUFFIX):
                open_files.append(item)
            elif name.endswith(_COMPLETE) and item.is_file():
                listed.append(item)
    if not open_files:
        return None
    copied = lines = size = 0
    for n, item in enumerate(open_files):
        try:
            data = item.read_bytes()
        except FileNotFoundError:  # closed since the listing: read it under its new name
            closed = item.with_name(item.name.removesuffix(".part"))
            if closed.is_file():
                listed.append(closed)
            continue
        end = data.rfind(b"\n") + 1
        if not end:
            continue
        target = folder / f"{n:05d}-{item.name.removesuffix('.part')}"
        target.write_bytes(data[:end])
        listed.append(target)
        copied += 1
        lines += data.count(b"\n", 0, end)
        size += end
    return OpenFiles([str(p) for p in listed], copied, lines, size)
