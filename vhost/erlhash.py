"""Erlang's portable term hash and the consistent-hash exchange plugin's bucket choice, bit for bit.

RabbitMQ 3.10.8's ``rabbit_exchange_type_consistent_hash`` picks a message's bucket with
``jump_consistent_hash(erlang:phash2(Term), Buckets)``, the jump hash of Lamping and Veach driven by
``rand:seed_s(exs1024, {K, K, K})`` (Erlang/OTP 25). Reproducing both here gives the very placement
RabbitMQ gives; ``tests/unit/vhost/test_erlhash.py`` holds values read back from a 3.10.8 node with
``rabbitmqctl eval``.

Rules:
- ``phash2(T)`` is ``make_hash2(T) band (2^27 - 1)``. ``make_hash2`` walks the term depth first, left
  to right, carrying one 32-bit state ``h`` (Bob Jenkins' ``MIX``): a tuple mixes its arity and then
  each element; a list each element and then ``[]``; an atom its ``hashpjw`` value (taken as is when
  it is the first thing hashed); a binary its bytes in 12-byte blocks, seeded with ``h``; an integer
  its 32-bit halves (two signed rounds within +-2^27, else one round of magnitude words with a
  sign constant); a float its IEEE bits (-0.0 as 0.0). Only these forms occur in what the exchange
  hashes: a routing key or property (a binary), ``undefined``, or a header's ``{Type, Value}`` as
  ``rabbit_binary_parser`` builds it (see ``phash2_field``).
- ``jump_consistent_hash(K, N)``: 0 for one bucket; else seed exs1024 (xorshift1024*) from
  ``{K, K, K}``, then ``B = J; J = trunc((B + 1) / R)`` with ``R = V / 2^64`` for each draw ``V``
  until ``J >= N``; the answer is the last ``B``. Floats are IEEE doubles in both languages.
- Everything is total over well-formed input; a malformed field table raises ``ValueError`` (the
  caller decides what that means).
"""

from __future__ import annotations

import struct

__all__ = [
    "PHASH2_UNDEFINED",
    "atom_hash",
    "jump_consistent_hash",
    "phash2_binary",
    "TooComplex",
    "phash2_field",
]

_M32 = 0xFFFFFFFF
_M64 = (1 << 64) - 1
_PHASH2_MASK = (1 << 27) - 1
_HCONST = 0x9E3779B9  # the golden ratio, Jenkins' initial a and b
# (HCONST * n) mod 2^32, make_hash2's per-kind constants
_HC2, _HC3, _HC9, _HC10, _HC11, _HC12, _HC13 = ((_HCONST * n) & _M32 for n in (2, 3, 9, 10, 11, 12, 13))
_NIL_DEF = 2  # erts' tag_val_def of []
_NIL_FIRST = 3468870702  # make_hash2([]) when nothing came before


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    """Jenkins' lookup2 ``MIX`` on 32-bit words."""
    a = (a - b - c) & _M32
    a ^= c >> 13
    b = (b - c - a) & _M32
    b ^= (a << 8) & _M32
    c = (c - a - b) & _M32
    c ^= b >> 13
    a = (a - b - c) & _M32
    a ^= c >> 12
    b = (b - c - a) & _M32
    b ^= (a << 16) & _M32
    c = (c - a - b) & _M32
    c ^= b >> 5
    a = (a - b - c) & _M32
    a ^= c >> 3
    b = (b - c - a) & _M32
    b ^= (a << 10) & _M32
    c = (c - a - b) & _M32
    c ^= b >> 15
    return a, b, c


def _words(h: int, x: int, y: int, const: int) -> int:
    """``UINT32_HASH_2(x, y, const)``: mix two 32-bit words into ``h``."""
    return _mix((const + x) & _M32, (const + y) & _M32, h)[2]


def _binary(h: int, data: bytes) -> int:
    """A binary: ``block_hash`` seeded with ``HCONST_13 + h``."""
    c = (_HC13 + h) & _M32
    size = len(data)
    if not size:
        return c
    a = b = _HCONST
    whole = size - size % 12
    for i in range(0, whole, 12):
        a, b, c = _mix(
            (a + int.from_bytes(data[i : i + 4], "little")) & _M32,
            (b + int.from_bytes(data[i + 4 : i + 8], "little")) & _M32,
            (c + int.from_bytes(data[i + 8 : i + 12], "little")) & _M32,
        )
    rest = size - whole
    c = (c + size) & _M32  # the low byte of c is the length; the last bytes go above it
    if rest > 8:
        c = (c + (int.from_bytes(data[whole + 8 :], "little") << 8)) & _M32
    if rest > 4:
        b = (b + int.from_bytes(data[whole + 4 : whole + min(rest, 8)], "little")) & _M32
    if rest:
        a = (a + int.from_bytes(data[whole : whole + min(rest, 4)], "little")) & _M32
    return _mix(a, b, c)[2]


