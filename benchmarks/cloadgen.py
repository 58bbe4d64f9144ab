"""The C load generator: ``benchmarks/cgen/ottermq_cgen.c`` on librabbitmq-c, in the ``c:*`` scenarios.

A third generator next to our Python one (``loadgen.py``) and amqp091-go (``goloadgen.py``), made so
that it is not the limit: librabbitmq-c (Debian's ``librabbitmq-dev``, ``.ci/install-cgen.sh``) opens
the connections and declares, then the data connections switch to their raw socket: 50 pre-encoded
publishes per ``write()``, frames walked by hand per ``read()`` of up to 512 KiB, acks gathered per read,
every connection in one thread and one ``poll()`` loop. Its scenarios join ``benchmarks/run.py``'s as
``c:<scenario>`` (same sizes, same interleaved A B A B runs, same broker CPU and RSS sampling), with a
second metric ``gen cpu``: the generator's own utime + stime over the timed part (first publish to last
delivery / confirm / dead letter), in % of one core; near 100 the generator is the limit.

The binary is compiled once with ``cc`` into ``$XDG_CACHE_HOME/ottermq-bench`` (``~/.cache``), named by
a hash of the source and flags, so a run does not pay for (or measure) the compiler. Without a compiler
or librabbitmq these scenarios report "unsupported: ..." instead of numbers.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from goloadgen import run_generator
from scenarios import Context, MetricSpec, Outcome, Scenario

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "cgen" / "ottermq_cgen.c"
CFLAGS = ("-O2", "-g", "-Wall", "-Wextra")
INSTALL = "bash .ci/install-cgen.sh"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ottermq-bench"


@cache
def binary() -> Path | str:
    """The built ``ottermq-cgen`` binary (cached by source hash), or why there is none."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return f"no C compiler ({INSTALL})"
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join((cc, *CFLAGS)).encode()).hexdigest()[:16]
    out = cache_dir() / f"ottermq-cgen-{digest}"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # build next to the final name, then rename: concurrent runs never see half a binary
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", dir=out.parent)
    os.close(fd)
    done = subprocess.run(
        [cc, *CFLAGS, "-o", tmp, str(SOURCE), "-lrabbitmq"], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        return f"cc failed ({INSTALL}): {done.stderr.strip()[-300:]}"
    os.replace(tmp, out)
    return out


async def run_cgen(ctx: Context, scenario: str, count: int, *extra: str) -> dict[str, object] | str:
    """Run one scenario of the C generator; its JSON result, or a note saying why there is none."""
    return await run_generator(binary(), "ottermq-cgen", "c", ctx, scenario, count, *extra)


def _throughput(scenario: str, size: str) -> Scenario:
    async def fn(ctx: Context) -> Outcome:
        result = await run_cgen(ctx, scenario, getattr(ctx.sizes, size))
        if isinstance(result, str):
            return Outcome({"msgs/s": None, "gen cpu": None}, result)
        # messages the broker handled: each published one, once (deliveries of fanout10 are 10 per message)
        handled = int(result.get("count") or 0)  # type: ignore[call-overload]
        values: dict[str, float | None] = {
            "msgs/s": float(result["msgs_per_s"]),  # type: ignore[arg-type]
            "gen cpu": float(result["cpu_pct"]),  # type: ignore[arg-type]
        }
        return Outcome(values, messages=handled)

    return Scenario(
        f"c:{scenario}",
        fn,
        (MetricSpec("msgs/s", "msg/s"), MetricSpec("gen cpu", "%", False)),
        f"librabbitmq-c + raw frames: {scenario} (independent generator)",
    )


C_SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        _throughput("noack", "noack"),
        _throughput("ack-each", "acks"),
        _throughput("ack-multiple50", "acks"),
        _throughput("confirms", "confirms"),
        _throughput("confirms-consumed", "confirms"),
        _throughput("fanout10", "fanout"),
        _throughput("dlx", "dlx"),
    )
}
