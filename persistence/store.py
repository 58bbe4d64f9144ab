"""The storage contract between the broker and a durable store.

Rules:
- Writes are *queued* synchronously (no await on the hot path) into the current batch; the store
  commits batches in order, one transaction each (group commit). ``after_commit`` callbacks run
  once everything queued before them is durable (or failed: ``ok=False``), in registration order.
- Ids (queue ids, message ids) are allocated by the store synchronously, so the broker can refer
  to a row before it is written. Deleting a message whose insert is still in the pending batch
  cancels the insert: a message consumed and acked before its batch commits is never written.
- Ops within one batch are applied in the order they were queued; a dead-letter move (delete in
  the source queue + insert in the target) queued in the same loop turn lands in one transaction.
- Recovery reads definitions at once and messages per queue in seq order, in chunks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol


class StoreError(Exception):
    """The store cannot be used (newer schema, corrupt or unreadable file, disk full...)."""


class StoreFenced(StoreError):
    """The store's broker lost the leadership to another broker (``PostgresStore`` with a lease):
    the batch was not written, and no later one will be."""


@dataclass(slots=True)
class VHostRecord:
    name: str
    description: str = ""
    tags: list[str] = field(default_factory=list)


@dataclass(slots=True)
class UserRecord:
    name: str
    password_hash: str  # base64, RabbitMQ's format (salt + hash)
    hashing_algorithm: str = "rabbit_password_hashing_sha256"
    tags: list[str] = field(default_factory=list)


@dataclass(slots=True)
class PermissionRecord:
    user: str
    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


@dataclass(slots=True)
class ExchangeRecord:
    vhost: str
    name: str
    type: str
    auto_delete: bool = False
    internal: bool = False
    arguments: bytes = b"\x00\x00\x00\x00"  # stored arguments (persistence/arguments.py): AMQP field table


@dataclass(slots=True)
class QueueRecord:
    vhost: str
    name: str
    auto_delete: bool = False
    arguments: bytes = b"\x00\x00\x00\x00"  # stored arguments, types kept (persistence/arguments.py)
    expires_at: int | None = None  # x-expires deadline (epoch ms) when the store last heard of it
    id: int = 0  # assigned by the store


@dataclass(slots=True)
class BindingRecord:
    vhost: str
    source: str
    destination_kind: str  # "queue" | "exchange"
    destination: str
    routing_key: str
    arguments: bytes = b"\x00\x00\x00\x00"


@dataclass(slots=True)
class MessageRecord:
    queue_id: int
    seq: int  # order within the queue
    exchange: str
    routing_key: str
    props: bytes  # raw content-header property octets, as published
    body: bytes
    enqueued_at: int  # epoch ms
    deadline: int | None = None  # epoch ms; None = never expires
    extra_keys: tuple[str, ...] = ()  # CC/BCC routing keys
    delivered: bool = False  # had been delivered: recovered with redelivered=True
    delivery_count: int = 0
    id: int = 0  # assigned by the store


@dataclass(slots=True)
class DelayedRecord:
    """A message waiting in a delayed exchange (issue 19): routed from ``exchange`` at ``due``."""

    vhost: str
    exchange: str
    due: int  # epoch ms
    delay: int  # ms, as published (the x-delay header is set to -delay when routed)
    routing_key: str
    props: bytes
    body: bytes
    extra_keys: tuple[str, ...] = ()
    id: int = 0  # assigned by the store; publish order among equal due times


@dataclass(slots=True)
class DedupRecord:
    """A key remembered by a deduplicating exchange or queue whose cache persists (issue 19)."""

    vhost: str
    kind: str  # "exchange" or "queue"
    owner: str
    key: bytes  # the header value with its AMQP type tag
    expires_at: int | None  # epoch ms; None = until evicted


@dataclass(slots=True)
class LimitRecord:
    """A vhost limit (``max-connections``, ``max-queues``) or a user limit (``max-connections``,
    ``max-channels``), as RabbitMQ's ``set_vhost_limits``/``set_user_limits`` set them."""

    kind: str  # "vhost" or "user"
    owner: str  # the vhost's or the user's name
    name: str
    value: int


@dataclass(slots=True)
class PolicyRecord:
    vhost: str
    name: str
    pattern: str
    apply_to: str
    priority: int
    definition: str  # JSON object
    operator: bool = False  # an operator policy


@dataclass(slots=True)
class ParameterRecord:
    """A runtime parameter of a component (``shovel``), as ``rabbitmqctl set_parameter`` sets it."""

    vhost: str
    component: str
    name: str
    value: str  # the JSON value


@dataclass(slots=True)
class MoveJobRecord:
    """A dead-letter move job (``broker/node/move_jobs.py``): written once when it starts, then its
    progress row is updated as it goes (never the whole list of jobs)."""

    id: int
    vhost: str
    queue: str
    spec: str  # JSON object: the selection (without ids), target, keep_death_headers, rate
    state: str  # running, paused, done, failed, cancelled
    selected: int = 0
    moved: int = 0
    unroutable: int = 0
    skipped: int = 0
    refused: int = 0
    error: str | None = None
    started: int = 0  # epoch ms
    finished: int | None = None  # epoch ms
    ids: bytes | None = None  # {"ids": [...]} selections: the ids, 8 bytes each (big-endian), sorted


