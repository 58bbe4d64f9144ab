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

Needs root, ``ip netns``, ``nft``, PostgreSQL's binaries and libfaketime; skipped without root, except
under ``CI=true`` where it fails.
"""

from __future__ import annotations

import logging
import os

import pytest

from .chaos.report import findings
from .chaos.runner import RunResult, run
from .test_chaos_harness import _netns_problem

pytestmark = pytest.mark.extension

log = logging.getLogger(__name__)


@pytest.fixture(scope="module", autouse=True)
def _netns_usable() -> None:
    reason = _netns_problem()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the chaos runner cannot run: {reason}")
        pytest.skip(reason)


def _explain(outcome: RunResult) -> str:
    return f"report: {outcome.report_path}\n{outcome.summary()}"


def test_schedule_loses_nothing_confirmed() -> None:
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
