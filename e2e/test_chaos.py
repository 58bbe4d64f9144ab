"""The fault runner end to end (e2e/chaos/runner.py): both scenarios through a whole schedule of faults.

``CHAOS_SCHEDULE=short`` (the default, about a minute here, well under five) runs each fault class once;
``CHAOS_SCHEDULE=long`` (``make chaos``) random faults for ``CHAOS_MINUTES``. Results, with ``report.md``,
in ``CHAOS_RESULTS`` (default: a new temp dir, named in every failure message).

Asserted: the checker's verdict (no confirmed message lost, no phantom, no split brain); after a
partition between the active broker and its database, confirms back within 2 x lease + 2 s; on SQLite,
no message nacked during a full disk is stored after all (delivered after its nack or in the drain; a
delivery *before* the nack is the documented exception, see :func:`chaos.report.stored_after_nack`).
Everything else (failovers, exit statuses, duplicates by category, what the brokers logged) is in the
report, and its findings are logged.

Needs root, ``ip netns``, ``nft``, PostgreSQL's binaries and libfaketime; skipped without them, except
under ``CI=true`` where it fails.
"""

from __future__ import annotations

import logging
import os
import random

import pytest

from .chaos.clock import find_libfaketime
from .chaos.faults import PG_FAULTS, SQLITE_FAULTS
from .chaos.pg import _ci_postgres
from .chaos.report import Active, early_takeovers, findings, stored_after_nack
from .chaos.runner import RunResult, Schedule, plan, run
from .test_chaos_harness import _netns_problem

pytestmark = pytest.mark.extension

log = logging.getLogger(__name__)


def _problem() -> str | None:
    """Why the runner cannot run here (besides root and namespaces: PostgreSQL, libfaketime), or None."""
    reason = _netns_problem()
    if reason is not None:
        return reason
    try:
        find_libfaketime()
        _ci_postgres().binaries()
    except FileNotFoundError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module")
def _netns_usable() -> None:
    reason = _problem()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the chaos runner cannot run: {reason}")
        pytest.skip(reason)


def _explain(outcome: RunResult) -> str:
    return f"report: {outcome.report_path}\n{outcome.summary()}"


def test_plans_run_every_fault_class() -> None:
    short = [(f.name, hold) for f, hold, _ in plan(PG_FAULTS, Schedule("short"), random.Random(1), 0)]
    assert [name for name, _ in short] == [cls.name for cls in PG_FAULTS]
    assert all(0.3 <= hold <= 4 for name, hold in short if name != "sigstop-active")
    assert all(3 <= hold <= 4 for name, hold in short if name == "sigstop-active")  # lease 2 + 1..2 s
    # long: a round of every class even when the time is up at once, in a random order
    drawn = [f.name for f, _, _ in plan(SQLITE_FAULTS, Schedule("long", lease=5), random.Random(1), 0)]
    assert sorted(drawn) == sorted(cls.name for cls in SQLITE_FAULTS)


def test_stored_after_nack_leaves_the_documented_case_out() -> None:
    def record(op: str, t: float, message: str, **fields: object) -> dict[str, object]:
        return {"op": op, "t": t, "id": message, **fields}

    records = [
        record("publish", 10.0, "p-1", outcome="nacked"),
        record("deliver", 9.9, "p-1", queue="q", phase="run"),  # a consumer had it before the nack
        record("publish", 10.0, "p-2", outcome="nacked"),
        record("deliver", 10.1, "p-2", queue="q", phase="run"),  # the consumer's own lag
        record("publish", 10.0, "p-3", outcome="nacked"),
        record("deliver", 12.0, "p-3", queue="q", phase="run", redelivered=True),  # stored after all
        record("publish", 10.0, "p-4", outcome="nacked"),
        record("deliver", 10.2, "p-4", queue="q", phase="drain"),  # left in its queue
        record("publish", 10.0, "p-5", outcome="confirmed"),
        record("deliver", 20.0, "p-5", queue="q", phase="run"),
    ]
    stored = stored_after_nack(records)
    assert sorted(stored) == ["p-3", "p-4"]
    assert "2.000 s after the nack" in stored["p-3"] and "drain" in stored["p-4"]


def test_early_takeovers_are_those_of_a_live_fresh_lease() -> None:
    actives = [
        Active("a", 1, 100.0, 110.0),  # crashed at 110: b took over at once
        Active("b", 2, 110.1, 130.0),  # fenced after a pause; c took over at 120 (lease 2 s)
        Active("c", 3, 120.0, 125.0),
        Active("a#2", 4, 120.5, None),  # 0.5 s after c, c still running: c's lease cannot have run out
    ]
    assert early_takeovers(actives, lease=2.0) == [
        "a#2 took epoch 4 over 0.500 s after c took epoch 3 (lease 2 s), while c was running"
    ]


def test_schedule_loses_nothing_confirmed(_netns_usable: None) -> None:
    outcome = run()
    for name, scenario in outcome.scenarios.items():
        for line in findings(scenario):
            log.warning("%s: %s", name, line)
    log.info("chaos run of %.1f s, %s", outcome.wall, _explain(outcome))
    assert set(outcome.scenarios) == {"postgresql", "sqlite"}, _explain(outcome)
    assert outcome.ok, _explain(outcome)

    postgresql = outcome.scenarios["postgresql"]
    limit = 2 * postgresql.lease + 2
    partitions = [r for r in postgresql.runs if r.name == "db-partition" and "error" not in r.details]
    assert partitions, _explain(outcome)
    for fault in partitions:
        window = postgresql.window(fault)
        assert window is not None, _explain(outcome)
        at = window.inject - postgresql.report.start
        assert window.longest_no_confirm <= limit, (
            f"db-partition at +{at:.1f} s: {window.longest_no_confirm:.2f} s without a confirm"
            f" (limit {limit:g} s)\n{_explain(outcome)}"
        )

    sqlite = outcome.scenarios["sqlite"]
    disk_full = [r for r in sqlite.runs if r.name == "disk-full" and "error" not in r.details]
    assert disk_full, _explain(outcome)
    for fault in disk_full:
        stored = sqlite.nacked_but_stored(fault, after_only=True)
        assert stored == {}, f"nacked during disk-full, stored after all: {stored}\n{_explain(outcome)}"
