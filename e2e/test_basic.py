"""Basic class: publish/get/consume, acks, QoS, consumers, returns, confirms, tx and message fidelity.

Counting assertions (message_count in declare-ok/get-ok) publish in confirm mode first: RabbitMQ may answer a
queue.declare before earlier unconfirmed publishes reached the queue.
"""

from __future__ import annotations

import decimal
import re
import struct
from datetime import UTC, datetime

import pamqp.body
import pamqp.commands as C
import pamqp.header
import pika
import pika.exceptions
import pytest

from .polling import poll_until

VHOST = "vhost '/'"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY = 1, 2, 3


class Collector:
    """A pika consumer callback that records ``(method, properties, body)`` and can wait for a count."""

    def __init__(self, ch):
        self.ch = ch
        self.got: list[tuple] = []

    def __call__(self, ch, method, props, body) -> None:
        self.got.append((method, props, body))

    @property
    def bodies(self) -> list[bytes]:
        return [body for _, _, body in self.got]

    def wait_for(self, n: int, timeout: float = 5) -> list[tuple]:
        def enough() -> bool:
            self.ch.connection.process_data_events(time_limit=0.01)
            return len(self.got) >= n

        poll_until(enough, timeout=timeout, what=f"{n} deliveries", explain=lambda: f"got {self.bodies}")
        return self.got

    def settle(self, seconds: float = 0.2) -> list[tuple]:
        """Process events for a bounded time to see that nothing more arrives."""
        self.ch.connection.process_data_events(time_limit=seconds)
        return self.got


@pytest.fixture
def collector():
    return Collector


def message_count(conn, queue: str) -> int:
    ch = conn.channel()
    count = ch.queue_declare(queue, passive=True).method.message_count
    ch.close()
    return count


# ---------------------------------------------------------------------------------------------------------
# publish / get
# ---------------------------------------------------------------------------------------------------------
def test_publish_get_and_get_empty(channel, declare):
    q = declare(channel, exclusive=True)
    channel.confirm_delivery()
    for i in range(3):
        channel.basic_publish("", q, b"m%d" % i)
    seen = []
    for expected_left in (2, 1, 0):
        method, props, body = channel.basic_get(q, auto_ack=True)
        assert (method.exchange, method.routing_key, method.redelivered) == ("", q, False)
        assert method.message_count == expected_left
        seen.append((method.delivery_tag, body))
    assert seen == [(1, b"m0"), (2, b"m1"), (3, b"m2")]  # delivery tags count from 1 per channel
    assert channel.basic_get(q) == (None, None, None)


def test_publish_to_missing_queue_via_default_exchange_is_dropped(channel, unique):
    channel.confirm_delivery()
    channel.basic_publish("", unique("nobody"), b"lost")  # acked, not an error
    assert channel.is_open


def test_get_and_consume_missing_queue_is_404(connect, unique, channel_error):
    conn = connect()
    q = unique("missing")
    ch = conn.channel()
    channel_error(lambda: ch.basic_get(q), 404, f"NOT_FOUND - no queue '{q}' in {VHOST}")
    ch = conn.channel()
    channel_error(lambda: ch.basic_consume(q, lambda *a: None), 404, f"NOT_FOUND - no queue '{q}' in {VHOST}")


def test_consume_with_no_ack(channel, collector, declare):
    q = declare(channel, exclusive=True)
    for i in range(3):
        channel.basic_publish("", q, b"m%d" % i)
    c = collector(channel)
    channel.basic_consume(q, c, auto_ack=True)
    got = c.wait_for(3)
    assert [b for _, _, b in got] == [b"m0", b"m1", b"m2"]
    assert [m.delivery_tag for m, _, _ in got] == [1, 2, 3]
    assert all(not m.redelivered and m.exchange == "" and m.routing_key == q for m, _, _ in got)
    assert channel.basic_get(q) == (None, None, None)


def test_consumer_receives_messages_published_later(connect, collector, declare):
    conn = connect()
    ch = conn.channel()
    q = declare(ch, exclusive=True)
    c = collector(ch)
    ch.basic_consume(q, c, auto_ack=True)
    publisher = conn.channel()
    publisher.basic_publish("", q, b"late")
    assert c.wait_for(1)[0][2] == b"late"


