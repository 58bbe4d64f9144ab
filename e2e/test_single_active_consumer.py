"""Single active consumer (``x-single-active-consumer: true``), as RabbitMQ 3.10.8 does it, measured there
first (``AMQP_URL=... pytest e2e/test_single_active_consumer.py -m "not extension"`` runs it there).

- The first consumer registered gets every message; the others wait, whatever their ``x-priority``. Only
  the active consumer's prefetch limits delivery; waiting consumers get nothing.
- When the active consumer goes (``basic.cancel``, its channel closed, its connection closed or lost, a
  consumer timeout closing its channel) the next one is active at once: on a classic queue the one with
  the highest ``x-priority`` (the earliest registered among equals), on a quorum queue the earliest
  registered. A cancelled consumer keeps its unacked messages until it settles them or its channel
  closes; returned, they go to the new active consumer, redelivered, ahead of the ready ones.
- ``basic.get`` works on a classic queue and is refused on a quorum queue (405). A classic queue
  refuses every exclusive ``basic.consume`` (403), a quorum queue ignores the flag.
- The management API shows ``single_active_consumer_tag`` (classic) or ``single_active_consumer_ctag``
  (quorum) and, per consumer, ``active`` and ``activity_status`` (``single_active``, ``waiting``; ``up``
  on other queues). ``single-active-consumer`` is no policy key in 3.10.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

import pika
import pytest

from .polling import poll_until

QUEUE_TYPES = ["classic", "quorum"]
STATS_TIMEOUT = 20  # RabbitMQ's management stats are emitted every 5 s


class Recorder:
    """A ``basic.consume`` on its own channel that records what it is given."""

    def __init__(
        self,
        conn: pika.BlockingConnection,
        queue: str,
        tag: str,
        *,
        prefetch: int = 0,
        auto_ack: bool = False,
        exclusive: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.conn = conn
        self.tag = tag
        self.channel = conn.channel()
        if prefetch:
            self.channel.basic_qos(prefetch_count=prefetch)
        self.got: list[tuple[str, bool, int]] = []  # (body, redelivered, delivery tag)
        self.channel.basic_consume(
            queue, self._on, auto_ack=auto_ack, consumer_tag=tag, exclusive=exclusive, arguments=arguments
        )

    def _on(self, _ch: Any, method: Any, _props: Any, body: bytes) -> None:
        self.got.append((body.decode(), method.redelivered, method.delivery_tag))

    @property
    def bodies(self) -> list[str]:
        return [body for body, _, _ in self.got]


def pump(*recorders: Recorder) -> None:
    """Let each recorder's connection take in what the broker sent (a channel the broker closed is fine)."""
    for conn in {id(r.conn): r.conn for r in recorders}.values():
        if conn.is_open:
            try:
                conn.process_data_events(0)
            except pika.exceptions.ChannelClosedByBroker:
                pass


def wait_for(recorders: list[Recorder], condition: Callable[[], bool], what: str, timeout: float = 5) -> None:
    def check() -> bool:
        pump(*recorders)
        return condition()

    poll_until(check, timeout=timeout, what=what)


@pytest.fixture
def sac_queue(unique: Callable[[str], str]) -> Callable[..., str]:
    """Declare a single-active-consumer queue of a type (durable: quorum queues must be)."""

    def _declare(ch: Any, queue_type: str, **arguments: Any) -> str:
        name = unique(f"sac.{queue_type}")
        args = {"x-single-active-consumer": True, **arguments}
        if queue_type == "quorum":
            args["x-queue-type"] = "quorum"
        ch.queue_declare(name, durable=True, arguments=args)
        return name

    return _declare


def ready(ch: Any, queue: str) -> int:
    return int(ch.queue_declare(queue, passive=True).method.message_count)


def publish(ch: Any, queue: str, *bodies: str) -> None:
    for body in bodies:
        ch.basic_publish("", queue, body.encode())


def _path(broker: Any, queue: str) -> str:
    return f"/api/queues/{urllib.parse.quote(broker.vhost, safe='')}/{urllib.parse.quote(queue, safe='')}"


