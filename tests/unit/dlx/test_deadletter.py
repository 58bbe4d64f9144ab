"""``DeadLetterer`` with a real ``VHost`` and real queues: routing to the DLX, drops and their
counter, cycle detection, the worklist, and what the archive is told. No loop, no sleeps.

(The rate-limited "DLX not found" warning has its own file: ``test_missing_dlx_warning.py``;
the ``x-death`` bytes are pinned in ``test_xdeath.py``.)
"""

from __future__ import annotations

from typing import Any

import pytest
from ottermq.amqp.props import decode_properties
from ottermq.dlx.deadletter import DeadLetterer, cycle_queues, is_cycle
from ottermq.ttl.deadline import expires_at
from ottermq.vhost.message import Entry, Message, sender_selected
from ottermq.vhost.policy import make_policy
from ottermq.vhost.queue import Queue
from ottermq.vhost.vhost import VHost
from pamqp import commands

NOW_MS = 1_700_000_000_000


class FakeTTL:
    """Fake epoch-ms clock and timers; ``advance`` fires the due message timers."""

    enabled = True

    def __init__(self) -> None:
        self.t = NOW_MS
        self.armed: dict[Any, int] = {}

    def now(self) -> int:
        return self.t

    def expires_at(self, now: int, queue_ttl: int | None, message_ttl: int | None) -> int | None:
        return expires_at(now, queue_ttl, message_ttl)

    def schedule(self, target: Any, deadline: int) -> None:
        if target not in self.armed or deadline < self.armed[target]:
            self.armed[target] = deadline

    def cancel(self, target: Any) -> None:
        self.armed.pop(target, None)

    def schedule_queue_expiry(self, target: Any, at: int) -> None:
        pass

    def cancel_queue_expiry(self, target: Any) -> None:
        pass

    def advance(self, ms: int) -> None:
        self.t += ms
        while True:
            due = [(at, q) for q, at in self.armed.items() if at <= self.t]
            if not due:
                return
            queue = min(due, key=lambda d: d[0])[1]
            del self.armed[queue]
            queue.expire(self.t)


class Recorder:
    """A ``DeadLetterRecorder`` that keeps every ``record`` call."""

    enabled = True

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def record(
        self,
        time_ms: int,
        vhost: str,
        queue: str,
        reason: str,
        dlx: str | None,
        items: list[Any],
        policy: str | None = None,
        limit: tuple[str, int, str] | None = None,
    ) -> None:
        rows = [tuple(items[i : i + 5]) for i in range(0, len(items), 5)]
        self.calls.append(
            dict(
                time_ms=time_ms,
                vhost=vhost,
                queue=queue,
                reason=reason,
                dlx=dlx,
                rows=rows,
                policy=policy,
                limit=limit,
            )
        )

    def drops(self) -> list[str | None]:
        return [row[4] for call in self.calls for row in call["rows"]]


class World:
    """A vhost wired with a ``DeadLetterer`` sink, a fake clock and a recorder."""

    def __init__(self, enabled: bool = True) -> None:
        self.ttl = FakeTTL()
        self.vh = VHost(ttl=self.ttl)
        self.archive = Recorder()
        self.dl = DeadLetterer(self.vh, self.ttl.now, enabled=enabled, archive=self.archive)
        self.vh.sink = self.dl  # before any queue is declared: queues take the sink at declare

    def queue(self, name: str, **arguments: Any) -> Queue:
        return self.vh.declare_queue(name, False, False, False, False, arguments or None, None)

    def exchange(self, name: str, type_: str = "direct") -> None:
        self.vh.declare_exchange(name, type_, False, False, False, False, None)

    def bind(self, exchange: str, queue: str, key: str = "") -> None:
        self.vh.bind(exchange, ("queue", queue), key, {})

    def publish(self, key: str, body: bytes = b"m", exchange: str = "", **props: Any) -> None:
        raw = commands.Basic.Properties(**props).marshal()
        expiration = int(props["expiration"]) if "expiration" in props else None
        message, _ = sender_selected(Message(exchange, key, raw, body, False, None, expiration))
        result = self.vh.publish(self.vh.exchanges[exchange] if exchange else None, message)
        assert result.routed

    def reject(self, queue: str) -> None:
        q = self.vh.queues[queue]
        entry = q.pop()
        assert entry is not None
        q.reject([entry])

    def take(self, queue: str) -> list[Message]:
        q = self.vh.queues[queue]
        out = []
        while (entry := q.pop()) is not None:
            out.append(entry.message)
        return out


