"""The chaos harness's client workload: publishers, consumers and a drain that log every operation.

A standalone script (standard library and pika only; it runs inside a network namespace as
``python workload.py ...`` with ``PYTHONSAFEPATH=1``, so it imports nothing beside it)::

    setup   --urls U1,U2 --queue Q
    publish --urls U1,U2 --queue Q --client NAME --out FILE [--rate 100] [--ttl-every K]
            [--confirm-timeout 10] [--window 200]
    consume --urls U1,U2 --queues Q,Q.dlq --client NAME --out FILE [--reject-every K] [--prefetch 50]
            [--work-ms 0]
    drain   --urls U1,U2 --queues Q,Q.dlq --client NAME --out FILE [--quiet 3] [--timeout 300]

Every client reconnects forever, round-robin over ``--urls`` (connect timeout 2 s, heartbeat 5 s), until
SIGTERM, SIGINT or ``--stop-file`` exists; it then ends within about 2 s with status 0.

Records, one JSON object a line, written and flushed one by one; each has ``t`` (``time.time()``),
``client`` and ``op``:

    connect     url                                     a connection opened
    disconnect  url, reason, connected                  it closed (``connected`` false: the attempt failed)
    send        id, queue, t0, url                      written just BEFORE a publish goes out
    publish     id, queue, outcome, t0, url             its outcome: confirmed | nacked | unknown
    deliver     id, queue, redelivered, xdeath, action, phase, url
                                                        written BEFORE the ack (action ack | reject)

``id`` is ``NAME-<n>``, fresh for every attempt, sent as ``message_id`` and as the body; nothing is
published twice. ``unknown``: the connection or channel dropped, or no confirm came within the timeout
(the connection is then dropped). A ``send`` without its ``publish`` means the client was killed.
``xdeath`` is ``[{queue, reason, count}, ...]`` from the ``x-death`` header, or ``[]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
import pika.frame
import pika.spec

CONNECT_TIMEOUT = 2.0
HEARTBEAT = 5
BLOCKED_TIMEOUT = 10
RECONNECT_PAUSE = 0.3
STOP_GRACE = 1.0  # seconds a stopping publisher waits for its outstanding confirms
CLOSE_WAIT = 2.0  # seconds a Connection.Close may wait for its Close-Ok (a stopped broker never sends it)
_STOP = {"signal": False, "file": ""}


# ----------------------------------------------------------------------------------------------------
# common
# ----------------------------------------------------------------------------------------------------
def stopping() -> bool:
    """True once SIGTERM/SIGINT arrived or the stop file exists."""
    if _STOP["signal"]:
        return True
    path = _STOP["file"]
    return bool(path) and os.path.exists(str(path))


def _on_signal(signum: int, frame: Any) -> None:
    _STOP["signal"] = True


def pause(seconds: float) -> None:
    """Sleep, but return early once stopping."""
    deadline = time.monotonic() + seconds
    while not stopping() and time.monotonic() < deadline:
        time.sleep(min(0.05, max(deadline - time.monotonic(), 0)))


def parameters(url: str) -> pika.URLParameters:
    """pika parameters for ``url`` with the harness's timeouts."""
    params = pika.URLParameters(url)
    params.socket_timeout = CONNECT_TIMEOUT
    params.stack_timeout = CONNECT_TIMEOUT + 0.5
    params.heartbeat = HEARTBEAT
    params.blocked_connection_timeout = BLOCKED_TIMEOUT
    params.connection_attempts = 1
    return params


def reason_of(exc: BaseException | None) -> str:
    """A short reason for a closed connection: ``"<code> <text>"`` or the exception's name and text."""
    if exc is None:
        return "closed"
    code = getattr(exc, "reply_code", None)
    if code is not None:
        return f"{code} {getattr(exc, 'reply_text', '')}"
    detail = str(exc)  # empty for pika's AMQPConnectionError, whose repr names the cause
    return f"{type(exc).__name__}: {detail}" if detail else repr(exc)


def close_within(conn: pika.BlockingConnection, seconds: float) -> None:
    """Close a blocking connection, giving up after ``seconds``: pika's ``close`` waits for the broker's
    Close-Ok with no timeout, and a paused broker never sends it. The close then goes on in a daemon
    thread that nothing else uses; the socket goes with the process or with the heartbeat's timeout."""
    if not conn.is_open:
        return

    def close() -> None:
        try:
            conn.close()
        except (pika.exceptions.AMQPError, OSError):
            pass  # closed anyway

    closer = threading.Thread(target=close, name="close", daemon=True)
    closer.start()
    closer.join(seconds)


