"""The consistent-hash exchange (``x-consistent-hash``): its arguments, binding weights, what a message
is hashed on, and the bucket ring.

Rules (the ``rabbitmq_consistent_hash_exchange`` plugin of RabbitMQ 3.10.8, read from its source and
checked against a running node, see ``tests/unit/vhost/test_chash.py`` and
``e2e/test_consistent_hash.py``):
1. A binding's routing key is its weight: an optional ``+``/``-`` and ASCII digits (Erlang's
   ``list_to_integer``), at least 1; else ``queue.bind``/``exchange.bind`` fails with 406
   ``The binding key must be an integer: <<"abc">>`` or ``The binding key must be greater than 0``.
   Unbinding never checks the key.
2. ``exchange.declare`` arguments (checked when the exchange is created, never on a redeclare):
   ``hash-header`` (hash that header's value) or ``hash-property`` (``message_id``,
   ``correlation_id`` or ``timestamp``, else 406 ``Unsupported property: app_id``); both at once:
   406 ``hash-header and hash-property are mutually exclusive``. Either one with a value that is not
   a long string crashes the plugin's channel: 541 ``INTERNAL_ERROR`` closes the connection.
   Neither: the message's routing key is hashed (its first one: CC/BCC keys do not count).
3. What is hashed is the term the plugin hashes with ``erlang:phash2``: the routing key or the
   property as a binary (``timestamp`` as its decimal text), a header as ``{Type, Value}``; a message
   without that header or property hashes ``undefined``, so all such messages go to one destination.
4. The ring has one range of buckets per destination, as many as its weight; a message goes to
   bucket ``jump_consistent_hash(phash2(Term), TotalWeight)`` (``erlhash.py``), the same bucket as on
   RabbitMQ for the same ring. A destination bound twice (another weight, other arguments) is on the
   ring once.
5. Ring order. The plugin lays ranges out in binding order (a new destination's range goes last, so
   only the keys that jump to its new buckets move) and, after a restart, in the sorted order of the
   binding records. ottermq's store keeps no binding order, so its ring is sorted by destination:
   exchanges before queues, then by name in natural order (runs of ASCII digits compare as numbers:
   ``shard-2`` before ``shard-10``; ``ring_order``). Placement then depends only on the bindings,
   never on the order they were made or recovered in (nor on Python's ``hash()``); it is RabbitMQ's
   whenever the destinations were bound in that order, as a loop over ``shard-0`` .. ``shard-N``
   binds them; and a destination whose name sorts last (the next shard) moves as few keys as on
   RabbitMQ. One whose name sorts earlier shifts the ranges after it, which moves more keys than
   RabbitMQ would (as removing a destination does on both). A destination bound twice is on the ring
   once, with the weight of its binding whose key sorts first (as bytes); unbinding one of the two
   leaves it there with the other's weight (the plugin, until its next restart, drops the destination
   from its ring while a binding to it remains).
6. The ring is rebuilt (lazily, at the next route) when a binding comes or goes; a lookup is a
   bisect over the ranges' cumulative ends. Routes are cached per hashed value of at most
   ``MAX_CACHED`` octets (a bounded dict, cleared whenever the ring changes).
7. A budget for the loop: ``phash2`` in Python costs microseconds per element, and a header value can
   be a nested table as large as a frame (a 125 KB one took over 300 ms). A header value over
   ``MAX_PHASH2`` octets (on the wire, its tag included) or of more than ``MAX_PHASH2_ELEMENTS``
   elements (an array of 4,000 voids fits in 4 KiB and took 4 ms) is hashed with BLAKE2b instead: as
   stable, as well spread, not RabbitMQ's placement for that value. Routing keys and properties are at most
   255 octets and always hashed as RabbitMQ hashes them.
"""

from __future__ import annotations

import bisect
import hashlib
import re
import struct
from collections.abc import Mapping
from typing import Any

from ottermq.amqp.erlang import Atom, format_term, indentation, pretty_term, to_wire
from ottermq.amqp.errors import ChannelCrashed, FrameError, PreconditionFailed
from ottermq.amqp.props import split_props

from .erlhash import PHASH2_UNDEFINED, TooComplex, jump_consistent_hash, phash2_binary, phash2_field
from .topic import Destination
from .values import amqp_type_name, to_erlang

__all__ = [
    "CHASH_DESCRIPTION",
    "CHASH_EXCHANGE_TYPE",
    "HASH_PROPERTIES",
    "HashRing",
    "HashSource",
    "MAX_CACHED",
    "MAX_PHASH2",
    "MAX_PHASH2_ELEMENTS",
    "binding_weight",
    "ring_order",
]