def _atom(h: int, value: int) -> int:
    return value if h == 0 else _words(h, value, 0, _HC3)


def _integer(h: int, n: int) -> int:
    if -(1 << 27) <= n < (1 << 27):
        if n < 0:
            h = _words(h, -n, 0, _HCONST)  # negative numbers are mixed twice
        return _words(h, n & _M32, 0, _HCONST)
    const = _HC10 if n < 0 else _HC11
    magnitude = -n if n < 0 else n
    while True:  # one round per 64-bit digit, as for bignums
        h = _words(h, magnitude & _M32, (magnitude >> 32) & _M32, const)
        magnitude >>= 64
        if not magnitude:
            return h


_DOUBLE = struct.Struct("<d")
_UINT64 = struct.Struct("<Q")


def _float(h: int, value: float) -> int:
    bits = _UINT64.unpack(_DOUBLE.pack(value if value != 0.0 else 0.0))[0]
    return _words(h, bits >> 32, bits & _M32, _HC12)


def _tuple(h: int, arity: int) -> int:
    return _words(h, arity, 0, _HC9)


def _nil(h: int) -> int:
    return _NIL_FIRST if h == 0 else _words(h, _NIL_DEF, 0, _HC2)


def atom_hash(name: str) -> int:
    """The atom table's hash of an atom (``hashpjw`` over its Latin-1 name)."""
    h = 0
    for octet in name.encode("latin-1"):
        h = ((h << 4) + octet) & _M32
        top = h & 0xF0000000
        if top:
            h ^= top >> 24
            h ^= top
    return h


def phash2_binary(data: bytes) -> int:
    """``erlang:phash2(Binary)``."""
    return _binary(0, data) & _PHASH2_MASK


_UNDEFINED = atom_hash("undefined")
PHASH2_UNDEFINED = _UNDEFINED & _PHASH2_MASK
"""``erlang:phash2(undefined)``: a header or property the message does not have."""

# rabbit_binary_parser's type atom for each field tag, and how the value after the tag is laid out
_TYPE_ATOMS = {
    ord(tag): atom_hash(name)
    for tag, name in (
        ("S", "longstr"),
        ("T", "timestamp"),
        ("b", "byte"),
        ("B", "unsignedbyte"),
        ("s", "short"),
        ("u", "unsignedshort"),
        ("I", "signedint"),
        ("i", "unsignedint"),
        ("d", "double"),
        ("f", "float"),
        ("l", "long"),
        ("L", "long"),
        ("t", "bool"),
        ("D", "decimal"),
        ("F", "table"),
        ("A", "array"),
        ("x", "binary"),
        ("V", "void"),
    )
}
_INTEGERS = {
    ord(tag): struct.Struct(">" + fmt)
    for tag, fmt in (("T", "Q"), ("b", "b"), ("B", "B"), ("s", "h"), ("u", "H"), ("I", "i"), ("i", "I"))
    + (("l", "q"), ("L", "q"))
}
_FLOATS = {ord("d"): struct.Struct(">d"), ord("f"): struct.Struct(">f")}
_LENGTH = struct.Struct(">I")
_DECIMAL = struct.Struct(">BI")
_TRUE, _FALSE = atom_hash("true"), atom_hash("false")
_STRING, _BYTES, _BOOL, _DEC, _TABLE, _ARRAY, _VOID = (ord(c) for c in "SxtDFAV")


class TooComplex(ValueError):
    """A field value has more elements than the caller's budget (``phash2_field``'s ``max_elements``)."""


def phash2_field(raw: bytes, pos: int, end: int, max_elements: int = -1) -> int:
    """``erlang:phash2({Type, Value})`` of the field value whose tag octet is ``raw[pos]``, as
    ``rabbit_misc:table_lookup`` returns it: ``{longstr, <<"a">>}``, ``{bool, true}``,
    ``{decimal, {Scale, Unscaled}}``, ``{void, undefined}``, ``{table, [{Key, Type, Value}]}``,
    ``{array, [{Type, Value}]}``. Nested tables and arrays are walked with an explicit stack, so
    any depth that fits in ``raw[pos:end]`` is hashed without recursion. ``max_elements`` (when not
    negative) bounds the work: a value with more elements (the value itself, and each table entry and
    array element at any depth) is not hashed.

    Raises:
        TooComplex: more than ``max_elements`` elements.
        ValueError: the octets are not one well-formed field value within ``end``.
    """
    try:
        return _field(raw, pos, end, max_elements) & _PHASH2_MASK
    except (IndexError, KeyError, struct.error) as exc:
        raise ValueError(f"malformed field value at offset {pos}") from exc


