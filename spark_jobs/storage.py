"""Small-file I/O on local paths and Hadoop URIs (``file://``, ``hdfs://``, ``s3a://`` ...).

DataFrames are read and written by Spark itself; this module handles what Spark has no writer
for (``summary.json``, ``report.md``, charts, manifests, replay logs) and the look at an input
path that decides between JSON Lines and Parquet. Local paths use the standard library; any other
scheme goes through the Hadoop ``FileSystem`` of the running SparkSession (so the same
credentials and connectors apply as for the DataFrames).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from pyspark.sql import SparkSession

__all__ = [
    "COMPACT_MARKER",
    "detect_format",
    "is_local",
    "join",
    "list_files",
    "local_path",
    "open_output",
    "read_bytes",
    "write_bytes",
]

#: Written by compact next to its Parquet output; its presence marks a compacted archive.
COMPACT_MARKER = "_ottermq_compact.json"

_JSON_SUFFIXES = (".jsonl", ".jsonl.gz")


def is_local(uri: str) -> bool:
    """True for plain paths and ``file:`` URIs."""
    scheme = urlparse(uri).scheme
    return scheme in ("", "file") or len(scheme) == 1  # a Windows drive letter


def local_path(uri: str) -> Path:
    """The filesystem path of a local path or ``file:`` URI."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(parsed.path)
    return Path(uri)


def join(base: str, *parts: str) -> str:
    """Join path segments onto a path or URI with ``/``."""
    out = base.rstrip("/")
    for part in parts:
        out += "/" + part.strip("/")
    return out


def _jvm_fs(spark: SparkSession, uri: str) -> tuple[Any, Any]:
    sc: Any = spark.sparkContext
    path = sc._jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(sc._jsc.hadoopConfiguration()), path


def write_bytes(spark: SparkSession, uri: str, data: bytes) -> None:
    """Create or replace the file ``uri`` with ``data`` (parent directories are created)."""
    if is_local(uri):
        path = local_path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return
    fs, path = _jvm_fs(spark, uri)
    stream = fs.create(path, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()


class _HadoopWriter:
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, data: bytes) -> None:
        self._stream.write(bytearray(data))


@contextmanager
def open_output(spark: SparkSession, uri: str) -> Iterator[Any]:
    """A writable (``.write(bytes)``) for the file ``uri``, created or replaced when the block ends."""
    if is_local(uri):
        path = local_path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("wb") as out:
            yield out
        os.replace(tmp, path)
        return
    fs, path = _jvm_fs(spark, uri)
    stream = fs.create(path, True)
    try:
        yield _HadoopWriter(stream)
    finally:
        stream.close()


