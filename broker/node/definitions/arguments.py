"""Arguments in definitions: JSON objects <-> AMQP field tables, with RabbitMQ's type choices.

JSON -> AMQP: ints -> ``l`` (signed 64-bit), strings -> ``S``, booleans -> ``t``, floats -> ``d``,
lists -> ``A``, objects -> ``F``, null -> ``V``, within the one set of bounds (``vhost.bounds``).
AMQP -> JSON: every integer type and timestamps to numbers, decimals to floats, byte strings to text
(``Not UTF-8, base64 is: ...`` when they are not UTF-8); void values are left out of exports,
because ``rabbitmqctl import_definitions`` fails on ``null``.
"""

from __future__ import annotations

import base64
import datetime
import logging
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ottermq.amqp.errors import FrameError
from ottermq.persistence.arguments import decode_arguments, encode_arguments
from ottermq.vhost.bounds import OutOfBounds, field_table

log = logging.getLogger(__name__)


class DefinitionsError(ValueError):
    """A definitions file (or an import) is invalid; the message names the bad entry."""


class Unencodable(DefinitionsError):
    """Arguments holding a value no AMQP field table can carry (an integer beyond 64 bits, nesting
    beyond the bounds), which RabbitMQ keeps as an Erlang term: the item is skipped with ``reason``."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.reason = reason


def arguments_from_json(value: Any, where: str = "arguments") -> bytes:
    """Encode a JSON ``arguments`` object as stored arguments (``persistence.arguments``: an AMQP
    field table, widened for keys over 255 octets; ``None``/``[]`` = empty).

    Raises:
        DefinitionsError: not an object, or text that is not Unicode.
        Unencodable: a value that cannot be encoded.
    """
    if value is None or value == []:
        value = {}
    if not isinstance(value, dict):
        raise DefinitionsError(f"{where}: 'arguments' must be an object, got {value!r}")
    try:  # the one set of bounds (vhost.bounds): 64-bit integers, finite numbers, bounded nesting
        return encode_arguments(field_table(value))
    except UnicodeError as exc:  # a lone surrogate: invalid text (the HTTP API refuses such JSON)
        raise DefinitionsError(f"{where}: {exc}") from None
    except (OutOfBounds, ValueError, TypeError) as exc:
        raise Unencodable(where, f"{exc} (AMQP cannot carry it)") from None


def _bytes_to_json(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "Not UTF-8, base64 is: " + base64.b64encode(raw).decode("ascii")


def _amqp_to_json(value: object, dropped: list[int]) -> Any:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float | Decimal):
        return float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return _bytes_to_json(bytes(value))
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, Mapping):
        result = {}
        for key, item in value.items():
            if item is None:
                dropped[0] += 1
            else:
                result[str(key)] = _amqp_to_json(item, dropped)
        return result
    if isinstance(value, list | tuple):
        items = [_amqp_to_json(item, dropped) for item in value if item is not None]
        dropped[0] += len(value) - len(items)
        return items
    return str(value)


def arguments_to_json(raw: bytes) -> dict[str, Any]:
    """Decode a stored AMQP field table into the JSON object RabbitMQ would export.

    Void values are left out (with a warning): RabbitMQ's import rejects JSON ``null``.

    Raises:
        DefinitionsError: the bytes are not a valid field table.
    """
    try:
        table = decode_arguments(raw)
    except FrameError as exc:
        raise DefinitionsError(f"stored arguments are not a valid field table: {exc}") from None
    dropped = [0]
    result = _amqp_to_json(table, dropped)
    if dropped[0]:
        log.warning("export: left out %d void argument value(s) (RabbitMQ cannot import null)", dropped[0])
    assert isinstance(result, dict)
    return result
