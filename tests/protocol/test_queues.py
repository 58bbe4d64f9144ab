"""Queues over the mock transport: naming, declare equivalence, exclusivity, auto-delete, purge and
delete, bindings, the empty-name shortcut and priorities.

Codes and texts are RabbitMQ 3.10's (e2e/test_queues.py keeps one case of each rule against both
brokers)."""

from __future__ import annotations

import re

import pytest
from pamqp import commands as spec

VHOST = "vhost '/'"
DEFAULT_403 = "ACCESS_REFUSED - operation not permitted on the default exchange"
NO_PREVIOUS = "NOT_FOUND - no previously declared queue"


def locked(q: str) -> str:
    return (
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in {VHOST}. "
        "It could be originally declared on another connection or the exclusive property value does not "
        "match that of the original declaration."
    )


def ok(c, method, reply, channel=1):
    c.send(channel, method)
    return c.expect(reply, channel)


def refused(c, method, channel=1):
    """Send ``method``; the broker must close the channel: ``(code, text, (class, method))``."""
    c.send(channel, method)
    close = c.expect(spec.Channel.Close, channel)
    return close.reply_code, close.reply_text, (close.class_id, close.method_id)


def reopen(c, channel=1):
    c.send(channel, spec.Channel.CloseOk())
    c.open_channel(channel)


def declare(c, name, channel=1, **kw):
    return ok(c, spec.Queue.Declare(queue=name, **kw), spec.Queue.DeclareOk, channel)


def exists(c, name, channel=9):
    """Passive declare on a spare channel: True, or False on 404 (the channel is reopened)."""
    c.open_channel(channel)
    c.send(channel, spec.Queue.Declare(queue=name, passive=True))
    frames = [f for _, f in c.methods()]
    if isinstance(frames[0], spec.Queue.DeclareOk):
        ok(c, spec.Channel.Close(200, "", 0, 0), spec.Channel.CloseOk, channel)
        return True
    assert frames[0].reply_code == 404, frames
    c.send(channel, spec.Channel.CloseOk())
    return False


def get(c, queue, no_ack=True, channel=1):
    """basic.get: ``(get-ok, body)`` or None when empty."""
    c.send(channel, spec.Basic.Get(queue=queue, no_ack=no_ack))
    frames = [f for _, f in c.methods()]
    if isinstance(frames[0], spec.Basic.GetEmpty):
        return None
    assert isinstance(frames[0], spec.Basic.GetOk), frames
    return frames[0], frames[2].value if len(frames) > 2 else b""


def drain(c, queue, channel=1):
    bodies = []
    while (got := get(c, queue, channel=channel)) is not None:
        bodies.append(got[1])
    return bodies


def publish(c, queue, *bodies, exchange="", priority=None):
    for body in bodies:
        c.publish(1, exchange, queue, body, spec.Basic.Properties(priority=priority))


def connected(make_client):
    c = make_client()
    c.handshake()
    c.open_channel(1)
    return c


# -- declare ----------------------------------------------------------------------------------------------
def test_server_named_queue_is_amq_gen_and_unique(client):
    first = declare(client, "", exclusive=True)
    assert re.fullmatch(r"amq\.gen-[A-Za-z0-9_-]{22}", first.queue), first.queue
    assert (first.message_count, first.consumer_count) == (0, 0)
    assert declare(client, "", exclusive=True).queue != first.queue


def test_passive_declare_reports_ready_messages(client):
    declare(client, "q")
    publish(client, "q", b"m0", b"m1", b"m2")
    got = declare(client, "q", passive=True)
    assert (got.queue, got.message_count, got.consumer_count) == ("q", 3, 0)


def test_active_redeclare_reports_counts_too(client):
    declare(client, "q")
    publish(client, "q", b"m")
    ok(client, spec.Basic.Consume(queue="q", consumer_tag="c"), spec.Basic.ConsumeOk)
    got = declare(client, "q")
    assert (got.message_count, got.consumer_count) == (0, 1)


