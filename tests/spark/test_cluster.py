"""The jobs run unchanged on a cluster: a real Spark standalone master and worker (two JVMs on
127.0.0.1, from the pyspark distribution) and ``spark-submit --master spark://…`` of the report's own
module file, exactly as the README shows. No Python runs on the executors (the jobs are pure
DataFrame plans), so the worker needs nothing of ottermq."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def _wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"exited {proc.returncode}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def standalone_cluster(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int]
) -> Iterator[tuple[str, dict[str, str]]]:
    """``(master URL, environment)`` of a one-worker standalone cluster (``spark`` checks Java), one for
    the module: each test submits its own application to it, as users of one cluster do."""
    import pyspark

    home = Path(pyspark.__file__).parent
    tmp_path = tmp_path_factory.mktemp("cluster")
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOG_DIR": str(tmp_path),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONSAFEPATH": "1",
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    spark_class = str(home / "bin" / "spark-class")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, args, ready in (
            (
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(free_port()),
                ],
                "I have been elected leader",
            ),
            (
                "worker",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(free_port()),
                ],
                "Successfully registered with master",
            ),
        ):
            log = tmp_path / f"{name}.log"
            with log.open("wb") as out:
                procs.append(subprocess.Popen([spark_class, *args], env=env, stdout=out, stderr=out))
            _wait_for(log, ready, procs[-1])
        yield url, env
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_spark_submit_report_to_a_standalone_cluster(
    standalone_cluster: tuple[str, dict[str, str]], archive_dir: Path, tmp_path: Path
) -> None:
    from ottermq.spark_jobs import report

    url, env = standalone_cluster
    out = tmp_path / "report"
    submit = str(Path(env["SPARK_HOME"]) / "bin" / "spark-submit")
    result = subprocess.run(
        [
            submit,
            "--master",
            url,
            "--conf",
            "spark.executor.memory=512m",
            report.__file__,
            str(archive_dir),
            "--out",
            str(out),
            "--no-charts",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"Connecting to master {url}" in result.stderr  # the cluster, not a local fallback
    assert "Granted executor ID" in result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["records"] == 12
    assert summary["by_reason"] == {"expired": 5, "rejected": 4, "maxlen": 2, "delivery_limit": 1}
    assert "dead letters: 12" in result.stdout


def test_spark_submit_watch_to_a_standalone_cluster(
    standalone_cluster: tuple[str, dict[str, str]], archive_dir: Path, tmp_path: Path, spark: Any
) -> None:
    """``dlq watch --once`` through spark-submit on the cluster: the streaming job's totals are the
    archive's (its ``.part`` file is not read)."""
    from ottermq.spark_jobs import watch

    url, env = standalone_cluster
    out = tmp_path / "live"
    submit = str(Path(env["SPARK_HOME"]) / "bin" / "spark-submit")
    result = subprocess.run(
        [
            submit,
            "--master",
            url,
            "--conf",
            "spark.executor.memory=512m",
            watch.__file__,
            str(archive_dir),
            "--out",
            str(out),
            "--once",
            "--alert",
            "reason=expired,rate>=1/min",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"Connecting to master {url}" in result.stderr
    rows = spark.read.parquet(str(out / "minutes")).collect()
    assert sum(r["deaths"] for r in rows) == 12
    by_reason: dict[str, int] = {}
    for r in rows:
        by_reason[r["reason"]] = by_reason.get(r["reason"], 0) + r["deaths"]
    assert by_reason == {"expired": 5, "rejected": 4, "maxlen": 2, "delivery_limit": 1}
    assert (out / "alerts.jsonl").read_text().count('"rule": "reason=expired,rate>=1/min"') >= 1
