"""Message TTL over the mock transport with fake time (``loop.advance``): validation, the effective
TTL, head-only expiry, deadlines across delivery and requeue, TTL 0, and what ``basic.get``, a delivery,
an overflow, purge and delete do with expired messages behind the head.

RabbitMQ 3.10's rules (``rabbit_amqqueue_process``: ``calculate_msg_expiry``, ``drop_expired_msgs``):
a deadline is fixed at enqueue as ``min(x-message-ttl, expiration)`` and kept across requeues; only the
head is watched, but every operation that changes the head drops the expired messages it exposes;
declare-ok, purge-ok and delete-ok run no such check. Deadlines here are exact: one millisecond early
nothing happens, on the millisecond the message goes.
"""

from __future__ import annotations

import struct
from decimal import Decimal

import pytest
from pamqp import commands as spec

from .conftest import EPOCH_MS

VHOST = "vhost '/'"


def declare(c, name, channel=1, **arguments):
    method = spec.Queue.Declare(queue=name, arguments=arguments or None)
    return c.rpc(channel, method, spec.Queue.DeclareOk)


def with_dlq(c, name="work", **arguments):
    """A DLQ and a queue dead-lettering into it through the default exchange."""
    declare(c, "dlq")
    declare(c, name, **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq", **arguments})
    return name, "dlq"


def publish(c, queue, body, expiration=None, **props):
    c.publish(1, "", queue, body, spec.Basic.Properties(expiration=expiration, **props))


def count(c, queue):
    return c.rpc(1, spec.Queue.Declare(queue=queue, passive=True), spec.Queue.DeclareOk).message_count


def publish_with_expiration(c, queue, expiration):
    """basic.publish whose header carries exactly this ``expiration`` (pamqp leaves out an empty one)."""
    c.send(1, spec.Basic.Publish(exchange="", routing_key=queue))
    raw = expiration.encode()
    payload = struct.pack(">HHQH", 60, 0, 1, 0x0100) + bytes([len(raw)]) + raw
    c.send_raw(
        struct.pack(">BHI", 2, 1, len(payload)) + payload + b"\xce" + b"\x03\x00\x01\x00\x00\x00\x01m\xce"
    )


def dead(c, dlq="dlq"):
    """Every dead letter now in ``dlq``: ``(body, (queue, reason, count))``."""
    out = []
    while (got := c.get(dlq)) is not None:
        death = got[1].headers["x-death"][0]
        out.append((got[2], (death["queue"], death["reason"], death["count"])))
    return out


# -- validation -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "expiration, term",
    [
        ("-1", "{value_negative,-1}"),
        ("abc", "no_integer"),
        ("1.5", '{leftover_string,".5"}'),
        (" 5", "no_integer"),
        ("5 ", '{leftover_string," "}'),
        ("315360000001", "{value_too_large,315360000001}"),
        ("", "no_integer"),
    ],
    ids=["negative", "non-numeric", "fractional", "leading-space", "trailing-space", "too-large", "empty"],
)
def test_invalid_expiration_closes_the_channel_at_the_publish_406(client, expiration, term):
    declare(client, "q")
    publish_with_expiration(client, "q", expiration)
    close = client.expect(spec.Channel.Close, 1)
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        406,
        f"PRECONDITION_FAILED - invalid expiration '{expiration}': {term}",
        60,
        40,
    )


def test_an_invalid_expiration_is_refused_even_when_unroutable(client):
    publish(client, "nowhere", b"m", "abc")
    assert client.expect(spec.Channel.Close, 1).reply_code == 406


@pytest.mark.parametrize("expiration", ["007", "+60000", "315360000000"])
def test_unusual_but_valid_expirations_are_forwarded_verbatim(client, expiration):
    declare(client, "q")
    publish(client, "q", b"m", expiration)
    _, props, body = client.get("q")
    assert (body, props.expiration) == (b"m", expiration)


def test_a_leading_plus_counts_as_the_number(client, loop):
    q, dlq = with_dlq(client)
    publish(client, q, b"m", "+100")
    loop.advance(0.099)
    assert dead(client) == []
    loop.advance(0.001)
    assert dead(client) == [(b"m", (q, "expired", 1))]