def test_declare_with_the_reserved_amq_prefix_is_403(client):
    assert refused(client, spec.Queue.Declare(queue="amq.myqueue")) == (
        403,
        "ACCESS_REFUSED - queue name 'amq.myqueue' contains reserved prefix 'amq.*'",
        (50, 10),
    )


def test_passive_declare_of_a_missing_queue_is_404_and_the_connection_survives(client):
    assert refused(client, spec.Queue.Declare(queue="missing", passive=True)) == (
        404,
        f"NOT_FOUND - no queue 'missing' in {VHOST}",
        (50, 10),
    )
    reopen(client)
    declare(client, "q")


@pytest.mark.parametrize(
    "first,second,arg,received,current",
    [
        ({"durable": False}, {"durable": True}, "durable", "true", "false"),
        ({"durable": True}, {"durable": False}, "durable", "false", "true"),
        ({"auto_delete": False}, {"auto_delete": True}, "auto_delete", "true", "false"),
        ({"auto_delete": True}, {"auto_delete": False}, "auto_delete", "false", "true"),
    ],
)
def test_redeclare_with_other_flags_is_406(client, first, second, arg, received, current):
    declare(client, "q", **first)
    assert refused(client, spec.Queue.Declare(queue="q", **second)) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for queue 'q' in {VHOST}: "
        f"received '{received}' but current is '{current}'",
        (50, 10),
    )


@pytest.mark.parametrize("first", [True, False], ids=["exclusive-first", "shared-first"])
def test_redeclare_with_another_exclusive_flag_on_the_same_connection_is_405(client, first):
    declare(client, "q", exclusive=first, auto_delete=True)
    assert refused(client, spec.Queue.Declare(queue="q", exclusive=not first, auto_delete=True)) == (
        405,
        locked("q"),
        (50, 10),
    )


def test_redeclare_with_another_argument_value_is_406(client):
    declare(client, "q", arguments={"x-max-priority": 5})
    assert refused(client, spec.Queue.Declare(queue="q", arguments={"x-max-priority": 9}))[:2] == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-priority' for queue 'q' in {VHOST}: "
        "received '9' but current is '5'",
    )


def test_redeclare_without_an_argument_is_406_naming_its_type(client):
    # pamqp encodes 100000 as a signed 32-bit int ('I'): RabbitMQ names the AMQP type
    declare(client, "q", arguments={"x-max-length": 100000})
    assert refused(client, spec.Queue.Declare(queue="q"))[:2] == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in {VHOST}: "
        "received none but current is the value '100000' of type 'signedint'",
    )


def test_redeclare_adding_a_checked_argument_is_406(client):
    declare(client, "q")
    assert refused(client, spec.Queue.Declare(queue="q", arguments={"x-max-length": 100000}))[:2] == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in {VHOST}: "
        "received the value '100000' of type 'signedint' but current is none",
    )


def test_redeclare_with_the_same_value_as_another_type_is_406(client):
    declare(client, "q", arguments={"x-max-length": 100000})
    assert refused(client, spec.Queue.Declare(queue="q", arguments={"x-max-length": "100000"}))[:2] == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in {VHOST}: "
        "received '100000' but current is '100000'",
    )


def test_redeclare_adding_an_unknown_argument_is_fine(client):
    declare(client, "q")
    declare(client, "q", arguments={"x-foo": 5})


def test_a_reply_text_over_255_bytes_is_cut_to_252_and_dots(client):
    name = "long." + "x" * 240
    code, text, _ = refused(client, spec.Queue.Declare(queue=name, passive=True))
    full = f"NOT_FOUND - no queue '{name}' in {VHOST}"
    assert code == 404 and text == full[:252] + "..."


def test_passive_declare_ignores_the_flags(client):
    declare(client, "q", exclusive=True)
    declare(client, "q", passive=True, durable=True, auto_delete=True)


@pytest.mark.parametrize(
    "value,term",
    [
        (256, "{max_value_exceeded,256}"),
        (-1, "{value_negative,-1}"),
        ("5", '"expected integer, got longstr"'),
    ],
    ids=["too-big", "negative", "string"],
)
def test_invalid_x_max_priority_is_406(client, value, term):
    assert refused(client, spec.Queue.Declare(queue="q", arguments={"x-max-priority": value})) == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'q' in {VHOST}: {term}",
        (50, 10),
    )


