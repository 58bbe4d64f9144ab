"""The independent load generator (issue 18): ``benchmarks/go/src/ottermqbench`` with amqp091-go.

Its scenarios join ``benchmarks/run.py``'s under the names ``go:<scenario>`` (same sizes, same
interleaved A B A B runs, same broker CPU and RSS sampling), so one ``make bench`` table shows both
generators side by side with RabbitMQ. The binary is built once per run in GOPATH mode from Debian's
``golang-github-rabbitmq-amqp091-go-dev`` (``.ci/install-go.sh``); without Go these scenarios report
"unsupported: ..." instead of numbers.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import urllib.parse
from functools import cache
from pathlib import Path

from scenarios import Context, MetricSpec, Outcome, Scenario

HERE = Path(__file__).resolve().parent
GOPATH = f"{HERE / 'go'}{os.pathsep}/usr/share/gocode"


@cache
def binary() -> Path | str:
    """The built ``ottermq-bench`` binary, or why there is none."""
    go = shutil.which("go") or ("/usr/lib/go/bin/go" if Path("/usr/lib/go/bin/go").exists() else None)
    if go is None:
        return "no go command (bash .ci/install-go.sh)"
    out = Path(tempfile.mkdtemp(prefix="ottermq-bench-")) / "ottermq-bench"
    env = dict(
        os.environ,
        GO111MODULE="off",
        GOFLAGS="",
        GOPATH=GOPATH,
        GOPROXY="off",
        GOTOOLCHAIN="local",
        CGO_ENABLED="1" if shutil.which("gcc") else "0",
    )
    env.setdefault("GOCACHE", str(out.parent / "gocache"))
    done = subprocess.run(
        [go, "build", "-o", str(out), "ottermqbench"],
        cwd=HERE / "go",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        return f"go build failed: {done.stderr.strip()[-300:]}"
    return out


def _url(ctx: Context) -> str:
    u = ctx.url
    user, password = urllib.parse.quote(u.user, safe=""), urllib.parse.quote(u.password, safe="")
    return f"amqp://{user}:{password}@{u.host}:{u.port}/{urllib.parse.quote(u.vhost, safe='')}"


async def run_generator(
    built: Path | str, program: str, label: str, ctx: Context, scenario: str, count: int, *extra: str
) -> dict[str, object] | str:
    """Run one scenario of an independent generator binary (``built``, or why there is none) against
    ``ctx``'s broker, naming what it declares ``bench.<label>.<tag>``; its JSON result, or a note saying
    why there is none. The Go and C generators share these flags and this output."""
    if isinstance(built, str):
        return f"unsupported: {built}"
    argv = [
        str(built),
        scenario,
        "-url",
        _url(ctx),
        "-prefix",
        f"bench.{label}.{ctx.tag}",
        "-count",
        str(count),
        "-stall",
        f"{ctx.sizes.stall}s",
        *extra,
    ]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    try:
        result: dict[str, object] = json.loads(out)
    except ValueError:
        return f"{program} {scenario} printed no JSON: {err.decode()[-300:]}"
    if result.get("error"):
        return f"failed: {result['error']}"
    return result


async def _run(ctx: Context, scenario: str, count: int, *extra: str) -> dict[str, object] | str:
    return await run_generator(binary(), "ottermq-bench", "go", ctx, scenario, count, *extra)


def _throughput(scenario: str, size: str) -> Scenario:
    async def fn(ctx: Context) -> Outcome:
        result = await _run(ctx, scenario, getattr(ctx.sizes, size))
        if isinstance(result, str):
            return Outcome({"msgs/s": None}, result)
        # messages the broker handled: each published one, once (deliveries of fanout10 are 10 per message)
        handled = int(result.get("count") or 0)  # type: ignore[call-overload]
        return Outcome({"msgs/s": float(result["msgs_per_s"])}, messages=handled)  # type: ignore[arg-type]

    return Scenario(
        f"go:{scenario}",
        fn,
        (MetricSpec("msgs/s", "msg/s"),),
        f"amqp091-go: {scenario} (independent generator)",
    )


def _latency(rate: int | None) -> Scenario:
    async def fn(ctx: Context) -> Outcome:
        return await _latency_at(ctx, rate or ctx.sizes.latency_rate)

    name = "go:latency" if rate is None else f"go:latency{rate // 1000}k"
    shown = "2k" if rate is None else f"{rate // 1000}k"
    return Scenario(
        name,
        fn,
        (MetricSpec("p50", "ms", False), MetricSpec("p99", "ms", False)),
        f"amqp091-go: publish->deliver latency at a fixed {shown} msgs/s",
    )


async def _latency_at(ctx: Context, rate: int) -> Outcome:
    result = await _run(ctx, "latency", 0, "-rate", str(rate), "-duration", f"{ctx.sizes.latency_seconds}s")
    if isinstance(result, str):
        return Outcome({"p50": None, "p99": None}, result)
    p50, p99 = float(result["p50_ms"]), float(result["p99_ms"])  # type: ignore[arg-type]
    return Outcome({"p50": p50, "p99": p99}, messages=int(result.get("count") or 0))  # type: ignore[call-overload]


GO_SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        _throughput("noack", "noack"),
        _throughput("ack-each", "acks"),
        _throughput("ack-multiple50", "acks"),
        _throughput("confirms", "confirms"),
        _throughput("confirms-consumed", "confirms"),
        _throughput("fanout10", "fanout"),
        _throughput("dlx", "dlx"),
        _latency(None),
        _latency(20_000),
    )
}
