"""The benchmark scenarios. Each one is ``async fn(Context) -> Outcome`` plus its metric specs.

Every scenario uses 100-byte bodies, names what it declares ``bench.<scenario>.<what>.<tag>``
and deletes it at the end (``Session``), since the broker we compare against is long-lived.
Throughputs are measured from the first publish to the last delivery (or confirm) the generator
saw; a broker that stops moving messages for ``Sizes.stall`` seconds fails the run (``Stalled``)
instead of hanging it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from loadgen import BODY_SIZE, Stalled, body, publish, publish_confirmed, publish_paced, wait_progress
from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp.body import ContentBody
from pamqp.header import ContentHeader
from procinfo import rss_bytes
from wire import BrokerError, BrokerURL, RawConnection, publish_frames, stamp

log = logging.getLogger(__name__)

DRAIN_SETTLE = 6.0  # seconds after a drain before its RSS is read (mem-drain)


@dataclass(frozen=True)
class Sizes:
    """Message counts and timeouts; ``FULL`` for real runs, ``QUICK`` for a smoke run."""

    noack: int = 200_000
    acks: int = 100_000
    confirms: int = 50_000
    fanout: int = 20_000  # published; deliveries are 10x
    dlx: int = 100_000
    latency_seconds: float = 10.0
    latency_rate: int = 2_000
    lateness_seconds: float = 5.0
    lateness_rate: int = 500
    mem_messages: int = 1_000_000
    mem_conns: int = 1_000
    stall: float = 15.0
    dlx_stall: float = 10.0


FULL = Sizes()
QUICK = Sizes(
    noack=20_000,
    acks=10_000,
    confirms=5_000,
    fanout=2_000,
    dlx=10_000,
    latency_seconds=2.0,
    lateness_seconds=1.5,
    mem_messages=50_000,
    mem_conns=100,
    stall=5.0,
    dlx_stall=3.0,
)


@dataclass
class Context:
    """What a scenario run needs: the broker, the sizes, the broker pid (memory), a unique tag."""

    url: BrokerURL
    sizes: Sizes = FULL
    pid: int | None = None
    fake: bool = False  # talking to fakebroker.py (generator ceiling)
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])


@dataclass(frozen=True)
class MetricSpec:
    name: str
    unit: str
    higher_is_better: bool = True


@dataclass
class Outcome:
    values: dict[str, float | None]
    note: str = ""
    messages: int | None = None  # messages the broker handled (published + delivered), for CPU per message


@dataclass(frozen=True)
class Scenario:
    name: str
    fn: Callable[[Context], Awaitable[Outcome]]
    metrics: tuple[MetricSpec, ...]
    description: str
    fresh_broker: bool = False  # restart our broker first (memory baselines)


# ------------------------------------------------------------------------------------------------
# session: connections + cleanup
# ------------------------------------------------------------------------------------------------
class Session:
    """Connections for one scenario run; deletes every queue and exchange it declared on exit."""

    def __init__(self, ctx: Context, scenario: str) -> None:
        self.ctx = ctx
        self.scenario = scenario
        self.conns: list[RawConnection] = []
        self.control: RawConnection | None = None
        self.ch = 0
        self.queues: list[str] = []
        self.exchanges: list[str] = []

    async def __aenter__(self) -> Session:
        await self._control()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.gather(*(c.close() for c in self.conns), return_exceptions=True)
        deletes: list[tuple[str, Any, type[Any]]] = [
            *((q, spec.Queue.Delete(queue=q), spec.Queue.DeleteOk) for q in self.queues),
            *((x, spec.Exchange.Delete(exchange=x), spec.Exchange.DeleteOk) for x in self.exchanges),
        ]
        for name, method, reply in deletes:
            try:
                async with asyncio.timeout(30):
                    await self._rpc(method, reply)
            except (BrokerError, OSError, TimeoutError) as err:
                log.warning("%s: could not delete %s (%s)", self.scenario, name, err)
        if self.control is not None:
            await self.control.close()

    async def _control(self) -> RawConnection:
        """The control connection, (re)opened with channel 1 if it is missing or broken."""
        if self.control is None or self.control.error is not None:
            if self.control is not None:
                await self.control.close()
            self.control = await RawConnection.open(self.ctx.url)
            self.ch = 1
            await self.control.channel(self.ch)
        return self.control

    async def _rpc(self, method: Any, reply: type[Any]) -> Any:
        ctl = await self._control()
        try:
            return await ctl.rpc(self.ch, method, reply)
        except BrokerError:
            if ctl.error is None:  # only the channel was closed: carry on with a new one
                self.ch += 1
                await ctl.channel(self.ch)
            raise

    async def connect(self) -> RawConnection:
        conn = await RawConnection.open(self.ctx.url)
        self.conns.append(conn)
        return conn

    def name(self, what: str) -> str:
        return f"bench.{self.scenario}.{what}.{self.ctx.tag}"

    async def queue(self, what: str, **kwargs: Any) -> str:
        name = self.name(what)
        await self._rpc(spec.Queue.Declare(queue=name, **kwargs), spec.Queue.DeclareOk)
        self.queues.append(name)
        return name

    async def exchange(self, what: str, kind: str, arguments: dict[str, Any] | None = None) -> str:
        name = self.name(what)
        declare = spec.Exchange.Declare(exchange=name, exchange_type=kind, arguments=arguments)
        await self._rpc(declare, spec.Exchange.DeclareOk)
        self.exchanges.append(name)
        return name

    async def bind(self, queue: str, exchange: str, routing_key: str = "") -> None:
        await self._rpc(
            spec.Queue.Bind(queue=queue, exchange=exchange, routing_key=routing_key), spec.Queue.BindOk
        )

    async def count(self, queue: str) -> int:
        ok = await self._rpc(spec.Queue.Declare(queue=queue, passive=True), spec.Queue.DeclareOk)
        return int(ok.message_count)

    async def publisher(self, confirm: bool = False) -> RawConnection:
        conn = await self.connect()
        await conn.channel(1)
        if confirm:
            await conn.confirm_select(1)
        return conn


# ------------------------------------------------------------------------------------------------
# throughput
# ------------------------------------------------------------------------------------------------
async def _one_queue(
    ctx: Context, scenario: str, count: int, *, no_ack: bool, prefetch: int = 0, ack_every: int = 1
) -> Outcome:
    async with Session(ctx, scenario) as s:
        q = await s.queue("q")
        consumer = await s.connect()
        await consumer.consume(1, q, no_ack=no_ack, prefetch=prefetch, ack_every=ack_every)
        pub = await s.publisher()
        frames = publish_frames(1, "", q, body())
        t0 = time.perf_counter()
        pub_task = asyncio.ensure_future(publish(pub, frames, count))
        await wait_progress(
            asyncio.gather(pub_task, consumer.until("delivered", count)),
            lambda: consumer.delivered,
            ctx.sizes.stall,
            f"{scenario}: delivered",
        )
        consumer.flush_acks()
        end = max(pub_task.result(), consumer.last_delivery)
        return Outcome({"msgs/s": count / (end - t0)})


async def noack(ctx: Context) -> Outcome:
    return await _one_queue(ctx, "noack", ctx.sizes.noack, no_ack=True)


async def ack_each(ctx: Context) -> Outcome:
    return await _one_queue(ctx, "ack-each", ctx.sizes.acks, no_ack=False, prefetch=100, ack_every=1)


async def ack_multiple50(ctx: Context) -> Outcome:
    return await _one_queue(ctx, "ack-multiple50", ctx.sizes.acks, no_ack=False, prefetch=100, ack_every=50)


async def _confirmed(ctx: Context, count: int, with_consumer: bool) -> tuple[float, int]:
    async with Session(ctx, "confirms") as s:
        q = await s.queue("consumed" if with_consumer else "idle", durable=True)
        consumer = None
        if with_consumer:
            consumer = await s.connect()
            await consumer.consume(1, q, no_ack=True)
        pub = await s.publisher(confirm=True)
        frames = publish_frames(1, "", q, body(), persistent=True)
        t0 = time.perf_counter()
        pub_task = asyncio.ensure_future(publish_confirmed(pub, frames, count, outstanding=1000))
        waits: list[Awaitable[object]] = [pub_task]
        if consumer is not None:
            waits.append(consumer.until("delivered", count))
        await wait_progress(
            asyncio.gather(*waits),
            lambda: pub.confirmed + (consumer.delivered if consumer else 0),
            ctx.sizes.stall,
            "confirms: confirmed+delivered",
        )
        end = max(pub_task.result(), consumer.last_delivery if consumer else 0.0)
        return count / (end - t0), pub.nacked


async def confirms(ctx: Context) -> Outcome:
    n = ctx.sizes.confirms
    idle, nacked_idle = await _confirmed(ctx, n, with_consumer=False)
    busy, nacked_busy = await _confirmed(ctx, n, with_consumer=True)
    nacked = nacked_idle + nacked_busy
    return Outcome({"no consumer": idle, "with consumer": busy}, f"{nacked} nacked" if nacked else "")


async def fanout10(ctx: Context) -> Outcome:
    n = ctx.sizes.fanout
    async with Session(ctx, "fanout10") as s:
        exchange = await s.exchange("fx", "fanout")
        consumers: list[RawConnection] = []
        for i in range(10):
            q = await s.queue(f"q{i}")
            await s.bind(q, exchange)
            consumer = await s.connect()
            await consumer.consume(1, q, no_ack=True)
            consumers.append(consumer)
        pub = await s.publisher()
        frames = publish_frames(1, exchange, "", body())
        t0 = time.perf_counter()
        pub_task = asyncio.ensure_future(publish(pub, frames, n))
        await wait_progress(
            asyncio.gather(pub_task, *(c.until("delivered", n) for c in consumers)),
            lambda: sum(c.delivered for c in consumers),
            ctx.sizes.stall,
            "fanout10: deliveries",
        )
        end = max(pub_task.result(), *(c.last_delivery for c in consumers))
        return Outcome({"deliveries/s": 10 * n / (end - t0)})


async def dlx(ctx: Context) -> Outcome:
    n = ctx.sizes.dlx
    async with Session(ctx, "dlx") as s:
        dead = await s.exchange("dlx", "fanout")
        dlq = await s.queue("dlq")
        await s.bind(dlq, dead)
        try:
            src = await s.queue("src", arguments={"x-message-ttl": 1, "x-dead-letter-exchange": dead})
        except BrokerError as err:
            return Outcome({"msgs/s": None}, f"unsupported: queue.declare refused ({err})")
        pub = await s.publisher()
        t0 = time.perf_counter()
        pub_task = asyncio.ensure_future(publish(pub, publish_frames(1, "", src, body()), n))
        seen, changed = 0, t0
        while True:
            count = await s.count(dlq)
            now = time.perf_counter()
            if count >= n:
                await pub_task
                return Outcome({"msgs/s": n / (now - t0)})
            if count != seen:
                seen, changed = count, now
            elif now - changed > ctx.sizes.dlx_stall and pub_task.done():
                pub_task.result()
                if count == 0:
                    return Outcome(
                        {"msgs/s": None}, f"unsupported: no dead letters within {ctx.sizes.dlx_stall:g}s"
                    )
                return Outcome({"msgs/s": None}, f"stalled at {count}/{n} dead letters")
            await asyncio.sleep(0.05)


# ------------------------------------------------------------------------------------------------
# latency
# ------------------------------------------------------------------------------------------------
def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(0, min(len(sorted_values) - 1, round(pct / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]


async def latency(ctx: Context) -> Outcome:
    sizes = ctx.sizes
    async with Session(ctx, "latency") as s:
        q = await s.queue("q")
        consumer = await s.connect()
        await consumer.consume(1, q, no_ack=True, latency=True)
        pub = await s.publisher()
        sent = await publish_paced(pub, 1, q, sizes.latency_rate, sizes.latency_seconds)
        await wait_progress(
            consumer.until("delivered", sent), lambda: consumer.delivered, sizes.stall, "latency: delivered"
        )
        assert consumer.latencies is not None
        samples = consumer.latencies[len(consumer.latencies) // 10 :]  # drop the first 10%: warm-up
        samples.sort()
        return Outcome({"p50": 1000 * percentile(samples, 50), "p99": 1000 * percentile(samples, 99)})


# ------------------------------------------------------------------------------------------------
# expiry lateness (TTL -> DLX -> DLQ consumer)
# ------------------------------------------------------------------------------------------------
EXACT_TTLS_MS = (400, 300, 200, 100, 50)  # long ones first: in head mode the short ones would wait


def _expiring_publish(queue: str, ttl_ms: int | None, deadline: float) -> bytes:
    """A publish whose body starts with its own expiry deadline (``perf_counter`` seconds), so the
    DLQ consumer's ``now - stamp`` is the expiry lateness."""
    props = spec.Basic.Properties(expiration=str(ttl_ms) if ttl_ms is not None else None)
    payload = stamp(deadline) + b"x" * (BODY_SIZE - 8)
    return (
        pframe.marshal(spec.Basic.Publish(exchange="", routing_key=queue), 1)
        + pframe.marshal(ContentHeader(0, len(payload), props), 1)
        + pframe.marshal(ContentBody(payload), 1)
    )


