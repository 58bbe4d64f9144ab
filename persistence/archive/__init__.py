"""Dead-letter archive: every dead letter as one JSON line, written off the event loop.

The record format (archive schema v2) is the contract with ``spark_jobs/``; see ``SCHEMA_KEYS``
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
wiring passes in (``ottermq.dlx``), so this package does not depend on the dead-lettering package.

Modules: ``records`` (the line format: typed JSON headers, property reading, ``dumps_line``; pure),
``files`` (``ArchiveFiles``: hourly folders, rotation, ``.part`` files), ``writer``
(``DeadLetterArchive``, the buffer and its thread, and ``NullArchive``).
"""

from __future__ import annotations

from .files import ArchiveFiles
from .records import (
    SCHEMA_KEYS,
    SCHEMA_VERSION,
    dumps_line,
    headers_from_json,
    headers_to_json,
    read_props,
    typed_value,
)
from .writer import ITEM_FIELDS, DeadLetterArchive, NullArchive

__all__ = [
    "ITEM_FIELDS",
    "SCHEMA_KEYS",
    "SCHEMA_VERSION",
    "ArchiveFiles",
    "DeadLetterArchive",
    "NullArchive",
    "dumps_line",
    "headers_from_json",
    "headers_to_json",
    "read_props",
    "typed_value",
]