def text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def xdeath_summary(headers: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``[{queue, reason, count}, ...]`` of an ``x-death`` header (``[]`` without one)."""
    deaths = (headers or {}).get("x-death")
    if not isinstance(deaths, list):
        return []
    return [
        {"queue": text(d.get("queue")), "reason": text(d.get("reason")), "count": d.get("count")}
        for d in deaths
        if isinstance(d, dict)
    ]


def number_of(message_id: str) -> int | None:
    """The ``n`` of ``NAME-<n>`` (None if it is not one of ours)."""
    tail = message_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else None


class Log:
    """Appends JSON records to a file, one line each, flushed at once."""

    def __init__(self, path: str, client: str) -> None:
        self.client = client
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, op: str, **fields: Any) -> None:
        record = {"t": time.time(), "client": self.client, "op": op, **fields}
        self.file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


# ----------------------------------------------------------------------------------------------------
# setup
# ----------------------------------------------------------------------------------------------------
def setup(urls: list[str], queue: str, timeout: float) -> int:
    """Declare ``queue`` (dead-lettering to ``queue.dlq`` through the default exchange) and the DLQ."""
    deadline = time.monotonic() + timeout
    attempt = 0
    while not stopping() and time.monotonic() < deadline:
        url = urls[attempt % len(urls)]
        attempt += 1
        try:
            conn = pika.BlockingConnection(parameters(url))
            try:
                ch = conn.channel()
                ch.queue_declare(f"{queue}.dlq", durable=True)
                arguments = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": f"{queue}.dlq"}
                ch.queue_declare(queue, durable=True, arguments=arguments)
            finally:
                if conn.is_open:
                    conn.close()
            print(f"declared {queue} and {queue}.dlq on {url}")
            return 0
        except (pika.exceptions.AMQPError, OSError) as exc:
            print(f"setup on {url}: {reason_of(exc)}", file=sys.stderr)
            pause(RECONNECT_PAUSE)
    return 1


# ----------------------------------------------------------------------------------------------------
# publish: an asynchronous connection, so that a confirm can time out while the broker still talks
# ----------------------------------------------------------------------------------------------------
class Publisher:
    """Confirmed, persistent publishes at a steady rate over a reconnect loop."""

    def __init__(self, args: argparse.Namespace, log: Log) -> None:
        self.urls: list[str] = args.urls
        self.queue: str = args.queue
        self.name: str = args.client
        self.interval = 1.0 / args.rate
        self.ttl_every: int = args.ttl_every
        self.confirm_timeout: float = args.confirm_timeout
        self.window: int = args.window
        self.log = log
        self.n = 0
        self.url = ""
        self.conn: pika.SelectConnection | None = None
        self.channel: Any = None
        self.pending: dict[int, tuple[str, float]] = {}  # delivery tag -> (id, t0)
        self.tag = 0
        self.opened = False
        self.reason = ""
        self.stop_since: float | None = None

    def run(self) -> int:
        attempt = 0
        while not stopping():
            self.session(self.urls[attempt % len(self.urls)])
            attempt += 1
            pause(RECONNECT_PAUSE)
        return 0

    def session(self, url: str) -> None:
        """One connection's life: returns once it closed, failed or was abandoned."""
        self.url, self.tag, self.opened, self.reason, self.stop_since = url, 0, False, "", None
        self.channel = None
        conn = pika.SelectConnection(
            parameters(url),
            on_open_callback=self.on_open,
            on_open_error_callback=self.on_open_error,
            on_close_callback=self.on_closed,
        )
        self.conn = conn
        conn.ioloop.call_later(0.05, self.watch)
        try:
            conn.ioloop.start()
        finally:
            self.settle_pending("unknown")
            if self.opened:
                self.log.write("disconnect", url=url, reason=self.reason or "closed", connected=True)
            self.conn = None
            conn.ioloop.close()

    # -- connection events
    def on_open(self, conn: pika.SelectConnection) -> None:
        self.opened = True
        self.log.write("connect", url=self.url)
        conn.channel(on_open_callback=self.on_channel)

    def on_open_error(self, conn: pika.SelectConnection, exc: BaseException) -> None:
        self.log.write("disconnect", url=self.url, reason=reason_of(exc), connected=False)
        conn.ioloop.stop()

    def on_closed(self, conn: pika.SelectConnection, exc: BaseException) -> None:
        self.reason = self.reason or reason_of(exc)
        conn.ioloop.stop()

    def on_channel(self, channel: Any) -> None:
        self.channel = channel
        channel.add_on_close_callback(self.on_channel_closed)
        channel.confirm_delivery(self.on_confirm, callback=self.on_select_ok)

    def on_channel_closed(self, channel: Any, exc: BaseException) -> None:
        self.reason = self.reason or f"channel: {reason_of(exc)}"
        self.drop()

    def on_select_ok(self, frame: pika.frame.Method) -> None:
        assert self.conn is not None
        self.conn.ioloop.call_later(0, self.tick)

    def drop(self, reason: str = "") -> None:
        """Close the connection; abandon it if the broker does not answer within ``CLOSE_WAIT`` seconds
        (half that when stopping)."""
        self.reason = self.reason or reason
        conn = self.conn
        if conn is None:
            return
        if conn.is_open:
            conn.close()
        conn.ioloop.call_later(CLOSE_WAIT / 2 if stopping() else CLOSE_WAIT, conn.ioloop.stop)

    def watch(self) -> None:
        """Every 50 ms: a stop request while connecting ends the attempt at once."""
        conn = self.conn
        if conn is None:
            return
        if stopping() and self.channel is None:
            conn.ioloop.stop()
            return
        conn.ioloop.call_later(0.05, self.watch)

    # -- publishing
    def tick(self) -> None:
        conn = self.conn
        if conn is None or self.channel is None or not self.channel.is_open:
            return
        now = time.time()
        if stopping():
            self.stop_since = self.stop_since or now
            if not self.pending or now - self.stop_since > STOP_GRACE:
                self.drop("client stopping")
                return
            conn.ioloop.call_later(0.02, self.tick)
            return
        oldest = min((t0 for _, t0 in self.pending.values()), default=now)
        if now - oldest > self.confirm_timeout:
            self.drop(f"no confirm within {self.confirm_timeout:g} s")
            return
        if len(self.pending) < self.window:
            self.publish_one()
        conn.ioloop.call_later(self.interval, self.tick)

    def publish_one(self) -> None:
        self.n += 1
        message_id = f"{self.name}-{self.n}"
        expiration = "300" if self.ttl_every and self.n % self.ttl_every == 0 else None
        props = pika.BasicProperties(delivery_mode=2, message_id=message_id, expiration=expiration)
        t0 = time.time()
        self.log.write("send", id=message_id, queue=self.queue, t0=t0, url=self.url)
        try:
            self.channel.basic_publish("", self.queue, message_id.encode(), props)
        except (pika.exceptions.AMQPError, OSError) as exc:
            self.record(message_id, t0, "unknown")
            self.drop(f"publish: {reason_of(exc)}")
            return
        self.tag += 1
        self.pending[self.tag] = (message_id, t0)

    def on_confirm(self, frame: pika.frame.Method) -> None:
        method = frame.method
        outcome = "confirmed" if isinstance(method, pika.spec.Basic.Ack) else "nacked"
        if method.multiple:
            tags = sorted(tag for tag in self.pending if tag <= method.delivery_tag)
        else:
            tags = [method.delivery_tag] if method.delivery_tag in self.pending else []
        for tag in tags:
            message_id, t0 = self.pending.pop(tag)
            self.record(message_id, t0, outcome)

    def record(self, message_id: str, t0: float, outcome: str) -> None:
        self.log.write("publish", id=message_id, queue=self.queue, outcome=outcome, t0=t0, url=self.url)

    def settle_pending(self, outcome: str) -> None:
        for tag in sorted(self.pending):
            message_id, t0 = self.pending[tag]
            self.record(message_id, t0, outcome)
        self.pending.clear()


# ----------------------------------------------------------------------------------------------------
# consume and drain: a blocking connection polled in short slices
# ----------------------------------------------------------------------------------------------------
class Consumer:
    """Manual-ack consumer of several queues over a reconnect loop (``drain=True``: ack everything and
    stop once every queue stayed quiet and reports no message)."""

    def __init__(self, args: argparse.Namespace, log: Log, drain: bool) -> None:
        self.urls: list[str] = args.urls
        self.queues: list[str] = args.queues
        self.main = self.queues[0]
        self.reject_every: int = 0 if drain else args.reject_every
        self.prefetch: int = args.prefetch
        self.work = 0.0 if drain else args.work_ms / 1000
        self.drain = drain
        self.quiet: float = args.quiet if drain else 0.0
        self.log = log
        self.url = ""
        self.last_delivery = time.monotonic()
        self.done = False

    def run(self, timeout: float = 0.0) -> int:
        deadline = time.monotonic() + timeout if timeout else None
        attempt = 0
        while not stopping() and not self.done:
            if deadline is not None and time.monotonic() > deadline:
                return 1
            self.session(self.urls[attempt % len(self.urls)], deadline)
            attempt += 1
            if not self.done:
                pause(RECONNECT_PAUSE)
        return 0

    def session(self, url: str, deadline: float | None) -> None:
        self.url = url
        try:
            conn = pika.BlockingConnection(parameters(url))
        except (pika.exceptions.AMQPError, OSError) as exc:
            self.log.write("disconnect", url=url, reason=reason_of(exc), connected=False)
            return
        self.log.write("connect", url=url)
        reason = "closed"
        try:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=self.prefetch)
            for queue in self.queues:
                ch.basic_consume(queue, self.handler(queue))
            last_check = time.monotonic()
            while not stopping() and not self.done:
                if deadline is not None and time.monotonic() > deadline:
                    break
                conn.process_data_events(time_limit=0.1)
                now = time.monotonic()
                if self.drain and now - self.last_delivery >= self.quiet and now - last_check >= 0.5:
                    last_check = now
                    counts = [ch.queue_declare(q, passive=True).method.message_count for q in self.queues]
                    self.done = not any(counts) and time.monotonic() - self.last_delivery >= self.quiet
            reason = "client stopping" if stopping() else "drained" if self.done else "deadline"
            close_within(conn, CLOSE_WAIT / 2 if stopping() else CLOSE_WAIT)
        except (pika.exceptions.AMQPError, OSError) as exc:
            reason = reason_of(exc)
        finally:
            self.log.write("disconnect", url=url, reason=reason, connected=True)

    def handler(self, queue: str) -> Callable[..., None]:
        def on_message(
            ch: Any, method: pika.spec.Basic.Deliver, props: pika.BasicProperties, body: bytes
        ) -> None:
            self.last_delivery = time.monotonic()
            message_id = props.message_id or body.decode("utf-8", "replace")
            n = number_of(message_id)
            reject = bool(queue == self.main and self.reject_every and n is not None)
            reject = reject and n is not None and n % self.reject_every == 0
            self.log.write(
                "deliver",
                id=message_id,
                queue=queue,
                redelivered=bool(method.redelivered),
                xdeath=xdeath_summary(props.headers),
                action="reject" if reject else "ack",
                phase="drain" if self.drain else "run",
                url=self.url,
            )
            if self.work:
                time.sleep(self.work)  # a slow consumer: its prefetch stays full of unacked deliveries
            if reject:
                ch.basic_reject(method.delivery_tag, requeue=False)
            else:
                ch.basic_ack(method.delivery_tag)

        return on_message


