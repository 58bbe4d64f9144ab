"""Multi-vhost scaling: N vhosts, each with its own publisher and no-ack consumer, all at once.

    python benchmarks/vhosts.py [--compare amqp://guest:guest@127.0.0.1:5672/%2F] [--quick]
        [--vhosts 1,2,4,8] [--count 300000] [--reps 3] [--json vhosts.json] [--png benchmarks/vhosts.png]

For each N, every broker gets N vhosts (``bench-v1`` ... made over the management API, with
permissions for the benchmark's user). Then N copies of the C generator run at the same time: the
``noack`` scenario of ``benchmarks/cgen``, one per vhost, ``--count`` messages each. The brokers are:

- ottermq with ``OTTERMQ_WORKERS=1`` (one process);
- ottermq with ``OTTERMQ_WORKERS=auto`` (one worker per core; the vhosts spread over the workers);
- with ``--compare``, the other broker (RabbitMQ) on its own management port (``--compare-api``).

Reported per N and broker (medians of ``--reps``, the brokers in turns A B C A B C ...):

- throughput: all the vhosts' messages over the wall time from the first generator's start to the
  last one's end;
- broker CPU per message: the broker's CPU seconds (ottermq's worker processes included) over the
  messages;
- the generators' CPU: they share the 2 cores with the broker, so this is what the broker could not
  have;
- the scaling ratio: throughput at N over throughput at 1, for the same broker.

The ottermq brokers are started fresh for each N (the vhosts then go one to each worker, as the
least busy worker takes the next vhost). Before each run every broker must be idle (``wait_quiet``):
RabbitMQ keeps a core busy for seconds after a run, which would otherwise be taken from the next one.

The PNG (``--png``, matplotlib) has the throughput curves and, on paper, the curve expected on a
16-core machine: ``min(N, 16)`` workers busy, each at the one-worker rate at N=1 times the efficiency
measured here at the highest N that has a worker per vhost (``auto``'s rate over ``cores`` times the
one-worker rate), the generators on cores of their own.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # PYTHONSAFEPATH=1 (the Makefile sets it) leaves the script dir out
    sys.path.insert(0, str(_HERE))

from cloadgen import binary, run_cgen  # noqa: E402
from procinfo import (  # noqa: E402
    OtterMQProcess,
    find_broker_pid,
    raise_fd_limit,
    tree_cpu_seconds,
    wait_quiet,
)
from scenarios import FULL, QUICK, Context  # noqa: E402
from wire import BrokerURL  # noqa: E402

EVERYTHING = {"configure": ".*", "write": ".*", "read": ".*"}


@dataclass
class Broker:
    label: str
    url: BrokerURL
    api: str  # management API base URL
    pid: int | None
    process: OtterMQProcess | None = None


def api(broker: Broker, path: str, method: str, body: Any) -> int:
    req = urllib.request.Request(broker.api + path, data=json.dumps(body).encode(), method=method)
    token = base64.b64encode(f"{broker.url.user}:{broker.url.password}".encode()).decode()
    req.add_header("Authorization", f"Basic {token}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as answer:
        return int(answer.status)


def vhost_names(n: int) -> list[str]:
    return [f"bench-v{i}" for i in range(1, n + 1)]


def make_vhosts(broker: Broker, n: int) -> None:
    user = urllib.request.quote(broker.url.user, safe="")
    for name in vhost_names(n):
        api(broker, f"/api/vhosts/{name}", "PUT", {})
        api(broker, f"/api/permissions/{name}/{user}", "PUT", EVERYTHING)


async def one_point(broker: Broker, n: int, count: int, sizes: Any) -> dict[str, Any]:
    """N generators at once against ``broker``; throughput, broker CPU per message, generators' CPU."""
    contexts = [
        Context(url=replace(broker.url, vhost=v), sizes=sizes, pid=broker.pid) for v in vhost_names(n)
    ]
    cpu0, t0 = tree_cpu_seconds(broker.pid), time.perf_counter()
    results = await asyncio.gather(*(run_cgen(ctx, "noack", count) for ctx in contexts))
    wall = time.perf_counter() - t0
    cpu1 = tree_cpu_seconds(broker.pid)
    errors = [r for r in results if isinstance(r, str)]
    if errors:
        return {"error": errors[0]}
    messages = sum(int(r["count"]) for r in results if isinstance(r, dict))
    gen_cpu = sum(float(r["cpu_pct"]) for r in results if isinstance(r, dict))
    out: dict[str, Any] = {
        "messages": messages,
        "wall_s": wall,
        "msgs_per_s": messages / wall,
        "gen_cpu_pct": gen_cpu,
    }
    if cpu0 is not None and cpu1 is not None:
        out["broker_cpu_s"] = cpu1 - cpu0
        out["broker_us_per_msg"] = (cpu1 - cpu0) / messages * 1e6
        out["broker_cores"] = (cpu1 - cpu0) / wall
    return out


def ottermq(label: str, workers: str, src: Path | None) -> Broker:
    process = OtterMQProcess(src, env={"OTTERMQ_WORKERS": workers})
    process.start(timeout=60)
    return Broker(
        label, BrokerURL(port=process.port), f"http://127.0.0.1:{process.web_port}", process.pid, process
    )


def expected(points: list[int], one_worker: float, efficiency: float, cores: int = 16) -> list[float]:
    """On paper: msgs/s with ``cores`` workers for each N (see the module docstring)."""
    return [min(n, cores) * one_worker * efficiency for n in points]


