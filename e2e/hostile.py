"""Hostile AMQP field values for the adversarial suite (``e2e/test_attack_*.py``, ``make attack``).

A value is a :class:`Field`: an AMQP 0-9-1 type tag (RabbitMQ's dialect: ``t b B s u I i l f d D S T F
A x V``) and a payload kept exactly as it will go on the wire, so a 16-bit field can carry -32768, a
boolean the octet 0x7f, a long string invalid UTF-8 and a float any bit pattern. ``raw`` is a value
already encoded (tag included): how tables and arrays nested 15,000 deep are built, in one pass and
without recursion, since every encoder that recurses (pika's, pamqp's) stops long before that.

:func:`encode_table` is the suite's own encoder: iterative (an explicit stack, lengths patched in
place), linear in the output, and it refuses nothing the wire format can express (keys up to 255
octets; a 256-octet key needs the HTTP API, whose JSON has no such limit).

The Hypothesis strategies draw headers tables with at most one "big" member (a deep chain, a wide
table, a long string, a huge ``x-death`` array), so that what they build fits in one content-header
frame (``HEADER_BUDGET``): a header cannot be split over frames.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis import strategies as st

# a content header carrying the headers property and a few short ones must fit RabbitMQ's (and our
# default) frame_max of 131072 octets: 8 octets of frame, 14 of class/weight/size/flags, the rest
HEADER_BUDGET = 130_000

INT_RANGES: dict[str, tuple[int, int, str]] = {
    "b": (-(2**7), 2**7 - 1, ">b"),
    "B": (0, 2**8 - 1, ">B"),
    "s": (-(2**15), 2**15 - 1, ">h"),
    "u": (0, 2**16 - 1, ">H"),
    "I": (-(2**31), 2**31 - 1, ">i"),
    "i": (0, 2**32 - 1, ">I"),
    "l": (-(2**63), 2**63 - 1, ">q"),
    "T": (0, 2**64 - 1, ">Q"),
}
LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)
# placeholders in generated x-death entries for the queue a case's message dies in and why
SOURCE, REASON = b"\x00source-queue\x00", b"\x00reason\x00"


@dataclass(frozen=True)
class Field:
    """One typed AMQP field value.

    ``value`` by tag: an ``int`` for the integer tags and ``t`` (the octet as sent), a ``float`` or
    ``bytes`` (the raw 4/8 octets) for ``f``/``d``, ``(scale, uint32)`` for ``D``, ``bytes`` for ``S``
    and ``x``, ``None`` for ``V``, a sequence of ``(key bytes, Field)`` for ``F`` (duplicate keys
    allowed), a sequence of ``Field`` for ``A``, and the encoded octets (tag first) for ``raw``.
    """

    tag: str
    value: Any
    # what the value is, for a finding's report (a deep chain is not printed level by level)
    label: str = ""

    def describe(self) -> str:
        return self.label or _describe(self)


def table(*entries: tuple[str | bytes, Field], label: str = "") -> Field:
    """An ``F`` field from ``(key, value)`` pairs (``str`` keys are UTF-8 encoded)."""
    return Field("F", tuple((k.encode() if isinstance(k, str) else k, v) for k, v in entries), label)


def array(*values: Field, label: str = "") -> Field:
    return Field("A", tuple(values), label)


def long_str(text: str | bytes) -> Field:
    return Field("S", text.encode() if isinstance(text, str) else text)


def long_long(value: int) -> Field:
    return Field("l", value)


def _describe(value: Field, budget: int = 6) -> str:
    """A short text for a value: labels as they are, tables and arrays by their first items and
    their last (where :func:`hostile_headers` puts the big entry), strings cut after 24 octets."""
    if value.label:
        return value.label
    if value.tag in ("F", "A"):
        items = list(value.value)
        shown = items if len(items) <= 4 else [*items[:3], items[-1]]
        if value.tag == "F":
            parts = [f"{_key(k)}: {_describe(v, budget - 1)}" for k, v in shown] if budget else ["..."]
        else:
            parts = [_describe(v, budget - 1) for v in shown] if budget else ["..."]
        if len(items) > 4:
            parts.insert(3, f"...({len(items)} {'keys' if value.tag == 'F' else 'items'} in all)")
        return ("{%s}" if value.tag == "F" else "[%s]") % ", ".join(parts)
    if value.tag in ("S", "x"):
        raw = bytes(value.value)
        shown_raw = repr(raw[:24]) + (f"...({len(raw)} octets)" if len(raw) > 24 else "")
        return f"{value.tag}:{shown_raw}"
    if value.tag == "raw":
        return f"raw({len(value.value)} octets)"
    return f"{value.tag}:{value.value!r}"


def _key(key: bytes) -> str:
    shown = repr(key[:20])
    return shown + (f"...({len(key)})" if len(key) > 20 else "")


# --------------------------------------------------------------------------------------------------------
# encoding
# --------------------------------------------------------------------------------------------------------
def _put_scalar(buf: bytearray, value: Field, replace: Mapping[bytes, bytes]) -> None:
    tag = value.tag
    if tag in INT_RANGES:
        buf += tag.encode() + struct.pack(INT_RANGES[tag][2], value.value)
    elif tag == "t":
        buf += b"t" + bytes([value.value])
    elif tag in ("f", "d"):
        raw = value.value
        if not isinstance(raw, bytes | bytearray):
            raw = struct.pack(">f" if tag == "f" else ">d", raw)
        assert len(raw) == (4 if tag == "f" else 8), value
        buf += tag.encode() + raw
    elif tag == "D":
        scale, digits = value.value
        buf += b"D" + struct.pack(">BI", scale, digits)
    elif tag in ("S", "x"):
        raw = bytes(value.value)
        raw = replace.get(raw, raw) if tag == "S" else raw
        buf += tag.encode() + struct.pack(">I", len(raw)) + raw
    elif tag == "V":
        buf += b"V"
    elif tag == "raw":
        buf += value.value
    else:
        raise ValueError(f"no such field tag {tag!r}")


def encode_table(
    entries: Iterable[tuple[bytes, Field]], replace: Mapping[bytes, bytes] | None = None
) -> bytes:
    """A field table (4-octet length first) holding ``entries``, encoded without recursion; a long
    string whose octets are a key of ``replace`` is written as its value (:data:`SOURCE`,
    :data:`REASON`: the queue and reason of the path a case takes, known only then)."""
    replace = replace or {}
    buf = bytearray(b"\0\0\0\0")
    stack: list[tuple[str, Iterator[Any], int]] = [("F", iter(entries), 0)]
    end = object()
    while stack:
        kind, items, at = stack[-1]
        item = next(items, end)
        if item is end:
            struct.pack_into(">I", buf, at, len(buf) - at - 4)
            stack.pop()
            continue
        if kind == "F":
            key, value = item
            if len(key) > 255:
                raise ValueError(f"a field-table key has at most 255 octets, not {len(key)}")
            buf.append(len(key))
            buf += key
        else:
            value = item
        if value.tag in ("F", "A"):
            buf += value.tag.encode()
            stack.append((value.tag, iter(value.value), len(buf)))
            buf += b"\0\0\0\0"
        else:
            _put_scalar(buf, value, replace)
    return bytes(buf)


def encode_value(value: Field) -> bytes:
    """One field value, tag first (a table's entry without its key)."""
    encoded = encode_table([(b"k", value)])
    return encoded[6:]  # 4 octets of length, 1 of key length, the key


def headers_table(
    headers: Field | Sequence[tuple[bytes, Field]], replace: Mapping[bytes, bytes] | None = None
) -> bytes:
    entries = headers.value if isinstance(headers, Field) else headers
    return encode_table(entries, replace)


def deep_chain(depth: int, kinds: str = "F", key: bytes = b"a", leaf: Field | None = None) -> Field:
    """A value nested ``depth`` levels deep (``F`` tables each holding ``key``, ``A`` one-item arrays;
    ``kinds`` cycles, so ``"FA"`` alternates), built as raw octets in one linear pass."""
    inner = encode_value(leaf) if leaf is not None else b"V"
    prefixes: list[bytes] = []
    size = len(inner)
    for level in range(depth):
        tag = kinds[level % len(kinds)]
        entry = (bytes([len(key)]) + key) if tag == "F" else b""
        content = len(entry) + size
        prefixes.append(tag.encode() + struct.pack(">I", content) + entry)
        size = 1 + 4 + content
    return Field("raw", b"".join(reversed(prefixes)) + inner, label=f"{kinds}-nested x{depth}")


def deep_depth_fitting(budget: int, kinds: str = "F", key: bytes = b"a") -> int:
    """The deepest :func:`deep_chain` whose encoding fits in ``budget`` octets."""
    per_level = sum(5 + ((1 + len(key)) if kinds[i % len(kinds)] == "F" else 0) for i in range(len(kinds)))
    return (budget - 1) * len(kinds) // per_level


# --------------------------------------------------------------------------------------------------------
# x-death as RabbitMQ writes it, and malformed
# --------------------------------------------------------------------------------------------------------
def x_death_entry(
    queue: str | bytes = SOURCE,
    reason: str | bytes = REASON,
    count: Field | None = None,
    *,
    exchange: str = "",
    routing_keys: Sequence[str] = ("src",),
    time_s: int = 1_700_000_000,
    original_expiration: str | None = "1000",
    omit: Sequence[str] = (),
) -> Field:
    """One ``x-death`` table as RabbitMQ 3.10 writes it (keys sorted, ``count`` an ``l``, ``time`` a
    ``T``, ``routing-keys`` an ``A`` of ``S``), with ``count`` replaced and ``omit`` keys left out;
    by default for the queue and reason the case's message is about to die in and of, so that the
    broker finds the entry and increments its count."""
    entries: list[tuple[str, Field]] = [
        ("count", count if count is not None else long_long(1)),
        ("exchange", long_str(exchange)),
        ("queue", long_str(queue)),
        ("reason", long_str(reason)),
        ("routing-keys", array(*(long_str(k) for k in routing_keys))),
        ("time", Field("T", time_s)),
    ]
    if original_expiration is not None:
        entries.insert(2, ("original-expiration", long_str(original_expiration)))
    return table(*[(k, v) for k, v in entries if k not in omit])


def x_death(*entries: Field, label: str = "") -> tuple[bytes, Field]:
    return (b"x-death", array(*entries, label=label))


# --------------------------------------------------------------------------------------------------------
# strategies
#
# ``rabbit_safe=True`` leaves out what RabbitMQ 3.10.8 itself does not survive (measured): a NaN or
# infinite float anywhere in the headers closes the publisher's connection (541 INTERNAL_ERROR); an
# ``x-death`` entry for the queue and reason a message dies in whose ``count`` is no integer, an
# ``x-death`` array holding anything but tables, or one nested thousands deep crash the queue, which
# loses every message it held. Those values are for the ``extension`` tests: ottermq must keep every
# confirmed message whatever a header holds.
# --------------------------------------------------------------------------------------------------------
T = TypeVar("T")


def pick(*choices: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    """One of ``choices``, each as likely as the others. (``st.one_of`` flattens a choice that is
    itself a ``one_of``: ``x-death`` shapes, five of them, were drawn 88% of the time.)"""
    return st.integers(0, len(choices) - 1).flatmap(lambda i: choices[i])


def _int_values(tag: str) -> st.SearchStrategy[Field]:
    low, high, _ = INT_RANGES[tag]
    edges = sorted({low, high, 0, low + 1, high - 1, -1 if low < 0 else 1})
    return pick(st.sampled_from(edges), st.integers(low, high)).map(lambda v: Field(tag, v))


FLOAT_SPECIALS = [
    b"\x00\x00\x00\x01",  # smallest denormal
    b"\x80\x00\x00\x00",  # -0.0
    struct.pack(">f", 3.4028234663852886e38),
]
FLOAT_NONFINITE = [
    b"\x7f\xc0\x00\x00",  # quiet NaN
    b"\x7f\x80\x00\x01",  # signalling NaN
    b"\xff\xff\xff\xff",  # NaN with every payload bit
    b"\x7f\x80\x00\x00",  # +inf
    b"\xff\x80\x00\x00",  # -inf
]
DOUBLE_SPECIALS = [
    b"\x00\x00\x00\x00\x00\x00\x00\x01",
    b"\x80\x00\x00\x00\x00\x00\x00\x00",
    struct.pack(">d", 1.7976931348623157e308),
]
DOUBLE_NONFINITE = [
    b"\x7f\xf8\x00\x00\x00\x00\x00\x00",
    b"\x7f\xf0\x00\x00\x00\x00\x00\x01",
    b"\xff\xff\xff\xff\xff\xff\xff\xff",
    b"\x7f\xf0\x00\x00\x00\x00\x00\x00",
    b"\xff\xf0\x00\x00\x00\x00\x00\x00",
]
ODD_BYTES = [
    b"",
    b"\x00",
    b"a\x00b",
    b"\xff\xfe",
    b"\xc3\x28",
    b"\xed\xa0\x80",
    "é🐇".encode(),
    b"\x00" * 300,
]


def scalars(rabbit_safe: bool) -> st.SearchStrategy[Field]:
    """One scalar of every AMQP type at and between its extremes; odd strings and booleans."""
    finite = not rabbit_safe
    floats = pick(
        st.sampled_from(FLOAT_SPECIALS + ([] if rabbit_safe else FLOAT_NONFINITE)),
        st.floats(width=32, allow_nan=finite, allow_infinity=finite).map(lambda f: struct.pack(">f", f)),
    )
    doubles = pick(
        st.sampled_from(DOUBLE_SPECIALS + ([] if rabbit_safe else DOUBLE_NONFINITE)),
        st.floats(allow_nan=finite, allow_infinity=finite).map(lambda f: struct.pack(">d", f)),
    )
    odd = pick(st.sampled_from(ODD_BYTES), st.binary(max_size=64))
    return pick(
        *(_int_values(tag) for tag in INT_RANGES),
        st.integers(0, 255).map(lambda v: Field("t", v)),
        floats.map(lambda raw: Field("f", raw)),
        doubles.map(lambda raw: Field("d", raw)),
        st.tuples(
            st.sampled_from([0, 1, 10, 127, 128, 255]), st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**32 - 1])
        ).map(lambda sv: Field("D", sv)),
        odd.map(lambda b: Field("S", b)),
        odd.map(lambda b: Field("x", b)),
        st.just(Field("V", None)),
    )


