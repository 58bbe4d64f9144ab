"""Direct reply-to (``amq.rabbitmq.reply-to``) over the mock transport: the pseudo-queue, the rewritten
``reply-to``, replies, and the errors, as RabbitMQ 3.10.8 answers them (a mandatory reply is returned
312 *and* delivered, a reply carries the consumer channel's next delivery tag without using it up, a
reply in a transaction is delivered before the commit, an address naming no channel is a 541).
"""

from __future__ import annotations

import pytest
from pamqp import body as pbody
from pamqp import commands as spec
from pamqp import header as pheader

RT = "amq.rabbitmq.reply-to"
VHOST = "vhost '/'"


class _Declare(spec.Queue.Declare):
    """queue.declare for names pamqp refuses (reply addresses contain ``+``, ``/`` and ``=``)."""

    def validate(self) -> None:
        pass


def declare(queue: str, **kwargs) -> spec.Queue.Declare:
    method = _Declare(queue="placeholder", **kwargs)
    method.queue = queue
    return method


def connected(make_client, channels=(1,)):
    c = make_client()
    c.handshake()
    for number in channels:
        c.open_channel(number)
    return c


def publish(c, routing_key, body=b"x", props=None, mandatory=False, exchange="", channel=1):
    c.publish(channel, exchange, routing_key, body, props or spec.Basic.Properties(), mandatory=mandatory)


def address_of(c, channel=1) -> str:
    """The reply address of ``c``'s channel: publish a request to itself and read its reply-to."""
    queue = c.rpc(channel, spec.Queue.Declare(queue="", exclusive=True), spec.Queue.DeclareOk).queue
    publish(c, queue, props=spec.Basic.Properties(reply_to=RT), channel=channel)
    return c.get(queue, channel)[1].reply_to


def consumer_with_address(make_client, tag="rc"):
    """A connection with a reply consumer on channel 1, and that consumer's address."""
    c = connected(make_client)
    c.rpc(1, spec.Basic.Consume(queue=RT, consumer_tag=tag, no_ack=True), spec.Basic.ConsumeOk)
    return c, address_of(c)


def confirming_publisher(make_client):
    c = connected(make_client)
    c.rpc(1, spec.Confirm.Select(), spec.Confirm.SelectOk)
    return c


def closed(c, channel):
    close = c.expect(spec.Channel.Close if channel else spec.Connection.Close, channel)
    return close.reply_code, close.reply_text, (close.class_id, close.method_id)


def bodies(c):
    return [f.value for _, f in c.frames() if isinstance(f, pbody.ContentBody)]


def assert_returned_and_acked(frames, routing_key, body, seq=1):
    assert [type(f) for f in frames] == [
        spec.Basic.Return,
        pheader.ContentHeader,
        pbody.ContentBody,
        spec.Basic.Ack,
    ]
    ret = frames[0]
    assert (ret.reply_code, ret.reply_text, ret.exchange, ret.routing_key) == (
        312,
        "NO_ROUTE",
        "",
        routing_key,
    )
    assert frames[2].value == body
    assert (frames[3].delivery_tag, frames[3].multiple) == (seq, False)


# -- the reply consumer -----------------------------------------------------------------------------------
def test_an_rpc_round_trip_across_connections(make_client):
    client = connected(make_client)
    client.rpc(1, spec.Basic.Consume(queue=RT, consumer_tag="rc", no_ack=True), spec.Basic.ConsumeOk)
    server = connected(make_client)
    server.rpc(1, spec.Queue.Declare(queue="rpc"), spec.Queue.DeclareOk)
    publish(client, "rpc", b"2+2?", spec.Basic.Properties(reply_to=RT, correlation_id="c-1"))
    _, props, body = server.get("rpc")
    assert (body, props.correlation_id) == (b"2+2?", "c-1")
    address = props.reply_to
    assert address.startswith(RT + ".") and len(address) > len(RT) + 10
    publish(server, address, b"4", spec.Basic.Properties(correlation_id="c-1"))
    deliver, header, reply = [f for _, f in client.frames()]
    assert (reply.value, header.properties.correlation_id) == (b"4", "c-1")
    assert (deliver.consumer_tag, deliver.redelivered, deliver.exchange, deliver.routing_key) == (
        "rc",
        False,
        "",
        address,
    )


