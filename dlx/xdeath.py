"""The ``x-death`` bookkeeping RabbitMQ writes into a dead-lettered message's headers.

Pure functions over header tables decoded with :mod:`ottermq.amqp.table` (values keep their
AMQP type tags), reproducing RabbitMQ 3.10's ``rabbit_dead_letter`` byte for byte once the
result is encoded with :func:`~ottermq.amqp.table.encode_table`. Golden bytes captured from
RabbitMQ 3.10.8 live in ``tests/unit/dlx/``.

Rules (each one observed on the wire):

- The whole headers table comes back **sorted by key** (octet order, RabbitMQ's
  ``rabbit_misc:set_table_value`` sorts on every write): user headers included, nested tables
  untouched.
- First death (no ``x-death`` key): ``x-first-death-reason``/``-queue``/``-exchange`` are set
  as long strings (overwriting any a publisher sent) and ``x-death`` becomes one entry whose
  fields are in this order: ``count`` (``l``, 1), ``reason``, ``queue``, ``time`` (``T``,
  seconds), ``exchange``, ``routing-keys`` (``A`` of ``S``), then ``original-expiration``
  only when the message had an ``expiration``.
- Later deaths: ``x-first-death-*`` are never touched again. The existing entries are first
  regrouped by ``(queue, reason)`` -- a quirk of RabbitMQ's grouping pass, with two or more
  entries this *reverses* their order, merges duplicates into the first of them (with
  ``count`` = number of duplicates if it had none) and gives every entry lacking ``count``
  one. Then:

  * an entry with the same ``(queue, reason)`` moves to the front with ``count + 1`` (as
    ``l``, whatever type it had; 1 if it had none; wrapped to 64 bits as RabbitMQ's encoder
    does, so 9223372036854775807 + 1 is -9223372036854775808), its fields **sorted by key**, and every
    other field kept as it was: ``time``, ``exchange``, ``routing-keys`` and
    ``original-expiration`` describe the *first* death for that pair;
  * otherwise a new entry goes to the front with its fields sorted by key:
    ``count, exchange, [original-expiration,] queue, reason, routing-keys, time``.

- An ``x-death`` that is not an array is replaced by a fresh one-entry array (unsorted
  fields, as for a first death) and ``x-first-death-*`` are not added.
- ``last_death=True`` additionally sets ``x-last-death-reason``/``-queue``/``-exchange`` on
  every death, as RabbitMQ 3.13+ does (3.10 never writes them).
- ``strip_cc=True`` (the queue has ``x-dead-letter-routing-key``): the ``CC`` header is
  removed, as RabbitMQ does when it replaces the routing keys.

Where RabbitMQ 3.10 would crash the queue process (an ``x-death`` array holding something
other than tables, a ``count`` that is not an integer) these functions keep going: non-table
entries are carried along and never match, a non-integer ``count`` restarts at 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ottermq.amqp.table import LongLong, Timestamp

from .reasons import Reason

__all__ = ["dead_letter_routing_keys", "record_death"]

X_DEATH: Final = "x-death"
FIRST_DEATH_QUEUE: Final = "x-first-death-queue"
FIRST_DEATH_REASON: Final = "x-first-death-reason"
FIRST_DEATH_EXCHANGE: Final = "x-first-death-exchange"
LAST_DEATH_QUEUE: Final = "x-last-death-queue"
LAST_DEATH_REASON: Final = "x-last-death-reason"
LAST_DEATH_EXCHANGE: Final = "x-last-death-exchange"
_I64_HALF: Final = 1 << 63


def dead_letter_routing_keys(routing_key: str, headers: Mapping[str, object] | None) -> list[str]:
    """The routing keys RabbitMQ lists in an ``x-death`` entry's ``routing-keys``.

    That is the key the message was last published (or dead-lettered) with, followed by the
    long-string entries of its ``CC`` header in order; ``CC`` entries of any other type are
    skipped. ``BCC`` keys are never listed: RabbitMQ removes the ``BCC`` header when the message
    is published, so it is not part of the message any more (it still routes the original
    publish and, without ``x-dead-letter-routing-key``, the dead letter).

    When the queue has no ``x-dead-letter-routing-key`` these keys (plus any ``BCC`` keys of
    the original publish) are also what the dead letter is routed with; with one, it is routed
    with that key alone.

    Args:
        routing_key: the message's routing key.
        headers: its decoded headers table, or ``None``.

    Returns:
        ``[routing_key, *CC]``.
    """
    keys = [routing_key]
    cc = headers.get("CC") if headers else None
    if isinstance(cc, list):
        for key in cc:
            if isinstance(key, str):
                keys.append(key)
            elif isinstance(key, bytes) and getattr(type(key), "tag", None) == b"S":
                keys.append(key.decode("utf-8", "surrogateescape"))  # a non-UTF-8 long string
    return keys


def record_death(
    headers: Mapping[str, object] | None,
    queue: str,
    reason: Reason | str,
    exchange: str,
    routing_keys: list[str],
    original_expiration: str | None,
    now: int,
    last_death: bool = True,
    *,
    strip_cc: bool = False,
) -> dict[str, object]:
    """The headers of a message dead-lettered from ``queue``, as RabbitMQ writes them.

    The input is not modified; the result is a new top-level table (unchanged nested values
    may be shared with the input). See the module docstring for the exact rules.

    Args:
        headers: the message's decoded headers table (``None`` or empty when it had none).
        queue: the queue the message died in.
        reason: why (:class:`Reason` or its string value).
        exchange: the exchange the message was last published or dead-lettered to.
        routing_keys: for ``routing-keys``, normally :func:`dead_letter_routing_keys`.
        original_expiration: the message's ``expiration`` property verbatim, ``None`` if unset.
        now: the time of death in epoch seconds.
        last_death: also set ``x-last-death-*`` (RabbitMQ 3.13+).
        strip_cc: drop the ``CC`` header (the queue has ``x-dead-letter-routing-key``).

    Returns:
        The new headers table, ready for ``encode_table``.
    """
    why = reason.value if isinstance(reason, Reason) else str(reason)
    info: dict[str, object] = {
        "reason": why,
        "queue": queue,
        "time": Timestamp(now),
        "exchange": exchange,
        "routing-keys": list(routing_keys),
    }
    if original_expiration is not None:
        info["original-expiration"] = original_expiration

    out: dict[str, object] = dict(headers) if headers else {}
    if X_DEATH not in out:
        out[FIRST_DEATH_REASON] = why
        out[FIRST_DEATH_QUEUE] = queue
        out[FIRST_DEATH_EXCHANGE] = exchange
        out[X_DEATH] = [{"count": LongLong(1), **info}]
    else:
        existing = out[X_DEATH]
        if isinstance(existing, list):
            out[X_DEATH] = _add_death(existing, queue, why, info)
        else:
            out[X_DEATH] = [{"count": LongLong(1), **info}]
    if last_death:
        out[LAST_DEATH_REASON] = why
        out[LAST_DEATH_QUEUE] = queue
        out[LAST_DEATH_EXCHANGE] = exchange
    if strip_cc:
        out.pop("CC", None)
    return _sorted(out)


# --- helpers ----------------------------------------------------------------------------------


def _sorted(table: Mapping[str, object]) -> dict[str, object]:
    """``table`` with its keys in octet order (Erlang ``lists:keysort`` on binaries)."""
    return {k: table[k] for k in sorted(table, key=_key_octets)}


def _key_octets(key: str) -> bytes:
    return key.encode("utf-8", "surrogateescape")


def _comparable(value: object) -> object:
    """A hashable stand-in for a field value, equal where Erlang's ``=:=`` would be."""
    if isinstance(value, bytes | bytearray):
        # long strings and byte arrays are both binaries to RabbitMQ
        return bytes(value).decode("utf-8", "surrogateescape")
    if isinstance(value, str | int | float | type(None)):
        return value
    return ("unhashable", repr(value))


