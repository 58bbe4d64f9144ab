"""Scale curves (issue 18): no-ack throughput as the work grows along one axis at a time.

    python benchmarks/scale.py [--compare amqp://guest:guest@127.0.0.1:5672/%2F] [--quick]
        [--json scale.json] [--png benchmarks/scale.png]

Axes (the others held at 1 / 0): queues the messages are spread over (1, 100, 10,000), no-ack
consumers per queue (1, 10, 100), client connections, each publishing to and consuming from its own
queue (1, 100, 1,000), and messages already queued when the timed run starts (0, 1,000,000). Each
point publishes ``--count`` messages with the amqp091-go generator (``go/src/ottermqbench``, the
``scale`` scenario) against a fresh ottermq and, with ``--compare``, the other broker right after it
(A B per point); throughput = deliveries (backlog included) / time from the first timed publish to
the last delivery. Writes a table, the JSON and a PNG with one panel per axis (matplotlib, from
the ``spark`` extra; without it no PNG).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # PYTHONSAFEPATH=1 (the Makefile sets it) leaves the script dir out
    sys.path.insert(0, str(_HERE))

from goloadgen import binary  # noqa: E402
from procinfo import OtterMQProcess, raise_fd_limit  # noqa: E402
from run import broker_label  # noqa: E402
from wire import BrokerURL  # noqa: E402

AXES: dict[str, tuple[str, list[int]]] = {
    "queues": ("queues", [1, 100, 10_000]),
    "consumers": ("consumers per queue", [1, 10, 100]),
    "connections": ("connections", [1, 100, 1_000]),
    "backlog": ("messages queued before the run", [0, 1_000_000]),
}
QUICK: dict[str, list[int]] = {
    "queues": [1, 100],
    "consumers": [1, 10],
    "connections": [1, 100],
    "backlog": [0, 100_000],
}


def point(url: str, axis: str, value: int, count: int, stall: str = "60s") -> float | None:
    """Deliveries per second at one point (None: the run failed; the reason is printed)."""
    built = binary()
    if isinstance(built, str):
        sys.exit(f"scale: {built}")
    argv = [
        str(built),
        "scale",
        "-url",
        url,
        "-prefix",
        f"scale.{axis}.{value}",
        "-count",
        str(count),
        f"-{axis}",
        str(value),
        "-stall",
        stall,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    try:
        result = json.loads(done.stdout)
    except ValueError:
        print(f"  {axis}={value}: no result ({done.stderr.strip()[-200:]})", file=sys.stderr)
        return None
    if result.get("error"):
        print(f"  {axis}={value}: {result['error']}", file=sys.stderr)
        return None
    return float(result["msgs_per_s"])


def plot(results: dict[str, dict[str, list[float | None]]], grid: dict[str, list[int]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(grid), figsize=(4 * len(grid), 3.6))
    for ax, (axis, values) in zip(axes, grid.items(), strict=True):
        for broker, series in results.items():
            ys = [y if y is not None else float("nan") for y in series[axis]]
            ax.plot([str(v) for v in values], ys, marker="o", label=broker)
        ax.set_title(AXES[axis][0])
        ax.set_ylabel("deliveries/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle("No-ack throughput as the work grows (amqp091-go generator)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=fmt)
    parser.add_argument("--compare", help="another broker's amqp:// URL (RabbitMQ)")
    parser.add_argument("--count", type=int, default=200_000, help="messages published per point")
    parser.add_argument("--quick", action="store_true", help="small grid, 20,000 messages per point")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--png", type=Path, default=_HERE / "scale.png", help="the plot")
    args = parser.parse_args(argv)
    grid = QUICK if args.quick else {axis: values for axis, (_, values) in AXES.items()}
    count = 20_000 if args.quick else args.count
    raise_fd_limit()
    results: dict[str, dict[str, list[float | None]]] = {"ottermq": {}}
    other = broker_label(BrokerURL.parse(args.compare)) if args.compare else ""
    if args.compare:
        results[other] = {}
    for axis, values in grid.items():
        for broker in results:
            results[broker][axis] = []
        for value in values:
            with OtterMQProcess() as otter:  # a fresh broker per point: no state carried over
                ours = point(f"amqp://guest:guest@127.0.0.1:{otter.port}/%2F", axis, value, count)
            results["ottermq"][axis].append(ours)
            line = f"{axis:12} {value:>9,}  ottermq {ours or 0:>10,.0f}/s"
            if args.compare:
                theirs = point(args.compare, axis, value, count)
                results[other][axis].append(theirs)
                ratio = f"{ours / theirs:.2f}x" if ours and theirs else "-"
                line += f"  other {theirs or 0:>10,.0f}/s  {ratio}"
            print(line, flush=True)
    data = {"count": count, "grid": grid, "results": results, "other": other}
    print()
    print(_table(data))
    if args.json:
        args.json.write_text(json.dumps(data, indent=2))
    if plot(results, grid, args.png):
        print(f"plot: {args.png}")
    return 0


def _table(data: dict[str, Any]) -> str:
    """A Markdown table of a --json file (for the README)."""
    other = data.get("other") or "other"
    rows = [f"| axis | value | ottermq | {other} | ratio |", "|---|---|---|---|---|"]
    for axis, values in data["grid"].items():
        for i, value in enumerate(values):
            ours = data["results"]["ottermq"][axis][i]
            theirs = data["results"].get(other, {}).get(axis, [None] * len(values))[i]
            ratio = f"{ours / theirs:.2f}×" if ours and theirs else ""
            cells = [AXES[axis][0], f"{value:,}", f"{ours or 0:,.0f}/s", f"{theirs or 0:,.0f}/s", ratio]
            rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
