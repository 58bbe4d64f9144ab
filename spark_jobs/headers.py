"""Typed-JSON header values (archive schema v1) to and from plain Python values.

The archive stores each header value as ``{"t": TAG, "v": VALUE}`` with the AMQP field type
tag. :func:`decode_headers` turns such an object into what pika's table encoder takes:

====  ===============================  =========================================
tag   archive ``v``                    Python value (what pika re-encodes it as)
====  ===============================  =========================================
t     bool                             ``bool`` (``t``)
b B   int                              ``int`` (``I``)
s u   int                              ``int`` (``I``)
I i   int                              ``int`` (``I``, or ``l`` beyond 32 bits)
l     int                              ``pika.compat.long`` when pika is there
                                       (``l``), else ``int``
f d   number                           ``float`` (``d``)
D     decimal string                   ``decimal.Decimal`` (``D``)
S     string                           ``str`` (``S``)
T     epoch seconds                    aware UTC ``datetime`` (``T``)
F     object of typed values           ``dict`` (``F``)
A     list of typed values             ``list`` (``A``)
x     base64                           ``bytes`` (``x``)
V     null                             ``None`` (``V``)
====  ===============================  =========================================

pika cannot write the 8/16-bit integer tags, unsigned 32-bit or 32-bit floats: those come back
as the nearest type it has (the value is unchanged). Anything unknown raises ``ValueError``.
No Spark needed here.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["decode_headers", "decode_value", "encode_headers", "encode_value"]

_INT_TAGS = frozenset("bBsuIi")


def _long_type() -> Callable[[int], int]:
    try:
        from pika.compat import long
    except ImportError:  # pragma: no cover - pika is a dev dependency
        return int
    return long  # type: ignore[no-any-return]


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("expected an integer")
    return value


def decode_value(typed: Any) -> Any:
    """One typed value ``{"t": TAG, "v": VALUE}`` as a Python value.

    Raises:
        ValueError: not a typed value, an unknown tag, or a value that does not fit the tag.
    """
    if not isinstance(typed, Mapping) or "t" not in typed:
        raise ValueError(f"not a typed header value: {typed!r}")
    tag = typed["t"]
    value: Any = typed.get("v")
    try:
        if tag == "t":
            if not isinstance(value, bool):
                raise TypeError("expected true or false")
            return value
        if tag in _INT_TAGS:
            return _integer(value)
        if tag == "l":
            return _long_type()(_integer(value))
        if tag in ("f", "d"):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError("expected a number")
            return float(value)
        if tag == "D":
            return Decimal(str(value))
        if tag == "S":
            return str(value)
        if tag == "T":
            return datetime.datetime.fromtimestamp(_integer(value), tz=datetime.UTC)
        if tag == "F":
            return decode_headers(value)
        if tag == "A":
            return [decode_value(item) for item in value]
        if tag == "x":
            return base64.b64decode(value, validate=True)
        if tag == "V":
            return None
        if tag == "R":
            raise ValueError("a table or array nested too deep to publish again")
    except (TypeError, ValueError, InvalidOperation, OverflowError) as exc:
        raise ValueError(f"bad {tag!r} header value {value!r}: {exc}") from exc
    raise ValueError(f"unknown header type tag {tag!r}")


def decode_headers(headers: Mapping[str, Any] | str | None) -> dict[str, Any] | None:
    """A typed headers object (or its JSON text) as a plain dict; ``None`` stays ``None``.

    Raises:
        ValueError: malformed JSON or a malformed typed value.
    """
    if headers is None:
        return None
    if isinstance(headers, str):
        headers = json.loads(headers)
        if headers is None:
            return None
    if not isinstance(headers, Mapping):
        raise ValueError(f"headers must be an object, got {type(headers).__name__}")
    return {str(key): decode_value(value) for key, value in headers.items()}


def encode_value(value: Any) -> dict[str, Any]:
    """A Python value as a typed value, with the tags RabbitMQ would use (the generator's side).

    Raises:
        TypeError: a value with no AMQP field type.
    """
    if isinstance(value, bool):
        return {"t": "t", "v": value}
    if isinstance(value, int):
        return {"t": "l", "v": value}
    if isinstance(value, float):
        return {"t": "d", "v": value}
    if isinstance(value, Decimal):
        return {"t": "D", "v": str(value)}
    if isinstance(value, str):
        return {"t": "S", "v": value}
    if isinstance(value, datetime.datetime):
        return {"t": "T", "v": int(value.timestamp())}
    if isinstance(value, Mapping):
        return {"t": "F", "v": encode_headers(value)}
    if isinstance(value, list | tuple):
        return {"t": "A", "v": [encode_value(item) for item in value]}
    if isinstance(value, bytes | bytearray):
        return {"t": "x", "v": base64.b64encode(bytes(value)).decode("ascii")}
    if value is None:
        return {"t": "V", "v": None}
    raise TypeError(f"no AMQP field type for {type(value).__name__}")


def encode_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    """A plain dict as a typed headers object.

    Raises:
        TypeError: a value with no AMQP field type.
    """
    return {str(key): encode_value(value) for key, value in headers.items()}