# -- exclusive / auto-delete ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "method,ids",
    [
        (spec.Queue.Declare(queue="ex", exclusive=True), (50, 10)),
        (spec.Queue.Declare(queue="ex"), (50, 10)),
        (spec.Queue.Declare(queue="ex", passive=True), (50, 10)),
        (spec.Basic.Get(queue="ex"), (60, 70)),
        (spec.Basic.Consume(queue="ex"), (60, 20)),
        (spec.Queue.Purge(queue="ex"), (50, 30)),
        (spec.Queue.Delete(queue="ex"), (50, 40)),
        (spec.Queue.Bind(queue="ex", exchange="amq.fanout"), (50, 20)),
    ],
    ids=["declare-exclusive", "declare", "passive", "get", "consume", "purge", "delete", "bind"],
)
def test_another_connections_exclusive_queue_is_locked_405(make_client, method, ids):
    owner, other = connected(make_client), connected(make_client)
    declare(owner, "ex", exclusive=True)
    assert refused(other, method) == (405, locked("ex"), ids)
    publish(owner, "ex", b"still-mine")
    assert drain(owner, "ex") == [b"still-mine"]


def test_exclusive_queue_goes_when_its_connection_closes(make_client):
    owner, watcher = connected(make_client), connected(make_client)
    declare(owner, "ex", exclusive=True)
    ok(owner, spec.Connection.Close(200, "", 0, 0), spec.Connection.CloseOk, 0)
    assert not exists(watcher, "ex")


def test_exclusive_queue_goes_when_the_socket_drops(make_client):
    owner, watcher = connected(make_client), connected(make_client)
    declare(owner, "ex", exclusive=True)
    owner.transport.close()
    assert not exists(watcher, "ex")


def test_exclusive_queue_outlives_the_channel_that_declared_it(client):
    client.open_channel(2)
    declare(client, "ex", channel=2, exclusive=True)
    ok(client, spec.Channel.Close(200, "", 0, 0), spec.Channel.CloseOk, 2)
    assert exists(client, "ex")


def test_auto_delete_queue_goes_after_its_last_consumer_cancels(client):
    declare(client, "ad", auto_delete=True)
    for tag in ("c1", "c2"):
        ok(client, spec.Basic.Consume(queue="ad", consumer_tag=tag), spec.Basic.ConsumeOk)
    ok(client, spec.Basic.Cancel(consumer_tag="c1"), spec.Basic.CancelOk)
    assert exists(client, "ad")
    ok(client, spec.Basic.Cancel(consumer_tag="c2"), spec.Basic.CancelOk)
    assert not exists(client, "ad")


def test_auto_delete_queue_without_consumers_stays(client):
    declare(client, "ad", auto_delete=True)
    publish(client, "ad", b"m")
    assert get(client, "ad") is not None
    assert exists(client, "ad")


def test_auto_delete_queue_goes_when_its_consumers_channel_closes(client):
    declare(client, "ad", auto_delete=True)
    client.open_channel(2)
    ok(client, spec.Basic.Consume(queue="ad"), spec.Basic.ConsumeOk, 2)
    ok(client, spec.Channel.Close(200, "", 0, 0), spec.Channel.CloseOk, 2)
    assert not exists(client, "ad")


def test_deleting_a_consumed_queue_cancels_its_consumer(client):
    declare(client, "q")
    ok(client, spec.Basic.Consume(queue="q", consumer_tag="ct"), spec.Basic.ConsumeOk)
    client.send(1, spec.Queue.Delete(queue="q"))
    frames = [f for _, f in client.methods()]
    cancel = next(f for f in frames if isinstance(f, spec.Basic.Cancel))
    assert (cancel.consumer_tag, cancel.nowait) == ("ct", True)
    assert any(isinstance(f, spec.Queue.DeleteOk) for f in frames)