@pytest.mark.parametrize(
    "value, term",
    [
        (-1, "{value_negative,-1}"),
        ("100", '"expected integer, got longstr"'),
        (Decimal("1.5"), '"expected integer, got decimal"'),
        (315360000001, "{value_too_large,315360000001}"),
    ],
    ids=["negative", "string", "decimal", "too-large"],
)
def test_invalid_x_message_ttl_is_406_at_declare(client, value, term):
    method = spec.Queue.Declare(queue="q", arguments={"x-message-ttl": value})
    assert client.refused(1, method) == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in {VHOST}: {term}",
        (50, 10),
    )


# -- the effective TTL and when the head expires ----------------------------------------------------------
@pytest.mark.parametrize(
    "queue_ttl, expiration", [(100, "10000"), (10000, "100")], ids=["queue-ttl-lower", "expiration-lower"]
)
def test_the_lower_of_queue_ttl_and_expiration_wins(client, loop, queue_ttl, expiration):
    q, dlq = with_dlq(client, **{"x-message-ttl": queue_ttl})
    publish(client, q, b"m", expiration)
    loop.advance(0.099)
    assert dead(client) == []
    loop.advance(0.001)
    _, props, body = client.get(dlq)
    assert body == b"m" and props.expiration is None
    death = props.headers["x-death"][0]
    assert (death["queue"], death["reason"], death["original-expiration"]) == (q, "expired", expiration)


def test_the_head_expires_on_time_without_a_consumer(client, loop):
    q, dlq = with_dlq(client, **{"x-message-ttl": 200})
    publish(client, q, b"m")
    loop.advance(0.199)
    assert count(client, q) == 1
    loop.advance(0.001)
    _, props, _ = client.get(dlq)
    assert "original-expiration" not in props.headers["x-death"][0]  # the queue's TTL, not the message's
    assert client.drain(q) == []


def test_a_short_ttl_behind_a_longer_head_waits_for_the_head(client, loop):
    q, dlq = with_dlq(client)
    publish(client, q, b"long", "1000")
    publish(client, q, b"short", "50")
    loop.advance(0.999)
    assert dead(client) == []  # "short" is long past its deadline, but not at the head
    loop.advance(0.001)
    assert [body for body, _ in dead(client)] == [b"long", b"short"]


def test_exact_ttl_expires_every_message_at_its_own_deadline(client, loop):
    """ottermq's ``x-ottermq-exact-ttl`` (an extension)."""
    q, dlq = with_dlq(client, **{"x-ottermq-exact-ttl": True})
    publish(client, q, b"long", "10000")
    publish(client, q, b"short", "50")
    loop.advance(0.05)
    assert dead(client) == [(b"short", (q, "expired", 1))]
    assert count(client, q) == 1


def test_expired_messages_without_a_dlx_are_dropped(client, loop):
    declare(client, "q", **{"x-message-ttl": 50})
    for i in range(3):
        publish(client, "q", b"m%d" % i)
    loop.advance(0.05)
    assert count(client, "q") == 0


def test_queue_ttl_expires_messages_in_publish_order(client, loop):
    q, dlq = with_dlq(client, **{"x-message-ttl": 100})
    publish(client, q, b"first")
    loop.advance(0.05)
    publish(client, q, b"second")
    loop.advance(0.05)
    assert [body for body, _ in dead(client)] == [b"first"]
    loop.advance(0.05)
    assert [body for body, _ in dead(client)] == [b"second"]


def test_the_dead_letter_carries_rabbitmqs_x_death(client, loop):
    """The classic work queue: x-message-ttl plus a DLX; the DLQ's consumer reads x-death."""
    client.rpc(1, spec.Exchange.Declare(exchange="dlx", exchange_type="direct"), spec.Exchange.DeclareOk)
    declare(client, "dlq")
    client.rpc(1, spec.Queue.Bind(queue="dlq", exchange="dlx", routing_key="work"), spec.Queue.BindOk)
    declare(client, "work", **{"x-message-ttl": 200, "x-dead-letter-exchange": "dlx"})
    client.rpc(1, spec.Basic.Consume(queue="dlq", consumer_tag="c", no_ack=True), spec.Basic.ConsumeOk)
    props = spec.Basic.Properties(content_type="text/plain", delivery_mode=2)
    client.publish(1, "", "work", b"job-1", props)
    loop.advance(0.2)
    frames = [f for _, f in client.frames()]
    deliver, header, body = frames[:3]
    assert (body.value, deliver.exchange, deliver.routing_key) == (b"job-1", "dlx", "work")
    got = header.properties
    assert (got.content_type, got.delivery_mode) == ("text/plain", 2)
    (entry,) = got.headers["x-death"]
    assert {k: v for k, v in entry.items() if k != "time"} == {
        "count": 1,
        "reason": "expired",
        "queue": "work",
        "exchange": "",
        "routing-keys": ["work"],
    }
    assert entry["time"].timestamp() == (EPOCH_MS + 1000_200) // 1000  # seconds: the fake clock's
    first = {k: v for k, v in got.headers.items() if k.startswith("x-first-death")}
    assert first == {
        "x-first-death-queue": "work",
        "x-first-death-reason": "expired",
        "x-first-death-exchange": "",
    }


