"""How the adversarial suite (``e2e/test_attack_*.py``) judges a case.

* :class:`Ledger` and :func:`account`: the unique ids a case published and what the broker said of
  each (confirmed, refused, no answer); every confirmed id must be found exactly once, left in a
  queue, consumed by the test, or recorded by the dead-letter archive as dropped
  (:func:`read_archive`); no other id more than once.
* :func:`http_sweep`: the management and Prometheus reads that decode what messages and arguments
  carry (queue, exchange and binding objects, ``POST .../get``, the dead-letter views, definitions
  export, ``/metrics``); a 5xx or an unanswered request is a problem.
* :class:`LagProbe`: the pinger's worst round trip over a window (``e2e/pinger.py``, its own
  process, so that the test's own work never delays it) and, when the broker exports it, the
  ``ottermq_event_loop_lag_seconds`` histogram's observations over the limit in that window.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .polling import poll_until

LAG_LIMIT_S = float(os.environ.get("ATTACK_LAG_LIMIT_MS", "250")) / 1000
LAG_METRIC = "ottermq_event_loop_lag_seconds"
LAG_FAULT = "round trip"  # in the text of a problem the pinger found


# --------------------------------------------------------------------------------------------------------
# accounting
# --------------------------------------------------------------------------------------------------------
@dataclass
class Ledger:
    """The unique ids (message bodies) of one case: what the broker confirmed, refused (nacked), left
    unanswered (the connection closed first), and what a consumer of the test took."""

    case: str
    confirmed: set[str] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)
    unsure: set[str] = field(default_factory=set)
    consumed: Counter[str] = field(default_factory=Counter)
    count: int = 0

    def new_id(self) -> str:
        self.count += 1
        return f"{self.case}#{self.count}"

    def published(self) -> set[str]:
        return self.confirmed | self.refused | self.unsure


def read_archive(root: Path | None, prefix: str) -> Counter[str]:
    """Ids (bodies starting with ``prefix``) of the dead letters the archive under ``root`` recorded
    as dropped, from closed files and the complete lines of open ones (``.part``; one renamed while
    being read is read again under its new name)."""
    for _ in range(5):
        found: Counter[str] = Counter()
        try:
            for path in sorted(root.rglob("*.jsonl*")) if root is not None and root.exists() else []:
                text = path.read_bytes()
                for line in text[: text.rfind(b"\n") + 1].splitlines():
                    record = json.loads(line)
                    body = base64.b64decode(record.get("body_b64") or "").decode("utf-8", "replace")
                    if record.get("outcome") == "dropped" and body.startswith(prefix):
                        found[body] += 1
        except FileNotFoundError:
            continue
        return found
    raise AssertionError(f"the archive under {root} kept changing while read")


def account(ledger: Ledger, seen: Counter[str], archive: Path | None = None) -> list[str]:
    """What is wrong with where the case's messages ended up (``seen``: found in its queues by id):
    every confirmed id once (left in a queue, consumed, or recorded by the archive as dropped), every
    other id at most once, nothing else."""
    seen = Counter(seen)
    seen.update(ledger.consumed)
    seen.update(read_archive(archive, ledger.case + "#"))
    problems = []
    lost = sorted(mid for mid in ledger.confirmed if seen[mid] == 0)
    twice = sorted(mid for mid, n in seen.items() if n > 1)
    stray = sorted(mid for mid in seen if mid not in ledger.published())
    if lost:
        problems.append(f"{len(lost)} of {len(ledger.confirmed)} confirmed messages lost: {short(lost)}")
    if twice:
        problems.append(f"{len(twice)} messages found more than once: {short(twice)}")
    if stray:
        problems.append(f"messages nobody published: {short(stray)}")
    return problems


def short(items: Sequence[str], n: int = 4) -> str:
    return ", ".join(items[:n]) + (f" ... ({len(items)})" if len(items) > n else "")


# --------------------------------------------------------------------------------------------------------
# HTTP: management reads and Prometheus
# --------------------------------------------------------------------------------------------------------
def http(
    base: str,
    path: str,
    method: str = "GET",
    body: Any = None,
    auth: tuple[str, str] = ("guest", "guest"),
    timeout: float = 60,
) -> tuple[int, bytes]:
    """``(status, body)`` of one request; 0 when it went unanswered."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except (OSError, TimeoutError) as err:
        return 0, str(err).encode()