def test_the_reply_to_rewrite_keeps_every_other_property_octet(make_client):
    c, address = consumer_with_address(make_client)
    queue = c.rpc(1, spec.Queue.Declare(queue="", exclusive=True), spec.Queue.DeclareOk).queue
    props = dict(
        content_type="application/json",
        headers={"i": 5, "big": 1 << 40, "f": 1.5, "s": "x", "l": [1, "a"]},
        delivery_mode=1,
        priority=3,
        correlation_id="cid",
        expiration="60000",
        message_id="mid",
        message_type="t",
        app_id="app",
    )
    for reply_to in (RT, "someone-else"):
        publish(c, queue, props=spec.Basic.Properties(reply_to=reply_to, **props))
    received = []
    for _ in range(2):
        c.send(1, spec.Basic.Get(queue=queue, no_ack=True))
        raw = bytes(c.transport.buffer)
        c.transport.buffer.clear()
        start = raw.index(b"\x02\x00\x01")  # the content header frame
        size = int.from_bytes(raw[start + 3 : start + 7], "big")
        received.append(raw[start + 7 + 12 : start + 7 + size])  # after class, weight and body size
    sent = [
        pheader.ContentHeader(0, 1, spec.Basic.Properties(reply_to=r, **props)).marshal()[12:]
        for r in ("REPLYTO", "someone-else")
    ]
    assert received[1] == sent[1]  # property octets are forwarded as published
    assert received[0] == sent[0].replace(b"\x07REPLYTO", bytes([len(address)]) + address.encode())


def test_consumer_tag_given_or_generated(make_client):
    c = connected(make_client, (1, 2))
    consume = spec.Basic.Consume(queue=RT, consumer_tag="mine", no_ack=True)
    assert c.rpc(1, consume, spec.Basic.ConsumeOk).consumer_tag == "mine"
    generated = c.rpc(2, spec.Basic.Consume(queue=RT, no_ack=True), spec.Basic.ConsumeOk).consumer_tag
    assert generated.startswith("amq.ctag-") and len(generated) > len("amq.ctag-")


def test_a_nowait_reply_consume_is_not_answered_but_exists(make_client):
    c = connected(make_client)
    c.send(1, spec.Basic.Consume(queue=RT, consumer_tag="quiet", no_ack=True, nowait=True))
    assert c.methods() == []
    c.send(1, spec.Basic.Consume(queue=RT, no_ack=True))
    assert closed(c, 1) == (406, "PRECONDITION_FAILED - reply consumer already set", (60, 20))


def test_a_reply_consumer_must_be_no_ack(client):
    assert client.refused(1, spec.Basic.Consume(queue=RT, no_ack=False)) == (
        406,
        "PRECONDITION_FAILED - reply consumer cannot acknowledge",
        (60, 20),
    )


def test_no_ack_is_checked_before_an_existing_reply_consumer(client):
    client.rpc(1, spec.Basic.Consume(queue=RT, no_ack=True), spec.Basic.ConsumeOk)
    assert client.refused(1, spec.Basic.Consume(queue=RT, no_ack=False))[:2] == (
        406,
        "PRECONDITION_FAILED - reply consumer cannot acknowledge",
    )


def test_reply_consumers_on_two_channels_of_a_connection_are_fine(make_client):
    c = connected(make_client, (1, 2))
    for number in (1, 2):
        c.rpc(number, spec.Basic.Consume(queue=RT, no_ack=True), spec.Basic.ConsumeOk)
    assert address_of(c, 1) != address_of(c, 2)


def test_reusing_an_ordinary_consumer_tag_is_530(client):
    client.rpc(1, spec.Queue.Declare(queue="", exclusive=True), spec.Queue.DeclareOk)
    client.rpc(1, spec.Basic.Consume(queue="", consumer_tag="t1", no_ack=True), spec.Basic.ConsumeOk)
    client.send(1, spec.Basic.Consume(queue=RT, consumer_tag="t1", no_ack=True))
    assert closed(client, 0) == (530, "NOT_ALLOWED - attempt to reuse consumer tag 't1'", (60, 20))


