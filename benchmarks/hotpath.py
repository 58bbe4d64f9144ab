"""CPU per message of the broker's hot paths in one process: an A/B of source trees that machine noise
barely moves.

    python benchmarks/hotpath.py --ottermq-src /tmp/base --ottermq-src /tmp/head --reps 8

Same-run A/Bs of ``run.py`` measure sockets, two processes and the scheduler as well: on a shared
2-core machine their medians move by 5% between sessions. Here each tree (its own
``tests/protocol/conftest.py`` harness: a fake event loop, a mock transport, an instant store) runs
in a fresh interpreter, and ``time.process_time`` is taken around feeding it prepared client bytes:

- ``publish``: 100-byte messages to a queue with no consumer;
- ``noack`` / ``ack-each``: the same with a consumer, auto-ack or one ``basic.ack`` per message;
- ``confirms``: publisher confirms, no consumer;
- ``fanout10``: a fanout exchange to 10 queues with consumers (per published message);
- ``persistent``: persistent messages through the real SQLite store and durable hook (commits
  included: ``process_time`` counts the store's thread), from ``tests/unit/broker/test_recovery.py``.

Each tree runs from its sources (pure Python: a symlink overlay), or with ``--compiled`` as ``pip
install --target`` builds it: its hot path compiled by mypyc, as ``make install`` does (a minute or
two per tree).

Reads arrive in ``--chunk`` bytes (64 KiB: a pipelining client; 176: one publish per read). Each
tree runs A B A B ...; the table shows medians (µs per message) and head/base ratios. Each run
checks what the broker did (messages queued or delivered), so a broken path cannot look fast.

``--instructions`` counts instead of timing: each scenario runs once with ``--messages`` and once with
twice as many, each in its own interpreter under ``valgrind --tool=callgrind``, and the difference of
the two totals divided by ``--messages`` is the instructions one more message costs (start-up, imports
and set-up cancel out). A count does not move with the machine's load or clock, so a 2% difference
is visible on a shared machine where medians of seconds move by 10%; it weighs every instruction
alike (a cache miss costs more than an add), so it complements the timed run rather than replacing it.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import gc
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # PYTHONSAFEPATH=1 leaves the script dir out (as in run.py)
    sys.path.insert(0, str(_HERE))

from procinfo import overlay  # noqa: E402
from wire import publish_frames  # noqa: E402

SCENARIOS = ("publish", "noack", "ack-each", "confirms", "fanout10", "persistent")
BODY = b"x" * 100


def _load(tree: Path, relative: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"hotpath_{Path(relative).stem}", tree / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Harness:
    """One client connection on a fresh node of the tree under test."""

    def __init__(self, h: ModuleType) -> None:
        from ottermq.broker.config import Settings

        self.loop = h.FakeLoop()
        settings = Settings(_env_file=None)  # type: ignore[call-arg]
        node_class = getattr(h, "Node", None) or h.Broker  # the node (before the split: Broker)
        self.node = node_class(settings, self.loop, h.InstantStore(self.loop))
        auth = getattr(self.node, "services", self.node).auth  # (before the node's split: node.auth)
        auth.seed_defaults(settings)
        for name in auth.vhosts:
            self.node.ensure_vhost(name)
        server = h.AMQPServer(self.node) if hasattr(h, "AMQPServer") else self.node
        self.client = h.Client(server, self.loop)
        self.client.handshake()
        self.client.open_channel(1)
        self.written = 0

    def send(self, *methods: Any) -> None:
        for method in methods:
            self.client.send(1, method)
        self.loop.run_soon()
        del self.client.transport.buffer[:]

    def feed(self, data: bytes, chunk: int) -> None:
        conn, out, run_soon = self.client.conn, self.client.transport.buffer, self.loop.run_soon
        view = memoryview(data)
        for i in range(0, len(data), chunk):
            conn.data_received(bytes(view[i : i + chunk]))
            run_soon()
            self.written += len(out)
            del out[:]

    def queued(self, name: str) -> int:
        return int(self.node.vhosts["/"].queues[name].message_count)


def _amqp_run(tree: Path, name: str, count: int, chunk: int) -> float:
    from pamqp import commands as c
    from pamqp import frame

    h = _load(tree, "tests/protocol/conftest.py")
    run = Harness(h)
    run.send(c.Queue.Declare(queue="q"))
    if name in ("noack", "ack-each"):
        run.send(c.Basic.Consume(queue="q", consumer_tag="t", no_ack=name == "noack"))
    if name == "confirms":
        run.send(c.Confirm.Select())
    exchange = ""
    if name == "fanout10":
        exchange = "fx"
        run.send(c.Exchange.Declare(exchange="fx", exchange_type="fanout"))
        for i in range(10):
            run.send(c.Queue.Declare(queue=f"f{i}"), c.Queue.Bind(queue=f"f{i}", exchange="fx"))
            run.send(c.Basic.Consume(queue=f"f{i}", consumer_tag=f"t{i}", no_ack=True))
    data = publish_frames(1, exchange, "q", BODY) * count
    acks = b""
    if name == "ack-each":
        acks = b"".join(frame.marshal(c.Basic.Ack(delivery_tag=t), 1) for t in range(1, count + 1))
    gc.collect()
    gc.disable()
    started = time.process_time()
    run.feed(data, chunk)
    if acks:
        run.feed(acks, chunk)
    spent = time.process_time() - started
    gc.enable()
    deliveries = count * (10 if name == "fanout10" else 1)
    if name in ("publish", "confirms"):
        assert run.queued("q") == count, f"{name}: {run.queued('q')} of {count} queued"
    else:
        assert run.written >= deliveries * len(BODY), f"{name}: {run.written} bytes written"
        assert run.queued("q" if name != "fanout10" else "f0") == 0
    return spent


def _persistent_run(tree: Path, count: int) -> float:
    from ottermq.persistence.sqlite import SQLiteStore

    m = _load(tree, "tests/unit/broker/test_recovery.py")

    async def body() -> float:
        store = SQLiteStore(Path(tempfile.mkdtemp(prefix="hotpath-")) / "db", synchronous="NORMAL")
        await store.open()
        clock = m.Clock()
        vhost = m.boot(store, clock).vhosts["/"]
        queue = m.durable_queue(vhost, "q")
        await store.flush()
        gc.collect()
        started = time.process_time()
        for i in range(count):
            m.publish(vhost, "q", BODY)
            if i % 200 == 199:  # the loop turns as it does between a client's reads
                await asyncio.sleep(0)
        await store.flush()
        spent = time.process_time() - started
        assert queue.message_count == count and store.pending == 0
        await store.close()
        return spent

    return asyncio.run(body())


def worker(tree: Path, names: list[str], count: int, chunk: int, once: bool = False) -> dict[str, float]:
    """µs per message of each scenario in this interpreter (the best of 3 after a warm-up; with
    ``once``, a single run: ``--instructions`` counts the whole process)."""
    result = {}
    for name in names:

        def run(name: str = name) -> float:
            return (
                _persistent_run(tree, count) if name == "persistent" else _amqp_run(tree, name, count, chunk)
            )

        if once:
            result[name] = run() / count * 1e6
            continue
        run()
        result[name] = min(run() for _ in range(3)) / count * 1e6
    return result


def _worker_cmd(tree: Path, names: list[str], count: int, chunk: int, once: bool = False) -> list[str]:
    cmd = [sys.executable, __file__, "--worker", "--ottermq-src", str(tree), "--scenarios", ",".join(names)]
    return [*cmd, "--messages", str(count), "--chunk", str(chunk), *(["--once"] if once else [])]


def _collected(tree: Path, site: Path, name: str, count: int, chunk: int, work: Path) -> int:
    """Instructions the whole interpreter ran for one scenario of ``count`` messages (callgrind's total)."""
    out_file = work / f"callgrind.{os.getpid()}.{tree.name}.{name}.{count}"
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}"]
    cmd += _worker_cmd(tree, [name], count, chunk, once=True)
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(site), "PYTHONHASHSEED": "0"}
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    out_file.unlink(missing_ok=True)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        sys.exit(f"{tree} {name} {count}: {out.stderr[-3000:]}")
    return int(found.group(1))


