"""Backlog benchmark: one durable lazy queue filled with persistent messages, held, then drained.

    python benchmarks/backlog.py --quick                      # 200,000 messages, ottermq alone
    python benchmarks/backlog.py --compare amqp://guest:guest@127.0.0.1:5672/%2F   # both, 10M each
    python benchmarks/backlog.py --broker other --compare URL --messages 1000000 --json out.json

Per broker, one after the other (ottermq first; each run writes the whole backlog to disk, which is
deleted before the next starts):

1. ``idle``: the queue is declared (durable, ``x-queue-mode: lazy`` unless ``--no-lazy``, plus any
   ``--queue-arg``), the broker left to go quiet, then its RSS and CPU measured for a few seconds.
2. ``publish``: ``--messages`` persistent ``--size``-byte messages from ``--publishers`` connections of
   the C generator (``cgen/``, ``backlog-publish``), each with at most ``--window`` unconfirmed;
   throughput is confirmed messages over first publish to last confirm.
3. ``hold``: ``--hold`` seconds without clients; broker CPU over them, RSS at their end ("held").
4. ``drain``: one consumer (``backlog-drain``), ``basic.qos`` ``--prefetch``, a ``multiple`` ack every
   ``--ack-every`` deliveries (0: no-ack), until the queue's depth at the end of the hold is delivered;
   throughput is deliveries over ``basic.consume`` to the last delivery.
5. ``settle``: ``--hold`` seconds again, then the RSS "after the drain" and the depth (0 expected).

The broker's RSS is sampled every 0.5 s from ``/proc`` over its whole process tree (the pid and every
descendant: ottermq's worker processes with ``OTTERMQ_WORKERS`` > 1, RabbitMQ's ``erl_child_setup``),
summed. The generator records ``connection.blocked`` / ``unblocked`` (it claims the capability) with
their time; the management API's ``/api/nodes`` is polled every second for the broker's own view of
its memory and disk alarms. Bytes per message = (held RSS - idle RSS) / messages held.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pamqp import commands as spec

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # PYTHONSAFEPATH=1 (the Makefile sets it) leaves the script dir out
    sys.path.insert(0, str(_HERE))

from backlog_report import markdown_table  # noqa: E402
from backlog_sampling import (  # noqa: E402
    GIB,
    Management,
    Monitor,
    Phase,
    Result,
    disk_usage,
    own_cpu,
    run_generator,
)
from cloadgen import binary as c_binary  # noqa: E402
from procinfo import (  # noqa: E402
    OtterMQProcess,
    find_broker_pid,
    machine_busy_seconds,
    tree_cpu_seconds,
    wait_quiet,
)
from wire import BrokerURL, RawConnection  # noqa: E402

log = logging.getLogger("backlog")
FULL_MESSAGES = 10_000_000
QUICK_MESSAGES = 200_000
BUSY_PCT = 25.0  # other processes' CPU (% of a core) over a phase above which the table warns


# ------------------------------------------------------------------------------------------------
# AMQP control: declare, depth, delete
# ------------------------------------------------------------------------------------------------
async def declare(url: BrokerURL, queue: str, arguments: dict[str, Any]) -> str:
    """Declare the durable queue; returns the broker's ``product version`` (``RabbitMQ 3.10.8``)."""
    conn = await RawConnection.open(url, name="ottermq-bench backlog")
    try:
        await conn.channel(1)
        await conn.rpc(
            1, spec.Queue.Declare(queue=queue, durable=True, arguments=arguments), spec.Queue.DeclareOk
        )
        props = conn.server_properties
        return " ".join(_text(props[k]) for k in ("product", "version") if props.get(k)) or "other"
    finally:
        await conn.close()


async def depth(url: BrokerURL, queue: str) -> int:
    """The queue's ready messages (passive declare)."""
    conn = await RawConnection.open(url, name="ottermq-bench backlog")
    try:
        await conn.channel(1)
        ok = await conn.rpc(1, spec.Queue.Declare(queue=queue, passive=True), spec.Queue.DeclareOk)
        return int(ok.message_count or 0)
    finally:
        await conn.close()


