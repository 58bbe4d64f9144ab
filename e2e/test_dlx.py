"""Dead-lettering: arguments, reasons, routing, CC/BCC, x-death bookkeeping, cycles, message fidelity.

RabbitMQ 3.10 rules pinned here:
    * Reasons: ``rejected`` (basic.reject / basic.nack with requeue=false, also nack multiple), ``expired``,
      ``maxlen`` (see test_length_limits.py); purging or deleting a queue never dead-letters.
    * The dead letter goes to ``x-dead-letter-exchange`` with ``x-dead-letter-routing-key`` if set, else with
      the message's own routing keys: its routing key, ``CC`` and ``BCC`` keys. ``BCC`` is never in the
      headers; with a dead-letter routing key RabbitMQ also removes the ``CC`` header.
    * The DLX is looked up when a message dies: a missing one drops the message silently.
    * ``expiration`` is removed; every other property and the body are kept byte for byte; the headers
      table comes back sorted by key with ``x-death`` and ``x-first-death-*`` added.
    * A repeated death in the same queue for the same reason increments ``count`` and moves the entry to the
      front. A dead-letter cycle without a ``rejected`` death is dropped when the message would re-enter a
      queue it already died in; a cycle through a rejection continues.
    * ``x-delivery-limit`` is a quorum-queue argument (``test_quorum_queues.py``): RabbitMQ 3.10 refuses it on
      a classic queue; ottermq implements it there (extension) with quorum-queue counting (the values are
      RabbitMQ's, read from its quorum queues; see ``test_classic_queue_delivery_limit``).
"""

from __future__ import annotations

import struct
import time
from datetime import datetime

import pamqp.body
import pamqp.commands as C
import pamqp.frame
import pika
import pytest

from .polling import poll_until

VHOST = "vhost '/'"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY = 1, 2, 3
FIRST_DEATH = {"x-first-death-exchange", "x-first-death-queue", "x-first-death-reason"}
LAST_DEATH = {"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason"}


# ---------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------
def deaths(props) -> list[tuple]:
    return [(d["queue"], d["reason"], d["count"]) for d in props.headers["x-death"]]


def reject_one(ch, q: str, body: bytes = b"m", **props) -> None:
    """Publish ``body`` to ``q`` through the default exchange, fetch it and reject it (requeue=false)."""
    ch.basic_publish("", q, body, pika.BasicProperties(**props))
    method, _, got = ch.basic_get(q)
    assert got == body
    ch.basic_reject(method.delivery_tag, requeue=False)


# ---------------------------------------------------------------------------------------------------------
# argument validation
# ---------------------------------------------------------------------------------------------------------
def test_dead_letter_exchange_must_be_a_string(channel, unique, channel_error):
    q = unique("q")
    channel_error(
        lambda: channel.queue_declare(q, arguments={"x-dead-letter-exchange": 5}),
        406,
        "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' "
        f"in queue '{q}' in {VHOST}",
    )


def test_dead_letter_routing_key_requires_dead_letter_exchange(channel, unique, channel_error):
    q = unique("q")
    channel_error(
        lambda: channel.queue_declare(q, arguments={"x-dead-letter-routing-key": "k"}),
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-dead-letter-routing-key' for queue '{q}' in {VHOST}: "
        "routing_key_but_no_dlx_defined",
    )


def test_dead_letter_routing_key_must_be_a_string(channel, unique, channel_error):
    q = unique("q")
    channel_error(
        lambda: channel.queue_declare(
            q, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": 5}
        ),
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-dead-letter-routing-key' for queue '{q}' in {VHOST}: "
        "{unacceptable_type,signedint}",
    )


def test_dead_letter_exchange_need_not_exist_at_declare(channel, unique):
    q = unique("q")
    channel.queue_declare(q, arguments={"x-dead-letter-exchange": unique("missing")})


