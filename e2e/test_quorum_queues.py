"""Quorum queues (``x-queue-type: quorum``) with RabbitMQ 3.10's rules; every unmarked test passes on
RabbitMQ 3.10.8 too, where the values below were read (pika 1.3).

RabbitMQ 3.10.8 pinned here:
    * Declare: the arguments are checked first (value checks in ``declare_args`` order, then arguments of
      other queue types: ``invalid arg 'x-max-priority' for queue 'q' in vhost '/' of queue type
      rabbit_quorum_queue``), then the flags: ``invalid property 'auto-delete'``, ``'exclusive-owner'``,
      ``'non-durable'``. ``x-dead-letter-strategy`` other than at-most-once/at-least-once:
      ``invalid_dlx_strategy``. A server-named quorum queue: ``Cannot declare a server-named queue for
      type rabbit_quorum_queue``. Redeclares compare the quorum queue's own arguments only (a new
      ``x-max-priority`` is ignored) and report ``inequivalent arg 'x-queue-type'`` between types.
    * ``x-delivery-count`` (a long, ``l``): absent on a consumer's first delivery, 1, 2, ... after each return
      (nack, reject, recover, a closed channel); ``basic.get`` always carries it, 0 on the first get. The
      table it is written into comes back sorted by key. Dead letters carry the message as published (no
      ``x-delivery-count``).
    * ``x-delivery-limit: N``: the return after the (N+1)th delivery dead-letters the message with reason
      ``delivery_limit``, or drops it without a dead-letter exchange.
    * A nack without a delivery limit puts the message at the back of the queue; with one, returns go first;
      a closed channel's deliveries go first.
    * ``reject-publish`` is a soft limit: the publish that takes the queue over its limit is confirmed, the
      next are nacked until the queue is down to 80 %. ``reject-publish-dlx`` acts as ``drop-head``.
    * A channel with ``basic.qos(global=true)`` and a prefetch count cannot consume from a quorum queue:
      540 ``NOT_IMPLEMENTED - queue 'q' in vhost '/' does not support global qos`` closes the connection.
    * Policies: one holding a key quorum queues do not support (``queue-mode``, ``ha-mode``, ``max-age``,
      ...) does not apply to them (the next matching one does); a policy's ``overflow`` wins over the
      argument; ``delivery-limit`` is the lower of policy and argument.
    * The management API shows ``"type": "quorum"``, ``leader``, ``members`` and ``online`` (the node);
      ``PUT /api/queues`` declares one with the same rules; definitions keep ``x-queue-type``.
RabbitMQ's quorum queue fields come from stats emitted every 5 s: they are polled with a wide timeout.
ottermq-only (``extension``): restart survival (restarting the shared RabbitMQ is not this file's to do),
streams refused, ``OTTERMQ_QUORUM_DELIVERY_LIMIT``, and RabbitMQ 3.12's ``apply-to: quorum_queues``.
"""

from __future__ import annotations

import struct
import urllib.parse
from collections.abc import Callable
from typing import Any

import pamqp.commands as C
import pika
import pika.exceptions
import pytest

from .polling import poll_until

Q = {"x-queue-type": "quorum"}
STATS_TIMEOUT = 20  # RabbitMQ's quorum queue stats are emitted every 5 s
QUORUM_ONLY = {
    "leader",
    "members",
    "online",
    "open_files",
    "messages_dlx",
    "message_bytes_dlx",
    "single_active_consumer_ctag",
}
CLASSIC_ONLY = {
    "exclusive_consumer_tag",
    "head_message_timestamp",
    "backing_queue_status",
    "single_active_consumer_tag",
}


def _invalid(name: str, key: str, term: str) -> str:
    return f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{name}' in vhost '/': {term}"


def _not_quorum(name: str, key: str, prefix: str = "PRECONDITION_FAILED - ") -> str:
    return f"{prefix}invalid arg '{key}' for queue '{name}' in vhost '/' of queue type rabbit_quorum_queue"


def _ineq(name: str, key: str, rest: str, prefix: str = "PRECONDITION_FAILED - ") -> str:
    return f"{prefix}inequivalent arg '{key}' for queue '{name}' in vhost '/': {rest}"


NO_TYPE = "received none but current is the value 'quorum' of type 'longstr'"


def _property(name: str, prop: str) -> str:
    return f"PRECONDITION_FAILED - invalid property '{prop}' for queue '{name}' in vhost '/'"