# -- who is active ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_the_first_registered_consumer_gets_everything_whatever_the_priorities(
    connect, sac_queue, queue_type
):
    ch = connect().channel()
    q = sac_queue(ch, queue_type)
    recorders = [
        Recorder(connect(), q, f"c{i}", arguments={"x-priority": priority})
        for i, priority in enumerate((0, 5, 9))
    ]
    # declare-ok counts a classic queue's waiting consumers, not a quorum queue's (rabbit_fifo:query_stat)
    assert ch.queue_declare(q, passive=True).method.consumer_count == (3 if queue_type == "classic" else 1)
    publish(ch, q, *(f"m{i}" for i in range(30)))
    first, *others = recorders
    wait_for(recorders, lambda: len(first.got) == 30, "30 messages for the first consumer")
    assert first.bodies == [f"m{i}" for i in range(30)]
    assert [r.got for r in others] == [[], []]


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_cancel_hands_over_at_once_and_the_unacked_follow_when_nacked(connect, sac_queue, queue_type):
    ch = connect().channel()
    q = sac_queue(ch, queue_type)
    a, b, c = recorders = [Recorder(connect(), q, tag) for tag in "abc"]
    publish(ch, q, "m0", "m1", "m2")
    wait_for(recorders, lambda: len(a.got) == 3, "3 messages for a")
    c.channel.basic_cancel("c")  # a waiting consumer goes: nothing changes
    publish(ch, q, "m3")
    wait_for(recorders, lambda: len(a.got) == 4, "m3 for a")
    a.channel.basic_cancel("a")
    publish(ch, q, "m4", "m5")
    wait_for(recorders, lambda: b.bodies == ["m4", "m5"], "b active at once")
    assert a.bodies == ["m0", "m1", "m2", "m3"]  # kept by a, unacked
    a.channel.basic_nack(0, multiple=True, requeue=True)
    wait_for(recorders, lambda: len(b.got) == 6, "a's returns for b")
    assert [(body, redelivered) for body, redelivered, _ in b.got] == [
        ("m4", False),
        ("m5", False),
        ("m0", True),
        ("m1", True),
        ("m2", True),
        ("m3", True),
    ]
    assert c.got == []


@pytest.mark.parametrize(
    ("queue_type", "successor"),
    [("classic", "high"), ("quorum", "second")],
    ids=["classic-highest-priority", "quorum-registration-order"],
)
def test_which_consumer_is_active_next(connect, sac_queue, queue_type, successor):
    ch = connect().channel()
    q = sac_queue(ch, queue_type)
    conn = connect()  # one connection, consumers on several channels: registration order counts
    first = Recorder(conn, q, "first")
    second = Recorder(conn, q, "second")
    high = Recorder(connect(), q, "high", arguments={"x-priority": 5})
    recorders = [first, second, high]
    first.channel.basic_cancel("first")
    publish(ch, q, "m0", "m1")
    chosen = {"high": high, "second": second}[successor]
    wait_for(recorders, lambda: chosen.bodies == ["m0", "m1"], f"{successor} active next")
    assert [r.got for r in recorders if r is not chosen] == [[], []]


# -- hand-over when the active consumer's channel or connection goes ---------------------------------------
def _active_with_two_unacked(connect: Any, sac_queue: Any, queue_type: str) -> tuple[Any, str, Recorder]:
    """A queue whose active consumer (prefetch 2) holds m0 and m1; m2..m4 are ready."""
    ch = connect().channel()
    q = sac_queue(ch, queue_type)
    active = Recorder(connect(), q, "active", prefetch=2)
    publish(ch, q, *(f"m{i}" for i in range(5)))
    wait_for([active], lambda: len(active.got) == 2 and ready(ch, q) == 3, "2 unacked, 3 ready")
    return ch, q, active


RETURNED_FIRST = [("m0", True), ("m1", True), ("m2", False), ("m3", False), ("m4", False)]
READY_FIRST = [("m2", False), ("m3", False), ("m4", False), ("m0", True), ("m1", True)]


def _expect_handover(ch: Any, q: str, successor: Recorder, order: list[tuple[str, bool]]) -> None:
    wait_for([successor], lambda: len(successor.got) == 5, "every message for the new active consumer")
    assert [(body, redelivered) for body, redelivered, _ in successor.got] == order
    assert ready(ch, q) == 0


