"""Type-preserving AMQP 0-9-1 field-table codec (RabbitMQ dialect).

``decode_table`` turns a field table into a plain ``dict[str, object]`` whose values keep their
AMQP type tag, so that ``encode_table(decode_table(data)[0]) == data`` for everything RabbitMQ
and amqp091-go put on the wire. Tagged values are small subclasses of ``int``/``float``/``bytes``
that behave exactly like the builtin (compare, hash, arithmetic) but carry a ``tag`` class
attribute; untagged values get RabbitMQ's defaults when encoded.

========  ==========================  ==================================  ==========================
tag       AMQP / RabbitMQ type        decoded to                          plain Python value encodes
========  ==========================  ==================================  ==========================
``t``     boolean                     ``bool``                            ``bool``
``b``     signed 8-bit                ``ShortShort(int)``
``B``     unsigned 8-bit              ``Octet(int)``
``s``     signed 16-bit               ``Short(int)``
``u``     unsigned 16-bit             ``UShort(int)``
``I``     signed 32-bit               ``Long(int)``
``i``     unsigned 32-bit             ``ULong(int)``
``l``     signed 64-bit               ``LongLong(int)``                   ``int``
``L``     signed 64-bit (as RabbitMQ) ``LongLong(int)`` (re-encodes ``l``)
``f``     32-bit float                ``Float(float)``
``d``     64-bit float                ``float``                           ``float``
``D``     decimal (scale, uint32)     ``decimal.Decimal``                 ``Decimal``
``S``     long string                 ``str`` (``LongStr(bytes)`` if the  ``str``
                                      octets are not valid UTF-8)
``T``     timestamp (uint64 seconds)  ``Timestamp(int)``                  ``datetime.datetime``
``F``     nested table                ``dict``                            ``dict``
``A``     array                       ``list``                            ``list`` / ``tuple``
``x``     byte array                  ``bytes``                           ``bytes`` / ``bytearray``
``V``     void                        ``None``                            ``None``
========  ==========================  ==================================  ==========================

Notes:

* ``s`` is RabbitMQ's signed short and ``u`` its unsigned short (the 0-9-1 errata), ``l`` is
  signed 64-bit; pamqp instead re-encodes integers in the smallest type that fits and floats as
  ``f``, which is why dead-lettering uses this module.
* A plain ``int`` always encodes as ``l`` (RabbitMQ's choice for ``x-death`` ``count``).
* ``t`` re-encodes as ``0x01`` for any non-zero octet, as RabbitMQ does.
* Table keys that are not valid UTF-8 are decoded with ``surrogateescape`` so they re-encode to the
  same octets.
* Decoding reads at most ``MAX_DEPTH`` levels of nested tables and arrays: a table or array deeper
  than that (RabbitMQ accepts any depth that fits in a frame, 15,000 and more) is kept unread as a
  :class:`RawField` holding its octets, which encodes back to exactly those octets. So no decode,
  and no code walking a decoded table, recurses without bound, and deep values go on unchanged.
* Malformed input raises :class:`~ottermq.amqp.errors.FrameError`; values that cannot be encoded
  raise ``ValueError`` (out of range) or ``TypeError`` (unsupported type).
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import ClassVar

from .errors import FrameError

__all__ = [
    "Float",
    "Long",
    "LongLong",
    "LongStr",
    "MAX_DEPTH",
    "Octet",
    "RawField",
    "Short",
    "ShortShort",
    "Timestamp",
    "ULong",
    "UShort",
    "decode_array",
    "decode_table",
    "encode_table",
    "encode_table_into",
    "field_type",
]


class ShortShort(int):
    """Signed 8-bit integer (tag ``b``)."""

    tag: ClassVar[bytes] = b"b"


class Octet(int):
    """Unsigned 8-bit integer (tag ``B``)."""

    tag: ClassVar[bytes] = b"B"


class Short(int):
    """Signed 16-bit integer (tag ``s``)."""

    tag: ClassVar[bytes] = b"s"


class UShort(int):
    """Unsigned 16-bit integer (tag ``u``)."""

    tag: ClassVar[bytes] = b"u"


class Long(int):
    """Signed 32-bit integer (tag ``I``)."""

    tag: ClassVar[bytes] = b"I"


class ULong(int):
    """Unsigned 32-bit integer (tag ``i``)."""

    tag: ClassVar[bytes] = b"i"


class LongLong(int):
    """Signed 64-bit integer (tag ``l``); what a plain ``int`` encodes as."""

    tag: ClassVar[bytes] = b"l"


class Timestamp(int):
    """POSIX timestamp in whole seconds, unsigned 64-bit (tag ``T``)."""

    tag: ClassVar[bytes] = b"T"

    def to_datetime(self) -> datetime.datetime:
        """The timestamp as an aware UTC ``datetime``."""
        return datetime.datetime.fromtimestamp(int(self), tz=datetime.UTC)


class Float(float):
    """32-bit IEEE float (tag ``f``); a plain ``float`` encodes as 64-bit ``d``."""

    tag: ClassVar[bytes] = b"f"


class LongStr(bytes):
    """A long string (tag ``S``) whose octets are not valid UTF-8, kept as raw bytes."""

    tag: ClassVar[bytes] = b"S"


MAX_DEPTH = 64
"""Levels of nested tables and arrays ``decode_table`` reads; deeper ones become ``RawField``."""


class RawField:
    """A value kept as its octets (the tag octet first) and encoded back verbatim: a table or array
    nested deeper than :data:`MAX_DEPTH`, or a value ``decode_table(..., only=...)`` did not read.
    Compares equal to a ``RawField`` with the same octets."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    @property
    def kind(self) -> str:
        """RabbitMQ's name of its field type (``table``, ``array``, ``longstr``, ...)."""
        return _RAW_KINDS.get(self.raw[:1], "unknown")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawField) and other.raw == self.raw

    def __hash__(self) -> int:
        return hash(self.raw)

    def __repr__(self) -> str:
        return f"RawField({self.kind}, {len(self.raw)} octets)"


