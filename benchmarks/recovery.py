"""Durable storage benchmark (ottermq only: it restarts the broker on the same data dir).

1. Publish N persistent 100-byte messages with confirms (<= 1000 outstanding) into a durable queue.
2. Stop the broker (SIGTERM: it commits and checkpoints), measure bytes on disk per message.
3. Start it again and measure the recovery: process start until it accepts connections, and the
   broker's own "recovered ... in X s" log line; check every message came back.

Usage: ``python benchmarks/recovery.py [--messages 1000000]`` (``make bench`` runs it too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pamqp import commands as spec

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # PYTHONSAFEPATH=1 (the Makefile sets it) leaves the script dir out
    sys.path.insert(0, str(_HERE))

from loadgen import body, publish_confirmed  # noqa: E402
from procinfo import free_port  # noqa: E402
from wire import BrokerURL, RawConnection, publish_frames  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def start(data_dir: Path, port: int, log_path: Path) -> tuple[subprocess.Popen[bytes], float]:
    env = dict(
        os.environ,
        OTTERMQ_BROKER_HOST="127.0.0.1",
        OTTERMQ_BROKER_PORT=str(port),
        OTTERMQ_DATA_DIR=str(data_dir),
        PYTHONSAFEPATH="1",
        LOG_LEVEL="INFO",
        OTTERMQ_ENABLE_WEB_API="false",  # not measured here; 15672 may be RabbitMQ's
        OTTERMQ_ENABLE_PROMETHEUS="false",  # likewise 15692
    )
    t0 = time.perf_counter()
    with open(log_path, "ab") as logf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ottermq.broker"], env=env, cwd=REPO, stdout=logf, stderr=subprocess.STDOUT
        )
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}; see {log_path}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return proc, time.perf_counter() - t0
        except OSError:
            time.sleep(0.02)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)


async def fill(url: BrokerURL, queue: str, n: int) -> float:
    conn = await RawConnection.open(url)
    await conn.channel(1)
    await conn.rpc(1, spec.Queue.Declare(queue=queue, durable=True), spec.Queue.DeclareOk)
    await conn.confirm_select(1)
    t0 = time.perf_counter()
    end = await publish_confirmed(conn, publish_frames(1, "", queue, body(), persistent=True), n)
    await conn.close()
    return n / (end - t0)


async def count(url: BrokerURL, queue: str) -> int:
    conn = await RawConnection.open(url)
    await conn.channel(1)
    ok = await conn.rpc(1, spec.Queue.Declare(queue=queue, passive=True), spec.Queue.DeclareOk)
    await conn.close()
    return int(ok.message_count)


def disk_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in data_dir.glob("ottermq.db*"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    n = args.messages
    work = Path(tempfile.mkdtemp(prefix="ottermq-recovery-"))
    data_dir, log_path = work / "data", work / "broker.log"
    port = free_port()
    url = BrokerURL.parse(f"amqp://guest:guest@127.0.0.1:{port}/%2F")
    proc, _ = start(data_dir, port, log_path)
    try:
        rate = asyncio.run(fill(url, "recovery", n))
    finally:
        stop(proc)
    on_disk = disk_bytes(data_dir)
    proc, listen_s = start(data_dir, port, log_path)
    try:
        recovered = asyncio.run(count(url, "recovery"))
    finally:
        stop(proc)
    lines = re.findall(r"recovered .* messages in ([0-9.]+) s", log_path.read_text())
    result = {
        "messages": n,
        "publish_confirm_msgs_per_s": round(rate),
        "bytes_on_disk": on_disk,
        "bytes_per_message": round(on_disk / n, 1),
        "overhead_per_message": round(on_disk / n - 100, 1),
        "restart_to_listening_s": round(listen_s, 2),
        "recovery_log_s": float(lines[-1]) if lines else None,
        "recovered": recovered,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if recovered == n else 1


if __name__ == "__main__":
    sys.exit(main())