def read_bytes(spark: SparkSession, uri: str) -> bytes:
    """The content of the file ``uri``.

    Raises:
        FileNotFoundError: a local file that does not exist (remote: the Hadoop exception).
    """
    if is_local(uri):
        return local_path(uri).read_bytes()
    fs, path = _jvm_fs(spark, uri)
    sc: Any = spark.sparkContext
    stream = fs.open(path)
    try:
        return bytes(sc._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def list_files(spark: SparkSession, uri: str, limit: int = 100_000) -> Iterator[str]:
    """Files under ``uri`` (a file, a directory walked recursively, or a glob), at most ``limit``."""
    count = 0
    if is_local(uri):
        for match in sorted(glob.glob(str(local_path(uri)))):
            if os.path.isfile(match):
                yield match
                count += 1
                continue
            for root, dirs, files in os.walk(match):
                dirs.sort()
                for name in sorted(files):
                    yield os.path.join(root, name)
                    count += 1
                    if count >= limit:
                        return
        return
    fs, path = _jvm_fs(spark, uri)
    for status in fs.globStatus(path) or []:
        if status.isFile():
            yield str(status.getPath().toString())
            count += 1
            continue
        files = fs.listFiles(status.getPath(), True)
        while files.hasNext():
            yield str(files.next().getPath().toString())
            count += 1
            if count >= limit:
                return


def detect_format(spark: SparkSession, uri: str) -> Literal["json", "parquet"]:
    """Guess whether ``uri`` holds an archive in JSON Lines or Parquet (from compact).

    Decided by the name (``*.parquet``, ``*.jsonl``), else by the first data file found under it
    or compact's marker file; JSON Lines when nothing tells.
    """
    name = uri.rstrip("/")
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(_JSON_SUFFIXES):
        return "json"
    for file in list_files(spark, uri, limit=10_000):
        base = file.rsplit("/", 1)[-1]
        if base == COMPACT_MARKER or base.endswith(".parquet"):
            return "parquet"
        if base.endswith(_JSON_SUFFIXES):
            return "json"
    return "json"


@dataclass(frozen=True)
class LocalInput:
    """What a local archive path holds, seen before Spark starts (``preflight``)."""

    files: int  # complete archive files (``*.jsonl``, ``*.jsonl.gz``, ``*.parquet``)
    parts: int  # ``*.jsonl.part`` files still being written (never read)
    bytes: int = 0  # the archive files' total size


def preflight(paths: list[str], open_files: bool = False) -> tuple[LocalInput | None, str | None]:
    """Check local archive paths before Spark starts.

    Args:
        paths: the job's archive paths.
        open_files: the job reads the complete lines of ``*.jsonl.part`` files too (``report``), so a
            path holding only those is no problem.

    Returns:
        The files found (None when a path is a Hadoop URI or a glob: Spark reads those) and an
        error for people (a path that does not exist, or one holding no archive file), or None.
    """
    files = parts = size = 0
    for uri in paths:
        if not is_local(uri) or any(c in uri for c in "*?["):
            return None, None
        path = local_path(uri)
        if not path.exists():
            return None, f"{uri}: no such file or directory"
        candidates = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        found = [p for p in candidates if p.name.endswith((*_JSON_SUFFIXES, ".parquet"))]
        waiting = [p for p in candidates if p.name.endswith(".jsonl.part")]
        files += len(found)
        parts += len(waiting)
        size += sum(p.stat().st_size for p in found)
        if not found and not (open_files and waiting):
            hint = f" ({len(waiting)} .jsonl.part file(s) still being written)" if waiting else ""
            return LocalInput(files, parts), f"{uri}: no archive files (*.jsonl, *.jsonl.gz, *.parquet){hint}"
    return LocalInput(files, parts, size), None


def check_inputs(paths: list[str], log: Any) -> bool:
    """:func:`preflight` for a job's ``main``: log the problem (False: exit 2 before Spark starts), or
    how many ``.jsonl.part`` files will be skipped."""
    return inspect_inputs(paths, log)[0]


def inspect_inputs(paths: list[str], log: Any, open_files: bool = False) -> tuple[bool, int | None]:
    """:func:`check_inputs`, plus the local archive files' total size (None: a URI or a glob); with
    ``open_files`` the ``.jsonl.part`` files are the caller's to read (``open_files.py``)."""
    found, problem = preflight(paths, open_files)
    if problem:
        log.error("%s", problem)
        return False, None
    if found is not None and found.parts and not open_files:
        log.info("%d .jsonl.part file(s) still being written are skipped", found.parts)
    return True, None if found is None else found.bytes


def move_single_file(spark: SparkSession, directory: str, suffix: str, target: str) -> None:
    """Move the one ``*suffix`` file Spark wrote under ``directory`` to ``target`` (replacing it), then
    delete ``directory``.

    Raises:
        OSError: not exactly one such file.
    """
    fs, folder = _jvm_fs(spark, directory)
    parts = [s.getPath() for s in fs.listStatus(folder) if s.getPath().getName().endswith(suffix)]
    if len(parts) != 1:
        raise OSError(f"{directory}: expected one {suffix} file, found {len(parts)}")
    target_fs, target_path = _jvm_fs(spark, target)
    if target_fs.exists(target_path):
        target_fs.delete(target_path, False)
    if not fs.rename(parts[0], target_path):
        raise OSError(f"cannot move {parts[0]} to {target}")
    fs.delete(folder, True)
