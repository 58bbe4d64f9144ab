"""Delayed delivery and persistent deduplication caches: the broker's side.

``DelayService`` is the vhosts' ``Delayer``: it keeps every vhost's delayed messages in one
``vhost.delayed.DelayHeap`` with one event-loop timer for the earliest due time, writes the
persistent ones of durable exchanges to the store, and routes each when its delay ends.
``DedupPersistence`` is the vhosts' ``DedupStore``: it loads persisted deduplication keys at start
and writes every change of a persistent cache.

Rules:
1. Due times are wall-clock epoch milliseconds, stored with the message, so a delay keeps counting
   while the broker is down: at start what is already due is routed at once, in order.
2. A persistent message published to a durable delayed exchange is written (``delayed`` table) in
   the store batch its publisher confirm waits for; a failed write takes it back and nacks. When it
   comes due, inserting it into durable queues and then deleting its row go into the same store
   batch, so a ``kill -9`` leaves it in one place or the other; a message whose routing fails keeps
   its row (routed again after a restart: a duplicate at worst, never a loss), and one whose
   ``x-delay`` cannot be rewritten is routed with its headers as they came. Transient messages, or
   any message of a transient exchange, live in memory only.
3. ``mandatory`` is checked at publish time, against the bindings of that moment: a message that
   routes nowhere then is returned (``basic.return`` 312 NO_ROUTE) and not kept. (The plugin cannot
   support ``mandatory``; RabbitMQ returns every delayed mandatory message there.) A message that
   routes nowhere when it comes due goes to the exchange's alternate exchange if it has one, else
   it is dropped and counted (``unroutable``), as any unroutable message.
4. At most ``BATCH`` messages are routed per loop turn, so a burst of due messages never stalls the
   connections.
5. Deleting a delayed exchange (or its vhost) drops its delayed messages, counted as ``dropped``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ottermq.persistence.store import DedupRecord, DelayedRecord, Store
from ottermq.vhost.dedup import DedupCache
from ottermq.vhost.delayed import Delayed, DelayHeap, swap_delay_header
from ottermq.vhost.exchange import Exchange
from ottermq.vhost.message import Message, SelectedMessage, published_message
from ottermq.vhost.vhost import ROUTED, UNROUTED, PublishResult, VHost

if TYPE_CHECKING:
    from ottermq.ttl.manager import Clock

log = logging.getLogger(__name__)

BATCH = 2000  # delayed messages routed per loop turn (rule 4)


class DelayService:
    """Implements ``vhost.Delayer`` for every vhost of a broker (see the module rules).

    Args:
        vhosts: the broker's vhosts by name (looked up when a message comes due).
        store: where persistent delayed messages go.
        loop: the event loop (one timer).
        clock: epoch milliseconds.
    """

    def __init__(
        self, vhosts: Mapping[str, VHost], store: Store, loop: asyncio.AbstractEventLoop, clock: Clock
    ) -> None:
        self.vhosts = vhosts
        self.store = store
        self.loop = loop
        self.clock = clock
        self.heap = DelayHeap()
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at: int | None = None
        # counters (Prometheus, management): accepted for delay, routed when due, routed nowhere when
        # due, dropped with their exchange
        self.published = self.delivered = self.unroutable = self.dropped = 0

    # -- vhost.Delayer ----------------------------------------------------------------------
    def delay(
        self, vhost: VHost, exchange: Exchange, message: Message, delay: int, mandatory: bool
    ) -> PublishResult:
        """Keep ``message`` for ``delay`` ms (rules 2 and 3)."""
        extra = list(message.extra_keys) or None
        if mandatory and not vhost.route(exchange, message, extra):
            return UNROUTED
        message.forget_headers()  # ~300 bytes of decoded table per waiting message; decoded again when due
        item = Delayed(self.clock() + delay, vhost.name, exchange.name, message, delay)
        stored = None
        if exchange.durable and message.persistent:
            item.store_id = self.store.insert_delayed(
                DelayedRecord(
                    vhost.name,
                    exchange.name,
                    item.due,
                    delay,
                    message.routing_key,
                    message.raw_props,
                    message.body,
                    message.extra_keys,
                )
            )
            stored = [(self, item)]
        self.heap.push(item)
        self.published += 1
        self._arm()
        return PublishResult(True, False, stored) if stored else ROUTED  # type: ignore[arg-type]

    def withdraw(self, item: Delayed) -> bool:
        """Its store write failed: it is not delayed after all (the publisher gets a nack)."""
        if not self.heap.remove(item):
            return False
        if item.store_id:
            self.store.delete_delayed(item.store_id)
        return True

    def exchange_deleted(self, vhost: str, name: str) -> None:
        gone = self.heap.drop_exchange(vhost, name)
        if gone:
            self.dropped += len(gone)
            if any(item.store_id for item in gone):
                self.store.delete_delayed_exchange(vhost, name)
            log.info(
                "dropped %d delayed messages of deleted exchange '%s' in vhost '%s'", len(gone), name, vhost
            )

    def pending(self, vhost: str, exchange: str) -> int:
        """Messages waiting in one exchange (management ``messages_delayed``, Prometheus)."""
        return self.heap.pending.get((vhost, exchange), 0)

    # -- the timer ----------------------------------------------------------------------------
    def _arm(self) -> None:
        due = self.heap.next_due()
        if due is None:
            self._cancel()
            return
        if self._armed_at is not None and self._armed_at <= due:
            return
        self._cancel()
        self._armed_at = due
        self._timer = self.loop.call_later(max(0.0, (due - self.clock()) / 1000), self._fire)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._armed_at = None

    def _fire(self) -> None:
        self._timer = None
        self._armed_at = None
        now = self.clock()
        items = self.heap.pop_due(now, BATCH)
        for item in items:
            try:
                self._route(item)
            except Exception:  # one bad message must not stop the others; its row stays (a restart retries)
                log.exception("routing a delayed message from '%s' in vhost '%s'", item.exchange, item.vhost)
        if len(items) == BATCH:  # more are due: next loop turn (rule 4)
            self._armed_at = now
            self._timer = self.loop.call_later(0, self._fire)
        else:
            self._arm()

    def _route(self, item: Delayed) -> None:
        """Route one due message; its row is deleted after its new copies are stored (rule 2)."""
        vhost = self.vhosts.get(item.vhost)
        exchange = vhost.exchanges.get(item.exchange) if vhost is not None else None
        if vhost is None or exchange is None:
            self.dropped += 1
            self._forget(item)
            return
        try:
            message = swap_delay_header(item.message, item.delay)
        except Exception as exc:  # headers the codec refuses: the message goes on as it came
            log.warning(
                "a delayed message of exchange '%s' in vhost '%s' is routed with its headers unchanged"
                " (x-delay could not be written: %s: %s)",
                item.exchange,
                item.vhost,
                type(exc).__name__,
                exc,
            )
            message = item.message
        result = vhost.publish(exchange, message, checked=True)
        self._forget(item)  # queued behind the queue inserts: the same batch (rule 2)
        if result.routed:
            self.delivered += 1
        else:
            self.unroutable += 1

    def _forget(self, item: Delayed) -> None:
        if item.store_id:
            self.store.delete_delayed(item.store_id)

    def stop(self) -> None:
        self._cancel()

    # -- recovery -----------------------------------------------------------------------------
    async def recover(self) -> int:
        """Load the stored delayed messages (rule 1); the due ones are routed on the next loop turn."""
        count = 0
        async for chunk in self.store.iter_delayed():
            for r in chunk:
                vhost = self.vhosts.get(r.vhost)
                exchange = vhost.exchanges.get(r.exchange) if vhost is not None else None
                if exchange is None or not exchange.DELAYED:
                    self.store.delete_delayed(r.id)
                    continue
                message = published_message(r.exchange, r.routing_key, r.props, r.body)  # persistent: stored
                if r.extra_keys:
                    message = SelectedMessage(message, r.props, r.extra_keys)
                self.heap.push(Delayed(r.due, r.vhost, r.exchange, message, r.delay, r.id))
                count += 1
        self._arm()
        if count:
            log.info("recovered %d delayed messages", count)
        return count


class DedupPersistence:
    """Implements ``vhost.DedupStore``: persistent deduplication caches (``vhost/dedup.py``).

    Args:
        store: where keys go.
        clock: epoch milliseconds (expired keys are not reloaded).
    """

    def __init__(self, store: Store, clock: Callable[[], int]) -> None:
        self.store = store
        self.clock = clock
        self._loaded: dict[tuple[str, str, str], list[tuple[bytes, int | None]]] = {}

    async def load(self) -> int:
        """Read every persisted key (before the exchanges and queues are recovered)."""
        records = await self.store.load_dedup()
        for r in records:
            self._loaded.setdefault((r.vhost, r.kind, r.owner), []).append((r.key, r.expires_at))
        return len(records)

    def attach(self, vhost: str, kind: str, name: str, cache: DedupCache) -> None:
        store = self.store

        def added(key: bytes, expires_at: int | None) -> None:
            store.put_dedup(DedupRecord(vhost, kind, name, key, expires_at))

        def removed(key: bytes) -> None:
            store.delete_dedup(vhost, kind, name, key)

        cache.on_add, cache.on_remove = added, removed
        now = self.clock()
        for key, expires_at in self._loaded.pop((vhost, kind, name), ()):
            if expires_at is None or expires_at > now:
                cache.remember(key, expires_at)  # no ``now``: not written again
            else:
                store.delete_dedup(vhost, kind, name, key)

    def detach(self, vhost: str, kind: str, name: str) -> None:
        self._loaded.pop((vhost, kind, name), None)
        self.store.delete_dedup_owner(vhost, kind, name)