# -- deadlines across delivery and requeue ----------------------------------------------------------------
def test_unacked_messages_never_expire(client, loop):
    q, dlq = with_dlq(client, **{"x-message-ttl": 100})
    publish(client, q, b"m")
    got_ok, _, _ = client.get(q, no_ack=False)
    loop.advance(0.3)
    assert dead(client) == []
    client.send(1, spec.Basic.Ack(delivery_tag=got_ok.delivery_tag))
    loop.advance(0.1)
    assert dead(client) == [] and client.drain(q) == []


@pytest.mark.parametrize("op", ["nack", "reject", "close", "recover"])
def test_a_message_requeued_after_its_deadline_is_dead_lettered_not_redelivered(client, loop, op):
    q, dlq = with_dlq(client, **{"x-message-ttl": 100})
    publish(client, q, b"m")
    client.open_channel(2)
    got_ok, _, _ = client.get(q, channel=2, no_ack=False)
    loop.advance(0.2)
    tag = got_ok.delivery_tag
    requeue = {
        "nack": spec.Basic.Nack(delivery_tag=tag, requeue=True),
        "reject": spec.Basic.Reject(delivery_tag=tag, requeue=True),
        "close": spec.Channel.Close(200, "", 0, 0),
        "recover": spec.Basic.Recover(requeue=True),
    }[op]
    client.send(2, requeue)
    assert dead(client) == [(b"m", (q, "expired", 1))]
    assert client.drain(q) == []


def test_requeue_keeps_the_original_deadline(client, loop):
    q, dlq = with_dlq(client, **{"x-message-ttl": 1000})
    publish(client, q, b"m")
    got_ok, _, _ = client.get(q, no_ack=False)
    loop.advance(0.6)
    client.send(1, spec.Basic.Reject(delivery_tag=got_ok.delivery_tag, requeue=True))  # 400 ms left
    loop.advance(0.399)
    assert dead(client) == []
    loop.advance(0.001)
    assert dead(client) == [(b"m", (q, "expired", 1))]


def test_a_message_requeued_before_its_deadline_is_redelivered(client, loop):
    q, dlq = with_dlq(client, **{"x-message-ttl": 2000})
    publish(client, q, b"m")
    got_ok, _, _ = client.get(q, no_ack=False)
    client.send(1, spec.Basic.Nack(delivery_tag=got_ok.delivery_tag, requeue=True))
    got_ok, _, body = client.get(q)
    assert (body, got_ok.redelivered) == (b"m", True)
    assert dead(client) == []


@pytest.mark.parametrize("where", ["queue", "message"])
def test_ttl_zero_is_delivered_to_a_waiting_consumer(client, loop, where):
    q, dlq = with_dlq(client, **({"x-message-ttl": 0} if where == "queue" else {}))
    client.rpc(1, spec.Basic.Consume(queue=q, consumer_tag="c", no_ack=True), spec.Basic.ConsumeOk)
    publish(client, q, b"now", "0" if where == "message" else None)
    loop.advance(0.01)
    bodies = [f.value for _, f in client.frames() if hasattr(f, "value") and isinstance(f.value, bytes)]
    assert bodies == [b"now"]
    assert dead(client) == []


@pytest.mark.parametrize("where", ["queue", "message"])
def test_ttl_zero_without_a_consumer_expires_at_once(client, loop, where):
    q, dlq = with_dlq(client, **({"x-message-ttl": 0} if where == "queue" else {}))
    publish(client, q, b"never", "0" if where == "message" else None)
    loop.run_soon()
    assert dead(client) == [(b"never", (q, "expired", 1))]
    assert client.drain(q) == []