def _declare_error(connect: Callable[..., Any], name: str, **kwargs: Any) -> tuple[int, str]:
    ch = connect().channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(name, **kwargs)
    return info.value.reply_code, info.value.reply_text


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _get_all(ch: Any, queue: str) -> list[bytes]:
    out = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append(body)


def _settle_all(conn: Any, seconds: float = 0.2) -> None:
    """Let the broker act on what was sent (a quorum queue applies commands asynchronously)."""
    conn.process_data_events(time_limit=seconds)


# ---------------------------------------------------------------------------------------------------------
# declare
# ---------------------------------------------------------------------------------------------------------
DECLARE_CASES = [
    ({"durable": False}, Q, lambda n: _property(n, "non-durable")),
    ({"exclusive": True}, Q, lambda n: _property(n, "exclusive-owner")),
    ({"auto_delete": True}, Q, lambda n: _property(n, "auto-delete")),
    ({"durable": False, "exclusive": True, "auto_delete": True}, Q, lambda n: _property(n, "auto-delete")),
    ({"durable": False, "exclusive": True}, Q, lambda n: _property(n, "exclusive-owner")),
    ({}, {**Q, "x-max-priority": 5}, lambda n: _not_quorum(n, "x-max-priority")),
    ({}, {**Q, "x-queue-mode": "lazy"}, lambda n: _not_quorum(n, "x-queue-mode")),
    ({}, {**Q, "x-queue-version": 2}, lambda n: _not_quorum(n, "x-queue-version")),
    ({}, {**Q, "x-queue-master-locator": "min-masters"}, lambda n: _not_quorum(n, "x-queue-master-locator")),
    ({}, {**Q, "x-max-age": "1D"}, lambda n: _not_quorum(n, "x-max-age")),
    ({"durable": False}, {**Q, "x-max-priority": 5}, lambda n: _not_quorum(n, "x-max-priority")),
    (
        {},
        {**Q, "x-dead-letter-strategy": "bogus"},
        lambda n: _invalid(n, "x-dead-letter-strategy", "invalid_dlx_strategy"),
    ),
    (
        {},
        {**Q, "x-dead-letter-strategy": "bogus", "x-max-length": -1},
        lambda n: _invalid(n, "x-dead-letter-strategy", "invalid_dlx_strategy"),
    ),
    (
        {},
        {**Q, "x-quorum-initial-group-size": 0},
        lambda n: _invalid(n, "x-quorum-initial-group-size", "{value_zero,0}"),
    ),
    (
        {},
        {**Q, "x-queue-leader-locator": "foo"},
        lambda n: _invalid(n, "x-queue-leader-locator", "invalid_queue_locator_arg"),
    ),
    (
        {},
        {**Q, "x-max-priority": 5, "x-max-length": -1},
        lambda n: _invalid(n, "x-max-length", "{value_negative,-1}"),
    ),
    (
        {"durable": False},
        {**Q, "x-max-length": -1},
        lambda n: _invalid(n, "x-max-length", "{value_negative,-1}"),
    ),
    (
        {},
        {"x-queue-type": "QUORUM"},
        lambda n: _invalid(n, "x-queue-type", "\"unsupported queue type 'QUORUM'\""),
    ),
]


@pytest.mark.parametrize(("flags", "arguments", "text"), DECLARE_CASES)
def test_declare_rules(connect, unique, flags, arguments, text):
    name = unique("qq")
    assert _declare_error(
        connect,
        name,
        durable=flags.get("durable", True),
        exclusive=flags.get("exclusive", False),
        auto_delete=flags.get("auto_delete", False),
        arguments=arguments,
    ) == (406, text(name))


def test_accepted_arguments(channel, unique):
    for extra in (
        {"x-overflow": "reject-publish"},
        {"x-overflow": "reject-publish-dlx"},
        {"x-message-ttl": 60000, "x-expires": 600000},
        {"x-delivery-limit": 3, "x-quorum-initial-group-size": 3},
        {"x-dead-letter-strategy": "at-most-once"},
        {"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"},
        {"x-single-active-consumer": True},
        {"x-max-length": 10, "x-max-length-bytes": 1000},
        {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "elsewhere"},
        {"x-max-in-memory-length": 10, "x-queue-leader-locator": "balanced"},
        {"x-delivery-limit": "5", "x-foo": "bar"},
    ):
        name = unique("qq")
        ok = channel.queue_declare(name, durable=True, arguments={**Q, **extra})
        assert (ok.method.queue, ok.method.message_count, ok.method.consumer_count) == (name, 0, 0)


