"""What handing a message from one worker process to another would cost (the docs' performance page).

    python benchmarks/ipc.py [--count 1000000] [--size 100] [--batch 50] [--json ipc.json]

Two processes, one producer and one consumer, move ``--count`` messages of ``--size`` bytes (each with a
4-byte length in front, as a broker would frame them) three ways:

- ``socketpair``: a Unix stream socket pair, one ``send`` per message;
- ``socketpair batched``: the same, ``--batch`` messages per ``send`` (one loop turn's worth);
- ``shm ring``: a single-producer single-consumer ring in shared memory (``multiprocessing.shared_memory``),
  both ends polling, ``--batch`` messages per update of the head/tail counters.

For each: wall time, messages per second, and CPU microseconds per message on each side (the producer's
and the consumer's user + system time over the messages): what each side of a hand-off would add to a
message's cost. Pure Python, as the broker's own code is.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import struct
import sys
import time
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

_LEN = struct.Struct(">I")
_COUNTERS = struct.Struct("<QQ")  # head (bytes written), tail (bytes read)
RING = 8 * 1024 * 1024


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _report(queue: Any, role: str, started: float, cpu0: float) -> None:
    queue.put((role, time.perf_counter() - started, _cpu() - cpu0))


def sock_producer(sock: socket.socket, count: int, payload: bytes, batch: int, out: Any) -> None:
    frame = _LEN.pack(len(payload)) + payload
    started, cpu0 = time.perf_counter(), _cpu()
    if batch <= 1:
        for _ in range(count):
            sock.sendall(frame)
    else:
        chunk = frame * batch
        full, rest = divmod(count, batch)
        for _ in range(full):
            sock.sendall(chunk)
        if rest:
            sock.sendall(frame * rest)
    sock.shutdown(socket.SHUT_WR)
    _report(out, "producer", started, cpu0)


def sock_consumer(sock: socket.socket, count: int, out: Any) -> None:
    started, cpu0 = time.perf_counter(), _cpu()
    buf = bytearray()
    got = 0
    unpack = _LEN.unpack_from
    while got < count:
        data = sock.recv(262144)
        if not data:
            break
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (size,) = unpack(buf, pos)
            if end - pos < 4 + size:
                break
            _message = bytes(buf[pos + 4 : pos + 4 + size])  # the message, as a receiver would keep it
            pos += 4 + size
            got += 1
        del buf[:pos]
    _report(out, "consumer", started, cpu0)


def ring_producer(name: str, count: int, payload: bytes, batch: int, out: Any) -> None:
    shm = shared_memory.SharedMemory(name=name)
    try:
        view = shm.buf
        data = view[_COUNTERS.size :]
        frame = _LEN.pack(len(payload)) + payload
        step = len(frame)
        started, cpu0 = time.perf_counter(), _cpu()
        head = 0
        sent = 0
        while sent < count:
            n = min(batch, count - sent)
            need = n * step
            while True:
                _h, tail = _COUNTERS.unpack_from(view, 0)
                if RING - (head - tail) >= need:
                    break
            for _ in range(n):
                at = head % RING
                if at + step <= RING:
                    data[at : at + step] = frame
                else:
                    first = RING - at
                    data[at:RING] = frame[:first]
                    data[0 : step - first] = frame[first:]
                head += step
            sent += n
            struct.pack_into("<Q", view, 0, head)
        _report(out, "producer", started, cpu0)
        del data, view
    finally:
        shm.close()


def ring_consumer(name: str, count: int, out: Any) -> None:
    shm = shared_memory.SharedMemory(name=name)
    try:
        view = shm.buf
        data = view[_COUNTERS.size :]
        started, cpu0 = time.perf_counter(), _cpu()
        tail = 0
        got = 0
        while got < count:
            (head,) = struct.unpack_from("<Q", view, 0)
            while tail < head:
                at = tail % RING
                if at + 4 <= RING:
                    (size,) = _LEN.unpack_from(data, at)
                else:
                    (size,) = _LEN.unpack(bytes(data[at:RING]) + bytes(data[0 : 4 - (RING - at)]))
                start = (at + 4) % RING
                if start + size <= RING:
                    _message = bytes(data[start : start + size])
                else:
                    _message = bytes(data[start:RING]) + bytes(data[0 : size - (RING - start)])
                tail += 4 + size
                got += 1
            struct.pack_into("<Q", view, 8, tail)
        _report(out, "consumer", started, cpu0)
        del data, view
    finally:
        shm.close()


def measure(kind: str, count: int, size: int, batch: int) -> dict[str, Any]:
    payload = os.urandom(size)
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    if kind == "shm ring":
        shm = shared_memory.SharedMemory(create=True, size=_COUNTERS.size + RING)
        shm.buf[: _COUNTERS.size] = bytes(_COUNTERS.size)
        procs = [
            ctx.Process(target=ring_consumer, args=(shm.name, count, out)),
            ctx.Process(target=ring_producer, args=(shm.name, count, payload, batch, out)),
        ]
    else:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        per_send = batch if kind == "socketpair batched" else 1
        procs = [
            ctx.Process(target=sock_consumer, args=(b, count, out)),
            ctx.Process(target=sock_producer, args=(a, count, payload, per_send, out)),
        ]
    started = time.perf_counter()
    for p in procs:
        p.start()
    results = {role: (spent, cpu) for role, spent, cpu in (out.get() for _ in procs)}
    for p in procs:
        p.join()
    wall = time.perf_counter() - started
    if kind == "shm ring":
        shm.close()
        shm.unlink()
    else:
        a.close()
        b.close()
    return {
        "kind": kind,
        "count": count,
        "size": size,
        "batch": batch if kind != "socketpair" else 1,
        "wall_s": round(wall, 3),
        "msgs_per_s": round(count / results["consumer"][0]),
        "producer_us_per_msg": round(results["producer"][1] / count * 1e6, 3),
        "consumer_us_per_msg": round(results["consumer"][1] / count * 1e6, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = [
        measure(kind, args.count, args.size, args.batch)
        for kind in ("socketpair", "socketpair batched", "shm ring")
    ]
    print(f"{'way':<20} {'batch':>5} {'msgs/s':>10} {'producer us/msg':>16} {'consumer us/msg':>16}")
    for r in rows:
        print(
            f"{r['kind']:<20} {r['batch']:>5} {r['msgs_per_s']:>10} "
            f"{r['producer_us_per_msg']:>16.3f} {r['consumer_us_per_msg']:>16.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