def keys() -> st.SearchStrategy[bytes]:
    return pick(
        st.sampled_from(
            [b"", b"\x00", b"k\x00ey", b"\xff\xfe", b"x" * 255, "é".encode() * 127 + b"!", b"x-death"]
        ),
        st.binary(min_size=1, max_size=12),
    )


def small_values(rabbit_safe: bool) -> st.SearchStrategy[Field]:
    """Scalars, and small tables and arrays of them (a few levels)."""
    return st.recursive(
        scalars(rabbit_safe),
        lambda inner: st.one_of(
            st.lists(st.tuples(keys(), inner), max_size=4).map(lambda es: Field("F", tuple(es))),
            st.lists(inner, max_size=4).map(lambda vs: Field("A", tuple(vs))),
        ),
        max_leaves=12,
    )


def _deep(kinds: str, depth: int | None) -> Field:
    most = deep_depth_fitting(HEADER_BUDGET - 400, kinds)
    return deep_chain(most if depth is None else min(depth, most), kinds)


def deep_values(kinds: Sequence[str] = ("F", "A", "FA")) -> st.SearchStrategy[Field]:
    """Tables and arrays nested up to what fits in one frame (15,000+ levels; ``None``: the most)."""
    depth = pick(
        st.sampled_from([15_000, None, 2_000, 1_000, 64]), st.integers(1_000, 30_000), st.integers(2, 1_000)
    )
    return st.builds(_deep, st.sampled_from(list(kinds)), depth)


