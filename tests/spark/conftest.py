"""Fixtures for the Spark tests: one local[1] SparkSession and a small hand-checked archive.

Tests needing Spark take the ``spark`` fixture, which skips them when pyspark or Java is
missing, except when ``CI`` is set: then it fails them, so CI cannot go green by skipping.
Test modules import ``ottermq.spark_jobs`` inside ``try``, so they collect without pyspark.
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

T0 = 1_714_521_600_000  # 2024-05-01T00:00:00Z
MIN = 60_000
HOUR = 3_600_000
# every Spark JVM the tests start (spark-submit included) uses conf/spark-defaults.conf (quick settings)
os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).parent / "conf"))


def _missing_requirement() -> str | None:
    try:
        import pyspark
    except ImportError:
        return "pyspark is not installed (pip install 'ottermq[spark]')"
    java_home = os.environ.get("JAVA_HOME")
    java = shutil.which("java") or (java_home and shutil.which("java", path=str(Path(java_home) / "bin")))
    if not java:
        return "Java is not installed (Spark needs a JDK/JRE; set JAVA_HOME or put java on PATH)"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot run {java} -version: {exc}"
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if match:
        major = int(match.group(1)) if match.group(1) != "1" else int(match.group(2) or 0)
        needed = 17 if int(pyspark.__version__.split(".")[0]) >= 4 else 8
        if major < needed:
            return f"pyspark {pyspark.__version__} needs Java {needed}+, found Java {major}"
    return None


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so the Spark tests must run, not skip", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pyspark_installed() -> None:
    """For tests of code that imports pyspark but needs no session (skips, or fails under CI)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        _skip_or_fail("pyspark is not installed (pip install 'ottermq[spark]')")


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    """A function returning a TCP port free on 127.0.0.1 (for brokers and Spark daemons)."""

    def _free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    return _free_port


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[1] SparkSession shared by every test (UTC, one shuffle partition, no UI).

    On 10-row inputs the time goes into compiling plans, not running them: whole-stage codegen
    off and the JVM's quick C1 JIT only halve the suite's run time (results are the same).
    """
    reason = _missing_requirement()
    if reason:
        _skip_or_fail(reason)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("ottermq-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


BASE: dict[str, Any] = {
    "schema": 1,
    "time_ms": T0,
    "reason": "rejected",
    "vhost": "/",
    "queue": "orders",
    "exchange": "orders",
    "routing_keys": ["order.created"],
    "dlx": "dlx",
    "dlx_routing_key": None,
    "policy": None,
    "outcome": "routed",
    "drop_reason": None,
    "death_count": 1,
    "original_expiration": None,
    "enqueued_ms": None,
    "message_id": None,
    "correlation_id": None,
    "content_type": "application/json",
    "headers": None,
    "body_size": 3,
    "body_b64": base64.b64encode(b"abc").decode(),
    "body_truncated": False,
}


def record(time_ms: int, in_queue: int | None, **fields: Any) -> dict[str, Any]:
    """A complete v1 record dying at ``time_ms`` after ``in_queue`` ms (None: enqueued_ms null)."""
    out = copy.deepcopy(BASE)
    out.update(time_ms=time_ms, enqueued_ms=None if in_queue is None else time_ms - in_queue)
    out.update(fields)
    return out


def _typed(**values: Any) -> dict[str, Any]:
    return {k: {"t": "S", "v": v} if isinstance(v, str) else v for k, v in values.items()}


#: Twelve dead letters whose every aggregate is worked out by hand in the tests (see test_report).
RECORDS: list[dict[str, Any]] = [
    record(T0 + 10 * MIN, 100, message_id="m1"),  # 1
    record(T0 + 20 * MIN, 200, message_id="m1", death_count=3),  # 2
    record(T0 + 30 * MIN, 300, message_id="m1", death_count=3),  # 3
    record(
        T0 + HOUR + 5 * MIN,
        400,
        reason="delivery_limit",
        message_id="m2",
        death_count=4,
        routing_keys=["order.created", "audit"],
    ),  # 4
    record(T0 + HOUR + 10 * MIN, 1050, reason="expired", original_expiration="1000", message_id="m4"),  # 5
    record(
        T0 + HOUR + 20 * MIN,
        5000,
        reason="expired",
        original_expiration="1000",
        message_id="m5",
        queue="payments",
        exchange="payments",
        routing_keys=["payment.captured"],
        content_type="text/plain",
    ),  # 6
    record(
        T0 + 2 * HOUR,
        500,
        reason="expired",
        original_expiration="1000",
        message_id="m5",
        queue="payments",
        exchange="payments",
        routing_keys=["payment.captured"],
    ),  # 7: killed by the queue TTL before its own expiration
    record(
        T0 + 2 * HOUR + MIN,
        None,
        reason="expired",
        message_id="m6",
        queue="payments",
        exchange="payments",
        routing_keys=["payment.captured"],
    ),  # 8: no enqueue time, no expiration
    record(
        T0 + 2 * HOUR + 2 * MIN,
        20,
        reason="maxlen",
        vhost="tenant-a",
        queue="events",
        exchange="amq.topic",
        routing_keys=["events.click"],
        dlx=None,
        outcome="dropped",
        drop_reason="no_dlx",
        content_type=None,
        headers=_typed(**{"x-message-type": "Click", "attempt": {"t": "l", "v": 3}}),
        body_b64=None,
    ),  # 9
    record(
        T0 + 2 * HOUR + 3 * MIN,
        30,
        reason="maxlen",
        vhost="tenant-a",
        queue="events",
        exchange="amq.topic",
        routing_keys=["events.click"],
        dlx=None,
        outcome="dropped",
        drop_reason="no_dlx",
        content_type=None,
        death_count=5,
        headers=_typed(**{"x-message-type": "Click"}),
    ),  # 10
    record(
        T0 + 25 * HOUR,
        1010,
        reason="expired",
        original_expiration="1000",
        message_id="m3",
        queue="payments",
        exchange="payments",
        routing_keys=["payment.captured"],
        content_type="text/plain",
        headers=_typed(**{"x-message-type": "PaymentCaptured"}),
        body_size=1000,
        body_truncated=True,
    ),  # 11
    record(T0 + 25 * HOUR + 30 * MIN, 10, message_id="m2", outcome="dropped", drop_reason="cycle"),  # 12
]


def write_lines(path: Path, lines: list[dict[str, Any] | str]) -> Path:
    """Write records (dicts as compact JSON, strings as given) one per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return path


