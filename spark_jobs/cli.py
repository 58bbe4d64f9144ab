"""Entry points for ``ottermq dlq report|compact|select|replay|watch`` (the broker's CLI calls these lazily).

Each takes the arguments after the sub-command and returns an exit status: 0 success, 1 the
replay left messages unconfirmed, 2 bad input or a missing optional dependency. This module
imports nothing heavy: pyspark is imported when a command runs, and a missing pyspark gives a
one-line hint instead of a traceback.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable, Sequence

__all__ = ["compact_main", "replay_main", "report_main", "select_main", "watch_main"]

log = logging.getLogger(__name__)

_HINT = "the dead-letter analytics need pyspark (and Java 17+): pip install 'ottermq[spark]'"


def _run(module: str, function: str, argv: Sequence[str] | None) -> int:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        sys.stderr.write(f"error: {_HINT}\n")
        return 2
    entry: Callable[[Sequence[str] | None], int] = getattr(
        importlib.import_module(f"ottermq.spark_jobs.{module}"), function
    )
    return entry(argv)


def report_main(argv: Sequence[str] | None = None) -> int:
    """``ottermq dlq report ARCHIVE... --out DIR [--retry-threshold N] [--top N] [--master URL]``."""
    return _run("report", "main", argv)


def compact_main(argv: Sequence[str] | None = None) -> int:
    """``ottermq dlq compact ARCHIVE... --out DIR [--mode overwrite|append|overwrite-dates]``."""
    return _run("compact", "main", argv)


def select_main(argv: Sequence[str] | None = None) -> int:
    """``ottermq dlq select ARCHIVE... --out SET [--reason R] [--queue Q] [--since T] [--until T] ...``."""
    return _run("replay", "select_main", argv)


def replay_main(argv: Sequence[str] | None = None) -> int:
    """``ottermq dlq replay SET --url AMQP_URL --exchange X [--routing-key K] [--rate N]``."""
    return _run("replay", "publish_main", argv)


def watch_main(argv: Sequence[str] | None = None) -> int:
    """``ottermq dlq watch ARCHIVE --out DIR [--alert RULE] [--once]``."""
    return _run("watch", "main", argv)