def test_a_server_named_quorum_queue_is_refused(connect):
    text = "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue"
    assert _declare_error(connect, "", durable=True, arguments=Q) == (406, text)


def test_redeclare(connect, unique):
    classic, quorum = unique("classic"), unique("quorum")
    ch = connect().channel()
    ch.queue_declare(classic, durable=True)
    ch.queue_declare(quorum, durable=True, arguments={**Q, "x-delivery-limit": 2})
    # equivalent: the same type, or an argument quorum queues do not have; passive
    ch.queue_declare(classic, durable=True, arguments={"x-queue-type": "classic"})
    ch.queue_declare(quorum, durable=True, arguments={**Q, "x-delivery-limit": 2, "x-max-priority": 3})
    ok = ch.queue_declare(quorum, passive=True)
    assert ok.method.queue == quorum
    cases = [
        (
            classic,
            True,
            Q,
            _ineq(
                classic, "x-queue-type", "received the value 'quorum' of type 'longstr' but current is none"
            ),
        ),
        (quorum, True, None, _ineq(quorum, "x-queue-type", NO_TYPE)),
        (
            quorum,
            True,
            {"x-queue-type": "classic", "x-delivery-limit": 2},
            _ineq(quorum, "x-queue-type", "received 'classic' but current is 'quorum'"),
        ),
        (
            quorum,
            False,
            {**Q, "x-delivery-limit": 2},
            _ineq(quorum, "durable", "received 'false' but current is 'true'"),
        ),
        (
            quorum,
            True,
            {**Q, "x-delivery-limit": 3},
            _ineq(quorum, "x-delivery-limit", "received '3' but current is '2'"),
        ),
        (
            quorum,
            True,
            {**Q, "x-delivery-limit": 2, "x-dead-letter-strategy": "at-least-once"},
            _ineq(
                quorum,
                "x-dead-letter-strategy",
                "received the value 'at-least-once' of type 'longstr' but current is none",
            ),
        ),
    ]
    for name, durable, arguments, text in cases:
        assert _declare_error(connect, name, durable=durable, arguments=arguments) == (406, text)
    locked = (
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{quorum}' in vhost '/'. It could"
        " be originally declared on another connection or the exclusive property value does not match that"
        " of the original declaration."
    )
    code, text = _declare_error(
        connect, quorum, durable=True, exclusive=True, arguments={**Q, "x-delivery-limit": 2}
    )
    assert code == 405 and locked.startswith(text.removesuffix("..."))  # cut at 255 bytes


# ---------------------------------------------------------------------------------------------------------
# x-delivery-count
# ---------------------------------------------------------------------------------------------------------
def test_consumer_sees_x_delivery_count_from_the_first_return(connect, unique):
    conn = connect()
    ch = conn.channel()
    name = unique("qq")
    ch.queue_declare(name, durable=True, arguments=Q)
    ch.basic_publish("", name, b"m", pika.BasicProperties(headers={"app": "v"}))
    seen: list[tuple[bool, Any]] = []

    def on_message(c, method, props, body):
        seen.append((method.redelivered, dict(props.headers or {})))
        c.basic_nack(method.delivery_tag, requeue=len(seen) < 3)

    ch.basic_consume(name, on_message)
    poll_until(lambda: conn.process_data_events(time_limit=0.05) or len(seen) >= 3, what="three deliveries")
    assert seen == [
        (False, {"app": "v"}),
        (True, {"app": "v", "x-delivery-count": 1}),
        (True, {"app": "v", "x-delivery-count": 2}),
    ]


def test_basic_get_counts_from_zero(channel, unique):
    name = unique("qq")
    channel.queue_declare(name, durable=True, arguments=Q)
    channel.basic_publish("", name, b"m", pika.BasicProperties(headers={"x-delivery-count": 7, "h": 1}))
    got = []
    for _ in range(3):
        method, props, _ = poll_until(
            lambda: (r := channel.basic_get(name))[0] is not None and r, what="a get"
        )
        got.append((method.redelivered, props.headers))
        channel.basic_nack(method.delivery_tag, requeue=True)
    # the publisher's own x-delivery-count is replaced, by a long
    assert got == [
        (False, {"h": 1, "x-delivery-count": 0}),
        (True, {"h": 1, "x-delivery-count": 1}),
        (True, {"h": 1, "x-delivery-count": 2}),
    ]


