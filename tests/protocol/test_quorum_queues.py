"""Quorum queues over the mock transport: the frames a client sees for the declare rules, the global QoS
refusal and ``x-delivery-count`` (texts and codes as RabbitMQ 3.10.8 sent them; e2e/test_quorum_queues.py
checks the same against both brokers)."""

from __future__ import annotations

import pytest
from pamqp import commands as spec

Q = {"x-queue-type": "quorum"}
QUEUE_DECLARE = (50, 10)


def prop(name: str, what: str) -> str:
    return f"PRECONDITION_FAILED - invalid property '{what}' for queue '{name}' in vhost '/'"


@pytest.mark.parametrize(
    ("flags", "text"),
    [
        ({"durable": False}, prop("q", "non-durable")),
        ({"durable": True, "exclusive": True}, prop("q", "exclusive-owner")),
        ({"durable": True, "auto_delete": True}, prop("q", "auto-delete")),
        ({"durable": False, "exclusive": True, "auto_delete": True}, prop("q", "auto-delete")),
    ],
)
def test_declare_flags_are_406(client, flags, text):
    assert client.refused(1, spec.Queue.Declare(queue="q", arguments=Q, **flags)) == (
        406,
        text,
        QUEUE_DECLARE,
    )


def test_server_named_is_406_before_anything_else(client):
    text = "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue"
    method = spec.Queue.Declare(queue="", durable=False, arguments={**Q, "x-max-length": -1})
    assert client.refused(1, method) == (406, text, QUEUE_DECLARE)


def test_declare_passive_redeclare(client):
    ok = client.rpc(1, spec.Queue.Declare(queue="q", durable=True, arguments=Q), spec.Queue.DeclareOk)
    assert (ok.queue, ok.message_count, ok.consumer_count) == ("q", 0, 0)
    client.rpc(1, spec.Queue.Declare(queue="q", passive=True), spec.Queue.DeclareOk)
    client.rpc(
        1,
        spec.Queue.Declare(queue="q", durable=True, arguments={**Q, "x-max-priority": 1}),
        spec.Queue.DeclareOk,
    )
    text = (
        "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': "
        "received none but current is the value 'quorum' of type 'longstr'"
    )
    assert client.refused(1, spec.Queue.Declare(queue="q", durable=True)) == (406, text, QUEUE_DECLARE)


def test_global_qos_consume_closes_the_connection(client):
    client.rpc(1, spec.Queue.Declare(queue="q", durable=True, arguments=Q), spec.Queue.DeclareOk)
    client.rpc(1, spec.Basic.Qos(prefetch_count=10, global_=True), spec.Basic.QosOk)
    client.send(1, spec.Basic.Consume(queue="q", consumer_tag="c"))
    close = client.expect(spec.Connection.Close)
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        540,
        "NOT_IMPLEMENTED - queue 'q' in vhost '/' does not support global qos",
        60,
        20,
    )


def test_a_global_qos_of_zero_or_a_classic_queue_is_fine(client):
    client.rpc(1, spec.Queue.Declare(queue="q", durable=True, arguments=Q), spec.Queue.DeclareOk)
    client.rpc(1, spec.Queue.Declare(queue="c"), spec.Queue.DeclareOk)
    client.rpc(1, spec.Basic.Qos(prefetch_count=10, global_=True), spec.Basic.QosOk)
    client.rpc(1, spec.Basic.Consume(queue="c", consumer_tag="c"), spec.Basic.ConsumeOk)
    client.rpc(1, spec.Basic.Qos(prefetch_count=0, global_=True), spec.Basic.QosOk)
    client.rpc(1, spec.Basic.Consume(queue="q", consumer_tag="q"), spec.Basic.ConsumeOk)


def test_get_counts_deliveries_from_zero(client):
    client.rpc(1, spec.Queue.Declare(queue="q", durable=True, arguments=Q), spec.Queue.DeclareOk)
    client.publish(1, "", "q", b"m", spec.Basic.Properties(headers={"app": "v"}))
    seen = []
    for _ in range(3):
        got = client.get("q", no_ack=False)
        assert got is not None
        ok, props, _ = got
        seen.append((ok.redelivered, props.headers))
        client.send(1, spec.Basic.Nack(delivery_tag=ok.delivery_tag, requeue=True))
    assert seen == [
        (False, {"app": "v", "x-delivery-count": 0}),
        (True, {"app": "v", "x-delivery-count": 1}),
        (True, {"app": "v", "x-delivery-count": 2}),
    ]
