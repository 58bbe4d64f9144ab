"""The one front door: every way in (AMQP channels, the management API, definitions, dead-letter
moves) performs its operations here, so each rule is written once.

Rules:

1. An operation takes the acting user (``None``: the broker itself, e.g. recovery or a definitions
   file read at start-up, which checks no permission) and the vhost, and raises what a channel
   would answer (``ottermq.amqp.errors``: 403 access refused, 404 not found, 405 locked, 406
   precondition failed). Adapters translate: a channel closes with it, the management API answers
   RabbitMQ's HTTP status and JSON body (``management.common.amqp_errors``). Adapters never decide.
2. Permissions are checked before existence, in ``rabbit_channel``'s order: configure for
   declare/delete; for a declare that names a dead-letter exchange (queues) or an alternate exchange
   (exchanges) and creates the object, read on the object and write on that exchange; write on the
   destination then read on the source for (un)bind; read for purge and get; write on the exchange
   for publish. The default exchange is called ``amq.default`` in permission checks.
3. Values are bounded before they reach the store or arithmetic (``vhost.bounds``): arguments and
   headers that come as JSON are turned into AMQP field values here (a 64-bit integer at most,
   finite numbers, bounded nesting); names longer than 255 bytes are refused as RabbitMQ refuses a
   queue's (``queue should be less than 255 bytes``), and as an ottermq bound for exchanges.
4. Publishing is one pipeline for every way in (a channel's publish and ``tx.commit``, the
   management API's publish, the aliveness test, dead-letter moves): write permission, the exchange
   exists (404) and is not internal (403) (:meth:`Operations.publish_exchange`); the message's
   ``user_id`` is the acting user's, ``expiration`` and CC/BCC are valid (406)
   (``vhost.message.incoming_message``); the vhost's one publish operation routes and stores it
   (``VHost.publish``, which dead-lettering and delayed messages coming due call too); then
   :meth:`Operations.settle`: once the store commit holding it is settled, a message whose commit
   failed is withdrawn from its queues, then the caller's confirm or ``tx.commit-ok`` goes out. A
   channel's hot path inlines nothing of this but the permission cache.
5. Every access to a queue's messages (``QueueAccess``: consume, get, purge, and the dead-letter
   tools' browse and move), by AMQP, HTTP or the command line (which goes through HTTP), is one
   check, :meth:`Operations.access_queue`: read permission on the queue first (before existence, as
   ``rabbit_channel``), then the queue exists (404), then it is not another connection's exclusive
   queue (405 RESOURCE_LOCKED; the management API and the broker's own jobs own no connection, so
   every exclusive queue is locked to them, as RabbitMQ's HTTP ``/get`` finds it); a ``get`` from a
   quorum queue with single active consumer is refused too (405, RabbitMQ 3.10's ``rabbit_fifo``).
6. Policies and limits are validated (RabbitMQ's texts plus the bounds), applied to the vhost, and
   written to the store in one step; a policy whose write fails is taken back in memory, and the
   undo is queued behind the write (which the store retries after an I/O failure), so memory and
   store agree either way, as a withdrawn message does. A way in that can wait (the management
   API, a definitions import, a worker's metadata, start-up) first calls
   :meth:`Operations.prepare_policy`: a PCRE-only pattern is matched against the vhost's names in a
   worker thread within a total time bound, so that applying it finds every answer remembered and
   holds the event loop for none of it.
7. Runtime parameters (``parameters.py``) are validated by their component (with the acting user's
   vhost access), then kept, stored and acted on in one step; a failed write is taken back.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ottermq.amqp.errors import AccessRefused, PreconditionFailed, ResourceLocked
from ottermq.persistence.store import Definitions, LimitRecord, PolicyRecord
from ottermq.vhost.arguments import check_server_named
from ottermq.vhost.bounds import OutOfBounds, field_table
from ottermq.vhost.message import Message, incoming_message
from ottermq.vhost.patterns import PatternError, compile_pattern
from ottermq.vhost.policy import Policy, make_policy

from .auth import IMPERSONATOR, AuthDB, Permission, ResourceKind
from .limits import Limits, validate
from .parameters import Parameters

if TYPE_CHECKING:
    from ottermq.persistence.store import CommitCallback, Store, UserRecord
    from ottermq.vhost.exchange import Exchange
    from ottermq.vhost.message import Entry
    from ottermq.vhost.queue import Queue
    from ottermq.vhost.vhost import PublishResult, VHost

log = logging.getLogger(__name__)

MAX_NAME_BYTES = 255  # an AMQP shortstr
Actor: TypeAlias = "UserRecord | None"  # who performs an operation; None: the broker itself (rule 1)
# the ways to reach a queue's messages (rule 5) and the permission each needs: all read, as a
# channel's basic.consume, basic.get and queue.purge; browsing and moving dead letters read them too
QueueAccess: TypeAlias = Literal["consume", "get", "purge", "browse", "move"]
QUEUE_ACCESS: dict[str, Permission] = {
    "consume": "read",
    "get": "read",
    "purge": "read",
    "browse": "read",
    "move": "read",
}


@dataclass(frozen=True, slots=True)
class Declared:
    """What a declare did: the object, and whether this call created it."""

    created: bool
    queue: Queue | None = None
    exchange: Exchange | None = None


def arguments_of(value: Any, field: str = "arguments") -> dict[str, Any]:
    """JSON ``arguments`` (an object; absent or null: none) as an AMQP field table (rule 3).

    Raises:
        PreconditionFailed: not an object, or a value out of bounds (the text names it).
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PreconditionFailed(f"{field} must be an object")
    try:
        return field_table(value, field)
    except OutOfBounds as exc:
        raise PreconditionFailed(str(exc)) from None


