"""Queues: ready messages in order, consumers served round-robin, TTL, expiry and length limits.

Rules:
- Every message in a queue is an ``Entry`` with a per-queue sequence number ``seq``; ready entries
  are kept in ``seq`` order (per priority level for priority queues).
- A requeued entry goes back to its original position (by ``seq``), with ``redelivered`` set.
- ``dispatch`` hands ready entries to consumers round-robin, skipping consumers whose channel
  cannot take more (prefetch, flow, a paused connection); the broker calls it again when a
  consumer regains capacity. With ``x-single-active-consumer`` only the active consumer takes
  them (``consumers.py`` chooses; the queue hands a new active consumer what is ready).
- TTL (RabbitMQ's model): a message's deadline is fixed at enqueue as ``now + min(x-message-ttl,
  expiration)`` and survives requeue. Only the head is watched: a message behind a longer-lived
  head waits for the head (and is counted meanwhile). Expired heads are dead-lettered by a timer
  armed for the head's deadline and, as RabbitMQ's ``drop_expired_msgs``, at once after every
  operation that changes the head: a take (``basic.get``, delivery), a ``drop-head`` overflow, a
  requeue, and an enqueue that makes the new message the head. So the counts replies carry
  (get-ok, and declare-ok/purge-ok/delete-ok after such operations) never include an expired
  head; declare-ok, purge and delete themselves run no check (RabbitMQ's ``stat``/``purge``/
  ``delete`` do not), and purge never dead-letters. Priority queues expire in delivery order
  (highest level first, stopping at the first live head). Delivered, unacked messages never
  expire; a requeued message past its deadline is dead-lettered once it is at the head, never
  redelivered. A message whose TTL is 0 goes to a consumer that can take it at once, or expires.
- Exact TTL (``x-ottermq-exact-ttl``, an ottermq extension): every ready message expires at its
  own deadline wherever it sits, through a deadline heap (O(log n) per message); expired entries
  become tombstones that takes skip. The policy key ``ottermq-exact-ttl`` switches it on a live queue.
- ``x-expires``: a queue with no consumers that is not declared or read (``basic.get``) for the
  period is deleted; its messages are discarded, never dead-lettered.
- Length limits count ready messages and their body bytes: ``drop-head`` dead-letters the head
  (``maxlen``), ``reject-publish`` refuses the new message, ``reject-publish-dlx`` refuses and
  dead-letters it.
- Quorum queues (``quorum``, RabbitMQ 3.10's ``rabbit_fifo``): every message is stored, persistent or
  not; every return counts in ``delivery_count`` and goes out with ``x-delivery-count`` (a long), and
  ``basic.get`` always carries it (0 on the first get); the stored message never carries it (nor do
  its dead letters). A return goes first (``QuorumReady``) when the consumer's channel went away
  (``down``) or the queue has a delivery limit; a nack, reject or recover without a delivery limit
  puts the message at the back. ``reject-publish`` is a soft limit: a publish that takes the queue
  over its limit is accepted, the next ones are refused until the queue is down to 80 % of it;
  ``reject-publish-dlx`` acts as ``drop-head``. ``delivery_count`` counts returns on classic queues
  too when they have ``x-delivery-limit`` or a delayed retry (ottermq extensions).
- The queue never imports the broker or dlx: consumers implement ``Consumer``, dead letters go
  to an injected ``DeadLetterSink``, timers to an injected ``TTLManager``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final, Protocol

from ottermq.ttl.manager import TTLManager
from ottermq.ttl.noop import NoopTTLManager

from .consumers import QueueConsumers, consumer_priority, make_consumers
from .dedup import DedupCache
from .message import HELD, OUT, PAGED, READY, Entry, Message, with_delivery_count
from .paging import UNBOUNDED, Paging
from .ready import PriorityReady, QuorumReady, Ready

if TYPE_CHECKING:
    from .arguments import QueueArgs

EXPIRED: Final = "expired"
MAXLEN: Final = "maxlen"
REJECTED: Final = "rejected"
DELIVERY_LIMIT: Final = "delivery_limit"
# entries one dispatch hands out before it lets the event loop run (the rest follow in the next turn):
# a no-ack consumer that keeps up would otherwise take a whole backlog in one turn (0.8 s for a few
# hundred thousand), and every other connection of the process (handshakes, heartbeats) waits
DISPATCH_BUDGET: Final = 2000
# entries a queue that became lazy pages out per loop turn
SHRINK_SLICE: Final = 5000


class Consumer(Protocol):
    """What a queue needs from a consumer (implemented by the broker's channel)."""

    tag: str
    exclusive: bool
    no_ack: bool  # deliveries are settled on sending (basic.consume no-ack)

    def can_deliver(self) -> bool: ...

    def deliver(self, queue: Queue, entry: Entry) -> None: ...

    def on_queue_deleted(self, queue: Queue) -> None: ...


class DeadLetterSink(Protocol):
    """Where expired, rejected and overflowing messages go (``dlx.DeadLetterer`` or a drop).

    Store first, then forget: the sink deletes each entry's stored row (``queue.forget``) itself,
    only after the entry's dead letter is stored (its insert queued in the same store batch, ahead
    of the delete) or once it is dropped for good. An entry the sink could not hand on keeps its row:
    a restart brings it back (a duplicate at worst, never a loss). ``dead_letter`` never raises for
    one message's sake.
    """

    def dead_letter(self, queue: Queue, entries: list[Entry], reason: str) -> None: ...


class MessageStore(Protocol):
    """Persistence of a durable queue's persistent messages (filled by ``persistence.hook``)."""

    def message_added(self, queue: Queue, entry: Entry) -> None:
        """Store the entry; sets ``entry.store_id``."""

    def message_removed(self, entry: Entry) -> None:
        """Forget a stored entry (acked, dead-lettered, expired, dropped)."""

    def message_delivered(self, entry: Entry) -> None:
        """Remember a stored entry was delivered (recovered as redelivered)."""

    def queue_purged(self, queue: Queue) -> None: ...

    def queue_touched(self, queue: Queue, expires_at: int) -> None: ...


class DropSink:
    """Dead letters vanish (no DLX wiring, e.g. in unit tests)."""

    def dead_letter(self, queue: Queue, entries: list[Entry], reason: str) -> None:
        queue.forget(entries)


def _overflow_mode(args: QueueArgs) -> str:
    """The overflow behaviour in force: a quorum queue ignores ``reject-publish-dlx`` (RabbitMQ 3.10
    logs a warning and keeps its default, ``drop-head``)."""
    if args.overflow == "reject-publish-dlx" and args.queue_type == "quorum":
        return "drop-head"
    return args.overflow


def _seq_of(entry: Entry | None) -> int:
    return entry.seq if entry is not None else -1


def _positive_ms(value: object) -> int | None:
    """A consumer timeout in ms from an argument or policy value (anything else: none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class QueueStats:
    """A queue's message counters since it was declared (the management API's queue
    ``message_stats``, Prometheus' ``rabbitmq_queue_messages_published_total``): plain integers,
    incremented by the queue (``publish``: the published messages it took; not dead letters, as
    RabbitMQ counts publishes per channel) and by the channels that deliver from it."""

    __slots__ = ("publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty", "redeliver", "ack")

    def __init__(self) -> None:
        self.publish = 0
        self.deliver = 0
        self.deliver_no_ack = 0
        self.get = 0
        self.get_no_ack = 0
        self.get_empty = 0
        self.redeliver = 0
        self.ack = 0


class Queue:
    """A queue in a virtual host.

    Args:
        name: queue name.
        vhost: name of the owning virtual host (for error texts).
        durable, exclusive, auto_delete: the declare flags.
        owner: the connection owning an exclusive queue (opaque), else None.
        args: validated ``x-`` arguments.
        ttl: the TTL manager (timers and deadlines); no-op by default.
        sink: where dead letters go; dropped by default.
        limits: apply ``x-max-length``/``-bytes`` (``OTTERMQ_ENABLE_QLL``).
    """

    __slots__ = (
        "name",
        "vhost",
        "durable",
        "exclusive",
        "auto_delete",
        "owner",
        "args",
        "consumers",
        "selection",
        "_ready",
        "_seq",
        "had_consumer",
        "deleted",
        "ready_bytes",
        "unacked",
        "ttl",
        "sink",
        "on_expired",
        "_heap",
        "_max_len",
        "_max_bytes",
        "_overflow",
        "_delivery_limit",
        "quorum",
        "_blocked",
        "store",
        "store_id",
        "_last_now",
        "stats",
        "declared_args",
        "_limits",
        "policy",
        "operator_policy",
        "policy_definition",
        "ack_timeout",
        "dedup",
        "call_at",
        "call_soon",
        "_dispatch_later",
        "_retry",
        "_retry_timer",
        "_retry_at",
        "paging",
        "_page_bytes",
        "_shrinking",
    )

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
        sink: DeadLetterSink | None = None,
        limits: bool = True,
    ) -> None:
        self.name = name
        self.vhost = vhost
        self.durable = durable
        self.exclusive = exclusive
        self.auto_delete = auto_delete
        self.owner = owner
        self.args = args
        self.quorum = args.queue_type == "quorum"
        # consumer selection, single active consumer, exclusivity (``consumers.py``); ``consumers`` is
        # its list of every consumer (the same list object for the queue's life: read it, never change it)
        self.selection: QueueConsumers[Consumer] = make_consumers(args.single_active_consumer, self.quorum)
        self.consumers = self.selection.items
        self._blocked = False  # a quorum queue's reject-publish soft limit is in force
        self._ready: Ready = (
            PriorityReady(args.max_priority)
            if args.max_priority
            else QuorumReady()
            if self.quorum
            else Ready()
        )
        self._seq = 0
        self.had_consumer = False
        self.deleted = False
        self.ready_bytes = 0
        self.unacked = 0  # delivered, awaiting ack
        self.ttl: TTLManager = ttl if ttl is not None else NoopTTLManager()
        self.sink: DeadLetterSink = sink if sink is not None else DropSink()
        # called when x-expires fires on an unused queue (the vhost deletes it)
        self.on_expired: Callable[[Queue], None] | None = None
        self._heap: list[tuple[int, int, Entry]] | None = [] if args.exact_ttl else None
        self._max_len = args.max_length if limits else None
        self._max_bytes = args.max_length_bytes if limits else None
        self._overflow = _overflow_mode(args)
        self._delivery_limit = args.delivery_limit
        # durable queues get a MessageStore (broker/wiring.py); store_id is the queue's row
        self.store: MessageStore | None = None
        self.store_id = 0
        self._last_now = 0
        self.stats = QueueStats()
        # ``args`` is what is in force: ``declared_args`` with the vhost's policies applied (set_policy)
        self.declared_args = args
        self._limits = limits
        self.policy: str | None = None  # names of the user and operator policy that apply
        self.operator_policy: str | None = None
        self.policy_definition: dict[str, Any] = {}  # their merged definition
        # consumer timeout (ms) of its deliveries: x-consumer-timeout or a policy's (None: the node's)
        self.ack_timeout: int | None = _positive_ms(args.raw.get("x-consumer-timeout"))
        self.dedup: DedupCache | None = None  # set by the vhost when it deduplicates (``dedup.py``)
        # delayed retry (RabbitMQ 4.3's, an extension here): a timer source and the held entries
        self.call_at: Callable[[int, Callable[[], None]], Any] | None = None  # (epoch ms, callback)
        # the event loop's call_soon (None: every dispatch hands out all it can at once)
        self.call_soon: Callable[[Callable[[], None]], Any] | None = None
        self._dispatch_later = False  # a dispatch is scheduled for the next turn (DISPATCH_BUDGET)
        self._retry: list[tuple[int, int, Entry]] = []  # (ready at, seq, entry), a heap
        self._retry_timer: Any = None
        self._retry_at: int | None = None
        self.paging: Paging | None = None  # set_paging (the vhost's)
        self._page_bytes = UNBOUNDED  # ready body bytes kept in memory before new messages are paged
        self._shrinking = False  # a lazy queue's window is being paged out (``_shrink``)
        if args.expires is not None:
            self.touch()

    def __repr__(self) -> str:
        return f"queue '{self.name}' in vhost '{self.vhost}'"

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
        if (self._max_len is not None or self._max_bytes is not None) and self._overflow != "drop-head":
            if self.quorum:
                if self._blocked and not self._below_soft_limit():
                    return None
                self._blocked = False
            elif self._would_overflow(size):
                if self._overflow == "reject-publish-dlx":
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
        ready = self._ready
        if self.consumers and not ready:
            consumer = self.selection.next()
            if consumer is not None:  # straight to a consumer: a TTL of 0 is fine here
                # A no-ack consumer takes it for good: nothing is left to store (its publisher's
                # confirm goes out at once, as RabbitMQ's does for a message consumed before it is
                # persisted). Any other consumer may return it: it is stored first.
                if (message.persistent or self.quorum) and self.store is not None and not consumer.no_ack:
                    self.store.message_added(self, entry)
                entry.state = OUT
                consumer.deliver(self, entry)
                return entry
        if (message.persistent or self.quorum) and self.store is not None:
            self.store.message_added(self, entry)
        if self.ready_bytes < self._page_bytes or not ready.page(entry):  # (a lazy queue's is 0)
            ready.append(entry)
        self.ready_bytes += size
        if self.consumers:
            self.dispatch()
        if self._max_len is not None or self._max_bytes is not None:
            self._drop_head_overflow()
            if self.quorum and self._over_limit():
                self._blocked = True
        deadline = entry.deadline
        if deadline is not None and (entry.state == READY or entry.state == PAGED):
            if self._heap is not None and entry.state == READY:
                heapq.heappush(self._heap, (deadline, entry.seq, entry))
            if deadline <= now:  # TTL 0 and nobody took it: expires now if it is due
                self.expire(now)
            elif self._heap is not None or _seq_of(ready.peek()) == entry.seq:
                self.ttl.schedule(self, deadline)
        return entry

    def _would_overflow(self, size: int) -> bool:
        max_len, max_bytes = self._max_len, self._max_bytes
        return (max_len is not None and len(self._ready) + 1 > max_len) or (
            max_bytes is not None and self.ready_bytes + size > max_bytes
        )

    def _over_limit(self) -> bool:
        max_len, max_bytes = self._max_len, self._max_bytes
        return (max_len is not None and len(self._ready) > max_len) or (
            max_bytes is not None and self.ready_bytes > max_bytes
        )

    def _below_soft_limit(self) -> bool:
        """A quorum queue's ``reject-publish`` lets publishes in again at 80 % of its limits
        (``rabbit_fifo:is_below_soft_limit``)."""
        max_len, max_bytes = self._max_len, self._max_bytes
        return (max_len is None or len(self._ready) <= int(max_len * 0.8)) and (
            max_bytes is None or self.ready_bytes <= int(max_bytes * 0.8)
        )

    def _drop_head_overflow(self) -> None:
        """``drop-head``: dead-letter heads (``maxlen``) while over the limit, then expired heads."""
        if self._overflow != "drop-head":
            return
        max_len, max_bytes = self._max_len, self._max_bytes
        dropped: list[Entry] = []
        ready = self._ready
        while ready and (
            (max_len is not None and len(ready) > max_len)
            or (max_bytes is not None and self.ready_bytes > max_bytes)
        ):
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
        """Take the head entry for ``basic.get``.

        Expired heads are dead-lettered before the take (a timer a few ms late) and after it (the
        new head), so the ``message_count`` that get-ok reports never includes them.
        """
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
        if (head is not None and head.deadline is not None) or self._heap is not None:
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
        heap = self._heap
        for entry in entries:
            ready.append(entry)
            self.ready_bytes += len(entry.message.body)
            if heap is not None and entry.deadline is not None:
                heap.append((entry.deadline, entry.seq, entry))
            if entry.seq > self._seq:
                self._seq = entry.seq

    def recovered(self) -> None:
        """All stored entries are in: order the deadline heap, dead-letter what is over the delivery
        limit (a quorum queue counts a delivery cut short by the restart as a return), expire what
        lapsed, arm timers."""
        if self._heap is not None:
            heapq.heapify(self._heap)
        limit = self._delivery_limit
        if limit is not None:
            over = [e for e in self._ready if e.delivery_count > limit]
            for entry in over:
                self._ready.discard(entry)  # a tombstone, as an exact-TTL expiry
                self.ready_bytes -= len(entry.message.body)
            if over:
                self._dead(over, DELIVERY_LIMIT)
        self.expire(self.ttl.now())

    def outgoing(self, entry: Entry, get: bool = False) -> Message:
        """The message to send for ``entry``: with ``x-delivery-count`` once it was returned, and on
        every ``basic.get`` (``get``) from a quorum queue."""
        if entry.delivery_count or (get and self.quorum):
            return with_delivery_count(entry.message, entry.delivery_count)
        return entry.message

    def requeue(self, entries: list[Entry], failed: bool | None = True, down: bool = False) -> None:
        """Return delivered entries, marked redelivered: to their original positions (a quorum queue:
        see the module rules; ``down``: the consumer's channel went away).

        Then, as RabbitMQ's ``requeue_and_run``: ``drop-head`` overflow, then expired heads are
        dead-lettered. An entry past its deadline is therefore dead-lettered (``expired``) if it
        lands at the head, and otherwise waits (counted) until it gets there. With a delivery
        limit an entry returned more often than the limit is dead-lettered as ``delivery_limit``
        (an expired one is not counted as a return).

        Delayed retry (RabbitMQ 4.3's ``x-delayed-retry-*``): ``failed`` says whether the return is a
        failure (``basic.reject``, a channel or connection closed with the delivery) or not
        (``basic.nack``, ``basic.recover``). A return the ``x-delayed-retry-type`` covers (``all``,
        ``failed``, ``returned``) is held for ``min(x-delayed-retry-min * delivery count,
        x-delayed-retry-max)`` ms (the count at least 1) before it is back in place. ``failed=None``
        (the management API's requeueing get) is never held.
        """
        if self.deleted or not entries:
            return
        over_limit: list[Entry] = []
        back: list[Entry] = []
        held: list[Entry] = []
        now = self.ttl.now()
        limit = self._delivery_limit
        retry = self._retry_applies(failed)
        for entry in entries:
            if (limit is not None or retry or self.quorum) and (
                entry.deadline is None or now < entry.deadline
            ):
                entry.delivery_count += 1
                if limit is not None and entry.delivery_count > limit:
                    over_limit.append(entry)
                    continue
            entry.redelivered = True
            if retry:
                held.append(entry)
            else:
                back.append(entry)
        if back:
            self._put_back(back, down or limit is not None)
        if held:
            self._hold(held, now)
        if over_limit:
            self._dead(over_limit, DELIVERY_LIMIT)
        if back and self.consumers:
            self.dispatch()

    def _put_back(self, back: list[Entry], first: bool = True) -> None:
        """Entries are ready again: in place (a quorum queue: first, or at the back unless ``first``)."""
        if self._blocked and self._below_soft_limit():
            self._blocked = False
        for entry in back:
            entry.state = READY
            self.ready_bytes += len(entry.message.body)
        if self.quorum and not first:
            for entry in back:
                self._ready.append(entry)
        else:
            self._ready.requeue(back)
        if self._heap is not None:
            for entry in back:
                if entry.deadline is not None:
                    heapq.heappush(self._heap, (entry.deadline, entry.seq, entry))
        if self._max_len is not None or self._max_bytes is not None:
            self._drop_head_overflow()  # a requeue into a full queue drops the (new) head
            if self.quorum and self._over_limit():
                self._blocked = True
        self._drop_expired()

    # -- delayed retry ----------------------------------------------------------------------
    def _retry_applies(self, failed: bool | None) -> bool:
        kind = self.args.delayed_retry_type
        if kind == "disabled" or failed is None or self.call_at is None:
            return False
        if self.args.delayed_retry_min is None:
            return False
        return kind == "all" or (kind == "failed") == failed

    def retry_delay(self, delivery_count: int) -> int:
        """Milliseconds a returned entry is held: RabbitMQ 4.3's linear back-off, capped."""
        low = self.args.delayed_retry_min or 0
        delay = low * max(1, delivery_count)
        high = self.args.delayed_retry_max
        return min(delay, high) if high is not None else delay

    @property
    def delayed_count(self) -> int:
        """Entries held by a delayed retry (management ``messages_delayed``)."""
        return len(self._retry)

    def _hold(self, entries: list[Entry], now: int) -> None:
        for entry in entries:
            entry.state = HELD
            heapq.heappush(self._retry, (now + self.retry_delay(entry.delivery_count), entry.seq, entry))
        self._arm_retry()

    def _arm_retry(self) -> None:
        if not self._retry or self.call_at is None:
            return
        due = self._retry[0][0]
        if self._retry_at is not None and self._retry_at <= due:
            return
        if self._retry_timer is not None:
            self._retry_timer.cancel()
        self._retry_at = due
        self._retry_timer = self.call_at(due, self.release_retries)

    def release_retries(self) -> None:
        """Timer callback: entries whose retry delay is over go back in place (then dispatch)."""
        self._retry_timer = None
        self._retry_at = None
        if self.deleted:
            return
        now = self.ttl.now()
        back: list[Entry] = []
        while self._retry and self._retry[0][0] <= now:
            back.append(heapq.heappop(self._retry)[2])
        if back:
            self._put_back(back)
            if self.consumers:
                self.dispatch()
        self._arm_retry()

    def _dead(self, entries: list[Entry], reason: str) -> None:
        """Entries leave the queue as dead letters: the sink stores each one's new copy, then
        deletes its source row, in the same store batch (``DeadLetterSink``: a crash leaves it in one
        place or, at worst, in both)."""
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
        if self._heap is not None:
            self._heap.clear()
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
        """Page beyond the vhost's window (``x-queue-mode: lazy``: a window of zero). An exact-TTL
        queue keeps new messages in memory (its deadline heap holds every ready entry)."""
        self.paging = paging
        self._apply_window()

    def _apply_window(self) -> None:
        paging = self.paging
        if paging is None or self._heap is not None:
            self._ready.set_paging(None, UNBOUNDED)
            self._page_bytes = UNBOUNDED
            return
        lazy = self.args.queue_mode == "lazy"
        self._ready.set_paging(paging.factory, 0 if lazy else paging.window)
        self._page_bytes = 0 if lazy else paging.window_bytes
        if lazy and not self._shrinking:
            self._shrink()

    def _shrink(self) -> None:
        """A queue that became lazy pages its window out, a slice per loop turn."""
        self._shrinking = False
        if self.deleted or self.args.queue_mode != "lazy" or self.paging is None:
            return
        if self._ready.shrink(SHRINK_SLICE, 0) and self.call_soon is not None:
            self._shrinking = True
            self.call_soon(self._shrink)

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

    # -- TTL ------------------------------------------------------------------------------
    def expire(self, now: int) -> None:
        """Timer callback: dead-letter what expired, then re-arm for the next deadline."""
        if self.deleted:
            return
        expired: list[Entry] = []
        heap = self._heap
        if heap is not None:
            ready = self._ready
            while heap and heap[0][0] <= now:
                entry = heapq.heappop(heap)[2]
                if entry.state == READY:
                    ready.discard(entry)
                    self.ready_bytes -= len(entry.message.body)
                    expired.append(entry)
        self._ready.pop_expired(now, expired)
        for entry in expired:
            if entry.state == READY:  # popped heads (heap expiries are GONE tombstones)
                self.ready_bytes -= len(entry.message.body)
                entry.state = OUT
        self._after_change()
        if expired:
            self._dead(expired, EXPIRED)

    def _next_deadline(self) -> int | None:
        """The earliest deadline that can fire next: the head's (None without TTL) or the heap's."""
        heap = self._heap
        if heap is not None:
            while heap and heap[0][2].state != READY:
                heapq.heappop(heap)
            if heap:
                return heap[0][0]
        return self._ready.head_deadline()

    def _after_change(self) -> None:
        """Arm the TTL timer for the earliest deadline that can fire next."""
        deadline = self._next_deadline()
        if deadline is not None:
            self.ttl.schedule(self, deadline)

    def _drop_expired(self) -> None:
        """RabbitMQ's ``drop_expired_msgs``, run after every operation that changes the head: heads
        past their deadline are dead-lettered now, and the timer is armed for the new head.
        Costs one look at the head's deadline when the queue has no TTL."""
        deadline = self._next_deadline()
        if deadline is None:
            return
        now = self.ttl.now()
        if now >= deadline:
            self.expire(now)
        else:
            self.ttl.schedule(self, deadline)

    # -- queue expiry (x-expires) ------------------------------------------------------------
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
        self._max_len = args.max_length if self._limits else None
        self._max_bytes = args.max_length_bytes if self._limits else None
        self._overflow = _overflow_mode(args)
        self._delivery_limit = args.delivery_limit
        if args.expires != old.expires:
            self.touch()
        if args.exact_ttl != old.exact_ttl:
            self._set_exact_ttl(args.exact_ttl)
        if args.queue_mode != old.queue_mode or args.exact_ttl != old.exact_ttl:
            self._apply_window()
        if self._max_len is not None or self._max_bytes is not None:
            self._drop_head_overflow()

    def _set_exact_ttl(self, on: bool) -> None:
        """Switch exact TTL (a policy's ``ottermq-exact-ttl``): on, every ready message's deadline goes
        into the heap and what is already due expires now; off, expiry is back to head-only."""
        if not on:
            self._heap = None
            return
        self._heap = [
            (e.deadline, e.seq, e) for e in self._ready if e.deadline is not None and e.state == READY
        ]
        heapq.heapify(self._heap)
        if self._heap:
            self.expire(self.ttl.now())

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
    def add_consumer(self, consumer: Consumer, arguments: object = None) -> None:
        """Attach a consumer (``arguments``: its ``basic.consume`` arguments, for ``x-priority``)."""
        self.selection.add(consumer, consumer_priority(arguments))
        self.had_consumer = True
        self.touch()
        self.dispatch()

    def remove_consumer(self, consumer: Consumer, dispatch: bool = True) -> bool:
        """Detach a consumer; with single active consumer the next one is active at once. On a quorum
        queue it takes what is ready at once, unless ``dispatch`` is false (a closing channel: its
        deliveries are requeued first and go to it ahead of the ready messages); on a classic queue
        it takes them at the queue's next delivery run (``consumers.py``).

        Returns:
            True when an auto-delete queue should now be deleted.
        """
        selection = self.selection
        active = selection.active
        if not selection.remove(consumer):
            return False
        if not self.consumers:
            self.touch()
        elif dispatch and self.quorum and selection.active is not active:
            self.dispatch()
        return self.auto_delete and not self.consumers and self.had_consumer

    def has_exclusive_consumer(self) -> bool:
        """An exclusive consumer holds the queue (classic queues; ``QueueConsumers.has_exclusive``)."""
        return self.selection.has_exclusive()

    def dispatch(self) -> None:
        """Deliver ready entries round-robin to consumers able to take them."""
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

    def mark_deleted(self) -> list[Consumer]:
        """Flag the queue deleted, drop its messages; returns the consumers to notify."""
        self.deleted = True
        self._ready.clear()
        self._retry.clear()
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        self.ready_bytes = 0
        if self._heap is not None:
            self._heap.clear()
        self.ttl.cancel(self)
        return self.selection.clear()
