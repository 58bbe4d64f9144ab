"""Queues: naming, declare equivalence, exclusivity, auto-delete, purge/delete, bindings and priorities.

One case per rule runs here against both brokers; the variants are protocol tests
(tests/protocol/test_queues.py, test_declare_arguments.py).
"""

from __future__ import annotations

import re
import struct

import pamqp.commands as spec
import pika
import pika.exceptions
import pytest

VHOST = "vhost '/'"


def queue_exists(conn, queue: str) -> bool:
    ch = conn.channel()
    try:
        ch.queue_declare(queue, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code in (404, 405)
        return exc.reply_code == 405  # 405: another connection's exclusive queue
    ch.close()
    return True


def locked(q: str) -> str:
    return (
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in {VHOST}. "
        "It could be originally declared on another connection or the exclusive property value does not "
        "match that of the original declaration."
    )


# ---------------------------------------------------------------------------------------------------------
# declare
# ---------------------------------------------------------------------------------------------------------
def test_server_named_queue(channel):
    ok = channel.queue_declare("", exclusive=True).method
    assert re.fullmatch(r"amq\.gen-[A-Za-z0-9_-]{22}", ok.queue), ok.queue
    assert (ok.message_count, ok.consumer_count) == (0, 0)
    other = channel.queue_declare("", exclusive=True).method.queue
    assert other != ok.queue


def test_declare_ok_reports_counts(channel, unique):
    q = unique("q")
    channel.queue_declare(q, exclusive=True)
    # RabbitMQ answers queue.declare before earlier unconfirmed publishes reach the queue: confirm them first
    channel.confirm_delivery()
    for i in range(3):
        channel.basic_publish("", q, b"m%d" % i)
    ok = channel.queue_declare(q, passive=True).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (q, 3, 0)
    channel.basic_consume(q, lambda *a: None)
    ok = channel.queue_declare(q, exclusive=True).method  # active redeclare reports counts too
    assert (ok.message_count, ok.consumer_count) == (0, 1)


def test_declare_amq_prefix_is_403(channel, channel_error):
    channel_error(
        lambda: channel.queue_declare("amq.myqueue"),
        403,
        "ACCESS_REFUSED - queue name 'amq.myqueue' contains reserved prefix 'amq.*'",
    )


def test_passive_declare_missing_is_404(connect, unique, channel_error):
    conn = connect()
    ch = conn.channel()
    q = unique("missing")
    channel_error(lambda: ch.queue_declare(q, passive=True), 404, f"NOT_FOUND - no queue '{q}' in {VHOST}")
    assert conn.is_open


@pytest.mark.parametrize(
    "first,second,arg,received,current",
    # every flag and argument: tests/protocol/test_queues.py
    [({"durable": False}, {"durable": True}, "durable", "true", "false")],
)
def test_redeclare_with_different_flags_is_406(
    connect, unique, first, second, arg, received, current, channel_error
):
    ch = connect().channel()
    q = unique("q")
    ch.queue_declare(q, **first)
    channel_error(
        lambda: ch.queue_declare(q, **second),
        406,
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for queue '{q}' in {VHOST}: "
        f"received '{received}' but current is '{current}'",
    )


def test_of_an_argument_given_twice_the_first_counts(raw_connect, connect, unique, channel_error):
    """RabbitMQ reads the first of two equal keys in a field table (rabbit_misc:table_lookup): a raw
    ``queue.declare`` with ``x-max-length`` 10 then 20 declares a queue of 10."""
    q = unique("q")
    table = b"".join(
        bytes([len(b"x-max-length")]) + b"x-max-length" + b"I" + struct.pack(">i", n) for n in (10, 20)
    )
    name = q.encode()
    payload = struct.pack(">HHH", 50, 10, 0) + bytes([len(name)]) + name + b"\x00"
    payload += struct.pack(">I", len(table)) + table
    conn = raw_connect()
    conn.open_channel(1)
    conn.send(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    conn.expect(spec.Queue.DeclareOk)
    ch = connect().channel()
    ch.queue_declare(q, arguments={"x-max-length": 10})  # equivalent
    channel_error(
        lambda: ch.queue_declare(q, arguments={"x-max-length": 20}),
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue '{q}' in {VHOST}: "
        "received '20' but current is '10'",
    )


def test_long_reply_text_is_truncated_to_255_bytes(channel, channel_error):
    q = "e2e.long." + "x" * 240
    err = channel_error(
        lambda: channel.queue_declare(q, passive=True), 404, f"NOT_FOUND - no queue '{q}' in {VHOST}"
    )
    # RabbitMQ keeps the first 252 bytes and appends "..."
    assert len(err.reply_text) == 255 and err.reply_text.endswith("x...")


# ---------------------------------------------------------------------------------------------------------
# exclusive / auto-delete
# ---------------------------------------------------------------------------------------------------------
def test_exclusive_queue_is_locked_for_other_connections(connect, unique, channel_error, drain):
    owner = connect().channel()
    q = unique("excl")
    owner.queue_declare(q, exclusive=True)
    other = connect()
    for op in (
        lambda ch: ch.queue_declare(q, exclusive=True),
        lambda ch: ch.queue_declare(q),
        lambda ch: ch.queue_declare(q, passive=True),
        lambda ch: ch.basic_get(q),
        lambda ch: ch.basic_consume(q, lambda *a: None),
        lambda ch: ch.queue_purge(q),
        lambda ch: ch.queue_delete(q),
        lambda ch: ch.queue_bind(q, "amq.fanout"),
    ):
        ch = other.channel()
        channel_error(lambda ch=ch, op=op: op(ch), 405, locked(q))
    owner.basic_publish("", q, b"still-mine")
    assert drain(owner, q) == [b"still-mine"]


def test_exclusive_queue_deleted_when_owner_closes(connect, unique, poll_until):
    owner = connect()
    q = unique("excl")
    owner.channel().queue_declare(q, exclusive=True)
    watcher = connect()
    assert queue_exists(watcher, q)
    owner.close()
    poll_until(lambda: not queue_exists(watcher, q))


def test_auto_delete_queue_deleted_after_last_consumer_cancels(connect, unique, poll_until):
    conn = connect()
    ch = conn.channel()
    q = unique("ad")
    ch.queue_declare(q, auto_delete=True)
    tag1 = ch.basic_consume(q, lambda *a: None)
    tag2 = ch.basic_consume(q, lambda *a: None)
    ch.basic_cancel(tag1)
    assert queue_exists(conn, q)
    ch.basic_cancel(tag2)
    poll_until(lambda: not queue_exists(conn, q))


# ---------------------------------------------------------------------------------------------------------
# purge / delete
# ---------------------------------------------------------------------------------------------------------
def test_purge_returns_count(channel, unique, drain):
    q = unique("q")
    channel.queue_declare(q, exclusive=True)
    channel.confirm_delivery()  # counts must include every publish
    for i in range(5):
        channel.basic_publish("", q, b"m%d" % i)
    assert channel.queue_purge(q).method.message_count == 5
    assert channel.queue_purge(q).method.message_count == 0
    assert drain(channel, q) == []


def test_delete_returns_message_count(connect, unique):
    conn = connect()
    ch = conn.channel()
    q = unique("q")
    ch.queue_declare(q)
    ch.confirm_delivery()  # counts must include every publish
    for i in range(4):
        ch.basic_publish("", q, b"m%d" % i)
    assert ch.queue_delete(q).method.message_count == 4
    assert not queue_exists(conn, q)


def test_delete_missing_queue_is_ok(channel, unique):
    # RabbitMQ 3.x: deleting a missing queue is not an error and reports 0 messages
    assert channel.queue_delete(unique("missing")).method.message_count == 0


def test_delete_if_empty(connect, unique, channel_error):
    conn = connect()
    ch = conn.channel()
    q = unique("q")
    ch.queue_declare(q)
    ch.basic_publish("", q, b"m")
    channel_error(
        lambda: ch.queue_delete(q, if_empty=True),
        406,
        f"PRECONDITION_FAILED - queue '{q}' in {VHOST} not empty",
    )
    ch = conn.channel()
    ch.queue_purge(q)
    assert ch.queue_delete(q, if_empty=True).method.message_count == 0


# ---------------------------------------------------------------------------------------------------------
# bindings
# ---------------------------------------------------------------------------------------------------------
def test_bind_and_unbind(channel, unique, drain):
    x, q = unique("x"), unique("q")
    channel.exchange_declare(x, "direct")
    channel.queue_declare(q, exclusive=True)
    channel.queue_bind(q, x, "k")
    channel.queue_bind(q, x, "k")  # binding twice is idempotent
    channel.basic_publish(x, "k", b"bound")
    assert drain(channel, q) == [b"bound"]
    channel.queue_unbind(q, x, "k")
    channel.basic_publish(x, "k", b"unbound")
    assert drain(channel, q) == []


def test_unbind_missing_queue_is_ok(connect, unique):
    """RabbitMQ 3.10 answers unbind-ok for a missing queue (aio-pika's RPC cleanup relies on it)."""
    conn = connect()
    ch = conn.channel()
    x = unique("x")
    ch.exchange_declare(x, "direct")
    ch.queue_unbind(unique("no-queue"), x, "k")
    ch.queue_unbind(unique("no-queue"), unique("no-exchange"), "k")
    ch.queue_unbind(unique("no-queue"), "amq.default", "k")  # only the name "" is the default exchange
    assert ch.is_open and conn.is_open


def test_queue_delete_removes_bindings(channel, unique, drain):
    x, q = unique("x"), unique("q")
    channel.exchange_declare(x, "fanout")
    channel.queue_declare(q)
    channel.queue_bind(q, x)
    channel.queue_delete(q)
    channel.queue_declare(q, exclusive=True)
    channel.basic_publish(x, "", b"m")
    assert drain(channel, q) == []


# ---------------------------------------------------------------------------------------------------------
# empty queue name = last queue declared on the channel (RabbitMQ shortcut)
# ---------------------------------------------------------------------------------------------------------
def test_empty_queue_name_means_last_declared(channel):
    q = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind("", "amq.direct", "")  # queue "" and key "" both expand to the last declared queue
    channel.basic_publish("amq.direct", q, b"via-shortcut")
    method, _, body = channel.basic_get("", auto_ack=True)
    assert (method.routing_key, body) == (q, b"via-shortcut")
    assert channel.queue_purge("").method.message_count == 0


def test_empty_queue_name_without_declared_queue_is_404(channel, channel_error):
    channel_error(lambda: channel.basic_get(""), 404, "NOT_FOUND - no previously declared queue")


# ---------------------------------------------------------------------------------------------------------
# priorities
# ---------------------------------------------------------------------------------------------------------
def test_max_priority_orders_by_priority_then_fifo(channel, unique, drain):
    q = unique("prio")
    channel.queue_declare(q, exclusive=True, arguments={"x-max-priority": 5})
    sent = [
        (None, "n1"),
        (1, "p1a"),
        (5, "p5a"),
        (3, "p3"),
        (9, "p9-capped"),
        (1, "p1b"),
        (0, "p0"),
        (5, "p5b"),
        (None, "n2"),
    ]
    for prio, body in sent:
        channel.basic_publish("", q, body.encode(), pika.BasicProperties(priority=prio))
    # priorities above x-max-priority count as the maximum; missing priority counts as 0
    assert drain(channel, q) == [b"p5a", b"p9-capped", b"p5b", b"p3", b"p1a", b"p1b", b"n1", b"p0", b"n2"]


@pytest.mark.parametrize("how", ["get-then-close", "consume-then-close", "nack", "reject", "recover"])
def test_a_requeued_message_goes_back_into_its_own_priority_band(connect, unique, poll_until, how):
    """x-max-priority 1: a priority-0 message taken and returned (``how``), then a priority-1 message
    published: the priority-1 message comes first (RabbitMQ requeues into the message's own band)."""
    q = unique("prio-requeue")
    ch = connect().channel()
    ch.queue_declare(q, arguments={"x-max-priority": 1})
    ch.basic_publish("", q, b"low", pika.BasicProperties(priority=0))
    taker = connect().channel()
    if how == "get-then-close":
        taker.basic_get(q, auto_ack=False)
    else:
        tags: list[int] = []
        taker.basic_qos(prefetch_count=1)
        tag = taker.basic_consume(q, lambda _c, m, _p, _b: tags.append(m.delivery_tag))
        poll_until(lambda: taker.connection.process_data_events(0) or tags, what="the delivery")
        if how in ("nack", "reject", "recover"):
            taker.basic_cancel(tag)
            if how == "nack":
                taker.basic_nack(tags[0], requeue=True)
            elif how == "reject":
                taker.basic_reject(tags[0], requeue=True)
            else:
                taker.basic_recover(requeue=True)
    taker.close()
    poll_until(lambda: ch.queue_declare(q, passive=True).method.message_count == 1, what="the requeue")
    ch.basic_publish("", q, b"high", pika.BasicProperties(priority=1))
    bodies = [ch.basic_get(q, auto_ack=True)[2] for _ in range(2)]
    assert bodies == [b"high", b"low"]