def deaths(message: Message) -> list[tuple[str, str, int]]:
    return [(d["queue"], d["reason"], d["count"]) for d in (message.headers or {})["x-death"]]


# -- routing --------------------------------------------------------------------------------------------
def test_dead_letter_goes_to_the_dlx_with_the_dead_letter_routing_key():
    w = World()
    w.exchange("dlx")
    w.queue("dlq")
    w.bind("dlx", "dlq", "dead")
    w.queue("work", **{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead"})
    w.publish("work", b"payload", expiration="60000", content_type="text/plain", headers={"CC": ["x"]})
    w.reject("work")
    [dead] = w.take("dlq")
    assert (dead.exchange, dead.routing_key, dead.body) == ("dlx", "dead", b"payload")
    props = decode_properties(dead.raw_props)
    assert props.expiration is None and props.content_type == "text/plain"
    headers = dead.headers or {}
    assert "CC" not in headers  # replaced routing keys strip CC (RabbitMQ)
    [death] = headers["x-death"]
    assert (death["queue"], death["reason"], death["count"], death["exchange"]) == ("work", "rejected", 1, "")
    assert death["routing-keys"] == ["work", "x"]
    assert death["original-expiration"] == "60000"
    assert (w.dl.routed, w.dl.dropped) == (1, 0)


def test_without_a_dead_letter_routing_key_the_original_keys_route_including_cc_and_bcc():
    w = World()
    w.exchange("src")
    w.exchange("dlx")
    w.queue("work", **{"x-dead-letter-exchange": "dlx"})
    for key in ("k", "cc1", "bcc1"):
        w.bind("src", "work", key)
    for name in ("dl_k", "dl_cc", "dl_bcc", "dl_other"):
        w.queue(name)
    w.bind("dlx", "dl_k", "k")
    w.bind("dlx", "dl_cc", "cc1")
    w.bind("dlx", "dl_bcc", "bcc1")
    w.bind("dlx", "dl_other", "other")
    w.publish("k", b"sel", exchange="src", headers={"CC": ["cc1"], "BCC": ["bcc1"]})
    assert w.vh.queues["work"].message_count == 1  # one copy although three keys matched
    w.reject("work")
    got = {name: w.take(name) for name in ("dl_k", "dl_cc", "dl_bcc", "dl_other")}
    assert {name: len(messages) for name, messages in got.items()} == {
        "dl_k": 1,
        "dl_cc": 1,
        "dl_bcc": 1,
        "dl_other": 0,
    }
    dead = got["dl_k"][0]
    assert "BCC" not in (dead.headers or {})  # removed at publish, as RabbitMQ does
    assert (dead.headers or {})["x-death"][0]["routing-keys"] == ["k", "cc1"]  # BCC never listed
    assert w.dl.routed == 1


def test_default_exchange_dlx_routes_by_queue_name():
    w = World()
    w.queue("dlq")
    w.queue(
        "work", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq", "x-message-ttl": 100}
    )
    w.publish("work", b"old")
    w.ttl.advance(100)
    [dead] = w.take("dlq")
    assert deaths(dead) == [("work", "expired", 1)]
    assert dead.exchange == "" and dead.routing_key == "dlq"


# -- drops ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arguments, enabled, drop",
    [
        ({"x-dead-letter-exchange": "dlx"}, False, "dlx_disabled"),
        ({}, True, "no_dlx"),
        ({"x-dead-letter-exchange": "gone"}, True, "dlx_missing"),
        ({"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "unbound"}, True, "no_route"),
    ],
)
def test_dead_letters_that_cannot_be_routed_are_dropped_counted_and_archived(arguments, enabled, drop):
    w = World(enabled=enabled)
    w.exchange("dlx")
    w.queue("dlq")
    w.bind("dlx", "dlq", "dead")
    w.queue("work", **arguments)
    w.publish("work", b"a")
    w.publish("work", b"b")
    w.reject("work")
    w.reject("work")
    assert w.take("dlq") == []
    assert (w.dl.dropped, w.dl.routed) == (2, 0)
    assert w.archive.drops() == [drop, drop]
    dlx = arguments.get("x-dead-letter-exchange")
    assert [(c["queue"], c["reason"], c["dlx"]) for c in w.archive.calls] == [("work", "rejected", dlx)] * 2
    row = w.archive.calls[0]["rows"][0]
    if drop == "no_route":  # routed as far as the DLX: the count and key are known
        assert row[2:4] == (1, "unbound")
    else:
        assert row[2:4] == (None, None)


def test_missing_dlx_is_looked_up_at_dead_letter_time():
    w = World()
    w.queue("work", **{"x-dead-letter-exchange": "late", "x-dead-letter-routing-key": "dlq"})
    w.publish("work")
    w.reject("work")
    assert w.dl.dropped == 1
    w.exchange("late", "fanout")  # declared after the queue: used from now on
    w.queue("dlq")
    w.bind("late", "dlq")
    w.publish("work")
    w.reject("work")
    assert len(w.take("dlq")) == 1 and w.dl.routed == 1


# -- cycles -------------------------------------------------------------------------------------------------
def test_is_cycle_needs_the_queue_and_no_rejected_death_on_the_way():
    expired = {"queue": "a", "reason": "expired"}
    assert not is_cycle("a", [])
    assert not is_cycle("b", [expired])
    assert is_cycle("a", [expired])
    assert is_cycle("a", [{"queue": "b", "reason": "maxlen"}, expired])
    assert not is_cycle("a", [{"queue": "b", "reason": "rejected"}, expired])
    assert not is_cycle("a", [{"queue": "a", "reason": "rejected"}])
    assert is_cycle("a", ["junk", expired])  # a non-table entry does not break the cycle


def test_an_expiry_cycle_is_cut_and_archived_as_cycle():
    w = World()
    w.queue("a", **{"x-message-ttl": 10, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "b"})
    w.queue("b", **{"x-message-ttl": 10, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "a"})
    w.publish("a", b"loop")
    w.ttl.advance(10)  # a -> b
    assert w.vh.queues["b"].message_count == 1
    w.ttl.advance(10)  # b -> a would close the cycle: dropped
    assert w.vh.queues["a"].message_count == 0 and w.vh.queues["b"].message_count == 0
    assert (w.dl.routed, w.dl.dropped) == (1, 1)
    assert w.archive.drops() == [None, "cycle"]
    last = w.archive.calls[-1]
    assert (last["queue"], last["reason"]) == ("b", "expired")


def test_a_self_cycle_by_expiry_is_cut_but_a_rejection_loop_continues():
    w = World()
    w.queue(
        "self", **{"x-message-ttl": 10, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "self"}
    )
    w.publish("self", b"s")
    w.ttl.advance(10)
    assert w.vh.queues["self"].message_count == 0 and w.archive.drops() == ["cycle"]
    # rejected: a consumer decided, so the message comes back, again and again
    w.queue("retry", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "retry"})
    w.publish("retry", b"r")
    for _ in range(3):
        w.reject("retry")
    [back] = w.take("retry")
    assert deaths(back) == [("retry", "rejected", 3)]


def test_a_cycle_with_a_rejection_on_it_continues():
    w = World()
    w.queue("a", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "b"})
    w.queue("b", **{"x-message-ttl": 10, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "a"})
    w.publish("a", b"m")
    w.reject("a")  # a -(rejected)-> b
    w.ttl.advance(10)  # b -(expired)-> a: a rejection lies on the cycle, so it is delivered
    [back] = w.take("a")
    assert deaths(back) == [("b", "expired", 1), ("a", "rejected", 1)]
    assert w.dl.dropped == 0


def test_cycle_detection_drops_only_the_queues_that_close_it():
    w = World()
    w.exchange("fan", "fanout")
    w.queue("a", **{"x-message-ttl": 10, "x-dead-letter-exchange": "fan"})
    w.queue("other")
    w.bind("fan", "a")
    w.bind("fan", "other")
    w.publish("a", b"m")
    w.ttl.advance(10)
    assert len(w.take("other")) == 1
    assert w.vh.queues["a"].message_count == 0  # the copy back into "a" was cut
    assert w.dl.routed == 1 and w.archive.drops() == [None]


# -- the worklist ---------------------------------------------------------------------------------------
@pytest.fixture
def deepest(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``[n]``: the deepest nesting of ``DeadLetterer._process`` calls seen (1 = no recursion)."""
    depth, deepest = [0], [0]
    real = DeadLetterer._process

    def tracked(self: DeadLetterer, queue: Queue, entries: list[Entry], reason: str, stop: Any = None) -> int:
        depth[0] += 1
        deepest[0] = max(deepest[0], depth[0])
        try:
            return real(self, queue, entries, reason, stop)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(DeadLetterer, "_process", tracked)
    return deepest


def test_a_dlq_that_overflows_dead_letters_again_without_recursion(deepest):
    w = World()
    w.queue("final")
    w.queue("dlq", **{"x-max-length": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "final"})
    work = w.queue("work", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    for body in (b"1", b"2", b"3"):
        w.publish("work", body)
    entries = [e for e in (work.pop(), work.pop(), work.pop()) if e is not None]
    work.reject(entries)  # one death event of three: the DLQ overflows twice on the way
    assert deepest[0] == 1  # every overflow went to the worklist, none recursed
    assert [m.body for m in w.take("dlq")] == [b"3"]
    final = w.take("final")
    assert [m.body for m in final] == [b"1", b"2"]
    assert deaths(final[0]) == [("dlq", "maxlen", 1), ("work", "rejected", 1)]
    assert [(c["queue"], c["reason"]) for c in w.archive.calls] == [
        ("work", "rejected"),
        ("dlq", "maxlen"),
        ("dlq", "maxlen"),
    ]
    assert w.dl.routed == 5


def test_a_chain_of_refusing_queues_is_walked_iteratively(deepest):
    w = World()
    n = 30
    w.queue(f"q{n}")
    for i in range(n - 1, -1, -1):  # each refuses and dead-letters into the next (reject-publish-dlx)
        w.queue(
            f"q{i}",
            **{
                "x-max-length": 0,
                "x-overflow": "reject-publish-dlx",
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": f"q{i + 1}",
            },
        )
    first = w.vh.queues["q0"]
    w.dl.dead_letter(first, [Entry(Message("", "q0", b"\x00\x00", b"x"), 0)], "rejected")
    [last] = w.take(f"q{n}")
    # newest first; the rest in RabbitMQ 3.10's regrouped order (see test_xdeath.py)
    assert deaths(last)[0] == (f"q{n - 1}", "maxlen", 1)
    expected = [("q0", "rejected", 1)] + [(f"q{i}", "maxlen", 1) for i in range(1, n)]
    assert sorted(deaths(last)) == sorted(expected)
    assert w.dl.routed == n and deepest[0] == 1


# -- the archive --------------------------------------------------------------------------------------------
def test_the_archive_gets_one_call_per_death_event_with_every_dead_letter():
    w = World()
    w.queue("dlq")
    work = w.queue(
        "work", **{"x-message-ttl": 50, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    )
    w.publish("work", b"a")
    w.ttl.advance(5)
    w.publish("work", b"b")
    w.ttl.advance(45)  # "a" expires
    w.ttl.advance(5)  # "b" expires
    assert [m.body for m in w.take("dlq")] == [b"a", b"b"]
    first, second = w.archive.calls
    assert first == dict(
        time_ms=NOW_MS + 50,
        vhost="/",
        queue="work",
        reason="expired",
        dlx="",
        rows=first["rows"],
        policy=None,
        limit=("message-ttl", 50, "argument"),
    )
    [(message, enqueued_at, count, key, drop)] = first["rows"]
    assert (message.body, enqueued_at, count, key, drop) == (b"a", NOW_MS, 1, "dlq", None)
    assert "x-death" not in (message.headers or {})  # the message as it died, not the dead letter
    assert second["rows"][0][1] == NOW_MS + 5
    assert work.message_count == 0


def test_the_archive_counts_repeated_deaths():
    w = World()
    w.queue("retry", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "retry"})
    w.publish("retry")
    w.reject("retry")
    w.reject("retry")
    assert [call["rows"][0][2] for call in w.archive.calls] == [1, 2]


def test_a_disabled_archive_is_never_called():
    recorder = Recorder()
    recorder.enabled = False
    vh = VHost()
    dl = DeadLetterer(vh, lambda: NOW_MS, archive=recorder)
    vh.sink = dl
    q = vh.declare_queue("q", False, False, False, False, None, None)
    dl.dead_letter(q, [Entry(Message("", "q", b"\x00\x00", b"x"), 1)], "rejected")
    assert recorder.calls == [] and dl.dropped == 1


@pytest.mark.parametrize(
    "deaths",
    [
        [],
        [{"queue": "a", "reason": "expired"}],
        [{"queue": "a", "reason": "rejected"}],
        [{"queue": "b", "reason": "expired"}, {"queue": "a", "reason": "rejected"}, {"queue": "c"}],
        [{"queue": "b", "reason": "maxlen"}, {"queue": "a", "reason": "expired"}, {"queue": "b"}],
        [{"queue": "a", "reason": "expired"}, "garbage", {"queue": "c", "reason": "rejected"}],
        [{"reason": "expired"}, {"queue": 7, "reason": "expired"}, {"queue": "d", "reason": "expired"}],
    ],
)
def test_cycle_queues_is_exactly_where_is_cycle_holds(deaths):
    excluded = cycle_queues(deaths) or frozenset()
    for queue in ("a", "b", "c", "d", "e"):
        assert (queue in excluded) == is_cycle(queue, deaths), queue


def test_the_archive_names_the_policy_that_set_the_dead_lettering():
    w = World()
    w.queue("dlq")
    work = w.queue("work")
    own = w.queue("own", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    policy = make_policy(
        "/",
        "dl",
        "^(work|own)$",
        {"message-ttl": 10, "dead-letter-exchange": "", "dead-letter-routing-key": "dlq"},
    )
    w.vh.set_policy(policy)
    assert (work.policy, own.policy) == ("dl", "dl")
    w.publish("work", b"a")
    w.publish("own", b"b")
    w.ttl.advance(10)
    assert sorted(m.body for m in w.take("dlq")) == [b"a", b"b"]
    policies = {call["queue"]: call["policy"] for call in w.archive.calls}
    assert policies == {"work": "dl", "own": "dl"}  # own: its DLX is its argument, its TTL the policy's


# -- which limit killed it (the archive's limit fields) ---------------------------------------------------
DL = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}


def limits(w: World) -> dict[str, Any]:
    return {call["queue"]: call["limit"] for call in w.archive.calls}


def test_the_archive_gets_the_queue_ttl_and_where_it_was_set():
    w = World()
    w.queue("dlq")
    w.queue("own", **DL, **{"x-message-ttl": 10})
    w.queue("by-policy", **DL)
    w.queue("by-operator", **DL, **{"x-message-ttl": 50})
    w.vh.set_policy(make_policy("/", "ttl", "^by-", {"message-ttl": 20}))
    w.vh.set_policy(make_policy("/", "cap", "^by-operator$", {"message-ttl": 15}, operator=True))
    for name in ("own", "by-policy", "by-operator"):
        w.publish(name)
    w.ttl.advance(20)
    assert limits(w) == {
        "own": ("message-ttl", 10, "argument"),
        "by-policy": ("message-ttl", 20, "policy"),
        "by-operator": ("message-ttl", 15, "operator-policy"),  # the lower of its argument, both policies
    }


def test_no_queue_ttl_leaves_the_message_s_expiration_to_the_writer():
    w = World()
    w.queue("dlq")
    w.queue("plain", **DL)
    w.publish("plain", expiration="5")
    w.ttl.advance(5)
    assert limits(w) == {"plain": None}


def test_the_archive_gets_the_length_limit_that_is_full():
    w = World()
    w.queue("dlq")
    w.queue("count", **DL, **{"x-max-length": 1, "x-max-length-bytes": 100})
    w.queue("octets", **DL, **{"x-max-length": 10, "x-max-length-bytes": 3})
    for name in ("count", "octets"):
        w.publish(name, b"ab")
        w.publish(name, b"cd")
    assert limits(w) == {
        "count": ("max-length", 1, "argument"),
        "octets": ("max-length-bytes", 3, "argument"),
    }


def test_the_archive_gets_the_delivery_limit_and_nothing_for_a_rejection():
    w = World()
    w.queue("dlq")
    w.queue("limited", **DL, **{"x-delivery-limit": 0})
    w.queue("rejecting", **DL)
    w.publish("limited")
    q = w.vh.queues["limited"]
    entry = q.pop()
    assert entry is not None
    q.requeue([entry])
    w.publish("rejecting")
    w.reject("rejecting")
    assert limits(w) == {"limited": ("delivery-limit", 0, "argument"), "rejecting": None}