def _table_entries(raw: bytes) -> list[tuple[str, str, Any]]:
    """``(key, tag, value)`` of a field table of long strings and integers (what this test publishes)."""
    (size,) = struct.unpack_from(">I", raw)
    pos, end, out = 4, 4 + size, []
    while pos < end:
        klen = raw[pos]
        key = raw[pos + 1 : pos + 1 + klen].decode()
        pos += 1 + klen
        tag = chr(raw[pos])
        pos += 1
        if tag == "S":
            (length,) = struct.unpack_from(">I", raw, pos)
            value: Any = raw[pos + 4 : pos + 4 + length].decode()
            pos += 4 + length
        elif tag == "l":
            (value,) = struct.unpack_from(">q", raw, pos)
            pos += 8
        elif tag == "I":
            (value,) = struct.unpack_from(">i", raw, pos)
            pos += 4
        else:
            raise AssertionError(f"unexpected tag {tag!r} in {raw!r}")
        out.append((key, tag, value))
    return out


def test_the_count_is_a_long_in_a_table_sorted_by_key(raw_connect, unique, channel):
    """On the wire: ``x-delivery-count`` is a signed 64-bit ``l`` and the headers table is sorted by key
    (RabbitMQ's ``rabbit_basic:add_header``), whatever order the publisher used."""
    name = unique("qq")
    channel.queue_declare(name, durable=True, arguments=Q)
    channel.basic_publish("", name, b"m", pika.BasicProperties(headers={"zeta": "z", "alpha": "a"}))
    raw = raw_connect()
    raw.open_channel(1)
    poll_until(
        lambda: channel.queue_declare(name, passive=True).method.message_count == 1, what="the message"
    )
    raw.send_frame(1, C.Basic.Get(queue=name))
    raw.expect(C.Basic.GetOk)
    frame_type, _, payload = raw.recv_raw_frame()
    assert frame_type == 2  # the content header: class, weight, body size, then the properties
    (flags,) = struct.unpack_from(">H", payload, 12)
    assert flags == 0x2000  # headers only
    assert _table_entries(payload[14:]) == [
        ("alpha", "S", "a"),
        ("x-delivery-count", "l", 0),
        ("zeta", "S", "z"),
    ]


def test_closed_channel_and_recover_count_as_returns(connect, unique):
    conn = connect()
    ch = conn.channel()
    name = unique("qq")
    ch.queue_declare(name, durable=True, arguments=Q)
    ch.basic_publish("", name, b"m")
    first = conn.channel()
    method, _, _ = poll_until(lambda: (r := first.basic_get(name))[0] is not None and r, what="a get")
    first.close()  # the delivery comes back: count 1
    seen: list[tuple[bool, Any]] = []
    consumer = conn.channel()
    consumer.basic_consume(name, lambda c, m, p, b: seen.append((m.redelivered, p.headers)))
    poll_until(lambda: conn.process_data_events(time_limit=0.05) or seen, what="the redelivery")
    consumer.basic_recover(requeue=True)  # and again: count 2
    poll_until(lambda: conn.process_data_events(time_limit=0.05) or len(seen) >= 2, what="the second")
    assert seen == [(True, {"x-delivery-count": 1}), (True, {"x-delivery-count": 2})]


def test_where_a_return_goes(connect, unique):
    """Without a delivery limit a nack puts the message at the back; with one, returns go first; a closed
    channel's deliveries always go first."""
    conn = connect()
    ch = conn.channel()
    for arguments, nacked, closed in (
        (Q, [b"4", b"5", b"3", b"1", b"2"], [b"1", b"2", b"3", b"4", b"5"]),
        ({**Q, "x-delivery-limit": 10}, [b"3", b"1", b"2", b"4", b"5"], [b"1", b"2", b"3", b"4", b"5"]),
    ):
        name = unique("qq")
        ch.queue_declare(name, durable=True, arguments=arguments)
        for body in (b"1", b"2", b"3", b"4", b"5"):
            ch.basic_publish("", name, body)
        poll_until(lambda n=name: ch.queue_declare(n, passive=True).method.message_count == 5, what="5 ready")
        tags = {}
        for _ in range(3):
            method, _, body = ch.basic_get(name)
            tags[body] = method.delivery_tag
        ch.basic_nack(tags[b"3"], requeue=True)
        ch.basic_nack(tags[b"1"], requeue=True)
        ch.basic_reject(tags[b"2"], requeue=True)
        poll_until(lambda n=name: ch.queue_declare(n, passive=True).method.message_count == 5, what="5 again")
        assert _get_all(ch, name) == nacked
        for body in (b"1", b"2", b"3", b"4", b"5"):
            ch.basic_publish("", name, body)
        other = conn.channel()
        poll_until(lambda n=name: ch.queue_declare(n, passive=True).method.message_count == 5, what="5 ready")
        for _ in range(3):
            assert other.basic_get(name)[0] is not None
        other.close()
        poll_until(lambda n=name: ch.queue_declare(n, passive=True).method.message_count == 5, what="5 again")
        assert _get_all(ch, name) == closed


