"""Deterministic synthetic dead-letter archives for tests and benchmarks.

``write_archive(root, n)`` writes ``n`` records in the broker's layout,
``root/YYYY-MM-DD/HH/deadletters-<chunk>-<seq>.jsonl``, spread evenly over ``span_hours``
from ``start_ms``. The same ``(n, seed, shape, schema, ...)`` always gives byte-identical files,
whatever ``workers`` is: records are generated in fixed chunks of :data:`CHUNK` each seeded from
``(seed, chunk)``, and each chunk's records lie in its own slice of the time span.

Distributions (loosely modelled on a service mesh with a retry topology): a dozen queues in two
vhosts with Zipf-like volumes, each with its own mix of reasons and dead-letter set-up
(routed, or dropped for ``no_dlx``/``dlx_missing``/``no_route``/``cycle``); log-normal
time in queue; expiries at the message's ``expiration`` plus a small lateness, or at the queue's
TTL; typed headers with ``x-death``; bodies of a few hundred bytes, cut to 1 KiB in the archive
above that.

Two shapes:

- ``retry-loops`` (the default, what real archives look like): each message has its own id (10 %
  have none) and most die once, but ~8 % are in a retry loop: they die 2 to 6 times in the same
  queue with ``death_count`` 1, 2, ... k and gaps of seconds to minutes between deaths (a loop
  through ``orders`` also dies in ``orders.retry`` each time, by its 5 s TTL), and ~5 % are
  fanned out: the same id dies in 2 or 3 queues of its vhost. A few single deaths carry a
  ``death_count`` above 1 (their earlier deaths predate the archive). The reason mix moves over
  the span: ``orders`` expires more and more (rising), ``payments`` hits its delivery limit less
  and less (falling). Schema 2 by default: ``limit``, ``limit_value`` and ``limit_source`` name
  the limit that killed each message, consistent with ``reason`` and with the queue's own
  settings (argument, policy or operator policy; a message's own ``expiration`` when it is the
  lower of the two TTLs); ``schema=1`` writes the same records without those three fields.
- ``uniform`` (the generator's first shape, kept for comparisons): schema 1, records drawn
  independently: ids from a pool of ``n / 3`` (so ids repeat at random, across queues too) and a
  geometric ``death_count`` unrelated to the other deaths of the same id.

The queues and the parts of a record both shapes draw alike are in
:mod:`ottermq.spark_jobs.generate_queues`, the shapes in :mod:`ottermq.spark_jobs.generate_loops`
and :mod:`ottermq.spark_jobs.generate_uniform`; this module seeds the chunks and writes the files.

Pure Python, no Spark: ``python -m ottermq.spark_jobs.generate OUT --records N [--shape uniform]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import multiprocessing
import os
import random
import sys
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ottermq.spark_jobs.generate_loops import loop_chunk
from ottermq.spark_jobs.generate_uniform import uniform_record

__all__ = ["CHUNK", "DEFAULT_START_MS", "SHAPES", "generate_records", "main", "write_archive", "write_jsonl"]

log = logging.getLogger(__name__)

CHUNK = 100_000
DEFAULT_START_MS = 1_714_521_600_000  # 2024-05-01T00:00:00Z
HOUR_MS = 3_600_000

SHAPES = ("retry-loops", "uniform")


def generate_records(
    n: int,
    *,
    seed: int = 7,
    start_ms: int = DEFAULT_START_MS,
    span_hours: float = 24.0,
    first: int = 0,
    last: int | None = None,
    chunk_size: int = CHUNK,
    shape: str = "retry-loops",
    schema: int = 2,
) -> Iterator[dict[str, Any]]:
    """Records ``first`` to ``last`` (default ``n``) of an ``n``-record archive, in time order.

    The stream depends on ``(n, seed, start_ms, span_hours, chunk_size, shape, schema)`` only
    (``schema`` only for the ``retry-loops`` shape: ``uniform`` is schema 1).

    Raises:
        ValueError: an unknown shape or schema.
    """
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, not {shape!r}")
    if schema not in (1, 2):
        raise ValueError(f"schema must be 1 or 2, not {schema!r}")
    span_ms = int(span_hours * HOUR_MS)
    stop = n if last is None else min(last, n)
    index = first
    while index < stop:
        chunk = index // chunk_size
        rng = random.Random(seed * 1_000_003 + chunk)
        end = min((chunk + 1) * chunk_size, n)
        if shape == "retry-loops":
            records = loop_chunk(rng, chunk, chunk * chunk_size, end, n, start_ms, span_ms, schema)
            yield from records[index - chunk * chunk_size : min(end, stop) - chunk * chunk_size]
        else:
            for skip in range(chunk * chunk_size, index):  # the same stream when starting mid-chunk
                uniform_record(rng, skip, n, start_ms, span_ms)
            for i in range(index, min(end, stop)):
                yield uniform_record(rng, i, n, start_ms, span_ms)
        index = (chunk + 1) * chunk_size


def _hour_dir(time_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(time_ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d/%H")


def write_jsonl(path: Path, records: Iterable[dict[str, Any] | str]) -> int:
    """Write records (dicts, or raw lines written as given) to one JSON Lines file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(record if isinstance(record, str) else json.dumps(record, separators=(",", ":")))
            out.write("\n")
            count += 1
    return count