def test_an_ordinary_consumer_may_take_the_reply_tag_and_cancel_hits_the_reply_one_first(make_client):
    c, address = consumer_with_address(make_client, tag="t1")
    queue = c.rpc(1, spec.Queue.Declare(queue="", exclusive=True), spec.Queue.DeclareOk).queue
    c.rpc(1, spec.Basic.Consume(queue=queue, consumer_tag="t1", no_ack=True), spec.Basic.ConsumeOk)
    assert c.rpc(1, spec.Basic.Cancel(consumer_tag="t1"), spec.Basic.CancelOk).consumer_tag == "t1"
    publish(c, queue, b"still consumed")
    deliver = c.expect(spec.Basic.Deliver)
    assert (deliver.consumer_tag, deliver.routing_key) == ("t1", queue)
    c.open_channel(2)
    assert c.refused(2, declare(address, passive=True))[:2] == (
        404,
        f"NOT_FOUND - no queue '{address}' in {VHOST}",
    )


def test_publishing_with_reply_to_and_no_reply_consumer_is_406(client):
    client.rpc(1, spec.Queue.Declare(queue="requests"), spec.Queue.DeclareOk)
    publish(client, "requests", props=spec.Basic.Properties(reply_to=RT))
    assert closed(client, 1) == (406, "PRECONDITION_FAILED - fast reply consumer does not exist", (60, 40))


def test_cancel_ends_the_reply_consumer_and_its_address(make_client):
    c, address = consumer_with_address(make_client, tag="rc")
    assert c.rpc(1, spec.Basic.Cancel(consumer_tag="rc"), spec.Basic.CancelOk).consumer_tag == "rc"
    publish(c, "anywhere", props=spec.Basic.Properties(reply_to=RT))
    assert closed(c, 1) == (406, "PRECONDITION_FAILED - fast reply consumer does not exist", (60, 40))
    sender = confirming_publisher(make_client)
    publish(sender, address, b"late", mandatory=True)
    assert_returned_and_acked([f for _, f in sender.frames()], address, b"late")


def test_a_reply_to_other_than_the_exact_pseudo_queue_is_left_alone(client):
    queue = client.rpc(1, spec.Queue.Declare(queue="", exclusive=True), spec.Queue.DeclareOk).queue
    for reply_to in (RT + ".", RT + "x", "x" + RT):
        publish(client, queue, props=spec.Basic.Properties(reply_to=reply_to))
        assert client.get(queue)[1].reply_to == reply_to


# -- queue.declare of the pseudo-queue and of addresses ---------------------------------------------------
@pytest.mark.parametrize("passive", [True, False], ids=["passive", "active"])
def test_declaring_the_pseudo_queue_shows_one_consumer(client, passive):
    method = spec.Queue.Declare(queue=RT, passive=passive, durable=True, exclusive=True)
    ok = client.rpc(1, method, spec.Queue.DeclareOk)
    assert (ok.queue, ok.message_count, ok.consumer_count) == (RT, 0, 1)


def test_declaring_a_live_address_shows_one_consumer(make_client):
    _, address = consumer_with_address(make_client)
    other = connected(make_client)
    for passive in (True, False):
        method = declare(address, passive=passive, arguments={"x-max-length": 1})
        ok = other.rpc(1, method, spec.Queue.DeclareOk)
        assert (ok.queue, ok.message_count, ok.consumer_count) == (address, 0, 1)
    other.send(1, declare(address, nowait=True))
    other.send(1, spec.Queue.Declare(queue=RT, nowait=True))
    assert other.methods() == []


