"""Queue expiry (``x-expires``) with fake time: validation, what counts as use, what happens to the
messages.

RabbitMQ 3.10's rules: "unused" means no consumers and no ``basic.get`` / ``queue.declare`` for the
period; each of those restarts it, publishing does not, unacknowledged messages do not keep the queue;
while it has consumers it never expires and the period starts again when the last one goes; the
messages of an expired queue are discarded, never dead-lettered. Whether a queue still exists is probed
with a mandatory publish (an unroutable one comes back as ``basic.return``): the one operation that
does not restart the period.
"""

from __future__ import annotations

import pytest
from pamqp import commands as spec

VHOST = "vhost '/'"


def declare(c, name, channel=1, **arguments):
    return c.rpc(channel, spec.Queue.Declare(queue=name, arguments=arguments or None), spec.Queue.DeclareOk)


def alive(c, queue) -> bool:
    """A mandatory publish on channel 9: False when it comes back unroutable."""
    if not getattr(c, "probing", False):
        c.open_channel(9)
        c.probing = True
    c.publish(9, "", queue, b"probe", mandatory=True)
    return not any(isinstance(f, spec.Basic.Return) for _, f in c.frames())


@pytest.mark.parametrize(
    "value, term",
    [
        (0, "{value_zero,0}"),
        (-1, "{value_negative,-1}"),
        ("100", '"expected integer, got longstr"'),
        (315360000001, "{value_too_large,315360000001}"),
    ],
    ids=["zero", "negative", "string", "too-large"],
)
def test_invalid_x_expires_is_406(client, value, term):
    assert client.refused(1, spec.Queue.Declare(queue="q", arguments={"x-expires": value})) == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-expires' for queue 'q' in {VHOST}: {term}",
        (50, 10),
    )


def test_an_unused_queue_is_deleted_after_exactly_the_period(client, loop):
    declare(client, "q", **{"x-expires": 200})
    loop.advance(0.199)
    assert alive(client, "q")
    loop.advance(0.001)
    assert not alive(client, "q")


def test_publishing_does_not_keep_a_queue(client, loop):
    declare(client, "q", **{"x-expires": 300})
    for _ in range(5):
        loop.advance(0.05)
        client.publish(1, "", "q", b"m")
    loop.advance(0.05)
    assert not alive(client, "q")


@pytest.mark.parametrize(
    "touch",
    [
        spec.Basic.Get(queue="q", no_ack=True),
        spec.Queue.Declare(queue="q", passive=True),
        spec.Queue.Declare(queue="q", arguments={"x-expires": 500}),
    ],
    ids=["basic.get", "passive-declare", "declare"],
)
def test_get_and_declares_restart_the_period(client, loop, touch):
    declare(client, "q", **{"x-expires": 500})
    loop.advance(0.4)
    client.send(1, touch)
    loop.advance(0.499)
    assert alive(client, "q")
    loop.advance(0.001)
    assert not alive(client, "q")


def test_a_consumer_keeps_the_queue_and_its_cancel_restarts_the_period(client, loop):
    declare(client, "q", **{"x-expires": 100})
    client.rpc(1, spec.Basic.Consume(queue="q", consumer_tag="c"), spec.Basic.ConsumeOk)
    loop.advance(0.35)
    assert alive(client, "q")
    client.rpc(1, spec.Basic.Cancel(consumer_tag="c"), spec.Basic.CancelOk)
    loop.advance(0.099)
    assert alive(client, "q")
    loop.advance(0.001)
    assert not alive(client, "q")


def test_unacked_messages_do_not_keep_the_queue(client, loop):
    declare(client, "q", **{"x-expires": 150})
    client.publish(1, "", "q", b"m")
    assert client.get("q", no_ack=False) is not None
    loop.advance(0.15)
    assert not alive(client, "q")


def test_the_messages_of_an_expired_queue_are_not_dead_lettered(client, loop):
    declare(client, "dlq")
    args = {"x-expires": 150, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    declare(client, "q", **args)
    for i in range(3):
        client.publish(1, "", "q", b"m%d" % i)
    loop.advance(0.15)
    assert not alive(client, "q")
    assert client.drain("dlq") == []


def test_an_expired_queue_can_be_declared_again_empty_and_unbound(client, loop):
    client.rpc(1, spec.Exchange.Declare(exchange="x", exchange_type="fanout"), spec.Exchange.DeclareOk)
    declare(client, "q", **{"x-expires": 100})
    client.rpc(1, spec.Queue.Bind(queue="q", exchange="x"), spec.Queue.BindOk)
    client.publish(1, "", "q", b"old")
    loop.advance(0.1)
    assert declare(client, "q", **{"x-expires": 5000}).message_count == 0
    client.publish(1, "x", "", b"via the old binding")
    assert client.drain("q") == []


def test_redeclaring_with_another_x_expires_is_406(client):
    declare(client, "q", **{"x-expires": 1000})
    assert client.refused(1, spec.Queue.Declare(queue="q", arguments={"x-expires": 2000})) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-expires' for queue 'q' in {VHOST}: "
        "received '2000' but current is '1000'",
        (50, 10),
    )
