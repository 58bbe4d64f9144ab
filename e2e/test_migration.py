"""docs/migrating.md as a test: a running application moved from one broker to ottermq with definitions
and shovels, every message counted.

The old broker is the session's broker: RabbitMQ under ``make conformance`` (``AMQP_URL``), another
ottermq process in ``make test``. The new broker is a private ottermq process. The steps are the guide's,
in its order (its section numbers are in the comments):

1. the application runs on the old broker: a publisher with confirms, a consumer that acks (and rejects
   every tenth order, dead-lettered to ``orders.dead``), a retry queue with a TTL that dead-letters back
   to ``orders``, and a backlog nobody consumes (``reports``);
2. the old vhost's definitions are exported and imported into the new broker;
3. consumers move to the new broker;
4. one shovel per queue, on the new broker, pulls each old queue into its twin (``on-confirm``);
5. publishers move to the new broker;
6. when every old queue is empty the shovels are deleted.

Then every confirmed message must be somewhere: consumed (on either broker), dead-lettered into
``orders.dead``, or in the ``reports`` backlog, on the new broker: 0 lost, and no duplicate either (the
consumers ack each message before they stop, so nothing is delivered twice).
"""

from __future__ import annotations

import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pika
import pytest

from .conftest import Broker
from .polling import poll_until

ORDERS = "orders"
DEAD = "orders.dead"
RETRY = "orders.retry"
REPORTS = "reports"
QUEUES = (ORDERS, DEAD, RETRY, REPORTS)
BACKLOG = 1000


def q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def ok(broker: Broker, path: str, method: str = "GET", body: Any = None) -> Any:
    status, answer = broker.api(path, method, body)
    assert status < 300, f"{method} {path}: {status} {answer}"
    return answer


def params(broker: Broker, vhost: str) -> pika.ConnectionParameters:
    return broker.params(virtual_host=vhost, heartbeat=30, blocked_connection_timeout=30, socket_timeout=30)


def add_vhost(broker: Broker, vhost: str) -> None:
    """The vhost, with every permission for the test's user (guide step 2 on the new broker)."""
    ok(broker, f"/api/vhosts/{q(vhost)}", "PUT", {})
    ok(
        broker,
        f"/api/permissions/{q(vhost)}/{q(broker.user)}",
        "PUT",
        {"configure": ".*", "write": ".*", "read": ".*"},
    )


def set_up_the_application(broker: Broker, vhost: str) -> None:
    """What the application declares on the old broker (the guide's starting point)."""
    add_vhost(broker, vhost)
    conn = pika.BlockingConnection(params(broker, vhost))
    ch = conn.channel()
    ch.exchange_declare(ORDERS, "direct", durable=True)
    ch.exchange_declare("orders.dlx", "fanout", durable=True)
    ch.queue_declare(ORDERS, durable=True, arguments={"x-dead-letter-exchange": "orders.dlx"})
    ch.queue_bind(ORDERS, ORDERS, "order")
    ch.queue_declare(DEAD, durable=True)
    ch.queue_bind(DEAD, "orders.dlx")
    # a retry after 300 ms: expired messages go back to orders
    ch.queue_declare(
        RETRY,
        durable=True,
        arguments={
            "x-message-ttl": 300,
            "x-dead-letter-exchange": ORDERS,
            "x-dead-letter-routing-key": "order",
        },
    )
    ch.queue_declare(REPORTS, durable=True)
    ch.confirm_delivery()
    for n in range(BACKLOG):
        ch.basic_publish("", REPORTS, f"report-{n}".encode(), pika.BasicProperties(delivery_mode=2))
    conn.close()


@dataclass
class Publisher:
    """Publishes confirmed orders (half of them through the retry queue) to whichever broker it is told."""

    vhost: str
    target: Broker
    confirmed: list[str] = field(default_factory=list)
    per_broker: Counter[int] = field(default_factory=Counter)  # confirmed orders by broker port
    stop: threading.Event = field(default_factory=threading.Event)
    moved: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                broker = self.target
                conn = pika.BlockingConnection(params(broker, self.vhost))
                ch = conn.channel()
                ch.confirm_delivery()
                while not self.stop.is_set() and broker is self.target:
                    order = f"order-{len(self.confirmed)}-{uuid.uuid4().hex[:6]}"
                    props = pika.BasicProperties(delivery_mode=2, message_id=order)
                    if len(self.confirmed) % 2:
                        ch.basic_publish("", RETRY, order.encode(), props)
                    else:
                        ch.basic_publish(ORDERS, "order", order.encode(), props)
                    self.confirmed.append(order)  # basic_publish returned: the broker confirmed it
                    self.per_broker[broker.port] += 1
                    time.sleep(0.004)
                conn.close()
                if broker is not self.target:
                    self.moved.set()
        except BaseException as exc:  # reported by the test
            self.error = exc


@dataclass
class Consumer:
    """Consumes orders on one broker, acks each, rejects every tenth (dead-lettered)."""

    broker: Broker
    vhost: str
    seen: Counter[str] = field(default_factory=Counter)
    rejected: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = pika.BlockingConnection(params(self.broker, self.vhost))
            ch = conn.channel()
            ch.basic_qos(prefetch_count=20)
            for method, _props, body in ch.consume(ORDERS, inactivity_timeout=0.2):
                if self.stop.is_set():
                    break
                if method is None:
                    continue
                order = body.decode()
                if int(order.split("-")[1]) % 10 == 0 and order not in self.rejected:
                    self.rejected.add(order)
                    ch.basic_reject(method.delivery_tag, requeue=False)
                else:
                    self.seen[order] += 1
                    ch.basic_ack(method.delivery_tag)
            ch.cancel()  # what was prefetched and not acked goes back to the queue
            conn.close()
        except BaseException as exc:
            self.error = exc


