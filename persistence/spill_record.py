"""The record a spill file holds for one paged entry (``spill.py``): every field of an ``Entry`` and its
``Message``, a fixed header (``HEADER``) then the exchange, routing key, property octets, body and CC/BCC
routing keys. A body over ``BIG_BODY`` is not written: its record is a stub (``IN_MEMORY``) and the entry
waits in memory, in its place."""

from __future__ import annotations

import struct
from typing import Final

from ottermq.vhost.message import Entry, Message, SelectedMessage

# total, seq, store id, deadline, enqueued at, expiration, delivery count, flags, priority, and the
# lengths of exchange, routing key, properties, body, extra keys
HEADER: Final = struct.Struct("<IqqqqqIBHIIIII")
HEADER_SIZE: Final = HEADER.size
_NONE: Final = -1
_NO_PRIORITY: Final = 0xFFFF
_REDELIVERED: Final = 1
_PERSISTENT: Final = 2
_SELECTED: Final = 4
IN_MEMORY: Final = 8  # a stub: the entry itself stays in memory (``BIG_BODY``)
FLAGS_AT: Final = 48  # offset of the flags in ``HEADER``
# a body larger than this is not written: its record is a stub and the entry waits in memory, in its
# place (writing and reading back 100 MB would hold the event loop for a second; such messages are few)
BIG_BODY: Final = 16 << 20
_KEY_LEN: Final = struct.Struct("<H")


def encode(entry: Entry) -> bytes:
    """One record for ``entry``."""
    return b"".join(encode_parts(entry)[0])


def encode_parts(entry: Entry) -> tuple[tuple[bytes, ...], int]:
    """``entry``'s record in parts (the body is not copied) and its length."""
    m = entry.message
    exchange = _octets(m.exchange)
    routing_key = _octets(m.routing_key)
    extra = b""
    flags = (_REDELIVERED if entry.redelivered else 0) | (_PERSISTENT if m.persistent else 0)
    if isinstance(m, SelectedMessage):
        flags |= _SELECTED
        keys = []
        for key in m.extra_keys:
            raw = key.encode("utf-8", "surrogateescape")
            keys.append(_KEY_LEN.pack(len(raw)) + raw)
        extra = b"".join(keys)
    props, body = m.raw_props, m.body
    total = HEADER.size + len(exchange) + len(routing_key) + len(props) + len(body) + len(extra)
    header = HEADER.pack(
        total,
        entry.seq,
        entry.store_id,
        _NONE if entry.deadline is None else entry.deadline,
        entry.enqueued_at,
        _NONE if m.expiration is None else m.expiration,
        entry.delivery_count,
        flags,
        _NO_PRIORITY if m.priority is None else m.priority,
        len(exchange),
        len(routing_key),
        len(props),
        len(body),
        len(extra),
    )
    if extra:
        return (header, exchange, routing_key, props, body, extra), total
    return (header, exchange, routing_key, props, body), total


def decode(buf: bytes, at: int) -> tuple[Entry, int]:
    """The entry whose record starts at ``buf[at]`` (complete), and the record's length."""
    (
        total,
        seq,
        store_id,
        deadline,
        enqueued_at,
        expiration,
        delivery_count,
        flags,
        priority,
        xl,
        rl,
        pl,
        bl,
        el,
    ) = HEADER.unpack_from(buf, at)
    p = at + HEADER_SIZE
    exchange = _text(buf[p : p + xl])
    p += xl
    routing_key = _text(buf[p : p + rl])
    p += rl
    props = buf[p : p + pl]
    p += pl
    body = buf[p : p + bl]
    p += bl
    message = Message(
        exchange,
        routing_key,
        props,
        body,
        bool(flags & _PERSISTENT),
        None if priority == _NO_PRIORITY else priority,
        None if expiration == _NONE else expiration,
    )
    if flags & _SELECTED:
        keys: list[str] = []
        end = p + el
        while p < end:
            (n,) = _KEY_LEN.unpack_from(buf, p)
            keys.append(buf[p + 2 : p + 2 + n].decode("utf-8", "surrogateescape"))
            p += 2 + n
        message = SelectedMessage(message, props, tuple(keys))
    entry = Entry(message, seq, None if deadline == _NONE else deadline, enqueued_at)
    if flags & _REDELIVERED:
        entry.redelivered = True
    if delivery_count:
        entry.delivery_count = delivery_count
    entry.store_id = store_id
    return entry, total


def stub(seq: int) -> tuple[bytes]:
    """The record of an entry that stays in memory (``BIG_BODY``)."""
    return (HEADER.pack(HEADER_SIZE, seq, 0, _NONE, 0, _NONE, 0, IN_MEMORY, _NO_PRIORITY, 0, 0, 0, 0, 0),)


# exchange names and routing keys are few: their octets and texts are cached (bounded)
_OCTETS: dict[str, bytes] = {}
_TEXTS: dict[bytes, str] = {}
_CACHE_MAX: Final = 4096


def _octets(text: str) -> bytes:
    raw = _OCTETS.get(text)
    if raw is None:
        raw = text.encode("utf-8", "surrogateescape")
        if len(_OCTETS) >= _CACHE_MAX:
            _OCTETS.clear()
        _OCTETS[text] = raw
    return raw


def _text(raw: bytes) -> str:
    text = _TEXTS.get(raw)
    if text is None:
        text = raw.decode("utf-8", "surrogateescape")
        if len(_TEXTS) >= _CACHE_MAX:
            _TEXTS.clear()
        _TEXTS[raw] = text
    return text
