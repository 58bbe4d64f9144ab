"""Lazy access to ``Basic`` content-header properties, kept as the raw octets the publisher sent.

The broker forwards ``raw_props`` (property flags + property list) untouched and only looks
inside for what it needs: :func:`quick_props` walks the flags once per publish to pull out
``delivery-mode``, ``priority``, ``expiration`` and ``user-id``; :func:`get_headers` decodes the
``headers`` table (headers exchange, dead-lettering); :func:`decode_properties` is the full pamqp
decode for the rare paths that need every field.

Property flag bits (AMQP 0-9-1 ``basic`` class), most significant first:

====  ================  =========  ====  ================  =========
bit   property          type       bit   property          type
====  ================  =========  ====  ================  =========
15    content-type      shortstr   8     expiration        shortstr
14    content-encoding  shortstr   7     message-id        shortstr
13    headers           table      6     timestamp         64-bit
12    delivery-mode     octet      5     type              shortstr
11    priority          octet      4     user-id           shortstr
10    correlation-id    shortstr   3     app-id            shortstr
9     reply-to          shortstr   2     cluster-id        shortstr
====  ================  =========  ====  ================  =========

Bit 0 set means another 16-bit flag word follows (none are defined for ``basic``; they are
skipped, as pamqp does).

:func:`parse_expiration` reproduces RabbitMQ 3.10's validation of the ``expiration`` property and
its ``PRECONDITION_FAILED`` reply text byte for byte, including how Erlang's ``~p`` wraps long
terms onto several lines.
"""

from __future__ import annotations

import struct

from pamqp import commands

from .errors import FrameError, PreconditionFailed
from .table import decode_table

__all__ = [
    "MAX_EXPIRATION_MS",
    "decode_properties",
    "get_headers",
    "parse_expiration",
    "quick_props",
]

_U32 = struct.Struct(">I")


def _truncated() -> FrameError:
    return FrameError("content header property list is truncated or malformed")


def _flags(raw: bytes) -> tuple[int, int]:
    """Return ``(first flag word, offset of the property list)``."""
    if len(raw) < 2:
        raise FrameError("content header has no property flags")
    flags = (raw[0] << 8) | raw[1]
    pos = 2
    word = flags
    while word & 1:  # continuation flag words: nothing defined in them for basic
        if pos + 2 > len(raw):
            raise FrameError("content header property flags are truncated")
        word = (raw[pos] << 8) | raw[pos + 1]
        pos += 2
    return flags, pos


def quick_props(raw_props: bytes) -> tuple[int, int | None, str | None, str | None]:
    """Pull the properties the broker acts on out of raw property octets.

    Args:
        raw_props: property flags + property list, as in the content header after byte 12.

    Returns:
        ``(delivery_mode or 0, priority or None, expiration or None, user_id or None)``.
        ``expiration`` and ``user_id`` are ``None`` only when absent: a present but empty
        value is returned as ``""`` (RabbitMQ rejects an empty expiration).

    Raises:
        FrameError: truncated property list or a shortstr that is not valid UTF-8.
    """
    flags, pos = _flags(raw_props)
    if not flags & 0xFFFE:
        return 0, None, None, None
    raw = raw_props
    delivery_mode = 0
    priority: int | None = None
    expiration: str | None = None
    user_id: str | None = None
    try:
        if flags & 0x8000:  # content-type
            pos += 1 + raw[pos]
        if flags & 0x4000:  # content-encoding
            pos += 1 + raw[pos]
        if flags & 0x2000:  # headers
            pos += 4 + _U32.unpack_from(raw, pos)[0]
        if flags & 0x1000:
            delivery_mode = raw[pos]
            pos += 1
        if flags & 0x0800:
            priority = raw[pos]
            pos += 1
        if flags & 0x0400:  # correlation-id
            pos += 1 + raw[pos]
        if flags & 0x0200:  # reply-to
            pos += 1 + raw[pos]
        if flags & 0x0100:
            end = pos + 1 + raw[pos]
            expiration = raw[pos + 1 : end].decode("utf-8")
            pos = end
        if flags & 0x0080:  # message-id
            pos += 1 + raw[pos]
        if flags & 0x0040:  # timestamp
            pos += 8
        if flags & 0x0020:  # type
            pos += 1 + raw[pos]
        if flags & 0x0010:
            end = pos + 1 + raw[pos]
            user_id = raw[pos + 1 : end].decode("utf-8")
            pos = end
        if flags & 0x0008:  # app-id
            pos += 1 + raw[pos]
        if flags & 0x0004:  # cluster-id
            pos += 1 + raw[pos]
    except (IndexError, struct.error, UnicodeDecodeError):
        raise _truncated() from None
    if pos > len(raw):
        raise _truncated()
    return delivery_mode, priority, expiration, user_id