def _wide_table(n: int) -> Field:
    return Field("F", tuple((b"k%d" % i, Field("b", i % 128)) for i in range(n)), label=f"table of {n} keys")


def _wide_array(n: int) -> Field:
    return Field("A", tuple(Field("V", None) for _ in range(n)), label=f"array of {n} voids")


def wide_values() -> st.SearchStrategy[Field]:
    """A table with thousands of keys, or an array with up to 100,000 items."""
    return pick(
        st.sampled_from([1_000, 5_000, 12_000]).map(_wide_table),
        st.sampled_from([10_000, 100_000]).map(_wide_array),
    )


def _long(tag: str, n: int, fill: bytes) -> Field:
    return Field(tag, (fill * n)[:n], label=f"{tag} of {n} octets of {fill[:4]!r}")


def long_strings() -> st.SearchStrategy[Field]:
    return st.builds(
        _long,
        st.sampled_from(["S", "x"]),
        st.sampled_from([255, 256, 65_535, 65_536, 120_000]),
        st.sampled_from([b"\x00", b"\xff", b"\xed\xa0\x80", b"a"]),
    )


INTEGER_COUNTS: list[Field] = [
    Field("l", LONG_MAX),
    Field("l", LONG_MIN),
    Field("l", LONG_MAX - 1),
    Field("l", -1),
    Field("l", 0),
    Field("T", 2**64 - 1),
    Field("i", 2**32 - 1),
    Field("I", -(2**31)),
    Field("u", 2**16 - 1),
    Field("b", -1),
]
ODD_COUNTS: list[Field] = [
    Field("d", struct.pack(">d", math.inf)),
    Field("d", DOUBLE_NONFINITE[0]),
    Field("f", 1e30),
    Field("d", 1.5),
    Field("D", (0, 2**32 - 1)),
    Field("S", b"9223372036854775807"),
    Field("S", b"\xff"),
    Field("t", 1),
    Field("V", None),
    Field("A", (Field("l", 1),)),
    Field("F", ()),
]