# ---------------------------------------------------------------------------------------------------------
# delivery limit
# ---------------------------------------------------------------------------------------------------------
def _with_dlq(ch: Any, unique: Any, **arguments: Any) -> tuple[str, str]:
    """A durable dead-letter queue and a quorum queue with ``arguments`` dead-lettering into it through
    the default exchange; returns their names."""
    dlq, name = unique("dlq"), unique("qq")
    ch.queue_declare(dlq, durable=True)
    dead_letters = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
    ch.queue_declare(name, durable=True, arguments={**Q, **dead_letters, **arguments})
    return dlq, name


def test_delivery_limit_dead_letters_with_reason_delivery_limit(connect, unique):
    conn = connect()
    ch = conn.channel()
    dlq, name = _with_dlq(ch, unique, **{"x-delivery-limit": 1})
    ch.basic_publish("", name, b"poison", pika.BasicProperties(headers={"app": "v"}))
    seen: list[tuple[bool, Any]] = []

    def on_message(c, method, props, body):
        seen.append((method.redelivered, (props.headers or {}).get("x-delivery-count")))
        c.basic_nack(method.delivery_tag, requeue=True)

    tag = ch.basic_consume(name, on_message)

    def dead():
        conn.process_data_events(time_limit=0.02)
        got = ch.basic_get(dlq, auto_ack=True)
        return got if got[0] is not None else None

    _, props, body = poll_until(dead, what=f"a dead letter in {dlq}")
    ch.basic_cancel(tag)
    assert seen == [(False, None), (True, 1)]  # delivery N + 1 = 2 was the last
    assert body == b"poison"
    deaths = [
        (d["queue"], d["reason"], d["count"], d["exchange"], d["routing-keys"])
        for d in props.headers["x-death"]
    ]
    assert deaths == [(name, "delivery_limit", 1, "", [name])]
    assert props.headers["x-first-death-reason"] == "delivery_limit"
    assert props.headers["app"] == "v" and "x-delivery-count" not in props.headers


def test_delivery_limit_without_a_dead_letter_exchange_drops(channel, unique):
    name = unique("qq")
    channel.queue_declare(name, durable=True, arguments={**Q, "x-delivery-limit": 2})
    channel.basic_publish("", name, b"m")
    counts = []
    for _ in range(3):
        method, props, _ = poll_until(
            lambda: (r := channel.basic_get(name))[0] is not None and r, what="a get"
        )
        counts.append(props.headers["x-delivery-count"])
        channel.basic_nack(method.delivery_tag, requeue=True)
    assert counts == [0, 1, 2]
    poll_until(lambda: channel.queue_declare(name, passive=True).method.message_count == 0, what="the drop")
    assert channel.basic_get(name)[0] is None


def test_a_rejected_message_dead_letters_as_published(connect, unique):
    conn = connect()
    ch = conn.channel()
    dlq, name = _with_dlq(ch, unique)
    ch.basic_publish("", name, b"m", pika.BasicProperties(headers={"x-delivery-count": 7}))
    method, _, _ = poll_until(lambda: (r := ch.basic_get(name))[0] is not None and r, what="a get")
    ch.basic_nack(method.delivery_tag, requeue=True)
    method, props, _ = poll_until(lambda: (r := ch.basic_get(name))[0] is not None and r, what="again")
    assert props.headers["x-delivery-count"] == 1
    ch.basic_reject(method.delivery_tag, requeue=False)
    _, props, _ = poll_until(
        lambda: (r := ch.basic_get(dlq, auto_ack=True))[0] is not None and r, what="dead letter"
    )
    assert props.headers["x-delivery-count"] == 7  # the publisher's, not the queue's count
    assert props.headers["x-first-death-reason"] == "rejected"


