"""Delayed-message benchmarks (issue 19): throughput, due-time lateness and memory per delayed message.

``x-delayed-message`` is RabbitMQ's community plugin there (not in Debian's RabbitMQ, so the compare
column says "unsupported" unless the plugin is enabled) and built in here. Bodies carry their own due
time (``perf_counter`` of the publish + its delay), so the consumer's ``now - stamp`` is how late
the message came out of the delay.
"""

from __future__ import annotations

import asyncio
import time
from functools import lru_cache

from loadgen import BODY_SIZE, Stalled, publish, wait_progress
from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp.body import ContentBody
from pamqp.header import ContentHeader
from procinfo import rss_bytes
from scenarios import Context, MetricSpec, Outcome, Scenario, Session, percentile, settled_rss
from wire import BrokerError, stamp

UNSUPPORTED = "unsupported: no x-delayed-message exchange type (RabbitMQ needs its community plugin)"


MARKER = b"\xa5" * 8


@lru_cache(maxsize=4096)
def _split_publish(exchange: str, delay_ms: int) -> tuple[bytes, bytes]:
    """A pre-encoded publish around the body's first 8 bytes (its due time, see ``stamp``)."""
    props = spec.Basic.Properties(headers={"x-delay": delay_ms})
    payload = MARKER + b"x" * (BODY_SIZE - 8)
    frames = (
        pframe.marshal(spec.Basic.Publish(exchange=exchange, routing_key="k"), 1)
        + pframe.marshal(ContentHeader(0, len(payload), props), 1)
        + pframe.marshal(ContentBody(payload), 1)
    )
    head, tail = frames.rsplit(MARKER, 1)
    return head, tail


def _delayed_publish(exchange: str, delay_ms: int, due: float) -> bytes:
    head, tail = _split_publish(exchange, delay_ms)
    return head + stamp(due) + tail


async def _setup(s: Session) -> tuple[str, str] | None:
    """A delayed direct exchange bound to a queue, or None where the type does not exist."""
    try:
        name = await s.exchange("dx", "x-delayed-message", {"x-delayed-type": "direct"})
    except (BrokerError, OSError):
        return None
    queue = await s.queue("q")
    await s.bind(queue, name, "k")
    return name, queue


async def delayed(ctx: Context) -> Outcome:
    """100k messages with short delays (1-100 ms), so the rate is the broker's: delivered msgs/s.
    (Lateness is ``delayed-late``'s: in this saturated burst it would measure the publish backlog.)"""
    n = ctx.sizes.acks
    async with Session(ctx, "delayed") as s:
        made = await _setup(s)
        if made is None:
            return Outcome({"msgs/s": None}, UNSUPPORTED)
        exchange, queue = made
        consumer = await s.connect()
        await consumer.consume(1, queue, no_ack=True)
        pub = await s.publisher()
        t0 = time.perf_counter()
        batch: list[bytes] = []
        for i in range(n):
            delay = 1 + (i * 7919) % 100
            batch.append(_delayed_publish(exchange, delay, time.perf_counter() + delay / 1000))
            if len(batch) == 500:
                pub.write(b"".join(batch))
                batch.clear()
                await pub.drain()
                await asyncio.sleep(0)
        pub.write(b"".join(batch))
        await wait_progress(
            consumer.until("delivered", n), lambda: consumer.delivered, ctx.sizes.stall, "delayed: delivered"
        )
        return Outcome({"msgs/s": n / (consumer.last_delivery - t0)}, messages=2 * n)


async def delayed_paced(ctx: Context) -> Outcome:
    """Due-time lateness at a steady 500 msgs/s, delays 100-1000 ms."""
    sizes = ctx.sizes
    async with Session(ctx, "delayed-late") as s:
        made = await _setup(s)
        if made is None:
            return Outcome({"p50": None, "p99": None}, UNSUPPORTED)
        exchange, queue = made
        consumer = await s.connect()
        await consumer.consume(1, queue, no_ack=True, latency=True)
        pub = await s.publisher()
        rate, sent, t0 = sizes.lateness_rate, 0, time.perf_counter()
        while (now := time.perf_counter()) - t0 < sizes.lateness_seconds:
            frames = []
            while sent < int((now - t0) * rate) + 1:
                delay = 100 + (sent * 7919) % 900
                frames.append(_delayed_publish(exchange, delay, now + delay / 1000))
                sent += 1
            if frames:
                pub.write(b"".join(frames))
            await asyncio.sleep(0.001)
        await wait_progress(
            consumer.until("delivered", sent),
            lambda: consumer.delivered,
            sizes.stall,
            "delayed-late: delivered",
        )
        assert consumer.latencies is not None
        samples = sorted(consumer.latencies)
        return Outcome({"p50": 1000 * percentile(samples, 50), "p99": 1000 * percentile(samples, 99)})


async def mem_delayed(ctx: Context) -> Outcome:
    """Broker RSS per delayed 100-byte message (1M waiting an hour)."""
    n = ctx.sizes.mem_messages
    if rss_bytes(ctx.pid) is None:
        return Outcome({"bytes/msg": None}, "n/a: broker pid unknown")
    async with Session(ctx, "mem-delayed") as s:
        made = await _setup(s)
        if made is None:
            return Outcome({"bytes/msg": None}, UNSUPPORTED)
        exchange, _queue = made
        pub = await s.publisher()
        before = await settled_rss(ctx.pid)
        await publish(pub, _delayed_publish(exchange, 3_600_000, 0.0), n)
        after = await settled_rss(ctx.pid, window=3.0, max_wait=120.0)  # settles once all are in
        if after is None or before is None:
            raise Stalled("mem-delayed: RSS unreadable")
        return Outcome({"bytes/msg": (after - before) / n}, f"RSS {before >> 20} -> {after >> 20} MiB")


DELAYED_SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "delayed",
            delayed,
            (MetricSpec("msgs/s", "msg/s"),),
            "x-delayed-message: 100k messages delayed 1-100 ms -> queue -> no-ack consumer (saturated)",
        ),
        Scenario(
            "delayed-late",
            delayed_paced,
            (MetricSpec("p50", "ms", False), MetricSpec("p99", "ms", False)),
            "x-delayed-message due-time lateness at 500 msgs/s, delays 0.1-1 s",
        ),
        Scenario(
            "mem-delayed",
            mem_delayed,
            (MetricSpec("bytes/msg", "B", False),),
            "broker RSS per delayed 100-byte message (delay 1 h)",
            fresh_broker=True,
        ),
    )
}
