"""How long one client's costly request keeps the others waiting: a pinger's worst round trip.

    python benchmarks/stalls.py [--compare amqp://guest:guest@127.0.0.1:5672/%2F]
        [--compare-api http://127.0.0.1:15672] [--ottermq-src DIR ...] [--reps 3]
        [--scenarios publish,deliver,policy] [--size 100000000] [--queues 500] [--json FILE]

A pinger (a process of its own: one pika connection in vhost ``/`` doing a passive ``queue.declare``
round trip every 10 ms) measures the broker's answer time while, in a vhost of the benchmark's own:

- ``publish``: one client publishes a ``--size`` (100 MB) persistent message to a durable queue and
  waits for its confirm;
- ``deliver``: a consumer receives that message and acks it;
- ``policy``: ``--queues`` (500) queues named ``'a' * 60 + '!R-NNNN'`` exist and a policy with the
  pattern ``^(a|aa)+(?=b)`` (exponential backtracking, PCRE-only) is PUT over the management API.

Reported per scenario and broker: the pinger's worst round trip (a round trip still waiting counts
with its age), medians over ``--reps`` with every run's value, what the costly request itself took,
and for ottermq the event loop's own view (``ottermq_event_loop_lag_seconds``: how many loop turns
went over 250 ms in the window). Brokers run in turns (ottermq trees, then the other one: A B A B),
so drift on a shared machine hits every broker. ``--ottermq-src`` (repeatable) compares source trees
(``procinfo.overlay``); without it the installed tree runs.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # PYTHONSAFEPATH=1 (the Makefile sets it) leaves the script dir out
    sys.path.insert(0, str(_HERE))

from procinfo import OtterMQProcess, find_broker_pid, free_port, wait_quiet  # noqa: E402

log = logging.getLogger("stalls")
SCENARIOS = ("publish", "deliver", "policy")
EVIL = "^(a|aa)+(?=b)"
LAG = "ottermq_event_loop_lag_seconds"


# -- the pinger (run as ``stalls.py --pinger HOST PORT VHOST USER PASSWORD``) -------------------------
def pinger_main(host: str, port: int, vhost: str, user: str, password: str) -> None:
    import pika

    params = pika.ConnectionParameters(
        host=host,
        port=port,
        virtual_host=vhost,
        credentials=pika.PlainCredentials(user, password),
        heartbeat=0,
        socket_timeout=120,
        blocked_connection_timeout=120,
    )
    channel = pika.BlockingConnection(params).channel()
    lock = threading.Lock()
    samples: list[float] = []
    waiting: list[float | None] = [None]

    def report() -> None:
        for _line in sys.stdin:
            with lock:
                taken, samples[:] = list(samples), []
                worst = max(taken, default=0.0)
                if waiting[0] is not None:
                    worst = max(worst, time.monotonic() - waiting[0])
            print(json.dumps({"worst": worst, "count": len(taken)}), flush=True)
        os._exit(0)

    threading.Thread(target=report, daemon=True).start()
    print("ready", flush=True)
    while True:
        start = time.monotonic()
        with lock:
            waiting[0] = start
        channel.queue_declare("amq.rabbitmq.reply-to", passive=True)
        with lock:
            waiting[0] = None
            samples.append(time.monotonic() - start)
        time.sleep(0.01)


class Pinger:
    def __init__(self, host: str, port: int, user: str, password: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--pinger", host, str(port), "/", user, password],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the pinger did not connect")

    def mark(self) -> dict[str, Any]:
        """The window since the last mark: ``worst`` (s) and ``count``."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("mark\n")
        self.proc.stdin.flush()
        return dict(json.loads(self.proc.stdout.readline()))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


# -- brokers ------------------------------------------------------------------------------------------
@dataclass
class Target:
    name: str
    host: str
    port: int
    api: str
    prometheus: str | None = None
    proc: OtterMQProcess | None = None
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def request(self, path: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.api + path, data=data, method=method)
        req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=600) as answer:
                text = answer.read()
                return answer.status, json.loads(text) if text.strip() else None
        except urllib.error.HTTPError as err:
            return err.code, err.read()
        except (OSError, http.client.HTTPException) as exc:  # RabbitMQ may drop a request after 60 s
            return 0, repr(exc)

    def slow_turns(self) -> float | None:
        """Event-loop turns over 250 ms so far (ottermq only)."""
        if self.prometheus is None:
            return None
        with urllib.request.urlopen(self.prometheus + "/metrics", timeout=30) as answer:
            text = answer.read().decode()
        total = under = 0.0
        found = False
        for line in text.splitlines():
            if line.startswith(LAG + "_count"):
                total += float(line.rsplit(" ", 1)[1])
                found = True
            elif line.startswith(LAG + "_bucket") and 'le="0.25"' in line:
                under += float(line.rsplit(" ", 1)[1])
        return total - under if found else None  # an older tree has no such metric


def q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def connect(target: Target, vhost: str) -> Any:
    import pika

    params = pika.ConnectionParameters(
        host=target.host,
        port=target.port,
        virtual_host=vhost,
        credentials=pika.PlainCredentials("guest", "guest"),
        heartbeat=0,
        socket_timeout=300,
        blocked_connection_timeout=300,
    )
    return pika.BlockingConnection(params)