# -- purge / delete ---------------------------------------------------------------------------------------
def test_purge_returns_the_count_and_empties_the_queue(client):
    declare(client, "q")
    publish(client, "q", *[b"m%d" % i for i in range(5)])
    assert ok(client, spec.Queue.Purge(queue="q"), spec.Queue.PurgeOk).message_count == 5
    assert ok(client, spec.Queue.Purge(queue="q"), spec.Queue.PurgeOk).message_count == 0
    assert drain(client, "q") == []


def test_purge_keeps_unacked_messages(client):
    declare(client, "q")
    publish(client, "q", b"m0", b"m1", b"m2")
    got_ok, _ = get(client, "q", no_ack=False)
    assert ok(client, spec.Queue.Purge(queue="q"), spec.Queue.PurgeOk).message_count == 2
    client.send(1, spec.Basic.Reject(delivery_tag=got_ok.delivery_tag, requeue=True))
    assert drain(client, "q") == [b"m0"]


def test_purge_of_a_missing_queue_is_404(client):
    assert refused(client, spec.Queue.Purge(queue="missing")) == (
        404,
        f"NOT_FOUND - no queue 'missing' in {VHOST}",
        (50, 30),
    )


def test_delete_returns_the_ready_count(client):
    declare(client, "q")
    publish(client, "q", b"m0", b"m1", b"m2", b"m3")
    assert ok(client, spec.Queue.Delete(queue="q"), spec.Queue.DeleteOk).message_count == 4
    assert not exists(client, "q")


def test_delete_count_leaves_out_unacked_messages(client):
    declare(client, "q")
    publish(client, "q", b"m0", b"m1", b"m2")
    get(client, "q", no_ack=False)
    assert ok(client, spec.Queue.Delete(queue="q"), spec.Queue.DeleteOk).message_count == 2


def test_deleting_a_missing_queue_is_ok_with_0(client):
    assert ok(client, spec.Queue.Delete(queue="missing"), spec.Queue.DeleteOk).message_count == 0


def test_delete_if_empty_refuses_a_queue_with_messages_406(client):
    declare(client, "q")
    publish(client, "q", b"m")
    assert refused(client, spec.Queue.Delete(queue="q", if_empty=True)) == (
        406,
        f"PRECONDITION_FAILED - queue 'q' in {VHOST} not empty",
        (50, 40),
    )
    reopen(client)
    ok(client, spec.Queue.Purge(queue="q"), spec.Queue.PurgeOk)
    assert ok(client, spec.Queue.Delete(queue="q", if_empty=True), spec.Queue.DeleteOk).message_count == 0


def test_delete_if_unused_refuses_a_consumed_queue_406(client):
    declare(client, "q")
    ok(client, spec.Basic.Consume(queue="q", consumer_tag="c"), spec.Basic.ConsumeOk)
    client.open_channel(2)
    assert refused(client, spec.Queue.Delete(queue="q", if_unused=True), 2) == (
        406,
        f"PRECONDITION_FAILED - queue 'q' in {VHOST} in use",
        (50, 40),
    )
    ok(client, spec.Basic.Cancel(consumer_tag="c"), spec.Basic.CancelOk)
    ok(client, spec.Queue.Delete(queue="q", if_unused=True), spec.Queue.DeleteOk)
    assert not exists(client, "q")


def test_deleting_a_queue_removes_its_bindings(client):
    ok(client, spec.Exchange.Declare(exchange="x", exchange_type="fanout"), spec.Exchange.DeclareOk)
    declare(client, "q")
    ok(client, spec.Queue.Bind(queue="q", exchange="x"), spec.Queue.BindOk)
    ok(client, spec.Queue.Delete(queue="q"), spec.Queue.DeleteOk)
    declare(client, "q")
    publish(client, "", b"m", exchange="x")
    assert drain(client, "q") == []


# -- bindings ---------------------------------------------------------------------------------------------
def _direct(c, name="x"):
    ok(c, spec.Exchange.Declare(exchange=name, exchange_type="direct"), spec.Exchange.DeclareOk)


