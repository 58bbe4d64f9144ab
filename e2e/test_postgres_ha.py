"""Active / standby on PostgreSQL (``OTTERMQ_STORE=postgresql``): a standby takes over from a killed or
paused active, and nothing confirmed is lost.

Two broker processes share one PostgreSQL schema (a throwaway server from ``.ci/postgres.py``). Only the
active one binds its ports; the standby waits on the leadership lease and binds after taking over.

* kill -9 of the active under load: confirmed publishers and consumers (pika, reconnecting) run against
  one address (the standby binds the same port); every confirmed id ends up consumed, dead-lettered with
  reason ``rejected`` or still queued, and an id delivered twice was redelivered the second time
  (at-least-once: the old active's ack had not reached the database).
* fencing: the active is paused (SIGSTOP) past its lease while a publisher waits on it, the standby (its
  own port, as behind a load balancer) takes over, the old one is resumed: it exits with status 3
  without confirming anything the new active does not have.
* a clean shutdown hands over at once and is not counted as a failover.
* clients that recover by themselves continue on the new active: the Java client's automatic recovery,
  Bunny's, aio-pika's robust connection (their consumers and topology come back), and amqp091-go with
  the reconnect loop its users write (every message it saw confirmed is in the queue).

ottermq only (RabbitMQ replicates with Raft, not through a database): every test is an extension.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from . import client_programs as programs
from .conftest import BrokerProcess, postgres_url
from .polling import poll_until, poll_until_async
from .test_go_client import go_client  # noqa: F401 - the fixture, built once per session
from .test_java_client import java_client  # noqa: F401 - the fixture, compiled once per session
from .test_ruby_client import ruby_client  # noqa: F401 - the fixture

pytestmark = pytest.mark.extension

PERSISTENT = 2


def ha_env(schema: str, **extra: str) -> dict[str, str]:
    return {
        "OTTERMQ_STORE": "postgresql",
        "OTTERMQ_POSTGRES_URL": postgres_url(),
        "OTTERMQ_POSTGRES_SCHEMA": schema,
        "OTTERMQ_WORKERS": "1",
        "OTTERMQ_STANDBY_POLL_SECONDS": "0.1",
        **extra,
    }


def same_address(standby: BrokerProcess, active: BrokerProcess) -> None:
    """Give ``standby`` the active's AMQP, HTTP and metrics ports (one address for clients)."""
    standby.port, standby.web_port, standby.prometheus_port = (
        active.port,
        active.web_port,
        active.prometheus_port,
    )
    standby.broker = active.broker


def standby_waiting(process: BrokerProcess) -> None:
    poll_until(lambda: "standby:" in process.log_tail(200), timeout=30, what="the standby waiting")


class Client(threading.Thread):
    """A client thread that reconnects until stopped; ``session(channel)`` is one connection's work."""

    def __init__(self, params: pika.ConnectionParameters, queue: str) -> None:
        super().__init__(daemon=True)
        self.params, self.queue = params, queue
        self.stop = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                conn = pika.BlockingConnection(self.params)
            except pika.exceptions.AMQPConnectionError:
                time.sleep(0.05)
                continue
            try:
                self.session(conn.channel())
            except pika.exceptions.AMQPError as exc:
                self.errors.append(repr(exc))
            finally:
                with contextlib.suppress(Exception):
                    conn.close()

    def session(self, ch: Any) -> None:
        raise NotImplementedError


class Publisher(Client):
    """Publishes ids 0, 1, ... with confirms, remembering the ids confirmed."""

    def __init__(self, params: pika.ConnectionParameters, queue: str) -> None:
        super().__init__(params, queue)
        self.confirmed: list[int] = []
        self.next_id = 0

    def session(self, ch: Any) -> None:
        ch.confirm_delivery()
        while not self.stop.is_set():
            n = self.next_id
            self.next_id += 1
            props = pika.BasicProperties(delivery_mode=PERSISTENT, message_id=str(n))
            try:
                ch.basic_publish("", self.queue, str(n).encode(), props, mandatory=True)
            except (pika.exceptions.NackError, pika.exceptions.UnroutableError) as exc:
                self.errors.append(f"{n}: {exc!r}")
                continue
            self.confirmed.append(n)