def test_manual_ack(connect, collector, declare):
    conn = connect()
    ch = conn.channel()
    q = declare(ch, exclusive=True)
    ch.confirm_delivery()
    ch.basic_publish("", q, b"acked")
    ch.basic_publish("", q, b"unacked")
    c = collector(ch)
    ch.basic_consume(q, c)
    (acked, _, _), (unacked, _, _) = c.wait_for(2)
    assert (acked.delivery_tag, unacked.delivery_tag) == (1, 2)
    assert message_count(conn, q) == 0  # unacked messages are not counted as ready
    ch.basic_ack(acked.delivery_tag)
    ch.close()  # only the unacked one comes back
    other = conn.channel()
    method, _, body = other.basic_get(q, auto_ack=True)
    assert (body, method.redelivered) == (b"unacked", True)
    assert other.basic_get(q) == (None, None, None)


# ---------------------------------------------------------------------------------------------------------
# ack / nack / reject errors
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["ack", "nack", "reject"])
def test_unknown_delivery_tag_is_406(channel, channel_error, op):
    getattr(channel, f"basic_{op}")(99)
    channel_error(
        lambda: channel.queue_declare("", exclusive=True),
        406,
        "PRECONDITION_FAILED - unknown delivery tag 99",
    )


def test_double_ack_is_406(channel, channel_error, declare):
    q = declare(channel, exclusive=True)
    channel.basic_publish("", q, b"m")
    method, _, _ = channel.basic_get(q)
    channel.basic_ack(method.delivery_tag)
    channel.basic_ack(method.delivery_tag)
    channel_error(
        lambda: channel.queue_declare("", exclusive=True), 406, "PRECONDITION_FAILED - unknown delivery tag 1"
    )


def test_ack_of_auto_acked_delivery_is_406(channel, channel_error, declare):
    q = declare(channel, exclusive=True)
    channel.basic_publish("", q, b"m")
    method, _, _ = channel.basic_get(q, auto_ack=True)
    channel.basic_ack(method.delivery_tag)
    channel_error(
        lambda: channel.queue_declare("", exclusive=True), 406, "PRECONDITION_FAILED - unknown delivery tag 1"
    )


def test_ack_on_another_channel_is_406(connect, channel_error, declare):
    conn = connect()
    ch = conn.channel()
    q = declare(ch, exclusive=True)
    ch.basic_publish("", q, b"m")
    method, _, _ = ch.basic_get(q)
    other = conn.channel()
    other.basic_ack(method.delivery_tag)  # delivery tags are per channel
    channel_error(
        lambda: other.queue_declare("", exclusive=True), 406, "PRECONDITION_FAILED - unknown delivery tag 1"
    )


def test_ack_zero_multiple_with_nothing_outstanding_is_ok(channel, channel_error):
    channel.basic_ack(0, multiple=True)  # "everything so far": fine even if nothing is unacked
    channel.queue_declare("", exclusive=True)
    channel.basic_ack(0)
    channel_error(
        lambda: channel.queue_declare("", exclusive=True), 406, "PRECONDITION_FAILED - unknown delivery tag 0"
    )


# ---------------------------------------------------------------------------------------------------------
# requeue
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["nack", "reject"])
def test_requeue_goes_back_to_original_position_redelivered(channel, op, declare):
    q = declare(channel, exclusive=True)
    for i in range(3):
        channel.basic_publish("", q, b"m%d" % i)
    first, _, _ = channel.basic_get(q)
    second, _, _ = channel.basic_get(q)
    getattr(channel, f"basic_{op}")(second.delivery_tag, requeue=True)
    getattr(channel, f"basic_{op}")(first.delivery_tag, requeue=True)
    got = [channel.basic_get(q, auto_ack=True) for _ in range(3)]
    assert [(b, m.redelivered) for m, _, b in got] == [(b"m0", True), (b"m1", True), (b"m2", False)]


@pytest.mark.parametrize("op", ["nack", "reject"])
def test_requeue_false_drops_message(channel, op, declare):
    q = declare(channel, exclusive=True)
    channel.basic_publish("", q, b"m")
    method, _, _ = channel.basic_get(q)
    getattr(channel, f"basic_{op}")(method.delivery_tag, requeue=False)
    assert channel.basic_get(q) == (None, None, None)


def test_consumer_gets_requeued_message_again(channel, collector, declare):
    q = declare(channel, exclusive=True)
    channel.basic_publish("", q, b"m")
    c = collector(channel)
    channel.basic_consume(q, c)
    first, _, _ = c.wait_for(1)[0]
    channel.basic_nack(first.delivery_tag, requeue=True)
    second, _, body = c.wait_for(2)[1]
    assert (body, second.redelivered, second.delivery_tag) == (b"m", True, 2)


