"""Run the benchmark scenarios against ottermq (started here) and optionally another broker.

    python benchmarks/run.py                      # every scenario against a fresh ottermq
    python benchmarks/run.py --quick              # smoke run, small counts, 1 repetition
    python benchmarks/run.py --compare amqp://guest:guest@127.0.0.1:5672/%2F --reps 3 \\
        --scenarios noack,ack-each,fanout10 --json out.json

Scenarios named ``go:*`` run the same workloads with the independent amqp091-go generator
(``benchmarks/goloadgen.py``), ``c:*`` with the C generator on librabbitmq-c and raw frames
(``benchmarks/cloadgen.py``). With ``--compare`` every repetition runs ottermq then the other
broker (A B A B ...), so drift on a shared machine hits both; the table shows medians and
``ottermq/other`` ratios. The broker's CPU seconds (``/proc/<pid>/stat``) and peak RSS (sampled
every 100 ms) are shown when its pid is known: ours always, the other one when it listens on this
machine (or ``--other-pid``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # PYTHONSAFEPATH=1 (the Makefile sets it) leaves the script dir out
    sys.path.insert(0, str(_HERE))

from cloadgen import C_SCENARIOS  # noqa: E402
from cloadgen import binary as c_binary  # noqa: E402
from delayed_bench import DELAYED_SCENARIOS  # noqa: E402
from goloadgen import GO_SCENARIOS  # noqa: E402
from procinfo import (  # noqa: E402
    OtterMQProcess,
    RssSampler,
    find_broker_pid,
    raise_fd_limit,
    tree_cpu_seconds,
    wait_quiet,
)
from scenarios import FULL, QUICK, Context, Outcome, Scenario, failed  # noqa: E402
from scenarios import SCENARIOS as PY_SCENARIOS  # noqa: E402
from wire import BrokerURL, RawConnection  # noqa: E402

log = logging.getLogger("bench")
# our Python generator's scenarios, the independent amqp091-go generator's (go:*), delayed messages,
# the C generator's (c:*)
SCENARIOS: dict[str, Scenario] = {**PY_SCENARIOS, **GO_SCENARIOS, **DELAYED_SCENARIOS, **C_SCENARIOS}


@dataclass
class Target:
    """A broker under test. ``managed`` means we run it (ottermq) and know its pid."""

    label: str
    url: BrokerURL
    pid: int | None
    managed: bool = False


@dataclass
class Run:
    """One scenario run on one broker."""

    scenario: str
    target: str
    rep: int
    values: dict[str, float | None]
    note: str
    wall_s: float
    broker_cpu_s: float | None
    broker_peak_rss: int | None
    loadgen_cpu_s: float
    messages: int | None = None


@dataclass
class Report:
    targets: list[str]
    quick: bool
    reps: int
    runs: list[Run] = field(default_factory=list)


def new_runner() -> asyncio.Runner:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


async def _measured(scenario: Scenario, ctx: Context, timeout: float) -> tuple[Outcome, int | None]:
    sampler = RssSampler(ctx.pid)
    sampler.start()
    try:
        async with asyncio.timeout(timeout):
            outcome = await scenario.fn(ctx)
    except TimeoutError:
        outcome = failed(scenario, f"timed out after {timeout:g}s")
    except Exception as err:  # a failed run is a result, not the end of the benchmark
        log.warning("%s failed: %s: %s", scenario.name, type(err).__name__, err)
        outcome = failed(scenario, f"{type(err).__name__}: {err}")
    return outcome, await sampler.stop()


def run_once(scenario: Scenario, target: Target, ctx: Context, rep: int, timeout: float) -> Run:
    cpu0, own0, t0 = tree_cpu_seconds(target.pid), _own_cpu(), time.perf_counter()
    with new_runner() as runner:
        outcome, peak = runner.run(_measured(scenario, ctx, timeout))
    wall = time.perf_counter() - t0
    cpu1 = tree_cpu_seconds(target.pid)  # with its worker processes
    run = Run(
        scenario=scenario.name,
        target=target.label,
        rep=rep,
        values=outcome.values,
        note=outcome.note,
        wall_s=wall,
        broker_cpu_s=cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None,
        broker_peak_rss=peak,
        loadgen_cpu_s=_own_cpu() - own0,
        messages=outcome.messages,
    )
    units = {m.name: m.unit for m in scenario.metrics}
    shown = ", ".join(f"{k}={_fmt(v, units.get(k, ''))}" for k, v in outcome.values.items())
    log.info(
        "%-15s %-18s rep %d: %s%s (%.1fs)",
        scenario.name,
        target.label,
        rep + 1,
        shown,
        f" [{outcome.note}]" if outcome.note else "",
        wall,
    )
    return run


def _own_cpu() -> float:
    """CPU of this process and of its reaped children (the go:* and c:* scenarios' generators)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def broker_label(url: BrokerURL) -> str:
    """``<product> <version>`` from the broker's ``connection.start``, e.g. ``RabbitMQ 3.10.8``."""

    async def ask() -> str:
        conn = await RawConnection.open(url, timeout=10.0)
        props = conn.server_properties
        await conn.close()
        return " ".join(_text(props.get(k)) for k in ("product", "version") if props.get(k)) or "other"

    with new_runner() as runner:
        return runner.run(ask())


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# ------------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------------
def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _spread(values: list[float | None]) -> str:
    present = [v for v in values if v is not None]
    if len(present) < 2 or not statistics.median(present):
        return ""
    return f" ±{50 * (max(present) - min(present)) / abs(statistics.median(present)):.0f}%"


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit in ("ms", "x"):  # latencies and ratios
        return f"{value:.2f}"
    return f"{value:,.0f}"


def table(report: Report) -> str:
    """The results as a fixed-width text table (medians, spread, ratio, CPU, peak RSS) plus notes."""
    others = report.targets[1:]
    short = [t.split()[0] for t in report.targets]
    head = ["scenario", "metric", "unit", "better", *report.targets]
    if others:
        head.append(f"ratio {short[0]}/{short[1]}")
    head += [f"cpu s {t}" for t in short] + [f"µs/msg {t}" for t in short] + [f"peak MiB {t}" for t in short]
    head += [f"gen % {t}" for t in short]
    rows = [head]
    notes: list[str] = []
    for name in dict.fromkeys(r.scenario for r in report.runs):
        runs = {t: [r for r in report.runs if r.scenario == name and r.target == t] for t in report.targets}
        for t, rs in runs.items():
            if any(r.note for r in rs):
                notes.append(f"  {name} / {t}: {'; '.join(r.note or '-' for r in rs)}")
        for i, metric in enumerate(SCENARIOS[name].metrics):
            first = i == 0
            better = "higher" if metric.higher_is_better else "lower"
            row = [name if first else "", metric.name, metric.unit, better]
            medians = []
            for t in report.targets:
                samples = [r.values.get(metric.name) for r in runs[t]]
                medians.append(_median(samples))
                row.append(_fmt(medians[-1], metric.unit) + _spread(samples))
            if others:
                a, b = medians[0], medians[1]
                row.append(f"{a / b:.2f}" if a is not None and b else "-")
            for t in report.targets:
                cpu = _median([r.broker_cpu_s for r in runs[t]])
                row.append(f"{cpu:.1f}" if first and cpu is not None else "")
            for t in report.targets:  # broker CPU per message handled (when the scenario counts them)
                per = _median(
                    [
                        r.broker_cpu_s / r.messages * 1e6
                        if r.broker_cpu_s is not None and r.messages
                        else None
                        for r in runs[t]
                    ]
                )
                row.append(f"{per:.1f}" if first and per is not None else "")
            for t in report.targets:
                peak = _median([r.broker_peak_rss for r in runs[t]])
                row.append(f"{peak / 2**20:.0f}" if first and peak is not None else "")
            for t in report.targets:  # load generator CPU over the run, % of one core (~100: it is the limit)
                gen = _median([r.loadgen_cpu_s / r.wall_s * 100 if r.wall_s else None for r in runs[t]])
                row.append(f"{gen:.0f}" if first and gen is not None else "")
            rows.append(row)
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "-" * max(len(line) for line in lines))
    if notes:
        lines += ["", "notes (per run, in repetition order):", *notes]
    return "\n".join(lines)