_U8 = struct.Struct(">B")
_I8 = struct.Struct(">b")
_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
_DEC_U = struct.Struct(">BI")
_DEC_S = struct.Struct(">Bi")

# Fixed-size scalar tags: tag octet -> (struct, wrapper type).
_SCALARS: dict[int, tuple[struct.Struct, type]] = {
    ord("b"): (_I8, ShortShort),
    ord("B"): (_U8, Octet),
    ord("s"): (_I16, Short),
    ord("u"): (_U16, UShort),
    ord("I"): (_I32, Long),
    ord("i"): (_U32, ULong),
    ord("l"): (_I64, LongLong),
    ord("L"): (_I64, LongLong),
    ord("T"): (_U64, Timestamp),
    ord("f"): (_F32, Float),
    ord("d"): (_F64, float),
}

_BOOL, _STR, _TABLE, _ARRAY, _BYTES, _VOID, _DEC = (ord(c) for c in "tSFAxVD")
# octets after the tag of the values with no length prefix
_FIXED: dict[int, int] = {tag: st.size for tag, (st, _) in _SCALARS.items()} | {_BOOL: 1, _VOID: 0, _DEC: 5}


# --- decoding ---------------------------------------------------------------------------------


def _bad(what: str, pos: int) -> FrameError:
    return FrameError(f"malformed field table: {what} at offset {pos}")


def _decode_value(data: bytes, pos: int, end: int, depth: int) -> tuple[object, int]:
    """Decode one tagged value starting at the tag octet ``data[pos]``; ``end`` bounds it; ``depth``:
    how many tables and arrays enclose it."""
    if pos >= end:
        raise _bad("missing value", pos)
    tag = data[pos]
    pos += 1
    if tag == _STR or tag == _BYTES:
        if pos + 4 > end:
            raise _bad("truncated length", pos)
        (n,) = _U32.unpack_from(data, pos)
        pos += 4
        stop = pos + n
        if stop > end:
            raise _bad("truncated string", pos)
        raw = data[pos:stop]
        if tag == _BYTES:
            return bytes(raw), stop
        try:
            return raw.decode("utf-8"), stop
        except UnicodeDecodeError:
            return LongStr(raw), stop
    scalar = _SCALARS.get(tag)
    if scalar is not None:
        st, wrap = scalar
        stop = pos + st.size
        if stop > end:
            raise _bad(f"truncated {chr(tag)!r} value", pos)
        return wrap(st.unpack_from(data, pos)[0]), stop
    if tag == _BOOL:
        if pos >= end:
            raise _bad("truncated boolean", pos)
        return data[pos] != 0, pos + 1
    if tag == _TABLE or tag == _ARRAY:
        start, stop = _frame_bounds(data, pos, end)
        if depth >= MAX_DEPTH:  # kept whole, unread: no recursion past MAX_DEPTH
            return RawField(bytes(data[pos - 1 : stop])), stop
        if tag == _TABLE:
            return _decode_table(data, start, stop, depth + 1)
        return _decode_array(data, start, stop, depth + 1)
    if tag == _VOID:
        return None, pos
    if tag == _DEC:
        if pos + 5 > end:
            raise _bad("truncated decimal", pos)
        scale, value = _DEC_U.unpack_from(data, pos)
        return Decimal(value).scaleb(-scale), pos + 5
    raise _bad(f"unknown field type {bytes((tag,))!r}", pos - 1)