def test_multiple_ack(connect, declare):
    conn = connect()
    ch = conn.channel()
    q = declare(ch, exclusive=True)
    for i in range(4):
        ch.basic_publish("", q, b"m%d" % i)
    tags = [ch.basic_get(q)[0].delivery_tag for _ in range(4)]
    assert tags == [1, 2, 3, 4]
    ch.basic_ack(3, multiple=True)  # acks 1..3, leaves 4
    ch.basic_recover(requeue=True)
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert (body, method.redelivered) == (b"m3", True)
    assert ch.basic_get(q) == (None, None, None)


def test_multiple_nack_requeues_all_up_to_tag(channel, declare):
    q = declare(channel, exclusive=True)
    for i in range(3):
        channel.basic_publish("", q, b"m%d" % i)
    for _ in range(3):
        channel.basic_get(q)
    channel.basic_nack(2, multiple=True, requeue=True)
    got = [channel.basic_get(q, auto_ack=True)[2] for _ in range(2)]
    assert got == [b"m0", b"m1"]
    assert channel.basic_get(q) == (None, None, None)  # m2 is still unacked


def test_unacked_messages_requeued_when_channel_closes(connect, declare):
    conn = connect()
    ch = conn.channel()
    q = declare(ch, exclusive=True)
    for i in range(2):
        ch.basic_publish("", q, b"m%d" % i)
    ch.basic_get(q)
    ch.basic_get(q)
    ch.close()
    other = conn.channel()
    got = [other.basic_get(q, auto_ack=True) for _ in range(2)]
    assert [(b, m.redelivered) for m, _, b in got] == [(b"m0", True), (b"m1", True)]


def test_unacked_messages_requeued_when_connection_closes(connect, unique):
    owner = connect()
    q = unique("q")
    owner.channel().queue_declare(q)
    consumer = connect()
    ch = consumer.channel()
    ch.confirm_delivery()
    ch.basic_publish("", q, b"m")
    assert ch.basic_get(q)[2] == b"m"
    consumer.close()
    other = owner.channel()

    def get():
        method, _, body = other.basic_get(q, auto_ack=True)
        return method and (body, method.redelivered)

    assert poll_until(get) == (b"m", True)


def test_basic_recover_requeue(channel, declare):
    q = declare(channel, exclusive=True)
    channel.basic_publish("", q, b"m")
    channel.basic_get(q)
    channel.basic_recover(requeue=True)
    method, _, body = channel.basic_get(q, auto_ack=True)
    # delivery tags keep increasing after a recover
    assert (body, method.redelivered, method.delivery_tag) == (b"m", True, 2)


def test_basic_recover_without_requeue_is_540(channel, connection_error, declare):
    q = declare(channel, exclusive=True)
    channel.basic_publish("", q, b"m")
    channel.basic_get(q)
    connection_error(lambda: channel.basic_recover(requeue=False), 540, "NOT_IMPLEMENTED - requeue=false")


# ---------------------------------------------------------------------------------------------------------
# QoS
# ---------------------------------------------------------------------------------------------------------
def test_prefetch_count_limits_unacked_deliveries(channel, collector, declare):
    q = declare(channel, exclusive=True)
    for i in range(5):
        channel.basic_publish("", q, b"m%d" % i)
    channel.basic_qos(prefetch_count=2)
    c = collector(channel)
    channel.basic_consume(q, c)
    c.wait_for(2)
    assert c.settle() and c.bodies == [b"m0", b"m1"]  # the third waits for an ack
    channel.basic_ack(c.got[0][0].delivery_tag)
    c.wait_for(3)
    assert c.settle() and c.bodies == [b"m0", b"m1", b"m2"]
    channel.basic_ack(c.got[2][0].delivery_tag, multiple=True)  # frees both slots
    c.wait_for(5)
    assert c.bodies == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_prefetch_applies_per_consumer(channel, collector, declare):
    qa, qb = declare(channel, "a", exclusive=True), declare(channel, "b", exclusive=True)
    for q in (qa, qb):
        for i in range(3):
            channel.basic_publish("", q, b"m%d" % i)
    channel.basic_qos(prefetch_count=1)
    ca, cb = collector(channel), collector(channel)
    channel.basic_consume(qa, ca)
    channel.basic_consume(qb, cb)
    ca.wait_for(1)
    cb.wait_for(1)
    ca.settle()
    assert (len(ca.got), len(cb.got)) == (1, 1)