# ---------------------------------------------------------------------------------------------------------
# reasons
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["reject", "nack"])
def test_reject_or_nack_without_requeue_dead_letters_as_rejected(channel, op, with_dlq, expect_message):
    q, dlq = with_dlq(channel)
    channel.basic_publish("", q, b"m")
    method, _, _ = channel.basic_get(q)
    getattr(channel, f"basic_{op}")(method.delivery_tag, requeue=False)
    _, props, body = expect_message(channel, dlq)
    assert body == b"m" and deaths(props) == [(q, "rejected", 1)]
    assert props.headers["x-first-death-reason"] == "rejected"


def test_nack_multiple_dead_letters_every_message_up_to_the_tag(
    channel, with_dlq, expect_message, nothing_for
):
    q, dlq = with_dlq(channel)
    for body in (b"1", b"2", b"3"):
        channel.basic_publish("", q, body)
    tags = [channel.basic_get(q)[0].delivery_tag for _ in range(3)]
    channel.basic_nack(tags[1], multiple=True, requeue=False)
    got = [expect_message(channel, dlq) for _ in range(2)]
    assert [(b, deaths(p)) for _, p, b in got] == [(b"1", [(q, "rejected", 1)]), (b"2", [(q, "rejected", 1)])]
    channel.basic_ack(tags[2])
    nothing_for(channel, [dlq], 0.05)


def test_requeue_true_does_not_dead_letter(channel, with_dlq, drain):
    q, dlq = with_dlq(channel)
    channel.basic_publish("", q, b"m")
    method, _, _ = channel.basic_get(q)
    channel.basic_reject(method.delivery_tag, requeue=True)
    assert channel.basic_get(q, auto_ack=True)[2] == b"m"
    assert drain(channel, dlq) == []


def test_purge_and_delete_never_dead_letter(channel, with_dlq, nothing_for):
    q, dlq = with_dlq(channel)
    channel.confirm_delivery()
    for body in (b"a", b"b"):
        channel.basic_publish("", q, body)
    assert channel.queue_purge(q).method.message_count == 2
    channel.basic_publish("", q, b"c")
    assert channel.queue_delete(q).method.message_count == 1
    nothing_for(channel, [dlq], 0.2)


# ---------------------------------------------------------------------------------------------------------
# routing the dead letter
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def routed(channel, unique, declare):
    """A direct DLX with one queue per binding key, and a source queue bound to ``src`` as ``orig``."""

    def _routed(keys: list[str], **arguments) -> tuple[str, str, dict[str, str]]:
        dlx, src = unique("dlx"), unique("src")
        channel.exchange_declare(dlx, "direct")
        channel.exchange_declare(src, "direct")
        queues = {}
        for key in keys:
            queues[key] = declare(channel, key)
            channel.queue_bind(queues[key], dlx, key)
        q = declare(channel, "work", **{"x-dead-letter-exchange": dlx, **arguments})
        channel.queue_bind(q, src, "orig")
        return q, src, queues

    return _routed


def publish_and_reject(channel, exchange: str, q: str, headers: dict | None = None) -> dict | None:
    channel.basic_publish(exchange, "orig", b"m", pika.BasicProperties(headers=headers))
    method, props, _ = channel.basic_get(q)
    channel.basic_reject(method.delivery_tag, requeue=False)
    return props.headers


def test_without_dead_letter_routing_key_the_original_key_is_used(
    channel, routed, expect_message, nothing_for
):
    q, src, queues = routed(["orig", "other"])
    publish_and_reject(channel, src, q)
    method, props, _ = expect_message(channel, queues["orig"])
    assert method.routing_key == "orig"
    assert props.headers["x-death"][0]["exchange"] == src
    assert props.headers["x-death"][0]["routing-keys"] == ["orig"]
    nothing_for(channel, [queues["other"]], 0.05)


