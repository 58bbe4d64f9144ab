"""The mypyc-compiled hot path against its pure-Python sources, in one process per run (A B A B ...).

    python benchmarks/compiled.py --reps 5

Each run is a fresh interpreter on the installed tree, with ``OTTERMQ_PURE_PYTHON=1`` for ``pure``
(``ottermq.amqp.native``). It measures ``time.process_time``:

- ``reader``: frames split per second by ``FrameReader.feed`` (publish + header + 100-byte body frames,
  fed 64 KiB at a time);
- ``deliver``: ``fastpath.encode_deliver`` calls per second (100-byte body);
- ``publish-decode``: ``fastpath.decode_publish`` + ``decode_header`` per second;
- ``noack``, ``publish``, ``confirms``, ``fanout10``: µs of broker CPU per message through a whole
  connection (``hotpath.py``'s harness: a fake loop, a mock transport, prepared client bytes).

The table shows medians and compiled/pure ratios (for rates, pure/compiled: above 1 is faster compiled).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # PYTHONSAFEPATH=1 leaves the script dir out
    sys.path.insert(0, str(_HERE))

MICRO = ("reader", "deliver", "publish-decode")
HARNESS = ("noack", "publish", "confirms", "fanout10")
BODY = b"x" * 100


def _rate(fn: object, count: int) -> float:
    """Calls of ``fn()`` per second (``fn`` runs ``count`` operations; best of 3)."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        fn()  # type: ignore[operator]
        best = min(best, time.process_time() - started)
    return count / best


def micro(name: str) -> float:
    from ottermq.amqp import fastpath
    from ottermq.amqp.reader import FrameReader
    from wire import publish_frames

    if name == "reader":
        data = publish_frames(1, "", "q", BODY) * 20_000
        chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]

        def split() -> None:
            reader = FrameReader(0)
            for chunk in chunks:
                reader.feed(chunk)

        return _rate(split, 60_000)
    if name == "deliver":
        props = b"\x00\x00"

        def encode() -> None:
            for tag in range(100_000):
                fastpath.encode_deliver(1, "ctag", tag, False, "", "q", props, BODY, 131072)

        return _rate(encode, 100_000)
    (_, _, publish), (_, _, header), _ = FrameReader(0).feed(publish_frames(1, "ex", "routing.key", BODY))

    def decode() -> None:
        for _ in range(100_000):
            fastpath.decode_publish(publish)
            fastpath.decode_header(header)

    return _rate(decode, 100_000)


def worker(names: list[str], count: int) -> dict[str, float]:
    import hotpath
    from ottermq.amqp import compiled

    result: dict[str, float] = {"compiled": float(compiled())}
    for name in names:
        if name in MICRO:
            result[name] = micro(name)
        else:
            hotpath._amqp_run(_HERE.parent, name, count // 10, 65536)  # warm-up
            result[name] = min(hotpath._amqp_run(_HERE.parent, name, count, 65536) for _ in range(3))
            result[name] = result[name] / count * 1e6
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(MICRO + HARNESS))
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--reps", type=int, default=5, help="interpreters per build, interleaved")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.scenarios.split(",")]
    if args.worker:
        print(json.dumps(worker(names, args.messages)))
        return 0
    runs: dict[str, list[dict[str, float]]] = {"pure": [], "compiled": []}
    for _ in range(args.reps):
        for build in runs:
            env = {**os.environ, "PYTHONSAFEPATH": "1", "OTTERMQ_PURE_PYTHON": "1" if build == "pure" else ""}
            cmd = [sys.executable, __file__, "--worker", "--scenarios", ",".join(names)]
            cmd += ["--messages", str(args.messages)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=_HERE.parent)
            if out.returncode != 0:
                sys.exit(out.stderr[-3000:])
            runs[build].append(json.loads(out.stdout.splitlines()[-1]))
    if not all(r["compiled"] for r in runs["compiled"]):
        sys.exit("the installed hot path is not compiled (see ottermq.amqp.native.status())")
    print(f"median of {args.reps} interpreters per build, interleaved")
    print(f"{'scenario':>16s}  {'pure':>12s}  {'compiled':>12s}  {'speed-up':>8s}")
    for name in names:
        pure, comp = (statistics.median(r[name] for r in runs[b]) for b in ("pure", "compiled"))
        unit = "/s" if name in MICRO else " µs/msg"
        speedup = comp / pure if name in MICRO else pure / comp
        print(f"{name:>16s}  {pure:>12,.3f}  {comp:>12,.3f}  {speedup:>7.2f}x  {unit}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