def test_global_qos_is_shared_by_the_channel(channel, collector, declare):
    qa, qb = declare(channel, "a", exclusive=True), declare(channel, "b", exclusive=True)
    for q in (qa, qb):
        for i in range(3):
            channel.basic_publish("", q, b"m%d" % i)
    channel.basic_qos(
        prefetch_count=2, global_qos=True
    )  # RabbitMQ: global = per channel, shared by consumers
    ca, cb = collector(channel), collector(channel)
    channel.basic_consume(qa, ca)
    channel.basic_consume(qb, cb)

    def two_delivered() -> bool:
        channel.connection.process_data_events(time_limit=0.01)
        return len(ca.got) + len(cb.got) >= 2

    poll_until(two_delivered)
    ca.settle()
    assert len(ca.got) + len(cb.got) == 2


def test_no_ack_consumer_ignores_prefetch(channel, collector, declare):
    q = declare(channel, exclusive=True)
    for i in range(5):
        channel.basic_publish("", q, b"m%d" % i)
    channel.basic_qos(prefetch_count=1)
    c = collector(channel)
    channel.basic_consume(q, c, auto_ack=True)
    assert len(c.wait_for(5)) == 5


def test_prefetch_size_is_540(channel, connection_error):
    connection_error(
        lambda: channel.basic_qos(prefetch_size=1000), 540, "NOT_IMPLEMENTED - prefetch_size!=0 (1000)"
    )


# ---------------------------------------------------------------------------------------------------------
# consumers
# ---------------------------------------------------------------------------------------------------------
def test_server_generated_consumer_tag(raw_connect):
    raw = raw_connect()
    raw.open_channel(1)
    q = raw.rpc(1, C.Queue.Declare(queue="", exclusive=True), C.Queue.DeclareOk).queue
    tag = raw.rpc(1, C.Basic.Consume(queue=q, consumer_tag=""), C.Basic.ConsumeOk).consumer_tag
    assert re.fullmatch(r"amq\.ctag-[A-Za-z0-9_-]{22}", tag), tag
    tag2 = raw.rpc(1, C.Basic.Consume(queue=q, consumer_tag=""), C.Basic.ConsumeOk).consumer_tag
    assert tag2 != tag


def test_duplicate_consumer_tag_is_530(raw_connect):
    raw = raw_connect()
    raw.open_channel(1)
    q = raw.rpc(1, C.Queue.Declare(queue="", exclusive=True), C.Queue.DeclareOk).queue
    raw.rpc(1, C.Basic.Consume(queue=q, consumer_tag="dup"), C.Basic.ConsumeOk)
    raw.send_frame(1, C.Basic.Consume(queue=q, consumer_tag="dup"))
    close = raw.expect_close()
    assert close.channel == 0  # a connection error, not a channel error
    assert (close.reply_code, close.reply_text) == (530, "NOT_ALLOWED - attempt to reuse consumer tag 'dup'")
    assert (close.class_id, close.method_id) == (60, 20)
    assert close.socket_closed


def test_same_consumer_tag_on_two_channels_is_fine(raw_connect):
    raw = raw_connect()
    raw.open_channel(1)
    raw.open_channel(2)
    q = raw.rpc(1, C.Queue.Declare(queue="", exclusive=True), C.Queue.DeclareOk).queue
    raw.rpc(1, C.Basic.Consume(queue=q, consumer_tag="same"), C.Basic.ConsumeOk)
    raw.rpc(2, C.Basic.Consume(queue=q, consumer_tag="same"), C.Basic.ConsumeOk)


@pytest.mark.parametrize("first_exclusive", [True, False], ids=["exclusive-first", "exclusive-second"])
def test_exclusive_consumer_conflict_is_403(connect, channel_error, first_exclusive, declare):
    conn = connect()
    ch = conn.channel()
    q = declare(ch, exclusive=True)
    ch.basic_consume(q, lambda *a: None, exclusive=first_exclusive)
    other = conn.channel()
    channel_error(
        lambda: other.basic_consume(q, lambda *a: None, exclusive=not first_exclusive),
        403,
        f"ACCESS_REFUSED - queue '{q}' in {VHOST} in exclusive use",
    )