def test_dead_letter_routing_key_replaces_the_original_key(channel, routed, expect_message, nothing_for):
    q, src, queues = routed(["orig", "dl"], **{"x-dead-letter-routing-key": "dl"})
    publish_and_reject(channel, src, q)
    method, props, _ = expect_message(channel, queues["dl"])
    assert method.routing_key == "dl"
    assert props.headers["x-death"][0]["routing-keys"] == ["orig"]  # what the message was published with
    nothing_for(channel, [queues["orig"]], 0.05)


def test_cc_and_bcc_route_the_dead_letter_but_bcc_never_shows(channel, routed, expect_message, nothing_for):
    q, src, queues = routed(["orig", "c1", "b1", "none"])
    seen = publish_and_reject(channel, src, q, {"CC": ["c1"], "BCC": ["b1"], "app": "v"})
    assert seen == {"CC": ["c1"], "app": "v"}  # BCC is stripped at publish
    for key in ("orig", "c1", "b1"):
        _, props, body = expect_message(channel, queues[key])
        assert body == b"m"
        assert props.headers["CC"] == ["c1"] and "BCC" not in props.headers
        assert props.headers["x-death"][0]["routing-keys"] == ["orig", "c1"]
    nothing_for(channel, list(queues.values()), 0.05)


def test_dead_letter_routing_key_ignores_and_removes_cc(channel, routed, expect_message, nothing_for):
    q, src, queues = routed(["orig", "c1", "b1", "dl"], **{"x-dead-letter-routing-key": "dl"})
    publish_and_reject(channel, src, q, {"CC": ["c1"], "BCC": ["b1"]})
    _, props, _ = expect_message(channel, queues["dl"])
    assert "CC" not in props.headers and "BCC" not in props.headers
    assert props.headers["x-death"][0]["routing-keys"] == ["orig", "c1"]
    nothing_for(channel, [queues["orig"], queues["c1"], queues["b1"]], 0.05)


def test_missing_dead_letter_exchange_drops_the_message(channel, unique, declare, drain, expect_message):
    dlx = unique("dlx")
    q = declare(channel, "work", **{"x-dead-letter-exchange": dlx})
    reject_one(channel, q, b"lost")
    channel.confirm_delivery()  # a round trip: the channel survived the drop
    assert drain(channel, q) == []
    # the DLX is looked up when a message dies: declared later, it is used from then on
    channel.exchange_declare(dlx, "fanout")
    dlq = declare(channel, "dlq")
    channel.queue_bind(dlq, dlx)
    reject_one(channel, q, b"found")
    assert expect_message(channel, dlq)[2] == b"found"
    assert drain(channel, dlq) == []


def test_dead_letter_exchange_without_matching_binding_drops(channel, unique, declare, drain):
    dlx = unique("dlx")
    channel.exchange_declare(dlx, "direct")
    q = declare(channel, "work", **{"x-dead-letter-exchange": dlx})
    reject_one(channel, q)
    channel.confirm_delivery()
    assert drain(channel, q) == []


# ---------------------------------------------------------------------------------------------------------
# x-death
# ---------------------------------------------------------------------------------------------------------
def test_x_death_content_with_expiration(channel, with_dlq, expect_message):
    q, dlq = with_dlq(channel)
    reject_one(channel, q, expiration="60000", headers={"user": "kept"})
    _, props, _ = expect_message(channel, dlq)
    assert props.expiration is None
    headers = props.headers
    (entry,) = headers["x-death"]
    assert list(entry) == [
        "count",
        "reason",
        "queue",
        "time",
        "exchange",
        "routing-keys",
        "original-expiration",
    ]
    assert (entry["count"], entry["reason"], entry["queue"]) == (1, "rejected", q)
    assert (entry["exchange"], entry["routing-keys"], entry["original-expiration"]) == ("", [q], "60000")
    assert isinstance(entry["time"], datetime) and abs(entry["time"].timestamp() - time.time()) < 30
    assert headers["user"] == "kept"
    assert (headers["x-first-death-queue"], headers["x-first-death-reason"]) == (q, "rejected")
    assert headers["x-first-death-exchange"] == ""
    assert set(headers) - LAST_DEATH == {"user", "x-death"} | FIRST_DEATH