def test_bind_is_idempotent_and_unbind_stops_routing(client):
    _direct(client)
    declare(client, "q")
    ok(client, spec.Queue.Bind(queue="q", exchange="x", routing_key="k"), spec.Queue.BindOk)
    ok(client, spec.Queue.Bind(queue="q", exchange="x", routing_key="k"), spec.Queue.BindOk)
    publish(client, "k", b"bound", exchange="x")
    assert drain(client, "q") == [b"bound"]
    ok(client, spec.Queue.Unbind(queue="q", exchange="x", routing_key="k"), spec.Queue.UnbindOk)
    publish(client, "k", b"unbound", exchange="x")
    assert drain(client, "q") == []


def test_a_binding_with_arguments_is_a_distinct_binding(client):
    _direct(client)
    declare(client, "q")
    ok(
        client,
        spec.Queue.Bind(queue="q", exchange="x", routing_key="k", arguments={"a": 1}),
        spec.Queue.BindOk,
    )
    ok(client, spec.Queue.Bind(queue="q", exchange="x", routing_key="k"), spec.Queue.BindOk)
    ok(client, spec.Queue.Unbind(queue="q", exchange="x", routing_key="k"), spec.Queue.UnbindOk)
    publish(client, "k", b"still-bound", exchange="x")
    assert drain(client, "q") == [b"still-bound"]


@pytest.mark.parametrize(
    "queue,exchange",
    [
        ("q", "x"),
        ("q", "no-exchange"),
        ("no-queue", "x"),
        ("no-queue", "no-exchange"),
        ("no-queue", "amq.default"),
    ],
    ids=["no-binding", "no-exchange", "no-queue", "neither", "amq.default-is-just-a-name"],
)
def test_unbinding_what_does_not_exist_is_ok(client, queue, exchange):
    _direct(client)
    declare(client, "q")
    ok(
        client,
        spec.Queue.Unbind(queue=queue, exchange=exchange, routing_key="never-bound"),
        spec.Queue.UnbindOk,
    )


@pytest.mark.parametrize("queue", ["q", "missing"])
def test_unbind_from_the_default_exchange_is_403_whether_or_not_the_queue_exists(client, queue):
    declare(client, "q")
    assert refused(client, spec.Queue.Unbind(queue=queue, exchange="", routing_key=queue)) == (
        403,
        DEFAULT_403,
        (50, 50),
    )


def test_unbind_with_an_empty_queue_name_and_none_declared_is_404(client):
    _direct(client)
    assert refused(client, spec.Queue.Unbind(queue="", exchange="x", routing_key="k")) == (
        404,
        NO_PREVIOUS,
        (50, 50),
    )


def test_unbind_empty_queue_and_key_mean_the_last_declared_queue(client):
    _direct(client)
    declare(client, "q")
    ok(client, spec.Queue.Bind(queue="q", exchange="x", routing_key="q"), spec.Queue.BindOk)
    ok(client, spec.Queue.Unbind(queue="", exchange="x", routing_key=""), spec.Queue.UnbindOk)
    publish(client, "q", b"unbound", exchange="x")
    assert drain(client, "q") == []


def test_unbind_of_another_connections_exclusive_queue_is_405_only_if_bound(make_client):
    owner, other = connected(make_client), connected(make_client)
    _direct(owner)
    declare(owner, "q", exclusive=True)
    ok(owner, spec.Queue.Bind(queue="q", exchange="x", routing_key="k"), spec.Queue.BindOk)
    ok(other, spec.Queue.Unbind(queue="q", exchange="x", routing_key="not-bound"), spec.Queue.UnbindOk)
    ok(other, spec.Queue.Unbind(queue="q", exchange="no-exchange", routing_key="k"), spec.Queue.UnbindOk)
    assert refused(other, spec.Queue.Unbind(queue="q", exchange="x", routing_key="k")) == (
        405,
        locked("q"),
        (50, 50),
    )
    publish(owner, "k", b"still-bound", exchange="x")
    assert drain(owner, "q") == [b"still-bound"]