Stored: TypeAlias = "list[tuple[Queue, Entry]]"
"""What a publish wrote to the store (``PublishResult.stored``): each entry and its queue."""


def withdraw(stored: Iterable[tuple[Queue, Entry]]) -> None:
    """Entries whose store write failed leave their queues again (``Queue.withdraw``)."""
    for queue, entry in stored:
        queue.withdraw(entry)


def publish_target(vhost: VHost, name: str) -> Exchange | None:
    """The exchange a message may be published to (None: the default exchange), permission aside.

    Raises:
        NotFound: no such exchange.
        AccessRefused: an internal exchange.
    """
    if not name:
        return None
    exchange = vhost.get_exchange(name)
    if exchange.internal:
        raise AccessRefused(f"cannot publish to internal exchange '{name}' in vhost '{vhost.name}'")
    return exchange


def check_name(kind: str, name: str) -> None:
    """A queue or exchange name an AMQP client can use (rule 3).

    Raises:
        PreconditionFailed: longer than 255 bytes (RabbitMQ's text for queues).
    """
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        # RabbitMQ's text, its trailing newline included (no AMQP client can send such a name)
        raise PreconditionFailed(f"{kind} should be less than 255 bytes, actually was {size}\n")


class Operations:
    """The operations every adapter performs (see the module rules).

    Args:
        auth: users and permissions.
        store: where definitions, policies and limits are written.
        limits: the limits in force.
        apply_limits: re-applies the limits to the vhosts after a change.
        parameters: the runtime parameters and their components.
    """

    def __init__(
        self,
        auth: AuthDB,
        store: Store,
        limits: Limits,
        apply_limits: Callable[[], None],
        parameters: Parameters | None = None,
    ) -> None:
        self.auth = auth
        self.store = store
        self.limits = limits
        self.apply_limits = apply_limits
        self.parameters = parameters if parameters is not None else Parameters(store)

    # -- permissions ------------------------------------------------------------------------------
    def allow(self, user: Actor, vhost: VHost, permission: Permission, kind: ResourceKind, name: str) -> None:
        """Raises:
        AccessRefused: ``user`` lacks ``permission`` on the resource (``None`` may do anything)."""
        if user is not None:
            self.auth.check(user, vhost.name, permission, kind, name or "amq.default")

    def _declare_allowed(
        self, user: Actor, vhost: VHost, kind: ResourceKind, name: str, created: bool, target: Any
    ) -> None:
        """A declare's checks (rule 2): the name, configure on the object and, when the declare
        creates it naming an exchange messages will go to (a queue's dead-letter exchange, an
        exchange's alternate exchange), read on the object and write on that exchange."""
        check_name(kind, name)
        self.allow(user, vhost, "configure", kind, name)
        if isinstance(target, str) and created:
            self.allow(user, vhost, "read", kind, name)
            self.allow(user, vhost, "write", "exchange", target)

    # -- publishing ---------------------------------------------------------------------------------
    def publish_exchange(
        self, user: Actor, vhost: VHost, name: str, permitted: bool = False
    ) -> Exchange | None:
        """The exchange a publish goes to (None: the default exchange), rule 4.

        Args:
            permitted: the caller already holds write permission on it (a channel's cache).

        Raises:
            AccessRefused: no write permission, or an internal exchange.
            NotFound: no such exchange.
        """
        if not permitted:
            self.allow(user, vhost, "write", "exchange", name)
        return publish_target(vhost, name)

    def message(
        self, user: Actor, exchange: str, routing_key: str, raw_props: bytes, body: bytes
    ) -> tuple[Message, list[str] | None]:
        """A message to publish and its CC/BCC routing keys (rule 4).

        Raises:
            PreconditionFailed: ``user_id``, ``expiration`` or CC/BCC refused.
        """
        username = user.name if user is not None and IMPERSONATOR not in user.tags else None
        return incoming_message(exchange, routing_key, raw_props, body, username)

    def publish(
        self,
        user: Actor,
        vhost: VHost,
        exchange_name: str,
        routing_key: str,
        raw_props: bytes,
        body: bytes,
        mandatory: bool = False,
        permitted: bool = False,
        settled: CommitCallback | None = None,
    ) -> PublishResult:
        """Publish as a client would, without a channel (management API, aliveness test, moves), rule 4.

        Args:
            settled: called with whether what this publish wrote (queue entries, a delayed message)
                was committed, after a failure was withdrawn: a publisher confirm.

        Raises:
            AccessRefused, NotFound, PreconditionFailed: see :meth:`publish_exchange` and :meth:`message`.
        """
        exchange = self.publish_exchange(user, vhost, exchange_name, permitted)
        message, _ = self.message(user, exchange_name, routing_key, raw_props, body)  # CC/BCC keys ride along
        result = vhost.publish(exchange, message, None, mandatory)
        self.settle(result.stored, settled)
        return result

    def settle(self, stored: Stored | None, then: Callable[[bool], None] | None = None) -> None:
        """The end of every publish (rule 4): once the store commit holding ``stored`` is settled, the
        entries of a failed commit leave their queues again (memory agrees with the store), then
        ``then(ok)`` runs (a confirm, a ``tx.commit-ok``). With nothing stored, ``then`` runs once the
        writes queued before it are settled (at the latest on the next loop turn)."""
        if stored is None and then is None:
            return

        def settled(ok: bool) -> None:
            if not ok and stored:
                withdraw(stored)
            if then is not None:
                then(ok)

        self.store.after_commit(settled)

    # -- exchanges ------------------------------------------------------------------------------------
    def declare_exchange(
        self,
        user: Actor,
        vhost: VHost,
        name: str,
        type_: str,
        *,
        passive: bool = False,
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> Declared:
        """``exchange.declare`` (rule 2).

        Raises:
            AccessRefused, NotFound, PreconditionFailed, CommandInvalid: as a channel answers.
        """
        arguments = arguments or {}
        created = name not in vhost.exchanges
        if not passive:
            self._declare_allowed(user, vhost, "exchange", name, created, arguments.get("alternate-exchange"))
        exchange = vhost.declare_exchange(name, type_, passive, durable, auto_delete, internal, arguments)
        return Declared(created and not passive, exchange=exchange)

    def delete_exchange(self, user: Actor, vhost: VHost, name: str, if_unused: bool = False) -> None:
        """``exchange.delete``: a missing exchange is fine (RabbitMQ 3.x)."""
        self.allow(user, vhost, "configure", "exchange", name)
        vhost.delete_exchange(name, if_unused)

    # -- queues -----------------------------------------------------------------------------------------
    def declare_queue(
        self,
        user: Actor,
        vhost: VHost,
        name: str,
        *,
        passive: bool = False,
        durable: bool = True,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        owner: object | None = None,
        generated: bool = False,
        server_named: bool = False,
    ) -> Declared:
        """``queue.declare`` of a named (or already generated) queue (rule 2); ``server_named``: the
        client asked for a name (only a classic queue may have one: checked first).

        Raises:
            AccessRefused, NotFound, ResourceLocked, PreconditionFailed: as a channel answers.
        """
        arguments = arguments or {}
        if server_named:
            check_server_named(arguments)
        created = name not in vhost.queues
        if not passive:
            self._declare_allowed(
                user, vhost, "queue", name, created, arguments.get("x-dead-letter-exchange")
            )
        queue = vhost.declare_queue(
            name, passive, durable, exclusive, auto_delete, arguments, owner, generated
        )
        queue.touch()
        return Declared(created and not passive, queue=queue)

    def access_queue(
        self, user: Actor, vhost: VHost, name: str, access: QueueAccess, owner: object | None = None
    ) -> Queue:
        """The queue whose messages ``access`` reaches (rule 5): the permission it needs first, then
        existence, then exclusivity (``owner``: the acting connection; None, the management API or a
        broker job, owns no exclusive queue).

        Raises:
            AccessRefused, NotFound, ResourceLocked: as a channel answers (ResourceLocked also for a
            ``get`` from a quorum queue with single active consumer, as RabbitMQ 3.10's ``rabbit_fifo``).
        """
        self.allow(user, vhost, QUEUE_ACCESS[access], "queue", name)
        queue = vhost.get_queue(name, owner)
        if access == "get" and queue.selection.single_active and not queue.kind.get_with_single_active:
            raise ResourceLocked(
                f"cannot obtain access to locked queue '{name}' in vhost '{vhost.name}'. basic.get operations"
                " are not supported by quorum queues with single active consumer"
            )
        return queue

    def check_queue_access(
        self, user: Actor, vhost: VHost, name: str, access: QueueAccess, owner: object | None = None
    ) -> None:
        """:meth:`access_queue`'s checks where the queue may be gone (controlling a dead-letter move
        whose queue was deleted).

        Raises:
            AccessRefused, ResourceLocked: as a channel answers.
        """
        self.allow(user, vhost, QUEUE_ACCESS[access], "queue", name)
        if name in vhost.queues:
            vhost.get_queue(name, owner)

    def delete_queue(
        self,
        user: Actor,
        vhost: VHost,
        name: str,
        *,
        if_unused: bool = False,
        if_empty: bool = False,
        owner: object | None = None,
        missing_ok: bool = True,
    ) -> int:
        """``queue.delete``; returns the ready messages it held. A missing queue is fine on a channel
        (RabbitMQ 3.x, ``missing_ok``); the management API answers 404.

        Raises:
            AccessRefused, NotFound, ResourceLocked, PreconditionFailed: as a channel answers.
        """
        self.allow(user, vhost, "configure", "queue", name)
        if name not in vhost.queues and missing_ok:
            return 0
        queue = vhost.get_queue(name, owner)
        if if_unused and queue.consumers:
            raise PreconditionFailed(f"queue '{name}' in vhost '{vhost.name}' in use")
        if if_empty and queue.message_count:
            raise PreconditionFailed(f"queue '{name}' in vhost '{vhost.name}' not empty")
        return vhost.delete_queue(queue)

    def purge_queue(self, user: Actor, vhost: VHost, name: str, owner: object | None = None) -> int:
        """``queue.purge``; returns how many messages went."""
        return self.access_queue(user, vhost, name, "purge", owner).purge()

    # -- bindings -------------------------------------------------------------------------------------
    def _binding_allowed(self, user: Actor, vhost: VHost, source: str, dest: tuple[str, str]) -> None:
        kind: ResourceKind = "queue" if dest[0] == "queue" else "exchange"
        self.allow(user, vhost, "write", kind, dest[1])
        if source == "" or dest == ("exchange", ""):  # before read on the source, as binding_action
            raise AccessRefused("operation not permitted on the default exchange")
        self.allow(user, vhost, "read", "exchange", source)

    def bind(
        self,
        user: Actor,
        vhost: VHost,
        source: str,
        dest: tuple[str, str],
        routing_key: str,
        arguments: dict[str, Any] | None = None,
        owner: object | None = None,
    ) -> None:
        """``queue.bind`` / ``exchange.bind`` (rule 2).

        Raises:
            AccessRefused, NotFound, ResourceLocked: as a channel answers.
        """
        self._binding_allowed(user, vhost, source, dest)
        if dest[0] == "queue":
            vhost.get_queue(dest[1], owner)  # the queue first (404/405), then the exchanges (vhost.bind)
        vhost.bind(source, (dest[0], dest[1]), routing_key, arguments or {})

    def unbind(
        self,
        user: Actor,
        vhost: VHost,
        source: str,
        dest: tuple[str, str],
        routing_key: str,
        arguments: dict[str, Any] | None = None,
        owner: object | None = None,
    ) -> None:
        """``queue.unbind`` / ``exchange.unbind``: a missing queue, exchange or binding is fine."""
        self._binding_allowed(user, vhost, source, dest)
        vhost.unbind(source, (dest[0], dest[1]), routing_key, arguments or {}, owner)

    # -- policies -------------------------------------------------------------------------------------
    async def prepare_policy(
        self, vhost: VHost, pattern: Any, apply_to: Any = "all", more: Iterable[str] = ()
    ) -> None:
        """Match a policy's ``pattern`` against the names in ``vhost`` it may apply to (and ``more``,
        names about to be declared) off the event loop, before :meth:`set_policy` applies it (rule 5;
        ``vhost.patterns`` rule 7). A pattern RE2 reads, or one that is invalid, needs nothing here."""
        if not isinstance(pattern, str):
            return
        try:
            compiled = compile_pattern(pattern)
        except PatternError:
            return  # set_policy refuses it
        if compiled.bounded:
            return
        names = [*vhost.policy_names(apply_to), *more]
        if names:
            await asyncio.to_thread(compiled.prepare, names)

    async def prepare_definitions(self, vhosts: Callable[[str], VHost | None], defs: Definitions) -> None:
        """:meth:`prepare_policy` for each policy of ``defs`` whose vhost ``vhosts`` gives (the ones
        this process owns), with the queues and exchanges ``defs`` declares there."""
        for policy in defs.policies:
            vhost = vhosts(policy.vhost)
            if vhost is None:
                continue
            more = [q.name for q in defs.queues if q.vhost == policy.vhost]
            more += [x.name for x in defs.exchanges if x.vhost == policy.vhost]
            await self.prepare_policy(vhost, policy.pattern, policy.apply_to, more)

    def set_policy(
        self,
        vhost: VHost,
        name: str,
        pattern: Any,
        definition: Any,
        apply_to: Any = "all",
        priority: Any = 0,
        operator: bool = False,
    ) -> bool:
        """Validate, apply and store a (user or operator) policy; returns whether it is new.
        Who may set policies is the adapter's question (tags), not a permission.

        Raises:
            PolicyError: RabbitMQ's reason, or a value out of bounds (named).
        """
        policy = make_policy(vhost.name, name, pattern, definition, apply_to, priority, operator=operator)
        existed = name in (vhost.operator_policies if operator else vhost.policies)
        previous = (vhost.operator_policies if operator else vhost.policies).get(name)
        vhost.set_policy(policy)
        self.store.put_policy(policy_record(policy))

        def stored(ok: bool) -> None:
            if not ok:
                self._policy_refused(vhost, policy, previous)

        self.store.after_commit(stored)
        return not existed

    def _policy_refused(self, vhost: VHost, policy: Policy, previous: Policy | None) -> None:
        log.error("policy '%s' in vhost '%s' could not be stored; taken back", policy.name, vhost.name)
        registry = vhost.operator_policies if policy.operator else vhost.policies
        if registry.get(policy.name) is policy:  # and queue the undo behind a write that is retried
            if previous is None:
                vhost.delete_policy(policy.name, policy.operator)
                self.store.delete_policy(vhost.name, policy.name, policy.operator)
            else:
                vhost.set_policy(previous)
                self.store.put_policy(policy_record(previous))

    def delete_policy(self, vhost: VHost, name: str, operator: bool = False) -> bool:
        """Remove a policy; returns whether there was one."""
        if vhost.delete_policy(name, operator) is None:
            return False
        self.store.delete_policy(vhost.name, name, operator)
        return True

    # -- runtime parameters (rule 7) -----------------------------------------------------------------
    def set_parameter(self, user: Actor, vhost: str, component: str, name: str, value: Any) -> bool:
        """Validate, keep, store and apply a runtime parameter (``Parameters.set``); returns whether it
        is new. The acting user (None: the broker) must be able to open a local vhost a value names.

        Raises:
            ParameterError: an unknown component, or the component's problems with ``value``.
        """
        auth = self.auth

        def access(target: str) -> bool:
            return user is not None and target in auth.vhosts and (user.name, target) in auth.permissions

        username = user.name if user is not None else None
        return self.parameters.set(vhost, component, name, value, access if user else None, username)

    def clear_parameter(self, vhost: str, component: str, name: str) -> bool:
        """Forget a runtime parameter (its component stops what it ran); returns whether there was one."""
        return self.parameters.clear(vhost, component, name)

    # -- limits -----------------------------------------------------------------------------------------
    def set_limit(self, kind: str, owner: str, name: str, value: Any) -> None:
        """Validate (RabbitMQ's texts plus the bounds), apply and store a vhost or user limit.

        Raises:
            LimitError: an unknown limit or a bad value.
        """
        checked = validate(kind, name, value)
        self.limits.set(kind, owner, name, checked)
        self.store.put_limit(LimitRecord(kind, owner, name, checked))
        self.apply_limits()

    def clear_limit(self, kind: str, owner: str, name: str) -> None:
        """Remove a vhost or user limit (fine when it was not set)."""
        self.limits.clear(kind, owner, name)
        self.store.delete_limit(kind, owner, name)
        self.apply_limits()


def policy_record(policy: Policy) -> PolicyRecord:
    """The store's record of a policy."""
    return PolicyRecord(
        policy.vhost,
        policy.name,
        policy.pattern,
        policy.apply_to,
        policy.priority,
        json.dumps(policy.definition),
        policy.operator,
    )


def policy_of(record: PolicyRecord) -> Policy:
    """A stored policy, validated again (``policy_record``'s inverse).

    Raises:
        PolicyError: the record is not a valid policy (any more).
    """
    return make_policy(
        record.vhost,
        record.name,
        record.pattern,
        json.loads(record.definition),
        record.apply_to,
        record.priority,
        operator=record.operator,
    )