def run_once(target: Target, scenarios: list[str], size: int, queues: int, rep: int) -> None:
    vhost = f"bench-stalls-{rep}"
    target.request(f"/api/vhosts/{q(vhost)}", "DELETE")
    target.request(f"/api/vhosts/{q(vhost)}", "PUT", {})
    target.request(
        f"/api/permissions/{q(vhost)}/guest", "PUT", {"configure": ".*", "write": ".*", "read": ".*"}
    )
    conn = connect(target, vhost)
    channel = conn.channel()
    pinger = Pinger(target.host, target.port, "guest", "guest")
    try:
        if "publish" in scenarios or "deliver" in scenarios:
            import pika

            channel.confirm_delivery()
            channel.queue_declare("big", durable=True)
            body = os.urandom(1 << 20) * (size >> 20) + os.urandom(size & ((1 << 20) - 1))
            time.sleep(0.5)
            pinger.mark()
            before, start = target.slow_turns(), time.monotonic()
            channel.basic_publish("", "big", body, pika.BasicProperties(delivery_mode=2))
            record(target, "publish", pinger.mark(), time.monotonic() - start, before)
            time.sleep(0.5)
            pinger.mark()
            before, start = target.slow_turns(), time.monotonic()
            method, _props, got = next(channel.consume("big", inactivity_timeout=300))
            assert method is not None and got == body, "the message did not come back whole"
            channel.basic_ack(method.delivery_tag)
            channel.cancel()
            record(target, "deliver", pinger.mark(), time.monotonic() - start, before)
            del body, got
        if "policy" in scenarios:
            for i in range(queues):  # new names each run: ottermq remembers a pattern's answers
                channel.queue_declare("a" * 60 + f"!{rep}-{i:04d}")
            time.sleep(0.5)
            pinger.mark()
            before, start = target.slow_turns(), time.monotonic()
            definition = {"pattern": EVIL, "definition": {"max-length": 5}, "apply-to": "queues"}
            status, answer = target.request(f"/api/policies/{q(vhost)}/evil", "PUT", definition)
            assert status in (0, 201, 204), (status, answer)  # 0: no answer (the server gave up)
            record(target, "policy", pinger.mark(), time.monotonic() - start, before, status)
    finally:
        pinger.close()
        conn.close()
        target.request(f"/api/vhosts/{q(vhost)}", "DELETE")


def record(
    target: Target,
    scenario: str,
    window: dict[str, Any],
    took: float,
    before: float | None,
    status: int = 200,
) -> None:
    after = target.slow_turns()
    run = {
        "status": status,
        "worst_ms": window["worst"] * 1000,
        "pings": window["count"],
        "took_s": took,
        "slow_turns": None if before is None or after is None else after - before,
    }
    target.runs.setdefault(scenario, []).append(run)
    log.info("%s %s: %s", target.name, scenario, run)


def table(targets: list[Target], scenarios: list[str]) -> str:
    rows = [
        "| scenario | broker | pinger's worst (median) | every run | request took | loop turns > 250 ms |",
        "|---|---|---|---|---|---|",
    ]
    for scenario in scenarios:
        for target in targets:
            runs = target.runs.get(scenario, [])
            if not runs:
                continue
            worst = [r["worst_ms"] for r in runs]
            took = statistics.median(r["took_s"] for r in runs)
            unanswered = sum(1 for r in runs if scenario == "policy" and not r["status"])
            note = f" ({unanswered} without an answer)" if unanswered else ""
            slow = [r["slow_turns"] for r in runs if r["slow_turns"] is not None]
            rows.append(
                f"| {scenario} | {target.name} | {statistics.median(worst):.0f} ms | "
                + ", ".join(f"{w:.0f}" for w in worst)
                + f" | {took:.2f} s{note} | {'/'.join(str(int(s)) for s in slow) if slow else '-'} |"
            )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pinger", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--compare", metavar="URL", help="also measure this broker (RabbitMQ)")
    parser.add_argument("--compare-api", metavar="URL", help="its management API (default: port 15672)")
    parser.add_argument("--ottermq-src", action="append", type=Path, default=[], help="a source tree to run")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--size", type=int, default=100_000_000, help="the large message's octets")
    parser.add_argument("--queues", type=int, default=500)
    parser.add_argument("--json", type=Path, help="write every run here")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    if args.pinger:
        host, port, vhost, user, password = args.pinger
        pinger_main(host, int(port), vhost, user, password)
        return 0
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    logging.getLogger("pika").setLevel(logging.WARNING)
    scenarios = [s for s in args.scenarios.split(",") if s]
    targets: list[Target] = []
    for src in args.ottermq_src or [None]:
        prometheus = free_port()
        proc = OtterMQProcess(src=src, env={"OTTERMQ_PROMETHEUS_PORT": str(prometheus)})
        proc.start()
        name = "ottermq" if src is None else f"ottermq {src.name}"
        targets.append(
            Target(
                name,
                "127.0.0.1",
                proc.port,
                f"http://127.0.0.1:{proc.web_port}",
                f"http://127.0.0.1:{prometheus}",
                proc,
            )
        )
    if args.compare:
        url = urllib.parse.urlsplit(args.compare)
        host = url.hostname or "127.0.0.1"
        api = args.compare_api or f"http://{host}:15672"
        targets.append(Target("RabbitMQ", host, url.port or 5672, api.rstrip("/")))
    pids = [t.proc.pid if t.proc is not None else find_broker_pid(t.host, t.port) for t in targets]
    try:
        for rep in range(args.reps):
            for target in targets:
                wait_quiet(pids)
                run_once(target, scenarios, args.size, args.queues, rep)
    finally:
        for target in targets:
            if target.proc is not None:
                target.proc.stop()
    print(table(targets, scenarios))
    if args.json:
        args.json.write_text(json.dumps({t.name: t.runs for t in targets}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