def test_bind_to_a_missing_exchange_is_404(client):
    declare(client, "q")
    assert refused(client, spec.Queue.Bind(queue="q", exchange="missing", routing_key="k")) == (
        404,
        f"NOT_FOUND - no exchange 'missing' in {VHOST}",
        (50, 20),
    )


def test_bind_of_a_missing_queue_is_404(client):
    assert refused(client, spec.Queue.Bind(queue="missing", exchange="amq.direct", routing_key="k")) == (
        404,
        f"NOT_FOUND - no queue 'missing' in {VHOST}",
        (50, 20),
    )


# -- the empty queue name: the channel's last declared queue ----------------------------------------------
def test_empty_names_mean_the_last_declared_queue_for_bind_get_and_purge(client):
    q = declare(client, "", exclusive=True).queue
    ok(client, spec.Queue.Bind(queue="", exchange="amq.direct", routing_key=""), spec.Queue.BindOk)
    publish(client, q, b"via-shortcut", exchange="amq.direct")
    got_ok, body = get(client, "")
    assert (got_ok.routing_key, body) == (q, b"via-shortcut")
    assert ok(client, spec.Queue.Purge(queue=""), spec.Queue.PurgeOk).message_count == 0


def test_empty_name_for_consume_means_the_last_declared_queue(client):
    q = declare(client, "", exclusive=True).queue
    ok(client, spec.Basic.Consume(queue="", consumer_tag="c", no_ack=True), spec.Basic.ConsumeOk)
    publish(client, q, b"m")
    deliver = client.expect(spec.Basic.Deliver)
    assert (deliver.consumer_tag, deliver.routing_key) == ("c", q)


def test_the_last_declared_queue_is_per_channel(client):
    declare(client, "q")
    client.open_channel(2)
    assert refused(client, spec.Basic.Get(queue=""), 2)[:2] == (404, NO_PREVIOUS)


@pytest.mark.parametrize(
    "method,ids",
    [
        (spec.Basic.Get(queue=""), (60, 70)),
        (spec.Basic.Consume(queue=""), (60, 20)),
        (spec.Queue.Purge(queue=""), (50, 30)),
        (spec.Queue.Bind(queue="", exchange="amq.direct", routing_key="k"), (50, 20)),
    ],
    ids=["get", "consume", "purge", "bind"],
)
def test_empty_queue_name_without_a_declared_queue_is_404(client, method, ids):
    assert refused(client, method) == (404, NO_PREVIOUS, ids)


def test_consume_on_a_missing_queue_is_404(client):
    assert refused(client, spec.Basic.Consume(queue="missing")) == (
        404,
        f"NOT_FOUND - no queue 'missing' in {VHOST}",
        (60, 20),
    )


# -- priorities -------------------------------------------------------------------------------------------
def test_max_priority_orders_by_priority_then_fifo(client):
    declare(client, "prio", arguments={"x-max-priority": 5})
    sent = [
        (None, "n1"),
        (1, "p1a"),
        (5, "p5a"),
        (3, "p3"),
        (9, "p9-capped"),
        (1, "p1b"),
        (0, "p0"),
        (5, "p5b"),
    ]
    for prio, body in sent + [(None, "n2")]:
        publish(client, "prio", body.encode(), priority=prio)
    # above x-max-priority counts as the maximum; no priority counts as 0
    assert drain(client, "prio") == [b"p5a", b"p9-capped", b"p5b", b"p3", b"p1a", b"p1b", b"n1", b"p0", b"n2"]


def test_a_queue_without_max_priority_ignores_priorities(client):
    declare(client, "fifo")
    for prio, body in [(1, b"a"), (9, b"b"), (5, b"c")]:
        publish(client, "fifo", body, priority=prio)
    assert drain(client, "fifo") == [b"a", b"b", b"c"]


def test_a_requeued_message_goes_back_to_the_head_of_its_priority(client):
    declare(client, "prio", arguments={"x-max-priority": 5})
    publish(client, "prio", b"low", priority=1)
    publish(client, "prio", b"high-1", priority=5)
    publish(client, "prio", b"high-2", priority=5)
    got_ok, body = get(client, "prio", no_ack=False)
    assert body == b"high-1"
    client.send(1, spec.Basic.Reject(delivery_tag=got_ok.delivery_tag, requeue=True))
    assert drain(client, "prio") == [b"high-1", b"high-2", b"low"]