def x_deaths(rabbit_safe: bool) -> st.SearchStrategy[tuple[bytes, Field]]:
    """Malformed ``x-death`` headers: extreme or ill-typed counts, entries missing ``queue`` or
    ``reason``, entries that are no table, ``x-death`` that is no array, thousands of deaths."""
    other_queue = st.sampled_from([b"src", b"", b"\x00", "é".encode() * 100, b"src\xff"])
    # as often as not the reason this very death has, so that the broker updates the entry
    reason = pick(
        st.just(REASON),
        st.sampled_from([b"expired", b"rejected", b"maxlen", b"delivery_limit", b"", b"bogus"]),
    )
    omit = st.lists(
        st.sampled_from(["count", "queue", "reason", "time", "exchange", "routing-keys"]), max_size=3
    )
    integer_count = pick(st.sampled_from(INTEGER_COUNTS), *(_int_values(t) for t in INT_RANGES))
    any_count = pick(integer_count, st.sampled_from(ODD_COUNTS))
    # the entry the broker updates (this queue, maybe this reason), and entries it only carries along
    ours = st.builds(
        x_death_entry, st.just(SOURCE), reason, integer_count if rabbit_safe else any_count, omit=omit
    )
    others = st.builds(x_death_entry, other_queue, reason, any_count, omit=omit)
    entry = pick(ours, others)
    element = entry if rabbit_safe else pick(entry, entry, scalars(rabbit_safe), st.just(array()))

    def many(n: int, count: Field) -> tuple[bytes, Field]:
        deaths = [x_death_entry(b"q%d" % i, b"expired", count) for i in range(n)]
        return x_death(x_death_entry(count=count), *deaths, label=f"{n + 1} deaths, count {count.describe()}")

    shapes = [
        st.lists(element, min_size=1, max_size=4).map(lambda es: x_death(*es)),
        st.tuples(st.sampled_from([300, 700]), st.sampled_from(INTEGER_COUNTS[:3])).map(lambda nc: many(*nc)),
        scalars(rabbit_safe).map(lambda v: (b"x-death", v)),  # not an array at all
        deep_values(("F",)).map(lambda v: (b"x-death", v)),  # a table nested deep
    ]
    if not rabbit_safe:
        shapes.append(deep_values(("A", "FA")).map(lambda v: (b"x-death", v)))  # an array nested deep
    return pick(*shapes)


