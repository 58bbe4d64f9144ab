"""The Python client snippets of README "Clients", run as they are (pointed at a private broker) one
after another against one broker: each must exit 0 and print what its comments say."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.extension

README = Path(__file__).resolve().parents[1] / "README.md"


def snippets(heading: str) -> list[str]:
    """The ```python blocks of the README section that starts with ``heading``."""
    text = README.read_text()
    start = text.index(f"\n{heading}")
    end = text.find("\n### ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def run(code: str, port: int, cwd: Path, name: str, timeout: float = 60) -> list[str]:
    path = cwd / name
    assert "localhost:5672" in code
    path.write_text(code.replace("localhost:5672", f"127.0.0.1:{port}"))
    # as a user would run it, outside this repository (so its amqp/ folder cannot shadow py-amqp):
    # the script's folder on sys.path, for client.py's "from tasks import ..."
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    result = subprocess.run(
        [sys.executable, str(path)], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


@contextlib.contextmanager
def celery_worker(tasks_code: str, module: str, port: int, cwd: Path) -> Iterator[None]:
    """A Celery worker (``--pool=solo``) for ``module`` (the README's tasks file), ready, stopped after."""
    (cwd / f"{module}.py").write_text(tasks_code.replace("localhost:5672", f"127.0.0.1:{port}"))
    celery = Path(sys.executable).with_name("celery")
    log_path = cwd / f"{module}-worker.log"
    with open(log_path, "ab") as log:
        worker = subprocess.Popen(
            [
                str(celery) if celery.exists() else (shutil.which("celery") or "celery"),
                "-A",
                module,
                "worker",
                "--pool=solo",
                "--concurrency=1",
                "--loglevel=INFO",
            ],
            cwd=cwd,
            env=dict(os.environ, PYTHONSAFEPATH="1"),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while " ready." not in log_path.read_text(errors="replace"):
            assert worker.poll() is None, log_path.read_text(errors="replace")
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")
            time.sleep(0.05)
        yield
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def test_python_snippets_one_after_another(broker_process, tmp_path):
    b = broker_process().start()
    (pika_code,) = snippets("### pika")
    (aio_code,) = snippets("### aio-pika")
    tasks_code, client_code = snippets("### Celery and kombu")

    for _ in range(2):  # again: the declarations do not change
        lines = run(pika_code, b.port, tmp_path, "pika_snippet.py")
        assert lines == ["b'order 42' expired pika.orders 1 1000"]
    assert run(aio_code, b.port, tmp_path, "aio_snippet.py") == ["""b'{"order": 1}' expired aio.orders 500"""]

    with celery_worker(tasks_code, "tasks", b.port, tmp_path):
        assert run(client_code, b.port, tmp_path, "client.py") == [
            "5",
            "['page', 'info']",
            "tasks.charge [-1] rejected tasks",
        ]


def test_retry_with_back_off_snippets(broker_process, tmp_path):
    """README "Retry with back-off": the pika program, then the Celery tasks with a worker and the client."""
    b = broker_process().start()
    (pika_code,) = snippets("### Retry with back-off: pika")
    lines = run(pika_code, b.port, tmp_path, "pika_retry.py")
    assert lines == ["b'job 1' True delivery_limit", "b'call back' -300"]
    tasks_code, client_code = snippets("### Retry with back-off: Celery")
    with celery_worker(tasks_code, "retry_tasks", b.port, tmp_path):
        assert run(client_code, b.port, tmp_path, "retry_client.py") == ["called for 7 True"]