async def delete(url: BrokerURL, queue: str) -> None:
    conn = await RawConnection.open(url, name="ottermq-bench backlog")
    try:
        await conn.channel(1)
        await conn.rpc(1, spec.Queue.Delete(queue=queue), spec.Queue.DeleteOk)
    finally:
        await conn.close()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# ------------------------------------------------------------------------------------------------
# one broker
# ------------------------------------------------------------------------------------------------
@dataclass
class Target:
    """A broker to measure: where it listens, its pid, its management API and its data directory."""

    label: str
    url: BrokerURL
    pid: int
    mgmt: Management | None
    data_dir: Path | None
    rss_limit: int | None


class Run:
    """The phases on one broker, filling a ``Result``."""

    def __init__(self, target: Target, args: argparse.Namespace, result: Result, cgen: Path) -> None:
        self.t = target
        self.args = args
        self.r = result
        self.cgen = cgen
        self.monitor = Monitor(result, target.pid, target.mgmt, target.rss_limit)
        self._at_start: tuple[float | None, float | None, float] = (None, None, 0.0)

    def _counters(self) -> tuple[float | None, float | None, float]:
        return tree_cpu_seconds(self.t.pid), machine_busy_seconds(), own_cpu()

    def begin(self, name: str) -> Phase:
        self.monitor.phase = name
        phase = Phase(name, time.monotonic())
        self._at_start = self._counters()
        self.r.phases.append(phase)
        return phase

    async def end(self, phase: Phase, gen: dict[str, Any] | None = None) -> None:
        phase.end = time.monotonic()
        phase.rss_end = self.monitor.sample()
        phase.rss_file_end = self.monitor.file_backed if phase.rss_end is not None else None
        (cpu0, busy0, own0), (cpu1, busy1, own1) = self._at_start, self._counters()
        phase.broker_cpu_s = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
        phase.machine_busy_s = busy1 - busy0 if busy0 is not None and busy1 is not None else None
        phase.own_cpu_s = own1 - own0
        if gen is not None and gen.get("proc_cpu_s") is not None:
            phase.gen_cpu_s = float(gen["proc_cpu_s"])
        in_phase = [s[1] for s in self.r.samples if phase.start <= s[0] <= phase.end]
        phase.rss_peak = max(in_phase, default=phase.rss_end)
        if self.t.mgmt is not None:  # other users of the broker (a shared RabbitMQ), at each phase end
            try:
                overview = await asyncio.to_thread(self.t.mgmt.get, "/api/overview")
                queues = await asyncio.to_thread(self.t.mgmt.get, "/api/queues?columns=name,messages")
                self.r.totals[phase.name] = {
                    "object_totals": overview.get("object_totals"),
                    "other_messages": sum(
                        q.get("messages") or 0 for q in queues if q.get("name") != self.r.queue
                    ),
                }
            except (OSError, ValueError, AttributeError) as err:
                log.debug("/api/overview, /api/queues: %s", err)

    def gen_argv(self, scenario: str, count: int, *extra: str) -> list[str]:
        return [
            str(self.cgen),
            scenario,
            "-url",
            _amqp_url(self.t.url),
            "-queue",
            self.r.queue,
            "-count",
            str(count),
            "-stall",
            f"{self.args.stall}s",
            "-progress",
            "1s",
            *extra,
        ]

    async def go(self) -> None:
        a, r = self.args, self.r
        r.label = await declare(self.t.url, r.queue, r.arguments)
        log.info("%s (pid %d): queue %s declared with %s", r.label, self.t.pid, r.queue, r.arguments)
        self.monitor.start(a.interval)
        try:
            await self.phases()
        finally:
            await self.monitor.stop()

    async def phases(self) -> None:
        a, r = self.args, self.r
        await asyncio.to_thread(wait_quiet, [self.t.pid])
        idle = self.begin("idle")
        await asyncio.sleep(a.idle)
        await self.end(idle)
        idle_samples = [s[1] for s in r.samples if idle.start <= s[0] <= idle.end]
        r.idle_rss = int(statistics.median(idle_samples)) if idle_samples else idle.rss_end
        r.idle_cpu_pct = _pct(idle.broker_cpu_s, idle.seconds)
        r.disk_idle = disk_usage(self.t.data_dir)

        pub = self.begin("publish")
        extra = ["-size", str(a.size), "-publishers", str(a.publishers), "-window", str(a.window)]
        argv = self.gen_argv("backlog-publish", a.messages, *extra)
        gen = await run_generator(argv, r, self.monitor, stop_on_limit=True)
        await self.end(pub, gen)
        r.published = int(gen.get("delivered") or 0)
        r.publish_msgs_s = _rate(r.published, gen)
        r.publish_gen_cpu_pct = gen.get("cpu_pct")
        r.blocked_events += [dict(e, phase="publish") for e in gen.get("events", [])]
        if gen.get("error"):
            r.notes.append(f"publish: {gen['error']}")
        log.info("%s: published %s at %s msg/s", r.label, f"{r.published:,}", _fmt(r.publish_msgs_s))

        hold = self.begin("hold")
        await asyncio.sleep(a.hold)
        await self.end(hold)
        r.hold_cpu_pct = _pct(hold.broker_cpu_s, hold.seconds)
        r.held = await depth(self.t.url, r.queue)
        r.disk_held = disk_usage(self.t.data_dir)
        if r.held > r.published:
            r.notes.append(
                f"the queue holds {r.held:,} messages after {r.published:,} confirms (published, not yet"
                " confirmed when the publish phase ended)"
            )
        elif r.held < r.published:
            r.notes.append(f"the queue holds only {r.held:,} messages after {r.published:,} confirms")

        if r.held:
            drain = self.begin("drain")
            extra = ["-prefetch", str(a.prefetch), "-ack-every", str(a.ack_every)]
            gen = await run_generator(self.gen_argv("backlog-drain", r.held, *extra), r, self.monitor)
            await self.end(drain, gen)
            r.drained = int(gen.get("delivered") or 0)
            r.drain_msgs_s = _rate(r.drained, gen)
            r.drain_gen_cpu_pct = gen.get("cpu_pct")
            if gen.get("first_delivery") and gen.get("t_first"):
                r.drain_first_s = float(gen["first_delivery"]) - float(gen["t_first"])
            r.blocked_events += [dict(e, phase="drain") for e in gen.get("events", [])]
            if gen.get("error"):
                r.notes.append(f"drain: {gen['error']}")
            log.info("%s: drained %s at %s msg/s", r.label, f"{r.drained:,}", _fmt(r.drain_msgs_s))

        settle = self.begin("settle")
        await asyncio.sleep(a.hold)
        await self.end(settle)
        r.left = await depth(self.t.url, r.queue)
        if r.left:
            r.notes.append(f"{r.left:,} messages left in the queue after the drain")
        busy = [f"{p.name} {p.others_pct:.0f}%" for p in r.phases if (p.others_pct or 0) > BUSY_PCT]
        if busy:
            r.notes.append(
                "the machine was busy: other processes used " + ", ".join(busy) + " of a core (of "
                f"{os.cpu_count()}); msg/s are lower, and µs/msg may be higher, than on a quiet machine"
            )


