"""The octets a durable exchange's, queue's or binding's arguments are stored as (and carried as
in definitions records): AMQP field tables, widened only where a key does not fit one.

Rules:

1. Arguments whose keys all fit an AMQP field table (at most 255 octets, at every depth) are stored
   as that field table (:mod:`ottermq.amqp.table`), octet for octet what earlier versions wrote:
   old rows read as before, and a stored binding (keyed by its arguments' octets) is found again.
2. Arguments with a longer key (the management API and definitions accept one, as RabbitMQ does;
   AMQP cannot carry one) are stored in the *wide* form: the octet ``0xFF``, then the field-table
   grammar with every key's length as 4 octets instead of 1, in nested tables too. Values keep their
   AMQP type tags. A field table opens with its 32-bit length, so a first octet ``0xFF`` would be a
   table of 4 GiB or more: the two forms cannot be confused.
3. Encoding is deterministic (the same arguments give the same octets), and
   ``decode_arguments(encode_arguments(a)) == a`` for every table the AMQP codec can encode.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from ottermq.amqp.errors import FrameError
from ottermq.amqp.table import decode_array, decode_table, encode_table

__all__ = ["WIDE", "decode_arguments", "encode_arguments"]

WIDE = 0xFF
"""First octet of the wide form (rule 2)."""
MAX_KEY = 255
_MAX_DEPTH = 64  # stored arguments come from bounded input (``vhost.bounds``: 32 levels)
_U32 = struct.Struct(">I")
# octets after the tag of each fixed-size AMQP field type (``S``/``x`` carry their own length)
_FIXED = {
    ord("V"): 0,
    **dict.fromkeys(b"tbB", 1),
    **dict.fromkeys(b"su", 2),
    **dict.fromkeys(b"Iif", 4),
    ord("D"): 5,
    **dict.fromkeys(b"lLTd", 8),
}


def encode_arguments(arguments: Mapping[str, object]) -> bytes:
    """The stored octets of ``arguments`` (rule 1 when every key fits, else rule 2).

    Raises:
        ValueError: a value out of its AMQP type's range.
        TypeError: a value no field table can hold.
    """
    try:
        return encode_table(arguments)  # the common case: one pass
    except ValueError:
        if not _has_long_key(arguments, 0):
            raise
    buf = bytearray((WIDE,))
    _put_table(buf, arguments, 0)
    return bytes(buf)


def decode_arguments(raw: bytes) -> dict[str, object]:
    """The arguments stored as ``raw`` (either form).

    Raises:
        FrameError: the octets are neither form.
    """
    if raw[:1] != bytes((WIDE,)):
        return decode_table(raw)[0]
    table, end = _read_table(raw, 1, len(raw), 0)
    if end != len(raw):
        raise FrameError(f"stored arguments: {len(raw) - end} octets after the table")
    return table


def _has_long_key(value: object, depth: int) -> bool:
    if depth > _MAX_DEPTH:
        return False  # the AMQP codec refuses nothing for depth; keep the check bounded
    if isinstance(value, Mapping):
        return any(
            len(str(key).encode("utf-8", "surrogateescape")) > MAX_KEY or _has_long_key(item, depth + 1)
            for key, item in value.items()
        )
    if isinstance(value, list | tuple):
        return any(_has_long_key(item, depth + 1) for item in value)
    return False


# --- the wide form: writing ----------------------------------------------------------------------


def _put_table(buf: bytearray, table: Mapping[str, object], depth: int) -> None:
    start = len(buf)
    buf += b"\x00\x00\x00\x00"
    for key, value in table.items():
        raw = key.encode("utf-8", "surrogateescape")
        buf += _U32.pack(len(raw))
        buf += raw
        _put_value(buf, value, depth)
    _U32.pack_into(buf, start, len(buf) - start - 4)


def _put_value(buf: bytearray, value: object, depth: int) -> None:
    if depth >= _MAX_DEPTH:
        raise ValueError(f"arguments nested more than {_MAX_DEPTH} levels deep")
    if isinstance(value, Mapping):
        buf += b"F"
        _put_table(buf, value, depth + 1)
    elif isinstance(value, list | tuple):
        buf += b"A"
        _put_array(buf, value, depth + 1)
    else:  # a scalar: the AMQP codec's tagged octets (after a one-entry table's length and empty key)
        buf += encode_table({"": value})[5:]


def _put_array(buf: bytearray, values: Sequence[object], depth: int) -> None:
    start = len(buf)
    buf += b"\x00\x00\x00\x00"
    for value in values:
        _put_value(buf, value, depth)
    _U32.pack_into(buf, start, len(buf) - start - 4)


# --- the wide form: reading ----------------------------------------------------------------------


def _bad(what: str, pos: int) -> FrameError:
    return FrameError(f"stored arguments: {what} at offset {pos}")


def _u32(data: bytes, pos: int, end: int) -> int:
    if pos + 4 > end:
        raise _bad("truncated length", pos)
    return int(_U32.unpack_from(data, pos)[0])


def _read_table(data: bytes, pos: int, end: int, depth: int) -> tuple[dict[str, object], int]:
    stop = pos + 4 + _u32(data, pos, end)
    if stop > end:
        raise _bad("truncated table", pos)
    pos += 4
    table: dict[str, object] = {}
    while pos < stop:
        kstop = pos + 4 + _u32(data, pos, stop)
        if kstop > stop:
            raise _bad("truncated key", pos)
        key = data[pos + 4 : kstop].decode("utf-8", "surrogateescape")
        value, pos = _read_value(data, kstop, stop, depth)
        table.setdefault(key, value)
    return table, stop


def _read_value(data: bytes, pos: int, end: int, depth: int) -> tuple[object, int]:
    if pos >= end:
        raise _bad("missing value", pos)
    if depth >= _MAX_DEPTH:
        raise _bad(f"nested more than {_MAX_DEPTH} levels deep", pos)
    tag = data[pos]
    if tag == ord("F"):
        return _read_table(data, pos + 1, end, depth + 1)
    if tag == ord("A"):
        stop = pos + 5 + _u32(data, pos + 1, end)
        if stop > end:
            raise _bad("truncated array", pos)
        values: list[object] = []
        at = pos + 5
        while at < stop:
            value, at = _read_value(data, at, stop, depth + 1)
            values.append(value)
        return values, stop
    size = _FIXED.get(tag)
    if size is None:
        if tag not in b"Sx":
            raise _bad(f"unknown field type {bytes((tag,))!r}", pos)
        size = 4 + _u32(data, pos + 1, end)
    stop = pos + 1 + size
    if stop > end:
        raise _bad("truncated value", pos)
    # one scalar: the AMQP codec reads it as a one-element array
    return decode_array(_U32.pack(stop - pos) + data[pos:stop])[0][0], stop
