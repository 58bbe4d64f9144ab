"""Channel behaviour over a mock transport: publish/get/consume/ack, errors, confirms, tx."""

from __future__ import annotations

from pamqp import body as pbody
from pamqp import commands as spec
from pamqp import header as pheader


def declare(c, name, **kw):
    c.send(1, spec.Queue.Declare(queue=name, **kw))
    return c.expect(spec.Queue.DeclareOk)


def test_publish_then_get_keeps_property_bytes(client):
    declare(client, "q")
    props = spec.Basic.Properties(content_type="text/plain", headers={"a": 1, "b": "x"}, message_id="m1")
    client.publish(1, "", "q", b"hello", props)
    client.send(1, spec.Basic.Get(queue="q", no_ack=True))
    frames = client.frames()
    get_ok = frames[0][1]
    assert isinstance(get_ok, spec.Basic.GetOk) and get_ok.message_count == 0
    header = frames[1][1]
    assert isinstance(header, pheader.ContentHeader)
    assert header.properties.headers == {"a": 1, "b": "x"} and header.properties.message_id == "m1"
    assert frames[2][1].value == b"hello"


def test_get_empty(client):
    declare(client, "q")
    client.send(1, spec.Basic.Get(queue="q"))
    client.expect(spec.Basic.GetEmpty)


def test_missing_queue_closes_channel_404(client):
    client.send(1, spec.Basic.Get(queue="nope"))
    close = client.expect(spec.Channel.Close, 1)
    assert (close.reply_code, close.reply_text) == (404, "NOT_FOUND - no queue 'nope' in vhost '/'")
    assert (close.class_id, close.method_id) == (60, 70)
    # frames after the close are ignored until Close-Ok
    client.send(1, spec.Queue.Declare(queue="x"))
    assert client.methods() == []
    client.send(1, spec.Channel.CloseOk())
    client.open_channel(1)


def test_consume_round_robin_and_ack(make_client):
    c = make_client()
    c.handshake()
    c.open_channel(1)
    declare(c, "q")
    c.send(1, spec.Basic.Qos(prefetch_count=1))
    c.expect(spec.Basic.QosOk)
    c.send(1, spec.Basic.Consume(queue="q", consumer_tag="c1"))
    c.expect(spec.Basic.ConsumeOk)
    for i in range(3):
        c.publish(1, "", "q", b"m%d" % i)
    delivers = [f for _, f in c.frames() if isinstance(f, spec.Basic.Deliver)]
    assert [d.delivery_tag for d in delivers] == [1]  # prefetch 1
    c.send(1, spec.Basic.Ack(delivery_tag=1))
    delivers = [f for _, f in c.frames() if isinstance(f, spec.Basic.Deliver)]
    assert [d.delivery_tag for d in delivers] == [2]


def test_unknown_delivery_tag_is_406(client):
    client.send(1, spec.Basic.Ack(delivery_tag=99))
    close = client.expect(spec.Channel.Close, 1)
    assert (close.reply_code, close.reply_text) == (406, "PRECONDITION_FAILED - unknown delivery tag 99")


def test_reject_requeue_restores_position_and_sets_redelivered(client):
    declare(client, "q")
    for i in range(3):
        client.publish(1, "", "q", b"m%d" % i)
    client.send(1, spec.Basic.Get(queue="q"))
    first = client.expect(spec.Basic.GetOk)
    client.send(1, spec.Basic.Reject(delivery_tag=first.delivery_tag, requeue=True))
    client.send(1, spec.Basic.Get(queue="q", no_ack=True))
    frames = client.frames()
    assert frames[0][1].redelivered is True
    assert frames[2][1].value == b"m0"


def test_mandatory_unroutable_returns_312_before_confirm(client):
    client.send(1, spec.Confirm.Select())
    client.expect(spec.Confirm.SelectOk)
    client.publish(1, "", "nowhere", b"x", mandatory=True)
    methods = [f for _, f in client.frames() if isinstance(f, (spec.Basic.Return, spec.Basic.Ack))]
    assert isinstance(methods[0], spec.Basic.Return) and methods[0].reply_code == 312
    assert isinstance(methods[1], spec.Basic.Ack) and methods[1].delivery_tag == 1


