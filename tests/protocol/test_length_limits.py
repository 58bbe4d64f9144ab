"""Queue length limits over the mock transport: ``x-max-length``, ``x-max-length-bytes`` and the three
``x-overflow`` modes, with the confirms, returns and dead letters a client sees.

RabbitMQ 3.10's rules: only ready messages count and ``x-max-length-bytes`` counts body bytes only;
``drop-head`` (the default) drops from the head, dead-lettered as ``maxlen`` with a DLX; ``reject-publish``
refuses the new message (a confirming publisher gets ``basic.nack``, never dead-lettered);
``reject-publish-dlx`` nacks and dead-letters it.
"""

from __future__ import annotations

import pytest
from pamqp import commands as spec

VHOST = "vhost '/'"


def declare(c, name, **arguments):
    return c.rpc(1, spec.Queue.Declare(queue=name, arguments=arguments or None), spec.Queue.DeclareOk)


def with_dlq(c, name="q", **arguments):
    declare(c, "dlq")
    declare(c, name, **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq", **arguments})
    return name, "dlq"


def confirming(c):
    c.rpc(1, spec.Confirm.Select(), spec.Confirm.SelectOk)


def publish_all(c, queue, bodies, exchange="", **props):
    """Publish each body; on a confirming channel: ``ack``/``nack`` per message, in order."""
    outcomes = []
    for body in bodies:
        c.publish(1, exchange, queue, body, spec.Basic.Properties(**props))
        c.loop.run_soon()
        confirms = [f for _, f in c.frames() if isinstance(f, (spec.Basic.Ack, spec.Basic.Nack))]
        outcomes += ["ack" if isinstance(f, spec.Basic.Ack) else "nack" for f in confirms]
    return outcomes


def dead(c, dlq="dlq"):
    """Every dead letter now in ``dlq``: ``(body, [(queue, reason, count), ...])``."""
    out = []
    while (got := c.get(dlq)) is not None:
        out.append((got[2], [(d["queue"], d["reason"], d["count"]) for d in got[1].headers["x-death"]]))
    return out


def count(c, queue):
    return c.rpc(1, spec.Queue.Declare(queue=queue, passive=True), spec.Queue.DeclareOk).message_count


# -- validation -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arguments, term",
    [
        ({"x-max-length": -1}, "{value_negative,-1}"),
        ({"x-max-length": "1"}, '"expected integer, got longstr"'),
        ({"x-max-length-bytes": -1}, "{value_negative,-1}"),
        ({"x-max-length-bytes": "1"}, '"expected integer, got longstr"'),
        ({"x-overflow": "bogus"}, "invalid_overflow"),
        ({"x-overflow": 100000}, "{unacceptable_type,signedint}"),
    ],
    ids=[
        "max-length-negative",
        "max-length-string",
        "max-length-bytes-negative",
        "max-length-bytes-string",
        "overflow-bogus",
        "overflow-int",
    ],
)
def test_invalid_length_arguments_are_406(client, arguments, term):
    (key,) = arguments
    assert client.refused(1, spec.Queue.Declare(queue="q", arguments=arguments)) == (
        406,
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue 'q' in {VHOST}: {term}",
        (50, 10),
    )


# -- drop-head --------------------------------------------------------------------------------------------
def test_max_length_drops_the_head_and_still_acks(client):
    declare(client, "q", **{"x-max-length": 2})
    confirming(client)
    assert publish_all(client, "q", [b"1", b"2", b"3"]) == ["ack"] * 3
    assert client.drain("q") == [b"2", b"3"]


def test_drop_head_dead_letters_the_head_as_maxlen(client):
    q, dlq = with_dlq(client, **{"x-max-length": 2, "x-overflow": "drop-head"})
    publish_all(client, q, [b"1", b"2", b"3", b"4"], expiration="60000")
    assert client.drain(q) == [b"3", b"4"]
    letters = []
    while (got := client.get(dlq)) is not None:
        props = got[1]
        assert props.expiration is None
        assert props.headers["x-death"][0]["original-expiration"] == "60000"
        letters.append((got[2], props.headers["x-death"][0]["reason"], props.headers["x-first-death-reason"]))
    assert letters == [(b"1", "maxlen", "maxlen"), (b"2", "maxlen", "maxlen")]


def test_max_length_bytes_counts_body_bytes_only(client):
    q, dlq = with_dlq(client, **{"x-max-length-bytes": 10})
    big_headers = {"h": "x" * 500}
    publish_all(client, q, [b"aaaa", b"bbbb", b"cc"], headers=big_headers)
    assert dead(client) == []  # exactly 10 bytes: fits
    publish_all(client, q, [b"d"], headers=big_headers)
    assert client.drain(q) == [b"bbbb", b"cc", b"d"]
    assert dead(client) == [(b"aaaa", [(q, "maxlen", 1)])]