def _rate(count: int, gen: dict[str, Any]) -> float | None:
    first, last = gen.get("t_first"), gen.get("t_last")
    if not count or not first or not last or last <= first:
        return None
    return count / (float(last) - float(first))


def _pct(cpu: float | None, seconds: float) -> float | None:
    return None if cpu is None or seconds <= 0 else 100 * cpu / seconds


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _amqp_url(url: BrokerURL) -> str:
    import urllib.parse

    quote = urllib.parse.quote
    return f"amqp://{quote(url.user, safe='')}:{quote(url.password, safe='')}@{url.host}:{url.port}/" + quote(
        url.vhost, safe=""
    )


def new_result(args: argparse.Namespace, url: BrokerURL, pid: int | None) -> Result:
    return Result(
        label="?",
        url=str(url),
        pid=pid,
        queue=f"bench.backlog.{os.urandom(4).hex()}",
        arguments=queue_arguments(args),
        messages=args.messages,
        size=args.size,
        publishers=args.publishers,
        window=args.window,
        prefetch=args.prefetch,
        ack_every=args.ack_every,
    )


def queue_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """``x-queue-mode: lazy`` (unless ``--no-lazy``) and every ``--queue-arg KEY=VALUE`` (integers as
    such)."""
    out: dict[str, Any] = {"x-queue-mode": "lazy"} if args.lazy else {}
    for item in args.queue_arg:
        key, _, value = item.partition("=")
        out[key] = int(value) if value.lstrip("-").isdigit() else value
    return out


