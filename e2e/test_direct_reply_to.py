"""Direct reply-to (``amq.rabbitmq.reply-to``): the pseudo-queue, rewritten reply-to, replies, errors.

Every expectation here was first observed on RabbitMQ 3.10.8, including its odd corners: a mandatory
reply is returned (312 NO_ROUTE) *and* delivered, a reply carries the consumer channel's next delivery
tag without using it up, a reply published in a transaction is delivered before the commit, and a
two-part address that names no channel of the node closes the connection with 541 INTERNAL_ERROR.

One case per rule runs here against both brokers; the variants are protocol tests
(tests/protocol/test_direct_reply_to.py).
"""

from __future__ import annotations

import pamqp.body
import pamqp.commands as C
import pamqp.header
import pika
import pika.exceptions
import pytest

from .polling import poll_until

RT = "amq.rabbitmq.reply-to"
VHOST = "vhost '/'"


class _Declare(C.Queue.Declare):
    """queue.declare for names pamqp refuses (reply addresses contain ``+``, ``/`` and ``=``)."""

    def validate(self) -> None:
        pass


def declare(queue: str, **kwargs) -> C.Queue.Declare:
    method = _Declare(queue="placeholder", **kwargs)
    method.queue = queue
    return method


def publish(raw, routing_key: str, body: bytes = b"x", props=None, mandatory=False, exchange="", ch=1):
    raw.send_frame(ch, C.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory))
    raw.send_frame(ch, pamqp.header.ContentHeader(0, len(body), props or C.Basic.Properties()))
    raw.send_frame(ch, pamqp.body.ContentBody(body))


def frames_until_quiet(raw, quiet: float = 0.3) -> list:
    """Every frame the broker sends until it has been silent for ``quiet`` seconds."""
    out = []
    while True:
        try:
            out.append(raw.recv_frame(timeout=quiet)[1])
        except TimeoutError:
            return out


def address_of(raw) -> str:
    """The reply address of ``raw``'s channel 1: ask it to publish a request and read its reply-to."""
    queue = raw.rpc(1, C.Queue.Declare(queue="", exclusive=True), C.Queue.DeclareOk).queue
    publish(raw, queue, props=C.Basic.Properties(reply_to=RT))
    return str(get_one(raw, queue)[0].reply_to)


def get_one(raw, queue: str, timeout: float = 5) -> tuple[C.Basic.Properties, bytes, bytes]:
    """basic.get (no-ack) until a message comes: its properties, raw property octets and body."""

    def got_ok() -> bool:
        """One basic.get: True on get-ok (its header and body frames follow), False on get-empty."""
        raw.send_frame(1, C.Basic.Get(queue=queue, no_ack=True))
        _, reply = raw.recv_frame()
        if isinstance(reply, C.Basic.GetOk):
            return True
        assert isinstance(reply, C.Basic.GetEmpty), reply
        return False

    poll_until(got_ok, timeout=timeout, interval=0.01, what=f"a message in {queue}")
    frame_type, _, payload = raw.recv_raw_frame()
    assert frame_type == 2
    header = pamqp.header.ContentHeader()
    header.unmarshal(payload)
    body = raw.expect(pamqp.body.ContentBody)[1].value
    return header.properties, payload[12:], body  # class, weight, body size: 12 octets before the flags


def consumer_with_address(raw_connect, tag: str = "rc"):
    """A raw connection with a reply consumer on channel 1, and that consumer's reply address."""
    raw = raw_connect()
    raw.open_channel(1)
    raw.rpc(1, C.Basic.Consume(queue=RT, consumer_tag=tag, no_ack=True), C.Basic.ConsumeOk)
    return raw, address_of(raw)


def confirming_publisher(raw_connect):
    raw = raw_connect()
    raw.open_channel(1)
    raw.rpc(1, C.Confirm.Select(), C.Confirm.SelectOk)
    return raw