def test_basic_cancel_stops_deliveries(connect, collector, declare):
    conn = connect()
    ch = conn.channel()
    q = declare(ch, exclusive=True)
    c = collector(ch)
    tag = ch.basic_consume(q, c, auto_ack=True)
    ch.basic_publish("", q, b"before")
    c.wait_for(1)
    ch.basic_cancel(tag)
    ch.confirm_delivery()
    ch.basic_publish("", q, b"after")
    c.settle()
    assert c.bodies == [b"before"]
    assert ch.basic_get(q, auto_ack=True)[2] == b"after"


def test_cancel_unknown_consumer_tag_is_ok(raw_connect):
    raw = raw_connect()
    raw.open_channel(1)
    ok = raw.rpc(1, C.Basic.Cancel(consumer_tag="never-existed"), C.Basic.CancelOk)
    assert ok.consumer_tag == "never-existed"


def test_consumer_cancel_notification_when_queue_deleted(connect, unique):
    conn = connect()
    ch = conn.channel()
    q = unique("q")
    ch.queue_declare(q)
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method))
    tag = ch.basic_consume(q, lambda *a: None)
    conn.channel().queue_delete(q)
    poll_until(lambda: conn.process_data_events(time_limit=0.01) or cancelled)
    assert cancelled[0].consumer_tag == tag
    assert ch.is_open


def test_raw_cancel_notification_frame(raw_connect):
    raw = raw_connect(capabilities={"consumer_cancel_notify": True})
    raw.open_channel(1)
    raw.open_channel(2)
    q = raw.rpc(1, C.Queue.Declare(queue="", exclusive=True), C.Queue.DeclareOk).queue
    raw.rpc(1, C.Basic.Consume(queue=q, consumer_tag="watch"), C.Basic.ConsumeOk)
    raw.send_frame(2, C.Queue.Delete(queue=q))
    frames = dict((type(f), (ch, f)) for ch, f in (raw.recv_frame(), raw.recv_frame()))  # either order
    assert set(frames) == {C.Basic.Cancel, C.Queue.DeleteOk}
    channel, cancel = frames[C.Basic.Cancel]
    # RabbitMQ sets nowait=True on the server-sent cancel, so the client must not answer with cancel-ok
    assert (channel, cancel.consumer_tag, cancel.nowait) == (1, "watch", True)
    raw.rpc(1, C.Basic.Qos(), C.Basic.QosOk)  # channel still usable


def test_no_cancel_notification_without_capability(raw_connect):
    raw = raw_connect()  # no consumer_cancel_notify capability
    raw.open_channel(1)
    raw.open_channel(2)
    q = raw.rpc(1, C.Queue.Declare(queue="", exclusive=True), C.Queue.DeclareOk).queue
    raw.rpc(1, C.Basic.Consume(queue=q, consumer_tag="watch"), C.Basic.ConsumeOk)
    raw.rpc(2, C.Queue.Delete(queue=q), C.Queue.DeleteOk)
    with pytest.raises(TimeoutError):  # RabbitMQ: the consumer just disappears
        raw.recv_frame(timeout=0.3)
    raw.rpc(1, C.Basic.Qos(), C.Basic.QosOk)


# ---------------------------------------------------------------------------------------------------------
# mandatory / immediate / confirms
# ---------------------------------------------------------------------------------------------------------
def test_mandatory_unroutable_is_returned(channel, unique):
    returned = []
    channel.add_on_return_callback(lambda _ch, method, props, body: returned.append((method, props, body)))
    key = unique("nowhere")
    channel.basic_publish("amq.direct", key, b"bounce", pika.BasicProperties(message_id="m1"), mandatory=True)
    channel.queue_declare("", exclusive=True)  # round trip: basic.return precedes the declare-ok
    channel.connection.process_data_events(time_limit=0)
    [(method, props, body)] = returned
    assert (method.reply_code, method.reply_text) == (312, "NO_ROUTE")
    assert (method.exchange, method.routing_key, body, props.message_id) == (
        "amq.direct",
        key,
        b"bounce",
        "m1",
    )


def test_non_mandatory_unroutable_is_dropped_silently(channel, unique):
    returned = []
    channel.add_on_return_callback(lambda *args: returned.append(args))
    channel.basic_publish("amq.direct", unique("nowhere"), b"dropped")
    channel.queue_declare("", exclusive=True)
    channel.connection.process_data_events(time_limit=0)
    assert returned == []


def test_immediate_is_540(raw_connect):
    raw = raw_connect()
    raw.open_channel(1)
    raw.send_frame(1, C.Basic.Publish(exchange="", routing_key="x", immediate=True))
    raw.send_frame(1, pamqp.header.ContentHeader(0, 1, C.Basic.Properties()))
    raw.send_frame(1, pamqp.body.ContentBody(b"x"))
    close = raw.expect_close()
    assert close.channel == 0
    assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - immediate=true")
    assert (close.class_id, close.method_id) == (60, 40)
    assert close.socket_closed