CHASH_EXCHANGE_TYPE = "x-consistent-hash"
CHASH_DESCRIPTION = "Consistent Hashing Exchange"
HASH_PROPERTIES = {"correlation_id": 0x0400, "message_id": 0x0080, "timestamp": 0x0040}
"""The properties ``hash-property`` may name, with their flag bits (``amqp.props.PROPERTIES``)."""

MAX_PHASH2 = 4096
"""Header values longer than this (octets) are hashed with BLAKE2b, not ``phash2`` (rule 7)."""
MAX_PHASH2_ELEMENTS = 256
"""Header values with more elements than this (nested entries included) are hashed with BLAKE2b (rule 7)."""
MAX_CACHED = 255
"""Longer hashed values are not kept in an exchange's route cache (its memory stays small)."""

_PHASH2_MASK = (1 << 27) - 1
_WEIGHT = re.compile(rb"[+-]?[0-9]+")
_DIGITS = re.compile(r"([0-9]+)")
_NOT_AN_INTEGER = "The binding key must be an integer: "
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_HEADERS_BIT = 0x2000
# octets after the tag of the header values with no length prefix (amqp.table's layout); the others
# have a 4-octet length
_FIXED = dict(zip(b"bBsuIilLTfdtDV", (1, 1, 2, 2, 4, 4, 8, 8, 8, 4, 8, 1, 5, 0), strict=True))
_SIZED = frozenset(b"SxFA")