@pytest.mark.parametrize(
    "name",
    [RT + "-not", RT + "X", RT + ".", RT + ".garbage", RT + ".a.b.c", "wrong-key"],
    ids=["no-dot", "X", "dot", "one-part", "three-parts", "wrong-key"],
)
def test_declaring_an_unknown_address_is_404(make_client, name):
    _, address = consumer_with_address(make_client)
    if name == "wrong-key":
        name = address[:-4] + "AAA="
    other = connected(make_client)
    assert other.refused(1, declare(name, passive=True)) == (
        404,
        f"NOT_FOUND - no queue '{name}' in {VHOST}",
        (50, 10),
    )


def test_declaring_its_own_address_on_another_channel_of_the_connection(make_client):
    c, address = consumer_with_address(make_client)
    c.open_channel(2)
    ok = c.rpc(2, declare(address, passive=True), spec.Queue.DeclareOk)
    assert (ok.queue, ok.message_count, ok.consumer_count) == (address, 0, 1)


@pytest.mark.parametrize("which", ["live", "wrong-key", "after-cancel"])
def test_declaring_an_address_of_the_declaring_channel_itself_is_541(make_client, which):
    """RabbitMQ's channel asks the channel the address names; asking itself crashes it."""
    c, address = consumer_with_address(make_client)
    if which == "wrong-key":
        address = address[:-4] + "AAA="
    elif which == "after-cancel":
        c.rpc(1, spec.Basic.Cancel(consumer_tag="rc"), spec.Basic.CancelOk)
    c.rpc(1, spec.Queue.Declare(queue=RT, passive=True), spec.Queue.DeclareOk)  # the pseudo-queue is fine
    c.send(1, declare(address, passive=True))
    assert closed(c, 0) == (541, "INTERNAL_ERROR", (0, 0))


def test_a_channel_keeps_its_id_across_reply_consumers(make_client):
    c, first = consumer_with_address(make_client)
    c.rpc(1, spec.Basic.Cancel(consumer_tag="rc"), spec.Basic.CancelOk)
    c.rpc(1, spec.Basic.Consume(queue=RT, consumer_tag="rc2", no_ack=True), spec.Basic.ConsumeOk)
    second = address_of(c)
    assert first != second and first.split(".")[-2] == second.split(".")[-2]
    other = connected(make_client)
    assert other.rpc(1, declare(second, passive=True), spec.Queue.DeclareOk).queue == second
    assert other.refused(1, declare(first, passive=True))[:2] == (
        404,
        f"NOT_FOUND - no queue '{first}' in {VHOST}",
    )


def test_consuming_the_last_declared_pseudo_queue_makes_a_reply_consumer(client):
    client.rpc(1, spec.Queue.Declare(queue=RT, passive=True), spec.Queue.DeclareOk)
    client.rpc(1, spec.Basic.Consume(queue="", consumer_tag="via-last", no_ack=True), spec.Basic.ConsumeOk)
    assert address_of(client).startswith(RT + ".")


@pytest.mark.parametrize(
    "name,method,ids",
    [
        (RT, spec.Basic.Get(queue=RT), (60, 70)),
        (RT, spec.Queue.Purge(queue=RT), (50, 30)),
        (RT, spec.Queue.Bind(queue=RT, exchange="amq.direct", routing_key="k"), (50, 20)),
        (RT + ".x", spec.Basic.Consume(queue=RT + ".x", no_ack=True), (60, 20)),
    ],
    ids=["get", "purge", "bind", "consume-address"],
)
def test_the_pseudo_queue_is_not_a_real_queue(client, name, method, ids):
    assert client.refused(1, method) == (404, f"NOT_FOUND - no queue '{name}' in {VHOST}", ids)


# -- replies ----------------------------------------------------------------------------------------------
def test_a_mandatory_reply_is_returned_and_delivered_and_acked(make_client):
    consumer, address = consumer_with_address(make_client)
    sender = confirming_publisher(make_client)
    publish(sender, address, b"reply", spec.Basic.Properties(correlation_id="c"), mandatory=True)
    assert_returned_and_acked([f for _, f in sender.frames()], address, b"reply")
    deliver, header, body = [f for _, f in consumer.frames()]
    assert (deliver.consumer_tag, deliver.redelivered, deliver.exchange, deliver.routing_key) == (
        "rc",
        False,
        "",
        address,
    )
    assert (header.properties.correlation_id, body.value) == ("c", b"reply")


