"""What a shovel changes in a message's properties on the way (RabbitMQ 3.10's
``rabbit_shovel_parameters`` and ``rabbit_shovel_util``), every other octet kept.

Rules, applied in RabbitMQ's order:

1. ``dest-publish-properties``: each property given replaces the message's (``content_type``...
   ``cluster_id``; ``delivery_mode`` and ``priority`` an octet, ``timestamp`` 64-bit).
2. ``dest-add-forward-headers``: ``x-shovelled`` is an array (``A``) whose first element is a new
   table (``F``) of long strings (``S``): ``shovelled-by`` (the cluster name), ``shovel-type``
   (``dynamic``), ``shovel-name``, ``shovel-vhost``, ``src-uri`` and ``dest-uri`` (without
   credentials), then ``src-queue`` (or ``src-exchange`` and ``src-exchange-key``) and those of
   ``dest-exchange``, ``dest-exchange-key``, ``dest-queue`` that are set. An ``x-shovelled`` array
   already there follows the new table; another value is moved under ``x-invalid-headers``.
3. ``dest-add-timestamp-header``: ``x-shovelled-timestamp``, a signed 64-bit integer (``l``), the
   time in seconds.
4. Setting a header sorts the header table by key (``rabbit_misc:set_table_value``); values keep
   their types (``amqp.table``).
5. A message this cannot rewrite (malformed properties, a value that does not fit) raises
   ``HeaderError``: the shovel stops with it, as RabbitMQ's worker crashes there.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from ottermq.amqp.errors import FrameError
from ottermq.amqp.props import HEADERS_BIT, PROPERTY_FLAGS, join_props, split_props
from ottermq.amqp.table import LongLong, decode_table, encode_table

__all__ = ["HeaderError", "rewrite"]

X_SHOVELLED = "x-shovelled"
X_TIMESTAMP = "x-shovelled-timestamp"
X_INVALID = "x-invalid-headers"
_READ = frozenset({X_SHOVELLED, X_INVALID})
_OCTETS = frozenset({"delivery_mode", "priority"})


class HeaderError(ValueError):
    """A message whose properties cannot be rewritten (rule 5)."""


def _property(name: str, value: Any) -> bytes:
    """One property's octets (rule 1).

    Raises:
        HeaderError: a value that does not fit the property's type.
    """
    try:
        if name in _OCTETS:
            return struct.pack(">B", value)
        if name == "timestamp":
            return struct.pack(">Q", value)
        data = str(value).encode("utf-8")
        if len(data) > 255:
            raise HeaderError(f"publish property {name} longer than 255 octets")
        return bytes((len(data),)) + data
    except (struct.error, TypeError) as exc:
        raise HeaderError(f"publish property {name}: {exc}") from None


def _key(item: tuple[str, object]) -> bytes:
    return item[0].encode("utf-8", "surrogateescape")


def rewrite(
    raw_props: bytes,
    publish_properties: Mapping[str, Any],
    forward: Sequence[tuple[str, str]] | None,
    timestamp: int | None,
) -> bytes:
    """The properties to publish (see the module rules).

    Args:
        raw_props: property flags + list as delivered.
        publish_properties: rule 1's values (empty: none).
        forward: rule 2's table, in order (None: no forward headers).
        timestamp: rule 3's seconds (None: no timestamp header).

    Raises:
        HeaderError: rule 5.
    """
    if not publish_properties and forward is None and timestamp is None:
        return raw_props
    try:
        fields = split_props(raw_props)[1]
        for name, value in publish_properties.items():
            fields[PROPERTY_FLAGS[name]] = _property(name, value)
        if forward is None and timestamp is None:
            return join_props(fields)
        headers: dict[str, object] = {}
        if HEADERS_BIT in fields:
            headers = decode_table(fields[HEADERS_BIT], only=_READ)[0]
        if forward is not None:
            table = {key: value for key, value in forward}
            prior = headers.get(X_SHOVELLED)
            if isinstance(prior, list):
                headers[X_SHOVELLED] = [table, *prior]
            else:
                headers[X_SHOVELLED] = [table]
                if prior is not None:
                    invalid = headers.get(X_INVALID)
                    invalid = dict(invalid) if isinstance(invalid, dict) else {}
                    invalid[X_SHOVELLED] = [prior]
                    headers[X_INVALID] = dict(sorted(invalid.items(), key=_key))
        if timestamp is not None:
            headers[X_TIMESTAMP] = LongLong(timestamp)
        fields[HEADERS_BIT] = encode_table(dict(sorted(headers.items(), key=_key)))
        return join_props(fields)
    except (FrameError, ValueError, TypeError, OverflowError) as exc:
        raise HeaderError(str(exc)) from None
