"""The consistent-hash exchange (``vhost/chash.py``, ``ConsistentHashExchange``): weights, arguments,
what is hashed, the ring. Texts and placements were read back from RabbitMQ 3.10.8 with the
``rabbitmq_consistent_hash_exchange`` plugin, with pika (queues ``r0`` .. ``r3`` bound in that order)."""

from __future__ import annotations

import hashlib
import random
import struct
from typing import Any

import pytest
from ottermq.amqp.errors import ChannelCrashed, PreconditionFailed
from ottermq.amqp.props import HEADERS_BIT, PROPERTY_FLAGS, join_props
from ottermq.amqp.table import LongLong, LongStr, encode_table
from ottermq.vhost.chash import (
    MAX_PHASH2,
    MAX_PHASH2_ELEMENTS,
    HashRing,
    HashSource,
    binding_weight,
    ring_order,
)
from ottermq.vhost.erlhash import (
    PHASH2_UNDEFINED,
    TooComplex,
    jump_consistent_hash,
    phash2_binary,
    phash2_field,
)
from ottermq.vhost.exchange import ConsistentHashExchange, equivalent, make_exchange

pytestmark = pytest.mark.hot_path

QUEUES = [("queue", f"r{i}") for i in range(4)]


# ---------------------------------------------------------------------------------------------
# weights (the binding key)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "weight"),
    [("1", 1), ("+3", 3), ("007", 7), ("10", 10), ("99999999999999999999999", 10**23 - 1)],
)
def test_weights(key: str, weight: int) -> None:
    assert binding_weight(key) == weight