def test_ttl_zero_with_a_consumer_at_its_prefetch_limit_expires(client, loop):
    q, dlq = with_dlq(client, **{"x-message-ttl": 0})
    client.rpc(1, spec.Basic.Qos(prefetch_count=1), spec.Basic.QosOk)
    client.rpc(1, spec.Basic.Consume(queue=q, consumer_tag="c"), spec.Basic.ConsumeOk)
    publish(client, q, b"taken")
    publish(client, q, b"no room")
    loop.run_soon()
    delivered = [f.consumer_tag for _, f in client.frames() if isinstance(f, spec.Basic.Deliver)]
    assert delivered == ["c"]
    assert dead(client) == [(b"no room", (q, "expired", 1))]


# -- expired messages behind the head (drop_expired_msgs) -------------------------------------------------
def test_get_ok_count_leaves_out_expired_messages_behind_the_head(client, loop):
    declare(client, "q")
    publish(client, "q", b"m1")
    publish(client, "q", b"m2", "50")
    loop.advance(0.05)
    assert count(client, "q") == 2  # declare-ok drops nothing
    got_ok, _, body = client.get("q")
    assert (body, got_ok.message_count) == (b"m1", 0)
    assert client.get("q") is None


def test_get_drops_the_expired_run_after_the_head_and_purge_counts_the_rest(client, loop):
    declare(client, "q")
    for body, expiration in ((b"m1", None), (b"m2", "50"), (b"m3", "50"), (b"m4", None), (b"m5", "50")):
        publish(client, "q", body, expiration)
    loop.advance(0.05)
    got_ok, _, body = client.get("q")
    assert (body, got_ok.message_count) == (b"m1", 2)  # m2, m3 dropped; the live m4 hides the expired m5
    assert client.rpc(1, spec.Queue.Purge(queue="q"), spec.Queue.PurgeOk).message_count == 2


def test_an_expired_message_is_dead_lettered_when_a_get_exposes_it(client, loop):
    q, dlq = with_dlq(client)
    publish(client, q, b"m1")
    publish(client, q, b"m2", "50")
    loop.advance(0.05)
    assert (count(client, q), count(client, dlq)) == (2, 0)  # waiting behind the live head
    got_ok, _, body = client.get(q)
    assert (body, got_ok.message_count) == (b"m1", 0)
    _, props, body = client.get(dlq)
    death = props.headers["x-death"][0]
    assert (body, death["reason"], death["original-expiration"]) == (b"m2", "expired", "50")


def test_a_drop_head_overflow_then_dead_letters_the_expired_new_head(client, loop):
    q, dlq = with_dlq(client, **{"x-max-length": 2})
    publish(client, q, b"m1")
    publish(client, q, b"m2", "50")
    loop.advance(0.05)
    publish(client, q, b"m3")  # m1 leaves as maxlen, exposing the expired m2
    assert count(client, q) == 1
    assert [(body, death[1]) for body, death in dead(client)] == [(b"m1", "maxlen"), (b"m2", "expired")]
    got_ok, _, body = client.get(q)
    assert (body, got_ok.message_count) == (b"m3", 0)


def test_a_delivery_to_a_consumer_dead_letters_the_expired_new_head(client, loop):
    q, dlq = with_dlq(client)
    for body, expiration in ((b"m1", None), (b"m2", "50"), (b"m3", None)):
        publish(client, q, body, expiration)
    loop.advance(0.05)
    client.rpc(1, spec.Basic.Qos(prefetch_count=1), spec.Basic.QosOk)
    client.send(1, spec.Basic.Consume(queue=q, consumer_tag="c"))
    delivered = [f for _, f in client.frames() if isinstance(f, spec.Basic.Deliver)]
    assert len(delivered) == 1
    assert count(client, q) == 1  # m3; m2 left when m1 was delivered
    assert [(body, death[1]) for body, death in dead(client)] == [(b"m2", "expired")]


@pytest.mark.parametrize("method", ["purge", "delete"])
def test_purge_and_delete_count_expired_messages_behind_a_live_head_and_dead_letter_none(
    client, loop, method
):
    q, dlq = with_dlq(client)
    publish(client, q, b"m1")
    publish(client, q, b"m2", "50")
    loop.advance(0.05)
    if method == "purge":
        assert client.rpc(1, spec.Queue.Purge(queue=q), spec.Queue.PurgeOk).message_count == 2
    else:
        assert client.rpc(1, spec.Queue.Delete(queue=q), spec.Queue.DeleteOk).message_count == 2
    assert count(client, dlq) == 0


