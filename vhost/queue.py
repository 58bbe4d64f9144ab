"""Queues: one façade over parts with one job each, configured by the queue's type.

Rules:
- Every message in a queue is an ``Entry`` with a per-queue sequence number ``seq``; ready entries
  are kept in delivery order (``ready.py``; a quorum queue's: ``quorum.py``).
- The queue's type (``queue_type.py``) chooses its parts and answers where the types differ; the
  parts, one job each, are listed there.
- ``dispatch`` hands ready entries to the consumers the selection picks while their channels can take
  more; the broker calls it again when a consumer regains capacity.
- Expired heads leave (``expired``) after every operation that changes the head: a take, a ``drop-head``
  overflow, a requeue, an enqueue that makes the new message the head (``_drop_expired``, RabbitMQ's
  ``drop_expired_msgs``), and on the timer armed for the next deadline.
- ``x-expires``: a queue with no consumers that is not declared or read (``basic.get``) for the
  period is deleted; its messages are discarded, never dead-lettered.
- The queue never imports the broker or dlx: consumers implement ``Consumer``, dead letters go
  to an injected ``DeadLetterSink``, timers to an injected ``TTLManager``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

from ottermq.ttl.manager import TTLManager
from ottermq.ttl.noop import NoopTTLManager

from .consumers import QueueConsumers, consumer_priority
from .dedup import DedupCache
from .expiry import Expiry
from .limits import ADMIT, REFUSE_DEAD_LETTER, Limits
from .message import OUT, PAGED, READY, Entry, Message, with_delivery_count
from .paging import Paging, Window
from .queue_api import Consumer, DeadLetterSink, DropSink, MessageStore, QueueStats
from .queue_type import QueueType
from .queue_types import queue_type
from .ready import Ready
from .retry import Returns

if TYPE_CHECKING:
    from .queue_args import QueueArgs

__all__ = ["Consumer", "DeadLetterSink", "DropSink", "MessageStore", "Queue", "QueueStats"]

EXPIRED: Final = "expired"
MAXLEN: Final = "maxlen"
REJECTED: Final = "rejected"
DELIVERY_LIMIT: Final = "delivery_limit"
# entries one dispatch hands out before it lets the event loop run (the rest follow in the next turn):
# a no-ack consumer that keeps up would otherwise take a whole backlog in one turn (0.8 s for a few
# hundred thousand), and every other connection of the process (handshakes, heartbeats) waits
DISPATCH_BUDGET: Final = 2000


def _positive_ms(value: object) -> int | None:
    """A consumer timeout in ms from an argument or policy value (anything else: none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class Queue:
    """A queue in a virtual host.

    Args:
        name: queue name.
        vhost: name of the owning virtual host (for error texts).
        durable, exclusive, auto_delete: the declare flags.
        owner: the connection owning an exclusive queue (opaque), else None.
        args: validated ``x-`` arguments (``args.queue_type`` picks the type).
        ttl: the TTL manager (timers and deadlines); no-op by default.
        sink: where dead letters go; dropped by default.
        limits: apply ``x-max-length``/``-bytes`` (``OTTERMQ_ENABLE_QLL``).
    """

    # no __slots__: compiled (mypyc), the attributes set in __init__ are all a queue has
    def __init__(
        self,
        name: str,
        vhost: str,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        owner: object | None,
        args: QueueArgs,
        ttl: TTLManager | None = None,
        sink: DeadLetterSink[Queue] | None = None,
        limits: bool = True,
    ) -> None:
        self.name = name
        self.vhost = vhost
        self.durable = durable
        self.exclusive = exclusive
        self.auto_delete = auto_delete
        self.owner = owner
        self.args = args
        kind = queue_type(args.queue_type)
        self.kind: QueueType = kind
        self._store_all = kind.stores_every_message  # (read per message)
        # consumer selection, single active consumer, exclusivity (``consumers.py``); ``consumers`` is
        # its list of every consumer (the same list object for the queue's life: read it, never change it)
        self.selection: QueueConsumers[Consumer[Queue]] = kind.consumers(args.single_active_consumer)
        self.consumers = self.selection.items
        self._ready: Ready = kind.ready(args)
        self._expiry = Expiry(args.exact_ttl)
        self._apply_limits = limits  # OTTERMQ_ENABLE_QLL
        self._limits: Limits | None = None
        self._returns = Returns(args)
        self._seq = 0
        self.had_consumer = False
        self.deleted = False
        self.ready_bytes = 0
        self.unacked = 0  # delivered, awaiting ack
        self.ttl: TTLManager = ttl if ttl is not None else NoopTTLManager()
        self.sink: DeadLetterSink[Queue] = sink if sink is not None else DropSink()
        # called when x-expires fires on an unused queue (the vhost deletes it)
        self.on_expired: Callable[[Queue], None] | None = None
        # durable queues get a MessageStore (broker/node/wiring.py); store_id is the queue's row
        self.store: MessageStore[Queue] | None = None
        self.store_id = 0
        self._last_now = 0
        self.stats = QueueStats()
        # ``args`` is what is in force: ``declared_args`` with the vhost's policies applied (set_policy)
        self.declared_args = args
        self.policy: str | None = None  # names of the user and operator policy that apply
        self.operator_policy: str | None = None
        self.policy_definition: dict[str, Any] = {}  # their merged definition
        # consumer timeout (ms) of its deliveries: x-consumer-timeout or a policy's (None: the node's)
        self.ack_timeout: int | None = _positive_ms(args.raw.get("x-consumer-timeout"))
        self.dedup: DedupCache | None = None  # set by the vhost when it deduplicates (``dedup.py``)
        # a timer source (delayed retry): call_at(epoch ms, callback)
        self.call_at: Callable[[int, Callable[[], None]], Any] | None = None
        # the event loop's call_soon (None: every dispatch hands out all it can at once)
        self.call_soon: Callable[[Callable[[], None]], Any] | None = None
        self._dispatch_later = False  # a dispatch is scheduled for the next turn (DISPATCH_BUDGET)
        self._window = Window()  # how much stays in memory (set_paging: the vhost's paging)
        self._configure(args)
        if args.expires is not None:
            self.touch()

    def __repr__(self) -> str:
        return f"queue '{self.name}' in vhost '{self.vhost}'"

    def _configure(self, args: QueueArgs) -> None:
        """The parts follow the arguments in force (declared, or a policy's)."""
        limits = self.kind.limits(args.max_length, args.max_length_bytes, args.overflow)
        if limits is not None and self._limits is not None:
            limits.carry(self._limits)  # (a quorum queue's soft limit stays in force)
        self._limits = limits if self._apply_limits else None
        self._returns.configure(args)

    # -- messages -------------------------------------------------------------------------
    @property
    def message_count(self) -> int:
        """Ready messages (what declare-ok, get-ok and delete-ok report)."""
        return len(self._ready)

    def enqueue(self, message: Message, published: bool = True) -> Entry | None:
        """Add a published (or, ``published`` false, dead-lettered) message.

        Returns:
            The entry, or None when ``reject-publish`` overflow refused the message (the
            publisher's confirm must then be a nack).
        """
        size = len(message.body)
        ready = self._ready
        limits = self._limits
        if limits is not None:
            admit = limits.admit(len(ready), self.ready_bytes, size)
            if admit != ADMIT:
                if admit == REFUSE_DEAD_LETTER:
                    self.sink.dead_letter(self, [Entry(message, 0)], MAXLEN)
                return None
        self._seq += 1
        if published:
            self.stats.publish += 1
        now = self.ttl.now()
        if now == self._last_now:
            now = self._last_now  # one int object per millisecond, shared by its entries
        else:
            self._last_now = now
        entry = Entry(message, self._seq, None, now)
        if message.expiration is not None or self.args.message_ttl is not None:
            entry.deadline = self.ttl.expires_at(now, self.args.message_ttl, message.expiration)
        if self.consumers and not ready:
            consumer = self.selection.next()
            if consumer is not None:  # straight to a consumer: a TTL of 0 is fine here
                # stored first unless a no-ack consumer takes it for good (its publisher's confirm goes
                # out at once, as RabbitMQ's for a message consumed before it is persisted)
                store = self.store
                if store is not None and (message.persistent or self._store_all) and not consumer.no_ack:
                    store.message_added(self, entry)
                entry.state = OUT
                consumer.deliver(self, entry)
                return entry
        store = self.store
        if store is not None and (message.persistent or self._store_all):
            store.message_added(self, entry)
        if self.ready_bytes < self._window.bytes or not ready.page(entry):  # (a lazy queue's is 0)
            ready.append(entry)
        self.ready_bytes += size
        if self.consumers:
            self.dispatch()
        if limits is not None:
            self._drop_head_overflow(limits)
            limits.added(len(ready), self.ready_bytes)
        deadline = entry.deadline
        if deadline is not None and (entry.state == READY or entry.state == PAGED):
            expiry = self._expiry
            if entry.state == READY:
                expiry.track(entry)
            if deadline <= now:  # TTL 0 and nobody took it: expires now if it is due
                self.expire(now)
            elif expiry.exact or ready.head_seq() == entry.seq:
                self.ttl.schedule(self, deadline)
        return entry

    def _drop_head_overflow(self, limits: Limits) -> None:
        """``drop-head``: dead-letter heads (``maxlen``) while over the limit, then expired heads."""
        if not limits.drops_head:
            return
        dropped: list[Entry] = []
        ready = self._ready
        while ready and limits.over(len(ready), self.ready_bytes):
            dropped.append(self._take())
        if dropped:
            self._dead(dropped, MAXLEN)
            self._drop_expired()  # the new head may be past its deadline (RabbitMQ: maybe_drop_head)

    def _take(self) -> Entry:
        entry = self._ready.popleft()
        entry.state = OUT
        self.ready_bytes -= len(entry.message.body)
        return entry

    def pop(self) -> Entry | None:
        """Take the head entry for ``basic.get``; expired heads leave before the take (a timer a few ms
        late) and after it (the new head), so get-ok's ``message_count`` never counts them."""
        ready = self._ready
        head = ready.peek()
        if head is None:
            return None
        deadline = head.deadline
        if deadline is not None:
            now = self.ttl.now()
            if now >= deadline:
                self.expire(now)
                if not ready:
                    return None
        entry = self._take()
        head = ready.peek()
        if (head is not None and head.deadline is not None) or self._expiry.exact:
            self._drop_expired()
        return entry

    def peek(self) -> Entry | None:
        return self._ready.peek()

    def peek_in_memory(self) -> Entry | None:
        """The head if it is in memory, else None (a look that pages nothing in: management)."""
        return self._ready.peek_in_memory()

    def recover(self, entries: list[Entry]) -> None:
        """Append stored entries at start-up (in seq order); nothing is written back."""
        ready = self._ready
        for entry in entries:
            ready.append(entry)
            self.ready_bytes += len(entry.message.body)
            if entry.seq > self._seq:
                self._seq = entry.seq
        self._expiry.recover(entries)

    def recovered(self) -> None:
        """All stored entries are in: order the deadline heap, dead-letter what is over the delivery
        limit (a quorum queue counts a delivery cut short by the restart as a return), expire what
        lapsed, arm timers."""
        self._expiry.ordered()
        if self._returns.limit is not None:
            over = self._returns.over_limit(self._ready)
            for entry in over:
                self._ready.discard(entry)  # a tombstone, as an exact-TTL expiry
                self.ready_bytes -= len(entry.message.body)
            if over:
                self._dead(over, DELIVERY_LIMIT)
        self.expire(self.ttl.now())

    def outgoing(self, entry: Entry, get: bool = False) -> Message:
        """The message to send for ``entry``: with ``x-delivery-count`` once it was returned, and on
        every ``basic.get`` (``get``) from a queue whose type counts every return."""
        if entry.delivery_count or (get and self.kind.counts_every_return):
            return with_delivery_count(entry.message, entry.delivery_count)
        return entry.message

    def requeue(self, entries: list[Entry], failed: bool | None = True, down: bool = False) -> None:
        """Return delivered entries (``retry.py``: counted, held for a delayed retry if ``failed`` says
        so, dead-lettered past the delivery limit) to where the queue type puts them (``down``: the
        consumer's channel went away); then, as RabbitMQ's ``requeue_and_run``, ``drop-head``
        overflow and expired heads (an expired entry that lands at the head leaves as ``expired``)."""
        if self.deleted or not entries:
            return
        now = self.ttl.now()
        returns = self._returns
        retry = returns.applies(failed, self.call_at)
        back, held, over_limit = returns.sort(entries, now, self.kind.counts_every_return, retry)
        if back:
            self._put_back(back, down or returns.limit is not None)
        if held and self.call_at is not None:
            returns.hold(held, now, self.call_at, self.release_retries)
        if over_limit:
            self._dead(over_limit, DELIVERY_LIMIT)
        if back and self.consumers:
            self.dispatch()

    def _put_back(self, back: list[Entry], first: bool = True) -> None:
        """Entries are ready again, where the queue type puts them (``first``: see ``QueueType``)."""
        limits = self._limits
        if limits is not None:
            limits.returning(len(self._ready), self.ready_bytes)
        for entry in back:
            entry.state = READY
            self.ready_bytes += len(entry.message.body)
        self.kind.put_back(self._ready, back, first)
        expiry = self._expiry
        if expiry.exact:
            for entry in back:
                expiry.track(entry)
        if limits is not None:
            self._drop_head_overflow(limits)  # a requeue into a full queue drops the (new) head
            limits.added(len(self._ready), self.ready_bytes)
        self._drop_expired()

    # -- delayed retry (``retry.py``) ---------------------------------------------------------
    @property
    def delayed_count(self) -> int:
        """Entries held by a delayed retry (management ``messages_delayed``)."""
        return len(self._returns)

    def retry_delay(self, delivery_count: int) -> int:
        """Milliseconds a returned entry is held (``Returns.delay``)."""
        return self._returns.delay(delivery_count)

    def release_retries(self) -> None:
        """Timer callback: entries whose retry delay is over go back in place (then dispatch)."""
        if self.deleted:
            return
        back = self._returns.due(self.ttl.now())
        if back:
            self._put_back(back)
            if self.consumers:
                self.dispatch()
        self._returns.arm(self.call_at, self.release_retries)

    def _dead(self, entries: list[Entry], reason: str) -> None:
        """Entries leave as dead letters (``DeadLetterSink``: their new copies stored, then their rows
        deleted)."""
        self.sink.dead_letter(self, entries, reason)

    def forget(self, entries: list[Entry]) -> None:
        """Entries are gone for good (acked, no-ack delivered, dead-lettered): delete stored rows."""
        store = self.store
        if store is not None:
            for entry in entries:
                if entry.store_id:
                    store.message_removed(entry)
                    entry.store_id = 0

    def delivered(self, entry: Entry) -> None:
        """A stored entry went out to a consumer (it will be recovered as redelivered)."""
        if entry.store_id and self.store is not None:
            self.store.message_delivered(entry)

    def withdraw(self, entry: Entry) -> bool:
        """Take back a ready entry whose store write failed, so memory agrees with the store (its
        publisher gets a nack). An entry already delivered stays with its consumer.

        Returns:
            Whether the entry was still ready and is now gone.
        """
        if (entry.state != READY and entry.state != PAGED) or self.deleted:
            return False
        if not self._ready.discard(entry):  # paged in and delivered since
            return False
        self.ready_bytes -= len(entry.message.body)
        self.forget([entry])  # the store retries the failed insert: this delete follows it
        self._after_change()
        return True

    def reject(self, entries: list[Entry]) -> None:
        """Dead-letter delivered entries rejected with ``requeue=false`` (reason ``rejected``)."""
        if entries and not self.deleted:
            self._dead(entries, REJECTED)

    def purge(self) -> int:
        """Drop every ready message; returns how many (never dead-letters)."""
        count = len(self._ready)
        entries = self._ready.clear()  # the ones in memory (paged ones are forgotten)
        self.ready_bytes = 0
        self._expiry.clear()
        if self.store is not None and (count > len(entries) or any(e.store_id for e in entries)):
            for entry in entries:
                entry.store_id = 0
            self.store.queue_purged(self)
        return count

    def ready_entries(self) -> Iterable[Entry]:
        """Every ready entry in delivery order, paged ones read back from disk (state ``PAGED``); the
        queue must not change while it is read (see ``scan``)."""
        return iter(self._ready)

    def scan(self) -> Iterator[Entry]:
        """Every ready entry for a scan that takes turns with other work: the ones in memory now, then
        the paged ones read back as the scan goes (``Ready.scan``)."""
        return self._ready.scan()

    # -- paging (backlogs larger than memory, ``paging.py``) ----------------------------------
    def set_paging(self, paging: Paging | None) -> None:
        """Page beyond the vhost's window (``paging.Window``)."""
        self._window.apply(
            self._ready, paging, self.args.queue_mode == "lazy", self._expiry.exact, self.call_soon
        )

    def _apply_window(self) -> None:
        self.set_paging(self._window.paging)

    @property
    def paged(self) -> int:
        """Ready messages on disk."""
        return self._ready.paged

    @property
    def paged_bytes(self) -> int:
        """Body bytes of the ready messages on disk."""
        return self._ready.paged_bytes

    @property
    def paged_transient(self) -> tuple[int, int]:
        """Transient ready messages on disk and their body bytes (RabbitMQ's ``messages_paged_out``)."""
        return self._ready.paged_transient

    # -- message expiry (``expiry.py``) --------------------------------------------------------
    def expire(self, now: int) -> None:
        """Timer callback: dead-letter what expired, then re-arm for the next deadline."""
        if self.deleted:
            return
        expired: list[Entry] = []
        self.ready_bytes -= self._expiry.collect(now, self._ready, expired)
        for entry in expired:
            if entry.state == READY:  # popped heads (heap expiries are GONE tombstones)
                self.ready_bytes -= len(entry.message.body)
                entry.state = OUT
        self._after_change()
        if expired:
            self._dead(expired, EXPIRED)

    def _after_change(self) -> None:
        """Arm the TTL timer for the earliest deadline that can fire next."""
        deadline = self._expiry.next_deadline(self._ready)
        if deadline is not None:
            self.ttl.schedule(self, deadline)

    def _drop_expired(self) -> None:
        """RabbitMQ's ``drop_expired_msgs``, run after every operation that changes the head: heads
        past their deadline are dead-lettered now, and the timer is armed for the new head.
        Costs one look at the head's deadline when the queue has no TTL."""
        deadline = self._expiry.next_deadline(self._ready)
        if deadline is None:
            return
        now = self.ttl.now()
        if now >= deadline:
            self.expire(now)
        else:
            self.ttl.schedule(self, deadline)

    # -- policies ------------------------------------------------------------------------------
    def set_policy(
        self, policy: str | None, operator_policy: str | None, definition: dict[str, Any], args: QueueArgs
    ) -> None:
        """Apply the vhost's policies (``vhost/policy.py``): ``args`` become the settings in force.

        As RabbitMQ: new messages get the new TTL (queued ones keep their deadline), the expiry clock
        restarts with the new ``expires``, a lower length limit in ``drop-head`` mode trims the queue
        now (dead-lettering as ``maxlen``), the dead-letter exchange in force is read at each death.
        """
        old = self.args
        self.policy, self.operator_policy, self.policy_definition = policy, operator_policy, definition
        own = _positive_ms(self.declared_args.raw.get("x-consumer-timeout"))
        timeouts = [t for t in (own, _positive_ms(definition.get("consumer-timeout"))) if t is not None]
        self.ack_timeout = min(timeouts) if timeouts else None
        if args == old:
            return
        self.args = args
        self._configure(args)
        if args.expires != old.expires:
            self.touch()
        if args.exact_ttl != old.exact_ttl and self._expiry.set_exact(args.exact_ttl, self._ready):
            self.expire(self.ttl.now())
        if args.queue_mode != old.queue_mode or args.exact_ttl != old.exact_ttl:
            self._apply_window()
        if self._limits is not None:
            self._drop_head_overflow(self._limits)

    # -- queue expiry (x-expires) ------------------------------------------------------------
    def touch(self) -> None:
        """The queue was used (declared, read, consumed from): restart its ``x-expires`` clock."""
        expires = self.args.expires
        if expires is not None and not self.deleted:
            at = self.ttl.now() + expires
            self.ttl.schedule_queue_expiry(self, at)
            if self.store is not None:
                self.store.queue_touched(self, at)

    def expire_queue(self, now: int) -> None:
        """``x-expires`` timer: delete the queue if it is still unused."""
        if self.deleted or self.args.expires is None:
            return
        if self.consumers:
            self.ttl.schedule_queue_expiry(self, now + self.args.expires)
            return
        if self.on_expired is not None:
            self.on_expired(self)

    # -- consumers (selection and single active consumer: ``consumers.py``) --------------------
    def add_consumer(self, consumer: Consumer[Queue], arguments: object = None) -> None:
        """Attach a consumer (``arguments``: its ``basic.consume`` arguments, for ``x-priority``)."""
        self.selection.add(consumer, consumer_priority(arguments))
        self.had_consumer = True
        self.touch()
        self.dispatch()

    def remove_consumer(self, consumer: Consumer[Queue], dispatch: bool = True) -> bool:
        """Detach a consumer; with single active consumer the next one is active at once and takes
        what is ready at once if the type ``hands_over_at_once`` and ``dispatch`` (false: a closing
        channel, whose deliveries are requeued first, ahead of the ready messages).

        Returns:
            True when an auto-delete queue should now be deleted.
        """
        selection = self.selection
        active = selection.active
        if not selection.remove(consumer):
            return False
        if not self.consumers:
            self.touch()
        elif dispatch and selection.active is not active and self.kind.hands_over_at_once():
            self.dispatch()
        return self.auto_delete and not self.consumers and self.had_consumer

    def has_exclusive_consumer(self) -> bool:
        """An exclusive consumer holds the queue (classic queues; ``QueueConsumers.has_exclusive``)."""
        return self.selection.has_exclusive()

    def dispatch(self) -> None:
        """Deliver ready entries to the consumers the selection picks, while they can take them."""
        ready = self._ready
        if not ready or not self.consumers:
            return
        expired: list[Entry] | None = None
        now = -1
        taken = False
        budget = DISPATCH_BUDGET if self.call_soon is not None else -1
        next_consumer = self.selection.next
        while ready:
            if budget == 0:  # the rest in the next turn of the event loop
                if not self._dispatch_later and self.call_soon is not None:
                    self._dispatch_later = True
                    self.call_soon(self._dispatch_again)
                break
            consumer = next_consumer()
            if consumer is None:
                break
            entry = self._take()
            taken = True
            budget -= 1
            deadline = entry.deadline
            if deadline is not None:
                if now < 0:
                    now = self.ttl.now()
                if now >= deadline:
                    if expired is None:
                        expired = []
                    expired.append(entry)
                    continue
            consumer.deliver(self, entry)
        if expired:
            self._dead(expired, EXPIRED)
        if taken:
            self._drop_expired()  # RabbitMQ's fetch: the new head leaves now if it is past due

    def _dispatch_again(self) -> None:
        self._dispatch_later = False
        if not self.deleted:
            self.dispatch()

    def mark_deleted(self) -> list[Consumer[Queue]]:
        """Flag the queue deleted, drop its messages; returns the consumers to notify."""
        self.deleted = True
        self._ready.clear()
        self._returns.clear()
        self.ready_bytes = 0
        self._expiry.clear()
        self.ttl.cancel(self)
        return self.selection.clear()
