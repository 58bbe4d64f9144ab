"""Lazy access to ``Basic`` content-header properties, kept as the raw octets the publisher sent.

The broker forwards ``raw_props`` (property flags + property list) untouched and only looks
inside for what it needs. Every walk over the property list is derived from one table,
:data:`PROPERTIES` (flag bit, name, field codec, in wire order):

- :func:`quick_props` (every publish) pulls ``delivery-mode``, ``priority``, ``expiration`` and
  ``user-id`` and checks the whole list; :func:`get_headers` decodes the ``headers`` table
  (headers exchange, dead-lettering); :func:`split_props` gives every present field's octets.
  All three are straight-line code generated from the table (``_compile_walk``).
- On :func:`split_props` and :func:`join_props` are built the rewrites (new ``headers``, no
  ``expiration``, another ``reply-to``; every other octet kept) and the dead-letter archive's reader.
- :func:`decode_properties` is the full pamqp decode for the rare paths that need every field.

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
terms onto several lines (printed by :mod:`ottermq.amqp.erlang`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from pamqp import commands

from .erlang import Atom, Charlist, indentation, pretty_term, to_wire
from .errors import FrameError, PreconditionFailed
from .table import decode_table

__all__ = [
    "EXPIRATION_BIT",
    "HEADERS_BIT",
    "MAX_EXPIRATION_MS",
    "PROPERTIES",
    "PROPERTY_FLAGS",
    "REPLY_TO_BIT",
    "decode_properties",
    "get_headers",
    "get_reply_to",
    "join_props",
    "parse_expiration",
    "quick_props",
    "replace_reply_to",
    "rewrite_props",
    "split_props",
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


# --- the property table and the walks derived from it --------------------------------------------


class Codec(NamedTuple):
    """How one AMQP field type is laid out, as Python source over ``raw`` and ``pos``."""

    name: str
    end: str
    """Expression: the offset just after the field that starts at ``pos``."""
    read: str
    """Statements binding ``{field}`` to the field's value and moving ``pos`` past it."""


SHORTSTR = Codec(
    "shortstr",
    "pos + 1 + raw[pos]",
    'end = pos + 1 + raw[pos]\n{field} = raw[pos + 1 : end].decode("utf-8")\npos = end',
)
TABLE = Codec("table", "pos + 4 + _U32.unpack_from(raw, pos)[0]", "{field}, pos = decode_table(raw, pos)")
OCTET = Codec("octet", "pos + 1", "{field} = raw[pos]\npos += 1")
TIMESTAMP = Codec("timestamp", "pos + 8", "{field} = _U64.unpack_from(raw, pos)[0]\npos += 8")

PROPERTIES: tuple[tuple[int, str, Codec], ...] = (
    (0x8000, "content_type", SHORTSTR),
    (0x4000, "content_encoding", SHORTSTR),
    (0x2000, "headers", TABLE),
    (0x1000, "delivery_mode", OCTET),
    (0x0800, "priority", OCTET),
    (0x0400, "correlation_id", SHORTSTR),
    (0x0200, "reply_to", SHORTSTR),
    (0x0100, "expiration", SHORTSTR),
    (0x0080, "message_id", SHORTSTR),
    (0x0040, "timestamp", TIMESTAMP),
    (0x0020, "type", SHORTSTR),
    (0x0010, "user_id", SHORTSTR),
    (0x0008, "app_id", SHORTSTR),
    (0x0004, "cluster_id", SHORTSTR),
)
"""The ``basic`` properties in wire order: ``(flag bit, name, codec)``."""

PROPERTY_FLAGS = {name: bit for bit, name, _ in PROPERTIES}
HEADERS_BIT = PROPERTY_FLAGS["headers"]
REPLY_TO_BIT = PROPERTY_FLAGS["reply_to"]
EXPIRATION_BIT = PROPERTY_FLAGS["expiration"]