def test_publisher_confirms(channel, unique, declare):
    q = declare(channel, exclusive=True)
    channel.confirm_delivery()
    channel.basic_publish("", q, b"confirmed")  # raises on nack
    channel.basic_publish("amq.direct", unique("nowhere"), b"unroutable-but-acked")
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("amq.direct", unique("nowhere"), b"returned", mandatory=True)
    assert channel.basic_get(q, auto_ack=True)[2] == b"confirmed"


def test_raw_confirms_ack_every_sequence_number(raw_connect):
    raw = raw_connect()
    raw.open_channel(1)
    q = raw.rpc(1, C.Queue.Declare(queue="", exclusive=True), C.Queue.DeclareOk).queue
    raw.rpc(1, C.Confirm.Select(), C.Confirm.SelectOk)
    for i in range(5):
        raw.send_frame(1, C.Basic.Publish(exchange="", routing_key=q))
        raw.send_frame(1, pamqp.header.ContentHeader(0, 1, C.Basic.Properties()))
        raw.send_frame(1, pamqp.body.ContentBody(b"%d" % i))
    acked: set[int] = set()
    while max(acked, default=0) < 5:
        _, ack = raw.expect(C.Basic.Ack)
        tags = range(min(acked, default=0) + 1, ack.delivery_tag + 1) if ack.multiple else [ack.delivery_tag]
        acked.update(tags)
    assert acked == {1, 2, 3, 4, 5}


def test_raw_confirm_of_returned_message_comes_after_return(raw_connect):
    raw = raw_connect()
    raw.open_channel(1)
    raw.rpc(1, C.Confirm.Select(), C.Confirm.SelectOk)
    raw.send_frame(1, C.Basic.Publish(exchange="amq.direct", routing_key="e2e.nowhere", mandatory=True))
    raw.send_frame(1, pamqp.header.ContentHeader(0, 1, C.Basic.Properties()))
    raw.send_frame(1, pamqp.body.ContentBody(b"x"))
    _, ret = raw.expect(C.Basic.Return)
    assert (ret.reply_code, ret.reply_text, ret.exchange, ret.routing_key) == (
        312,
        "NO_ROUTE",
        "amq.direct",
        "e2e.nowhere",
    )
    raw.expect(pamqp.header.ContentHeader)
    raw.expect(pamqp.body.ContentBody)
    _, ack = raw.expect(C.Basic.Ack)
    assert (ack.delivery_tag, ack.multiple) == (1, False)


# ---------------------------------------------------------------------------------------------------------
# transactions
# ---------------------------------------------------------------------------------------------------------
def test_tx_publishes_invisible_until_commit(connect, declare):
    conn = connect()
    tx = conn.channel()
    q = declare(tx, exclusive=True)
    tx.tx_select()
    tx.basic_publish("", q, b"m0")
    tx.basic_publish("", q, b"m1")
    observer = conn.channel()
    assert observer.basic_get(q) == (None, None, None)
    tx.tx_commit()
    first = poll_until(lambda: observer.basic_get(q, auto_ack=True)[2])
    assert first == b"m0"
    assert poll_until(lambda: observer.basic_get(q, auto_ack=True)[2]) == b"m1"


def test_tx_rollback_discards_publishes(connect, declare):
    conn = connect()
    tx = conn.channel()
    q = declare(tx, exclusive=True)
    tx.tx_select()
    tx.basic_publish("", q, b"rolled-back")
    tx.tx_rollback()
    tx.basic_publish("", q, b"marker")
    tx.tx_commit()
    observer = conn.channel()
    assert poll_until(lambda: observer.basic_get(q, auto_ack=True)[2]) == b"marker"
    assert observer.basic_get(q) == (None, None, None)


def test_tx_acks_take_effect_on_commit_only(connect, declare):
    conn = connect()
    ch = conn.channel()
    q = declare(ch, exclusive=True)
    ch.basic_publish("", q, b"a")
    ch.basic_publish("", q, b"b")
    tx = conn.channel()
    tx.tx_select()
    tag_a = tx.basic_get(q)[0].delivery_tag
    tag_b = tx.basic_get(q)[0].delivery_tag
    tx.basic_ack(tag_a)
    tx.basic_ack(tag_b)
    tx.tx_rollback()  # both acks discarded: still unacked
    tx.basic_ack(tag_a)
    tx.tx_commit()  # a acked for real
    tx.close()  # b requeued
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert (body, method.redelivered) == (b"b", True)
    assert ch.basic_get(q) == (None, None, None)