def test_an_expired_message_requeued_behind_a_live_head_stays_counted(client, loop):
    q, dlq = with_dlq(client)
    publish(client, q, b"m0")
    publish(client, q, b"m1", "100")
    publish(client, q, b"m2")
    m0, _, _ = client.get(q, no_ack=False)
    m1, _, _ = client.get(q, no_ack=False)
    client.send(1, spec.Basic.Reject(delivery_tag=m0.delivery_tag, requeue=True))  # m0 is the head again
    loop.advance(0.1)
    client.send(1, spec.Basic.Reject(delivery_tag=m1.delivery_tag, requeue=True))  # expired, behind m0
    assert (count(client, q), count(client, dlq)) == (3, 0)
    got_ok, _, body = client.get(q)
    assert (body, got_ok.message_count, got_ok.redelivered) == (b"m0", 1, True)
    assert [(body, death[1]) for body, death in dead(client)] == [(b"m1", "expired")]
    got_ok, _, body = client.get(q)
    assert (body, got_ok.message_count) == (b"m2", 0)


def test_a_priority_queue_expires_in_delivery_order(client, loop):
    q, dlq = with_dlq(client, **{"x-max-priority": 5})
    publish(client, q, b"p0", "50", priority=0)
    publish(client, q, b"p5", priority=5)  # the head now: p0's timer finds it live
    loop.advance(0.05)
    assert (count(client, q), count(client, dlq)) == (2, 0)
    got_ok, _, body = client.get(q)
    assert (body, got_ok.message_count) == (b"p5", 0)
    assert [(body, death[1]) for body, death in dead(client)] == [(b"p0", "expired")]


def test_a_message_waiting_for_a_consumer_at_its_prefetch_limit_expires(client, loop):
    q, dlq = with_dlq(client, **{"x-message-ttl": 200})
    client.rpc(1, spec.Basic.Qos(prefetch_count=1), spec.Basic.QosOk)
    client.rpc(1, spec.Basic.Consume(queue=q, consumer_tag="c"), spec.Basic.ConsumeOk)
    publish(client, q, b"held")
    publish(client, q, b"waiting")
    loop.advance(0.2)
    delivered = [f for _, f in client.frames() if isinstance(f, spec.Basic.Deliver)]
    assert len(delivered) == 1
    assert dead(client) == [(b"waiting", (q, "expired", 1))]


def test_a_retry_loop_through_a_ttl_queue_counts_its_rounds_in_x_death(client, loop):
    """The retry-with-delay idiom: reject to a retry exchange, wait out a TTL, come back."""
    for name in ("work-x", "retry-x"):
        client.rpc(1, spec.Exchange.Declare(exchange=name, exchange_type="direct"), spec.Exchange.DeclareOk)
    declare(client, "work", **{"x-dead-letter-exchange": "retry-x"})
    declare(client, "wait", **{"x-message-ttl": 100, "x-dead-letter-exchange": "work-x"})
    client.rpc(1, spec.Queue.Bind(queue="work", exchange="work-x", routing_key="job"), spec.Queue.BindOk)
    client.rpc(1, spec.Queue.Bind(queue="wait", exchange="retry-x", routing_key="job"), spec.Queue.BindOk)
    client.publish(1, "work-x", "job", b"flaky job")
    rounds = []
    while len(rounds) < 4:
        got_ok, props, _ = client.get("work", no_ack=False)
        deaths = (props.headers or {}).get("x-death", [])
        rejected = [d["count"] for d in deaths if (d["queue"], d["reason"]) == ("work", "rejected")]
        rounds.append(rejected[0] if rejected else 0)
        client.send(1, spec.Basic.Reject(delivery_tag=got_ok.delivery_tag, requeue=False))
        assert client.get("work") is None  # waiting out the TTL
        loop.advance(0.1)
    assert rounds == [0, 1, 2, 3]


def test_each_queue_applies_its_own_ttl_to_its_copy(client, loop):
    client.rpc(1, spec.Exchange.Declare(exchange="fan", exchange_type="fanout"), spec.Exchange.DeclareOk)
    declare(client, "short", **{"x-message-ttl": 100})
    declare(client, "long")
    for q in ("short", "long"):
        client.rpc(1, spec.Queue.Bind(queue=q, exchange="fan"), spec.Queue.BindOk)
    client.publish(1, "fan", "", b"copy")
    loop.advance(0.1)
    assert (count(client, "short"), count(client, "long")) == (0, 1)