def test_retry_loop_through_rejection_increments_counts(channel, unique, declare, expect_message):
    """work --rejected--> retry (TTL) --expired--> work: counts go up, the latest death is first."""
    retryx = unique("retryx")
    channel.exchange_declare(retryx, "fanout")
    work = declare(channel, "work", **{"x-dead-letter-exchange": retryx})
    retry = declare(
        channel,
        "retry",
        **{"x-message-ttl": 50, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": work},
    )
    channel.queue_bind(retry, retryx)
    channel.basic_publish("", work, b"job")
    for n in (1, 2, 3):
        method, props, _ = expect_message(channel, work, auto_ack=False)
        if n > 1:
            assert deaths(props) == [(retry, "expired", n - 1), (work, "rejected", n - 1)]
            assert (props.headers["x-first-death-queue"], props.headers["x-first-death-reason"]) == (
                work,
                "rejected",
            )
            assert props.headers["x-death"][0]["exchange"] == retryx
        channel.basic_reject(method.delivery_tag, requeue=False)
    _, props, _ = expect_message(channel, work)
    assert deaths(props) == [(retry, "expired", 3), (work, "rejected", 3)]


@pytest.mark.extension
def test_x_last_death_headers_name_the_latest_death(channel, unique, declare, with_dlq, expect_message):
    """ottermq also writes RabbitMQ 3.13's ``x-last-death-{exchange,queue,reason}`` (3.10 does not, so
    the tests above ignore them): after one death they equal ``x-first-death-*``; after a second death in
    another queue they name it while ``x-first-death-*`` keep the first."""
    q, dlq = with_dlq(channel)
    reject_one(channel, q)
    _, props, _ = expect_message(channel, dlq)
    last = {k: v for k, v in props.headers.items() if k in LAST_DEATH}
    assert last == {"x-last-death-exchange": "", "x-last-death-queue": q, "x-last-death-reason": "rejected"}

    retryx = unique("retryx")  # work --rejected--> retryx --> retry --expired--> work
    channel.exchange_declare(retryx, "fanout")
    work = declare(channel, "work", **{"x-dead-letter-exchange": retryx})
    retry = declare(
        channel,
        "retry",
        **{"x-message-ttl": 50, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": work},
    )
    channel.queue_bind(retry, retryx)
    reject_one(channel, work)
    _, props, _ = expect_message(channel, work)
    headers = props.headers
    assert {k: v for k, v in headers.items() if k in LAST_DEATH} == {
        "x-last-death-exchange": retryx,
        "x-last-death-queue": retry,
        "x-last-death-reason": "expired",
    }
    assert {k: v for k, v in headers.items() if k in FIRST_DEATH} == {
        "x-first-death-exchange": "",
        "x-first-death-queue": work,
        "x-first-death-reason": "rejected",
    }


def test_cycle_without_rejection_is_dropped(channel, unique, declare, expect_message, nothing_for):
    """q1 --expired--> q2 --expired--> q1 closes a cycle: the message goes around once, then is dropped."""
    fx1, fx2 = unique("fx1"), unique("fx2")
    channel.exchange_declare(fx1, "fanout")
    channel.exchange_declare(fx2, "fanout")
    q1 = declare(channel, "q1", **{"x-message-ttl": 50, "x-dead-letter-exchange": fx1})
    q2 = declare(channel, "q2", **{"x-message-ttl": 50, "x-dead-letter-exchange": fx2})
    observer = declare(channel, "observer")
    channel.queue_bind(q2, fx1)
    channel.queue_bind(q1, fx2)
    channel.queue_bind(observer, fx2)
    channel.basic_publish("", q1, b"loop")
    _, props, body = expect_message(channel, observer)
    assert body == b"loop" and deaths(props) == [(q2, "expired", 1), (q1, "expired", 1)]
    nothing_for(channel, [q1, q2, observer], 0.3)  # not back in q1, not around again


def test_expiry_back_into_the_same_queue_is_dropped(channel, unique, nothing_for):
    q = unique("self")
    channel.queue_declare(
        q, arguments={"x-message-ttl": 50, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": q}
    )
    channel.confirm_delivery()  # queue.declare-ok may overtake unconfirmed publishes on RabbitMQ
    channel.basic_publish("", q, b"m")
    poll_until(
        lambda: channel.queue_declare(q, passive=True).method.message_count == 0,
        timeout=2,
        what=f"{q} empty (its message expired)",
    )
    nothing_for(channel, [q], 0.2)


def test_rejection_back_into_the_same_queue_continues(channel, unique, expect_message):
    q = unique("self")
    channel.queue_declare(q, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q})
    channel.basic_publish("", q, b"m")
    for n in (1, 2, 3):
        method, props, _ = expect_message(channel, q, auto_ack=False)
        assert n == 1 or deaths(props) == [(q, "rejected", n - 1)]
        channel.basic_reject(method.delivery_tag, requeue=False)
    _, props, body = expect_message(channel, q)
    assert body == b"m" and deaths(props) == [(q, "rejected", 3)]


# ---------------------------------------------------------------------------------------------------------
# message fidelity, on the wire
# ---------------------------------------------------------------------------------------------------------
def _shortstr(value: str) -> bytes:
    raw = value.encode()
    return bytes([len(raw)]) + raw


def _longstr(raw: bytes) -> bytes:
    return struct.pack(">I", len(raw)) + raw


def _table(entries: list[tuple[str, bytes]]) -> bytes:
    return _longstr(b"".join(_shortstr(k) + v for k, v in entries))


_FIXED = {
    "t": 1,
    "b": 1,
    "B": 1,
    "s": 2,
    "u": 2,
    "I": 4,
    "i": 4,
    "l": 8,
    "f": 4,
    "d": 8,
    "D": 5,
    "T": 8,
    "V": 0,
}
_PROPERTIES: list[tuple[str, int, str | int]] = [  # (name, flag bit, kind or fixed size), wire order
    ("content_type", 15, "s"),
    ("content_encoding", 14, "s"),
    ("headers", 13, "t"),
    ("delivery_mode", 12, 1),
    ("priority", 11, 1),
    ("correlation_id", 10, "s"),
    ("reply_to", 9, "s"),
    ("expiration", 8, "s"),
    ("message_id", 7, "s"),
    ("timestamp", 6, 8),
    ("type", 5, "s"),
    ("user_id", 4, "s"),
    ("app_id", 3, "s"),
    ("cluster_id", 2, "s"),
]


def split_properties(raw: bytes) -> dict[str, bytes]:
    """Property name -> the property's raw octets, without decoding anything."""
    (flags,) = struct.unpack_from(">H", raw)
    pos, out = 2, {}
    for name, bit, kind in _PROPERTIES:
        if not flags & (1 << bit):
            continue
        if kind == "s":
            size = 1 + raw[pos]
        elif kind == "t":
            size = 4 + struct.unpack_from(">I", raw, pos)[0]
        else:
            size = int(kind)
        out[name], pos = raw[pos : pos + size], pos + size
    assert pos == len(raw)
    return out


def split_table(raw: bytes) -> list[tuple[str, bytes]]:
    """A field table's top-level entries as ``(key, tag + raw value)``, in wire order."""
    pos, end, out = 4, 4 + struct.unpack_from(">I", raw)[0], []
    while pos < end:
        klen = raw[pos]
        key = raw[pos + 1 : pos + 1 + klen].decode()
        pos += 1 + klen
        tag = chr(raw[pos])
        size = 1 + (_FIXED[tag] if tag in _FIXED else 4 + struct.unpack_from(">I", raw, pos + 1)[0])
        out.append((key, raw[pos : pos + size]))
        pos += size
    return out


def raw_get(raw, queue: str) -> tuple[bytes, bytes]:
    """basic.get over the raw connection, polling: ``(raw properties, body)``."""

    def get_ok() -> bool:
        raw.send_frame(1, C.Basic.Get(queue=queue, no_ack=True))
        _, frame = raw.recv_frame()
        assert isinstance(frame, C.Basic.GetOk | C.Basic.GetEmpty), frame
        return isinstance(frame, C.Basic.GetOk)

    poll_until(get_ok, timeout=3, what=f"a message in {queue}")
    frame_type, _, payload = raw.recv_raw_frame()
    assert frame_type == FRAME_HEADER
    size = struct.unpack_from(">Q", payload, 4)[0]
    body = b""
    while len(body) < size:
        frame_type, _, chunk = raw.recv_raw_frame()
        assert frame_type == FRAME_BODY
        body += chunk
    return payload[12:], body


def test_dead_letter_keeps_properties_and_body_byte_for_byte(raw_connect, unique):
    """Only ``expiration`` goes and ``headers`` gains the death records; everything else is untouched."""
    user_headers = [
        ("zz", b"S" + _longstr(b"last")),
        ("I", b"I" + struct.pack(">i", -5)),
        ("l-small", b"l" + struct.pack(">q", 1)),
        ("b", b"b" + struct.pack(">b", -3)),
        ("u", b"u" + struct.pack(">H", 60000)),
        ("f", b"f" + struct.pack(">f", 1.5)),
        ("d", b"d" + struct.pack(">d", 2.25)),
        ("D", b"D" + struct.pack(">BI", 2, 12345)),
        ("T", b"T" + struct.pack(">Q", 1_700_000_000)),
        ("x", b"x" + _longstr(b"\x00\xff")),
        ("V", b"V"),
        ("A", b"A" + _longstr(b"I" + struct.pack(">i", 1) + b"S" + _longstr(b"two"))),
        ("F", b"F" + _table([("z", b"t\x01"), ("a", b"b\x01")])),
    ]
    fields = {
        "content_type": _shortstr("application/octet-stream"),
        "content_encoding": _shortstr("gzip"),
        "headers": _table(user_headers),
        "delivery_mode": b"\x02",
        "priority": b"\x07",
        "correlation_id": _shortstr("corr"),
        "reply_to": _shortstr("reply"),
        "expiration": _shortstr("3600000"),
        "message_id": _shortstr("mid"),
        "timestamp": struct.pack(">Q", 1_700_000_000),
        "type": _shortstr("type"),
        "user_id": _shortstr("guest"),
        "app_id": _shortstr("app"),
        "cluster_id": _shortstr("cluster"),
    }
    props = struct.pack(">H", 0xFFFC) + b"".join(fields[name] for name, _, _ in _PROPERTIES)
    body = bytes(range(256)) * 3

    raw = raw_connect()
    raw.open_channel(1)
    dlq, q = unique("dlq"), unique("work")
    raw.rpc(1, C.Queue.Declare(queue=dlq), C.Queue.DeclareOk)
    args = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq, "x-max-priority": 9}
    raw.rpc(1, C.Queue.Declare(queue=q, arguments=args), C.Queue.DeclareOk)
    header = struct.pack(">HHQ", 60, 0, len(body)) + props
    raw.send(
        pamqp.frame.marshal(C.Basic.Publish(exchange="", routing_key=q), 1)
        + struct.pack(">BHI", FRAME_HEADER, 1, len(header))
        + header
        + b"\xce"
    )
    raw.send_frame(1, pamqp.body.ContentBody(body))
    raw.send_frame(1, C.Basic.Get(queue=q, no_ack=False))
    _, get_ok = raw.expect(C.Basic.GetOk)
    raw.recv_raw_frame()
    raw.recv_raw_frame()
    raw.send_frame(1, C.Basic.Reject(delivery_tag=get_ok.delivery_tag, requeue=False))

    dead_props, dead_body = raw_get(raw, dlq)
    assert dead_body == body
    dead = split_properties(dead_props)
    assert "expiration" not in dead
    assert {k: v for k, v in dead.items() if k != "headers"} == {
        k: v for k, v in fields.items() if k not in ("headers", "expiration")
    }
    entries = split_table(dead["headers"])
    keys = [k for k, _ in entries]
    assert keys == sorted(keys, key=str.encode)  # RabbitMQ writes the table back sorted by key
    got = dict(entries)
    for key, value in user_headers:
        assert got[key] == value, key  # every type tag and width kept
    assert set(got) - LAST_DEATH == {k for k, _ in user_headers} | {"x-death"} | FIRST_DEATH
    xdeath = got["x-death"]
    assert xdeath[:1] == b"A"
    death = dict(split_table(xdeath[5 + 1 :]))  # one entry: skip the array's tag, length and the F tag
    assert death["count"] == b"l" + struct.pack(">q", 1)
    assert death["reason"] == b"S" + _longstr(b"rejected")
    assert death["queue"] == b"S" + _longstr(q.encode())
    assert death["time"][:1] == b"T" and len(death["time"]) == 9
    assert death["exchange"] == b"S" + _longstr(b"")
    assert death["routing-keys"] == b"A" + _longstr(b"S" + _longstr(q.encode()))
    assert death["original-expiration"] == b"S" + _longstr(b"3600000")
    assert got["x-first-death-reason"] == b"S" + _longstr(b"rejected")


# ---------------------------------------------------------------------------------------------------------
# x-delivery-limit
# ---------------------------------------------------------------------------------------------------------
def _redeliver_until_dead(conn, ch, q: str, dlq: str) -> tuple[list, tuple]:
    seen: list[tuple[bool, object]] = []

    def on_message(c, method, props, body):
        seen.append((method.redelivered, (props.headers or {}).get("x-delivery-count")))
        c.basic_nack(method.delivery_tag, requeue=True)

    ch.basic_qos(prefetch_count=10)
    tag = ch.basic_consume(q, on_message)
    ch.basic_publish("", q, b"poison", pika.BasicProperties(headers={"app": "v"}))

    def dead():
        conn.process_data_events(time_limit=0.01)
        got = ch.basic_get(dlq, auto_ack=True)
        return got if got[0] is not None else None

    dead_letter = poll_until(dead, timeout=5, what=f"a dead letter in {dlq}")
    ch.basic_cancel(tag)
    return seen, dead_letter


@pytest.mark.extension
def test_classic_queue_delivery_limit(connect, with_dlq):
    """ottermq: ``x-delivery-limit: 2`` on a classic queue behaves like a RabbitMQ quorum queue's.

    There is nothing here both brokers do: RabbitMQ 3.10 refuses the argument on a classic queue (406
    ``PRECONDITION_FAILED - invalid arg 'x-delivery-limit' for queue '<q>' in vhost '/' of queue type
    rabbit_classic_queue``). The expected values are what RabbitMQ 3.10.8 does with ``x-queue-type:
    quorum``, ``x-delivery-limit: 2`` (``e2e/test_quorum_queues.py`` asserts them on both brokers): each
    redelivery counts in ``x-delivery-count``, the third nack dead-letters with reason ``delivery_limit``,
    and the dead letter is the message as published, without ``x-delivery-count``.
    """
    conn = connect()
    ch = conn.channel()
    q, dlq = with_dlq(ch, **{"x-delivery-limit": 2})
    seen, (_, props, body) = _redeliver_until_dead(conn, ch, q, dlq)
    assert seen == [(False, None), (True, 1), (True, 2)]
    assert body == b"poison" and deaths(props) == [(q, "delivery_limit", 1)]
    assert props.headers["x-first-death-reason"] == "delivery_limit"
    assert props.headers["app"] == "v" and "x-delivery-count" not in props.headers