def assert_returned_and_acked(frames, routing_key: str, body: bytes, seq: int = 1) -> None:
    assert [type(f) for f in frames] == [
        C.Basic.Return,
        pamqp.header.ContentHeader,
        pamqp.body.ContentBody,
        C.Basic.Ack,
    ]
    ret = frames[0]
    assert (ret.reply_code, ret.reply_text) == (312, "NO_ROUTE")
    assert (ret.exchange, ret.routing_key) == ("", routing_key)
    assert frames[2].value == body
    assert (frames[3].delivery_tag, frames[3].multiple) == (seq, False)


# ------------------------------------------------------------------------------------------------------
# the capability, the consumer
# ------------------------------------------------------------------------------------------------------
def test_direct_reply_to_capability_is_advertised(raw_connect):
    assert raw_connect().start.server_properties["capabilities"]["direct_reply_to"] is True


def test_rpc_round_trip_across_connections(connect, unique):
    client = connect().channel()
    replies: list = []
    tag = client.basic_consume(RT, lambda _c, m, p, b: replies.append((m, p, b)), auto_ack=True)
    server = connect().channel()
    requests = unique("rpc")
    server.queue_declare(requests, exclusive=True)
    client.basic_publish("", requests, b"2+2?", pika.BasicProperties(reply_to=RT, correlation_id="c-1"))

    def request():
        got = server.basic_get(requests, auto_ack=True)
        return got if got[0] else None

    _, props, body = poll_until(request)
    assert body == b"2+2?" and props.correlation_id == "c-1"
    address = props.reply_to
    assert address.startswith(RT + ".") and len(address) > len(RT) + 10
    server.basic_publish("", address, b"4", pika.BasicProperties(correlation_id=props.correlation_id))

    def arrived():
        client.connection.process_data_events(time_limit=0.01)
        return replies

    method, reply_props, reply_body = poll_until(arrived)[0]
    assert (reply_body, reply_props.correlation_id) == (b"4", "c-1")
    assert (method.consumer_tag, method.redelivered, method.exchange, method.routing_key) == (
        tag,
        False,
        "",
        address,
    )


def test_reply_to_rewrite_keeps_every_other_property_octet(raw_connect):
    raw, address = consumer_with_address(raw_connect)
    queue = raw.rpc(1, C.Queue.Declare(queue="", exclusive=True), C.Queue.DeclareOk).queue
    props = dict(
        content_type="application/json",
        headers={"i": 5, "big": 1 << 40, "f": 1.5, "s": "x", "l": [1, "a"]},
        delivery_mode=1,
        priority=3,
        correlation_id="cid",
        expiration="60000",
        message_id="mid",
        timestamp=None,
        message_type="t",
        app_id="app",
    )
    publish(raw, queue, props=C.Basic.Properties(reply_to=RT, **props))
    publish(raw, queue, props=C.Basic.Properties(reply_to="someone-else", **props))
    received = [get_one(raw, queue)[1] for _ in range(2)]
    sent = [
        pamqp.header.ContentHeader(0, 1, C.Basic.Properties(reply_to=r, **props)).marshal()[12:]
        for r in ("REPLYTO", "someone-else")
    ]
    assert received[1] == sent[1]  # the broker forwards property octets as published
    assert received[0] == sent[0].replace(b"\x07REPLYTO", bytes([len(address)]) + address.encode())


def test_reply_consumer_must_be_no_ack(channel, channel_error):
    channel_error(
        lambda: channel.basic_consume(RT, lambda *a: None, auto_ack=False),
        406,
        "PRECONDITION_FAILED - reply consumer cannot acknowledge",
    )


def test_publishing_reply_to_without_a_reply_consumer_is_406(channel, channel_error, unique):
    queue = unique("requests")
    channel.queue_declare(queue, auto_delete=True)

    def request():
        channel.basic_publish("", queue, b"x", pika.BasicProperties(reply_to=RT))
        channel.queue_declare(queue, passive=True)  # a round trip, so the close has arrived

    channel_error(request, 406, "PRECONDITION_FAILED - fast reply consumer does not exist")


# ------------------------------------------------------------------------------------------------------
# queue.declare of the pseudo-queue and of addresses
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("passive", [True], ids=["passive"])  # active too: tests/protocol
def test_declare_pseudo_queue_has_one_consumer(raw_connect, passive):
    raw = raw_connect()
    raw.open_channel(1)
    method = C.Queue.Declare(queue=RT, passive=passive, durable=True, exclusive=True)
    ok = raw.rpc(1, method, C.Queue.DeclareOk)
    assert (ok.queue, ok.message_count, ok.consumer_count) == (RT, 0, 1)