def _event_key(entry: Mapping[str, object]) -> tuple[object, object]:
    return _comparable(entry.get("queue")), _comparable(entry.get("reason"))


def _with_count(entry: Mapping[str, object], count: int) -> dict[str, object]:
    """``entry`` with ``count`` prepended when it has none (RabbitMQ's ensure_xdeath_event_count)."""
    if "count" in entry:
        return dict(entry)
    return {"count": LongLong(count), **entry}


def _group(entries: list[object]) -> list[object]:
    """RabbitMQ's ``group_by_queue_and_reason``: merge duplicates, reversing the order.

    One entry is returned as is. With more, each ``(queue, reason)`` is kept once -- as its
    first occurrence, with ``count`` = number of occurrences if it had no ``count`` -- and the
    result comes out in reverse order of first occurrence.
    """
    if len(entries) < 2:
        return list(entries)
    occurrences: dict[tuple[object, object], int] = {}
    for entry in entries:
        if isinstance(entry, Mapping):
            k = _event_key(entry)
            occurrences[k] = occurrences.get(k, 0) + 1
    seen: set[tuple[object, object]] = set()
    grouped: list[object] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            grouped.append(entry)  # RabbitMQ 3.10 crashes here; we carry it along
            continue
        k = _event_key(entry)
        if k in seen:
            continue
        seen.add(k)
        grouped.append(_with_count(entry, occurrences[k]))
    grouped.reverse()
    return grouped


def _incremented(entry: Mapping[str, object]) -> dict[str, object]:
    count = entry.get("count")
    if "count" not in entry or not isinstance(count, int) or isinstance(count, bool):
        new = 1
    else:
        new = (int(count) + 1 + _I64_HALF) % (2 * _I64_HALF) - _I64_HALF  # RabbitMQ: <<N:64/signed>>
    return _sorted({**entry, "count": LongLong(new)})


def _add_death(entries: list[object], queue: str, reason: str, info: Mapping[str, object]) -> list[object]:
    grouped = _group(entries)
    wanted = (queue, reason)
    match: Mapping[str, object] | None = None
    others: list[object] = []
    for entry in grouped:
        if match is None and isinstance(entry, Mapping) and _event_key(entry) == wanted:
            match = entry
        else:
            others.append(entry)
    if match is not None:
        front = _incremented(match)
    else:
        front = _sorted({"count": LongLong(1), **info})
    return [front, *others]