@pytest.mark.parametrize("first_exclusive", [False, True], ids=["existing-consumer", "exclusive-consumer"])
def test_an_exclusive_consumer_excludes_every_other_403(client, first_exclusive):
    declare(client, "q")
    ok(
        client,
        spec.Basic.Consume(queue="q", consumer_tag="a", exclusive=first_exclusive),
        spec.Basic.ConsumeOk,
    )
    assert refused(
        client, spec.Basic.Consume(queue="q", consumer_tag="b", exclusive=not first_exclusive)
    ) == (
        403,
        f"ACCESS_REFUSED - queue 'q' in {VHOST} in exclusive use",
        (60, 20),
    )


def test_closing_the_connection_requeues_its_unacked_messages(make_client):
    owner, other = connected(make_client), connected(make_client)
    declare(owner, "q")
    publish(owner, "q", b"m")
    assert get(owner, "q", no_ack=False) is not None
    ok(owner, spec.Connection.Close(200, "bye", 0, 0), spec.Connection.CloseOk, 0)
    got_ok, body = get(other, "q")
    assert (body, got_ok.redelivered) == (b"m", True)


def test_a_passive_declare_of_the_empty_name_is_404_even_after_a_declare(client):
    # the empty-name shortcut does not apply: RabbitMQ looks up a queue called ''
    assert refused(client, spec.Queue.Declare(queue="", passive=True)) == (
        404,
        f"NOT_FOUND - no queue '' in {VHOST}",
        (50, 10),
    )
    reopen(client)
    declare(client, "q")
    assert refused(client, spec.Queue.Declare(queue="", passive=True))[:2] == (
        404,
        f"NOT_FOUND - no queue '' in {VHOST}",
    )


def test_declare_ok_counts_ready_messages_only(client):
    declare(client, "q")
    publish(client, "q", b"m0", b"m1", b"m2")
    got_ok, _ = get(client, "q", no_ack=False)
    assert got_ok.message_count == 2
    assert declare(client, "q", passive=True).message_count == 2


def test_amq_queue_names_are_only_refused_on_creation(client):
    assert refused(client, spec.Queue.Declare(queue="amq.nonexistent", passive=True))[:2] == (
        404,
        f"NOT_FOUND - no queue 'amq.nonexistent' in {VHOST}",
    )
    reopen(client)
    assert ok(client, spec.Queue.Delete(queue="amq.nonexistent"), spec.Queue.DeleteOk).message_count == 0


@pytest.mark.parametrize("give_back", ["close", "nack", "reject", "recover"])
def test_a_requeued_message_goes_back_into_its_own_priority_band(client, give_back):
    """Requeued into its own priority level (at that level's front): a newer message of a higher
    priority still comes first."""
    client.rpc(1, spec.Queue.Declare(queue="pq", arguments={"x-max-priority": 2}), spec.Queue.DeclareOk)
    for body, priority in ((b"low", 0), (b"mid-old", 1)):
        client.publish(1, "", "pq", body, spec.Basic.Properties(priority=priority))
    client.open_channel(2)
    got = client.get("pq", channel=2, no_ack=False)
    assert got is not None and got[2] == b"mid-old"
    tag = got[0].delivery_tag
    give = {
        "close": spec.Channel.Close(200, "", 0, 0),
        "nack": spec.Basic.Nack(delivery_tag=tag, requeue=True),
        "reject": spec.Basic.Reject(delivery_tag=tag, requeue=True),
        "recover": spec.Basic.Recover(requeue=True),
    }[give_back]
    client.send(2, give)
    client.methods()
    for body, priority in ((b"mid-new", 1), (b"high", 2)):
        client.publish(1, "", "pq", body, spec.Basic.Properties(priority=priority))
    assert client.drain("pq") == [b"high", b"mid-old", b"mid-new", b"low"]