def test_declare_live_address_has_one_consumer(raw_connect):
    _consumer, address = consumer_with_address(raw_connect)
    other = raw_connect()
    other.open_channel(1)
    for passive in (True, False):
        ok = other.rpc(1, declare(address, passive=passive, arguments={"x-max-length": 1}), C.Queue.DeclareOk)
        assert (ok.queue, ok.message_count, ok.consumer_count) == (address, 0, 1)
    other.send_frame(1, declare(address, nowait=True))
    other.send_frame(1, C.Queue.Declare(queue=RT, nowait=True))
    assert frames_until_quiet(other) == []


@pytest.mark.parametrize(
    "suffix",
    [".garbage", ".wrong-key"],  # every form: tests/protocol/test_direct_reply_to.py
    ids=["one-part", "wrong-key"],
)
def test_declare_unknown_address_is_404(raw_connect, suffix):
    _consumer, address = consumer_with_address(raw_connect)
    name = RT + suffix if suffix != ".wrong-key" else address[:-4] + "AAA="
    if suffix == "":
        name = RT + "-not"
    other = raw_connect()
    other.open_channel(1)
    other.send_frame(1, declare(name, passive=True))
    close = other.expect_close()
    assert (close.channel, close.reply_code, close.reply_text) == (
        1,
        404,
        f"NOT_FOUND - no queue '{name}' in {VHOST}",
    )
    assert (close.class_id, close.method_id) == (50, 10)


@pytest.mark.parametrize("which", ["live"])  # wrong key, after cancel: tests/protocol
def test_declaring_an_address_of_the_declaring_channel_itself_is_541(raw_connect, which):
    """RabbitMQ's channel asks the channel the address names; asking itself crashes it."""
    raw, address = consumer_with_address(raw_connect)
    if which == "wrong-key":
        address = address[:-4] + "AAA="
    elif which == "after-cancel":
        raw.rpc(1, C.Basic.Cancel(consumer_tag="rc"), C.Basic.CancelOk)
    raw.rpc(1, C.Queue.Declare(queue=RT, passive=True), C.Queue.DeclareOk)  # the pseudo-queue is fine
    raw.send_frame(1, declare(address, passive=True))
    close = raw.expect_close()
    assert (close.channel, close.reply_code, close.reply_text) == (0, 541, "INTERNAL_ERROR")
    assert (close.class_id, close.method_id) == (0, 0)


@pytest.mark.parametrize("method", ["get", "consume-address"])  # purge, bind: tests/protocol
def test_pseudo_queue_is_not_a_real_queue(raw_connect, method):
    raw = raw_connect()
    raw.open_channel(1)
    name, frame, ids = {
        "get": (RT, C.Basic.Get(queue=RT), (60, 70)),
        "purge": (RT, C.Queue.Purge(queue=RT), (50, 30)),
        "bind": (RT, C.Queue.Bind(queue=RT, exchange="amq.direct", routing_key="k"), (50, 20)),
        "consume-address": (RT + ".x", C.Basic.Consume(queue=RT + ".x", no_ack=True), (60, 20)),
    }[method]
    raw.send_frame(1, frame)
    close = raw.expect_close()
    assert (close.reply_code, close.reply_text) == (404, f"NOT_FOUND - no queue '{name}' in {VHOST}")
    assert (close.class_id, close.method_id) == ids


# ------------------------------------------------------------------------------------------------------
# replies
# ------------------------------------------------------------------------------------------------------
def test_mandatory_reply_is_returned_and_delivered_and_acked(raw_connect):
    consumer, address = consumer_with_address(raw_connect)
    sender = confirming_publisher(raw_connect)
    publish(sender, address, b"reply", mandatory=True, props=C.Basic.Properties(correlation_id="c"))
    assert_returned_and_acked(frames_until_quiet(sender), address, b"reply")
    _, deliver = consumer.expect(C.Basic.Deliver)
    assert (deliver.consumer_tag, deliver.redelivered, deliver.exchange, deliver.routing_key) == (
        "rc",
        False,
        "",
        address,
    )
    assert consumer.expect(pamqp.header.ContentHeader)[1].properties.correlation_id == "c"
    assert consumer.expect(pamqp.body.ContentBody)[1].value == b"reply"