@dataclass(frozen=True)
class _Job:
    root: str
    chunk: int
    n: int
    seed: int
    start_ms: int
    span_hours: float
    per_file: int
    chunk_size: int
    shape: str
    schema: int


def _write_chunk(job: _Job) -> list[str]:
    files: list[str] = []
    current: tuple[str, Any] | None = None
    written = 0
    seq = 0
    try:
        for record in generate_records(
            job.n,
            seed=job.seed,
            start_ms=job.start_ms,
            span_hours=job.span_hours,
            first=job.chunk * job.chunk_size,
            last=(job.chunk + 1) * job.chunk_size,
            chunk_size=job.chunk_size,
            shape=job.shape,
            schema=job.schema,
        ):
            hour = _hour_dir(record["time_ms"])
            if current is None or current[0] != hour or written >= job.per_file:
                if current is not None:
                    current[1].close()
                path = Path(job.root) / hour / f"deadletters-{job.chunk:05d}-{seq:04d}.jsonl"
                path.parent.mkdir(parents=True, exist_ok=True)
                current = (hour, path.open("w", encoding="utf-8"))
                files.append(str(path))
                written = 0
                seq += 1
            current[1].write(json.dumps(record, separators=(",", ":")))
            current[1].write("\n")
            written += 1
    finally:
        if current is not None:
            current[1].close()
    return files


def write_archive(
    root: Path | str,
    n: int,
    *,
    seed: int = 7,
    start_ms: int = DEFAULT_START_MS,
    span_hours: float = 24.0,
    records_per_file: int = 50_000,
    workers: int = 1,
    chunk_size: int = CHUNK,
    shape: str = "retry-loops",
    schema: int = 2,
) -> list[Path]:
    """Write an ``n``-record archive under ``root`` in the broker's layout; return its files.

    ``workers`` processes write chunks of ``chunk_size`` records in parallel; the files' content
    does not depend on ``workers``. ``shape`` and ``schema``: see :func:`generate_records`.
    """
    list(generate_records(0, shape=shape, schema=schema))  # checks both before any process starts
    chunks = [
        _Job(str(root), chunk, n, seed, start_ms, span_hours, records_per_file, chunk_size, shape, schema)
        for chunk in range((n + chunk_size - 1) // chunk_size)
    ]
    if workers > 1 and len(chunks) > 1:
        # spawn, not fork: a forked child would share (and at exit, close) the Spark gateway's
        # sockets when a SparkSession is open in this process
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=spawn) as pool:
            results = list(pool.map(_write_chunk, chunks))
    else:
        results = [_write_chunk(chunk) for chunk in chunks]
    return [Path(file) for files in results for file in files]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ottermq.spark_jobs.generate OUT --records N``: write a synthetic archive."""
    parser = argparse.ArgumentParser(
        prog="python -m ottermq.spark_jobs.generate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out", type=Path, help="archive root to create")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--span-hours", type=float, default=24.0)
    parser.add_argument("--records-per-file", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--shape",
        choices=SHAPES,
        default="retry-loops",
        help="retry-loops: ids that die again and again and in several queues (default); uniform: the "
        "first generator's independent records",
    )
    parser.add_argument(
        "--schema", type=int, choices=(1, 2), default=2, help="archive schema of the retry-loops shape"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    files = write_archive(
        args.out,
        args.records,
        seed=args.seed,
        span_hours=args.span_hours,
        records_per_file=args.records_per_file,
        workers=args.workers,
        shape=args.shape,
        schema=args.schema,
    )
    log.info("wrote %d records in %d files under %s", args.records, len(files), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
