"""Dead letters: read in place, chosen and rewritten for a move (an ottermq extension). The jobs that
move them are ``move_jobs.py``.

Rules:

- Browsing reads a queue's ready entries where they are: nothing is delivered, redelivered or
  reordered. A message's deaths are its ``x-death`` entries (most recent first); filters and the
  summary use the most recent one, ``x-death[0]``.
- Reading a message's headers never raises: headers that cannot be decoded (malformed, nested past
  what the decoder takes) read as "never died" (``LastDeaths``) and are remembered as unreadable, so
  a move can tell such a message from one without ``x-death``.
- A move sends a message to a target exchange: the exchange and first routing key of its
  ``x-death[0]`` (the original; ``""`` is the default exchange), or a chosen exchange and routing
  key. ``x-death``, ``x-first-death-*`` and ``x-last-death-*`` are removed unless
  ``keep_death_headers``; every other property octet stays as published (``copy_for``). A message
  whose copy cannot be made raises ``Unmovable``: it is that message's failure alone.
- A selection is ``ids`` (entry seq numbers, kept packed: 8 bytes each, sorted), a filter on the
  most recent death's reason and queue, or all messages.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ottermq.amqp.props import HEADERS_BIT, get_headers, rewrite_props, split_props
from ottermq.amqp.table import decode_table, encode_table
from ottermq.vhost.message import Entry, Message

log = logging.getLogger(__name__)

DEATH_HEADERS = (
    "x-death",
    "x-first-death-reason",
    "x-first-death-queue",
    "x-first-death-exchange",
    "x-last-death-reason",
    "x-last-death-queue",
    "x-last-death-exchange",
)
MAX_ID = 2**63 - 1  # entry seq numbers are 63-bit (a store row id's seq part is 44 bits)
ID_BYTES = 8


class Unmovable(ValueError):
    """This message's copy cannot be made (headers that cannot be read or written again)."""


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def deaths_of(headers: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """A message's ``x-death`` entries as JSON-ready dicts (most recent first; none: ``[]``)."""
    raw = (headers or {}).get("x-death")
    if not isinstance(raw, list):
        return []
    out = []
    for death in raw:
        if not isinstance(death, dict):
            continue
        keys = death.get("routing-keys")
        when = death.get("time")
        if isinstance(when, datetime.datetime):
            when = int(when.timestamp())
        out.append(
            {
                "reason": _text(death.get("reason")),
                "queue": _text(death.get("queue")),
                "exchange": _text(death.get("exchange")),
                "routing_keys": [_text(k) for k in keys] if isinstance(keys, list) else [],
                "count": int(death["count"]) if isinstance(death.get("count"), int) else None,
                "time": int(when) if isinstance(when, int) else None,
                "original_expiration": _text(death.get("original-expiration")),
            }
        )
    return out


def first_death(headers: Mapping[str, Any] | None) -> dict[str, str | None] | None:
    """``x-first-death-*`` as a dict, or None when the message never died."""
    headers = headers or {}
    if "x-first-death-reason" not in headers:
        return None
    return {k: _text(headers.get(f"x-first-death-{k}")) for k in ("reason", "queue", "exchange")}


LastDeath = tuple[str | None, str | None, str | None, str | None]  # reason, queue, exchange, first key
_UNREADABLE: Any = object()  # memo value of property octets whose headers cannot be decoded


class LastDeaths:
    """Each message's most recent death (``x-death[0]``: reason, queue, exchange, first routing key,
    or None when it never died), memoised by property octets: dead letters of one burst share
    theirs, so a queue of them is decoded once per burst. Headers are decoded without being kept on
    the message, so scanning a long queue does not grow it (at most ``limit`` memo entries).
    Never raises: unreadable headers read as None and :meth:`unreadable` says so. The property
    octets of a move's copies are memoised the same way (:meth:`stripped`)."""

    __slots__ = ("_memo", "_limit", "_stripped")

    def __init__(self, limit: int = 50_000) -> None:
        self._memo: dict[bytes, Any] = {}
        self._limit = limit
        self._stripped: dict[bytes, bytes | str] = {}  # property octets -> the copy's, or why not

    def stripped(self, message: Message) -> bytes:
        """``strip_death_headers(message)``, once per distinct property octets.

        Raises:
            Unmovable: the headers cannot be decoded or encoded again.
        """
        raw = message.raw_props
        done = self._stripped.get(raw)
        if done is None:
            try:
                done = strip_death_headers(message)
            except Exception as exc:  # the encoder or decoder refuses these headers
                done = f"its headers cannot be rewritten ({type(exc).__name__}: {exc})"
            if len(self._stripped) >= self._limit:
                self._stripped.clear()
            self._stripped[raw] = done
        if isinstance(done, str):
            raise Unmovable(done)
        return done

    def _lookup(self, message: Message) -> Any:
        raw = message.raw_props
        try:
            return self._memo[raw]
        except KeyError:
            pass
        last: Any = None
        try:
            deaths = deaths_of(get_headers(raw))
        except Exception:  # malformed, too deep for the decoder: the message's own problem
            last = _UNREADABLE
        else:
            if deaths:
                d = deaths[0]
                keys = d["routing_keys"]
                last = (d["reason"], d["queue"], d["exchange"], keys[0] if keys else None)
        if len(self._memo) >= self._limit:
            self._memo.clear()
        self._memo[raw] = last
        return last

    def __call__(self, message: Message) -> LastDeath | None:
        last = self._lookup(message)
        return None if last is _UNREADABLE else last

    def unreadable(self, message: Message) -> bool:
        """Whether the message's headers cannot be decoded."""
        return self._lookup(message) is _UNREADABLE


def pack_ids(ids: Iterable[int]) -> bytes:
    """Ids as ``MoveJobRecord.ids`` keeps them: sorted, without repeats, 8 bytes each (big-endian)."""
    return b"".join(i.to_bytes(ID_BYTES, "big") for i in sorted(set(ids)))


def unpack_ids(packed: bytes) -> list[int]:
    return [int.from_bytes(packed[i : i + ID_BYTES], "big") for i in range(0, len(packed), ID_BYTES)]


@dataclass(frozen=True, slots=True)
class Selection:
    """Which messages of the queue: ``ids`` (entry seq numbers, packed by :func:`pack_ids`), or
    those whose most recent death matches ``reason``/``source_queue`` (None = any), or all of them
    (``all_``)."""

    ids: bytes | None = None
    reason: str | None = None
    source_queue: str | None = None
    all_: bool = False

    @property
    def id_count(self) -> int:
        return 0 if self.ids is None else len(self.ids) // ID_BYTES

    def matcher(self, last_deaths: LastDeaths) -> Callable[[Entry], bool]:
        """A test of one entry (for ids, the set is built once per scan, not kept)."""
        if self.ids is not None:
            wanted = frozenset(unpack_ids(self.ids))
            return lambda entry: entry.seq in wanted
        if self.all_:
            return lambda entry: True
        reason, source = self.reason, self.source_queue

        def matches(entry: Entry) -> bool:
            last = last_deaths(entry.message) or (None, None, None, None)
            return (reason is None or last[0] == reason) and (source is None or last[1] == source)

        return matches

    def kind(self) -> str:
        """``ids``, ``all`` or ``filter``."""
        return "ids" if self.ids is not None else "all" if self.all_ else "filter"

    def as_json(self, ids: bool = True) -> dict[str, Any]:
        """The selection as the API shows it (``ids``: with the list of ids, not only their count)."""
        if self.ids is not None:
            return (
                {"ids": unpack_ids(self.ids), "ids_count": self.id_count}
                if ids
                else {"ids_count": self.id_count}
            )
        if self.all_:
            return {"all": True}
        return {"filter": {"reason": self.reason, "source_queue": self.source_queue}}


def selection_from_json(body: Mapping[str, Any], max_ids: int | None = None) -> Selection:
    """A selection from a request body (or a job's stored settings).

    Raises:
        ValueError: none or several of ``ids``/``filter``/``all``, ill-typed values, or more than
            ``max_ids`` ids.
    """
    given = [k for k in ("ids", "filter", "all") if body.get(k) not in (None, False)]
    if len(given) != 1:
        raise ValueError("give exactly one of ids, filter or all")
    if given[0] == "ids":
        ids = body["ids"]
        if not isinstance(ids, list) or not all(
            type(i) is int and 0 <= i <= MAX_ID
            for i in ids  # type() is: bool is not an id
        ):
            raise ValueError("ids must be a list of message ids (integers)")
        if max_ids is not None and len(ids) > max_ids:
            raise ValueError(f"a move selects at most {max_ids} ids, not {len(ids)}: move by filter or all")
        return Selection(ids=pack_ids(ids))
    if given[0] == "all":
        if body["all"] is not True:
            raise ValueError("all must be true")
        return Selection(all_=True)
    spec = body["filter"]
    if not isinstance(spec, dict):
        raise ValueError("filter must be an object with reason and/or source_queue")
    reason, source = spec.get("reason"), spec.get("source_queue")
    for value in (reason, source):
        if value is not None and not isinstance(value, str):
            raise ValueError("filter values must be strings or null")
    return Selection(reason=reason or None, source_queue=source or None)


def strip_death_headers(message: Message) -> bytes:
    """The message's property octets without the dead-letter headers (other headers keep their
    AMQP types; no headers left: no headers property).

    Raises:
        Exception: the headers cannot be decoded or encoded again (the caller's ``Unmovable``).
    """
    table = split_props(message.raw_props)[1].get(HEADERS_BIT)
    headers = decode_table(table, only=frozenset())[0] if table is not None else None  # values unread
    if not headers or not any(key in headers for key in DEATH_HEADERS):
        return message.raw_props
    kept = {k: v for k, v in headers.items() if k not in DEATH_HEADERS}
    return rewrite_props(message.raw_props, encode_table(kept) if kept else None, drop_expiration=False)


def target_of(
    message: Message, target: tuple[str, str] | None, last_deaths: LastDeaths
) -> tuple[str, str] | None:
    """``(exchange, routing key)`` to send ``message`` to: the chosen ``target``, else its most recent
    death's exchange and first routing key (None: the message never died, nowhere to send it)."""
    if target is not None:
        return target
    last = last_deaths(message)
    if last is None or last[2] is None:
        return None
    return last[2], last[3] or ""


def copy_for(
    message: Message, target: tuple[str, str] | None, keep: bool, last_deaths: LastDeaths
) -> tuple[str, str, bytes] | None:
    """Where a move sends ``message`` and the property octets of its copy: ``(exchange, routing
    key, properties)``, or None when it never died and no target was chosen (unroutable).

    Raises:
        Unmovable: its headers cannot be read (to find the original target) or written again.
    """
    where = target_of(message, target, last_deaths)
    if where is None:
        if target is None and last_deaths.unreadable(message):
            raise Unmovable("its headers cannot be decoded")
        return None
    if keep:
        return where[0], where[1], message.raw_props
    return where[0], where[1], last_deaths.stripped(message)