# ---------------------------------------------------------------------------------------------------------
# overflow, global QoS
# ---------------------------------------------------------------------------------------------------------
def _confirmed(ch: Any, name: str, body: bytes) -> bool:
    try:
        ch.basic_publish("", name, body)
        return True
    except pika.exceptions.NackError:
        return False


def test_reject_publish_is_a_soft_limit(connect, unique):
    ch = connect().channel()
    name = unique("qq")
    ch.queue_declare(name, durable=True, arguments={**Q, "x-max-length": 10, "x-overflow": "reject-publish"})
    ch.confirm_delivery()
    assert [_confirmed(ch, name, b"x") for _ in range(12)] == [True] * 11 + [False]
    assert ch.queue_declare(name, passive=True).method.message_count == 11
    seen = []
    for _ in range(3):
        assert ch.basic_get(name, auto_ack=True)[0] is not None
        seen.append(_confirmed(ch, name, b"y"))
    assert seen == [False, False, True]  # in again at 8 (80 % of 10)


def test_reject_publish_dlx_acts_as_drop_head(connect, unique):
    ch = connect().channel()
    dlq, name = _with_dlq(ch, unique, **{"x-max-length": 2, "x-overflow": "reject-publish-dlx"})
    ch.confirm_delivery()
    assert all(_confirmed(ch, name, body) for body in (b"0", b"1", b"2", b"3"))
    poll_until(lambda: ch.queue_declare(dlq, passive=True).method.message_count == 2, what="2 dead letters")
    assert _get_all(ch, name) == [b"2", b"3"]
    assert _get_all(ch, dlq) == [b"0", b"1"]


def test_global_qos_cannot_consume_from_a_quorum_queue(connect, unique, connection_error):
    name = unique("qq")
    setup = connect().channel()
    setup.queue_declare(name, durable=True, arguments=Q)
    ch = connect().channel()
    ch.basic_qos(prefetch_count=10, global_qos=True)
    text = f"NOT_IMPLEMENTED - queue '{name}' in vhost '/' does not support global qos"
    connection_error(lambda: ch.basic_consume(name, lambda *a: None), 540, text)
    # a global qos of 0, a per-consumer prefetch, or a global qos set after the consume are fine
    for setting in ({"prefetch_count": 0, "global_qos": True}, {"prefetch_count": 10}):
        ok = connect().channel()
        ok.basic_qos(**setting)
        ok.basic_consume(name, lambda *a: None)
    late = connect()
    ch = late.channel()
    ch.basic_consume(name, lambda *a: None)
    ch.basic_qos(prefetch_count=10, global_qos=True)
    late.process_data_events(time_limit=0.1)
    assert late.is_open and ch.is_open


# ---------------------------------------------------------------------------------------------------------
# policies and the management API
# ---------------------------------------------------------------------------------------------------------
def _queue_json(broker: Any, name: str, **expected: Any) -> dict[str, Any]:
    """``GET /api/queues/{vhost}/{name}`` once it shows ``expected`` (RabbitMQ's stats lag)."""

    def shown() -> dict[str, Any] | None:
        status, body = broker.api(f"/api/queues/{_quote(broker.vhost)}/{_quote(name)}")
        assert status == 200, body
        return body if "policy" in body and all(body.get(k) == v for k, v in expected.items()) else None

    return poll_until(shown, timeout=STATS_TIMEOUT, what=f"queue {name} showing {expected}")


@pytest.fixture
def policies(broker: Any) -> Any:
    made: list[str] = []

    def put(name: str, body: dict[str, Any]) -> None:
        status, answer = broker.api(f"/api/policies/{_quote(broker.vhost)}/{_quote(name)}", "PUT", body)
        assert status in (201, 204), answer
        made.append(name)

    yield put
    for name in made:
        broker.api(f"/api/policies/{_quote(broker.vhost)}/{_quote(name)}", "DELETE")


