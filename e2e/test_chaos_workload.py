"""The chaos harness's client workload (e2e/chaos/workload.py) run for real against ottermq, its records
judged by the checker: a steady run loses nothing and dead-letters every rejected message; a run through a
``kill -9`` and restart of the broker loses no confirmed message, the clients reconnect by themselves, and
every duplicate has an explanation; an active and a standby on PostgreSQL, at two addresses, go through a
``kill -9`` of the active and a SIGSTOP of the next one past its lease (fenced: exit 3), with the epochs
read from the health endpoint as the runner reads them, and the checker finds no loss and no split brain."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from .chaos.checker import Report, check, load
from .conftest import BrokerProcess, postgres_url

pytestmark = pytest.mark.extension

WORKLOAD = Path(__file__).parent / "chaos" / "workload.py"
QUEUE = "chaos.orders"


def dead_url() -> str:
    """An address where nothing listens (the clients' round-robin must skip it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"amqp://guest:guest@127.0.0.1:{port}/%2F"


def confirmed_since(path: Path, since: float = 0.0) -> int:
    """Confirms recorded in ``path`` after ``since`` (a torn last line is ignored)."""
    found = 0
    if path.exists():
        for line in path.read_text().splitlines():
            if '"outcome":"confirmed"' in line:
                try:
                    found += json.loads(line)["t"] > since
                except ValueError:
                    continue
    return found


class Workload:
    """The workload's processes for one test, stopped (SIGTERM, then SIGKILL) whatever happens."""

    def __init__(self, tmp: Path, urls: list[str]) -> None:
        self.tmp = tmp
        self.urls = ",".join(urls)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = dict(os.environ, PYTHONSAFEPATH="1")

    def command(self, *args: str) -> list[str]:
        return [sys.executable, str(WORKLOAD), args[0], "--urls", self.urls, *args[1:]]

    def setup(self) -> None:
        done = subprocess.run(
            self.command("setup", "--queue", QUEUE, "--timeout", "20"),
            env=self.env,
            capture_output=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr.decode()

    def start(self, name: str, *args: str) -> None:
        command = self.command(args[0], "--client", name, "--out", str(self.out(name)), *args[1:])
        with open(self.tmp / f"{name}.stderr", "wb") as err:
            self.procs[name] = subprocess.Popen(command, env=self.env, stdout=err, stderr=subprocess.STDOUT)

    def out(self, name: str) -> Path:
        return self.tmp / f"{name}.jsonl"

    def stop(self, name: str) -> float:
        """SIGTERM one client; it must exit 0 within a few seconds. Returns how long it took."""
        proc = self.procs.pop(name)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
        took = time.monotonic() - began
        assert code == 0, (self.tmp / f"{name}.stderr").read_text()
        return took

    def drain(self) -> None:
        command = self.command(
            "drain",
            "--client",
            "drain",
            "--out",
            str(self.out("drain")),
            "--queues",
            f"{QUEUE},{QUEUE}.dlq",
            "--quiet",
            "1",
            "--timeout",
            "30",
        )
        done = subprocess.run(command, env=self.env, capture_output=True, timeout=40)
        assert done.returncode == 0, done.stderr.decode()

    def report(self, events: list[dict[str, Any]]) -> Report:
        runner = self.tmp / "runner.events"
        runner.write_text("".join(json.dumps(e) + "\n" for e in events))
        return check(load([runner, *sorted(self.tmp.glob("*.jsonl"))]))

    def close(self) -> None:
        for proc in self.procs.values():
            proc.kill()
            proc.wait()


@pytest.fixture
def workload(tmp_path: Path) -> Any:
    made: list[Workload] = []

    def make(urls: list[str]) -> Workload:
        made.append(Workload(tmp_path, urls))
        return made[-1]

    yield make
    for w in made:
        w.close()


def start_clients(w: Workload, *consumer_args: str) -> None:
    w.setup()
    w.start("pub", "publish", "--queue", QUEUE, "--rate", "150", "--ttl-every", "7")
    queues = f"{QUEUE},{QUEUE}.dlq"
    w.start("con", "consume", "--queues", queues, "--reject-every", "5", "--prefetch", "20", *consumer_args)


def test_steady_run_loses_nothing_and_dead_letters_the_rejected(broker_process, workload, poll_until):
    broker = broker_process().start()
    w = workload([broker.url, dead_url()])
    start_clients(w)
    poll_until(lambda: confirmed_since(w.out("pub")) >= 200, timeout=30, what="200 confirms")
    assert w.stop("pub") < 3
    assert w.stop("con") < 3
    w.drain()

    report = w.report([{"op": "epoch", "broker": "a", "url": broker.url, "epoch": 1, "t": time.time()}])
    assert report.ok, report.summary()
    assert report.lost == [] and report.phantoms == [] and report.rejected_not_dead_lettered == []
    assert report.confirmed >= 200 and report.unknown + report.nacked <= 1  # the stop may cut the last one
    rejected = report.dead_lettered["rejected"]
    assert len(rejected) >= report.confirmed // 5 - 1
    assert all(int(i.rsplit("-", 1)[1]) % 5 == 0 for i in rejected)
    assert report.duplicates == [], report.summary()


def test_kill_9_and_restart_mid_run_loses_nothing_and_explains_duplicates(
    broker_process, workload, poll_until
):
    process = broker_process()
    broker = process.start()
    w = workload([broker.url, dead_url()])
    events: list[dict[str, Any]] = [
        {"op": "epoch", "broker": "a", "url": broker.url, "epoch": 1, "t": time.time()}
    ]
    start_clients(w, "--work-ms", "8")  # slower than the publisher: 20 unacked deliveries at any time
    poll_until(lambda: confirmed_since(w.out("pub")) >= 150, timeout=30, what="150 confirms")

    killed = time.time()
    events.append({"op": "fault", "name": "kill-9", "phase": "inject", "t": killed})
    process.kill()
    # the restarted process is a new broker with a new epoch from the moment the old one died
    events.append({"op": "epoch", "broker": "a#2", "url": broker.url, "epoch": 2, "t": killed})
    process.start()  # same port, same data dir
    healed = time.time()
    events.append({"op": "fault", "name": "kill-9", "phase": "heal", "t": healed})
    poll_until(lambda: confirmed_since(w.out("pub"), healed) >= 150, timeout=30, what="150 confirms after")
    w.stop("pub")
    w.stop("con")
    w.drain()

    report = w.report(events)
    print(report.summary() + "\n" + report.table())
    assert report.ok, report.summary()
    assert report.lost == [] and report.phantoms == [] and report.split_brain == []
    assert report.duplicate_counts["unexplained"] == 0, report.summary()
    connects = [r for r in load([w.out("pub"), w.out("con")]) if r["op"] == "connect"]
    assert {r["client"] for r in connects if r["t"] > killed} == {
        "pub",
        "con",
    }  # both came back by themselves
    (window,) = report.windows
    assert window.lost == [] and window.first_confirm_after_heal is not None


class EpochWatch(threading.Thread):
    """The runner's view of the epochs: polls each broker's ``/api/health/checks/active`` every 0.1 s
    and records ``epoch`` events (a broker process's name changes when it is started again)."""

    def __init__(self, brokers: dict[str, BrokerProcess], events: list[dict[str, Any]]) -> None:
        super().__init__(daemon=True)
        self.brokers, self.events = brokers, events
        self.names = {key: key for key in brokers}
        self.seen: set[tuple[str, int]] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        auth = "Basic " + base64.b64encode(b"guest:guest").decode()
        while not self.stop.wait(0.1):
            for key, process in self.brokers.items():
                url = f"{process.broker.management_url}/api/health/checks/active"
                try:
                    with urllib.request.urlopen(
                        urllib.request.Request(url, headers={"Authorization": auth}), timeout=0.5
                    ) as resp:
                        health = json.loads(resp.read())
                except (OSError, ValueError):
                    continue  # a standby binds nothing; an active losing the leadership answers 503
                seen = (self.names[key], int(health["epoch"]))
                if health.get("role") == "active" and seen not in self.seen:
                    self.seen.add(seen)
                    self.events.append(
                        {"op": "epoch", "broker": seen[0], "url": process.broker.url, "epoch": seen[1],
                         "t": time.time()}
                    )  # fmt: skip

    def restarted(self, key: str) -> None:
        self.names[key] += "#2" if "#" not in self.names[key] else ""


def test_failover_and_fencing_on_postgresql(broker_process, workload, poll_until):
    env = {
        "OTTERMQ_STORE": "postgresql",
        "OTTERMQ_POSTGRES_URL": postgres_url(),
        "OTTERMQ_POSTGRES_SCHEMA": f"chaos_{uuid.uuid4().hex[:10]}",
        "OTTERMQ_WORKERS": "1",
        "OTTERMQ_STANDBY_POLL_SECONDS": "0.1",
        "OTTERMQ_LEASE_SECONDS": "2",
    }
    a, b = broker_process(env), broker_process(env)  # two addresses, as behind a load balancer
    a.start()
    b.launch()
    poll_until(lambda: "standby:" in b.log_tail(200), timeout=30, what="b waiting as the standby")
    events: list[dict[str, Any]] = []
    watch = EpochWatch({"a": a, "b": b}, events)
    watch.start()
    w = workload([a.broker.url, b.broker.url])
    w.setup()
    w.start("pub", "publish", "--queue", QUEUE, "--rate", "100", "--ttl-every", "7")
    w.start("pub2", "publish", "--queue", QUEUE, "--rate", "100")
    w.start("con", "consume", "--queues", f"{QUEUE},{QUEUE}.dlq", "--reject-every", "5", "--work-ms", "4")
    poll_until(lambda: confirmed_since(w.out("pub")) >= 200, timeout=30, what="200 confirms")

    events.append({"op": "fault", "name": "kill-9", "phase": "inject", "t": time.time()})
    a.kill()
    b.wait_until_serving(30)
    watch.restarted("a")
    a.launch()  # back as the standby
    healed = time.time()
    events.append({"op": "fault", "name": "kill-9", "phase": "heal", "t": healed})
    poll_until(lambda: confirmed_since(w.out("pub"), healed) >= 150, timeout=30, what="confirms from b")

    events.append({"op": "fault", "name": "sigstop", "phase": "inject", "t": time.time()})
    assert b.proc is not None
    b.proc.send_signal(signal.SIGSTOP)
    try:
        a.wait_until_serving(30)  # b's lease ran out: a took over
    finally:
        b.proc.send_signal(signal.SIGCONT)
    assert b.proc.wait(30) == 3  # fenced: leadership lost
    watch.restarted("b")
    b.launch()  # back as the standby, as a service manager would start it
    healed = time.time()
    events.append({"op": "fault", "name": "sigstop", "phase": "heal", "t": healed})
    poll_until(lambda: confirmed_since(w.out("pub"), healed) >= 150, timeout=30, what="confirms from a#2")
    for name in ("pub", "pub2", "con"):
        w.stop(name)
    w.drain()
    watch.stop.set()
    watch.join(2)

    report = w.report(events)
    print(report.summary() + "\n" + report.table())
    assert report.ok, report.summary()
    assert report.epochs == {1: ["a"], 2: ["b"], 3: ["a#2"]}
    assert report.duplicate_counts["unexplained"] == 0, report.summary()
    assert [len(window.lost) for window in report.windows] == [0, 0]
    assert all(window.first_confirm_after_heal is not None for window in report.windows)
