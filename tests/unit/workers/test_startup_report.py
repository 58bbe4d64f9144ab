"""The start-up definitions file's import report across workers (broker/workers/): a worker declares
the file's exchanges, queues and bindings in its vhosts from ``Start.topology`` without logging what it
skips, sends its part of the report in ``Ready.report``, and worker 0 joins it into the file's report
(``Supervisor._join_report``, the HTTP import's join) and logs the skipped items once. The worker and
worker 0 are this process's real code over a real socket pair, so a field renamed on one side fails
here as it would between the processes."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from ottermq.broker.node.definitions import ImportReport
from ottermq.broker.workers.messages import MessageError, Ready, Start, decode, encode, pack
from ottermq.broker.workers.supervisor import Supervisor

from .conftest import Received, Run
from .test_worker_side import start_worker, worker_0_metadata, worker_0_settings

TOPOLOGY: dict[str, Any] = {  # the file's part in vhost "b": one binding to a queue that is not there
    "exchanges": [
        {"name": "x", "vhost": "b", "type": "direct", "durable": True, "auto_delete": False,
         "internal": False, "arguments": {}},
    ],
    "queues": [{"name": "q", "vhost": "b", "durable": True, "auto_delete": False, "arguments": {}}],
    "bindings": [
        {"source": "x", "vhost": "b", "destination": "q", "destination_type": "queue",
         "routing_key": "k", "arguments": {}},
        {"source": "x", "vhost": "b", "destination": "nope", "destination_type": "queue",
         "routing_key": "k", "arguments": {}},
    ],
}  # fmt: skip
SKIPPED = {
    "section": "bindings",
    "vhost": "b",
    "source": "x",
    "destination": "nope",
    "destination_type": "queue",
    "routing_key": "k",
    "reason": "no such queue 'nope'",
}


def worker_ready(run: Run, tmp_path: Path, topology: dict[str, Any]) -> tuple[Ready, dict[str, Any]]:
    """The ``Ready`` a worker given ``topology`` in its vhost "b" answers, and its JSON on the wire."""

    async def main() -> tuple[Ready, dict[str, Any]]:
        loop = asyncio.get_running_loop()
        settings = worker_0_settings(tmp_path)
        zero = Received()
        control, worker, running = start_worker(loop, zero)
        control.send(Start.of(settings, await worker_0_metadata(settings), ["b"], topology))
        await zero.until(lambda: len(zero.messages) == 1)
        [ready] = zero.only()
        assert isinstance(ready, Ready)
        control.close()
        async with asyncio.timeout(10):
            await running
        return ready, json.loads(pack(ready))

    result: tuple[Ready, dict[str, Any]] = run(main())
    return result


def test_a_workers_part_of_the_report_travels_in_ready_and_joins_worker_0s(
    run: Run, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    ready, wire = worker_ready(run, tmp_path, TOPOLOGY)
    assert not [m for m in caplog.messages if m.startswith("definitions: skipped")]  # worker 0 logs them
    assert wire["type"] == "ready" and wire["report"] == ready.report
    part = ImportReport.from_json(ready.report)
    assert (part.applied["exchanges"], part.applied["queues"], part.applied["bindings"]) == (1, 1, 1)
    assert [item.to_json() for item in part.skipped] == [SKIPPED]

    report = ImportReport()  # worker 0's: its metadata, and a binding of its own vhosts skipped
    report.done("users", 2)
    report.done("bindings")
    report.skip("bindings", "no such exchange 'y'", vhost="/", source="y")
    caplog.clear()
    Supervisor._join_report(report, ready)
    Supervisor._join_report(report, Ready(None, None, None))  # a worker without the file's vhosts
    assert report.applied["users"] == 2
    assert (report.applied["exchanges"], report.applied["queues"], report.applied["bindings"]) == (1, 1, 2)
    assert report.to_json()["skipped"] == [
        {"section": "bindings", "vhost": "/", "source": "y", "reason": "no such exchange 'y'"},
        SKIPPED,
    ]
    assert caplog.messages == [
        "definitions: skipped bindings: vhost 'b' source 'x' destination 'nope' destination_type 'queue' "
        "routing_key 'k': no such queue 'nope'"
    ]


def test_a_worker_without_the_files_topology_sends_no_report(run: Run, tmp_path: Path) -> None:
    ready, wire = worker_ready(run, tmp_path, {})
    assert ready.report is None and wire["report"] is None


def test_the_report_renamed_on_one_side_only_is_refused() -> None:
    data = encode(Ready(1, 2, {"applied": {}, "unchanged": {}, "skipped": []}))
    data["definitions_report"] = data.pop("report")
    with pytest.raises(MessageError, match="missing 'report'; unexpected 'definitions_report'"):
        decode(data)
    del data["definitions_report"]  # an older sender: no report at all
    with pytest.raises(MessageError, match="missing 'report'"):
        decode(data)
