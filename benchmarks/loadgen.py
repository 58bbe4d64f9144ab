"""Load generator: publish and consume loops over ``wire.RawConnection``, and its ``--ceiling``.

The generator must never be the bottleneck, so nothing per message happens in Python beyond a
``struct`` call per frame on receive:

- ``publish`` writes one pre-encoded message repeated ``batch`` times per ``write`` (no confirms);
- ``publish_confirmed`` does the same with at most ``outstanding`` unconfirmed messages;
- ``publish_paced`` sends timestamped messages at a fixed rate (latency);
- consumers count ``basic.deliver`` frames in bulk and ack with pre-encoded frames (see ``wire``).

``python benchmarks/loadgen.py --ceiling`` runs the throughput scenarios against
``fakebroker.py`` (a separate process that discards publishes, confirms each received chunk and
replays canned deliveries) and prints what the generator reaches when the broker costs nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # PYTHONSAFEPATH=1 (the Makefile sets it) leaves the script dir out
    sys.path.insert(0, str(_HERE))

from pamqp import commands as spec  # noqa: E402
from procinfo import cpu_seconds  # noqa: E402
from wire import BrokerURL, RawConnection, publish_frames, stamp, stamped_publish  # noqa: E402

log = logging.getLogger("loadgen")

BODY_SIZE = 100
BATCH = 512


class Stalled(Exception):
    """No progress for the stall timeout: the broker stopped moving messages."""


def body(size: int = BODY_SIZE) -> bytes:
    return b"x" * size


async def wait_progress(
    done: Awaitable[object], progress: Callable[[], int], stall: float, what: str
) -> None:
    """Await ``done``, failing if ``progress()`` stays the same for ``stall`` seconds.

    Raises:
        Stalled: no progress; the message says how far it got.
    """
    fut = asyncio.ensure_future(done)
    last = progress()
    try:
        while True:
            finished, _ = await asyncio.wait({fut}, timeout=stall)
            if finished:
                fut.result()
                return
            now = progress()
            if now == last:
                raise Stalled(f"{what}: no progress for {stall:g}s (at {now})")
            last = now
    finally:
        if not fut.done():
            fut.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await fut


async def publish(conn: RawConnection, frames: bytes, count: int, batch: int = BATCH) -> float:
    """Write ``count`` copies of a pre-encoded message, ``batch`` per write.

    Returns:
        ``perf_counter()`` once the last byte was handed to the socket.
    """
    big = frames * batch
    sent = 0
    while sent < count:
        k = min(batch, count - sent)
        conn.write(big if k == batch else frames * k)
        sent += k
        await conn.drain()
        await asyncio.sleep(0)  # let consumers on this loop read
    return time.perf_counter()


async def publish_confirmed(
    conn: RawConnection, frames: bytes, count: int, outstanding: int = 1000, batch: int = 100
) -> float:
    """``publish`` on a confirm-mode channel with at most ``outstanding`` unconfirmed messages.

    Returns:
        ``perf_counter()`` when the last confirm (ack or nack) arrived.
    """
    batch = min(batch, outstanding)
    big = frames * batch
    sent = 0
    while sent < count:
        k = min(batch, count - sent)
        if sent + k - conn.confirmed > outstanding:
            await conn.until("confirmed", sent + k - outstanding)
        conn.write(big if k == batch else frames * k)
        sent += k
        await conn.drain()
    await conn.until("confirmed", count)
    return time.perf_counter()


async def publish_paced(conn: RawConnection, channel: int, queue: str, rate: float, duration: float) -> int:
    """Publish timestamped messages at ``rate`` per second for ``duration`` seconds.

    Each message's body starts with the ``perf_counter()`` at which it was written.

    Returns:
        How many messages were sent.
    """
    head, tail = stamped_publish(channel, queue, BODY_SIZE)
    t0 = time.perf_counter()
    sent = 0
    while True:
        now = time.perf_counter()
        if now - t0 >= duration:
            return sent
        due = int((now - t0) * rate) + 1
        if due > sent:
            conn.write(b"".join([head, stamp(now), tail] * (due - sent)))
            sent = due
        await asyncio.sleep(0.001)  # uvloop timers have 1 ms resolution; less would busy-spin


# ------------------------------------------------------------------------------------------------
# ceiling
# ------------------------------------------------------------------------------------------------
async def publish_sink(url: BrokerURL, count: int) -> float:
    """Publish-only rate into a sink: ``count`` messages, then one round trip on the same channel."""
    conn = await RawConnection.open(url)
    try:
        await conn.channel(1)
        frames = publish_frames(1, "", "sink", body())
        t0 = time.perf_counter()
        await publish(conn, frames, count)
        await conn.rpc(1, spec.Basic.Qos(prefetch_count=0), spec.Basic.QosOk)
        return count / (time.perf_counter() - t0)
    finally:
        await conn.close()


def start_fake_broker() -> tuple[subprocess.Popen[str], int]:
    """Run ``fakebroker.py`` in its own process; returns it and its port."""
    proc = subprocess.Popen(
        [sys.executable, str(_HERE / "fakebroker.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"fake broker did not start: {line!r}")
    return proc, int(line.split()[1])


CEILING_SCENARIOS = ("noack", "ack-each", "ack-multiple50", "confirms", "fanout10")


async def ceiling(quick: bool) -> list[tuple[str, str, float | None, float, float]]:
    """Run the throughput scenarios against the fake broker.

    Returns:
        Rows of (scenario, metric, msgs/s, generator CPU %, fake broker CPU %).
    """
    from scenarios import FULL, QUICK, SCENARIOS, Context

    sizes = QUICK if quick else FULL
    sizes = replace(sizes, noack=sizes.noack * 2, acks=sizes.acks * 2, confirms=sizes.confirms * 2)
    proc, port = start_fake_broker()
    ctx = Context(url=BrokerURL(port=port), sizes=sizes, fake=True)

    async def sink() -> dict[str, float | None]:
        return {"msgs/s": await publish_sink(ctx.url, sizes.noack)}

    runs: list[tuple[str, Callable[[], Awaitable[dict[str, float | None]]]]] = [("publish-only", sink)]
    for name in CEILING_SCENARIOS:
        runs.append((name, functools.partial(_values, SCENARIOS[name].fn, ctx)))
    rows: list[tuple[str, str, float | None, float, float]] = []
    try:
        for name, fn in runs:
            gen0, fake0, wall0 = _own_cpu(), cpu_seconds(proc.pid) or 0.0, time.perf_counter()
            values = await fn()
            wall = time.perf_counter() - wall0
            gen = 100 * (_own_cpu() - gen0) / wall
            fake = 100 * ((cpu_seconds(proc.pid) or 0.0) - fake0) / wall
            for metric, value in values.items():
                rows.append((name, metric, value, gen, fake))
                log.info("ceiling %s %s: %s", name, metric, f"{value:,.0f}/s" if value else value)
    finally:
        proc.terminate()
        proc.wait(5)
    return rows


async def _values(fn: Callable[[Any], Awaitable[Any]], ctx: Any) -> dict[str, float | None]:
    outcome = await fn(ctx)
    return dict(outcome.values)


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ottermq benchmark load generator")
    parser.add_argument("--ceiling", action="store_true", help="measure the generator against a fake broker")
    parser.add_argument("--quick", action="store_true", help="smaller message counts")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    if not args.ceiling:
        parser.error("nothing to do: use --ceiling here, or benchmarks/run.py for the scenarios")
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # pragma: no cover
        runner = asyncio.Runner()
    with runner:
        rows = runner.run(ceiling(args.quick))
    print(f"{'scenario':<16} {'metric':<14} {'generator ceiling':>18} {'gen CPU':>8} {'fake CPU':>9}")
    for name, metric, value, gen, fake in rows:
        shown = f"{value:,.0f}/s" if value else "-"
        print(f"{name:<16} {metric:<14} {shown:>18} {gen:>7.0f}% {fake:>8.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