def get_headers(raw_props: bytes) -> dict[str, object] | None:
    """Decode the ``headers`` property with the type-preserving table codec.

    Returns:
        The headers table, or ``None`` when the property is absent.

    Raises:
        FrameError: truncated or malformed property list / table.
    """
    flags, pos = _flags(raw_props)
    if not flags & 0x2000:
        return None
    try:
        if flags & 0x8000:
            pos += 1 + raw_props[pos]
        if flags & 0x4000:
            pos += 1 + raw_props[pos]
    except IndexError:
        raise _truncated() from None
    return decode_table(raw_props, pos)[0]


def decode_properties(raw_props: bytes) -> commands.Basic.Properties:
    """Fully decode raw property octets with pamqp.

    Raises:
        FrameError: the octets do not decode.
    """
    props = commands.Basic.Properties()
    try:
        flags, offset = _flags(raw_props)  # basic's properties are all in the first flag word
        props.unmarshal(flags, raw_props[offset:])
    except Exception as exc:  # pamqp raises ValueError, struct.error, UnicodeDecodeError, ...
        raise FrameError(f"cannot decode content header properties: {exc}") from exc
    return props


# --- expiration ---------------------------------------------------------------------------------

MAX_EXPIRATION_MS = 315_360_000_000
"""Largest ``expiration`` RabbitMQ 3.10 accepts: ten years in milliseconds."""

_REPLY_PREFIX_LEN = len(PreconditionFailed.name) + 3  # "PRECONDITION_FAILED - "


def parse_expiration(value: str) -> int:
    """Validate a message's ``expiration`` property the way RabbitMQ 3.10 does.

    RabbitMQ parses it with Erlang's ``string:to_integer``: an optional single ``+``/``-`` sign
    followed by ASCII digits, nothing after them; then ``0 <= N <= 315360000000``. Leading
    zeros and a ``+`` sign are accepted (``"+5"`` and ``"007"`` are valid), ``"-0"`` is 0.

    Args:
        value: the property as decoded from the content header.

    Returns:
        The TTL in milliseconds.

    Raises:
        PreconditionFailed: with RabbitMQ's exact text, e.g.
            ``invalid expiration '-1': {value_negative,-1}``.
    """
    if value.isdigit() and value.isascii():
        ms = int(value)
        if ms <= MAX_EXPIRATION_MS:
            return ms
    raw = value.encode("utf-8")
    stop = 1 if raw[:1] in (b"+", b"-") else 0
    start = stop
    while stop < len(raw) and 48 <= raw[stop] <= 57:
        stop += 1
    term: object
    if stop == start:
        term = _Atom("no_integer")
    elif stop < len(raw):
        term = (_Atom("leftover_string"), raw[stop:])
    else:
        ms = int(raw)
        if ms < 0:
            term = (_Atom("value_negative"), ms)
        elif ms > MAX_EXPIRATION_MS:
            term = (_Atom("value_too_large"), ms)
        else:
            return ms
    raise PreconditionFailed(_rabbit_text(raw, term))


