"""A pytest plugin: the order ``make test`` hands files to its pytest-xdist workers, the longest first.

Loaded by the Makefile (``PYTHONPATH=.ci/pytest``, ``-p ottermq_schedule``), not by a conftest: the
order is CI's business, and a table of timings under e2e/ would count as an e2e helper and send every
file to RabbitMQ again (.ci/conformance.py) whenever it is measured anew.

With ``--dist loadfile`` each worker takes a whole file at a time, in the order the files were collected
(the Makefile passes ``--no-loadscope-reorder``: xdist's own order, most tests first, put the one-test
files that run for minutes, the management API fuzzer and the chaos schedule, at the very end, where the
other workers waited for them). The long files first and the many short ones last is the
longest-processing-time schedule: the workers finish within a short file of each other.

A worker is handed its next file while it runs the last tests of the current one (it has to know its
next test before it starts one), and that file then waits behind them. So a long test goes first in its
file, and the short ones after it fill that wait.

``SECONDS`` is what each file took in ``make test``'s first pass (three workers on the shared 2-core
machine at a load average of about 7; ``LONG_TESTS`` likewise for single tests). Only the order comes
from them, so roughly right is enough; a file not listed counts as ``DEFAULT_SECONDS`` (end-to-end,
Spark, benchmarks) or 0 (the unit and protocol tests, a few seconds each, fill the end). A name here
that is no file any more stops the run: update the table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SECONDS = {
    "e2e/test_doc_snippets.py": 273,
    "tests/spark/test_fused.py": 123,
    "e2e/test_web_ui.py": 104,
    "e2e/test_chaos.py": 93,
    "tests/spark/test_report.py": 85,
    "e2e/test_durability.py": 81,
    "tests/bench/test_bench_scripts.py": 77,
    "tests/spark/test_cluster.py": 71,
    "e2e/test_archive.py": 67,
    "e2e/test_ottermq_process.py": 57,
    "e2e/test_shovel_crash.py": 55,
    "e2e/test_shovel_interop.py": 45,
    "e2e/test_shovels.py": 25,
    "e2e/test_http_fuzz.py": 56,
    "e2e/test_admin_cli.py": 56,
    "tests/spark/test_findings.py": 43,
    "e2e/test_delayed_dedup.py": 41,
    "e2e/test_tls.py": 38,
    "e2e/test_postgres_ha.py": 38,
    "e2e/test_workers.py": 34,
    "e2e/test_attack_extension.py": 29,
    "tests/bench/test_backlog.py": 25,
    "e2e/test_attack_stalls.py": 25,
    "e2e/test_chaos_workload.py": 24,
    "e2e/test_pika_idioms.py": 22,
    "tests/spark/test_watch.py": 19,
    "e2e/test_dead_letter_moves.py": 17,
    "e2e/test_chaos_harness.py": 16,
    "e2e/test_http_hardening.py": 15,
    "e2e/test_attack_headers.py": 14,
}
LONG_TESTS = {
    "e2e/test_doc_snippets.py::test_the_spark_jobs_on_one_machine": 165,
    "tests/bench/test_bench_scripts.py::test_postgresql_benchmark_measures_confirms_failovers_and_bytes": 64,
    "e2e/test_web_ui.py::test_archive_files_and_a_rendered_report": 55,
    "e2e/test_archive.py::test_report_on_a_broker_written_archive_counts_every_dead_letter": 52,
}
DEFAULT_SECONDS = 5
QUICK = ("tests/unit/", "tests/protocol/")


def file_seconds(path: str) -> float:
    """How long a file is expected to take, roughly."""
    if path in SECONDS:
        return SECONDS[path]
    return 0 if path.startswith(QUICK) else DEFAULT_SECONDS


def longest_first(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place: files by :func:`file_seconds`, longest first, and in each file its
    ``LONG_TESTS`` ahead of the others; otherwise the collection order stays."""
    order = {id(item): index for index, item in enumerate(items)}
    first_of: dict[str, int] = {}
    for item in items:
        first_of.setdefault(_file(item), order[id(item)])

    def key(item: pytest.Item) -> tuple[float, int, float, int]:
        path = _file(item)
        return (-file_seconds(path), first_of[path], -_test_seconds(item), order[id(item)])

    items.sort(key=key)


def missing(root: Path) -> list[str]:
    """The files the tables name that are not under ``root``."""
    named = {*SECONDS, *(nodeid.split("::", 1)[0] for nodeid in LONG_TESTS)}
    return sorted(path for path in named if not (root / path).is_file())


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _test_seconds(item: pytest.Item) -> float:
    return LONG_TESTS.get(item.nodeid.split("[", 1)[0], 0)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gone = missing(config.rootpath)
    if gone:
        raise pytest.UsageError(f"{__file__} names files that are not there: {', '.join(gone)}")
    longest_first(items)