def http_sweep(
    management: str,
    prometheus: str,
    vhost: str,
    queues: Sequence[str] = (),
    exchanges: Sequence[str] = (),
    auth: tuple[str, str] = ("guest", "guest"),
) -> list[str]:
    """The reads that decode what messages and arguments carry; a 5xx or no answer is returned as a
    finding. ``POST .../get`` requeues what it reads, so nothing moves."""
    v = urllib.parse.quote(vhost, safe="")
    requests: list[tuple[str, str, str, Any]] = []
    for q in queues:
        name = urllib.parse.quote(q, safe="")
        requests += [
            (management, f"/api/queues/{v}/{name}", "GET", None),
            (
                management,
                f"/api/queues/{v}/{name}/get",
                "POST",
                {"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 50_000},
            ),
            (management, f"/api/queues/{v}/{name}/bindings", "GET", None),
            (management, f"/api/dead-letters/{v}/{name}", "GET", None),
        ]
    for x in exchanges:
        requests.append((management, f"/api/exchanges/{v}/{urllib.parse.quote(x, safe='')}", "GET", None))
    requests += [
        (management, f"/api/queues/{v}", "GET", None),
        (management, f"/api/exchanges/{v}", "GET", None),
        (management, f"/api/bindings/{v}", "GET", None),
        (management, "/api/dead-letters", "GET", None),
        (management, "/api/definitions", "GET", None),
        (management, f"/api/definitions/{v}", "GET", None),
        (prometheus, "/metrics", "GET", None),
    ]
    problems = []
    for base, path, method, body in requests:
        status, answer = http(base, path, method, body, auth)
        if status == 0 or status >= 500:
            problems.append(f"{method} {path} -> {status or 'no answer'}: {answer[:200]!r}")
    return problems


def lag_over_limit(prometheus: str, limit: float = LAG_LIMIT_S) -> tuple[float, float] | None:
    """``(observations, of them over limit)`` of the broker's loop-lag histogram summed over its
    series (one per process), or None when the broker exports no such metric. "Over" counts from the
    largest bucket bound at or under ``limit`` (0.25 s is one of the broker's bounds, so exact there)."""
    status, text = http(prometheus, "/metrics")
    if status != 200:
        return None
    for family in text_string_to_metric_families(text.decode("utf-8", "replace")):
        if family.name != LAG_METRIC:
            continue
        total = sum(s.value for s in family.samples if s.name.endswith("_count"))
        within: dict[tuple[tuple[str, str], ...], tuple[float, float]] = {}  # series -> (bound, count)
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                continue
            bound = float(sample.labels["le"])
            series = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            if bound <= limit + 1e-9 and bound >= within.get(series, (-1.0, 0.0))[0]:
                within[series] = (bound, sample.value)
        return total, total - sum(count for _, count in within.values())
    return None


# --------------------------------------------------------------------------------------------------------
# the pinger and the loop-lag metric
# --------------------------------------------------------------------------------------------------------
PINGER = Path(__file__).with_name("pinger.py")


class LagProbe:
    """``e2e/pinger.py`` in its own process, round-tripping on its own connection every ~10 ms;
    :meth:`window` returns what happened since the previous call."""

    def __init__(self, host: str, port: int, user: str, password: str, vhost: str, prometheus: str) -> None:
        self.prometheus = prometheus
        self.proc = subprocess.Popen(
            [sys.executable, str(PINGER), host, str(port), user, password, vhost],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        if not ready.startswith("ready"):
            raise RuntimeError(f"the pinger did not start: {ready!r}")
        self.metric = lag_over_limit(prometheus)

    def window(self) -> dict[str, Any]:
        """``worst_ms``, ``count``, ``p50_ms``, ``error`` of the pinger since the last call, and
        ``metric_over`` (observations of the broker's loop-lag histogram over the limit; None
        without the metric)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("mark\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        report: dict[str, Any] = json.loads(line) if line else {"worst_ms": None, "error": "the pinger died"}
        metric = lag_over_limit(self.prometheus)
        before, self.metric = self.metric, metric
        report["metric_over"] = None if metric is None or before is None else metric[1] - before[1]
        return report

    def problems(self, report: dict[str, Any], limit: float = LAG_LIMIT_S) -> list[str]:
        out = []
        if report.get("error"):
            out.append(f"pinger: {report['error']}")
        worst = report.get("worst_ms")
        if worst is not None and worst > limit * 1000:
            out.append(f"pinger's worst {LAG_FAULT} {worst:.0f} ms > {limit * 1000:.0f} ms")
        if report.get("metric_over"):
            out.append(f"{LAG_METRIC}: {report['metric_over']:.0f} loop turns over {limit * 1000:.0f} ms")
        return out

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def settle(fn: Callable[[], Any], timeout: float) -> None:
    """Wait (``poll_until``) until ``fn()`` is truthy or ``timeout`` passes; a case that never settles
    is not failed here: the accounting after it names what is missing."""
    with contextlib.suppress(pytest.fail.Exception):
        poll_until(fn, timeout=timeout, interval=0.02)