def test_reply_uses_the_next_delivery_tag_without_taking_it(raw_connect):
    consumer, address = consumer_with_address(raw_connect)  # its basic.get took delivery tag 1
    queue = consumer.rpc(1, C.Queue.Declare(queue="", exclusive=True), C.Queue.DeclareOk).queue
    sender = raw_connect()
    sender.open_channel(1)
    publish(sender, address, b"r1")
    publish(sender, address, b"r2")
    frames = frames_until_quiet(consumer)
    tags = [(f.consumer_tag, f.delivery_tag) for f in frames if isinstance(f, C.Basic.Deliver)]
    assert tags == [("rc", 2), ("rc", 2)]
    consumer.rpc(1, C.Basic.Consume(queue=queue, consumer_tag="n"), C.Basic.ConsumeOk)
    publish(sender, queue, b"n1")
    _, deliver = consumer.expect(C.Basic.Deliver)
    assert (deliver.consumer_tag, deliver.delivery_tag) == ("n", 2)


@pytest.mark.parametrize("suffix", ["YWJj.x"])  # every form: tests/protocol/test_direct_reply_to.py
@pytest.mark.parametrize("how", ["publish", "declare"])
def test_malformed_two_part_address_closes_the_connection_541(raw_connect, suffix, how):
    raw = raw_connect()
    raw.open_channel(1)
    if how == "publish":
        publish(raw, f"{RT}.{suffix}")
    else:
        raw.send_frame(1, declare(f"{RT}.{suffix}", passive=True))
    close = raw.expect_close()
    assert (close.channel, close.reply_code, close.reply_text) == (0, 541, "INTERNAL_ERROR")
    assert (close.class_id, close.method_id) == (0, 0)


def test_reply_in_a_transaction_is_delivered_at_publish_and_returned_at_commit(raw_connect):
    consumer, address = consumer_with_address(raw_connect)
    sender = raw_connect()
    sender.open_channel(1)
    sender.rpc(1, C.Tx.Select(), C.Tx.SelectOk)
    publish(sender, address, b"tx", mandatory=True)
    assert [f.value for f in frames_until_quiet(consumer) if isinstance(f, pamqp.body.ContentBody)] == [b"tx"]
    assert frames_until_quiet(sender, 0.1) == []
    sender.send_frame(1, C.Tx.Commit())
    frames = frames_until_quiet(sender)
    assert [type(f) for f in frames] == [
        C.Basic.Return,
        pamqp.header.ContentHeader,
        pamqp.body.ContentBody,
        C.Tx.CommitOk,
    ]
    publish(sender, address, b"rolled back")
    sender.rpc(1, C.Tx.Rollback(), C.Tx.RollbackOk)
    assert [f.value for f in frames_until_quiet(consumer) if isinstance(f, pamqp.body.ContentBody)] == [
        b"rolled back"
    ]


@pytest.mark.parametrize("closing", ["connection"])  # channel too: tests/protocol
def test_replies_after_the_consumer_closes_are_dropped(raw_connect, closing):
    consumer, address = consumer_with_address(raw_connect)
    if closing == "channel":
        consumer.rpc(1, C.Channel.Close(200, "done", 0, 0), C.Channel.CloseOk)
    else:
        consumer.rpc(0, C.Connection.Close(200, "done", 0, 0), C.Connection.CloseOk)
    sender = confirming_publisher(raw_connect)
    publish(sender, address, b"late", mandatory=True)
    assert_returned_and_acked(frames_until_quiet(sender), address, b"late")
    sender.send_frame(1, declare(address, passive=True))
    close = sender.expect_close()
    assert (close.reply_code, close.reply_text) == (404, f"NOT_FOUND - no queue '{address}' in {VHOST}")
    if closing == "channel":
        assert frames_until_quiet(consumer) == []