def test_replies_are_confirmed_with_acks(make_client):
    consumer, address = consumer_with_address(make_client)
    sender = confirming_publisher(make_client)
    publish(sender, address, b"r1")
    publish(sender, address, b"r2")
    sender.loop.run_soon()
    confirmed = set()
    for _, ack in sender.frames():
        assert isinstance(ack, spec.Basic.Ack)
        confirmed |= set(range(1, ack.delivery_tag + 1)) if ack.multiple else {ack.delivery_tag}
    assert confirmed == {1, 2}
    assert bodies(consumer) == [b"r1", b"r2"]


def test_a_reply_uses_the_next_delivery_tag_without_taking_it(make_client):
    consumer, address = consumer_with_address(make_client)  # its basic.get took delivery tag 1
    queue = consumer.rpc(1, spec.Queue.Declare(queue="", exclusive=True), spec.Queue.DeclareOk).queue
    sender = connected(make_client)
    publish(sender, address, b"r1")
    publish(sender, address, b"r2")
    tags = [
        (f.consumer_tag, f.delivery_tag) for _, f in consumer.frames() if isinstance(f, spec.Basic.Deliver)
    ]
    assert tags == [("rc", 2), ("rc", 2)]
    consumer.rpc(1, spec.Basic.Consume(queue=queue, consumer_tag="n"), spec.Basic.ConsumeOk)
    publish(sender, queue, b"n1")
    deliver = consumer.expect(spec.Basic.Deliver)
    assert (deliver.consumer_tag, deliver.delivery_tag) == ("n", 2)


def test_replies_to_unknown_addresses_are_returned_and_dropped(make_client):
    consumer, address = consumer_with_address(make_client)
    sender = confirming_publisher(make_client)
    wrong_key = address[:-4] + "AAA="
    for seq, key in enumerate((RT, RT + ".", RT + ".garbage", RT + ".a.b.c", wrong_key), start=1):
        publish(sender, key, b"lost", mandatory=True)
        sender.loop.run_soon()
        assert_returned_and_acked([f for _, f in sender.frames()], key, b"lost", seq)
    assert consumer.frames() == []


@pytest.mark.parametrize("suffix", ["a.b", "YWJj.x", "a..b"])
def test_publishing_to_a_malformed_two_part_address_closes_the_connection_541(client, suffix):
    publish(client, f"{RT}.{suffix}")
    assert closed(client, 0) == (541, "INTERNAL_ERROR", (0, 0))


@pytest.mark.parametrize("suffix", ["a.b", "YWJj.x", "a..b"])
def test_declaring_a_malformed_two_part_address_closes_the_connection_541(client, suffix):
    client.send(1, declare(f"{RT}.{suffix}", passive=True))
    assert closed(client, 0) == (541, "INTERNAL_ERROR", (0, 0))


def test_a_reply_through_another_exchange_is_not_delivered(make_client):
    consumer, address = consumer_with_address(make_client)
    sender = connected(make_client)
    publish(sender, address, b"via amq.direct", exchange="amq.direct", mandatory=True)
    assert sender.expect(spec.Basic.Return).reply_code == 312
    assert consumer.frames() == []


def test_a_cc_header_reaches_the_reply_consumer_once_and_bcc_is_removed(make_client):
    consumer, address = consumer_with_address(make_client)
    sender = connected(make_client)
    publish(sender, "nowhere", b"cc", spec.Basic.Properties(headers={"CC": [address]}))
    both = spec.Basic.Properties(headers={"CC": [address], "BCC": [address]})
    publish(sender, address, b"twice named", both)
    frames = [f for _, f in consumer.frames()]
    delivers = [(f.routing_key, f.exchange) for f in frames if isinstance(f, spec.Basic.Deliver)]
    assert delivers == [("nowhere", ""), (address, "")]
    headers = [f.properties.headers for f in frames if isinstance(f, pheader.ContentHeader)]
    assert headers == [{"CC": [address]}, {"CC": [address]}]