def test_policies_of_quorum_queues(broker, connect, unique, policies):
    conn = connect()
    ch = conn.channel()
    skipped, applied = unique("skipped"), unique("applied")
    for name in (skipped, applied):
        ch.queue_declare(
            name, durable=True, arguments={**Q, "x-max-length": 2, "x-overflow": "reject-publish"}
        )
    policies(
        unique("low"),
        {
            "pattern": f"^({skipped}|{applied})$",
            "apply-to": "queues",
            "definition": {"max-length-bytes": 1000000},
            "priority": 0,
        },
    )
    # queue-mode is no quorum queue key: this policy does not apply to `skipped`, the lower one does
    policies(
        unique("mode"),
        {
            "pattern": f"^{skipped}$",
            "apply-to": "queues",
            "definition": {"queue-mode": "lazy", "delivery-limit": 0},
            "priority": 5,
        },
    )
    # the policy's overflow wins over the argument; delivery-limit is the lower of policy and argument
    definition = {"overflow": "drop-head", "delivery-limit": 0, "dead-letter-strategy": "at-least-once"}
    policies(
        unique("qq"),
        {"pattern": f"^{applied}$", "apply-to": "queues", "definition": definition, "priority": 5},
    )
    assert _queue_json(broker, applied, effective_policy_definition=definition)["type"] == "quorum"
    assert _queue_json(broker, skipped, effective_policy_definition={"max-length-bytes": 1000000})
    ch.confirm_delivery()
    assert [_confirmed(ch, applied, b) for b in (b"0", b"1", b"2", b"3")] == [True] * 4  # drop-head
    poll_until(lambda: ch.queue_declare(applied, passive=True).method.message_count == 2, what="two left")
    method, _, body = ch.basic_get(applied)
    assert body == b"2"
    ch.basic_nack(method.delivery_tag, requeue=True)  # limit 0: the first return drops it
    poll_until(lambda: ch.queue_declare(applied, passive=True).method.message_count == 1, what="the drop")
    assert [_confirmed(ch, skipped, b) for b in (b"0", b"1", b"2", b"3")] == [True, True, True, False]


def test_management_api_fields(broker, channel, unique):
    quorum, classic = unique("qq"), unique("classic")
    channel.queue_declare(quorum, durable=True, arguments={**Q, "x-delivery-limit": 3})
    channel.queue_declare(classic, durable=True)
    channel.basic_publish("", quorum, b"hello")
    shown = _queue_json(broker, quorum, messages=1)
    assert (shown["type"], shown["durable"], shown["exclusive"], shown["auto_delete"]) == (
        "quorum",
        True,
        False,
        False,
    )
    assert shown["arguments"] == {"x-delivery-limit": 3, "x-queue-type": "quorum"}
    assert shown["leader"] == shown["node"] and shown["members"] == shown["online"] == [shown["node"]]
    assert QUORUM_ONLY <= set(shown) and not CLASSIC_ONLY & set(shown)
    other = _queue_json(broker, classic)
    assert other["type"] == "classic" and not QUORUM_ONLY & set(other)
    status, listed = broker.api(f"/api/queues/{_quote(broker.vhost)}")
    assert status == 200
    [entry] = [q for q in listed if q["name"] == quorum]
    assert entry["type"] == "quorum" and QUORUM_ONLY - {
        "open_files",
        "messages_dlx",
        "message_bytes_dlx",
    } <= set(entry)


def test_http_declare_and_definitions(broker, channel, unique):
    vhost = _quote(broker.vhost)
    name, bad = unique("qq"), unique("bad")
    body = {"durable": True, "arguments": Q}
    assert broker.api(f"/api/queues/{vhost}/{_quote(name)}", "PUT", body)[0] == 201
    assert broker.api(f"/api/queues/{vhost}/{_quote(name)}", "PUT", body)[0] == 204
    for request, reason in (
        (
            {"durable": False, "arguments": Q},
            f"invalid property 'non-durable' for queue '{bad}' in vhost '/'",
        ),
        (
            {"durable": True, "auto_delete": True, "arguments": Q},
            f"invalid property 'auto-delete' for queue '{bad}' in vhost '/'",
        ),
        (
            {"durable": True, "arguments": {**Q, "x-max-priority": 3}},
            _not_quorum(bad, "x-max-priority", prefix=""),
        ),
    ):
        assert broker.api(f"/api/queues/{vhost}/{_quote(bad)}", "PUT", request) == (
            400,
            {"error": "bad_request", "reason": reason},
        )
    reason = _ineq(name, "x-queue-type", NO_TYPE, prefix="")
    assert broker.api(f"/api/queues/{vhost}/{_quote(name)}", "PUT", {"durable": True}) == (
        400,
        {"error": "bad_request", "reason": reason},
    )
    # a quorum queue for AMQP too
    text = _ineq(name, "x-queue-type", NO_TYPE)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.queue_declare(name, durable=True)
    assert info.value.reply_text == text
    status, defs = broker.api(f"/api/definitions/{vhost}")
    assert status == 200
    [exported] = [q for q in defs["queues"] if q["name"] == name]
    assert (exported["durable"], exported["arguments"]) == (True, Q)
    imported = unique("imported")
    doc = {"queues": [{"name": imported, "durable": True, "auto_delete": False, "arguments": Q}]}
    status, answer = broker.api(f"/api/definitions/{vhost}", "POST", doc)
    assert status in (200, 201, 204), answer
    assert _queue_json(broker, imported)["type"] == "quorum"


