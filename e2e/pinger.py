"""The adversarial suite's pinger: another AMQP client, in its own process, that measures how long the
broker keeps it waiting (``e2e/attack_kit.py``'s ``LagProbe`` starts it).

    python e2e/pinger.py HOST PORT USER PASSWORD VHOST

Opens one connection and channel (pika) and round-trips ``basic.qos`` every ~10 ms. Prints ``ready``
once connected; then for every ``mark`` line on stdin prints one JSON line about the window since the
previous mark: ``worst_ms`` (a round trip still waiting counts with its age so far), ``count``,
``p50_ms`` and ``error`` (the connection failed; null otherwise). Ends when stdin closes.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time

import pika

INTERVAL = 0.01


class Window:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.samples: list[float] = []
        self.in_flight: float | None = None
        self.error: str | None = None

    def report(self) -> str:
        with self.lock:
            samples, self.samples = self.samples, []
            worst = max(samples, default=0.0)
            if self.in_flight is not None:
                worst = max(worst, time.monotonic() - self.in_flight)
            return json.dumps(
                {
                    "worst_ms": round(worst * 1000, 1),
                    "count": len(samples),
                    "p50_ms": round(statistics.median(samples) * 1000, 2) if samples else None,
                    "error": self.error,
                }
            )


def ping(window: Window, params: pika.ConnectionParameters) -> None:
    try:
        conn = pika.BlockingConnection(params)
        channel = conn.channel()
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the parent decides
        window.error = f"cannot connect: {exc!r}"
        print("ready", flush=True)
        return
    print("ready", flush=True)
    while True:
        started = time.monotonic()
        with window.lock:
            window.in_flight = started
        try:
            channel.basic_qos(prefetch_count=0)
        except Exception as exc:  # noqa: BLE001
            with window.lock:
                window.error = f"round trip failed: {exc!r}"
                window.in_flight = None
            return
        took = time.monotonic() - started
        with window.lock:
            window.in_flight = None
            window.samples.append(took)
        time.sleep(INTERVAL)


def main() -> None:
    host, port, user, password, vhost = sys.argv[1:6]
    params = pika.ConnectionParameters(
        host=host,
        port=int(port),
        virtual_host=vhost,
        credentials=pika.PlainCredentials(user, password),
        heartbeat=0,
        socket_timeout=60,
        blocked_connection_timeout=60,
        connection_attempts=1,
    )
    window = Window()
    threading.Thread(target=ping, args=(window, params), daemon=True).start()
    for line in sys.stdin:
        if line.strip() == "mark":
            print(window.report(), flush=True)


if __name__ == "__main__":
    main()