NOT_AN_INTEGER = "The binding key must be an integer: "


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("abc", '<<"abc">>'),
        ("", "<<>>"),
        (" 5", '<<" 5">>'),
        ("5 ", '<<"5 ">>'),
        ("1.5", '<<"1.5">>'),
        ("1e3", '<<"1e3">>'),
        ("0x10", '<<"0x10">>'),
        ("+", '<<"+">>'),
        ("٣", '<<"٣">>'),  # not an ASCII digit
        ("é", '<<"é">>'),
        ('a"b\\c', '<<"a\\"b\\\\c">>'),
        ("a\x01b", "<<97,1,98>>"),
        ("\x01\x02" * 10 + "abc", "<<" + ",".join(["1,2"] * 10) + ",\n" + " " * 38 + "97,98,99>>"),
    ],
)
def test_a_key_that_is_not_an_integer(key: str, shown: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        binding_weight(key)
    assert info.value.text == NOT_AN_INTEGER + shown


def test_a_long_key_is_cut_as_rabbitmq_cuts_it() -> None:
    with pytest.raises(PreconditionFailed) as info:
        binding_weight("z" * 255)
    full = "PRECONDITION_FAILED - " + NOT_AN_INTEGER + '<<"' + "z" * 255
    assert info.value.reply_text == full[:252] + "..."


@pytest.mark.parametrize("key", ["0", "-1", "-0", "00", "-99999999999999999999"])
def test_a_weight_below_one(key: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        binding_weight(key)
    assert info.value.text == "The binding key must be greater than 0"


# ---------------------------------------------------------------------------------------------
# exchange arguments
# ---------------------------------------------------------------------------------------------
def test_what_is_hashed() -> None:
    assert HashSource({}).value("rk", b"\x00\x00") == "rk"
    assert HashSource({"alternate-exchange": "ae"}).value("rk", b"\x00\x00") == "rk"
    assert HashSource({"hash-header": "h"}).header == b"h"
    assert HashSource({"hash-header": ""}).header == b""  # accepted: a header named ""
    assert HashSource({"hash-header": LongStr(b"\xff")}).header == b"\xff"
    for name, bit in (("message_id", 0x80), ("correlation_id", 0x400), ("timestamp", 0x40)):
        assert HashSource({"hash-property": name}).property_bit == bit == PROPERTY_FLAGS[name]


EXCLUSIVE = "hash-header and hash-property are mutually exclusive"


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({"hash-header": "h", "hash-property": "message_id"}, EXCLUSIVE),
        ({"hash-header": "h", "hash-property": "app_id"}, EXCLUSIVE),
        ({"hash-property": "app_id"}, "Unsupported property: app_id"),
        ({"hash-property": "MESSAGE_ID"}, "Unsupported property: MESSAGE_ID"),
        ({"hash-property": ""}, "Unsupported property: "),
        ({"hash-property": "é"}, "Unsupported property: é"),
        ({"hash-property": 'a~sb"c'}, 'Unsupported property: a~sb"c'),
    ],
)
def test_refused_arguments(arguments: dict[str, Any], text: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        HashSource(arguments)
    assert info.value.text == text
    with pytest.raises(PreconditionFailed):
        make_exchange("x", "x-consistent-hash", arguments=arguments)


@pytest.mark.parametrize(
    "arguments",
    [
        {"hash-header": 5},
        {"hash-property": 5},
        {"hash-header": True},
        {"hash-header": None},
        {"hash-header": b"h"},  # a byte array, not a long string
        {"hash-header": "h", "hash-property": 5},  # the crash comes before the mutual exclusion
        {"hash-header": 5, "hash-property": "message_id"},
        {"hash-header": 5, "hash-property": "app_id"},
    ],
)
def test_arguments_that_are_not_long_strings_crash_the_channel(arguments: dict[str, Any]) -> None:
    with pytest.raises(ChannelCrashed) as info:
        make_exchange("x", "x-consistent-hash", arguments=arguments)
    assert (info.value.reply_code, info.value.reply_text) == (541, "INTERNAL_ERROR")
    assert info.value.text.startswith("{case_clause,{")  # the crash's reason, for the management API


def test_the_crash_reason_is_the_plugins() -> None:
    for value, reason in ((LongLong(5), "{case_clause,{long,5}}"), (True, "{case_clause,{bool,true}}")):
        with pytest.raises(ChannelCrashed) as info:
            HashSource({"hash-header": value})
        assert info.value.text == reason


def test_alternate_exchange_is_checked_first() -> None:
    with pytest.raises(PreconditionFailed) as info:
        make_exchange(
            "x",
            "x-consistent-hash",
            arguments={"alternate-exchange": 5, "hash-header": "h", "hash-property": "message_id"},
        )
    assert info.value.text == (
        "invalid type 'signedint' for arg 'alternate-exchange' in exchange 'x' in vhost '/'"
    )


def test_redeclare_checks_no_hash_argument() -> None:
    x = make_exchange("x", "x-consistent-hash", arguments={"hash-header": "h"})
    for arguments in ({}, {"hash-header": "other"}, {"hash-header": 5}, {"hash-property": "app_id"}):
        equivalent(x, "x-consistent-hash", False, False, False, arguments)
    assert x.source.header == b"h"


@pytest.mark.parametrize(
    ("existing", "received", "text"),
    [
        ("x-consistent-hash", "direct", "received 'direct' but current is ''x-consistent-hash''"),
        ("direct", "x-consistent-hash", "received ''x-consistent-hash'' but current is 'direct'"),
    ],
)
def test_redeclare_as_another_type(existing: str, received: str, text: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        equivalent(make_exchange("x", existing), received, False, False, False, {})
    assert info.value.text == f"inequivalent arg 'type' for exchange 'x' in vhost '/': {text}"


# ---------------------------------------------------------------------------------------------
# what a message hashes to
# ---------------------------------------------------------------------------------------------
def props(**fields: Any) -> bytes:
    """Property octets: ``headers`` (a table), ``message_id``/``correlation_id`` (shortstr),
    ``timestamp`` (int)."""
    octets: dict[int, bytes] = {}
    for name, value in fields.items():
        bit = PROPERTY_FLAGS[name]
        if name == "headers":
            octets[bit] = encode_table(value)
        elif name == "timestamp":
            octets[bit] = struct.pack(">Q", value)
        else:
            raw = value.encode()
            octets[bit] = bytes([len(raw)]) + raw
    return join_props(octets)


def chash(arguments: dict[str, Any] | None = None, weights: tuple[str, ...] = ("1", "1", "1", "1")) -> Any:
    x = make_exchange("x", "x-consistent-hash", arguments=arguments)
    assert isinstance(x, ConsistentHashExchange)
    for queue, weight in zip(QUEUES, weights, strict=True):
        x.bind(weight, queue, {})
    return x


def where(x: Any, raw_props: bytes, routing_key: str = "a") -> int:
    (dest,) = x.route_content(routing_key, raw_props)
    return QUEUES.index(dest)


@pytest.mark.parametrize(
    ("headers", "index"),
    [  # where RabbitMQ put each message (hash-header "h", four queues of weight 1)
        (None, 1),
        ({"x": "1"}, 1),
        ({"h": "abc"}, 0),
        ({"h": 7}, 0),  # signedint, as pika sends it
        ({"h": LongLong(-123456789012)}, 2),
        ({"h": True}, 0),
        ({"h": b"\x00\x01"}, 0),
        ({"h": None}, 0),
        ({"h": [7, "a"]}, 2),
        ({"h": {"k": "v", "n": 2}}, 1),
        ({"h": []}, 0),
    ],
)
def test_header_hashing(headers: dict[str, Any] | None, index: int) -> None:
    def pika_ints(value: Any) -> Any:  # pika encodes ints as signedint ('I') when they fit
        from ottermq.amqp.table import Long

        if isinstance(value, dict):
            return {k: pika_ints(v) for k, v in value.items()}
        if isinstance(value, list):
            return [pika_ints(v) for v in value]
        if type(value) is int:
            return Long(value)
        return value

    x = chash({"hash-header": "h"})
    raw = props(headers=pika_ints(headers)) if headers is not None else b"\x00\x00"
    for routing_key in ("a", "b", "c"):  # the routing key does not matter
        assert where(x, raw, routing_key) == index


@pytest.mark.parametrize(
    ("name", "value", "index"),
    [
        ("message_id", None, 1),
        ("message_id", "x1", 0),
        ("message_id", "hello world", 1),
        ("correlation_id", None, 1),
        ("correlation_id", "x1", 0),
        ("correlation_id", "hello world", 1),
        ("timestamp", None, 1),
        ("timestamp", 1234567, 0),  # hashed as <<"1234567">>
        ("timestamp", 99, 2),
    ],
)
def test_property_hashing(name: str, value: Any, index: int) -> None:
    x = chash({"hash-property": name})
    other = "correlation_id" if name == "message_id" else "message_id"
    raw = props(**{name: value, other: "ignored"}) if value is not None else props(**{other: "ignored"})
    assert where(x, raw, "a") == where(x, raw, "b") == index
    if name == "timestamp" and value is not None:
        assert x.source.value("a", raw) == str(value).encode()


def test_the_first_header_of_a_name_counts() -> None:
    x = chash({"hash-header": "h"})
    one = encode_table({"h": "abc"})
    twice = struct.pack(">I", 2 * (len(one) - 4)) + one[4:] + encode_table({"h": "zzz"})[4:]
    assert where(x, join_props({HEADERS_BIT: twice})) == where(x, props(headers={"h": "abc"})) == 0


def test_unreadable_headers_hash_as_undefined() -> None:
    x = chash({"hash-header": "h"})
    broken = join_props({HEADERS_BIT: struct.pack(">I", 6) + b"\x01hZ\x00\x00\x00"})  # no type Z
    assert x.source.value("a", broken) is None
    assert where(x, broken) == where(x, b"\x00\x00") == 1


def test_a_header_value_past_the_phash2_budget_is_hashed_with_blake2b() -> None:
    x = chash({"hash-header": "h"})
    big = "v" * (MAX_PHASH2 - 5)  # 'S', the 4-octet length and the text: exactly the budget
    value = x.source.value("a", props(headers={"h": big}))
    assert isinstance(value, bytes) and len(value) == MAX_PHASH2
    assert x.source.phash2(value) == phash2_field(value, 0, len(value))
    bigger = x.source.value("a", props(headers={"h": big + "v"}))
    assert isinstance(bigger, bytes)
    digest = int.from_bytes(hashlib.blake2b(bigger, digest_size=4).digest(), "big") & (2**27 - 1)
    assert x.source.phash2(bigger) == digest
    deep = encode_table({"h": []})
    raw = join_props({HEADERS_BIT: deep})
    assert where(x, raw) == where(x, raw)  # and the same every time
    assert not x._cache.get(bigger) and len(x._cache) <= 1  # long values are not cached
    x.route_content("a", props(headers={"h": big + "v"}))
    assert bigger not in x._cache


def test_a_header_value_of_many_elements_is_hashed_with_blake2b() -> None:
    """4,000 voids fit in 4 KiB but cost milliseconds to phash2: past MAX_PHASH2_ELEMENTS (the value and
    every element at any depth) the value is hashed with BLAKE2b; up to it, as RabbitMQ does."""
    x = chash({"hash-header": "h"})
    at_budget = x.source.value("a", props(headers={"h": [None] * (MAX_PHASH2_ELEMENTS - 1)}))
    assert isinstance(at_budget, bytes) and len(at_budget) < MAX_PHASH2
    assert x.source.phash2(at_budget) == phash2_field(at_budget, 0, len(at_budget))
    for many in ([None] * MAX_PHASH2_ELEMENTS, [[None] * 200, [None] * 200], [None] * 4000):
        value = x.source.value("a", props(headers={"h": many}))
        assert isinstance(value, bytes) and len(value) < MAX_PHASH2
        digest = int.from_bytes(hashlib.blake2b(value, digest_size=4).digest(), "big") & (2**27 - 1)
        assert x.source.phash2(value) == digest
    with pytest.raises(TooComplex):
        phash2_field(value, 0, len(value), MAX_PHASH2_ELEMENTS)


def test_property_list_without_the_property() -> None:
    x = chash({"hash-property": "message_id"})
    assert x.source.value("a", b"") is None
    assert x.source.value("a", props(headers={"message_id": "m"})) is None
    assert x.source.phash2(None) == PHASH2_UNDEFINED


# ---------------------------------------------------------------------------------------------
# the ring
# ---------------------------------------------------------------------------------------------
def spread(x: Any, n: int = 4000) -> list[int]:
    counts = [0, 0, 0, 0]
    for k in range(n):
        counts[where(x, b"\x00\x00", f"key-{k}")] += 1
    return counts


def test_spread_is_rabbitmqs() -> None:
    """4,000 routing keys ``key-0`` ..: RabbitMQ's counts, queue by queue."""
    assert spread(chash()) == [978, 1029, 1008, 985]
    assert spread(chash(weights=("1", "2", "1", "1"))) == [776, 1636, 788, 800]


def test_placement_does_not_depend_on_binding_order() -> None:
    expected = [where(chash(weights=("1", "2", "1", "3")), b"\x00\x00", f"k{i}") for i in range(300)]
    rng = random.Random(1)
    for _ in range(5):
        order = list(range(4))
        rng.shuffle(order)
        x = make_exchange("x", "x-consistent-hash")
        for i in order:
            x.bind(("1", "2", "1", "3")[i], QUEUES[i], {})
        assert [where(x, b"\x00\x00", f"k{i}") for i in range(300)] == expected


def test_ring_layout_and_lookup() -> None:
    ring = HashRing()
    assert ring.buckets == 0 and ring.layout() == [] and ring.pick(5) == frozenset()
    ring.add(("queue", "b"), "3")
    ring.add(("queue", "a"), "2")
    ring.add(("exchange", "z"), "1")  # exchanges sort before queues
    assert ring.layout() == [(("exchange", "z"), 1), (("queue", "a"), 2), (("queue", "b"), 3)]
    assert ring.buckets == 6
    owners = [("exchange", "z")] + [("queue", "a")] * 2 + [("queue", "b")] * 3
    for key in range(0, 2**27, 2**27 // 200):
        assert ring.pick(key) == {owners[jump_consistent_hash(key, 6)]}


def test_ring_order_is_natural() -> None:
    names = ["shard-10", "shard-2", "shard-x", "shard-01", "shard-0", "shard-1", "q", "", "10", "2b", "a"]
    in_order = ["", "2b", "10", "a", "q", "shard-0", "shard-01", "shard-1", "shard-2", "shard-10", "shard-x"]
    assert sorted(names, key=lambda n: ring_order(("queue", n))) == in_order
    assert ring_order(("exchange", "z")) < ring_order(("queue", "a"))


def test_the_next_shard_moves_few_keys() -> None:
    """Adding shard-10 after shard-0 .. shard-9 appends its range (natural order), as RabbitMQ's
    binding order does: only the keys that jump to its bucket move (about 1/11)."""
    x = make_exchange("x", "x-consistent-hash")
    for i in range(10):
        x.bind("1", ("queue", f"shard-{i}"), {})
    keys = [f"k{i}" for i in range(2000)]
    before = [x.route(k) for k in keys]
    x.bind("1", ("queue", "shard-10"), {})
    after = [x.route(k) for k in keys]
    moved = [b for a, b in zip(before, after, strict=True) if a != b]
    assert all(b == {("queue", "shard-10")} for b in moved)
    assert len(moved) < len(keys) * 0.12


def test_a_destination_bound_twice_is_on_the_ring_once() -> None:
    ring = HashRing()
    ring.add(("queue", "q"), "2")
    ring.add(("queue", "q"), "3")
    ring.add(("queue", "q"), "3")  # other arguments
    assert ring.layout() == [(("queue", "q"), 2)]
    ring.remove(("queue", "q"), "2")
    assert ring.layout() == [(("queue", "q"), 3)]  # the other binding's weight
    ring.remove(("queue", "q"), "3")
    assert ring.layout() == [(("queue", "q"), 3)]
    ring.remove(("queue", "q"), "3")
    ring.remove(("queue", "q"), "3")  # nothing left: ignored
    assert ring.layout() == []
    ring.add(("queue", "q"), "10")
    ring.add(("queue", "q"), "9")
    assert ring.layout() == [(("queue", "q"), 10)]  # the key that sorts first: "10" < "9"


def test_exchange_bindings_feed_the_ring() -> None:
    x = chash()
    assert x.bind("5", QUEUES[0], {}) and x.bindings == 5  # a binding, but not on the ring twice
    assert spread(x, 400) == spread(chash(), 400)
    x.unbind("1", QUEUES[0], {})
    assert x.ring.layout()[0] == (QUEUES[0], 5)
    assert x.remove_destination(QUEUES[0]) == 1
    assert QUEUES[0] not in {dest for dest, _ in x.ring.layout()}
    assert spread(x, 400)[0] == 0
    with pytest.raises(PreconditionFailed):
        x.bind("abc", QUEUES[0], {})
    assert x.bindings == 3 and not x.unbind("abc", QUEUES[0], {})  # unbinding never checks the key


def test_no_bindings_routes_nowhere() -> None:
    x = make_exchange("x", "x-consistent-hash")
    assert x.route("k") == set()
    x.bind("1", QUEUES[0], {})
    assert x.route("k") == {QUEUES[0]}


def test_route_cache_is_bounded_and_cleared_by_bindings() -> None:
    x = chash()
    for k in range(ConsistentHashExchange.CACHE_SIZE + 5):
        x.route(f"k{k}")
    assert len(x._cache) <= ConsistentHashExchange.CACHE_SIZE
    before = x.route("k3")
    x.bind("50", ("queue", "r4"), {})
    assert not x._cache
    x.route("k3")
    assert before in ({QUEUES[i]} for i in range(4))


def test_huge_weights_cost_memory_by_bindings_not_buckets() -> None:
    """RabbitMQ keeps one map entry per bucket (a weight of 10^23 exhausted a 24 GB machine and the
    kernel killed the node); the ring keeps one cumulative end per destination."""
    x = chash(weights=("1", "1", "1", "99999999999999999999999"))
    assert x.ring.buckets == 10**23 + 2
    assert spread(x, 200)[3] == 200
    assert phash2_binary(b"key-0") >= 0