def _rabbit_text(raw: bytes, term: object) -> str:
    """``rabbit_misc:format("invalid expiration '~s': ~p", ...)`` as sent on the wire.

    Erlang formats the binary and the term as Latin-1 characters (one per octet) and the reply
    text is the resulting octets, cut to 252 octets + ``...`` when the whole close text would
    exceed 255.
    """
    prefix = "invalid expiration '" + raw.decode("latin-1") + "': "
    column = 0
    for ch in prefix:  # io_lib_format:indentation/2
        if ch == "\n":
            column = 0
        elif ch == "\t":
            column = (column + 8) // 8 * 8
        else:
            column += 1
    out = (prefix + _erl_print(term, column + 1)).encode("latin-1")
    if _REPLY_PREFIX_LEN + len(out) > 255:
        out = out[: 252 - _REPLY_PREFIX_LEN] + b"..."
    return out.decode("utf-8", "ignore")


# --- a port of the subset of Erlang's io_lib_pretty that ~p uses for these terms ----------------
# Intermediate form: (kind, payload, length). Atomic items carry their text; lists and tagged
# tuples carry their element items. Line length 80, no depth or character limit.


class _Atom(str):
    """An Erlang atom (printed bare)."""


class _NoGood(Exception):
    """io_lib_pretty's ``throw(no_good)``."""


_Item = tuple[int, object, int]
_ATOMIC, _LIST, _TAGGED = 0, 1, 2
_LL = 80
_ESCAPES = {
    0x22: '\\"',
    0x5C: "\\\\",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x08: "\\b",
    0x0C: "\\f",
    0x1B: "\\e",
}


def _printable_latin1(data: bytes) -> bool:
    return all(32 <= c <= 126 or 160 <= c or c in (8, 9, 10, 11, 12, 13, 27) for c in data)


def _intermediate(term: object) -> _Item:
    if isinstance(term, (str, int)):  # atoms and integers
        text = str(term)
        return _ATOMIC, text, len(text)
    if isinstance(term, bytes):  # an Erlang list of octets
        if _printable_latin1(term):
            text = '"' + "".join(_ESCAPES.get(c, chr(c)) for c in term) + '"'
            return _ATOMIC, text, len(text)
        items = [_intermediate(c) for c in term]
        return _LIST, items, 1 + sum(item[2] + 1 for item in items)
    assert isinstance(term, tuple)
    items = [_intermediate(e) for e in term]
    return _TAGGED, items, 1 + sum(item[2] + 1 for item in items)


def _write(item: _Item) -> str:
    kind, payload, _ = item
    if kind == _ATOMIC:
        return payload  # type: ignore[return-value]
    inner = ",".join(_write(e) for e in payload)  # type: ignore[attr-defined]
    return f"[{inner}]" if kind == _LIST else f"{{{inner}}}"


def _fits(item: _Item, col: int, m: int, ld: int, w: int) -> bool:
    return item[2] < _LL - col - ld and item[2] + w + ld <= m


def _tail_fits(item: _Item, col: int, m: int, ld1: int, w: int) -> bool:
    if item[0] != _ATOMIC:
        return False
    elen = 1 + item[2]
    if ld1 == 0:
        return elen + 1 < _LL - col and w + elen + 1 <= m
    return elen < _LL - col - ld1 and w + elen + ld1 <= m


def _erl_print(term: object, col: int) -> str:
    """``io_lib_pretty:print(Term, Col, 80, -1)`` for atoms, integers, octet lists, tuples."""
    item = _intermediate(term)
    if item[0] == _ATOMIC or item[2] < _LL - col:
        return _write(item)
    m = item[2]
    tind = 1
    for attempt in (-1, 4):
        try:
            tind = _cind(item, col, m, attempt, 0, 0)
            break
        except _NoGood:
            pass
    return _pp(item, col, m, tind, col - 1, 0, 0)


