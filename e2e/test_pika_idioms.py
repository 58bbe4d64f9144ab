"""pika's own idioms (issue 7): SelectConnection with confirms and cancel notifications, heartbeat
timeout handling on the client side, and a retry-with-delay loop through TTL + DLX counting x-death."""

from __future__ import annotations

import socket
import threading
import time

import pika
import pytest

from .polling import poll_until


def test_select_connection_confirms_consume_and_cancel_notification(broker, unique):
    q = unique("sel")
    events: list[str] = []
    confirmed: set[int] = set()

    def on_open(conn):
        conn.channel(on_open_callback=on_channel)

    def on_confirm(frame):
        method = frame.method
        assert type(method).__name__ == "Ack"
        tags = range(1, method.delivery_tag + 1) if method.multiple else [method.delivery_tag]
        confirmed.update(tags)  # RabbitMQ often acks several publishes at once (multiple=true)

    def on_channel(ch):
        ch.confirm_delivery(on_confirm)
        ch.queue_declare(q, callback=lambda _f: on_declared(ch))

    def on_declared(ch):
        ch.add_on_cancel_callback(lambda _f: (events.append("cancelled"), ch.connection.close()))
        ch.basic_consume(q, on_message)
        for i in range(3):
            ch.basic_publish("", q, b"m%d" % i)

    def on_message(ch, method, _props, body):
        events.append(body.decode())
        ch.basic_ack(method.delivery_tag)
        if body == b"m2":
            ch.queue_delete(q)  # the broker cancels our consumer (consumer_cancel_notify)

    conn = pika.SelectConnection(broker.params(), on_open_callback=on_open)
    timer = threading.Timer(10, lambda: conn.ioloop.add_callback_threadsafe(conn.ioloop.stop))
    timer.start()
    try:
        conn.ioloop.start()
    finally:
        timer.cancel()
    assert confirmed == {1, 2, 3}
    assert [e for e in events if e.startswith("m")] == ["m0", "m1", "m2"]
    assert "cancelled" in events


class SilencingProxy:
    """Relays a TCP connection to the broker until ``silence()``: then drops the broker's bytes."""

    def __init__(self, host: str, port: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target = (host, port)
        self.quiet = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        client, _ = self.listener.accept()
        upstream = socket.create_connection(self.target)
        threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
        threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_broker: bool) -> None:
        try:
            while data := src.recv(65536):
                if not (from_broker and self.quiet.is_set()):
                    dst.sendall(data)
        except OSError:
            pass

    def silence(self) -> None:
        self.quiet.set()


def test_pika_detects_a_silent_broker_by_heartbeat_timeout(broker):
    proxy = SilencingProxy(broker.host, broker.port)
    conn = pika.BlockingConnection(broker.params(host="127.0.0.1", port=proxy.port, heartbeat=1))
    conn.channel()
    proxy.silence()
    started = time.monotonic()
    # pika checks every heartbeat + 5 s whether anything arrived: the second check after silence fails
    with pytest.raises(pika.exceptions.AMQPHeartbeatTimeout):
        poll_until(
            lambda: conn.process_data_events(time_limit=0.2),  # returns None: only the raise ends the wait
            timeout=30,
            interval=0,
            what="pika to raise AMQPHeartbeatTimeout",
        )
    assert 5 < time.monotonic() - started < 20
    assert conn.is_closed


def test_retry_with_delay_loop_counts_rounds_in_x_death(channel, unique):
    work_x, retry_x, work, wait = unique("work-x"), unique("retry-x"), unique("work"), unique("wait")
    channel.exchange_declare(work_x, "direct")
    channel.exchange_declare(retry_x, "direct")
    channel.queue_declare(work, exclusive=True, arguments={"x-dead-letter-exchange": retry_x})
    wait_args = {"x-message-ttl": 100, "x-dead-letter-exchange": work_x}
    channel.queue_declare(wait, exclusive=True, arguments=wait_args)
    channel.queue_bind(work, work_x, "job")
    channel.queue_bind(wait, retry_x, "job")
    channel.basic_publish(work_x, "job", b"flaky job")
    rounds: list[int] = []

    def attempt() -> bool:
        """One basic.get on ``work``: True once the job is acked (its 4th attempt), else False."""
        method, props, _body = channel.basic_get(work)
        if method is None:
            return False
        deaths = (props.headers or {}).get("x-death", [])
        rejected = [d for d in deaths if d["queue"] == work and d["reason"] == "rejected"]
        count = rejected[0]["count"] if rejected else 0
        rounds.append(count)
        if count >= 3:
            channel.basic_ack(method.delivery_tag)  # succeeds on the 4th attempt
            return True
        channel.basic_reject(method.delivery_tag, requeue=False)  # -> retry exchange -> wait (TTL)
        return False

    poll_until(
        attempt, timeout=10, interval=0.02, what="the job's 4th attempt", explain=lambda: f"rounds: {rounds}"
    )
    assert rounds == [0, 1, 2, 3]
    assert channel.queue_declare(wait, passive=True).method.message_count == 0