@dataclass(slots=True)
class Definitions:
    vhosts: list[VHostRecord] = field(default_factory=list)
    users: list[UserRecord] = field(default_factory=list)
    permissions: list[PermissionRecord] = field(default_factory=list)
    exchanges: list[ExchangeRecord] = field(default_factory=list)
    queues: list[QueueRecord] = field(default_factory=list)
    bindings: list[BindingRecord] = field(default_factory=list)
    policies: list[PolicyRecord] = field(default_factory=list)
    limits: list[LimitRecord] = field(default_factory=list)
    parameters: list[ParameterRecord] = field(default_factory=list)


CommitCallback = Callable[[bool], None]


class Store(Protocol):
    """A durable (or in-memory) store. See the module rules."""

    async def open(self) -> None:
        """Create or migrate the schema. Raises StoreError with a clear message."""
        ...

    async def close(self) -> None:
        """Commit what is queued, then release the store."""
        ...

    async def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        ...

    def after_commit(self, callback: CommitCallback) -> None:
        """Call ``callback(ok)`` once everything queued so far is committed (ok) or failed."""
        ...

    @property
    def pending(self) -> int:
        """Ops queued and not yet committed."""
        ...

    # definitions
    def put_vhost(self, record: VHostRecord) -> None: ...
    def delete_vhost(self, name: str) -> None: ...
    def put_user(self, record: UserRecord) -> None: ...
    def delete_user(self, name: str) -> None: ...
    def put_permission(self, record: PermissionRecord) -> None: ...
    def delete_permission(self, user: str, vhost: str) -> None: ...
    def put_exchange(self, record: ExchangeRecord) -> None: ...
    def delete_exchange(self, vhost: str, name: str) -> None: ...

    def put_queue(self, record: QueueRecord) -> int:
        """Insert or replace a durable queue; returns (and sets) ``record.id``."""
        ...

    def delete_queue(self, queue_id: int) -> None:
        """Delete the queue row and all its messages."""
        ...

    def touch_queue(self, queue_id: int, expires_at: int | None) -> None:
        """Record the queue's current x-expires deadline (coalesced per batch)."""
        ...

    def put_binding(self, record: BindingRecord) -> None: ...
    def delete_binding(self, record: BindingRecord) -> None: ...
    def put_policy(self, record: PolicyRecord) -> None: ...
    def delete_policy(self, vhost: str, name: str, operator: bool) -> None: ...
    def put_limit(self, record: LimitRecord) -> None: ...
    def delete_limit(self, kind: str, owner: str, name: str) -> None: ...
    def put_parameter(self, record: ParameterRecord) -> None: ...
    def delete_parameter(self, vhost: str, component: str, name: str) -> None: ...

    # messages
    def insert_message(self, record: MessageRecord) -> int:
        """Queue an insert; returns (and sets) ``record.id``."""
        ...

    def delete_message(self, message_id: int) -> None:
        """Queue a delete (cancels a not-yet-committed insert instead)."""
        ...

    def mark_delivered(self, message_id: int, delivery_count: int) -> None:
        """Remember the message was delivered (recovered as redelivered); coalesced per batch."""
        ...

    # delayed messages and deduplication caches (issue 19)
    def insert_delayed(self, record: DelayedRecord) -> int:
        """Queue the insert of a delayed message; returns (and sets) ``record.id``."""
        ...

    def delete_delayed(self, delayed_id: int) -> None:
        """Forget a delayed message (routed, withdrawn)."""
        ...

    def delete_delayed_exchange(self, vhost: str, exchange: str) -> None:
        """Forget every delayed message of a deleted exchange."""
        ...

    def iter_delayed(self, chunk: int = 10000) -> AsyncIterator[list[DelayedRecord]]:
        """Every committed delayed message in id order, ``chunk`` at a time."""
        ...

    def put_dedup(self, record: DedupRecord) -> None:
        """Remember a key (replacing the same key of the same owner)."""
        ...

    def delete_dedup(self, vhost: str, kind: str, owner: str, key: bytes) -> None: ...

    def delete_dedup_owner(self, vhost: str, kind: str, owner: str) -> None:
        """Forget every key of an exchange or queue."""
        ...

    async def load_dedup(self) -> list[DedupRecord]:
        """Every committed key, oldest first per owner."""
        ...

    def purge_queue(self, queue_id: int) -> None:
        """Delete every message of the queue."""
        ...

    # dead-letter move jobs (issue 38)
    def put_move_job(self, record: MoveJobRecord) -> None:
        """Write a job with its selected ids (insert or replace)."""
        ...

    def update_move_job(self, record: MoveJobRecord) -> None:
        """Write a job's state and counters (its settings and ids are not written again)."""
        ...

    def delete_move_job(self, job_id: int) -> None:
        """Forget a job and its ids."""
        ...

    async def load_move_jobs(self) -> list[MoveJobRecord]:
        """Every committed job, in id order."""
        ...

    # recovery
    async def load_definitions(self) -> Definitions: ...

    def iter_messages(self, queue_id: int, chunk: int = 10000) -> AsyncIterator[list[MessageRecord]]:
        """The queue's messages in seq order, ``chunk`` rows at a time."""
        ...

    async def stats(self) -> dict[str, int]:
        """``messages``, ``bytes_on_disk`` (db + wal), ... for benchmarks and logs."""
        ...

    async def release_memory(self) -> None:
        """Give back memory the store holds as cache (after a backlog drained); the data stays."""
        ...