def _pp(item: _Item, col: int, m: int, tind: int, ind: int, ld: int, w: int) -> str:
    if _fits(item, col, m, ld, w):
        return _write(item)
    kind, payload = item[0], item[1]
    if kind == _LIST:
        return "[" + _pp_list(payload, col + 1, m, tind, ind + 1, ld, w + 1) + "]"  # type: ignore[arg-type]
    if kind == _TAGGED:
        items: list[_Item] = payload  # type: ignore[assignment]
        tag, rest = items[0], items[1:]
        tlen = tag[2]
        tag_ind = tlen + 2
        tcol = col + tag_ind
        if 0 < tind < tag_ind:
            body = _pp_tail(rest, col + tind, tcol, m, tind, ind + tind, ld, w + 1 + tlen)
        else:
            body = "," + _pp_list(rest, tcol, m, tind, ind + tag_ind, ld, w + 2 + tlen)
        return "{" + _write(tag) + body + "}"
    return payload  # type: ignore[return-value]


def _pp_list(items: list[_Item], col0: int, m: int, tind: int, ind: int, ld: int, w: int) -> str:
    first, rest = items[0], items[1:]
    text, width = _pp_element(first, col0, m, tind, ind, 0 if rest else ld + 1, w)
    return text + _pp_tail(rest, col0, col0 + width, m, tind, ind, ld, w + width)


def _pp_tail(items: list[_Item], col0: int, col: int, m: int, tind: int, ind: int, ld: int, w: int) -> str:
    out = []
    last = len(items) - 1
    for i, item in enumerate(items):
        ld1 = ld + 1 if i == last else 0
        if _tail_fits(item, col, m, ld1, w):
            out.append("," + _write(item))
            col += 1 + item[2]
            w += 1 + item[2]
        else:
            text, width = _pp_element(item, col0, m, tind, ind, ld1, 0)
            out.append(",\n" + " " * ind + text)
            col, w = col0 + width, width
    return "".join(out)


def _pp_element(item: _Item, col: int, m: int, tind: int, ind: int, ld: int, w: int) -> tuple[str, int]:
    if item[0] == _ATOMIC and _fits(item, col, m, ld, w):
        return _write(item), item[2]
    return _pp(item, col, m, tind, ind, ld, w), _LL


def _cind(item: _Item, col: int, m: int, ind: int, ld: int, w: int) -> int:
    if _fits(item, col, m, ld, w):
        return ind
    kind, payload = item[0], item[1]
    if kind == _LIST:
        return _cind_list(payload, col + 1, m, ind, ld, w + 1)  # type: ignore[arg-type]
    if kind == _TAGGED:
        items: list[_Item] = payload  # type: ignore[assignment]
        tlen = items[0][2]
        tag_ind = tlen + 2
        tcol = col + tag_ind
        if 0 < ind < tag_ind:
            col1 = col + ind
            if m + col1 <= _LL or col1 <= _LL // 2:
                return _cind_tail(items[1:], col1, tcol, m, ind, ld, w + 1 + tlen)
            raise _NoGood
        if m + tcol < _LL or tcol < _LL // 2:
            return _cind_list(items[1:], tcol, m, ind, ld, w + 2 + tlen)
        raise _NoGood
    return ind


def _cind_list(items: list[_Item], col0: int, m: int, ind: int, ld: int, w: int) -> int:
    rest = items[1:]
    width = _cind_element(items[0], col0, m, ind, 0 if rest else ld + 1, w)
    return _cind_tail(rest, col0, col0 + width, m, ind, ld, w + width)


def _cind_tail(items: list[_Item], col0: int, col: int, m: int, ind: int, ld: int, w: int) -> int:
    last = len(items) - 1
    for i, item in enumerate(items):
        ld1 = ld + 1 if i == last else 0
        if _tail_fits(item, col, m, ld1, w):
            col += 1 + item[2]
            w += 1 + item[2]
        else:
            width = _cind_element(item, col0, m, ind, ld1, 0)
            col, w = col0 + width, width
    return ind