def _field(raw: bytes, pos: int, end: int, budget: int) -> int:
    h = _tuple(0, 2)
    open_: list[tuple[int, bool]] = []  # enclosing tables (True) and arrays: where each one ends
    while True:
        if budget == 0:
            raise TooComplex(f"more elements than the budget at offset {pos}")
        budget -= 1
        tag = raw[pos]
        h = _atom(h, _TYPE_ATOMS[tag])
        pos += 1
        if tag == _STRING or tag == _BYTES:
            stop = pos + 4 + _LENGTH.unpack_from(raw, pos)[0]
            if stop > end:
                raise IndexError(stop)
            h = _binary(h, raw[pos + 4 : stop])
            pos = stop
        elif tag in _INTEGERS:
            codec = _INTEGERS[tag]
            h = _integer(h, codec.unpack_from(raw, pos)[0])
            pos += codec.size
        elif tag in _FLOATS:
            codec = _FLOATS[tag]
            h = _float(h, codec.unpack_from(raw, pos)[0])
            pos += codec.size
        elif tag == _BOOL:
            h = _atom(h, _TRUE if raw[pos] else _FALSE)
            pos += 1
        elif tag == _DEC:
            scale, unscaled = _DECIMAL.unpack_from(raw, pos)
            h = _integer(_integer(_tuple(h, 2), scale), unscaled)
            pos += _DECIMAL.size
        elif tag == _VOID:
            h = _atom(h, _UNDEFINED)
        else:  # a table or an array: its elements follow, then []
            stop = pos + 4 + _LENGTH.unpack_from(raw, pos)[0]
            if stop > end:
                raise IndexError(stop)
            open_.append((stop, tag == _TABLE))
            pos += 4
        if pos > end:
            raise IndexError(pos)
        while True:  # close what ended here, then begin the next element of what is open
            if not open_:
                return h
            stop, is_table = open_[-1]
            if pos < stop:
                break
            if pos > stop:
                raise IndexError(pos)
            h = _nil(h)
            open_.pop()
        if is_table:  # {Key, Type, Value}
            key_end = pos + 1 + raw[pos]
            if key_end > stop:
                raise IndexError(key_end)
            h = _binary(_tuple(h, 3), raw[pos + 1 : key_end])
            pos = key_end
        else:  # {Type, Value}
            h = _tuple(h, 2)


# --- exs1024 (xorshift1024*) and the jump hash --------------------------------------------------------

_M21 = (1 << 21) - 1
_M33 = (1 << 33) - 1
_M39 = (1 << 39) - 1
_TWO_POW_64 = 18446744073709551616.0


def _exs1024_seed(key: int) -> list[int]:
    """``rand:seed_s(exs1024, {K, K, K})`` before its last step: the 16 xorshift64 states, the last
    one first (``exs1024_gen1024``). The seed words are these times ``2685821657736338717`` mod
    2^64 (xorshift64*); ``jump_consistent_hash`` multiplies only those it reads."""
    low = key & _M21
    r = (
        ((((low + 1) * 2097131) & _M21) << 43)
        | ((((low + 1) * 2097133) & _M21) << 22)
        | ((((low + 1) * 2097143) & _M21) << 1)
        | 1
    )
    state = [0] * 16
    for i in range(15, -1, -1):
        r ^= r >> 12
        r ^= (r & _M39) << 25
        r ^= r >> 27
        state[i] = r
    return state


def jump_consistent_hash(key: int, buckets: int) -> int:
    """The plugin's ``jump_consistent_hash(Key, Buckets)`` for an integer key (a ``phash2``).

    Args:
        key: non-negative integer (``phash2`` gives 0 .. 2^27 - 1).
        buckets: how many buckets there are, at least 1.

    Returns:
        The bucket, 0 .. ``buckets`` - 1.
    """
    if buckets <= 1:
        return 0
    state = _exs1024_seed(key)
    seeded = 0  # state[:seeded] are words (multiplied or drawn), the rest xorshift64 states
    p = 0
    b, j = -1, 0
    while j < buckets:
        b = j
        q = (p + 1) & 15
        while seeded <= q and seeded < 16:  # p < q but at the wrap, when all 16 are words
            state[seeded] = (state[seeded] * 2685821657736338717) & _M64
            seeded += 1
        s0 = state[p]
        s1 = state[q]
        p = q
        s1 ^= (s1 & _M33) << 31
        s1 ^= s1 >> 11
        s1 ^= s0 ^ (s0 >> 30)
        state[p] = s1
        r = float((s1 * 1181783497276652981) & _M64) / _TWO_POW_64  # rand:uniform_s/1 of exs1024
        if r == 0.0:  # Erlang's badarith; a 2^-64 chance, never seen: stay in this bucket
            return b
        j = int((b + 1) / r)
    return b
