"""AMQP field values as RabbitMQ sees them: type names, Erlang equality, identity, Erlang form.

RabbitMQ keeps a decoded field value as an Erlang term (``{Type, Value}`` inside tables and
arrays), compares arguments with Erlang's ``==``/``=:=`` and prints them with ``~p`` in reply
texts. This module gives ottermq's decoded values (``ottermq.amqp.table`` values, which carry their
wire tag, or plain Python values as pika encodes them) the same behaviour:

- :func:`amqp_type_name`: RabbitMQ's type name (``signedint``, ``longstr``, ...).
- :func:`erl_equal` / :func:`freeze_value`: Erlang equality and a hashable identity.
- :func:`to_erlang` / :func:`erl_term` / :func:`erl_binary`: the Erlang form of a value and its
  ``~p`` text (the printing itself is :mod:`ottermq.amqp.erlang`'s).
"""

from __future__ import annotations

import calendar
import datetime
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from ottermq.amqp.erlang import Atom, binary_text, format_term, to_wire

__all__ = [
    "amqp_type_name",
    "erl_binary",
    "erl_equal",
    "erl_term",
    "freeze_value",
    "longstr_text",
    "to_erlang",
]


_TAG_NAMES = {
    b"t": "bool",
    b"b": "byte",
    b"B": "unsignedbyte",
    b"s": "short",
    b"u": "unsignedshort",
    b"I": "signedint",
    b"i": "unsignedint",
    b"l": "long",
    b"L": "long",
    b"f": "float",
    b"d": "double",
    b"D": "decimal",
    b"S": "longstr",
    b"T": "timestamp",
    b"F": "table",
    b"A": "array",
    b"x": "binary",
    b"V": "void",
}


def amqp_type_name(value: object) -> str:
    """RabbitMQ's name for the AMQP type of a decoded field value.

    Values from ``ottermq.amqp.table`` carry their wire tag (a ``tag`` class attribute); for plain
    values the type is inferred the way pika encodes them.
    """
    tag = getattr(type(value), "tag", None)
    if tag is not None:
        return _TAG_NAMES.get(tag, "unknown")
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, str):
        return "longstr"
    if isinstance(value, bytes | bytearray | memoryview):
        return "binary"
    if isinstance(value, float):
        return "double"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, list | tuple):
        return "array"
    if value is None:
        return "void"
    return type(value).__name__


def longstr_text(value: object) -> str:
    """The text of a longstr value (a ``str``, or raw bytes that are not valid UTF-8)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "surrogateescape")
    return str(value)


def _epoch(value: datetime.datetime) -> int:
    return calendar.timegm(value.utctimetuple())


def _as_bytes(value: str | bytes | bytearray | memoryview) -> bytes:
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)


def _decimal_parts(value: Decimal) -> tuple[int, int]:
    """``(scale, unscaled)`` as RabbitMQ keeps an AMQP decimal."""
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):  # NaN / Infinity cannot be encoded anyway
        return (0, 0)
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    if exponent > 0:
        return (0, unscaled * 10**exponent)
    return (-exponent, unscaled)


def _kind(value: object) -> str:
    """Erlang-level kind: values of different kinds are never ``==``."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float | datetime.datetime):
        return "number"
    if isinstance(value, str | bytes | bytearray | memoryview):
        return "binary"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, Mapping | list | tuple):
        return "list"
    if value is None:
        return "void"
    return "other"


def erl_equal(a: object, b: object, exact: bool = False) -> bool:
    """Erlang ``==`` (or ``=:=`` with ``exact``) between two decoded field values.

    Numbers compare by value across ``int``/``float``/timestamp (``=:=`` keeps ints and floats
    apart), ``str`` equals ``bytes`` with the same UTF-8 bytes, booleans equal only booleans,
    decimals equal decimals with the same scale and digits, and an empty table equals an empty
    array (both are Erlang's ``[]``). Inside tables and arrays RabbitMQ also compares the AMQP
    types (``amqp_type_name``: the wire tag when the value carries one, else pika's inference),
    and table keys in order.
    """
    ta, tb = type(a), type(b)
    if ta is tb and (ta is str or ta is int or ta is bytes or ta is bool):
        return a == b
    if isinstance(a, int) and isinstance(b, int) and ta is not bool and tb is not bool:
        return a == b  # any integer widths, timestamps included
    kind = _kind(a)
    if kind != _kind(b):
        return False
    if kind == "number":
        x = _epoch(a) if isinstance(a, datetime.datetime) else a
        y = _epoch(b) if isinstance(b, datetime.datetime) else b
        if exact and isinstance(x, float) != isinstance(y, float):
            return False
        return bool(x == y)
    if isinstance(a, _BINARY) and isinstance(b, _BINARY):
        return _as_bytes(a) == _as_bytes(b)
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return _decimal_parts(a) == _decimal_parts(b)
    if kind == "list":
        return _list_equal(_items(a), _items(b), isinstance(a, Mapping), isinstance(b, Mapping))
    return bool(a == b)