def instructions(
    trees: list[Path], sites: list[Path], names: list[str], count: int, chunk: int, jobs: int, work: Path
) -> dict[str, dict[str, float]]:
    """Instructions per message of each scenario and tree: (total at 2 x count - total at count) / count."""
    pairs = zip(trees, sites, strict=True)
    tasks = [(t, s, n, c) for t, s in pairs for n in names for c in (count, 2 * count)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        totals = list(pool.map(lambda task: _collected(*task[:3], task[3], chunk, work), tasks))
    by_task = {(str(t), n, c): total for (t, _s, n, c), total in zip(tasks, totals, strict=True)}
    return {
        str(t): {n: (by_task[(str(t), n, 2 * count)] - by_task[(str(t), n, count)]) / count for n in names}
        for t in trees
    }


def _build(tree: Path, site: Path) -> Path:
    """``tree`` installed into ``site`` as pip builds it (its hot path compiled when it can be)."""
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(tree)]
    subprocess.run(cmd, check=True)
    probe = "from ottermq.amqp import native; print(native.status())"
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    print(f"{tree.name}: {out.stdout.strip()}", file=sys.stderr)
    return site


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--ottermq-src",
        action="append",
        type=Path,
        required=True,
        metavar="DIR",
        help="a source tree (git archive COMMIT | tar -x -C DIR); give two for an A/B",
    )
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"subset of {','.join(SCENARIOS)}")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--chunk", type=int, default=65536, help="bytes per read")
    parser.add_argument("--reps", type=int, default=5, help="interpreters per tree, interleaved")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument("--compiled", action="store_true", help="build each tree (mypyc) and run that")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per message under callgrind instead of timing (see above)",
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="callgrind runs at once")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.scenarios.split(",")]
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    if args.worker:
        print(json.dumps(worker(args.ottermq_src[0], names, args.messages, args.chunk, args.once)))
        return 0
    trees = [p.resolve() for p in args.ottermq_src]
    work = Path(tempfile.mkdtemp(prefix="hotpath-"))
    if args.compiled:
        sites = [_build(tree, work / str(i) / "site") for i, tree in enumerate(trees)]
    else:
        sites = [overlay(tree, work / str(i) / "site") for i, tree in enumerate(trees)]
    if args.instructions:
        counted = instructions(trees, sites, names, args.messages, args.chunk, args.jobs, work)
        _print_instructions(trees, names, counted, args)
        if args.json:
            args.json.write_text(json.dumps({"messages": args.messages, "instructions": counted}, indent=1))
        return 0
    runs: dict[str, list[dict[str, float]]] = {str(t): [] for t in trees}
    for _ in range(args.reps):
        for tree, site in zip(trees, sites, strict=True):
            env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(site)}
            cmd = _worker_cmd(tree, names, args.messages, args.chunk)
            out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                sys.exit(f"{tree}: {out.stderr[-3000:]}")
            runs[str(tree)].append(json.loads(out.stdout.splitlines()[-1]))
    print(f"µs per message, median of {args.reps} (reads of {args.chunk} bytes, {args.messages} messages)")
    head = ["scenario", *(t.name for t in trees), *(["ratio", "min ratio"] if len(trees) == 2 else [])]
    print("  ".join(f"{h:>12s}" for h in head))
    for name in names:
        medians = [statistics.median(r[name] for r in runs[str(t)]) for t in trees]
        cells = [name, *(f"{m:.3f}" for m in medians)]
        if len(trees) == 2:  # (a shared machine's runs are often bimodal: the fastest run is its floor)
            lows = [min(r[name] for r in runs[str(t)]) for t in trees]
            cells += [f"{medians[1] / medians[0]:.3f}", f"{lows[1] / lows[0]:.3f}"]
        print("  ".join(f"{c:>12s}" for c in cells))
    if args.json:
        args.json.write_text(
            json.dumps({"messages": args.messages, "chunk": args.chunk, "runs": runs}, indent=1)
        )
    return 0


def _print_instructions(
    trees: list[Path], names: list[str], counted: dict[str, dict[str, float]], args: argparse.Namespace
) -> None:
    runs = f"{args.messages} vs {2 * args.messages} messages, reads of {args.chunk} bytes"
    print(f"instructions per message (callgrind; {runs})")
    head = ["scenario", *(t.name for t in trees), *(["ratio"] if len(trees) == 2 else [])]
    print("  ".join(f"{h:>12s}" for h in head))
    for name in names:
        counts = [counted[str(t)][name] for t in trees]
        cells = [name, *(f"{c:,.0f}" for c in counts)]
        if len(trees) == 2:
            cells.append(f"{counts[1] / counts[0]:.4f}")
        print("  ".join(f"{c:>12s}" for c in cells))


if __name__ == "__main__":
    sys.exit(main())
