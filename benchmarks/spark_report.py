"""Dead-letter analytics benchmark: report and compact throughput on synthetic archives.

For each size (default 1M and 10M records):

1. generate a JSON Lines archive in the broker's layout under ``--workdir`` (reused when it is
   already there with the same size, seed, shape and schema; ``--regen`` forces a new one). The
   shape is ``retry-loops`` by default, what real archives hold: ~8 % of the messages die 2 to 6
   times in one queue (``death_count`` 1..k, seconds to minutes apart) and ~5 % die in several
   queues under one id; ``--shape uniform`` gives the first generator's independent records
   (see ``spark_jobs/generate.py``);
2. compact it to date-partitioned Parquet;
3. run the full report (every table, CSV/Parquet, summary, report.md, charts) on the JSON Lines
   archive, then on the Parquet one.

Each step prints wall time and records/s (records in the archive / seconds, Spark start-up
excluded: one session serves every step; with ``--reps N`` each report runs N times and the median
is shown, the runs are in ``--json``). ``--cli`` times the whole ``ottermq dlq report ARCHIVE
--no-charts`` command instead (a new process each run: Python, the JVM and Spark's start-up
included, as a user sees it). Needs the ``spark`` extra and Java 17.

    python benchmarks/spark_report.py                      # 1M and 10M under /tmp/ottermq-spark-bench
    python benchmarks/spark_report.py --sizes 100k --master 'local[2]'
    python benchmarks/spark_report.py --sizes 1M --json out.json --driver-memory 6g
    python benchmarks/spark_report.py --sizes 24,1M --cli --reps 3 --skip report-json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ottermq.spark_jobs.compact import compact
from ottermq.spark_jobs.generate import SHAPES, write_archive
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


def _label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1000}k"
    return str(n)


def _archive(
    root: Path, n: int, seed: int, shape: str, schema: int, regen: bool
) -> tuple[Path, float | None]:
    stamp = root / "_generated.json"
    want = {"records": n, "seed": seed, "shape": shape, "schema": schema}
    if not regen and stamp.exists() and json.loads(stamp.read_text()) == want:
        log.info("reusing %s", root)
        return root, None
    shutil.rmtree(root, ignore_errors=True)
    log.info("generating %d records (%s, schema %d) under %s", n, shape, schema, root)
    started = time.monotonic()
    write_archive(root, n, seed=seed, span_hours=72, workers=os.cpu_count() or 1, shape=shape, schema=schema)
    seconds = time.monotonic() - started
    stamp.write_text(json.dumps(want))
    return root, seconds


def _cli_report(source: Path, out: Path, fmt: str, master: str, driver_memory: str | None) -> float:
    """Seconds that the whole ``ottermq dlq report`` command took (a new process)."""
    command = [
        sys.executable,
        "-m",
        "ottermq.broker.cli.main",
        "dlq",
        "report",
        str(source),
        "--out",
        str(out),
    ]
    command += ["--no-charts", "--format", fmt]
    if master != "local[*]":
        command += ["--master", master]
    if driver_memory:
        command += ["--conf", f"spark.driver.memory={driver_memory}"]
    started = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONSAFEPATH": "1"})
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1M,10M", help="comma-separated record counts (100k, 1M, 10M)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ottermq-spark-bench"))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument(
        "--driver-memory",
        default=None,
        help="spark.driver.memory (default: 4g; with --cli, the command's own)",
    )
    parser.add_argument(
        "--shape", choices=SHAPES, default="retry-loops", help="the generated archives' shape"
    )
    parser.add_argument("--schema", type=int, choices=(1, 2), default=2, help="archive schema (retry-loops)")
    parser.add_argument(
        "--cli",
        action="store_true",
        help="time whole `ottermq dlq report` commands (Spark start-up included)",
    )
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
    conf = {"spark.driver.memory": args.driver_memory or "4g", "spark.ui.showConsoleProgress": "false"}
    archives = {}  # generated before Spark starts: the benchmark measures Spark alone
    suffix = "" if (args.shape, args.schema) == ("retry-loops", 2) else f"-{args.shape}-v{args.schema}"
    for n in sizes:
        label = _label(n)
        root = args.workdir / f"jsonl-{label}{suffix}"
        archives[n] = (label, *_archive(root, n, args.seed, args.shape, args.schema, args.regen))
    with spark_session("ottermq-spark-bench", args.master, conf) as spark:
        for n in sizes:
            label, jsonl, gen_s = archives[n]
            row: dict[str, Any] = {"records": n, "jsonl_bytes": _du(jsonl), "generate_s": gen_s}
            parquet = args.workdir / f"parquet-{label}{suffix}"
            if "compact" not in skip:
                started = time.monotonic()
                run = compact(spark, str(jsonl), str(parquet), fmt="json")
                row["compact_s"] = time.monotonic() - started
                row["parquet_bytes"] = _du(parquet)
                assert run["records"] == n, run
            for fmt, source in (("json", jsonl), ("parquet", parquet)):
                if f"report-{fmt}" in skip or not source.exists():
                    continue
                out = args.workdir / f"report-{label}{suffix}-{fmt}"
                times = []
                for _ in range(max(1, args.reps)):
                    if args.cli:
                        times.append(_cli_report(source, out, fmt, args.master, args.driver_memory))
                        summary = json.loads((out / "summary.json").read_text())
                    else:
                        started = time.monotonic()
                        summary = run_report(spark, str(source), str(out), fmt=fmt)  # type: ignore[arg-type]
                        times.append(time.monotonic() - started)
                    assert summary["records"] == n, summary["records"]
                row[f"report_{fmt}_s"] = statistics.median(times)
                row[f"report_{fmt}_runs"] = [round(t, 2) for t in times]
                if not args.keep:
                    shutil.rmtree(out, ignore_errors=True)
            if not args.keep and "compact" not in skip:
                shutil.rmtree(parquet, ignore_errors=True)
            results.append(row)
            log.info("%s: %s", label, row)

    print()
    print(f"{'records':>10} {'JSONL':>9} {'Parquet':>9} {'step':<22} {'seconds':>8} {'records/s':>11}")
    for row in results:
        n = row["records"]
        size = f"{row['jsonl_bytes'] / 1e9:.2f} GB"
        psize = f"{row['parquet_bytes'] / 1e9:.2f} GB" if "parquet_bytes" in row else "-"
        for step, key in (
            ("generate (py)", "generate_s"),
            ("compact", "compact_s"),
            ("report JSONL" + (" (cmd)" if args.cli else ""), "report_json_s"),
            ("report Parquet" + (" (cmd)" if args.cli else ""), "report_parquet_s"),
        ):
            seconds = row.get(key)
            if seconds:
                print(f"{n:>10,} {size:>9} {psize:>9} {step:<22} {seconds:>8.1f} {n / seconds:>11,.0f}")
    memory = args.driver_memory or ("the command's default" if args.cli else "4g")
    print(
        f"\nmaster {args.master}, driver memory {memory}, {args.shape} archives (schema {args.schema}), "
        f"{os.cpu_count()} CPUs"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