def run_ottermq(args: argparse.Namespace, cgen: Path) -> Result:
    env = dict(item.partition("=")[::2] for item in args.ottermq_env)
    with OtterMQProcess(args.ottermq_src, env=env) as otter:
        assert otter.pid is not None
        url = BrokerURL(port=otter.port)
        mgmt = Management(f"http://127.0.0.1:{otter.web_port}", "guest", "guest")
        data_dir = otter.workdir / f"data{otter.starts - 1}"
        target = Target("ottermq", url, otter.pid, mgmt, data_dir, args.max_rss)
        result = new_result(args, url, otter.pid)
        _execute(Run(target, args, result, cgen))
        if not otter.alive:
            result.notes.append(f"ottermq exited (code {otter.proc.returncode if otter.proc else '?'})")
        t0 = time.monotonic()
        otter.stop(timeout=120)  # SIGTERM; a large store can take a while to close
        if time.monotonic() - t0 > 5:
            result.notes.append(f"ottermq took {time.monotonic() - t0:.0f} s to stop (SIGTERM) after the run")
        shutil.rmtree(data_dir, ignore_errors=True)  # the backlog; the log stays if it has tracebacks
    return result


def run_other(args: argparse.Namespace, cgen: Path) -> Result:
    """Raises:
    SystemExit: the other broker's pid is unknown (RSS is what this benchmark is about)."""
    url = BrokerURL.parse(args.compare)
    pid = args.other_pid or find_broker_pid(url.host, url.port)
    if pid is None:
        raise SystemExit(f"no pid for the broker at {url}: pass --other-pid")
    mgmt_url = args.other_mgmt or f"http://{url.host}:15672"
    mgmt = Management(mgmt_url, url.user, url.password) if mgmt_url != "none" else None
    target = Target("other", url, pid, mgmt, _other_data_dir(args, pid), args.other_max_rss)
    result = new_result(args, url, pid)
    run = Run(target, args, result, cgen)
    try:
        _execute(run)
    finally:
        try:
            asyncio.run(delete(url, result.queue))
        except Exception as err:  # the run's result stands; say what is left behind
            log.warning("could not delete %s on %s: %s", result.queue, url, err)
            result.notes.append(f"queue {result.queue} not deleted: {err}")
    return result


def _other_data_dir(args: argparse.Namespace, pid: int) -> Path | None:
    if args.other_data_dir:
        return None if args.other_data_dir == "none" else Path(args.other_data_dir)
    try:  # RabbitMQ: RABBITMQ_MNESIA_BASE, else $HOME/mnesia (/var/lib/rabbitmq/mnesia)
        environ = dict(
            kv.partition("=")[::2]
            for kv in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
            if kv
        )
    except OSError:
        return None
    base = environ.get("RABBITMQ_MNESIA_BASE") or (environ["HOME"] + "/mnesia" if "HOME" in environ else "")
    return Path(base) if base and Path(base).is_dir() else None


