"""The PostgreSQL store measured (``make bench``): persistent confirms next to SQLite and RabbitMQ, failover
time, bytes per stored message.

    python benchmarks/postgres.py [--compare amqp://guest:guest@127.0.0.1:5672/%2F] [--reps 3]
        [--failovers 10] [--messages 100000] [--json out.json]

A throwaway PostgreSQL 15 (Debian's, ``.ci/postgres.py start --fsync``: commits flushed to disk, as in
production) on this machine serves the brokers.

1. Persistent confirms: the ``confirms`` scenario of ``run.py`` (100-byte persistent messages, 1000
   outstanding confirms, without and with a consumer) on ottermq with SQLite, ottermq with PostgreSQL and
   the ``--compare`` broker, interleaved (A B C A B C ...), medians of ``--reps``. Target: PostgreSQL at
   least 50% of SQLite.
2. Failover: an active and a standby on one port; a publisher sends persistent messages with confirms,
   one at a time, reconnecting at once when its connection drops; the active is killed (SIGKILL); the
   time from the kill to the first confirm from the new active, ``--failovers`` times (the killed
   broker comes back as the next standby). p50 and p99. Target: 5 s.
3. Bytes per stored message: ``--messages`` persistent 100-byte messages (routing key ``orders``) in one
   durable queue; PostgreSQL: the growth of the messages table with its index and TOAST
   (``pg_total_relation_size``); SQLite: the growth of the data file after the broker stopped (the WAL
   checkpointed into it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # PYTHONSAFEPATH=1 (the Makefile sets it) leaves the script dir out
    sys.path.insert(0, str(_HERE))

import pika  # noqa: E402
from procinfo import REPO, OtterMQProcess, find_broker_pid, free_port, wait_quiet  # noqa: E402
from run import SCENARIOS, Target, run_once  # noqa: E402
from scenarios import FULL, QUICK, Context  # noqa: E402
from wire import BrokerURL  # noqa: E402

log = logging.getLogger("bench.postgres")
POSTGRES = REPO / ".ci" / "postgres.py"
BODY = b"x" * 100


class Database:
    """A throwaway PostgreSQL with fsync on."""

    def __enter__(self) -> Database:
        out = subprocess.run(
            [sys.executable, str(POSTGRES), "start", "--fsync"], capture_output=True, text=True, check=True
        )
        self.url, self.directory = out.stdout.split()
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run([sys.executable, str(POSTGRES), "stop", self.directory], check=False)

    def env(self, schema: str) -> dict[str, str]:
        return {
            "OTTERMQ_STORE": "postgresql",
            "OTTERMQ_POSTGRES_URL": self.url,
            "OTTERMQ_POSTGRES_SCHEMA": schema,
        }

    def scalar(self, sql: str) -> int:
        out = subprocess.run(["psql", "-At", "-c", sql, self.url], capture_output=True, text=True, check=True)
        return int(out.stdout.strip() or 0)

    def execute(self, sql: str) -> None:
        subprocess.run(["psql", "-q", "-c", sql, self.url], capture_output=True, check=True)


# -- 1. persistent confirms ----------------------------------------------------------------------------
def confirms(db: Database, compare: str | None, reps: int, quick: bool) -> dict[str, dict[str, float]]:
    scenario = SCENARIOS["confirms"]
    sizes = QUICK if quick else FULL
    results: dict[str, dict[str, list[float]]] = {}
    with OtterMQProcess() as sqlite, OtterMQProcess(env=db.env("bench_confirms")) as postgres:
        targets = [
            Target("ottermq sqlite", BrokerURL(port=sqlite.port), sqlite.pid, managed=True),
            Target("ottermq postgresql", BrokerURL(port=postgres.port), postgres.pid, managed=True),
        ]
        if compare:
            url = BrokerURL.parse(compare)
            targets.append(Target("rabbitmq", url, find_broker_pid(url.host, url.port)))
        for rep in range(reps):
            for target in targets:
                wait_quiet([t.pid for t in targets])
                run = run_once(
                    scenario, target, Context(url=target.url, sizes=sizes, pid=target.pid), rep, 900
                )
                for key, value in run.values.items():
                    if value is not None:
                        results.setdefault(target.label, {}).setdefault(key, []).append(value)
    return {label: {k: statistics.median(v) for k, v in values.items()} for label, values in results.items()}


# -- 2. failover -----------------------------------------------------------------------------------------
class Node:
    """One broker process of the active/standby pair (both on ``port``)."""

    def __init__(self, db: Database, schema: str, port: int, workdir: Path, name: str) -> None:
        self.env = dict(
            os.environ,
            **db.env(schema),
            OTTERMQ_BROKER_HOST="127.0.0.1",
            OTTERMQ_BROKER_PORT=str(port),
            OTTERMQ_ENABLE_WEB_API="false",
            OTTERMQ_ENABLE_PROMETHEUS="false",
            OTTERMQ_STANDBY_POLL_SECONDS="0.1",
            OTTERMQ_DATA_DIR=str(workdir / name),
            PYTHONSAFEPATH="1",
            LOG_LEVEL="INFO",
        )
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_from = 0  # where this start's lines begin in the log

    def start(self) -> None:
        self.log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ottermq.broker"], env=self.env, stdout=logf, stderr=subprocess.STDOUT
            )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def waiting(self) -> bool:
        """This start of the process logged that it waits as a standby."""
        with open(self.log_path, "rb") as f:
            f.seek(self.log_from)
            return b"standby:" in f.read()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _confirmed_publish(port: int, queue: str, deadline: float) -> float:
    """Publish persistent messages with confirms until one is confirmed; returns when (monotonic)."""
    params = pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1, socket_timeout=2)
    while time.monotonic() < deadline:
        try:
            conn = pika.BlockingConnection(params)
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare(queue, durable=True)
            ch.basic_publish("", queue, BODY, pika.BasicProperties(delivery_mode=2))
            done = time.monotonic()
            conn.close()
            return done
        except (pika.exceptions.AMQPError, OSError):
            time.sleep(0.01)
    raise RuntimeError("no confirm from the new active")


def failover(db: Database, count: int) -> list[float]:
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="ottermq-failover-"))
    nodes = [Node(db, "bench_failover", port, workdir, name) for name in ("a", "b")]
    times: list[float] = []
    try:
        nodes[0].start()
        _wait(lambda: _listening(port), 30, "the first active")
        nodes[1].start()
        _wait(nodes[1].waiting, 30, "the standby")
        for i in range(count):
            active = nodes[i % 2]
            _confirmed_publish(port, "failover", time.monotonic() + 30)  # the active confirms
            killed = time.monotonic()
            active.kill()
            confirmed = _confirmed_publish(port, "failover", killed + 60)
            times.append(confirmed - killed)
            log.info("failover %d: first confirm from the new active %.3f s after the kill", i + 1, times[-1])
            active.start()  # the next standby
            _wait(active.waiting, 30, "the new standby")
    finally:
        for node in nodes:
            node.kill()
    return times


# -- 3. bytes per stored message --------------------------------------------------------------------------
def _publish_backlog(port: int, queue: str, count: int) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    ch.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2)
    for _ in range(count):
        ch.basic_publish("", queue, BODY, props)  # routing key == queue name: "orders"
    conn.close()


def bytes_per_message(db: Database, count: int) -> dict[str, float]:
    out: dict[str, float] = {}
    size = "SELECT pg_total_relation_size('bench_bytes.messages')"
    with OtterMQProcess(env=db.env("bench_bytes")) as otter:
        before = db.scalar(size)
        _publish_backlog(otter.port, "orders", count)
        db.execute(
            "VACUUM ANALYZE bench_bytes.messages"
        )  # visibility map and statistics, as autovacuum would
        out["postgresql"] = (db.scalar(size) - before) / count
        rows = db.scalar("SELECT count(*) FROM bench_bytes.messages")
        if rows != count:
            raise RuntimeError(f"{rows} rows stored, {count} published")
    with OtterMQProcess() as otter:
        db_file = sorted(otter.workdir.glob("data*/ottermq.db"))[-1]
        base = db_file.stat().st_size
        _publish_backlog(otter.port, "orders", count)
        otter.stop()  # the WAL is checkpointed into the file
        out["sqlite"] = (db_file.stat().st_size - base) / count
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--compare", help="another broker's AMQP URL (RabbitMQ), for the confirms")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--failovers", type=int, default=10)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="small counts, 1 repetition, 3 failovers")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("pika").setLevel(logging.CRITICAL)  # the reconnect loop's refused connections
    reps = 1 if args.quick else args.reps
    failovers = 3 if args.quick else args.failovers
    messages = 5_000 if args.quick else args.messages
    with Database() as db:
        rates = confirms(db, args.compare, reps, args.quick)
        times = failover(db, failovers)
        sizes = bytes_per_message(db, messages)
    print(f"\npersistent confirms, msg/s (medians of {reps})")
    sqlite = rates.get("ottermq sqlite", {})
    for label, values in rates.items():
        shown = ", ".join(
            f"{k} {v:,.0f}"
            + (f" ({v / sqlite[k]:.0%} of SQLite)" if label != "ottermq sqlite" and sqlite.get(k) else "")
            for k, v in values.items()
        )
        print(f"  {label:20s} {shown}")
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    print(
        f"\nfailover, kill -9 to the first confirm from the new active ({len(times)} failovers): "
        f"p50 {statistics.median(times):.2f} s, p99 {p99:.2f} s, max {max(times):.2f} s"
    )
    print(
        f"\nbytes per stored message ({messages:,} x 100-byte bodies): "
        + ", ".join(f"{k} {v:.1f}" for k, v in sizes.items())
    )
    if args.json:
        args.json.write_text(
            json.dumps({"confirms": rates, "failover_s": times, "bytes_per_message": sizes}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