class Consumer(Client):
    """Consumes with manual acks; rejects every tenth id without requeue (dead-lettered)."""

    def __init__(self, params: pika.ConnectionParameters, queue: str) -> None:
        super().__init__(params, queue)
        self.deliveries: list[tuple[int, bool]] = []  # (id, redelivered), acked or rejected

    def session(self, ch: Any) -> None:
        ch.basic_qos(prefetch_count=50)
        for method, _props, body in ch.consume(self.queue, inactivity_timeout=0.1):
            if self.stop.is_set():
                break
            if method is None:
                continue
            n = int(body)
            if n % 10 == 0:
                ch.basic_reject(method.delivery_tag, requeue=False)
            else:
                ch.basic_ack(method.delivery_tag)
            self.deliveries.append((n, bool(method.redelivered)))


def declare(params: pika.ConnectionParameters, queue: str, dlq: str) -> None:
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.queue_declare(dlq, durable=True)
    ch.queue_declare(
        queue, durable=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
    )
    conn.close()


def drain_dead_letters(params: pika.ConnectionParameters, dlq: str) -> list[tuple[int, str]]:
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    out = []
    while True:
        method, props, body = ch.basic_get(dlq, auto_ack=True)
        if method is None:
            break
        out.append((int(body), str(props.headers["x-death"][0]["reason"])))
    conn.close()
    return out


def count(params: pika.ConnectionParameters, queue: str) -> int:
    conn = pika.BlockingConnection(params)
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        conn.close()