def _frame_bounds(data: bytes, offset: int, limit: int | None) -> tuple[int, int]:
    end_limit = len(data) if limit is None else limit
    if offset + 4 > end_limit:
        raise _bad("truncated length", offset)
    (n,) = _U32.unpack_from(data, offset)
    start = offset + 4
    end = start + n
    if end > end_limit:
        raise _bad(f"length {n} exceeds the available data", offset)
    return start, end


def _skip_value(data: bytes, pos: int, end: int) -> int:
    """Where the value whose tag is at ``data[pos]`` ends, without decoding it."""
    if pos >= end:
        raise _bad("missing value", pos)
    tag = data[pos]
    size = _FIXED.get(tag)
    if size is not None:
        stop = pos + 1 + size
        if stop > end:
            raise _bad(f"truncated {chr(tag)!r} value", pos + 1)
        return stop
    if tag in (_STR, _BYTES, _TABLE, _ARRAY):
        return _frame_bounds(data, pos + 1, end)[1]
    raise _bad(f"unknown field type {bytes((tag,))!r}", pos)


def decode_table(
    data: bytes, offset: int = 0, limit: int | None = None, only: frozenset[str] | None = None
) -> tuple[dict[str, object], int]:
    """Decode a field table (4-octet length prefix included) starting at ``offset``.

    Args:
        data: buffer holding the table.
        offset: position of the table's length prefix.
        limit: position the table may not extend past (default ``len(data)``).

    Returns:
        ``(table, offset just past the table)``; of a key that occurs more than once, the first
        value (what RabbitMQ reads; the table's bytes are forwarded unchanged elsewhere). With
        ``only``, the values of other keys are not decoded: each is a :class:`RawField` of its
        octets (a rewrite of a few keys of a wide table costs a scan, not a decode).

    Raises:
        FrameError: truncated or malformed table.
    """
    start, end = _frame_bounds(data, offset, limit)
    return _decode_table(data, start, end, 0, only)


def _decode_table(
    data: bytes, pos: int, end: int, depth: int, only: frozenset[str] | None = None
) -> tuple[dict[str, object], int]:
    table: dict[str, object] = {}
    while pos < end:
        klen = data[pos]
        kstop = pos + 1 + klen
        if kstop > end:
            raise _bad("truncated key", pos)
        key = data[pos + 1 : kstop].decode("utf-8", "surrogateescape")
        if only is None or key in only:
            value, pos = _decode_value(data, kstop, end, depth)
        else:  # not read: kept as its octets
            pos = _skip_value(data, kstop, end)
            value = RawField(data[kstop:pos])
        if key not in table:  # a key twice: the first one counts (RabbitMQ's rabbit_misc:table_lookup)
            table[key] = value
    return table, end


def decode_array(data: bytes, offset: int = 0, limit: int | None = None) -> tuple[list[object], int]:
    """Decode a field array (4-octet length prefix included) starting at ``offset``.

    Returns:
        ``(values, offset just past the array)``.

    Raises:
        FrameError: truncated or malformed array.
    """
    start, end = _frame_bounds(data, offset, limit)
    return _decode_array(data, start, end, 0)


def _decode_array(data: bytes, pos: int, end: int, depth: int) -> tuple[list[object], int]:
    values: list[object] = []
    while pos < end:
        value, pos = _decode_value(data, pos, end, depth)
        values.append(value)
    return values, end


_TYPE_NAMES: dict[bytes, str] = {
    b"b": "byte",
    b"B": "unsignedbyte",
    b"s": "short",
    b"u": "unsignedshort",
    b"I": "signedint",
    b"i": "unsignedint",
    b"l": "long",
    b"T": "timestamp",
    b"f": "float",
    b"S": "longstr",
}

# a RawField's field type by its tag octet (field_type's names)
_RAW_KINDS: dict[bytes, str] = {
    **_TYPE_NAMES,
    b"L": "long",
    b"d": "double",
    b"t": "bool",
    b"D": "decimal",
    b"F": "table",
    b"A": "array",
    b"x": "binary",
    b"V": "void",
}


