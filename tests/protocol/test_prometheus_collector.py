"""The Prometheus collector (broker/management/prometheus.py) on a broker driven over the protocol
harness: counters move where the events happen, gauges read the broker's state at scrape time."""

from __future__ import annotations

from ottermq.broker.management.prometheus import exposition
from ottermq.broker.node.view import NodeView
from ottermq.dlx.deadletter import DeadLetterer
from ottermq.vhost.message import Entry, Message
from pamqp import commands as spec
from prometheus_client.parser import text_string_to_metric_families

AMQP = {"protocol": "amqp091"}


def scrape(broker, per_object=False):
    """``{(sample name, frozenset(labels)): value}`` of one scrape."""
    text = exposition(NodeView(broker), per_object).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples, name, **labels):
    return samples[(name, frozenset(labels.items()))]


def glob(samples, name):
    return value(samples, f"rabbitmq_global_messages_{name}_total", **AMQP)


def declare(client, name, **arguments):
    client.send(1, spec.Queue.Declare(queue=name, arguments=arguments or None))
    client.expect(spec.Queue.DeclareOk)


def test_a_fresh_broker_has_every_family_at_zero(broker):
    samples = scrape(broker)
    assert value(samples, "rabbitmq_queues") == 0
    assert value(samples, "rabbitmq_connections") == 0
    assert glob(samples, "received") == 0
    for reason in ("expired", "rejected", "maxlen", "delivery_limit"):
        for strategy in ("disabled", "at_most_once"):
            labels = {"queue_type": "rabbit_classic_queue", "dead_letter_strategy": strategy}
            assert value(samples, f"rabbitmq_global_messages_dead_lettered_{reason}_total", **labels) == 0
    assert value(samples, "ottermq_expired_lateness_seconds_count") == 0
    assert value(samples, "ottermq_dead_letter_archive_lost_total") == 0


def test_publish_route_return_drop_and_queue_gauges(client, broker):
    declare(client, "q")
    client.publish(1, "", "q", b"a")
    client.publish(1, "", "q", b"b")
    client.publish(1, "", "nowhere", b"c", mandatory=True)
    client.publish(1, "", "nowhere", b"d")
    samples = scrape(broker)
    assert glob(samples, "received") == 4
    assert glob(samples, "routed") == 2
    assert glob(samples, "unroutable_returned") == 1
    assert glob(samples, "unroutable_dropped") == 1
    assert value(samples, "rabbitmq_queue_messages_ready") == 2
    assert value(samples, "rabbitmq_queue_messages") == 2
    assert value(samples, "rabbitmq_queues") == 1
    assert value(samples, "rabbitmq_connections") == 1
    assert value(samples, "rabbitmq_channels") == 1
    per_queue = scrape(broker, per_object=True)
    assert value(per_queue, "rabbitmq_queue_messages_ready", vhost="/", queue="q") == 2
    assert value(per_queue, "rabbitmq_queue_consumers", vhost="/", queue="q") == 0
    assert ("rabbitmq_queue_messages_ready", frozenset()) not in per_queue


def test_get_ack_reject_and_redelivery(client, broker):
    declare(client, "q")
    for body in (b"a", b"b", b"c"):
        client.publish(1, "", "q", body)
    client.send(1, spec.Basic.Get(queue="q"))
    first = client.expect(spec.Basic.GetOk)
    assert value(scrape(broker), "rabbitmq_queue_messages_unacked") == 1
    client.send(1, spec.Basic.Reject(delivery_tag=first.delivery_tag, requeue=True))
    client.send(1, spec.Basic.Get(queue="q", no_ack=True))  # a, redelivered
    client.send(1, spec.Basic.Get(queue="q"))
    tag = [f for _, f in client.methods() if isinstance(f, spec.Basic.GetOk)][-1].delivery_tag
    client.send(1, spec.Basic.Ack(delivery_tag=tag))
    samples = scrape(broker)
    assert glob(samples, "delivered_get_manual_ack") == 2
    assert glob(samples, "delivered_get_auto_ack") == 1
    assert glob(samples, "delivered") == 3
    assert glob(samples, "redelivered") == 1
    assert glob(samples, "acknowledged") == 1
    assert value(samples, "rabbitmq_queue_messages") == 1


def test_consume_counts_deliveries_and_consumers(client, broker):
    declare(client, "q")
    client.send(1, spec.Basic.Consume(queue="q", consumer_tag="c1", no_ack=True))
    client.expect(spec.Basic.ConsumeOk)
    client.publish(1, "", "q", b"a")
    samples = scrape(broker)
    assert glob(samples, "delivered_consume_auto_ack") == 1
    assert value(samples, "rabbitmq_consumers") == 1
    assert value(samples, "rabbitmq_queue_consumers") == 1


def test_confirms_are_counted(client, broker):
    declare(client, "q")
    client.send(1, spec.Confirm.Select())
    client.expect(spec.Confirm.SelectOk)
    client.publish(1, "", "q", b"a")
    client.publish(1, "", "q", b"b")
    client.expect(spec.Basic.Ack)
    samples = scrape(broker)
    assert glob(samples, "confirmed") == 2
    assert glob(samples, "received_confirm") == 2


def test_dead_letters_by_reason_and_strategy(client, broker):
    declare(client, "dlq")
    declare(client, "work", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    declare(client, "plain")
    declare(client, "short", **{"x-max-length": 1})
    client.publish(1, "", "work", b"a")
    client.publish(1, "", "plain", b"b")
    for queue in ("work", "plain"):
        client.send(1, spec.Basic.Get(queue=queue))
        tag = client.expect(spec.Basic.GetOk).delivery_tag
        client.send(1, spec.Basic.Reject(delivery_tag=tag, requeue=False))
    client.publish(1, "", "short", b"1")
    client.publish(1, "", "short", b"2")  # drops the head: maxlen, no DLX
    samples = scrape(broker)

    def dead(reason, strategy):
        return value(
            samples,
            f"rabbitmq_global_messages_dead_lettered_{reason}_total",
            queue_type="rabbit_classic_queue",
            dead_letter_strategy=strategy,
        )

    assert dead("rejected", "at_most_once") == 1
    assert dead("rejected", "disabled") == 1
    assert dead("maxlen", "disabled") == 1
    assert dead("expired", "at_most_once") == 0
    assert value(samples, "ottermq_dead_letters_dropped_total") == 2  # plain's and short's
    assert value(samples, "rabbitmq_queue_messages_ready") == 2  # dlq's a, short's 2


def test_expiry_lateness_histogram(broker):
    sink = broker.vhosts["/"].sink
    assert isinstance(sink, DeadLetterer)
    message = Message("", "q", b"\x00\x00", b"x", False, 0, None)
    entries = [Entry(message, i, deadline=10_000) for i in range(3)]
    sink.lateness.observe(10_000, entries[:1])  # on time
    sink.lateness.observe(10_030, entries[1:2])  # 30 ms late
    sink.lateness.observe(12_000, entries[2:])  # 2 s late
    samples = scrape(broker)
    bucket = "ottermq_expired_lateness_seconds_bucket"
    assert value(samples, bucket, le="0.001") == 1
    assert value(samples, bucket, le="0.05") == 2
    assert value(samples, bucket, le="2.5") == 3
    assert value(samples, bucket, le="+Inf") == 3
    assert value(samples, "ottermq_expired_lateness_seconds_count") == 3
    assert abs(value(samples, "ottermq_expired_lateness_seconds_sum") - 2.03) < 1e-9