_BINARY = (str, bytes, bytearray, memoryview)


def _items(value: object) -> list[Any]:
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, list | tuple):
        return list(value)
    return []


def _list_equal(a_items: list[Any], b_items: list[Any], a_table: bool, b_table: bool) -> bool:
    if not a_items and not b_items:
        return True
    if a_table != b_table or len(a_items) != len(b_items):
        return False
    if a_table:
        pairs = zip(a_items, b_items, strict=True)
        return all(ka == kb and _nested_equal(va, vb) for (ka, va), (kb, vb) in pairs)
    return all(_nested_equal(x, y) for x, y in zip(a_items, b_items, strict=True))


def _nested_equal(a: object, b: object) -> bool:
    """Inside tables and arrays RabbitMQ compares ``{Type, Value}``: the AMQP types must match."""
    return amqp_type_name(a) == amqp_type_name(b) and erl_equal(a, b, exact=True)


_VOID: Final = ("void", None)


def freeze_value(value: object) -> object:
    """A hashable identity for a field value, as RabbitMQ compares stored (typed) terms:
    ``1``, ``True``, ``1.0`` and ``"1"`` differ; nested tables keep their key order."""
    cls = type(value)
    if value is None:  # the common scalars first: an array of 100,000 costs a pass, not 100,000 ABC checks
        return _VOID
    if cls is str:
        return ("longstr", value)
    if cls is list:
        return ("array", tuple(freeze_value(v) for v in value))  # type: ignore[attr-defined]
    type_name = amqp_type_name(value)
    if isinstance(value, Mapping):
        return (type_name, tuple((k, freeze_value(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type_name, tuple(freeze_value(v) for v in value))
    if isinstance(value, bytes | bytearray | memoryview):
        return (type_name, bytes(value))
    if isinstance(value, Decimal):
        return (type_name, _decimal_parts(value))
    if isinstance(value, datetime.datetime):
        return (type_name, _epoch(value))
    if isinstance(value, bool | int | float | str) or value is None:
        return (type_name, value)
    return (type_name, erl_term(value))


# ---------------------------------------------------------------------------------------------
# The Erlang form of a value, and its ~p text
# ---------------------------------------------------------------------------------------------
def to_erlang(value: object) -> object:
    """The term RabbitMQ holds for a decoded field value, in ``ottermq.amqp.erlang``'s forms.

    Strings and byte strings are binaries, a decimal is ``{Scale, Unscaled}``, a timestamp its
    epoch seconds, void ``undefined``, a table ``[{Key, Type, Value}]`` and an array
    ``[{Type, Value}]``; anything else is shown as an atom of its ``repr``.
    """
    if value is None or isinstance(value, bool | int | float | str | bytes | bytearray | memoryview):
        return value
    if isinstance(value, Decimal):
        return _decimal_parts(value)
    if isinstance(value, datetime.datetime):
        return _epoch(value)
    if isinstance(value, Mapping):
        return [(str(k), Atom(amqp_type_name(v)), to_erlang(v)) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [(Atom(amqp_type_name(v)), to_erlang(v)) for v in value]
    return Atom(repr(value))


def erl_term(value: object, unicode: bool = False) -> str:
    """A decoded field value printed as RabbitMQ's ``~p`` (``~tp``) prints its Erlang form (one line)."""
    return to_wire(format_term(to_erlang(value), unicode=unicode), unicode=unicode)


def erl_binary(value: str | bytes | bytearray | memoryview, unicode: bool = False) -> str:
    """``<<"...">>`` or ``<<1,2>>`` as Erlang's ``~p`` (``~tp`` with ``unicode``) prints a binary.

    Printable text keeps its original UTF-8 bytes; invalid UTF-8 is shown as Latin-1.
    """
    return binary_text(value, unicode=unicode)