def _compile_walk(
    name: str, take: dict[str, str] | None, result: str, empty: str, until: str | None = None
) -> Any:
    """Generate a straight-line walk over ``PROPERTIES``, as dataclasses generates ``__init__``.

    Every present field is stepped over with its codec's ``end``. A field named in ``take``
    (name -> its value when absent) is bound to a local of that name by its codec's ``read``;
    ``take=None`` instead keeps every field's octets in ``fields`` (flag bit -> octets). The walk
    returns ``empty`` when no property (or not ``until``) is present, stops after field ``until``
    (else it checks the whole list) and returns ``result``. Truncated octets raise ``FrameError``.
    One ``if`` per flag and no loop: ``quick_props`` runs on every publish.
    """
    gate = PROPERTY_FLAGS[until] if until else 0xFFFE
    lines = [
        f"def {name}(raw_props):",
        "    flags, pos = _flags(raw_props)",
        f"    if not flags & {gate:#06x}:",
        f"        return {empty}",
        "    raw = raw_props",
        *(f"    {local} = {value}" for local, value in (take or {"fields": "{}"}).items()),
        "    try:",
    ]
    check_end = ["if pos > len(raw):", "    raise _truncated()"]
    for bit, field, codec in PROPERTIES:
        lines.append(f"        if flags & {bit:#06x}:  # {field}, {codec.name}")
        if take is None:
            step = [f"end = {codec.end}", f"fields[{bit:#06x}] = raw[pos:end]", "pos = end"]
        elif field in take:
            step = codec.read.format(field=field).split("\n")
        else:
            step = [f"pos = {codec.end}"]
        if field == until:
            step += [*check_end, f"return {result}"]
        lines += ["            " + line for line in step]
        if field == until:
            break
    lines += [
        "    except (IndexError, struct.error, UnicodeDecodeError):",
        "        raise _truncated() from None",
        *("    " + line for line in check_end),
        f"    return {result}",
    ]
    namespace: dict[str, Any] = {
        "_flags": _flags,
        "_truncated": _truncated,
        "_U32": _U32,
        "_U64": _U64,
        "struct": struct,
        "decode_table": decode_table,
    }
    exec(compile("\n".join(lines), f"<ottermq.amqp.props.{name}>", "exec"), namespace)
    return namespace[name]


_U64 = struct.Struct(">Q")

quick_props: Callable[[bytes], tuple[int, int | None, str | None, str | None]] = _compile_walk(
    "quick_props",
    {"delivery_mode": "0", "priority": "None", "expiration": "None", "user_id": "None"},
    "delivery_mode, priority, expiration, user_id",
    "0, None, None, None",
)
quick_props.__doc__ = """Pull the properties the broker acts on out of raw property octets.

    Args:
        raw_props: property flags + property list, as in the content header after byte 12.

    Returns:
        ``(delivery_mode or 0, priority or None, expiration or None, user_id or None)``.
        ``expiration`` and ``user_id`` are ``None`` only when absent: a present but empty
        value is returned as ``""`` (RabbitMQ rejects an empty expiration).

    Raises:
        FrameError: truncated property list or a shortstr that is not valid UTF-8.
    """

get_headers: Callable[[bytes], dict[str, object] | None] = _compile_walk(
    "get_headers", {"headers": "None"}, "headers", "None", until="headers"
)
get_headers.__doc__ = """Decode the ``headers`` property with the type-preserving table codec.

    Returns:
        The headers table, or ``None`` when the property is absent.

    Raises:
        FrameError: truncated or malformed property list / table.
    """

split_props: Callable[[bytes], tuple[int, dict[int, bytes]]] = _compile_walk(
    "split_props", None, "flags & 0xFFFE, fields", "0, {}"
)
split_props.__doc__ = """Split raw properties into ``(flags, {flag bit: the field's octets})``, in wire order.

    A shortstr or table field keeps its length prefix. Continuation flag words (none are defined
    for ``basic``) are dropped from ``flags``.

    Raises:
        FrameError: truncated or malformed property list.
    """


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
        term = Atom("no_integer")
    elif stop < len(raw):
        term = (Atom("leftover_string"), Charlist(raw[stop:].decode("latin-1")))
    else:
        ms = int(raw)
        if ms < 0:
            term = (Atom("value_negative"), ms)
        elif ms > MAX_EXPIRATION_MS:
            term = (Atom("value_too_large"), ms)
        else:
            return ms
    raise PreconditionFailed(_rabbit_text(raw, term))


def _rabbit_text(raw: bytes, term: object) -> str:
    """``rabbit_misc:format("invalid expiration '~s': ~p", ...)`` as sent on the wire.

    Erlang formats the binary and the term as Latin-1 characters (one per octet); the reply text
    is those octets (``AMQPError.reply_text`` cuts it to 255 octets as RabbitMQ does).
    """
    prefix = "invalid expiration '" + raw.decode("latin-1") + "': "
    return to_wire(prefix + pretty_term(term, indentation(prefix) + 1))


# --- rewriting (dead-lettering, direct reply-to) -------------------------------------------------


def join_props(fields: dict[int, bytes]) -> bytes:
    """Property flags + property list from ``{flag bit: the field's octets}`` (``split_props``'s form)."""
    flags = 0
    for bit in fields:
        flags |= bit
    return flags.to_bytes(2, "big") + b"".join(fields[bit] for bit, _, _ in PROPERTIES if bit in fields)


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