# ----------------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------------
def parse(argv: list[str]) -> argparse.Namespace:
    def comma_list(value: str) -> list[str]:
        return [part for part in value.split(",") if part]

    def rate(value: str) -> float:
        number = float(value.removesuffix("/s"))
        if number <= 0:
            raise argparse.ArgumentTypeError("the rate must be positive")
        return number

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {name: sub.add_parser(name) for name in ("setup", "publish", "consume", "drain")}
    for name, p in commands.items():
        p.add_argument("--urls", type=comma_list, required=True)
        p.add_argument("--stop-file", default="")
        if name in ("setup", "publish"):
            p.add_argument("--queue", required=True)
        if name != "setup":
            p.add_argument("--client", required=True)
            p.add_argument("--out", required=True)
        if name in ("consume", "drain"):
            p.add_argument("--queues", type=comma_list, required=True)
            p.add_argument("--prefetch", type=int, default=50)
    commands["setup"].add_argument("--timeout", type=float, default=60.0)
    commands["publish"].add_argument("--rate", type=rate, default=100.0, help="messages a second")
    commands["publish"].add_argument("--ttl-every", type=int, default=0)
    commands["publish"].add_argument("--confirm-timeout", type=float, default=10.0)
    commands["publish"].add_argument("--window", type=int, default=200, help="unconfirmed at most")
    commands["consume"].add_argument("--reject-every", type=int, default=0)
    commands["consume"].add_argument("--work-ms", type=float, default=0.0, help="a pause before each ack")
    commands["drain"].add_argument("--quiet", type=float, default=3.0)
    commands["drain"].add_argument("--timeout", type=float, default=300.0, help="give up (status 1)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    _STOP["file"] = args.stop_file
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    if args.command == "setup":
        return setup(args.urls, args.queue, args.timeout)
    log = Log(args.out, args.client)
    try:
        if args.command == "publish":
            return Publisher(args, log).run()
        consumer = Consumer(args, log, drain=args.command == "drain")
        return consumer.run(args.timeout if args.command == "drain" else 0.0)
    finally:
        log.close()


if __name__ == "__main__":
    sys.exit(main())