def start(worker: Any) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def queue_totals(broker: Broker, vhost: str) -> dict[str, int]:
    """``messages`` (ready + unacknowledged) of each queue of the vhost, as the management API says."""
    return {item["name"]: item.get("messages", 0) for item in ok(broker, f"/api/queues/{q(vhost)}")}


def drain(broker: Broker, vhost: str, queue: str) -> list[bytes]:
    conn = pika.BlockingConnection(params(broker, vhost))
    ch = conn.channel()
    bodies = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        bodies.append(body)
    conn.close()
    return bodies


@pytest.fixture
def vhost(broker: Broker) -> Iterator[str]:
    name = f"migrate-{uuid.uuid4().hex[:8]}"
    try:
        yield name
    finally:
        broker.api(f"/api/vhosts/{q(name)}", "DELETE")


def test_an_application_moves_to_ottermq_without_losing_a_message(broker, broker_process, vhost):
    old = broker
    new = broker_process().start()

    # 1. the application runs on the old broker
    set_up_the_application(old, vhost)
    publisher = Publisher(vhost, old)
    old_consumer = Consumer(old, vhost)
    threads = [start(publisher), start(old_consumer)]
    poll_until(
        lambda: len(old_consumer.seen) >= 50, timeout=30, what="the application running on the old broker"
    )

    # 2. definitions: the old vhost's exported, the vhost made on the new broker, the definitions imported
    definitions = ok(old, f"/api/definitions/{q(vhost)}")
    add_vhost(new, vhost)
    ok(new, f"/api/definitions/{q(vhost)}", "POST", definitions)
    assert set(QUEUES) <= set(queue_totals(new, vhost))

    # 3. consumers move: one on the new broker, then the old one stops (its unacked go back to the queue)
    new_consumer = Consumer(new, vhost)
    threads.append(start(new_consumer))
    old_consumer.stop.set()
    threads[1].join(timeout=30)

    # 4. a shovel per queue on the new broker, from the old queue to its twin
    source = f"amqp://{old.user}:{old.password}@{old.host}:{old.port}/{q(vhost)}"
    for name in QUEUES:
        value = {
            "src-uri": source,
            "src-queue": name,
            "dest-uri": f"amqp:///{q(vhost)}",
            "dest-queue": name,
            "ack-mode": "on-confirm",
            "src-prefetch-count": 100,
        }
        status, answer = new.api(
            f"/api/parameters/shovel/{q(vhost)}/{q('move-' + name)}", "PUT", {"value": value}
        )
        assert status in (201, 204), (status, answer)

    # 5. publishers move
    poll_until(lambda: len(new_consumer.seen) >= 20, timeout=30, what="orders consumed on the new broker")
    publisher.target = new
    poll_until(publisher.moved.is_set, timeout=30, what="the publisher on the new broker")

    poll_until(
        lambda: publisher.per_broker[new.port] >= 50, timeout=30, what="orders confirmed by the new broker"
    )

    # 6. every old queue empty (the retry queue's messages expire into orders, which its shovel moves)
    poll_until(
        lambda: not any(queue_totals(old, vhost).values()),
        timeout=120,
        what="every queue of the old broker empty",
        explain=lambda: f"old: {queue_totals(old, vhost)}, shovels: {new.api('/api/shovels')[1]}",
    )
    for name in QUEUES:
        ok(new, f"/api/parameters/shovel/{q(vhost)}/{q('move-' + name)}", "DELETE")

    # the application stops; the retry queue has emptied into orders and orders into the consumer
    publisher.stop.set()
    threads[0].join(timeout=30)
    poll_until(
        lambda: all(queue_totals(new, vhost)[n] == 0 for n in (ORDERS, RETRY)),
        timeout=60,
        what="orders and the retry queue consumed on the new broker",
        explain=lambda: str(queue_totals(new, vhost)),
    )
    new_consumer.stop.set()
    threads[2].join(timeout=30)
    for worker in (publisher, old_consumer, new_consumer):
        assert worker.error is None, repr(worker.error)

    # every confirmed order consumed or dead-lettered, once; the backlog whole
    consumed = old_consumer.seen + new_consumer.seen
    dead = Counter(body.decode() for body in drain(new, vhost, DEAD))
    reports = drain(new, vhost, REPORTS)
    everywhere = consumed + dead
    lost = [order for order in publisher.confirmed if order not in everywhere]
    duplicates = {order: n for order, n in everywhere.items() if n > 1}
    assert not lost, f"{len(lost)} of {len(publisher.confirmed)} confirmed orders lost, e.g. {lost[:5]}"
    assert not duplicates, (
        f"{len(duplicates)} orders arrived more than once, e.g. {list(duplicates.items())[:5]}"
    )
    assert set(dead) == old_consumer.rejected | new_consumer.rejected
    assert sorted(reports) == sorted(f"report-{n}".encode() for n in range(BACKLOG))
    # the application really ran on both sides of the move
    assert publisher.per_broker[old.port] >= 50 and publisher.per_broker[new.port] >= 50, publisher.per_broker
    assert old_consumer.seen and new_consumer.seen