def _octets(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def binding_weight(routing_key: str) -> int:
    """A binding's weight (rule 1).

    Raises:
        PreconditionFailed: not an integer, or less than 1 (the plugin's texts).
    """
    raw = _octets(routing_key)
    if not _WEIGHT.fullmatch(raw):
        chars = _NOT_AN_INTEGER + pretty_term(raw, indentation(_NOT_AN_INTEGER) + 1)
        raise PreconditionFailed(to_wire(chars))
    weight = int(raw)
    if weight < 1:
        raise PreconditionFailed("The binding key must be greater than 0")
    return weight


def ring_order(dest: Destination) -> tuple[str, list[tuple[int, int, str]], str]:
    """Where a destination goes on the ring (rule 5): its kind, then its name's runs of digits (as
    numbers, before text) and of other characters, then the name itself (a total order)."""
    kind, name = dest
    runs = [(0, int(run), run) if i % 2 else (1, 0, run) for i, run in enumerate(_DIGITS.split(name)) if run]
    return kind, runs, name


class HashSource:
    """What an exchange's messages are hashed on (rule 2), from its declare arguments.

    Raises:
        ChannelCrashed: ``hash-header`` or ``hash-property`` is not a long string.
        PreconditionFailed: both are given, or ``hash-property`` names another property.
    """

    __slots__ = ("header", "property_bit")

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        header = _longstr_arg(arguments, "hash-header")  # both read first: either may crash
        prop = _longstr_arg(arguments, "hash-property")
        self.header: bytes | None = header  # None: not a header (the routing key or a property)
        self.property_bit = 0  # 0: not a property
        if prop is not None:
            if header is not None:
                raise PreconditionFailed("hash-header and hash-property are mutually exclusive")
            bit = HASH_PROPERTIES.get(prop.decode("latin-1"), 0)
            if not bit:
                raise PreconditionFailed(to_wire("Unsupported property: " + prop.decode("latin-1")))
            self.property_bit = bit

    def value(self, routing_key: str, raw_props: bytes) -> bytes | str | None:
        """What a message is hashed on, in a hashable form: the routing key (``str``), the
        property's octets (``timestamp`` as decimal text), the header's value octets (its tag
        first), or None when the message has no such property or header.

        A property list or headers table that does not parse counts as lacking the value (the
        publish path has checked the list; RabbitMQ would not have accepted the message).
        """
        if self.header is None and not self.property_bit:
            return routing_key
        if len(raw_props) < 2:
            return None
        bit = self.property_bit or _HEADERS_BIT
        if not (raw_props[0] << 8 | raw_props[1]) & bit:
            return None
        try:
            field = split_props(raw_props)[1].get(bit)
        except FrameError:
            return None
        if field is None:
            return None
        if bit == HASH_PROPERTIES["timestamp"]:
            return str(_U64.unpack(field)[0]).encode()
        if self.property_bit:
            return field[1:]  # a shortstr: its length octet first
        assert self.header is not None
        return _header_value(field, self.header)

    def phash2(self, value: bytes | str | None) -> int:
        """``erlang:phash2`` of what ``value`` stands for (rule 3); a header value longer than
        ``MAX_PHASH2`` octets or ``MAX_PHASH2_ELEMENTS`` elements is hashed with BLAKE2b instead (rule 7)."""
        if value is None:
            return PHASH2_UNDEFINED
        if isinstance(value, str):
            return phash2_binary(_octets(value))
        if self.header is None:
            return phash2_binary(value)
        if len(value) > MAX_PHASH2:
            return _blake2b(value)
        try:
            return phash2_field(value, 0, len(value), MAX_PHASH2_ELEMENTS)
        except TooComplex:
            return _blake2b(value)
        except ValueError:
            return PHASH2_UNDEFINED


def _blake2b(value: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(value, digest_size=4).digest(), "big") & _PHASH2_MASK


def _longstr_arg(arguments: Mapping[str, Any], key: str) -> bytes | None:
    if key not in arguments:
        return None
    value = arguments[key]
    kind = amqp_type_name(value)
    if kind != "longstr":  # the plugin's case_clause on what rabbit_misc:table_lookup returned
        raise ChannelCrashed(format_term((Atom("case_clause"), (Atom(kind), to_erlang(value)))))
    return _octets(value) if isinstance(value, str) else bytes(value)


def _header_value(table: bytes, name: bytes) -> bytes | None:
    """The octets (tag first) of the first value of key ``name`` in a headers table (its 4-octet
    length first), or None when it has no such key or does not parse."""
    if len(table) < 4:
        return None
    end = min(len(table), 4 + _U32.unpack_from(table, 0)[0])
    pos = 4
    try:
        while pos < end:
            key_end = pos + 1 + table[pos]
            tag = table[key_end]
            size = _FIXED.get(tag)
            if size is None:
                if tag not in _SIZED:
                    return None
                size = 4 + _U32.unpack_from(table, key_end + 1)[0]
            stop = key_end + 1 + size
            if stop > end:
                return None
            if table[pos + 1 : key_end] == name:
                return table[key_end:stop]
            pos = stop
    except (IndexError, struct.error):
        return None
    return None


class HashRing:
    """Destinations and their weights laid out as bucket ranges (rules 4-6)."""

    __slots__ = ("_keys", "_ends", "_routed", "_dirty")

    def __init__(self) -> None:
        self._keys: dict[Destination, dict[str, int]] = {}  # destination -> {binding key: bindings}
        self._ends: list[int] = []  # cumulative end of each destination's range, in ring order
        self._routed: list[frozenset[Destination]] = []  # what a bucket in each range routes to
        self._dirty = False

    def add(self, dest: Destination, routing_key: str) -> None:
        """One more binding of ``dest`` with ``routing_key`` (a valid weight)."""
        keys = self._keys.setdefault(dest, {})
        keys[routing_key] = keys.get(routing_key, 0) + 1
        self._dirty = True

    def remove(self, dest: Destination, routing_key: str) -> None:
        """One binding of ``dest`` with ``routing_key`` less."""
        keys = self._keys.get(dest)
        if keys is None or routing_key not in keys:
            return
        keys[routing_key] -= 1
        if not keys[routing_key]:
            del keys[routing_key]
            if not keys:
                del self._keys[dest]
        self._dirty = True

    @property
    def buckets(self) -> int:
        """How many buckets the ring has (the sum of its weights)."""
        if self._dirty:
            self._rebuild()
        return self._ends[-1] if self._ends else 0

    def layout(self) -> list[tuple[Destination, int]]:
        """``(destination, weight)`` in ring order."""
        if self._dirty:
            self._rebuild()
        starts = [0, *self._ends][: len(self._ends)]
        return [
            (next(iter(routed)), end - start)
            for routed, start, end in zip(self._routed, starts, self._ends, strict=True)
        ]

    def pick(self, key: int) -> frozenset[Destination]:
        """The destination (a one-element set) of the bucket hash ``key`` falls in; empty without
        bindings."""
        if self._dirty:
            self._rebuild()
        ends = self._ends
        if not ends:
            return frozenset()
        bucket = jump_consistent_hash(key, ends[-1])
        return self._routed[bisect.bisect_right(ends, bucket)]

    def _rebuild(self) -> None:
        ends: list[int] = []
        routed: list[frozenset[Destination]] = []
        total = 0
        for dest in sorted(self._keys, key=ring_order):
            first = min(self._keys[dest], key=_octets)
            total += int(_octets(first))
            ends.append(total)
            routed.append(frozenset((dest,)))
        self._ends, self._routed, self._dirty = ends, routed, False