# ---------------------------------------------------------------------------------------------------------
# ottermq extensions
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.extension
def test_survives_a_restart_with_its_type_messages_and_counts(restartable, unique):
    """Every message of a quorum queue is stored (transient ones too, as RabbitMQ's quorum queues keep
    everything in their log); a delivery cut short by the restart counts as a return."""
    b, restart = restartable("sigterm")
    name = unique("qq")
    conn = pika.BlockingConnection(b.params())
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={**Q, "x-delivery-limit": 5})
    ch.confirm_delivery()
    ch.basic_publish("", name, b"transient", pika.BasicProperties(delivery_mode=1))
    ch.basic_publish("", name, b"persistent", pika.BasicProperties(delivery_mode=2))
    method, props, body = ch.basic_get(name)
    assert (body, props.headers) == (b"transient", {"x-delivery-count": 0})
    restart()  # with the first message unacked
    conn = pika.BlockingConnection(b.params())
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={**Q, "x-delivery-limit": 5})  # equivalent: still quorum
    got = []
    for _ in range(2):
        method, props, body = poll_until(
            lambda: (r := ch.basic_get(name, auto_ack=True))[0] is not None and r, what="a message"
        )
        got.append((body, method.redelivered, props.headers["x-delivery-count"]))
    assert got == [(b"transient", True, 1), (b"persistent", False, 0)]
    status, shown = b.api(f"/api/queues/{_quote(b.vhost)}/{_quote(name)}")
    assert status == 200 and shown["type"] == "quorum"
    conn.close()


@pytest.mark.extension
def test_streams_are_refused(connect, unique):
    """RabbitMQ 3.10.8 declares a stream; ottermq does not implement them and says so."""
    name = unique("stream")
    term = "\"unsupported queue type 'stream'\" (ottermq does not implement streams)"
    text = _invalid(name, "x-queue-type", term)
    assert _declare_error(connect, name, durable=True, arguments={"x-queue-type": "stream"}) == (406, text)


@pytest.mark.extension
def test_rabbitmq_4_default_delivery_limit_is_opt_in(broker_process, unique):
    """``OTTERMQ_QUORUM_DELIVERY_LIMIT=2``: a quorum queue without a limit of its own gets RabbitMQ 4's
    behaviour (there 20): the third return drops the message; classic queues are untouched."""
    b = broker_process(env={"OTTERMQ_QUORUM_DELIVERY_LIMIT": "2"}).start()
    conn = pika.BlockingConnection(b.params())
    ch = conn.channel()
    quorum, classic = unique("qq"), unique("classic")
    ch.queue_declare(quorum, durable=True, arguments=Q)
    ch.queue_declare(classic, durable=True)
    for name in (quorum, classic):
        ch.basic_publish("", name, b"m")
    for name, gets in ((quorum, 3), (classic, 5)):
        got = 0
        for _ in range(5):
            method, _, _ = ch.basic_get(name)
            if method is None:
                break
            got += 1
            ch.basic_nack(method.delivery_tag, requeue=True)
        assert got == gets, name
    conn.close()


@pytest.mark.extension
def test_apply_to_quorum_queues(broker, channel, unique, policies):
    """RabbitMQ 3.12's ``apply-to`` values (3.10 refuses them): ``quorum_queues`` matches quorum queues
    only, ``classic_queues`` classic ones only."""
    quorum, classic = unique("qq"), unique("classic")
    channel.queue_declare(quorum, durable=True, arguments=Q)
    channel.queue_declare(classic, durable=True)
    pattern = f"^({quorum}|{classic})$"
    policies(unique("q"), {"pattern": pattern, "apply-to": "quorum_queues", "definition": {"max-length": 1}})
    policies(unique("c"), {"pattern": pattern, "apply-to": "classic_queues", "definition": {"max-length": 2}})
    assert _queue_json(broker, quorum)["effective_policy_definition"] == {"max-length": 1}
    assert _queue_json(broker, classic)["effective_policy_definition"] == {"max-length": 2}