@pytest.mark.parametrize("how", ["channel", "connection"])
@pytest.mark.parametrize(
    ("queue_type", "order"), [("classic", RETURNED_FIRST), ("quorum", READY_FIRST)], ids=QUEUE_TYPES
)
def test_closing_the_active_consumer_hands_over_its_unacked(connect, sac_queue, queue_type, order, how):
    """pika cancels a channel's consumers before it closes the channel (and closes the channels of a
    connection before it): the cancel hands over first. A quorum queue's new active consumer takes what
    is ready at once and the returned messages after them; a classic queue runs only when the channel
    is gone, returned messages first, in their places."""
    ch, q, active = _active_with_two_unacked(connect, sac_queue, queue_type)
    successor = Recorder(connect(), q, "next")
    assert ready(ch, q) == 3  # the waiting consumer took nothing
    (active.channel if how == "channel" else active.conn).close()
    _expect_handover(ch, q, successor, order)


@pytest.mark.parametrize(
    ("queue_type", "order"),
    [
        ("classic", [("m0", True), ("m1", False), ("m2", False)]),
        ("quorum", [("m1", False), ("m2", False), ("m0", True)]),
    ],
    ids=QUEUE_TYPES,
)
def test_cancelling_a_blocked_active_consumer(connect, sac_queue, queue_type, order):
    """The active consumer (prefetch 1) holds m0, m1 and m2 are ready, it cancels, then nacks m0. A quorum
    queue gives the ready messages to the new active consumer at the cancel; a classic queue at its next
    run (here the requeue), the returned message in its place."""
    ch = connect().channel()
    q = sac_queue(ch, queue_type)
    active = Recorder(connect(), q, "active", prefetch=1)
    successor = Recorder(connect(), q, "next")
    publish(ch, q, "m0", "m1", "m2")
    wait_for([active], lambda: len(active.got) == 1 and ready(ch, q) == 2, "m0 delivered, 2 ready")
    active.channel.basic_cancel("active")
    active.channel.basic_nack(active.got[0][2], requeue=True)
    wait_for([active, successor], lambda: len(successor.got) == 3, "three messages for the new active one")
    assert [(body, redelivered) for body, redelivered, _ in successor.got] == order


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_a_lost_connection_hands_over_its_unacked(connect, raw_connect, sac_queue, queue_type):
    from pamqp import commands as spec

    ch = connect().channel()
    q = sac_queue(ch, queue_type)
    raw = raw_connect()
    raw.open_channel(1)
    raw.rpc(1, spec.Basic.Qos(prefetch_count=2), spec.Basic.QosOk)
    raw.rpc(1, spec.Basic.Consume(queue=q, consumer_tag="raw"), spec.Basic.ConsumeOk)
    successor = Recorder(connect(), q, "next")
    publish(ch, q, *(f"m{i}" for i in range(5)))
    delivered = 0
    while delivered < 2:  # each Deliver is followed by its content header and body frames
        delivered += isinstance(raw.recv_frame()[1], spec.Basic.Deliver)
    poll_until(lambda: ready(ch, q) == 3, what="2 unacked on the raw connection, 3 ready")
    raw.close()  # the socket goes without connection.close (nor basic.cancel): returned messages first
    _expect_handover(ch, q, successor, RETURNED_FIRST)


# -- what the active consumer gets -----------------------------------------------------------------------
@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_prefetch_limits_the_active_consumer_and_the_waiting_get_nothing(connect, sac_queue, queue_type):
    ch = connect().channel()
    q = sac_queue(ch, queue_type)
    active = Recorder(connect(), q, "active", prefetch=2)
    waiting = Recorder(connect(), q, "waiting")
    recorders = [active, waiting]
    publish(ch, q, *(f"m{i}" for i in range(6)))
    wait_for(recorders, lambda: len(active.got) == 2 and ready(ch, q) == 4, "2 delivered, 4 ready")
    active.channel.basic_ack(active.got[0][2])
    wait_for(recorders, lambda: len(active.got) == 3 and ready(ch, q) == 3, "one more after the ack")
    assert active.bodies == ["m0", "m1", "m2"] and waiting.got == []


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_a_no_ack_active_consumer_takes_everything(connect, sac_queue, queue_type):
    ch = connect().channel()
    q = sac_queue(ch, queue_type)
    active = Recorder(connect(), q, "active", auto_ack=True)
    waiting = Recorder(connect(), q, "waiting")
    publish(ch, q, *(f"m{i}" for i in range(20)))
    wait_for([active, waiting], lambda: len(active.got) == 20, "20 messages, no ack")
    assert waiting.got == [] and ready(ch, q) == 0