def test_tx_commit_with_a_refused_publish_is_406_partial_tx_completion(connect, unique, channel_error):
    conn = connect()
    tx = conn.channel()
    q = unique("q")
    tx.queue_declare(q, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    tx.tx_select()
    tx.basic_publish("", q, b"fits")
    tx.basic_publish("", q, b"refused")
    channel_error(tx.tx_commit, 406, "PRECONDITION_FAILED - partial tx completion")
    observer = conn.channel()
    assert poll_until(lambda: observer.basic_get(q, auto_ack=True)[2]) == b"fits"  # what fit stays
    assert observer.basic_get(q) == (None, None, None)


@pytest.mark.parametrize("op", ["tx_commit", "tx_rollback"])
def test_tx_without_select_is_406(channel, channel_error, op):
    channel_error(getattr(channel, op), 406, "PRECONDITION_FAILED - channel is not transactional")


def test_confirm_and_tx_are_exclusive(connect, channel_error):
    conn = connect()
    ch = conn.channel()
    ch.confirm_delivery()
    channel_error(ch.tx_select, 406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode")
    ch = conn.channel()
    ch.tx_select()
    channel_error(ch.confirm_delivery, 406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode")


# ---------------------------------------------------------------------------------------------------------
# message properties and content
# ---------------------------------------------------------------------------------------------------------
def test_user_id_must_match_authenticated_user(connect, channel_error, declare):
    conn = connect()
    ch = conn.channel()
    q = declare(ch, exclusive=True)
    ch.basic_publish("", q, b"ok", pika.BasicProperties(user_id="guest"))
    assert ch.basic_get(q, auto_ack=True)[1].user_id == "guest"
    ch.basic_publish("", q, b"spoofed", pika.BasicProperties(user_id="bob"))
    channel_error(
        lambda: ch.queue_declare("", exclusive=True),
        406,
        "PRECONDITION_FAILED - user_id property set to 'bob' but authenticated user was 'guest'",
    )


def test_all_properties_survive_round_trip(channel, collector, declare):
    q = declare(channel, exclusive=True)
    headers = {
        "str": "text",
        "unicode": "h\u00e9llo \u2603",
        "bytes": b"\x00\x01\xff",
        "int": 42,
        "negative": -7,
        "big": 2**40,
        "true": True,
        "false": False,
        "decimal": decimal.Decimal("3.14"),
        "timestamp": datetime(2024, 1, 2, 3, 4, 5),
        "nested": {"a": 1, "b": {"c": "d"}},
        "array": [1, "two", [3], {"four": 4}],
        "void": None,
        "empty": "",
    }
    props = pika.BasicProperties(
        content_type="application/json",
        content_encoding="utf-8",
        headers=headers,
        delivery_mode=2,
        priority=7,
        correlation_id="corr-1",
        reply_to="reply-queue",
        expiration="3600000",
        message_id="msg-1",
        timestamp=1700000000,
        type="order.created",
        user_id="guest",
        app_id="e2e",
        cluster_id="cluster-x",
    )
    channel.basic_publish("", q, b"{}", props)
    c = collector(channel)
    channel.basic_consume(q, c, auto_ack=True)
    _, got, body = c.wait_for(1)[0]
    assert body == b"{}"
    for name in (
        "content_type",
        "content_encoding",
        "delivery_mode",
        "priority",
        "correlation_id",
        "reply_to",
        "expiration",
        "message_id",
        "timestamp",
        "type",
        "user_id",
        "app_id",
        "cluster_id",
    ):
        assert getattr(got, name) == getattr(props, name), name
    expected = dict(headers, timestamp=datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert got.headers == expected


def test_empty_properties_and_empty_body(channel, declare):
    q = declare(channel, exclusive=True)
    channel.basic_publish("", q, b"")
    method, props, body = channel.basic_get(q, auto_ack=True)
    assert body == b""
    assert props.headers is None and props.content_type is None and props.delivery_mode is None


def _shortstr(s: str) -> bytes:
    raw = s.encode()
    return bytes([len(raw)]) + raw


def _longstr(raw: bytes) -> bytes:
    return struct.pack(">I", len(raw)) + raw


def _table(entries: list[tuple[str, bytes]]) -> bytes:
    return _longstr(b"".join(_shortstr(k) + v for k, v in entries))


def test_raw_property_bytes_forwarded_unchanged(raw_connect):
    """Every field-table type tag, in odd orders and widths, comes back byte for byte."""
    headers = _table(
        [
            ("S", b"S" + _longstr(b"text")),
            ("I", b"I" + struct.pack(">i", -5)),
            ("i", b"i" + struct.pack(">I", 4_000_000_000)),
            ("l", b"l" + struct.pack(">q", -(2**40))),
            ("l-small", b"l" + struct.pack(">q", 1)),  # a small value in a wide type must stay wide
            ("b", b"b" + struct.pack(">b", -3)),
            ("B", b"B" + struct.pack(">B", 200)),
            ("s", b"s" + struct.pack(">h", -300)),
            ("u", b"u" + struct.pack(">H", 60000)),
            ("t", b"t\x01"),
            ("f", b"f" + struct.pack(">f", 1.5)),
            ("d", b"d" + struct.pack(">d", 2.25)),
            ("D", b"D" + struct.pack(">Bi", 2, 12345)),
            ("T", b"T" + struct.pack(">Q", 1_700_000_000)),
            ("x", b"x" + _longstr(b"\x00\xff")),
            ("V", b"V"),
            ("A", b"A" + _longstr(b"I" + struct.pack(">i", 1) + b"S" + _longstr(b"two") + b"V")),
            ("F", b"F" + _table([("inner", b"b\x01"), ("deeper", b"F" + _table([]))])),
            ("Z-last", b"S" + _longstr(b"keys keep their order")),
        ]
    )
    props = (
        _shortstr("application/octet-stream")
        + _shortstr("gzip")
        + headers
        + bytes([2, 9])  # delivery_mode, priority
        + _shortstr("corr")
        + _shortstr("reply")
        + _shortstr("3600000")
        + _shortstr("mid")
        + struct.pack(">Q", 1_700_000_000)
        + _shortstr("type")
        + _shortstr("guest")
        + _shortstr("app")
        + _shortstr("cluster")
    )
    body = b"raw-body"
    header_payload = struct.pack(">HHQH", 60, 0, len(body), 0xFFFC) + props

    raw = raw_connect()
    raw.open_channel(1)
    q = raw.rpc(1, C.Queue.Declare(queue="", exclusive=True), C.Queue.DeclareOk).queue
    publish = pamqp.frame.marshal(C.Basic.Publish(exchange="", routing_key=q), 1)
    raw.send(publish + struct.pack(">BHI", FRAME_HEADER, 1, len(header_payload)) + header_payload + b"\xce")
    raw.send_frame(1, pamqp.body.ContentBody(body))
    raw.send_frame(1, C.Basic.Get(queue=q, no_ack=True))

    frame_type, _, payload = raw.recv_raw_frame()
    assert frame_type == FRAME_METHOD and struct.unpack(">HH", payload[:4]) == (60, 71)  # basic.get-ok
    frame_type, channel, payload = raw.recv_raw_frame()
    assert (frame_type, channel) == (FRAME_HEADER, 1)
    assert payload == header_payload
    frame_type, _, payload = raw.recv_raw_frame()
    assert (frame_type, payload) == (FRAME_BODY, body)


def test_large_message_round_trips(channel, declare):
    q = declare(channel, exclusive=True)
    body = bytes(range(256)) * 4096  # 1 MiB, spans many frames
    channel.basic_publish("", q, body)
    method, _, got = channel.basic_get(q, auto_ack=True)
    assert got == body


def test_body_split_at_small_frame_max(connect, declare):
    ch = connect(frame_max=4096).channel()
    q = declare(ch, exclusive=True)
    body = b"0123456789" * 1000
    ch.basic_publish("", q, body)
    assert ch.basic_get(q, auto_ack=True)[2] == body


def test_thousand_messages_keep_order(connect, collector, declare):
    conn = connect()
    ch = conn.channel()
    q = declare(ch, exclusive=True)
    expected = [b"%04d" % i for i in range(1000)]
    for body in expected:
        ch.basic_publish("", q, body)
    c = collector(ch)
    ch.basic_qos(prefetch_count=100)
    ch.basic_consume(q, lambda c_, m, p, b: (c(c_, m, p, b), c_.basic_ack(m.delivery_tag)))
    c.wait_for(1000, timeout=20)
    assert c.bodies == expected
