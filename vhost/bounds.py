"""The bounds every value is held to before it reaches the store or arithmetic, written once.

Rules:

1. Integers the store keeps (policy priorities, limits, arguments, headers) fit SQLite's INTEGER,
   a signed 64-bit integer (``INT64_MIN``..``INT64_MAX``); AMQP's widest integer (``l``) is the same.
2. Durations in milliseconds that are added to "now" (TTLs, expiries, timeouts, retry delays, cache
   TTLs) are at most ``MAX_DURATION``, ten years: RabbitMQ's own bound on ``x-message-ttl`` and
   ``x-expires``, and far from any overflow of an epoch-ms deadline.
3. A JSON value turned into an AMQP field value (management API arguments and headers, definition
   files) is a string, a boolean, null, a finite number (an integer within rule 1), or an object or
   array of those, nested at most ``MAX_DEPTH`` deep. An integer becomes a ``long`` (``LongLong``),
   as RabbitMQ's HTTP API types it (``rabbit_misc:to_amqp_table``): an equivalence error names it so.
4. Out of bounds raises :class:`OutOfBounds` whose text names the field and the bound; the
   adapters answer it as RabbitMQ answers a refused value (406 on a channel, 400 over HTTP).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ottermq.amqp.table import LongLong

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_DEPTH",
    "MAX_DURATION",
    "OutOfBounds",
    "check_duration",
    "check_int64",
    "field_table",
    "field_value",
]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_DURATION = 315_360_000_000
"""Ten years in milliseconds (rule 2)."""
MAX_DEPTH = 32
"""How deep tables and arrays from JSON may nest (rule 3)."""


class OutOfBounds(ValueError):
    """A value outside the bounds; ``str(error)`` names the field and the bound."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_int64(value: Any, field: str) -> Any:
    """``value`` unchanged if it is not an integer or fits 64 signed bits (rule 1).

    Raises:
        OutOfBounds: an integer outside ``INT64_MIN..INT64_MAX``.
    """
    if _is_int(value) and not INT64_MIN <= value <= INT64_MAX:
        raise OutOfBounds(f"{field} {_shown(value)} is out of range: at most {INT64_MAX}")
    return value


def check_duration(value: Any, field: str) -> Any:
    """``value`` unchanged if it is not an integer or is at most ``MAX_DURATION`` (rule 2).

    Raises:
        OutOfBounds: an integer above ten years of milliseconds.
    """
    if _is_int(value) and value > MAX_DURATION:
        bound = f"at most {MAX_DURATION} (ten years in ms)"
        raise OutOfBounds(f"{field} {_shown(value)} is out of range: {bound}")
    return check_int64(value, field)


def _shown(value: int) -> str:
    text = str(value) if value.bit_length() < 200 else f"of {len(str(abs(value)))} digits"
    return text


def field_value(value: Any, field: str, depth: int = 0) -> Any:
    """A JSON value as an AMQP field value (rule 3).

    Raises:
        OutOfBounds: an integer outside 64 bits, a non-finite number, nesting deeper than
            ``MAX_DEPTH``, or a value of another type.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return LongLong(check_int64(value, field))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise OutOfBounds(f"{field} is not a finite number")
        return value
    if depth >= MAX_DEPTH:
        raise OutOfBounds(f"{field} is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, Mapping):
        return {str(k): field_value(v, f"{field}.{k}", depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [field_value(v, f"{field}[{i}]", depth + 1) for i, v in enumerate(value)]
    raise OutOfBounds(f"{field} has a type AMQP cannot carry ({type(value).__name__})")


def field_table(table: Mapping[str, Any] | None, field: str = "arguments") -> dict[str, Any]:
    """A JSON object as an AMQP field table, every value checked by :func:`field_value`.

    Raises:
        OutOfBounds: see :func:`field_value`.
    """
    return {str(k): field_value(v, f"{field} '{k}'", 1) for k, v in (table or {}).items()}