@pytest.fixture(scope="session")
def archive_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RECORDS in the broker's layout, split over hour directories and two files per hour at most."""
    root = tmp_path_factory.mktemp("archive")
    by_file: dict[Path, list[dict[str, Any]]] = {}
    for i, rec in enumerate(RECORDS):
        moment = datetime.datetime.fromtimestamp(rec["time_ms"] / 1000, tz=datetime.UTC)
        path = root / moment.strftime("%Y-%m-%d/%H") / f"deadletters-{i % 2}.jsonl"
        by_file.setdefault(path, []).append(rec)
    for path, recs in by_file.items():
        write_lines(path, list(recs))
    # A file still being written: must be ignored.
    write_lines(root / "2024-05-01" / "00" / "deadletters-9.jsonl.part", [record(T0, 1, queue="partial")])
    return root


@pytest.fixture(scope="session")
def records_df(spark: Any, archive_dir: Path) -> Any:
    """The good records of ``archive_dir`` as the report reads them (cached)."""
    from ottermq.spark_jobs.io import read_archive

    df, bad = read_archive(spark, str(archive_dir))
    assert bad == 0
    return df.cache()


@pytest.fixture(scope="session")
def data() -> SimpleNamespace:
    """This module's constants and helpers for the tests (conftest is not importable under importlib mode)."""
    return SimpleNamespace(T0=T0, MIN=MIN, HOUR=HOUR, RECORDS=RECORDS, record=record, write_lines=write_lines)


@pytest.fixture
def rows() -> Callable[[Any], list[tuple[Any, ...]]]:
    """Collect a DataFrame as plain tuples, in its order."""

    def collect(df: Any) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in df.collect()]

    return collect
