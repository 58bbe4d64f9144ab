"""Dead-letter archive records (schema v2): the line format shared with ``spark_jobs/``.

``SCHEMA_KEYS`` lists a line's fields in order; header tables are typed JSON (``typed_value``) so
``headers_from_json`` gives back a table ``encode_table`` writes with the same AMQP type tags;
``read_props`` pulls what a record keeps out of raw property octets. Pure functions, no I/O.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Final

from ottermq.amqp.errors import FrameError
from ottermq.amqp.props import PROPERTY_FLAGS, split_props
from ottermq.amqp.table import (
    Float,
    Long,
    LongLong,
    Octet,
    RawField,
    Short,
    ShortShort,
    Timestamp,
    ULong,
    UShort,
    decode_table,
)

SCHEMA_VERSION: Final = 2
# v2 added the last three: which limit killed the message (see ``killer``); v1 lines lack them
SCHEMA_KEYS: Final = (
    "schema",
    "time_ms",
    "reason",
    "vhost",
    "queue",
    "exchange",
    "routing_keys",
    "dlx",
    "dlx_routing_key",
    "policy",
    "outcome",
    "drop_reason",
    "death_count",
    "original_expiration",
    "enqueued_ms",
    "message_id",
    "correlation_id",
    "content_type",
    "headers",
    "body_size",
    "body_b64",
    "body_truncated",
    "limit",
    "limit_value",
    "limit_source",
)

Limit = tuple[str, int, str]
"""``(limit, limit_value, limit_source)``: ``message-ttl`` (the queue's TTL, ms), ``expiration`` (the
message's own, ms), ``max-length`` (messages), ``max-length-bytes`` (octets) or ``delivery-limit``
(deliveries); set by the queue's ``argument``, a ``policy``, an ``operator-policy`` or the ``message``."""


def killer(reason: str, queue_limit: Limit | None, expiration: str | None) -> Limit | None:
    """Which limit killed a dead letter: for ``expired``, the queue's TTL (``queue_limit``) or the
    message's own ``expiration`` property, whichever is lower (the message's when equal); for the other
    reasons the queue's limit behind them (``dlx/limits.py``), None for ``rejected``."""
    if reason != "expired" or expiration is None or not expiration.isdigit():
        return queue_limit
    own = int(expiration)
    if queue_limit is None or own <= queue_limit[1]:
        return "expiration", own, "message"
    return queue_limit


# --- typed JSON for header tables -----------------------------------------------------------------


def _text(value: str) -> str:
    """``value`` as valid Unicode: surrogate escapes of non-UTF-8 octets become U+FFFD."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return value


def _json_float(value: float) -> float | str:
    if math.isfinite(value):
        return float(value)
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def typed_value(value: object) -> dict[str, Any]:
    """One header value as ``{"t": tag, "v": JSON value}`` (tags as in :mod:`ottermq.amqp.table`).

    ``F`` holds an object of typed values, ``A`` a list of them, ``x`` base64, ``D`` a plain
    decimal string (``"12.50"``), ``T`` epoch seconds, ``V`` null. Non-finite floats are the
    strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; a long string that is not valid UTF-8
    has its bad octets replaced by U+FFFD.

    Raises:
        TypeError: a value no field table can hold.
    """
    if value is None:
        return {"t": "V", "v": None}
    if isinstance(value, RawField):  # nested deeper than the broker reads: its octets
        return {"t": "R", "v": base64.b64encode(value.raw).decode("ascii")}
    if value is True or value is False:
        return {"t": "t", "v": value}
    tag: bytes | None = getattr(type(value), "tag", None)
    if tag is not None:
        t = tag.decode("ascii")
        if t == "S":  # LongStr: octets that are not UTF-8
            return {"t": "S", "v": bytes(value).decode("utf-8", "replace")}  # type: ignore[call-overload]
        if t == "f":
            return {"t": "f", "v": _json_float(value)}  # type: ignore[arg-type]
        return {"t": "l" if t == "L" else t, "v": int(value)}  # type: ignore[call-overload]
    if isinstance(value, str):
        return {"t": "S", "v": _text(value)}
    if isinstance(value, int):
        return {"t": "l", "v": int(value)}
    if isinstance(value, float):
        return {"t": "d", "v": _json_float(value)}
    if isinstance(value, Decimal):
        return {"t": "D", "v": format(value, "f")}
    if isinstance(value, Mapping):
        return {"t": "F", "v": headers_to_json(value)}
    if isinstance(value, list | tuple):
        return {"t": "A", "v": [typed_value(v) for v in value]}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"t": "x", "v": base64.b64encode(value).decode("ascii")}
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return {"t": "T", "v": int(value.timestamp())}
    raise TypeError(f"cannot archive {type(value).__name__} header value {value!r}")


def headers_to_json(table: Mapping[str, object]) -> dict[str, Any]:
    """A decoded header table as typed JSON (see :func:`typed_value`)."""
    return {_text(key): typed_value(value) for key, value in table.items()}


_FROM_INT: dict[str, Callable[[int], int]] = {
    "b": ShortShort,
    "B": Octet,
    "s": Short,
    "u": UShort,
    "I": Long,
    "i": ULong,
    "l": LongLong,
    "T": Timestamp,
}


def _float_from_json(v: Any) -> float:
    return float(v.replace("Infinity", "inf")) if isinstance(v, str) else float(v)


def _value_from_json(item: Mapping[str, Any]) -> object:
    t, v = item["t"], item["v"]
    wrap = _FROM_INT.get(t)
    if wrap is not None:
        return wrap(int(v))
    if t == "t":
        return bool(v)
    if t == "S":
        return str(v)
    if t == "f":
        return Float(_float_from_json(v))
    if t == "d":
        return _float_from_json(v)
    if t == "D":
        return Decimal(v)
    if t == "F":
        return headers_from_json(v)
    if t == "A":
        return [_value_from_json(x) for x in v]
    if t == "x":
        return base64.b64decode(v)
    if t == "V":
        return None
    if t == "R":
        return RawField(base64.b64decode(v))
    raise ValueError(f"unknown field type tag {t!r}")


def headers_from_json(obj: Mapping[str, Any]) -> dict[str, object]:
    """The inverse of :func:`headers_to_json`: a table ``encode_table`` writes with the same tags.

    Raises:
        ValueError: an unknown tag.
    """
    return {key: _value_from_json(item) for key, item in obj.items()}


# --- properties ------------------------------------------------------------------------------------


def read_props(raw: bytes) -> tuple[str | None, str | None, str | None, str | None, dict[str, object] | None]:
    """What the archive keeps from raw property octets (flags + property list).

    Returns:
        ``(content_type, correlation_id, expiration, message_id, headers)``, ``None`` for absent ones.

    Raises:
        ValueError: truncated or malformed octets (``FrameError`` for a bad table).
    """
    try:
        fields = split_props(raw)[1]
    except FrameError as exc:
        raise ValueError(exc.text) from None

    def shortstr(name: str) -> str | None:
        octets = fields.get(PROPERTY_FLAGS[name])
        return None if octets is None else octets[1:].decode("utf-8", "replace")

    table = fields.get(PROPERTY_FLAGS["headers"])
    headers = None if table is None else decode_table(table, 0)[0]
    content_type, correlation_id = shortstr("content_type"), shortstr("correlation_id")
    return content_type, correlation_id, shortstr("expiration"), shortstr("message_id"), headers


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate in a name that was not valid UTF-8
        return text.encode("utf-8", "replace")


def dumps_line(record: Mapping[str, Any]) -> bytes:
    """One archive line: compact JSON, UTF-8, newline-terminated."""
    return _utf8(json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)) + b"\n"


def fragment(fields: Mapping[str, Any]) -> bytes:
    """``fields`` as JSON object members with a leading comma (``,"a":1,"b":2``)."""
    return b"," + _utf8(json.dumps(fields, ensure_ascii=False, separators=(",", ":"), allow_nan=False))[1:-1]


LINE_HEAD = b'{"schema":%d,"time_ms":' % SCHEMA_VERSION


def line_time(line: bytes) -> int:
    """The ``time_ms`` of an archive line (every line starts with ``schema`` then ``time_ms``)."""
    return int(line[len(LINE_HEAD) : line.index(b",", len(LINE_HEAD))])