# -- basic.get and exclusive consumers --------------------------------------------------------------------
def test_basic_get_works_on_a_classic_queue(connect, sac_queue):
    ch = connect().channel()
    q = sac_queue(ch, "classic")
    publish(ch, q, "alone")
    poll_until(lambda: ready(ch, q) == 1, what="the message ready")
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert body == b"alone"
    active = Recorder(connect(), q, "active", prefetch=1)
    Recorder(connect(), q, "waiting")
    publish(ch, q, "m0", "m1", "m2")
    wait_for([active], lambda: len(active.got) == 1 and ready(ch, q) == 2, "the active consumer blocked")
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert (body, method.message_count) == (b"m1", 1)  # from the head, beside the blocked active consumer


def test_basic_get_is_refused_on_a_quorum_queue_405(connect, sac_queue, channel_error, broker):
    ch = connect().channel()
    q = sac_queue(ch, "quorum")
    publish(ch, q, "m")
    text = (
        f"RESOURCE_LOCKED - cannot obtain access to locked queue '{q}' in vhost '{broker.vhost}'. basic.get"
        " operations are not supported by quorum queues with single active consumer"
    )
    channel_error(lambda: ch.basic_get(q, auto_ack=True), 405, text)
    status, body = broker.api(
        _path(broker, q) + "/get", "POST", {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
    )
    assert (status, body) == (400, {"error": "bad_request", "reason": f"405 {text}"})


def test_a_classic_queue_refuses_exclusive_consumers_403(connect, sac_queue, channel_error, broker):
    ch = connect().channel()
    q = sac_queue(ch, "classic")
    channel_error(
        lambda: ch.basic_consume(q, lambda *a: None, exclusive=True),  # even with no consumer
        403,
        f"ACCESS_REFUSED - queue '{q}' in vhost '{broker.vhost}' in exclusive use",
    )


@pytest.mark.parametrize(
    ("priority", "type_name"),
    [("5", "longstr"), (True, "bool"), (None, "void"), ({"a": 1}, "table"), ([1], "array")],
)
@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_x_priority_must_be_an_integer_406(
    connect, sac_queue, channel_error, broker, queue_type, priority, type_name
):
    """RabbitMQ checks a consumer's arguments before anything else about the consume (a plain queue too)."""
    ch = connect().channel()
    q = sac_queue(ch, queue_type)
    channel_error(
        lambda: ch.basic_consume(q, lambda *a: None, arguments={"x-priority": priority}),
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-priority' for queue '{q}' in vhost '{broker.vhost}': "
        f'"expected integer, got {type_name}"',
    )
    ch = connect().channel()
    ch.basic_consume(q, lambda *a: None, arguments={"x-priority": 2**40})  # a long is an integer


def test_a_quorum_queue_ignores_the_exclusive_flag(connect, sac_queue):
    ch = connect().channel()
    q = sac_queue(ch, "quorum")
    exclusive = Recorder(connect(), q, "exclusive", exclusive=True)
    other = Recorder(connect(), q, "other")
    publish(ch, q, "m0")
    wait_for([exclusive, other], lambda: exclusive.bodies == ["m0"], "m0 for the exclusive (first) consumer")
    exclusive.channel.basic_cancel("exclusive")
    publish(ch, q, "m1")
    wait_for([exclusive, other], lambda: other.bodies == ["m1"], "m1 for the next one")


# -- what the management API shows -----------------------------------------------------------------------
def _queue_json(broker: Any, queue: str) -> dict[str, Any]:
    status, body = broker.api(_path(broker, queue))
    assert status == 200, body
    return dict(body)


def _activity(details: list[dict[str, Any]]) -> dict[str, tuple[bool, str]]:
    return {d["consumer_tag"]: (d["active"], d["activity_status"]) for d in details}


@pytest.mark.parametrize(
    ("queue_type", "field", "absent"),
    [
        ("classic", "single_active_consumer_tag", "single_active_consumer_ctag"),
        ("quorum", "single_active_consumer_ctag", "single_active_consumer_tag"),
    ],
)
def test_management_shows_the_active_and_the_waiting(connect, sac_queue, broker, queue_type, field, absent):
    ch = connect().channel()
    q = sac_queue(ch, queue_type)
    conn = connect()
    first, _second = Recorder(conn, q, "first"), Recorder(conn, q, "second")
    expected = {"first": (True, "single_active"), "second": (False, "waiting")}

    def shown() -> dict[str, Any] | None:
        body = _queue_json(broker, q)
        if body.get(field) == "first" and _activity(body.get("consumer_details") or []) == expected:
            return body
        return None

    body = poll_until(shown, timeout=STATS_TIMEOUT, what=f"{field} and consumer_details")
    assert absent not in body and body["consumers"] == 2

    def listed() -> bool:
        status, consumers = broker.api(f"/api/consumers/{urllib.parse.quote(broker.vhost, safe='')}")
        mine = [c for c in consumers if c["queue"]["name"] == q]
        return status == 200 and _activity(mine) == expected

    poll_until(listed, timeout=STATS_TIMEOUT, what="/api/consumers entries")
    first.channel.basic_cancel("first")
    expected = {"second": (True, "single_active")}

    def handed_over() -> bool:
        body = _queue_json(broker, q)
        return body.get(field) == "second" and _activity(body.get("consumer_details") or []) == expected

    poll_until(handed_over, timeout=STATS_TIMEOUT, what=f"{field} after the hand-over")


@pytest.mark.parametrize(
    ("queue_type", "field"),
    [("classic", "single_active_consumer_tag"), ("quorum", "single_active_consumer_ctag")],
)
def test_management_without_single_active_consumer_shows_up(connect, unique, broker, queue_type, field):
    ch = connect().channel()
    q = unique("plain")
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": queue_type})
    Recorder(connect(), q, "one")
    Recorder(connect(), q, "two")

    def shown() -> bool:
        body = _queue_json(broker, q)
        details = body.get("consumer_details") or []
        up = {"one": (True, "up"), "two": (True, "up")}
        return field in body and body[field] is None and _activity(details) == up

    poll_until(shown, timeout=STATS_TIMEOUT, what="consumers up, no single active consumer")


def test_single_active_consumer_is_no_policy_key(broker, unique):
    name = unique("sac-policy")
    path = f"/api/policies/{urllib.parse.quote(broker.vhost, safe='')}/{urllib.parse.quote(name, safe='')}"
    status, body = broker.api(
        path,
        "PUT",
        {"pattern": "^nothing$", "definition": {"single-active-consumer": True}, "apply-to": "queues"},
    )
    assert (status, body) == (
        400,
        {
            "error": "bad_request",
            "reason": 'Validation failed\n\n[{&lt;&lt;"single-active-consumer"&gt;&gt;,true}]'
            " are not recognised policy settings\n",
        },
    )


# -- consumer timeout (an ottermq extension here: RabbitMQ 3.10 only has the node-wide timeout, checked once
#    a minute; it closes the channel as a channel close does, so the hand-over is the one above) ------------
@pytest.mark.extension
@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_a_consumer_timeout_hands_over_to_the_next_consumer(broker_process, queue_type):
    b = broker_process({"OTTERMQ_CONSUMER_TIMEOUT": "1s"}).start()
    conns = [pika.BlockingConnection(b.params()) for _ in range(3)]
    try:
        ch = conns[0].channel()
        q = f"sac.timeout.{queue_type}"
        ch.queue_declare(
            q, durable=True, arguments={"x-single-active-consumer": True, "x-queue-type": queue_type}
        )
        slow = Recorder(conns[1], q, "slow")
        successor = Recorder(conns[2], q, "next")
        publish(ch, q, "m0", "m1")
        wait_for([slow, successor], lambda: len(slow.got) == 2, "both messages for the first consumer")
        wait_for(
            [slow, successor],
            lambda: not slow.channel.is_open and len(successor.got) == 2,
            "the timeout to close the slow channel and hand over",
            timeout=10,
        )
        assert [(body, redelivered) for body, redelivered, _ in successor.got] == [("m0", True), ("m1", True)]
    finally:
        for conn in conns:
            if conn.is_open:
                conn.close()