def _execute(run: Run) -> None:
    t0 = time.monotonic()
    try:
        asyncio.run(run.go())
    except Exception as err:  # a failed run is a result: the table says how far it got
        log.exception("%s: run failed", run.r.label)
        run.r.notes.append(f"failed: {type(err).__name__}: {err}")
    run.r.wall_s = time.monotonic() - t0


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(description=__doc__, formatter_class=fmt)
    p.add_argument(
        "--messages", type=int, help=f"backlog size (default {FULL_MESSAGES:,}; --quick {QUICK_MESSAGES:,})"
    )
    p.add_argument("--size", type=int, default=1024, help="body bytes (default 1024)")
    p.add_argument("--broker", choices=("ottermq", "other", "both"), help="default: both with --compare")
    p.add_argument("--compare", help="the other broker's amqp:// URL (RabbitMQ)")
    p.add_argument("--ottermq-src", type=Path, help="run ottermq from this source tree")
    p.add_argument(
        "--ottermq-env", action="append", default=[], help="KEY=VALUE for ottermq (OTTERMQ_WORKERS=2)"
    )
    p.add_argument("--json", type=Path, help="write every figure and sample here")
    p.add_argument("--table", type=Path, help="only print the table of an earlier run's --json file")
    p.add_argument(
        "--quick", action="store_true", help=f"smoke run: {QUICK_MESSAGES:,} messages, short waits"
    )
    lazy = p.add_mutually_exclusive_group()
    lazy.add_argument(
        "--lazy", dest="lazy", action="store_true", default=True, help="x-queue-mode: lazy (default)"
    )
    lazy.add_argument("--no-lazy", dest="lazy", action="store_false", help="no x-queue-mode argument")
    p.add_argument("--queue-arg", action="append", default=[], help="another queue argument KEY=VALUE")
    p.add_argument("--publishers", type=int, default=2, help="publisher connections (default 2)")
    p.add_argument(
        "--window", type=int, default=1000, help="unconfirmed messages per publisher (default 1000)"
    )
    p.add_argument("--prefetch", type=int, default=1000, help="the consumer's basic.qos (default 1000)")
    p.add_argument("--ack-every", type=int, default=100, help="multiple ack every N deliveries; 0 = no-ack")
    p.add_argument("--hold", type=float, help="seconds held before the drain and settled after it (10)")
    p.add_argument("--idle", type=float, help="seconds the idle RSS and CPU are measured over (5)")
    p.add_argument("--interval", type=float, default=0.5, help="RSS sampling period (0.5 s)")
    p.add_argument("--stall", type=float, default=60.0, help="a phase fails after this long without progress")
    p.add_argument("--max-rss", type=float, default=8.0, help="GiB: stop publishing to ottermq past this (8)")
    p.add_argument("--other-max-rss", type=float, help="GiB: the same for the other broker (default none)")
    p.add_argument("--other-pid", type=int, help="the other broker's pid, if not found from its port")
    p.add_argument("--other-mgmt", help="its management URL (default http://HOST:15672; 'none')")
    p.add_argument("--other-data-dir", help="its data directory for bytes on disk (default: found; 'none')")
    args = p.parse_args(argv)
    if args.messages is None:
        args.messages = QUICK_MESSAGES if args.quick else FULL_MESSAGES
    if args.messages < 1 or args.publishers < 1 or args.size < 0:
        p.error("--messages and --publishers must be at least 1, --size at least 0")
    args.hold = args.hold if args.hold is not None else (3.0 if args.quick else 10.0)
    args.idle = args.idle if args.idle is not None else (2.0 if args.quick else 5.0)
    args.broker = args.broker or ("both" if args.compare else "ottermq")
    args.max_rss = int(args.max_rss * GIB) if args.max_rss else None
    args.other_max_rss = int(args.other_max_rss * GIB) if args.other_max_rss else None
    if args.broker != "ottermq" and not args.compare:
        p.error(f"--broker {args.broker} needs --compare URL")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    args = parse_args(argv)
    if args.table:  # the table again from an earlier run's JSON
        doc = json.loads(args.table.read_text())
        print(
            markdown_table(
                [Result.from_dict(r) for r in doc["results"]], argparse.Namespace(**doc["options"])
            )
        )
        return 0
    cgen = c_binary()
    if isinstance(cgen, str):
        log.error("no C generator: %s", cgen)
        return 2
    results: list[Result] = []
    runs = (
        [run_ottermq]
        if args.broker == "ottermq"
        else [run_other]
        if args.broker == "other"
        else [run_ottermq, run_other]
    )
    for run in runs:
        results.append(run(args, cgen))
        if args.json:  # after each broker: a later one failing loses nothing
            write_json(args, results)
    print()
    print(markdown_table(results, args))
    return 0 if all(not any(n.startswith("failed") for n in r.notes) for r in results) else 1


def write_json(args: argparse.Namespace, results: list[Result]) -> None:
    doc = {
        "options": {k: _jsonable(v) for k, v in vars(args).items()},
        "machine": {"cpus": os.cpu_count(), "ram": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")},
        "results": [
            dict(asdict(r), bytes_per_message=r.bytes_per_message, peak_rss=r.peak_rss) for r in results
        ],
    }
    args.json.write_text(json.dumps(doc, indent=1))
    log.info("wrote %s", args.json)


def _jsonable(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


if __name__ == "__main__":
    sys.exit(main())