def _cind_element(item: _Item, col: int, m: int, ind: int, ld: int, w: int) -> int:
    if item[0] == _ATOMIC and _fits(item, col, m, ld, w):
        return item[2]
    _cind(item, col, m, ind, ld, w)
    return _LL


# --- rewriting (dead-lettering) -------------------------------------------------------------------
_FIELD_BITS = (
    (0x8000, "s"), (0x4000, "s"), (0x2000, "t"), (0x1000, "o"), (0x0800, "o"), (0x0400, "s"),
    (0x0200, "s"), (0x0100, "s"), (0x0080, "s"), (0x0040, "q"), (0x0020, "s"), (0x0010, "s"),
    (0x0008, "s"), (0x0004, "s"),
)
HEADERS_BIT = 0x2000
REPLY_TO_BIT = 0x0200
EXPIRATION_BIT = 0x0100


def split_props(raw_props: bytes) -> tuple[int, dict[int, bytes]]:
    """Split raw properties into ``(flags, {flag bit: the field's octets})``.

    Continuation flag words (none defined for ``basic``) are dropped.

    Raises:
        FrameError: truncated or malformed property list.
    """
    flags, pos = _flags(raw_props)
    fields: dict[int, bytes] = {}
    raw = raw_props
    try:
        for bit, kind in _FIELD_BITS:
            if not flags & bit:
                continue
            if kind == "s":
                end = pos + 1 + raw[pos]
            elif kind == "t":
                end = pos + 4 + _U32.unpack_from(raw, pos)[0]
            elif kind == "o":
                end = pos + 1
            else:
                end = pos + 8
            if end > len(raw):
                raise _truncated()
            fields[bit] = raw[pos:end]
            pos = end
    except (IndexError, struct.error):
        raise _truncated() from None
    return flags & 0xFFFE, fields


def join_props(fields: dict[int, bytes]) -> bytes:
    """Property flags + property list from ``{flag bit: the field's octets}`` (``split_props``'s form)."""
    flags = 0
    for bit in fields:
        flags |= bit
    return flags.to_bytes(2, "big") + b"".join(fields[bit] for bit, _ in _FIELD_BITS if bit in fields)


def rewrite_props(raw_props: bytes, headers: bytes | None, drop_expiration: bool) -> bytes:
    """Replace the ``headers`` field and optionally drop ``expiration``; keep every other octet.

    Args:
        raw_props: property flags + property list as published.
        headers: the new headers table as encoded by ``table.encode_table`` (with its length
            prefix), or None to remove the headers property.
        drop_expiration: remove the ``expiration`` property (RabbitMQ does when dead-lettering).

    Raises:
        FrameError: malformed input properties.
    """
    fields = split_props(raw_props)[1]
    if headers is None:
        fields.pop(HEADERS_BIT, None)
    else:
        fields[HEADERS_BIT] = headers
    if drop_expiration:
        fields.pop(EXPIRATION_BIT, None)
    return join_props(fields)


def get_reply_to(raw_props: bytes) -> str | None:
    """The ``reply-to`` property, or None when absent.

    Raises:
        FrameError: truncated or malformed property list, or a value that is not UTF-8.
    """
    if len(raw_props) < 2 or not raw_props[0] & (REPLY_TO_BIT >> 8):
        return None
    octets = split_props(raw_props)[1][REPLY_TO_BIT]
    try:
        return octets[1:].decode("utf-8")
    except UnicodeDecodeError:
        raise _truncated() from None


def replace_reply_to(raw_props: bytes, reply_to: str) -> bytes:
    """Set the ``reply-to`` property; every other property keeps its octets (and types).

    Raises:
        FrameError: malformed input properties.
        ValueError: ``reply_to`` longer than a shortstr (255 octets).
    """
    value = reply_to.encode("utf-8")
    if len(value) > 255:
        raise ValueError("reply-to longer than 255 octets")
    fields = split_props(raw_props)[1]
    fields[REPLY_TO_BIT] = bytes((len(value),)) + value
    return join_props(fields)