def test_a_reply_in_a_transaction_is_delivered_at_publish_and_returned_at_commit(make_client):
    consumer, address = consumer_with_address(make_client)
    sender = connected(make_client)
    sender.rpc(1, spec.Tx.Select(), spec.Tx.SelectOk)
    publish(sender, address, b"tx", mandatory=True)
    assert bodies(consumer) == [b"tx"]
    assert sender.frames() == []
    sender.send(1, spec.Tx.Commit())
    sender.loop.run_soon()
    assert [type(f) for _, f in sender.frames()] == [
        spec.Basic.Return,
        pheader.ContentHeader,
        pbody.ContentBody,
        spec.Tx.CommitOk,
    ]


def test_a_reply_in_a_rolled_back_transaction_was_delivered_all_the_same(make_client):
    consumer, address = consumer_with_address(make_client)
    sender = connected(make_client)
    sender.rpc(1, spec.Tx.Select(), spec.Tx.SelectOk)
    publish(sender, address, b"rolled back")
    sender.rpc(1, spec.Tx.Rollback(), spec.Tx.RollbackOk)
    assert bodies(consumer) == [b"rolled back"]


@pytest.mark.parametrize("closing", ["channel", "connection"])
def test_replies_after_the_consumer_closes_are_returned_and_the_address_is_gone(make_client, closing):
    consumer, address = consumer_with_address(make_client)
    if closing == "channel":
        consumer.rpc(1, spec.Channel.Close(200, "done", 0, 0), spec.Channel.CloseOk)
    else:
        consumer.rpc(0, spec.Connection.Close(200, "done", 0, 0), spec.Connection.CloseOk)
    sender = confirming_publisher(make_client)
    publish(sender, address, b"late", mandatory=True)
    sender.loop.run_soon()
    assert_returned_and_acked([f for _, f in sender.frames()], address, b"late")
    assert sender.refused(1, declare(address, passive=True))[:2] == (
        404,
        f"NOT_FOUND - no queue '{address}' in {VHOST}",
    )
    assert consumer.frames() == []


def test_any_vhost_may_reply(make_client, add_user):
    add_user("replier", "pw", (".*", ".*", ".*"), vhost="other")
    consumer, address = consumer_with_address(make_client)
    sender = make_client()
    sender.handshake("replier", "pw", vhost="other")
    sender.open_channel(1)
    publish(sender, address, b"cross-vhost")
    assert bodies(consumer) == [b"cross-vhost"]


def test_an_exclusive_reply_consume_is_accepted(client):
    consume = spec.Basic.Consume(queue=RT, consumer_tag="e", no_ack=True, exclusive=True)
    assert client.rpc(1, consume, spec.Basic.ConsumeOk).consumer_tag == "e"


def test_a_nowait_cancel_ends_the_reply_consumer_silently(client):
    client.rpc(1, spec.Basic.Consume(queue=RT, consumer_tag="e", no_ack=True), spec.Basic.ConsumeOk)
    client.send(1, spec.Basic.Cancel(consumer_tag="e", nowait=True))
    assert client.methods() == []
    publish(client, "anywhere", props=spec.Basic.Properties(reply_to=RT))
    assert closed(client, 1)[:2] == (406, "PRECONDITION_FAILED - fast reply consumer does not exist")


def test_the_reply_to_rewrite_applies_through_any_exchange(client):
    client.rpc(1, spec.Basic.Consume(queue=RT, consumer_tag="rc", no_ack=True), spec.Basic.ConsumeOk)
    client.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    client.rpc(1, spec.Queue.Bind(queue="q", exchange="amq.direct", routing_key="k"), spec.Queue.BindOk)
    publish(client, "k", exchange="amq.direct", props=spec.Basic.Properties(reply_to=RT))
    assert client.get("q")[1].reply_to.startswith(RT + ".")


def test_a_channel_may_reply_to_its_own_address(make_client):
    c, address = consumer_with_address(make_client)
    publish(c, address, b"to myself")
    deliver = c.expect(spec.Basic.Deliver)
    assert (deliver.consumer_tag, deliver.routing_key) == ("rc", address)