def test_tx_publish_visible_only_after_commit(client):
    declare(client, "q")
    client.send(1, spec.Tx.Select())
    client.expect(spec.Tx.SelectOk)
    client.publish(1, "", "q", b"x")
    client.send(1, spec.Queue.Declare(queue="q", passive=True))
    assert client.expect(spec.Queue.DeclareOk).message_count == 0
    client.send(1, spec.Tx.Commit())
    client.expect(spec.Tx.CommitOk)
    client.send(1, spec.Queue.Declare(queue="q", passive=True))
    assert client.expect(spec.Queue.DeclareOk).message_count == 1


def test_channel_close_requeues_unacked(client):
    declare(client, "q")
    client.publish(1, "", "q", b"x")
    client.send(1, spec.Basic.Get(queue="q"))
    client.expect(spec.Basic.GetOk)
    client.send(1, spec.Channel.Close(200, "", 0, 0))
    client.expect(spec.Channel.CloseOk)
    client.open_channel(2)
    client.send(2, spec.Queue.Declare(queue="q", passive=True))
    assert client.expect(spec.Queue.DeclareOk).message_count == 1


def test_channel_flow_active_true_is_answered(client):
    client.send(1, spec.Channel.Flow(active=True))
    assert client.expect(spec.Channel.FlowOk).active is True