async def _lateness(ctx: Context, exact: bool) -> Outcome:
    sizes = ctx.sizes
    async with Session(ctx, "late-exact" if exact else "late-head") as s:
        if exact and (s.control is None or s.control.server_properties.get("product") != "OtterMQ"):
            return Outcome({"p50": None, "p99": None}, "n/a: x-ottermq-exact-ttl is an ottermq extension")
        dead = await s.exchange("dlx", "fanout")
        dlq = await s.queue("dlq")
        await s.bind(dlq, dead)
        args: dict[str, Any] = {"x-dead-letter-exchange": dead}
        if exact:
            args["x-ottermq-exact-ttl"] = True
        else:
            args["x-message-ttl"] = 200
        src = await s.queue("src", arguments=args)
        consumer = await s.connect()
        await consumer.consume(1, dlq, no_ack=True, latency=True)
        pub = await s.publisher()
        rate, sent, t0 = sizes.lateness_rate, 0, time.perf_counter()
        while True:
            now = time.perf_counter()
            if now - t0 >= sizes.lateness_seconds:
                break
            due = int((now - t0) * rate) + 1
            frames = []
            while sent < due:
                ttl = EXACT_TTLS_MS[sent % len(EXACT_TTLS_MS)] if exact else None
                frames.append(_expiring_publish(src, ttl, now + (ttl if ttl is not None else 200) / 1000))
                sent += 1
            if frames:
                pub.write(b"".join(frames))
            await asyncio.sleep(0.001)
        await wait_progress(
            consumer.until("delivered", sent), lambda: consumer.delivered, sizes.stall, "lateness: delivered"
        )
        assert consumer.latencies is not None
        samples = sorted(consumer.latencies[len(consumer.latencies) // 10 :])
        return Outcome({"p50": 1000 * percentile(samples, 50), "p99": 1000 * percentile(samples, 99)})


async def late_head(ctx: Context) -> Outcome:
    return await _lateness(ctx, exact=False)


async def late_exact(ctx: Context) -> Outcome:
    return await _lateness(ctx, exact=True)


# ------------------------------------------------------------------------------------------------
# memory
# ------------------------------------------------------------------------------------------------
async def settled_rss(pid: int | None, window: float = 2.0, max_wait: float = 30.0) -> int | None:
    """RSS once it moved less than 0.5% (or 1 MiB) over ``window`` seconds, or after ``max_wait``.

    A long-lived broker may still be handing memory back from an earlier scenario (RabbitMQ after
    a big queue is deleted), which would otherwise be charged to this one.
    """
    first = rss_bytes(pid)
    if first is None:
        return None
    step = 0.25
    span = round(window / step)
    readings = [first]
    deadline = time.monotonic() + max_wait
    while time.monotonic() < deadline:
        await asyncio.sleep(step)
        now = rss_bytes(pid)
        if now is None:
            return None
        readings.append(now)
        recent = readings[-span - 1 :]
        if len(recent) > span and max(recent) - min(recent) <= max(1 << 20, now // 200):
            break
    return readings[-1]


async def _backlog(s: Session, pub: RawConnection, q: str, frames: bytes, n: int, name: str) -> None:
    """Publish ``n`` copies of ``frames`` into ``q`` (no consumer) and wait until the queue holds them all,
    failing the run once the count stops moving for ``stall`` seconds."""
    stall = s.ctx.sizes.stall
    pub_task = asyncio.ensure_future(publish(pub, frames, n))
    seen, changed = 0, time.perf_counter()
    while (count := await s.count(q)) < n:
        now = time.perf_counter()
        if count != seen:
            seen, changed = count, now
        elif now - changed > stall:
            raise Stalled(f"{name}: {count}/{n} queued, no progress for {stall:g}s")
        await asyncio.sleep(0.2)
    await pub_task


async def mem_queued(ctx: Context) -> Outcome:
    n = ctx.sizes.mem_messages
    if rss_bytes(ctx.pid) is None:
        return Outcome({"bytes/msg": None}, "n/a: broker pid unknown")
    async with Session(ctx, "mem-queued") as s:
        q = await s.queue("q")
        pub = await s.publisher()
        before = await settled_rss(ctx.pid)
        await _backlog(s, pub, q, publish_frames(1, "", q, body()), n, "mem-queued")
        after = await settled_rss(ctx.pid)
        assert before is not None and after is not None
        return Outcome({"bytes/msg": (after - before) / n}, f"RSS {_mib(before)} -> {_mib(after)} MiB")


async def _mem_drain(ctx: Context, persistent: bool) -> Outcome:
    """RSS before a backlog, with it queued and after a consumer drained it (the memory that comes back).

    The backlog is ``mem_messages`` 100-byte messages published without confirms into one queue (durable
    and persistent for the persistent variant) with no consumer; then a no-ack consumer takes them all.
    ``after/before`` is the settled RSS after the drain over the one before the backlog; the broker gets
    ``DRAIN_SETTLE`` seconds first (ottermq hands free heap pages back on a 5-second look).
    """
    n = ctx.sizes.mem_messages
    if rss_bytes(ctx.pid) is None:
        return Outcome({"after/before": None, "bytes/msg": None}, "n/a: broker pid unknown")
    name = "mem-drain-persistent" if persistent else "mem-drain"
    async with Session(ctx, name) as s:
        q = await s.queue("q", durable=persistent)
        pub = await s.publisher()
        before = await settled_rss(ctx.pid)
        await _backlog(s, pub, q, publish_frames(1, "", q, body(), persistent=persistent), n, name)
        queued = await settled_rss(ctx.pid)
        consumer = await s.connect()
        await consumer.consume(1, q, no_ack=True)
        await wait_progress(
            consumer.until("delivered", n), lambda: consumer.delivered, ctx.sizes.stall, f"{name}: drained"
        )
        await asyncio.sleep(DRAIN_SETTLE)
        after = await settled_rss(ctx.pid)
        assert before is not None and queued is not None and after is not None
        return Outcome(
            {"after/before": after / before, "bytes/msg": (queued - before) / n},
            f"RSS {_mib(before)} -> {_mib(queued)} queued -> {_mib(after)} MiB drained",
        )


async def mem_drain(ctx: Context) -> Outcome:
    return await _mem_drain(ctx, persistent=False)


async def mem_drain_persistent(ctx: Context) -> Outcome:
    return await _mem_drain(ctx, persistent=True)


async def mem_conn(ctx: Context) -> Outcome:
    n = ctx.sizes.mem_conns
    if rss_bytes(ctx.pid) is None:
        return Outcome({"bytes/conn": None}, "n/a: broker pid unknown")
    before = await settled_rss(ctx.pid)
    conns: list[RawConnection] = []
    failures: list[str] = []
    gate = asyncio.Semaphore(50)

    async def one(i: int) -> None:
        async with gate:
            if failures:  # the broker stopped accepting (e.g. its socket limit): stop asking
                return
            try:
                conn = await RawConnection.open(ctx.url, timeout=5.0, name=f"bench-idle-{i}")
            except (BrokerError, OSError, TimeoutError) as err:
                failures.append(f"{type(err).__name__}: {err}")
                return
            try:
                await conn.channel(1)
            except BrokerError as err:
                failures.append(f"channel.open: {err}")
                await conn.close()
                return
            conns.append(conn)

    try:
        await asyncio.gather(*(one(i) for i in range(n)))
        after = await settled_rss(ctx.pid)
    finally:
        for start in range(0, len(conns), 100):
            await asyncio.gather(*(c.close() for c in conns[start : start + 100]), return_exceptions=True)
    assert before is not None and after is not None
    note = f"{len(conns)}/{n} connections ({failures[0]})" if failures else ""
    if not conns:
        return Outcome({"bytes/conn": None}, note)
    note = "; ".join(filter(None, [note, f"RSS {_mib(before)} -> {_mib(after)} MiB"]))
    return Outcome({"bytes/conn": (after - before) / len(conns)}, note)


def _mib(value: int) -> str:
    return f"{value / 2**20:.0f}"


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "noack", noack, (MetricSpec("msgs/s", "msg/s"),), "1 publisher -> 1 queue -> 1 no-ack consumer"
        ),
        Scenario(
            "ack-each", ack_each, (MetricSpec("msgs/s", "msg/s"),), "manual ack per message, prefetch 100"
        ),
        Scenario(
            "ack-multiple50",
            ack_multiple50,
            (MetricSpec("msgs/s", "msg/s"),),
            "manual ack multiple every 50, prefetch 100",
        ),
        Scenario(
            "confirms",
            confirms,
            (MetricSpec("no consumer", "msg/s"), MetricSpec("with consumer", "msg/s")),
            "persistent + confirms on a durable queue, <= 1000 outstanding",
        ),
        Scenario(
            "fanout10",
            fanout10,
            (MetricSpec("deliveries/s", "msg/s"),),
            "fanout exchange -> 10 queues -> 10 no-ack consumers",
        ),
        Scenario("dlx", dlx, (MetricSpec("msgs/s", "msg/s"),), "x-message-ttl=1 -> DLX -> DLQ (no consumer)"),
        Scenario(
            "latency",
            latency,
            (MetricSpec("p50", "ms", False), MetricSpec("p99", "ms", False)),
            "publish->deliver latency at a fixed 2k msgs/s",
        ),
        Scenario(
            "late-head",
            late_head,
            (MetricSpec("p50", "ms", False), MetricSpec("p99", "ms", False)),
            "expiry lateness, x-message-ttl=200 head-of-queue expiry, DLQ consumer (500 msgs/s)",
        ),
        Scenario(
            "late-exact",
            late_exact,
            (MetricSpec("p50", "ms", False), MetricSpec("p99", "ms", False)),
            "expiry lateness, x-ottermq-exact-ttl, per-message TTLs 400..50 ms interleaved (ottermq only)",
        ),
        Scenario(
            "mem-conn",
            mem_conn,
            (MetricSpec("bytes/conn", "B", False),),
            "broker RSS per idle connection (one channel open)",
            fresh_broker=True,
        ),
        Scenario(
            "mem-queued",
            mem_queued,
            (MetricSpec("bytes/msg", "B", False),),
            "broker RSS per queued 100-byte message",
            fresh_broker=True,
        ),
        Scenario(
            "mem-drain",
            mem_drain,
            (MetricSpec("after/before", "x", False), MetricSpec("bytes/msg", "B", False)),
            "RSS after a backlog of transient messages drained, over RSS before it",
            fresh_broker=True,
        ),
        Scenario(
            "mem-drain-persistent",
            mem_drain_persistent,
            (MetricSpec("after/before", "x", False), MetricSpec("bytes/msg", "B", False)),
            "the same with persistent messages in a durable queue, published without confirms",
            fresh_broker=True,
        ),
    )
}


def failed(scenario: Scenario, note: str) -> Outcome:
    """An outcome with every metric missing, for a run that raised."""
    return Outcome(dict.fromkeys((m.name for m in scenario.metrics), None), note)
