"""Dead-lettering with headers a client made hostile: one message's failure stays with that message,
and every dead letter's new copy is stored before its old row is deleted (store first, then forget).

RabbitMQ 3.10.8, measured: an ``x-death`` ``count`` of 2^63-1 dead-letters as -2^63 (its encoder
writes ``<<N:64/signed>>``), and headers nested 15,000 deep dead-letter with the rest."""

from __future__ import annotations

import logging
import struct
from typing import Any

import pytest
from ottermq.amqp.props import HEADERS_BIT, decode_properties, join_props, split_props
from ottermq.amqp.table import MAX_DEPTH, LongLong, RawField, encode_table
from ottermq.dlx import deadletter
from ottermq.dlx.xdeath import record_death
from ottermq.vhost.message import Entry, Message
from ottermq.vhost.queue import Queue

from .test_deadletter import World

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)


class OrderStore:
    """A ``MessageStore`` that records the order of its inserts and deletes."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, str, bytes]] = []
        self.rows = 0

    def message_added(self, queue: Queue, entry: Entry) -> None:
        self.rows += 1
        entry.store_id = self.rows
        self.ops.append(("insert", queue.name, entry.message.body))

    def message_removed(self, entry: Entry) -> None:
        self.ops.append(("delete", "", entry.message.body))

    def message_delivered(self, entry: Entry) -> None:
        pass

    def queue_purged(self, queue: Queue) -> None:
        pass

    def queue_touched(self, queue: Queue, expires_at: int) -> None:
        pass


def stored_world(**src_args: Any) -> tuple[World, OrderStore]:
    w = World()
    store = OrderStore()
    w.queue("dlq")
    w.queue("src", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq", **src_args})
    for name in ("src", "dlq"):
        w.vh.queues[name].store = store
    return w, store


def publish_persistent(w: World, body: bytes, headers: dict[str, Any] | None = None, **props: Any) -> None:
    from pamqp import commands

    raw = commands.Basic.Properties(delivery_mode=2, headers=headers, **props).marshal()
    expiration = int(props["expiration"]) if "expiration" in props else None
    w.vh.publish(None, Message("", "src", raw, body, True, None, expiration))


def with_raw_headers(raw_props: bytes, table: bytes) -> bytes:
    fields = split_props(raw_props)[1]
    fields[HEADERS_BIT] = table
    return join_props(fields)


def deep_table(levels: int) -> bytes:
    """``{"deep": {"a": {"a": ... "leaf"}}}`` nested ``levels`` deep, built without recursion."""
    inner = b"S" + struct.pack(">I", 4) + b"leaf"
    for _ in range(levels):
        body = b"\x01a" + inner
        inner = b"F" + struct.pack(">I", len(body)) + body
    body = b"\x04deep" + inner
    return struct.pack(">I", len(body)) + body


def test_an_x_death_count_at_the_64_bit_limit_wraps_as_rabbitmq_writes_it():
    headers = {"x-death": [{"count": LongLong(I64_MAX), "queue": "src", "reason": "expired"}]}
    [death] = record_death(headers, "src", "expired", "", ["src"], None, 0)["x-death"]  # type: ignore[misc]
    assert death["count"] == I64_MIN


def test_a_maximal_count_among_ordinary_expiring_messages_dead_letters_them_all():
    w, store = stored_world()
    evil = {"x-death": [{"count": LongLong(I64_MAX), "queue": "src", "reason": "expired"}]}
    publish_persistent(w, b"evil", evil, expiration="1000")
    for i in range(20):
        publish_persistent(w, b"m%d" % i, expiration="100")
    w.ttl.advance(2000)
    assert w.vh.queues["src"].message_count == 0
    dead = w.take("dlq")
    assert len(dead) == 21
    [evil_dead] = [m for m in dead if m.body == b"evil"]
    assert (evil_dead.headers or {})["x-death"][0]["count"] == I64_MIN


def test_headers_nested_15000_deep_are_dead_lettered_unchanged():
    w, store = stored_world(**{"x-message-ttl": 100})
    publish_persistent(w, b"other")
    from pamqp import commands

    raw = with_raw_headers(commands.Basic.Properties(delivery_mode=2).marshal(), deep_table(15_000))
    w.vh.publish(None, Message("", "src", raw, b"deep", True, None, None))
    w.ttl.advance(200)
    dead = {m.body: m for m in w.take("dlq")}
    assert set(dead) == {b"other", b"deep"}
    headers = dead[b"deep"].headers or {}
    assert headers["x-death"][0]["reason"] == "expired"
    value: Any = headers["deep"]
    for _ in range(MAX_DEPTH):  # decoded down to MAX_DEPTH levels under the headers table
        value = value["a"]
    assert isinstance(value, RawField)  # read no deeper: kept as its octets
    assert deep_table(15_000)[9:] in dead[b"deep"].raw_props  # the deep value went on byte for byte


def test_a_message_whose_x_death_cannot_be_written_goes_on_alone_with_its_own_headers(monkeypatch, caplog):
    real = deadletter.record_death

    def refusing(headers: Any, *args: Any, **kwargs: Any) -> Any:
        if headers and "poison" in headers:
            raise ValueError("value does not fit field type 'l'")
        return real(headers, *args, **kwargs)

    monkeypatch.setattr(deadletter, "record_death", refusing)
    w, store = stored_world()
    publish_persistent(w, b"poison", {"poison": 1}, expiration="50", content_type="text/plain")
    for i in range(5):
        publish_persistent(w, b"m%d" % i, expiration="50")
    with caplog.at_level(logging.WARNING, "ottermq.dlx.deadletter"):
        w.ttl.advance(100)
    dead = {m.body: m for m in w.take("dlq")}
    assert len(dead) == 6
    poison = decode_properties(dead[b"poison"].raw_props)
    assert poison.headers == {"poison": 1} and poison.expiration is None
    assert poison.content_type == "text/plain"
    assert all("x-death" in (dead[b"m%d" % i].headers or {}) for i in range(5))
    assert w.dl.unrewritten == 1
    assert "queue 'src'" in caplog.text and "original headers" in caplog.text


@pytest.mark.parametrize("reason", ["expired", "rejected", "maxlen"])
def test_every_dead_letter_is_stored_before_its_source_row_is_deleted(reason):
    args: dict[str, Any] = {"x-max-length": 1} if reason == "maxlen" else {}
    w, store = stored_world(**args)
    expiration = {"expiration": "10"} if reason == "expired" else {}
    for body in (b"a", b"b"):
        publish_persistent(w, body, **expiration)
    if reason == "expired":
        w.ttl.advance(50)
    elif reason == "rejected":
        w.reject("src")
    moved = [op[2] for op in store.ops if op[0] == "insert" and op[1] == "dlq"]
    assert moved
    for body in moved:
        inserted = store.ops.index(("insert", "dlq", body))
        deleted = store.ops.index(("delete", "", body))
        assert inserted < deleted


def test_a_dead_letter_that_cannot_be_handed_on_keeps_its_stored_row(caplog):
    w, store = stored_world()
    for body in (b"a", b"bad", b"c"):
        publish_persistent(w, body, expiration="10")

    class Failing(OrderStore):
        def message_added(self, queue: Queue, entry: Entry) -> None:
            if entry.message.body == b"bad":
                raise RuntimeError("a bug")
            store.message_added(queue, entry)

    w.vh.queues["dlq"].store = Failing()
    with caplog.at_level(logging.ERROR, "ottermq.dlx.deadletter"):
        w.ttl.advance(50)
    assert [m.body for m in w.take("dlq")] == [b"a", b"c"]
    deleted = {op[2] for op in store.ops if op[0] == "delete"}
    assert deleted == {b"a", b"c"}  # b"bad" is still stored: back after a restart, never lost
    assert "could not be handed on" in caplog.text


def test_a_burst_of_dead_letters_is_handed_on_over_several_loop_turns(monkeypatch):
    """Each loop turn dead-letters for TURN_BUDGET at most (here 0: one message a turn); a message not
    handed on yet keeps its stored row, and every one is counted once."""
    monkeypatch.setattr(deadletter, "TURN_BUDGET", 0.0)
    w, store = stored_world()
    turns: list[Any] = []
    w.vh.call_soon = turns.append
    for body in (b"a", b"b", b"c"):
        publish_persistent(w, body, expiration="10")
    w.ttl.advance(50)
    assert [m.body for m in w.take("dlq")] == [b"a"]
    assert {op[2] for op in store.ops if op[0] == "delete"} == {b"a"}  # b, c: still stored
    w.publish("src", b"d")
    w.reject("src")  # a new death event in the same turn waits behind the others
    assert w.take("dlq") == [] and len(turns) == 1
    while turns:
        turns.pop(0)()
    assert [m.body for m in w.take("dlq")] == [b"b", b"c", b"d"]
    assert {op[2] for op in store.ops if op[0] == "delete"} == {b"a", b"b", b"c"}  # d: transient
    assert w.dl.dead_lettered == {("expired", "at_most_once"): 3, ("rejected", "at_most_once"): 1}
    assert [call["rows"][0][0].body for call in w.archive.calls] == [b"a", b"b", b"c", b"d"]


def test_the_rewrite_cache_keeps_a_bounded_number_of_property_octets(monkeypatch):
    monkeypatch.setattr(deadletter, "CACHE_OCTETS", 10_000)
    w, store = stored_world()
    wide = {f"k{i:04d}": i for i in range(400)}  # about 4 KB of headers each
    for i in range(10):
        publish_persistent(w, b"m%d" % i, {**wide, "i": i}, expiration="10")
    w.ttl.advance(50)
    assert len(w.take("dlq")) == 10
    assert w.dl._cache_octets <= 10_000 + 2 * len(encode_table({**wide, "i": 0})) + 100
    assert len(w.dl._cache) < 10