def hostile_headers(rabbit_safe: bool) -> st.SearchStrategy[Field]:
    """A headers table: at most one big hostile entry (deep, wide, long, ``x-death``), which fits in
    one content-header frame on its own, and the few small ones that fit beside it."""
    small = st.lists(
        st.tuples(keys().filter(lambda k: k != b"x-death"), small_values(rabbit_safe)), max_size=4
    )
    big_entry = pick(
        x_deaths(rabbit_safe),
        st.tuples(st.just(b"deep"), deep_values()),
        st.tuples(st.just(b"wide"), wide_values()),
        st.tuples(st.just(b"long"), long_strings()),
    )

    def combine(entries: list[tuple[bytes, Field]], big: tuple[bytes, Field] | None) -> Field:
        chosen = [big] if big is not None else []
        for entry in entries:  # the small ones that still fit beside the big one
            if len(headers_table([*chosen, entry])) <= HEADER_BUDGET:
                chosen.insert(len(chosen) - (big is not None), entry)
        return Field("F", tuple(chosen))

    return st.builds(combine, small, pick(big_entry, big_entry, big_entry, st.none()))


def argument_values(rabbit_safe: bool) -> st.SearchStrategy[Field]:
    """Hostile values for a queue, exchange or binding argument of a key of our own (which the broker
    does not interpret, but stores, lists and exports). RabbitMQ 3.10.8's VM dies (a segfault of a
    scheduler thread, measured: 8,000 levels hold, 11,000 do not) on a binding argument nested
    ~10,000 deep, so its safe set stops at 2,000 levels."""
    depths = [64, 1_000, 2_000] if rabbit_safe else [64, 2_000, 15_000, None]
    deep = st.builds(_deep, st.sampled_from(["F", "A", "FA"]), st.sampled_from(depths))
    return pick(small_values(rabbit_safe), deep, wide_values(), long_strings())