def plot(summary: dict[str, Any], labels: list[str], path: Path) -> bool:
    """Throughput and scaling against N, with the 16-core curve on paper; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    points = sorted({p["n"] for p in summary["points"]})
    rate = {(p["broker"], p["n"]): p["msgs_per_s"] for p in summary["points"]}
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label in labels:
        ys = [rate.get((label, n)) or float("nan") for n in points]
        left.plot([str(n) for n in points], ys, marker="o", label=label)
        base = rate.get((label, points[0]))
        right.plot(
            [str(n) for n in points],
            [y / base if base else float("nan") for y in ys],
            marker="o",
            label=label,
        )
    paper = summary.get("expected_16_cores")
    if paper:
        right.plot([str(n) for n in points], [v / paper[0] for v in paper], "k--", label="16 cores, on paper")
    left.set_title(f"{summary['count_per_vhost']:,} no-ack msgs per vhost, C generator")
    left.set_xlabel("vhosts (one publisher + one consumer each)")
    left.set_ylabel("msgs/s, all vhosts")
    left.set_ylim(bottom=0)
    right.set_title(f"throughput over N=1 ({summary['cores']} cores here)")
    right.set_xlabel("vhosts")
    right.set_ylim(bottom=0)
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--compare", help="the other broker's amqp:// URL (RabbitMQ)")
    parser.add_argument("--compare-api", default="http://127.0.0.1:15672", help="its management API")
    parser.add_argument("--vhosts", default="1,2,4,8", help="the values of N")
    parser.add_argument("--count", type=int, default=300_000, help="messages per vhost")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small counts, one rep")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--png", type=Path, default=_HERE / "vhosts.png", help="the curves")
    parser.add_argument("--ottermq-src", type=Path)
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    count = 5_000 if args.quick else args.count
    reps = 1 if args.quick else args.reps
    points = [int(x) for x in args.vhosts.split(",")]
    raise_fd_limit()
    built = binary()
    if isinstance(built, str):
        sys.exit(f"no C generator: {built}")
    configs = [("ottermq w=1", "1"), (f"ottermq w=auto({os.cpu_count()})", "auto")]
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
    other = None
    if args.compare:
        url = BrokerURL.parse(args.compare)
        other = Broker("rabbitmq", url, args.compare_api.rstrip("/"), find_broker_pid(url.host, url.port))
    for n in points:
        brokers = [ottermq(label, workers, args.ottermq_src) for label, workers in configs]
        if other is not None:
            brokers.append(other)
        try:
            for broker in brokers:
                make_vhosts(broker, n)
            for _rep in range(reps):
                for broker in brokers:
                    wait_quiet([b.pid for b in brokers])
                    result = asyncio.run(one_point(broker, n, count, sizes))
                    rows.setdefault((broker.label, n), []).append(result)
                    print(f"N={n} {broker.label}: {json.dumps(result)}", file=sys.stderr)
        finally:
            for broker in brokers:
                if broker.process is not None:
                    broker.process.stop()
    labels = [label for label, _ in configs] + (["rabbitmq"] if other is not None else [])
    summary: dict[str, Any] = {"count_per_vhost": count, "reps": reps, "cores": os.cpu_count(), "points": []}
    head = ("N", "broker", "msgs/s", "x N=1", "broker us/msg", "broker cores", "gen cpu %")
    print("\n{:>3} {:<22} {:>10} {:>6} {:>14} {:>13} {:>10}".format(*head))
    for n in points:
        for label in labels:
            runs = [r for r in rows.get((label, n), []) if "error" not in r]
            base = [r["msgs_per_s"] for r in rows.get((label, points[0]), []) if "error" not in r]
            rate = median([r["msgs_per_s"] for r in runs])
            us = median([r["broker_us_per_msg"] for r in runs if "broker_us_per_msg" in r])
            cores = median([r["broker_cores"] for r in runs if "broker_cores" in r])
            gen = median([r["gen_cpu_pct"] for r in runs])
            scale = rate / median(base) if rate and base else None  # type: ignore[operator]
            summary["points"].append(
                {
                    "n": n,
                    "broker": label,
                    "msgs_per_s": rate,
                    "scaling": scale,
                    "broker_us_per_msg": us,
                    "broker_cores": cores,
                    "gen_cpu_pct": gen,
                    "runs": rows.get((label, n), []),
                }
            )
            values = (rate or 0, scale or 0, us or 0, cores or 0, gen or 0)
            print(f"{n:>3} {label:<22} " + "{:>10.0f} {:>6.2f} {:>14.1f} {:>13.2f} {:>10.0f}".format(*values))
    for n in points:
        one = next((p for p in summary["points"] if p["n"] == n and p["broker"] == labels[0]), None)
        auto = next((p for p in summary["points"] if p["n"] == n and p["broker"] == labels[1]), None)
        if one and auto and one["msgs_per_s"] and auto["msgs_per_s"]:
            print(f"N={n}: workers=auto / workers=1 = {auto['msgs_per_s'] / one['msgs_per_s']:.2f}")
    cores = os.cpu_count() or 1
    one = {p["n"]: p["msgs_per_s"] for p in summary["points"] if p["broker"] == labels[0]}
    auto = {p["n"]: p["msgs_per_s"] for p in summary["points"] if p["broker"] == labels[1]}
    full = [n for n in points if n <= cores and one.get(points[0]) and auto.get(n)]
    if full and points[0] == 1:
        n = max(full)
        efficiency = auto[n] / (n * one[1])
        summary["efficiency"] = efficiency
        summary["expected_16_cores"] = expected(points, one[1], efficiency)
        print(
            f"per-worker efficiency at N={n}: {efficiency:.2f}; on paper with 16 cores: "
            + ", ".join(
                f"N={p}: {v:,.0f} msgs/s" for p, v in zip(points, summary["expected_16_cores"], strict=True)
            )
        )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    if not args.quick and plot(summary, labels, args.png):
        print(f"curves: {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