def test_channel_flow_active_false_is_not_implemented_540(client):
    # RabbitMQ 3.x: rabbit_channel refuses active=false; 540 is a hard error
    client.send(1, spec.Channel.Flow(active=False))
    close = client.expect(spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - active=false")
    assert (close.class_id, close.method_id) == (20, 20)


def test_prefetch_size_is_not_implemented_540(client):
    client.send(1, spec.Basic.Qos(prefetch_size=1000))
    close = client.expect(spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - prefetch_size!=0 (1000)")


def _consume_with_prefetch(make_client, product: str, first: int, then: int) -> int:
    """Deliveries a live consumer gets after basic.qos(global=False) is raised from first to then."""
    c = make_client()
    c.send_raw(b"AMQP\x00\x00\x09\x01")
    c.send(
        0,
        spec.Connection.StartOk(
            client_properties={"product": product}, mechanism="PLAIN", response="\0guest\0guest"
        ),
    )
    c.send(
        0,
        spec.Connection.TuneOk(channel_max=10, frame_max=131072, heartbeat=0),
        spec.Connection.Open(virtual_host="/"),
    )
    c.open_channel(1)
    declare(c, "pq")
    c.send(1, spec.Basic.Qos(prefetch_count=first))
    c.send(1, spec.Basic.Consume(queue="pq"))
    for i in range(5):
        c.publish(1, "", "pq", b"%d" % i)
    c.frames()
    c.send(1, spec.Basic.Qos(prefetch_count=then))
    return first + len([f for _, f in c.frames() if isinstance(f, spec.Basic.Deliver)])


def test_qos_global_false_is_per_consumer_as_rabbitmq(make_client):
    # RabbitMQ: a new per-consumer limit does not apply to an existing consumer
    assert _consume_with_prefetch(make_client, "pika", 1, 3) == 1


def test_qos_global_false_is_channel_wide_for_kombu(make_client):
    # kombu assumes the AMQP spec's meaning from any broker not named RabbitMQ (Celery's ETA tasks
    # raise the prefetch of a live consumer this way)
    assert _consume_with_prefetch(make_client, "py-amqp", 1, 3) == 3


def _confirm_frames(client) -> list[tuple[str, int, bool]]:
    return [
        (type(f).__name__, f.delivery_tag, f.multiple)
        for _, f in client.frames()
        if isinstance(f, (spec.Basic.Ack, spec.Basic.Nack))
    ]


def _publish_many(client, routing_key: str, count: int, persistent: bool = False) -> None:
    props = spec.Basic.Properties(delivery_mode=2 if persistent else 1)
    frames = []
    for i in range(count):
        body = f"m{i}".encode()
        frames += [
            spec.Basic.Publish(exchange="", routing_key=routing_key),
            pheader.ContentHeader(0, len(body), props),
            pbody.ContentBody(body),
        ]
    client.send(1, *frames)  # one data_received: one loop turn


def test_confirms_settled_in_one_turn_are_one_multiple_ack(client):
    declare(client, "cq")
    client.send(1, spec.Confirm.Select())
    client.expect(spec.Confirm.SelectOk)
    _publish_many(client, "cq", 20)
    assert _confirm_frames(client) == [("Ack", 20, True)]


def test_persistent_confirms_wait_for_the_commit_then_coalesce(client, loop):
    client.send(1, spec.Queue.Declare(queue="dq", durable=True))
    client.expect(spec.Queue.DeclareOk)
    client.send(1, spec.Confirm.Select())
    client.expect(spec.Confirm.SelectOk)
    _publish_many(client, "dq", 10, persistent=True)
    loop.run_soon()
    assert _confirm_frames(client) == [("Ack", 10, True)]


def test_a_reject_publish_nack_splits_the_acks(client):
    args = {"x-max-length": 2, "x-overflow": "reject-publish"}
    client.send(1, spec.Queue.Declare(queue="full", arguments=args))
    client.expect(spec.Queue.DeclareOk)
    client.send(1, spec.Confirm.Select())
    client.expect(spec.Confirm.SelectOk)
    _publish_many(client, "full", 4)
    # 1 and 2 fit, 3 and 4 are refused: acks first (RabbitMQ's order), then the nacks, one by one
    # because the acks of the same turn are their barrier (rabbit_channel:send_nacks)
    assert _confirm_frames(client) == [("Ack", 2, True), ("Nack", 3, False), ("Nack", 4, False)]


# -- failures reach the client (a store batch that fails, as on a full disk) ----------------------
def _durable_confirming(client, name: str, **args) -> None:
    client.send(1, spec.Queue.Declare(queue=name, durable=True, arguments=args or None))
    client.expect(spec.Queue.DeclareOk)
    client.send(1, spec.Confirm.Select())
    client.expect(spec.Confirm.SelectOk)


def _ready(client, name: str) -> int:
    client.send(1, spec.Queue.Declare(queue=name, passive=True))
    return client.expect(spec.Queue.DeclareOk).message_count


def test_failed_store_commit_nacks_and_withdraws_the_message(client, broker, loop):
    _durable_confirming(client, "fq")
    broker.services.store.fail_batches = 1
    _publish_many(client, "fq", 3, persistent=True)
    loop.run_soon()
    assert _confirm_frames(client) == [("Nack", 3, True)]
    assert _ready(client, "fq") == 0  # memory agrees with the store: nothing was written
    _publish_many(client, "fq", 1, persistent=True)
    loop.run_soon()
    assert _confirm_frames(client) == [("Ack", 4, False)]
    assert _ready(client, "fq") == 1


def test_failed_store_commit_leaves_a_delivered_message_with_its_consumer(client, broker, loop):
    _durable_confirming(client, "fq2")
    client.send(1, spec.Basic.Consume(queue="fq2", consumer_tag="c"))
    client.expect(spec.Basic.ConsumeOk)
    broker.services.store.fail_batches = 1
    _publish_many(client, "fq2", 1, persistent=True)
    loop.run_soon()
    frames = client.frames()
    assert [type(f).__name__ for _, f in frames if isinstance(f, (spec.Basic.Deliver, spec.Basic.Nack))] == [
        "Deliver",
        "Nack",
    ]


def test_failed_store_commit_fails_the_transaction_406(client, broker, loop):
    client.send(1, spec.Queue.Declare(queue="tq", durable=True))
    client.expect(spec.Queue.DeclareOk)
    client.send(1, spec.Tx.Select())
    client.expect(spec.Tx.SelectOk)
    _publish_many(client, "tq", 2, persistent=True)
    broker.services.store.fail_batches = 1
    client.send(1, spec.Tx.Commit())
    loop.run_soon()
    close = client.expect(spec.Channel.Close)
    assert (close.reply_code, close.reply_text) == (406, "PRECONDITION_FAILED - partial tx completion")
    assert (close.class_id, close.method_id) == (90, 20)
    client.send(1, spec.Channel.CloseOk())
    client.open_channel(1)
    assert _ready(client, "tq") == 0


def test_tx_with_a_refused_publish_is_406_partial_completion(client):
    args = {"x-max-length": 1, "x-overflow": "reject-publish"}
    client.send(1, spec.Queue.Declare(queue="txfull", arguments=args))
    client.expect(spec.Queue.DeclareOk)
    client.send(1, spec.Tx.Select())
    client.expect(spec.Tx.SelectOk)
    _publish_many(client, "txfull", 2)
    client.send(1, spec.Tx.Commit())
    close = client.expect(spec.Channel.Close)
    assert (close.reply_code, close.reply_text) == (406, "PRECONDITION_FAILED - partial tx completion")
    assert (close.class_id, close.method_id) == (90, 20)
    client.send(1, spec.Channel.CloseOk())
    client.open_channel(1)
    assert _ready(client, "txfull") == 1  # what fit stays, as in RabbitMQ