def test_a_message_bigger_than_max_length_bytes_pushes_everything_out(client):
    q, dlq = with_dlq(client, **{"x-max-length-bytes": 5})
    publish_all(client, q, [b"abc", b"0123456789"])
    assert client.drain(q) == []
    assert [body for body, _ in dead(client)] == [b"abc", b"0123456789"]


def test_max_length_zero_dead_letters_every_message_and_acks_it(client):
    q, dlq = with_dlq(client, **{"x-max-length": 0})
    confirming(client)
    assert publish_all(client, q, [b"z"]) == ["ack"]
    assert client.drain(q) == []
    assert dead(client) == [(b"z", [(q, "maxlen", 1)])]


def test_unacked_messages_do_not_count_and_a_requeue_into_a_full_queue_drops_itself(client):
    q, dlq = with_dlq(client, **{"x-max-length": 1})
    publish_all(client, q, [b"A"])
    got_ok, _, _ = client.get(q, no_ack=False)
    publish_all(client, q, [b"B"])  # A is out for delivery: B fits
    assert count(client, q) == 1
    assert dead(client) == []
    # requeued at the head of a full queue, A is the head that drop-head drops
    client.send(1, spec.Basic.Nack(delivery_tag=got_ok.delivery_tag, requeue=True))
    assert dead(client) == [(b"A", [(q, "maxlen", 1)])]
    assert client.drain(q) == [b"B"]


# -- reject-publish / reject-publish-dlx ------------------------------------------------------------------
def test_reject_publish_nacks_the_confirming_publisher_and_never_dead_letters(client):
    q, dlq = with_dlq(client, **{"x-max-length": 1, "x-overflow": "reject-publish"})
    confirming(client)
    assert publish_all(client, q, [b"1", b"2", b"3"]) == ["ack", "nack", "nack"]
    assert client.drain(q) == [b"1"]
    assert dead(client) == []


def test_reject_publish_counts_bytes_too(client):
    declare(client, "q", **{"x-max-length-bytes": 5, "x-overflow": "reject-publish"})
    confirming(client)
    assert publish_all(client, "q", [b"abc", b"de", b"f"]) == ["ack", "ack", "nack"]
    assert client.drain("q") == [b"abc", b"de"]


def test_reject_publish_without_confirms_drops_silently(client):
    declare(client, "q", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    publish_all(client, "q", [b"1", b"2"])
    assert client.methods() == []  # nobody is told
    assert client.drain("q") == [b"1"]


def test_reject_publish_makes_room_again_after_consuming(client):
    declare(client, "q", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    confirming(client)
    assert publish_all(client, "q", [b"1", b"2"]) == ["ack", "nack"]
    assert client.drain("q") == [b"1"]
    assert publish_all(client, "q", [b"3"]) == ["ack"]


def test_one_full_queue_nacks_even_when_another_queue_took_the_message(client):
    client.rpc(1, spec.Exchange.Declare(exchange="fan", exchange_type="fanout"), spec.Exchange.DeclareOk)
    declare(client, "full", **{"x-max-length": 0, "x-overflow": "reject-publish"})
    declare(client, "room")
    for q in ("full", "room"):
        client.rpc(1, spec.Queue.Bind(queue=q, exchange="fan"), spec.Queue.BindOk)
    confirming(client)
    assert publish_all(client, "", [b"m"], exchange="fan") == ["nack"]
    assert client.drain("room") == [b"m"]
    assert client.drain("full") == []


def test_a_mandatory_publish_refused_by_a_full_queue_is_not_returned(client):
    declare(client, "q", **{"x-max-length": 0, "x-overflow": "reject-publish"})
    confirming(client)
    client.publish(1, "", "q", b"m", mandatory=True)
    client.loop.run_soon()
    frames = [f for _, f in client.frames()]
    assert not any(isinstance(f, spec.Basic.Return) for f in frames)
    assert [type(f) for f in frames] == [spec.Basic.Nack]


def test_reject_publish_dlx_nacks_and_dead_letters_the_new_message(client):
    q, dlq = with_dlq(client, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    confirming(client)
    assert publish_all(client, q, [b"1", b"2"]) == ["ack", "nack"]
    assert client.drain(q) == [b"1"]
    assert dead(client) == [(b"2", [(q, "maxlen", 1)])]


def test_reject_publish_dlx_without_a_dlx_just_nacks(client):
    declare(client, "q", **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    confirming(client)
    assert publish_all(client, "q", [b"1", b"2"]) == ["ack", "nack"]
    assert client.drain("q") == [b"1"]


@pytest.mark.parametrize("overflow", ["reject-publish", "reject-publish-dlx"])
def test_a_full_rejecting_queue_nacks_even_with_a_consumer_waiting(client, overflow):
    declare(client, "q", **{"x-max-length": 0, "x-overflow": overflow})
    client.rpc(1, spec.Basic.Consume(queue="q", consumer_tag="c", no_ack=True), spec.Basic.ConsumeOk)
    confirming(client)
    assert publish_all(client, "q", [b"m"]) == ["nack"]
    assert not [f for _, f in client.frames() if isinstance(f, spec.Basic.Deliver)]
