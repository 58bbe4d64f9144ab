"""Consumer timeouts over the mock transport with fake time: a delivery not acknowledged in time closes
its channel with RabbitMQ's 406 (class/method 0/0) and requeues its messages.

The node-wide timeout (``OTTERMQ_CONSUMER_TIMEOUT``, RabbitMQ's ``consumer_timeout``), the queue's
``x-consumer-timeout`` and the policy key ``consumer-timeout`` (RabbitMQ 3.12's); the lowest applies.
The checker runs every second and stamps a delivery at the first check after it, so a channel is
closed no earlier than the timeout and no later than two checks after it (RabbitMQ checks once a
minute).
"""

from __future__ import annotations

import pytest
from pamqp import commands as spec

TEXT = (
    "PRECONDITION_FAILED - delivery acknowledgement on channel {} timed out. Timeout value used: {} ms. "
    "This timeout value can be configured, see consumers doc guide to learn more"
)
LATE = 2.0  # two checks: the latest a channel may be closed after its timeout


@pytest.fixture
def settings(settings, request):
    """The node-wide timeout (s): 2, or ``@pytest.mark.parametrize("settings", [s], indirect=True)``."""
    return settings.model_copy(update={"consumer_timeout": getattr(request, "param", 2.0)})


@pytest.fixture
def c(client, consumer_timeouts):
    return client


def hold(c, queue="q", channel=1, **arguments):
    """Declare ``queue``, publish one message and consume it on ``channel`` without acking."""
    c.rpc(channel, spec.Queue.Declare(queue=queue, arguments=arguments or None), spec.Queue.DeclareOk)
    c.publish(channel, "", queue, b"slow")
    c.send(channel, spec.Basic.Consume(queue=queue, consumer_tag="c"))
    assert [type(f) for _, f in c.methods()][:2] == [spec.Basic.ConsumeOk, spec.Basic.Deliver]


def closed_after(c, loop, seconds, channel=1):
    """Advance ``seconds``: the Channel.Close then sent on ``channel``, or None."""
    loop.advance(seconds)
    closes = [f for ch, f in c.methods() if ch == channel and isinstance(f, spec.Channel.Close)]
    return (
        (closes[0].reply_code, closes[0].reply_text, (closes[0].class_id, closes[0].method_id))
        if closes
        else None
    )


def test_the_node_timeout_closes_the_channel_406_naming_no_method(c, loop):
    hold(c)
    assert closed_after(c, loop, 1.99) is None
    assert closed_after(c, loop, 0.01 + LATE) == (406, TEXT.format(1, 2000), (0, 0))


def test_the_timed_out_delivery_is_requeued_redelivered(c, loop):
    hold(c)
    closed_after(c, loop, 2 + LATE)
    c.open_channel(2)
    got_ok, _, body = c.get("q", channel=2)
    assert (body, got_ok.redelivered) == (b"slow", True)


def test_the_text_names_the_channel_and_other_channels_carry_on(c, loop):
    c.open_channel(2)
    hold(c, channel=2)
    assert closed_after(c, loop, 2 + LATE, channel=2)[1] == TEXT.format(2, 2000)
    c.rpc(1, spec.Queue.Declare(queue="q", passive=True), spec.Queue.DeclareOk)


def test_an_unacked_basic_get_times_out_too(c, loop):
    c.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    c.publish(1, "", "q", b"m")
    c.get("q", no_ack=False)
    assert closed_after(c, loop, 2 + LATE)[0] == 406


def test_acking_in_time_keeps_the_channel(c, loop):
    c.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    for _ in range(4):
        c.publish(1, "", "q", b"m")
        got_ok, _, _ = c.get("q", no_ack=False)
        loop.advance(1.5)
        c.send(1, spec.Basic.Ack(delivery_tag=got_ok.delivery_tag))
    assert closed_after(c, loop, 5) is None


def test_no_ack_deliveries_never_time_out(c, loop):
    c.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    c.rpc(1, spec.Basic.Consume(queue="q", no_ack=True), spec.Basic.ConsumeOk)
    c.publish(1, "", "q", b"m")
    assert closed_after(c, loop, 10) is None


@pytest.mark.parametrize("settings", [0], indirect=True)
def test_no_timeout_when_the_node_timeout_is_off(c, loop):
    hold(c)
    assert closed_after(c, loop, 3600) is None


@pytest.mark.parametrize("settings", [0], indirect=True)
def test_the_queue_argument_sets_a_timeout(c, loop):
    hold(c, **{"x-consumer-timeout": 1000})
    assert closed_after(c, loop, 0.99) is None
    assert closed_after(c, loop, 0.01 + LATE)[1] == TEXT.format(1, 1000)


def test_the_lower_of_node_and_queue_timeouts_wins(c, loop):
    hold(c, **{"x-consumer-timeout": 5000})
    assert closed_after(c, loop, 2 + LATE)[1] == TEXT.format(1, 2000)


@pytest.mark.parametrize("settings", [3600], indirect=True)
def test_a_policy_sets_a_timeout_and_the_lower_wins(c, loop, set_policy):
    set_policy("ct", "^ct\\.pol$", {"consumer-timeout": 1500}, "queues")
    hold(c, "ct.pol")
    assert closed_after(c, loop, 1.49) is None
    assert closed_after(c, loop, 0.01 + LATE)[1] == TEXT.format(1, 1500)


def test_only_the_oldest_unacked_delivery_counts(c, loop):
    c.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    c.publish(1, "", "q", b"m1")
    first, _, _ = c.get("q", no_ack=False)
    loop.advance(1.5)
    c.publish(1, "", "q", b"m2")
    c.get("q", no_ack=False)
    c.send(1, spec.Basic.Ack(delivery_tag=first.delivery_tag))  # m2, 0 s old, is the oldest now
    assert closed_after(c, loop, 1.99) is None
    assert closed_after(c, loop, LATE)[0] == 406


def test_a_requeue_settles_the_delivery(c, loop):
    c.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    c.publish(1, "", "q", b"m")
    got_ok, _, _ = c.get("q", no_ack=False)
    loop.advance(1.5)
    c.send(1, spec.Basic.Nack(delivery_tag=got_ok.delivery_tag, requeue=True))
    assert closed_after(c, loop, 5) is None
