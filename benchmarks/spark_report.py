"""Dead-letter analytics benchmark: report and compact throughput on synthetic archives.

For each size (default 1M and 10M records):

1. generate a JSON Lines archive in the broker's layout under ``--workdir`` (reused when it is
   already there with the same size and seed; ``--regen`` forces a new one);
2. compact it to date-partitioned Parquet;
3. run the full report (every table, CSV/Parquet, summary, report.md, charts) on the JSON Lines
   archive, then on the Parquet one.

Each step prints wall time and records/s (records in the archive / seconds, Spark start-up
excluded: one session serves every step; with ``--reps N`` each report runs N times and the median
is shown, the runs are in ``--json``). Needs the ``spark`` extra and Java 17.

    python benchmarks/spark_report.py                      # 1M and 10M under /tmp/ottermq-spark-bench
    python benchmarks/spark_report.py --sizes 100k --master 'local[2]'
    python benchmarks/spark_report.py --sizes 1M --json out.json --driver-memory 6g
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ottermq.spark_jobs.compact import compact
from ottermq.spark_jobs.generate import write_archive
from ottermq.spark_jobs.report import run_report
from ottermq.spark_jobs.session import spark_session

log = logging.getLogger("bench")


def parse_size(text: str) -> int:
    """``100k``, ``1M``, ``10M`` or a plain number."""
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _archive(root: Path, n: int, seed: int, regen: bool) -> tuple[Path, float | None]:
    stamp = root / "_generated.json"
    want = {"records": n, "seed": seed}
    if not regen and stamp.exists() and json.loads(stamp.read_text()) == want:
        log.info("reusing %s", root)
        return root, None
    shutil.rmtree(root, ignore_errors=True)
    log.info("generating %d records under %s", n, root)
    started = time.monotonic()
    write_archive(root, n, seed=seed, span_hours=72, workers=os.cpu_count() or 1)
    seconds = time.monotonic() - started
    stamp.write_text(json.dumps(want))
    return root, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1M,10M", help="comma-separated record counts (100k, 1M, 10M)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ottermq-spark-bench"))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--regen", action="store_true", help="regenerate archives even if present")
    parser.add_argument("--keep", action="store_true", help="keep compacted Parquet and reports afterwards")
    parser.add_argument("--skip", default="", help="steps to skip: compact,report-json,report-parquet")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--reps", type=int, default=1, help="run each report N times and report the median")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    skip = set(filter(None, args.skip.split(",")))
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    args.workdir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.workdir).free
    log.info(
        "%s: %.1f GB free (a 10M archive takes ~10 GB as JSON Lines, ~2 GB as Parquet)",
        args.workdir,
        free / 1e9,
    )

    results: list[dict[str, Any]] = []
    conf = {"spark.driver.memory": args.driver_memory, "spark.ui.showConsoleProgress": "false"}
    archives = {}  # generated before Spark starts: the benchmark measures Spark alone
    for n in sizes:
        label = f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k"
        archives[n] = (label, *_archive(args.workdir / f"jsonl-{label}", n, args.seed, args.regen))
    with spark_session("ottermq-spark-bench", args.master, conf) as spark:
        for n in sizes:
            label, jsonl, gen_s = archives[n]
            row: dict[str, Any] = {"records": n, "jsonl_bytes": _du(jsonl), "generate_s": gen_s}
            parquet = args.workdir / f"parquet-{label}"
            if "compact" not in skip:
                started = time.monotonic()
                run = compact(spark, str(jsonl), str(parquet), fmt="json")
                row["compact_s"] = time.monotonic() - started
                row["parquet_bytes"] = _du(parquet)
                assert run["records"] == n, run
            for fmt, source in (("json", jsonl), ("parquet", parquet)):
                if f"report-{fmt}" in skip or not source.exists():
                    continue
                out = args.workdir / f"report-{label}-{fmt}"
                times = []
                for _ in range(max(1, args.reps)):
                    started = time.monotonic()
                    summary = run_report(spark, str(source), str(out), fmt=fmt)  # type: ignore[arg-type]
                    times.append(time.monotonic() - started)
                    assert summary["records"] == n, summary["records"]
                row[f"report_{fmt}_s"] = statistics.median(times)
                row[f"report_{fmt}_runs"] = [round(t, 2) for t in times]
                if not args.keep:
                    shutil.rmtree(out, ignore_errors=True)
            if not args.keep:
                shutil.rmtree(parquet, ignore_errors=True)
            results.append(row)
            log.info("%s: %s", label, row)

    print()
    print(f"{'records':>10} {'JSONL':>9} {'Parquet':>9} {'step':<16} {'seconds':>8} {'records/s':>11}")
    for row in results:
        n = row["records"]
        size = f"{row['jsonl_bytes'] / 1e9:.2f} GB"
        psize = f"{row['parquet_bytes'] / 1e9:.2f} GB" if "parquet_bytes" in row else "-"
        for step, key in (
            ("generate (py)", "generate_s"),
            ("compact", "compact_s"),
            ("report JSONL", "report_json_s"),
            ("report Parquet", "report_parquet_s"),
        ):
            seconds = row.get(key)
            if seconds:
                print(f"{n:>10,} {size:>9} {psize:>9} {step:<16} {seconds:>8.1f} {n / seconds:>11,.0f}")
    print(f"\nmaster {args.master}, driver memory {args.driver_memory}, {os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