def http_json(url: str) -> Any:
    import base64
    import json

    request = urllib.request.Request(
        url, headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def metrics(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        return response.read().decode()


def test_kill_9_of_the_active_loses_no_confirmed_message(broker_process: Any) -> None:
    schema = f"ha_{uuid.uuid4().hex[:10]}"
    active = broker_process(ha_env(schema))
    broker = active.start()
    standby = broker_process(ha_env(schema))
    same_address(standby, active)
    standby.launch()
    standby_waiting(standby)
    params = broker.params(connection_attempts=1, heartbeat=0, blocked_connection_timeout=30)
    queue, dlq = f"ha.work.{schema}", f"ha.dead.{schema}"
    declare(params, queue, dlq)
    publisher, consumer = Publisher(params, queue), Consumer(params, queue)
    publisher.start()
    consumer.start()
    poll_until(lambda: len(consumer.deliveries) > 300, timeout=30, what="traffic before the crash")
    active.kill()
    killed = time.monotonic()
    standby.wait_until_serving(timeout=30)
    took_over = time.monotonic() - killed
    poll_until(
        lambda: (
            len(publisher.confirmed) > 0
            and publisher.confirmed[-1] > publisher.next_id - 50
            and len(consumer.deliveries) > 0
        ),
        timeout=30,
        what="traffic after the take-over",
    )
    seen_after = len(consumer.deliveries)
    poll_until(
        lambda: len(consumer.deliveries) > seen_after + 200, timeout=30, what="consuming on the new active"
    )
    publisher.stop.set()
    publisher.join(10)
    poll_until(lambda: count(params, queue) == 0, timeout=30, what="the queue drained")
    consumer.stop.set()
    consumer.join(10)

    confirmed = set(publisher.confirmed)
    consumed = {n for n, _ in consumer.deliveries}
    dead = drain_dead_letters(params, dlq)
    assert {reason for _, reason in dead} <= {"rejected"}
    dead_ids = {n for n, _ in dead}
    missing = confirmed - consumed - dead_ids
    assert not missing, f"confirmed but lost: {sorted(missing)[:20]} ({len(missing)} of {len(confirmed)})"
    # every confirmed reject reached the dead-letter queue (an unconfirmed one may be delivered and
    # rejected before its store write: that write and its dead-lettering die with the killed active)
    assert {n for n in consumed & confirmed if n % 10 == 0} <= dead_ids
    # a second delivery of an id is a redelivery (its ack was lost with the old active)
    times = Counter(n for n, _ in consumer.deliveries)
    for n, repeats in times.items():
        if repeats > 1:
            flags = [r for m, r in consumer.deliveries if m == n]
            assert all(flags[1:]), f"id {n} delivered {repeats} times, flags {flags}"
    assert len(confirmed) > 500
    assert took_over < 30
    health = http_json(f"{standby.broker.management_url}/api/health/checks/active")
    assert health["status"] == "ok" and health["role"] == "active" and health["failovers"] >= 1
    text = metrics(standby.broker.prometheus_url)
    assert 'ottermq_ha_role{role="active"} 1.0' in text
    assert "ottermq_ha_failovers_total 1.0" in text


def test_a_paused_active_is_fenced_and_confirms_nothing_after_losing_the_lease(broker_process: Any) -> None:
    schema = f"ha_{uuid.uuid4().hex[:10]}"
    env = ha_env(schema, OTTERMQ_LEASE_SECONDS="2")
    old = broker_process(env)
    old_broker = old.start()
    new = broker_process(env)  # its own ports: another machine behind a load balancer
    new.launch()
    standby_waiting(new)
    params = old_broker.params(connection_attempts=1, heartbeat=0)
    queue, dlq = f"ha.fence.{schema}", f"ha.fence.dead.{schema}"
    declare(params, queue, dlq)
    publisher = Publisher(params, queue)
    publisher.start()
    poll_until(lambda: len(publisher.confirmed) > 200, timeout=30, what="confirms from the active")
    assert old.proc is not None
    old.proc.send_signal(signal.SIGSTOP)
    paused_at = len(publisher.confirmed)
    try:
        new.wait_until_serving(timeout=30)  # the lease ran out: the standby took over
    finally:
        old.proc.send_signal(signal.SIGCONT)
    assert old.proc.wait(timeout=30) == 3  # EXIT_LEADERSHIP_LOST
    old.died = False
    publisher.stop.set()
    publisher.join(10)
    assert "leadership lost" in old.log_tail(100)
    # at most the confirm the publisher was waiting for when the process stopped came after the pause
    assert len(publisher.confirmed) <= paused_at + 1
    new_params = new.broker.params(connection_attempts=3)
    conn = pika.BlockingConnection(new_params)
    ch = conn.channel()
    stored = set()
    while True:
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        stored.add(int(body))
    conn.close()
    missing = set(publisher.confirmed) - stored
    assert not missing, f"the fenced broker confirmed {sorted(missing)[:20]} which the new active lacks"


def test_a_clean_shutdown_hands_over_at_once_and_is_no_failover(broker_process: Any) -> None:
    schema = f"ha_{uuid.uuid4().hex[:10]}"
    first = broker_process(ha_env(schema, OTTERMQ_LEASE_SECONDS="60"))
    broker = first.start()
    second = broker_process(ha_env(schema, OTTERMQ_LEASE_SECONDS="60"))
    same_address(second, first)
    second.launch()
    standby_waiting(second)
    params = broker.params(connection_attempts=1)
    declare(params, f"ha.handover.{schema}", f"ha.handover.dead.{schema}")
    stopped = time.monotonic()
    assert first.stop() == 0
    second.wait_until_serving(timeout=30)
    assert time.monotonic() - stopped < 30  # not the 60 s lease: released, not expired
    assert count(params, f"ha.handover.{schema}") == 0
    health = http_json(f"{second.broker.management_url}/api/health/checks/active")
    assert health["role"] == "active" and health["failovers"] == 0


@pytest.fixture
def pair(broker_process: Any) -> tuple[BrokerProcess, Any]:
    """An active and a standby on one address; returns the active and ``fail_over()``, which kills
    the active (SIGKILL) and waits until the standby serves."""
    schema = f"ha_{uuid.uuid4().hex[:10]}"
    active = broker_process(ha_env(schema))
    active.start()
    standby = broker_process(ha_env(schema))
    same_address(standby, active)
    standby.launch()
    standby_waiting(standby)

    def fail_over() -> None:
        active.kill()
        standby.wait_until_serving(timeout=30)

    return active, fail_over


@pytest.mark.parametrize("client", ["java_client", "ruby_client"])
def test_a_clients_automatic_recovery_continues_on_the_new_active(
    pair: tuple[BrokerProcess, Any], client: str, request: pytest.FixtureRequest
) -> None:
    """The Java client's and Bunny's recovery: connection, exchange, transient queue, binding, consumer."""
    active, fail_over = pair
    argv = [*request.getfixturevalue(client), "recovery", active.broker.url, f"ha-{client}"]
    run = programs.run_across_restart(argv, fail_over)
    assert run.data["after"] == "after"
    assert run.data.get("events", ["recovered"])[-1] == "recovered"  # the Java client reports its events
    run.self_check()


def test_amqp091_go_with_a_reconnect_loop_continues_on_the_new_active(
    pair: tuple[BrokerProcess, Any],
    go_client: Path,  # noqa: F811
) -> None:
    active, fail_over = pair
    argv = [str(go_client), "reconnect", "-url", active.broker.url, "-prefix", "ha-go", "-timeout", "60s"]
    run = programs.run_across_restart(argv, fail_over)
    assert run.data["missing"] == [] and run.data["reconnects"] >= 1
    assert run.data["stored"] >= run.data["confirmed"] >= 100
    run.self_check()


def test_an_aio_pika_robust_connection_continues_on_the_new_active(pair: tuple[BrokerProcess, Any]) -> None:
    import asyncio

    import aio_pika

    active, fail_over = pair

    async def main() -> None:
        conn = await aio_pika.connect_robust(active.broker.url, reconnect_interval=0.2)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            queue = await ch.declare_queue("ha.robust", durable=True)
            got: list[bytes] = []

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process():
                    got.append(message.body)

            await queue.consume(on_message)
            await ch.default_exchange.publish(
                aio_pika.Message(b"before", delivery_mode=aio_pika.DeliveryMode.PERSISTENT), "ha.robust"
            )

            async def delivered(body: bytes) -> bool:
                return body in got

            await poll_until_async(lambda: delivered(b"before"), what="the delivery before the failover")
            await asyncio.get_running_loop().run_in_executor(None, fail_over)
            for _ in range(100):  # the robust connection reconnects by itself, then publishing works again
                try:
                    await ch.default_exchange.publish(
                        aio_pika.Message(b"after", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                        "ha.robust",
                    )
                    break
                except (aio_pika.exceptions.AMQPError, ConnectionError, RuntimeError):
                    await asyncio.sleep(0.1)
            await poll_until_async(
                lambda: delivered(b"after"), timeout=30, what="the delivery after the failover"
            )
            await queue.delete(if_unused=False, if_empty=False)

    asyncio.run(main())


def test_a_standby_stops_at_once_on_sigterm(broker_process: Any) -> None:
    schema = f"ha_{uuid.uuid4().hex[:10]}"
    active = broker_process(ha_env(schema))
    broker = active.start()
    standby = broker_process(ha_env(schema))
    standby.launch()
    standby_waiting(standby)
    assert standby.stop(timeout=10) == 0
    assert "standby stopped" in standby.log_tail(20)
    conn = pika.BlockingConnection(broker.params(connection_attempts=1))  # the active goes on serving
    conn.close()
