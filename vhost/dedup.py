"""Message deduplication (issue 19), LavinMQ-compatible, plus the community plugin's exchange type.

Pure: no I/O, no clock (``now`` is passed in). ``VHost.publish`` asks an exchange's or a queue's
:class:`DedupCache` whether a message is a duplicate; the broker persists caches through the
``on_add``/``on_remove`` hooks.

Rules:
1. Enabled by ``x-message-deduplication: true`` on an exchange (a duplicate is not routed) or a queue
   (a duplicate is routed but not enqueued), or by the policy key ``message-deduplication``. The
   community plugin's exchange type ``x-message-deduplication`` (routes like ``fanout``) is always on.
2. Settings (argument, else policy key without ``x-``, else default): ``x-cache-size`` (entries,
   default 128; the plugin's exchange type requires it), ``x-cache-ttl`` (ms, default none: entries
   stay until evicted), ``x-deduplication-header`` (the header holding the key, default
   ``x-deduplication-header``), ``x-cache-persistence`` (``memory`` or ``disk``; default ``disk`` for a
   durable exchange or queue, ``memory`` otherwise: ottermq keeps a durable owner's cache across
   restarts, which neither LavinMQ nor the plugin does).
3. A message without the header is never a duplicate and is not remembered. A message whose key is in
   the cache and not past its expiry is a duplicate; otherwise its key is remembered, for the
   message's own ``x-cache-ttl`` header (an integer, ms) if it has one, else the cache's TTL.
4. A full cache evicts its oldest entry (first remembered, FIFO, as LavinMQ); an expired entry is
   dropped when its key is looked up.
5. Keys compare by value and AMQP type (``1`` as a signedint and ``"1"`` are different keys).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ottermq.amqp.errors import PreconditionFailed
from ottermq.amqp.table import encode_table

from .bounds import MAX_DURATION
from .values import amqp_type_name, longstr_text

__all__ = [
    "DEDUP_EXCHANGE_TYPE",
    "DEFAULT_CACHE_SIZE",
    "DEFAULT_HEADER",
    "DedupCache",
    "DedupSettings",
    "dedup_key",
    "dedup_settings",
]

DEDUP_EXCHANGE_TYPE = "x-message-deduplication"
DEFAULT_CACHE_SIZE = 128
DEFAULT_HEADER = "x-deduplication-header"
PERSISTENCE = ("memory", "disk")
_INTEGERS = frozenset({"byte", "short", "signedint", "long", "unsignedbyte", "unsignedshort", "unsignedint"})


@dataclass(frozen=True, slots=True)
class DedupSettings:
    """What an exchange's or queue's deduplication does (rule 2)."""

    size: int = DEFAULT_CACHE_SIZE
    ttl: int | None = None
    header: str = DEFAULT_HEADER
    persistent: bool = False


def _setting(arguments: Mapping[str, Any], definition: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    """``(True, value)`` from the ``x-`` argument, else from the policy key, else ``(False, None)``."""
    if f"x-{key}" in arguments:
        return True, arguments[f"x-{key}"]
    if key in definition:
        return True, definition[key]
    return False, None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if amqp_type_name(value) not in _INTEGERS and amqp_type_name(value) != "long":
        return None
    return int(value)


def dedup_settings(
    arguments: Mapping[str, Any] | None,
    definition: Mapping[str, Any] | None = None,
    *,
    durable: bool = False,
    always: bool = False,
    resource: str = "",
) -> DedupSettings | None:
    """The deduplication settings of an exchange or queue, or None when it does not deduplicate.

    Args:
        arguments: its declared arguments; ``definition``: its policy's keys (rule 2).
        durable: whether it is durable (the default persistence, rule 2).
        always: the plugin's exchange type: on without ``x-message-deduplication``, and
            ``x-cache-size`` is required.
        resource: ``exchange 'x' in vhost '/'``, for error texts.

    Raises:
        PreconditionFailed: an invalid setting (``invalid arg 'x-cache-size' for exchange 'x' in
            vhost '/': ...``).
    """
    args = arguments or {}
    policy = definition or {}
    if not always:
        given, enabled = _setting(args, policy, "message-deduplication")
        if not given or enabled is not True:
            if given and not isinstance(enabled, bool):
                raise _invalid("x-message-deduplication", "expected a boolean", resource)
            return None
    given, size = _setting(args, policy, "cache-size")
    if given:
        number = _int(size)
        if number is None or number < 1:
            raise _invalid("x-cache-size", "expected a positive integer", resource)
        size = number
    elif always:
        raise _invalid("x-cache-size", "required for exchange type x-message-deduplication", resource)
    else:
        size = DEFAULT_CACHE_SIZE
    given, ttl = _setting(args, policy, "cache-ttl")
    if given:
        number = _int(ttl)
        if number is None or number < 0:
            raise _invalid("x-cache-ttl", "expected a non-negative integer", resource)
        if number > MAX_DURATION:  # an entry's expiry is now + ttl (vhost.bounds)
            raise _invalid("x-cache-ttl", f"at most {MAX_DURATION} (ten years in ms)", resource)
        ttl = number
    given, header = _setting(args, policy, "deduplication-header")
    if given:
        if amqp_type_name(header) != "longstr" or not longstr_text(header):
            raise _invalid("x-deduplication-header", "expected a header name", resource)
        header = longstr_text(header)
    else:
        header = DEFAULT_HEADER
    given, persistence = _setting(args, policy, "cache-persistence")
    if given:
        text = longstr_text(persistence) if amqp_type_name(persistence) == "longstr" else None
        if text not in PERSISTENCE:
            raise _invalid("x-cache-persistence", "expected 'memory' or 'disk'", resource)
        persistent = text == "disk"
    else:
        persistent = durable
    return DedupSettings(size, ttl, header, persistent)


def _invalid(key: str, why: str, resource: str) -> PreconditionFailed:
    return PreconditionFailed(f"invalid arg '{key}' for {resource}: {why}")


def dedup_key(headers: Mapping[str, Any] | None, header: str) -> bytes | None:
    """The cache key of a message (its header's value with its AMQP type), or None without one."""
    if not headers or header not in headers:
        return None
    value = headers[header]
    if value is None:
        return None
    return encode_table({"": value})[5:]  # the tagged value, without the table and key lengths


def message_ttl_override(headers: Mapping[str, Any] | None) -> int | None:
    """The message's own ``x-cache-ttl`` header (ms), when it is a non-negative integer."""
    if not headers:
        return None
    number = _int(headers.get("x-cache-ttl"))
    return min(number, MAX_DURATION) if number is not None and number >= 0 else None


class DedupCache:
    """Remembered keys with their expiry, oldest first (rules 3 and 4).

    Args:
        settings: size, default TTL, header.
        on_add: called with ``(key, expires_at)`` for a key remembered (persistence).
        on_remove: called with ``key`` for a key evicted or expired (persistence).
    """

    __slots__ = ("settings", "_entries", "on_add", "on_remove", "duplicates")

    def __init__(
        self,
        settings: DedupSettings,
        on_add: Callable[[bytes, int | None], None] | None = None,
        on_remove: Callable[[bytes], None] | None = None,
    ) -> None:
        self.settings = settings
        self._entries: OrderedDict[bytes, int | None] = OrderedDict()  # key -> expires_at (epoch ms)
        self.on_add = on_add
        self.on_remove = on_remove
        self.duplicates = 0  # messages found to be duplicates

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: bytes) -> bool:
        return key in self._entries

    def duplicate(self, headers: Mapping[str, Any] | None, now: int) -> bool:
        """Whether a message with these headers is a duplicate; if not, its key is remembered."""
        key = dedup_key(headers, self.settings.header)
        if key is None:
            return False
        entries = self._entries
        if key in entries:
            expires = entries[key]
            if expires is None or now < expires:
                self.duplicates += 1
                return True
            self._remove(key)
        ttl = message_ttl_override(headers)
        if ttl is None:
            ttl = self.settings.ttl
        self.remember(key, None if ttl is None else now + ttl, now)
        return False

    def remember(self, key: bytes, expires_at: int | None, now: int | None = None) -> None:
        """Add a key (also used to reload a persisted cache, then without ``on_add``)."""
        entries = self._entries
        while len(entries) >= self.settings.size:
            self._remove(next(iter(entries)))
        entries[key] = expires_at
        if self.on_add is not None and now is not None:
            self.on_add(key, expires_at)

    def resize(self, settings: DedupSettings) -> None:
        """New settings (a policy changed): the oldest entries go if the cache is now too big."""
        self.settings = settings
        while len(self._entries) > settings.size:
            self._remove(next(iter(self._entries)))

    def _remove(self, key: bytes) -> None:
        del self._entries[key]
        if self.on_remove is not None:
            self.on_remove(key)

    def items(self) -> list[tuple[bytes, int | None]]:
        """``(key, expires_at)`` oldest first."""
        return list(self._entries.items())
