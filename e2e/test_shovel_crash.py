"""A shovel on ``on-confirm`` loses nothing when either broker is killed with SIGKILL mid-move.

Two private ottermq processes: the source, which also runs the shovel (its source queue is local,
``amqp://``), and the destination (a network URI). 4,000 persistent messages, each with a ``seq``
header, are published with confirms; once a part has arrived, one broker is killed with SIGKILL and
started again on its data directory. Every message must arrive at least once; the duplicates (a
message the destination had confirmed whose ack the source never stored, or one the destination
stored while its confirm was lost) are counted and reported, never a failure. The shovel restarts
by itself: from its stored parameter after its broker restarts, after ``reconnect-delay`` after its
destination comes back.
"""

from __future__ import annotations

import collections
import functools
import urllib.parse
import urllib.request
from typing import Any

import pytest

from .polling import poll_until
from .test_shovel_interop import depth, drain, publish, q

pytestmark = pytest.mark.extension

COUNT = 4000
eventually = functools.partial(poll_until, timeout=90, interval=0.1)


def seqs(b: Any, queue: str) -> collections.Counter[int]:
    return collections.Counter(props.headers["seq"] for _, props in drain(b, queue))


def shovel_value(source_queue: str, dest: Any, dest_queue: str) -> dict[str, Any]:
    return {
        "src-uri": "amqp://",
        "src-queue": source_queue,
        "dest-uri": f"amqp://guest:guest@{dest.host}:{dest.port}/%2F",
        "dest-queue": dest_queue,
        "ack-mode": "on-confirm",
        "src-prefetch-count": 200,
        "reconnect-delay": 1,
    }


def check_all_arrived(source: Any, src: str, dest: Any, dest_queue: str) -> int:
    """Wait until the source queue is empty and the destination stops growing; every seq must be
    there; returns the number of duplicates."""
    eventually(lambda: depth(source, src) == 0, what="the source queue drained")
    last: list[int] = [-2]

    def settled() -> bool:
        now = depth(dest, dest_queue)
        steady = now == last[0] and now >= COUNT
        last[0] = now
        return steady

    poll_until(settled, timeout=90, interval=1.0, what="the destination settled")
    found = seqs(dest, dest_queue)
    missing = sorted(set(range(COUNT)) - set(found))
    assert missing == [], f"{len(missing)} messages lost, first {missing[:10]}"
    duplicates = sum(found.values()) - COUNT
    print(f"\n{COUNT} messages arrived, {duplicates} of them twice or more")
    return duplicates


def start_move(broker_process: Any, unique: Any) -> tuple[Any, Any, Any, Any, str, str, str]:
    """Two private brokers, ``COUNT`` messages in the source, the shovel set and an eighth moved."""
    source_process, dest_process = broker_process(), broker_process()
    source, dest = source_process.start(), dest_process.start()
    name, src, dest_queue = unique("sh"), unique("src"), unique("dest")
    publish(source, src, COUNT)
    path = f"/api/parameters/shovel/%2F/{q(name)}"
    assert source.api(path, "PUT", {"value": shovel_value(src, dest, dest_queue)})[0] == 201
    eventually(lambda: depth(dest, dest_queue) >= COUNT // 8, what="an eighth moved")
    return source_process, dest_process, source, dest, name, src, dest_queue


def test_kill_9_of_the_broker_running_the_shovel_loses_nothing(broker_process, unique):
    source_process, _, source, dest, name, src, dest_queue = start_move(broker_process, unique)
    source_process.kill()
    assert depth(dest, dest_queue) < COUNT, "the move ended before the kill: nothing was tested"
    source_process.start()
    check_all_arrived(source, src, dest, dest_queue)
    status, entries = source.api("/api/shovels")
    assert [e["state"] for e in entries if e["name"] == name] == ["running"]  # restarted from the store


def test_kill_9_of_the_destination_loses_nothing(broker_process, unique):
    _, dest_process, source, dest, name, src, dest_queue = start_move(broker_process, unique)
    dest_process.kill()
    assert depth(source, src) > 0, "the move ended before the kill: nothing was tested"
    dest_process.start()
    check_all_arrived(source, src, dest, dest_queue)

    def restarts() -> str | None:
        with urllib.request.urlopen(source.prometheus_url + "/metrics", timeout=10) as answer:
            text = answer.read().decode()
        return next(
            (ln for ln in text.splitlines() if ln.startswith("ottermq_shovel_restarts_total") and name in ln),
            None,
        )

    assert float(eventually(restarts, what="the restart counted").split()[-1]) >= 1