def field_type(value: object) -> str:
    """RabbitMQ's name for the field type of a decoded value (``rabbit_binary_parser``'s atoms:
    ``longstr``, ``signedint``, ``long``, ``table``, ``array``, ``void``, ...), as it appears in
    error texts such as ``{unacceptable_type_in_header,"CC",longstr}``."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, RawField):
        return value.kind
    tag = getattr(value, "tag", None)
    if isinstance(tag, bytes):
        return _TYPE_NAMES[tag]
    if isinstance(value, str):
        return "longstr"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, bytes | bytearray):
        return "binary"
    if value is None:
        return "void"
    raise TypeError(f"not a field-table value: {type(value).__name__}")


# --- encoding ---------------------------------------------------------------------------------

_ZERO4 = b"\x00\x00\x00\x00"


def _put_scalar(buf: bytearray, tag: bytes, st: struct.Struct, value: object) -> None:
    buf += tag
    try:
        buf += st.pack(value)
    except struct.error as exc:
        raise ValueError(f"value {value!r} does not fit field type {tag.decode()!r}") from exc


def _put_decimal(buf: bytearray, value: Decimal) -> None:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"cannot encode decimal {value!r}")
    unscaled = int("".join(map(str, digits)) or "0")
    if exponent > 0:
        unscaled *= 10**exponent
        exponent = 0
    if sign:
        unscaled = -unscaled
    scale = -exponent
    if scale > 255 or not -(2**31) <= unscaled < 2**32:
        raise ValueError(f"decimal {value!r} does not fit field type 'D'")
    buf += b"D"
    buf += (_DEC_S if unscaled < 0 else _DEC_U).pack(scale, unscaled)


def _put_long_bytes(buf: bytearray, tag: bytes, raw: bytes | bytearray | memoryview) -> None:
    buf += tag
    buf += _U32.pack(len(raw))
    buf += raw


def _put_value(buf: bytearray, value: object) -> None:
    if value is None:
        buf += b"V"
        return
    cls = type(value)
    if cls is RawField:
        buf += value.raw  # type: ignore[attr-defined]
        return
    if cls is dict:  # before the Mapping ABC check, which costs more than the rest
        buf += b"F"
        encode_table_into(buf, value)  # type: ignore[arg-type]
        return
    tag: bytes | None = getattr(cls, "tag", None)
    if tag is not None:
        if cls is LongStr:
            _put_long_bytes(buf, tag, value)  # type: ignore[arg-type]
            return
        st = _TAG_STRUCT.get(tag)
        if st is not None:
            _put_scalar(buf, tag, st, value)
            return
    if isinstance(value, str):
        _put_long_bytes(buf, b"S", value.encode("utf-8", "surrogateescape"))
    elif isinstance(value, bool):
        buf += b"t\x01" if value else b"t\x00"
    elif isinstance(value, int):
        _put_scalar(buf, b"l", _I64, value)
    elif isinstance(value, float):
        _put_scalar(buf, b"d", _F64, value)
    elif isinstance(value, (list, tuple)):
        buf += b"A"
        _encode_array_into(buf, value)
    elif isinstance(value, Mapping):
        buf += b"F"
        encode_table_into(buf, value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        _put_long_bytes(buf, b"x", value)
    elif isinstance(value, Decimal):
        _put_decimal(buf, value)
    elif isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        _put_scalar(buf, b"T", _U64, int(value.timestamp()))
    else:
        raise TypeError(f"cannot encode {cls.__name__} value {value!r} in a field table")


_TAG_STRUCT: dict[bytes, struct.Struct] = {
    b"b": _I8,
    b"B": _U8,
    b"s": _I16,
    b"u": _U16,
    b"I": _I32,
    b"i": _U32,
    b"l": _I64,
    b"T": _U64,
    b"f": _F32,
}


def _encode_array_into(buf: bytearray, values: Sequence[object]) -> None:
    start = len(buf)
    buf += _ZERO4
    for value in values:
        _put_value(buf, value)
    _U32.pack_into(buf, start, len(buf) - start - 4)


def encode_table_into(buf: bytearray, table: Mapping[str, object]) -> None:
    """Append ``table`` (with its 4-octet length prefix) to ``buf``.

    Raises:
        ValueError: a key longer than 255 octets or a value out of its type's range.
        TypeError: a value of an unsupported type.
    """
    start = len(buf)
    buf += _ZERO4
    for key, value in table.items():
        raw = key.encode("utf-8", "surrogateescape")
        if len(raw) > 255:
            raise ValueError(f"field table key longer than 255 octets: {key[:40]!r}...")
        buf.append(len(raw))
        buf += raw
        _put_value(buf, value)
    _U32.pack_into(buf, start, len(buf) - start - 4)


def encode_table(table: Mapping[str, object]) -> bytes:
    """Encode ``table`` as an AMQP field table, 4-octet length prefix included.

    Tagged values (:class:`Long`, :class:`Timestamp`, ...) keep their tag; plain Python values
    use RabbitMQ's defaults (see the module docstring).

    Raises:
        ValueError: a key longer than 255 octets or a value out of its type's range.
        TypeError: a value of an unsupported type.
    """
    buf = bytearray()
    encode_table_into(buf, table)
    return bytes(buf)
