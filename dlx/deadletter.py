"""Dead-lettering: route expired, rejected, overflowing messages to the queue's DLX.

Rules (RabbitMQ's ``rabbit_dead_letter``):
- The dead letter is the original message with ``x-death`` updated (``dlx.xdeath``), the
  ``expiration`` property removed and every other property and the body kept byte for byte.
- It is published to ``x-dead-letter-exchange`` (``""`` is the default exchange) with
  ``x-dead-letter-routing-key`` if set, else with the message's original routing keys (its
  routing key plus ``CC``); a missing DLX exchange drops it (counted, and a warning at most every
  ``WARN_EVERY_MS`` per vhost, with the count since the last one); other drops are logged at debug.
- Cycles: a target queue the message already died in is skipped, unless a ``rejected`` death
  lies on the cycle (a consumer decided, so it continues).
- Every dead letter, routed or dropped, is reported to the archive (``DeadLetterRecorder``) with
  why it was dropped: ``dlx_disabled``, ``no_dlx``, ``dlx_missing``, ``no_route`` (the DLX routed
  it nowhere) or ``cycle`` (every target was removed by cycle detection).
- Dead letters caused while dead-lettering (a DLQ that overflows or expires at once) go to a
  worklist drained by the outermost call: never unbounded recursion. The worklist gets
  ``TURN_BUDGET`` of each event-loop turn; what is left waits for the next turn. Store first,
  then forget: each source row is deleted after its dead letter is stored (same store batch), so
  what waits, or a dead letter that cannot be handed on, is still in its queue after a crash.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ottermq.amqp.props import EXPIRATION_BIT, HEADERS_BIT, join_props, quick_props, split_props
from ottermq.amqp.table import decode_table, encode_table
from ottermq.vhost.message import Entry, Message, SelectedMessage

from .limits import Limit, limit_in_force
from .xdeath import X_DEATH, dead_letter_routing_keys, record_death

if TYPE_CHECKING:
    from ottermq.vhost.exchange import Exchange
    from ottermq.vhost.queue import Queue
    from ottermq.vhost.vhost import VHost

log = logging.getLogger(__name__)

# seconds of dead-lettering per event-loop turn: a burst (a backlog expiring at once, a nack of
# thousands, headers of 100 KB each to rewrite) goes on in the next turns, never stalling the loop
TURN_BUDGET = 0.02
# the rewrite cache: at most this many entries and property octets (headers of 120 KB each would
# otherwise keep 1,024 x 240 KB alive)
CACHE_ENTRIES = 1024
CACHE_OCTETS = 4 * 1024 * 1024
_READ_KEYS = frozenset((X_DEATH, "CC"))  # the headers a dead letter's rewrite reads
WARN_EVERY_MS = 10_000  # at most one "dead-letter exchange not found" warning per vhost this often


def is_cycle(queue: str, deaths: list[Any]) -> bool:
    """True when dead-lettering into ``queue`` closes a cycle with no ``rejected`` death on it.

    ``deaths`` is the (already updated) ``x-death`` array, newest first.
    """
    cycle: list[dict[str, Any]] = []
    for death in deaths:
        if not isinstance(death, dict):
            cycle.append({})
            continue
        cycle.append(death)
        if death.get("queue") == queue:
            return all(d.get("reason") != "rejected" for d in cycle)
    return False


def cycle_queues(deaths: list[Any]) -> frozenset[str] | None:
    """The queues dead-lettering must skip, given the updated ``x-death`` array (newest first):
    those ``is_cycle`` is true for, i.e. the queues of the deaths before the first ``rejected`` one.
    None when there are none (nothing to filter)."""
    names: set[str] = set()
    for death in deaths:
        if not isinstance(death, dict):
            continue
        if death.get("reason") == "rejected":
            break
        queue = death.get("queue")
        if isinstance(queue, str):
            names.add(queue)
    return frozenset(names) if names else None


def policy_of(queue: Queue) -> str | None:
    """The policy that set the queue's dead-letter exchange or message TTL in force, for the archive
    (``None`` when both came from its arguments, or it has neither)."""
    if queue.policy is None:
        return None
    definition, own = queue.policy_definition, queue.declared_args.raw
    from_policy_dlx = "dead-letter-exchange" in definition and "x-dead-letter-exchange" not in own
    ttl, declared_ttl = queue.args.message_ttl, queue.declared_args.message_ttl
    from_policy_ttl = "message-ttl" in definition and ttl != declared_ttl
    return queue.policy if from_policy_dlx or from_policy_ttl else None


class DeadLetterRecorder(Protocol):
    """Where every dead letter is reported (``persistence.archive.DeadLetterArchive``/``NullArchive``).

    ``record`` runs on the event loop once per death event (the entries one queue dead-letters at
    once), with every dead letter, routed or dropped, and must be cheap.
    """

    enabled: bool

    def record(
        self,
        time_ms: int,
        vhost: str,
        queue: str,
        reason: str,
        dlx: str | None,
        items: list[Any],
        policy: str | None = None,
        limit: Limit | None = None,
    ) -> None:
        """``items`` is flat, five values per dead letter: ``message`` (as it died),
        ``enqueued_at``, ``death_count`` (``None``: unknown), ``dlx_routing_key`` (``None``:
        dropped before routing), ``drop_reason`` (``None``: routed)."""


def death_count(headers: Mapping[str, object] | None, queue: str, reason: str) -> int:
    """The ``x-death`` ``count`` of ``(queue, reason)`` once a message with ``headers`` dies there.

    1 for a first death there; RabbitMQ's regrouping rules otherwise (``record_death``).
    """
    if not headers or X_DEATH not in headers:
        return 1
    deaths = record_death(headers, queue, reason, "", [], None, 0, last_death=False).get(X_DEATH)
    return _front_count(deaths if isinstance(deaths, list) else [])


def _front_count(deaths: list[Any]) -> int:
    front = deaths[0] if deaths else None
    count = front.get("count") if isinstance(front, dict) else None
    return int(count) if isinstance(count, int) else 1


LATENESS_BUCKETS_MS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 60000)


class LatenessHistogram:
    """How late after its deadline each expired message was dead-lettered (ms), as bucket counts:
    ``counts[i]`` for ``lateness <= LATENESS_BUCKETS_MS[i]``, the last one past every bound."""

    __slots__ = ("counts", "sum_ms")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENESS_BUCKETS_MS) + 1)
        self.sum_ms = 0

    def observe(self, now_ms: int, entries: list[Entry]) -> None:
        """Record the lateness of ``entries`` (those with a deadline) dead-lettered at ``now_ms``."""
        counts = self.counts
        for entry in entries:
            deadline = entry.deadline
            if deadline is not None:
                late = max(0, now_ms - deadline)
                self.sum_ms += late
                counts[bisect_left(LATENESS_BUCKETS_MS, late)] += 1


class DeadLetterer:
    """The vhost's dead-letter sink.

    Args:
        vhost: where the DLX exchanges and target queues live.
        clock: epoch-ms clock for ``x-death`` ``time``.
        enabled: ``OTTERMQ_ENABLE_DLX``; when False every dead letter is dropped.
        archive: told about every dead letter, routed or dropped (``OTTERMQ_DLX_ARCHIVE_DIR``).
    """

    def __init__(
        self, vhost: VHost, clock: Any, enabled: bool = True, archive: DeadLetterRecorder | None = None
    ) -> None:
        self.vhost = vhost
        self.clock = clock
        self.enabled = enabled
        self.archive = archive if archive is not None and archive.enabled else None
        self.dropped = 0
        self.routed = 0
        # dead letters by (reason, RabbitMQ's dead_letter_strategy): "disabled" when the queue has no
        # DLX (or dead-lettering is off), "at_most_once" when it has one, routed or not (as RabbitMQ)
        self.dead_lettered: dict[tuple[str, str], int] = {}
        self.lateness = LatenessHistogram()  # expired dead letters: ms past their deadline
        self._work: deque[tuple[Queue, list[Entry], str]] = deque()
        self._busy = False
        self._later = False  # a _drain is scheduled for the next loop turn
        self._cache: dict[tuple[Any, ...], tuple[bytes, frozenset[str] | None, int | None]] = {}
        self._cache_octets = 0  # property octets the cache keeps alive (keys and rewrites)
        self.unrewritten = 0  # dead letters sent on with their original headers (``_unrewritten``)
        self._missing_unreported = 0  # dropped for a missing DLX since the last warning
        self._missing_warn_at = 0  # epoch ms before which no new warning is logged

    def dead_letter(self, queue: Queue, entries: list[Entry], reason: str) -> None:
        """Dead-letter ``entries`` that left ``queue`` for ``reason``."""
        self._work.append((queue, entries, reason))
        if not self._busy and not self._later:  # else the outer call's loop, or the next turn's
            self._drain()

    def _drain(self) -> None:
        """Work through the worklist, at most ``TURN_BUDGET`` seconds per event-loop turn: the rest
        waits for the next turn (its source rows stay stored until each is handed on)."""
        call_soon = self.vhost.call_soon
        stop = time.perf_counter() + TURN_BUDGET if call_soon is not None else None
        self._busy = True
        try:
            started = False
            while self._work:
                if stop is not None and started and time.perf_counter() > stop:
                    self._again(call_soon)
                    return
                started = True
                queue, entries, reason = self._work[0]
                done = self._process(queue, entries, reason, stop)
                if done < len(entries):  # out of time: the rest on the next turn
                    self._work[0] = (queue, entries[done:], reason)
                    self._again(call_soon)
                    return
                self._work.popleft()
        finally:
            self._busy = False

    def _again(self, call_soon: Callable[[Callable[[], None]], Any] | None) -> None:
        """The worklist goes on in the next loop turn (once, however often it is asked)."""
        if call_soon is not None and not self._later:
            self._later = True
            call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._later = False
        if not self._busy:
            self._drain()

    @staticmethod
    def _archive(
        archive: DeadLetterRecorder,
        now_ms: int,
        vhost: VHost,
        queue: Queue,
        reason: str,
        dlx_name: str | None,
        flat: list[Any],
    ) -> None:
        """One batch of dead letters to the archive, with the queue's policy and the limit in force."""
        archive.record(
            now_ms,
            vhost.name,
            queue.name,
            reason,
            dlx_name,
            flat,
            policy_of(queue),
            limit_in_force(vhost, queue, reason),
        )

    def _drop(self, queue: Queue, count: int, reason: str, why: str) -> None:
        self.dropped += count
        log.debug("dropped %d dead letter(s) from queue '%s' (%s): %s", count, queue.name, reason, why)

    def _warn_missing(self, queue: Queue, count: int, dlx_name: str, now_ms: int) -> None:
        """Rate-limited: a queue's DLX does not exist (RabbitMQ drops these silently)."""
        self._missing_unreported += count
        if now_ms < self._missing_warn_at:
            return
        log.warning(
            "dropped %d dead letter(s) since the last warning: dead-letter exchange '%s' of queue '%s'"
            " in vhost '%s' not found (declare it, or change x-dead-letter-exchange; reported at most"
            " every %d s)",
            self._missing_unreported,
            dlx_name,
            queue.name,
            self.vhost.name,
            WARN_EVERY_MS // 1000,
        )
        self._missing_unreported = 0
        self._missing_warn_at = now_ms + WARN_EVERY_MS

    def _process(self, queue: Queue, entries: list[Entry], reason: str, stop: float | None = None) -> int:
        """Dead-letter ``entries`` (one death event) until ``time.perf_counter()`` passes ``stop``;
        returns how many were handled (at least one)."""
        now_ms = self.clock()
        dlx_name = queue.args.dead_letter_exchange
        vhost = self.vhost
        exchange = None
        if not self.enabled:
            drop, why = "dlx_disabled", "dead-lettering disabled"
        elif dlx_name is None:
            drop, why = "no_dlx", "no dead-letter exchange"
        elif dlx_name and (exchange := vhost.exchanges.get(dlx_name)) is None:
            drop, why = "dlx_missing", f"dead-letter exchange '{dlx_name}' not found"
        else:
            drop = None
        archive = self.archive
        if drop is not None:
            self._count(reason, dlx_name, now_ms, entries)
            self._drop(queue, len(entries), reason, why)
            if drop == "dlx_missing":
                assert dlx_name is not None
                self._warn_missing(queue, len(entries), dlx_name, now_ms)
            if archive is not None:
                flat = [x for entry in entries for x in (entry.message, entry.enqueued_at, None, None, drop)]
                self._archive(archive, now_ms, vhost, queue, reason, dlx_name, flat)
            queue.forget(entries)
            return len(entries)
        assert dlx_name is not None
        archived: list[Any] = []  # flat: message, enqueued_at, death_count, dlx_routing_key, drop_reason
        handed: list[Entry] = []  # stored (or dropped) copies: their source rows go
        done = 0
        for entry in entries:
            if stop is not None and done and time.perf_counter() > stop:
                break
            done += 1
            try:
                archived += self._hand_on(queue, entry, reason, exchange, dlx_name, now_ms)
            except Exception:  # a bug, not the message: it keeps its stored row (back after a restart)
                log.exception(
                    "queue '%s' in vhost '%s': a dead letter (%s) could not be handed on; its stored copy"
                    " is kept",
                    queue.name,
                    vhost.name,
                    reason,
                )
                continue
            handed.append(entry)
        self._count(reason, dlx_name, now_ms, entries[:done] if done < len(entries) else entries)
        queue.forget(handed)  # after the new copies: their inserts come first in the store batch
        if archived and archive is not None:
            self._archive(archive, now_ms, vhost, queue, reason, dlx_name, archived)
        return done

    def _count(self, reason: str, dlx_name: str | None, now_ms: int, entries: list[Entry]) -> None:
        """The dead-letter counters (Prometheus) and, for expiries, how late they were."""
        counter = (reason, "at_most_once" if self.enabled and dlx_name is not None else "disabled")
        self.dead_lettered[counter] = self.dead_lettered.get(counter, 0) + len(entries)
        if reason == "expired":
            self.lateness.observe(now_ms, entries)

    def _hand_on(
        self, queue: Queue, entry: Entry, reason: str, exchange: Exchange | None, dlx_name: str, now_ms: int
    ) -> tuple[Any, ...]:
        """Publish one dead letter to the DLX; returns its archive record (flat)."""
        message = entry.message
        dlrk = queue.args.dead_letter_routing_key
        now_s = now_ms // 1000
        cache = self._cache
        if len(cache) > CACHE_ENTRIES or self._cache_octets > CACHE_OCTETS:
            cache.clear()
            self._cache_octets = 0
        # The new properties depend only on these: dead letters from one queue with the same
        # property octets in the same second (a TTL burst, a retry loop) share one rewrite.
        key = (message.raw_props, queue.name, reason, message.exchange, message.routing_key, now_s, dlrk)
        rewritten = cache.get(key)
        if rewritten is None:
            try:
                rewritten = self._rewrite(message, queue.name, reason, now_s, dlrk)
            except Exception as exc:  # what the codec refuses stays with this one message
                rewritten = self._unrewritten(queue, message, reason, exc)
            cache[key] = rewritten
            self._cache_octets += len(message.raw_props) + len(rewritten[0])
        raw, cyclic, count = rewritten
        if dlrk is not None:
            routing_keys = [dlrk]
        else:  # every key it was published with: CC and BCC too (RabbitMQ)
            routing_keys = [message.routing_key, *message.extra_keys]
        dead: Message = Message(
            dlx_name, routing_keys[0], raw, message.body, message.persistent, message.priority, None
        )
        if len(routing_keys) > 1:
            dead = SelectedMessage(dead, raw, tuple(routing_keys[1:]))
        excluded = cyclic if reason != "rejected" else None
        result = self.vhost.publish(exchange, dead, excluded, dead_letter=True)
        if not result.routed:
            self._drop(queue, 1, reason, "no route from the dead-letter exchange (or a cycle)")
            lost_to = "cycle" if result.excluded else "no_route"
            return (message, entry.enqueued_at, count, routing_keys[0], lost_to)
        self.routed += 1
        return (message, entry.enqueued_at, count, routing_keys[0], None)

    def _unrewritten(
        self, queue: Queue, message: Message, reason: str, exc: Exception
    ) -> tuple[bytes, frozenset[str] | None, int | None]:
        """A dead letter whose ``x-death`` cannot be written (headers the codec refuses): it goes on
        with its original headers, ``expiration`` removed, never back into ``queue`` (a cycle
        guard without ``x-death``)."""
        self.unrewritten += 1
        log.warning(
            "queue '%s' in vhost '%s': x-death could not be added to a dead letter (%s: %s); it is"
            " dead-lettered (%s) with its original headers",
            queue.name,
            self.vhost.name,
            type(exc).__name__,
            exc,
            reason,
        )
        try:
            fields = split_props(message.raw_props)[1]
            fields.pop(EXPIRATION_BIT, None)
            raw = join_props(fields)
        except Exception:  # malformed properties: forwarded as they came
            raw = message.raw_props
        return raw, frozenset((queue.name,)), None

    @staticmethod
    def _rewrite(
        message: Message, queue: str, reason: str, now_s: int, dlrk: str | None
    ) -> tuple[bytes, frozenset[str] | None, int]:
        """The dead letter's property octets, the queues it must not reach (``cycle_queues``) and
        the ``count`` of this death. Of the headers only ``x-death`` and ``CC`` are decoded; every
        other value goes on as its octets (a table of thousands of keys costs a scan)."""
        fields = split_props(message.raw_props)[1]
        table = fields.get(HEADERS_BIT)
        headers = decode_table(table, only=_READ_KEYS)[0] if table is not None else None
        keys = dead_letter_routing_keys(message.routing_key, headers)
        expiration = quick_props(message.raw_props)[2]
        new_headers = record_death(
            headers, queue, reason, message.exchange, keys, expiration, now_s, strip_cc=dlrk is not None
        )
        fields[HEADERS_BIT] = encode_table(new_headers)
        fields.pop(EXPIRATION_BIT, None)
        raw = join_props(fields)
        deaths = new_headers.get(X_DEATH)
        deaths = deaths if isinstance(deaths, list) else []
        return raw, cycle_queues(deaths), _front_count(deaths)