def table_from_json(path: Path) -> str:
    """Re-print the table of an earlier ``--json`` file."""
    data = json.loads(path.read_text())
    runs = [Run(**r) for r in data["runs"]]
    return table(Report(data["targets"], data["quick"], data["reps"], runs))


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="ottermq benchmarks", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument("--compare", metavar="URL", help="also run every scenario against this broker")
    parser.add_argument("--reps", type=int, help="repetitions per broker (default 3, --quick 1)")
    parser.add_argument("--scenarios", help=f"comma-separated subset of: {','.join(SCENARIOS)}")
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run in under a minute")
    parser.add_argument("--json", metavar="FILE", help="write every run's numbers here")
    parser.add_argument("--conns", type=int, help="connections for mem-conn (default 1000, --quick 100)")
    parser.add_argument("--other-pid", type=int, help="pid of the --compare broker (default: auto-detect)")
    parser.add_argument("--timeout", type=float, help="hard limit per scenario run in seconds")
    parser.add_argument(
        "--ottermq-src",
        metavar="DIR",
        type=Path,
        help="run ottermq from this source tree instead of the installed one "
        "(e.g. mkdir /tmp/head && git archive HEAD | tar -x -C /tmp/head)",
    )
    parser.add_argument("--show", metavar="FILE", type=Path, help="print the table of an earlier --json file")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    if args.show:
        print(table_from_json(args.show))
        return 0
    names = [n.strip() for n in args.scenarios.split(",")] if args.scenarios else list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        sys.exit(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    sizes = QUICK if args.quick else FULL
    if args.conns:
        sizes = replace(sizes, mem_conns=args.conns)
    reps = args.reps or (1 if args.quick else 3)
    timeout = args.timeout or (120.0 if args.quick else 900.0)
    raise_fd_limit()
    if any(n.startswith("c:") for n in names):
        c_binary()  # compile (or find in the cache) before any run, so no run counts the compiler's CPU

    with OtterMQProcess(args.ottermq_src) as otter:
        ours = Target("ottermq", BrokerURL(port=otter.port), otter.pid, managed=True)
        targets = [ours]
        if args.compare:
            url = BrokerURL.parse(args.compare)
            pid = args.other_pid or find_broker_pid(url.host, url.port)
            label = broker_label(url)
            log.info("comparing with %s at %s (pid %s)", label, url, pid if pid is not None else "unknown")
            targets.append(Target(label, url, pid))
        report = Report([t.label for t in targets], args.quick, reps)
        for name in names:
            scenario = SCENARIOS[name]
            for rep in range(reps):
                for target in targets:
                    if target.managed:
                        _prepare(otter, scenario)
                        target.url, target.pid = BrokerURL(port=otter.port), otter.pid
                    ctx = Context(url=target.url, sizes=sizes, pid=target.pid)
                    wait_quiet([t.pid for t in targets])
                    report.runs.append(run_once(scenario, target, ctx, rep, timeout))
        if not otter.alive:
            log.warning("ottermq died during the last scenario; see %s", otter.log_path)

    print()
    print(table(report))
    print(f"\nmedians of {reps} rep(s){_spread_note(reps)}.")
    if len(targets) > 1:
        print(
            "ratio = ottermq / other. Throughput: > 1 means ottermq is faster. "
            "Latency and memory (better = lower): < 1 means ottermq is better."
        )
    if args.json:
        Path(args.json).write_text(json.dumps(_jsonable(report, sizes), indent=2))
        log.info("wrote %s", args.json)
    return 0


def _prepare(otter: OtterMQProcess, scenario: Scenario) -> None:
    if scenario.fresh_broker:
        otter.restart()
    else:
        otter.ensure_running()


def _spread_note(reps: int) -> str:
    return ", ±x% = half the min-max range over the median" if reps > 1 else ""


def _jsonable(report: Report, sizes: Any) -> dict[str, Any]:
    out: dict[str, Any] = asdict(report)
    out["sizes"] = asdict(sizes)
    medians: dict[str, dict[str, dict[str, float | None]]] = {}
    for run in report.runs:
        medians.setdefault(run.scenario, {}).setdefault(run.target, {})
    for name, per_target in medians.items():
        for target in per_target:
            runs = [r for r in report.runs if r.scenario == name and r.target == target]
            for metric in SCENARIOS[name].metrics:
                per_target[target][metric.name] = _median([r.values.get(metric.name) for r in runs])
    out["medians"] = medians
    return out


if __name__ == "__main__":
    sys.exit(main())
