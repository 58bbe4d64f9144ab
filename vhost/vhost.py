"""A virtual host: exchanges, queues, bindings, and the publish routing walk.

Rules:
- The default exchange ``""`` routes by queue name; it cannot be declared, deleted or bound (403).
- Names starting with ``amq.`` are reserved for declares (403), except passive declares.
- Exclusive queues belong to one connection; any other connection touching them gets 405.
- Quorum queues (``x-queue-type: quorum``) are durable, non-exclusive, non-auto-delete queues with
  quorum-queue rules (``arguments.py``, ``queue.py``); ``quorum_delivery_limit`` is the delivery limit
  of those with none of their own (RabbitMQ 4's default of 20, opt-in: None = RabbitMQ 3.10's none).
- Routing walks exchange-to-exchange bindings breadth first, visiting each exchange once; an
  exchange that routes nowhere hands the message to its ``alternate-exchange`` (RabbitMQ's rule).
  A consistent-hash exchange hashes the message's first routing key (or a header or property),
  whichever of its routing keys the walk is following: it picks one destination per message.
- Deleting a queue removes its bindings; an auto-delete exchange goes when its last binding does.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from typing import Any, Protocol

from ottermq.amqp.errors import AccessRefused, NotFound, PreconditionFailed, ResourceLocked
from ottermq.ttl.manager import TTLManager
from ottermq.ttl.noop import NoopTTLManager

from .arguments import (
    QueueArgs,
    check_args_equivalence,
    check_flag_equivalence,
    parse_queue_args,
)
from .dedup_owners import DedupOwners
from .definition_store import DefinitionStore
from .delayed import delay_of
from .exchange import Destination, Exchange, check_exchange_type, equivalent, make_exchange
from .message import Entry, Message
from .paging import Paging
from .patterns import name_budget
from .policy import Policy, choose, effective_args, kinds_of, merge
from .publish_result import DUPLICATE, EXCLUDED, REFUSED, ROUTED, UNROUTED, PublishResult
from .queue import Consumer, DeadLetterSink, DropSink, Queue
from .queue_types import queue_type

__all__ = [
    "DUPLICATE",
    "EXCLUDED",
    "PREDECLARED",
    "REFUSED",
    "ROUTED",
    "UNROUTED",
    "DefinitionStore",
    "Delayer",
    "PublishResult",
    "VHost",
    "generated_name",
]

PREDECLARED = (
    ("amq.direct", "direct", False),
    ("amq.fanout", "fanout", False),
    ("amq.topic", "topic", False),
    ("amq.headers", "headers", False),
    ("amq.match", "headers", False),
    ("amq.rabbitmq.trace", "topic", True),
)


def generated_name(prefix: str) -> str:
    """A RabbitMQ-style generated name: ``amq.gen-`` / ``amq.ctag-`` + 22 url-safe chars."""
    return prefix + base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()


class Delayer(Protocol):
    """Where a delayed exchange's messages wait (``broker/node/delayed.py``; ``vhost/delayed.py``)."""

    def delay(
        self, vhost: VHost, exchange: Exchange, message: Message, delay: int, mandatory: bool
    ) -> PublishResult:
        """Keep ``message`` for ``delay`` ms, then route it from ``exchange``."""
        ...

    def exchange_deleted(self, vhost: str, name: str) -> None:
        """Drop what waits for a deleted exchange."""
        ...


class VHost:
    """Registry of one virtual host's exchanges and queues.

    Args:
        name: the vhost name (``/`` by default).
        max_priority: highest accepted ``x-max-priority``.
    """

    def __init__(
        self,
        name: str = "/",
        max_priority: int = 255,
        ttl: TTLManager | None = None,
        limits: bool = True,
    ) -> None:
        self.name = name
        self.max_priority = max_priority
        self.ttl: TTLManager = ttl if ttl is not None else NoopTTLManager()
        self.limits = limits
        self.quorum_delivery_limit: int | None = None  # OTTERMQ_QUORUM_DELIVERY_LIMIT (broker/node/wiring.py)
        self.sink: DeadLetterSink[Queue] = DropSink()  # replaced by broker/node/wiring.py
        self.store: DefinitionStore | None = None  # set by broker/node/wiring.py when persistent
        self.delayer: Delayer | None = None  # set by broker/node/wiring.py (x-delayed-message exchanges)
        self.dedup = DedupOwners(name)  # which exchanges and queues deduplicate (``dedup_owners.py``)
        # timer source for queues' delayed retry: (epoch ms, callback) -> handle (broker/node/wiring.py)
        self.call_at: Callable[[int, Callable[[], None]], Any] | None = None
        self.call_soon: Callable[[Callable[[], None]], Any] | None = None  # the event loop's (queues)
        self.paging: Paging | None = None  # backlogs beyond memory (broker/node/wiring.py)
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        # churn, for the management API and Prometheus: queue.declare calls (not passive), queues
        # created by them (or the API, definitions, recovery) and queues deleted
        self.queues_declared = self.queues_created = self.queues_deleted = 0
        self.max_queues: int | None = None  # the vhost's max-queues limit (broker/node/limits.py)
        # name -> policy (vhost/policy.py); set_policy/delete_policy re-apply them to everything
        self.policies: dict[str, Policy] = {}
        self.operator_policies: dict[str, Policy] = {}
        # destination -> names of exchanges it is bound to (to unbind on delete quickly)
        self._sources: dict[Destination, set[str]] = {}
        # called with (queue) when a queue goes away (consumers to cancel are handled here)
        self.on_queue_deleted: list[Callable[[Queue], None]] = []
        for xname, xtype, internal in PREDECLARED:
            self.exchanges[xname] = make_exchange(xname, xtype, durable=True, internal=internal, vhost=name)

    # -- policies -------------------------------------------------------------------------
    def set_policy(self, policy: Policy) -> None:
        """Add or replace a (user or operator) policy and re-apply policies to every queue and exchange
        (not when it is the same policy again: a worker's metadata copy sets every policy anew)."""
        registry = self.operator_policies if policy.operator else self.policies
        same = registry.get(policy.name) == policy
        registry[policy.name] = policy
        if not same:
            self.apply_policies()

    def policy_names(self, apply_to: object) -> list[str]:
        """The names a policy of this ``apply-to`` is matched against: queues, exchanges or both."""
        kinds = kinds_of(apply_to)
        names = list(self.queues) if "queue" in kinds else []
        return names + list(self.exchanges) if "exchange" in kinds else names

    def delete_policy(self, name: str, operator: bool = False) -> Policy | None:
        """Remove a policy (None if there was none) and re-apply what is left."""
        removed = (self.operator_policies if operator else self.policies).pop(name, None)
        if removed is not None:
            self.apply_policies()
        return removed

    def apply_policies(self) -> None:
        """Give every queue and exchange the policies that match it now (RabbitMQ re-evaluates them all
        whenever a policy changes)."""
        for queue in list(self.queues.values()):
            self._apply_to_queue(queue)
        for exchange in self.exchanges.values():
            policy = choose(self.policies.values(), "exchange", exchange.name)
            if policy is not None or exchange.policy is not None:
                exchange.set_policy(policy.name if policy else None, policy.definition if policy else {})
                self.dedup.apply_policy("exchange", exchange, policy.definition if policy else {})

    def _apply_to_queue(self, queue: Queue) -> None:
        kind = queue.args.queue_type
        user = choose(self.policies.values(), "queue", queue.name, kind)
        operator = choose(self.operator_policies.values(), "queue", queue.name, kind)
        if user is None and operator is None and queue.policy is None and queue.operator_policy is None:
            if kind != "quorum" or self.quorum_delivery_limit is None:
                return
        definition = merge(user, operator)
        queue.set_policy(
            user.name if user else None,
            operator.name if operator else None,
            definition,
            effective_args(queue.declared_args, definition, self.quorum_delivery_limit),
        )
        self.dedup.apply_policy("queue", queue, definition)

    # -- durability -----------------------------------------------------------------------
    def _durable_dest(self, dest: Destination) -> bool:
        if dest[0] == "queue":
            queue = self.queues.get(dest[1])
            return queue is not None and queue.durable and not queue.exclusive
        exchange = self.exchanges.get(dest[1])
        return exchange is not None and exchange.durable

    def _binding_changed(
        self, added: bool, exchange: Exchange, dest: Destination, routing_key: str, args: dict[str, Any]
    ) -> None:
        store = self.store
        if store is None or not exchange.durable or not self._durable_dest(dest):
            return
        if added:
            what = f"binding of {dest[0]} '{dest[1]}' to exchange '{exchange.name}'"
            self._store_first(
                what, lambda store: store.binding_added(self.name, exchange.name, dest, routing_key, args)
            )
        else:
            store.binding_removed(self.name, exchange.name, dest, routing_key, args)

    def _store_first(self, what: str, write: Callable[[DefinitionStore], None]) -> None:
        """Report a durable change to the store before it is applied (see ``DefinitionStore``).

        Raises:
            PreconditionFailed: the store cannot hold a value of it (nothing is applied).
        """
        if self.store is None:
            return
        try:
            write(self.store)
        except (ValueError, TypeError) as exc:
            raise PreconditionFailed(f"cannot store {what} in vhost '{self.name}': {exc}") from None

    def _forget_bindings(self, exchange: Exchange, dest: Destination | None) -> None:
        """Tell the store about bindings about to vanish (all of ``exchange``'s, or those to dest)."""
        if self.store is None or not exchange.durable:
            return
        for routing_key, bound, args in exchange.bindings_list():
            if dest is None or bound == dest:
                self._binding_changed(False, exchange, bound, routing_key, dict(args))

    # -- exchanges ------------------------------------------------------------------------
    def get_exchange(self, name: str) -> Exchange:
        """Raises NotFound if the exchange does not exist."""
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise NotFound(f"no exchange '{name}' in vhost '{self.name}'")
        return exchange

    def declare_exchange(
        self,
        name: str,
        type_: str,
        passive: bool,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Any] | None,
    ) -> Exchange:
        """exchange.declare semantics (passive, reserved names, equivalence)."""
        if not passive:
            check_exchange_type(type_)  # RabbitMQ checks the type before anything else
        if name == "":
            raise AccessRefused("operation not permitted on the default exchange")
        if passive:
            return self.get_exchange(name)
        existing = self.exchanges.get(name)
        if existing is not None:
            equivalent(existing, type_, durable, auto_delete, internal, arguments or {})
            return existing
        if name.startswith("amq."):
            raise AccessRefused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
        exchange = make_exchange(name, type_, durable, auto_delete, internal, arguments or {}, self.name)
        policy = None
        if self.policies:
            with name_budget():  # the policies' costly patterns share 50 ms for this name
                policy = choose(self.policies.values(), "exchange", name)
        # arguments checked (406) before the exchange exists
        settings = self.dedup.settings("exchange", exchange, policy.definition if policy else {})
        if durable:  # stored first: refused there, it is not declared at all
            self._store_first(
                f"exchange '{name}'", lambda store: store.exchange_declared(self.name, exchange)
            )
        self.exchanges[name] = exchange
        if policy is not None:
            exchange.set_policy(policy.name, policy.definition)
        if settings is not None:
            self.dedup.configure("exchange", exchange, settings)
        return exchange

    def delete_exchange(self, name: str, if_unused: bool) -> None:
        """exchange.delete; deleting a missing exchange is fine (RabbitMQ 3.x)."""
        if name == "":
            raise AccessRefused("operation not permitted on the default exchange")
        if name.startswith("amq."):
            raise AccessRefused(f"deletion of system exchange '{name}' in vhost '{self.name}' not allowed")
        exchange = self.exchanges.get(name)
        if exchange is None:
            return
        if if_unused and exchange.has_bindings():
            raise PreconditionFailed(f"exchange '{name}' in vhost '{self.name}' in use")
        self._remove_exchange(exchange)

    def _remove_exchange(self, exchange: Exchange) -> None:
        self.dedup.forget("exchange", exchange)
        if exchange.DELAYED and self.delayer is not None:
            self.delayer.exchange_deleted(self.name, exchange.name)
        self._forget_bindings(exchange, None)
        if exchange.durable and self.store is not None:
            self.store.exchange_deleted(self.name, exchange.name)
        del self.exchanges[exchange.name]
        for dest in exchange.destinations():
            sources = self._sources.get(dest)
            if sources is not None:
                sources.discard(exchange.name)
        # bindings where this exchange is the destination
        self._drop_destination(("exchange", exchange.name))

    # -- queues ---------------------------------------------------------------------------
    def get_queue(self, name: str, owner: object | None) -> Queue:
        """Look up a queue for a connection. Raises NotFound or ResourceLocked (405)."""
        queue = self.queues.get(name)
        if queue is None:
            raise NotFound(f"no queue '{name}' in vhost '{self.name}'")
        if queue.exclusive and queue.owner is not owner:
            raise ResourceLocked(
                f"cannot obtain exclusive access to locked queue '{name}' in vhost '{self.name}'. "
                "It could be originally declared on another connection or the exclusive property "
                "value does not match that of the original declaration."
            )
        return queue

    def declare_queue(
        self,
        name: str,
        passive: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: dict[str, Any] | None,
        owner: object,
        generated: bool = False,
    ) -> Queue:
        """queue.declare semantics. ``name`` must already be generated when it was empty."""
        if passive:
            return self.get_queue(name, owner)
        self.queues_declared += 1
        existing = self.queues.get(name)
        if existing is not None:
            queue = self.get_queue(name, owner)
            if queue.exclusive != exclusive:
                # RabbitMQ reports this as a lock failure (405), not an equivalence error
                raise ResourceLocked(
                    f"cannot obtain exclusive access to locked queue '{name}' in vhost "
                    f"'{self.name}'. It could be originally declared on another connection or "
                    "the exclusive property value does not match that of the original declaration."
                )
            check_flag_equivalence(name, "durable", durable, queue.durable, self.name)
            check_flag_equivalence(name, "auto_delete", auto_delete, queue.auto_delete, self.name)
            check_args_equivalence(
                queue.args.raw, arguments or {}, name, self.name, queue_type=queue.args.queue_type
            )
            return queue
        if name.startswith("amq.") and not generated:
            raise AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'")
        if self.max_queues is not None and len(self.queues) >= self.max_queues:  # the vhost's limit
            limit = self.max_queues
            raise PreconditionFailed(
                f"cannot declare queue '{name}': queue limit in vhost '{self.name}' ({limit}) is reached"
            )
        args: QueueArgs = parse_queue_args(arguments or {}, name, self.name, self.max_priority)
        queue_type(args.queue_type).check_properties(name, durable, exclusive, auto_delete, self.name)
        queue = Queue(
            name,
            self.name,
            durable,
            exclusive,
            auto_delete,
            owner if exclusive else None,
            args,
            ttl=self.ttl,
            sink=self.sink,
            limits=self.limits,
        )
        dedup = self.dedup.settings("queue", queue, {})  # 406 before the queue exists
        if durable and not exclusive:  # stored first: refused there, it is not declared at all
            self._store_first(f"queue '{name}'", lambda store: store.queue_declared(queue))
        queue.on_expired = self._expire_queue
        queue.call_at = self.call_at
        queue.call_soon = self.call_soon
        if self.paging is not None:
            queue.set_paging(self.paging)
        self.queues[name] = queue
        self.queues_created += 1
        if self.policies or self.operator_policies or args.queue_type == "quorum":
            with name_budget():  # the policies' costly patterns share 50 ms for this name
                self._apply_to_queue(queue)
        if dedup is not None and queue.dedup is None:  # no policy configured it
            self.dedup.configure("queue", queue, dedup)
        return queue

    def delete_queue(self, queue: Queue) -> int:
        """Delete a queue: unbind it, cancel its consumers. Returns its ready message count."""
        count = queue.message_count
        self.queues_deleted += 1
        self.dedup.forget("queue", queue)
        self._drop_destination(("queue", queue.name))
        self.queues.pop(queue.name, None)
        if queue.store_id and self.store is not None:
            self.store.queue_deleted(queue)
        for consumer in queue.mark_deleted():
            consumer.on_queue_deleted(queue)
        for hook in self.on_queue_deleted:
            hook(queue)
        return count

    def _expire_queue(self, queue: Queue) -> None:
        """``x-expires`` fired on an unused queue: delete it (messages are not dead-lettered)."""
        if not queue.deleted and self.queues.get(queue.name) is queue:
            self.delete_queue(queue)

    def _drop_destination(self, dest: Destination) -> None:
        for source_name in self._sources.pop(dest, ()):
            exchange = self.exchanges.get(source_name)
            if exchange is not None:
                self._forget_bindings(exchange, dest)
                exchange.remove_destination(dest)
                self._maybe_auto_delete(exchange)

    def _maybe_auto_delete(self, exchange: Exchange) -> None:
        if exchange.auto_delete and not exchange.has_bindings() and exchange.name in self.exchanges:
            self._remove_exchange(exchange)

    # -- bindings -------------------------------------------------------------------------
    def _check_bindable(self, exchange_name: str) -> Exchange:
        if exchange_name == "":
            raise AccessRefused("operation not permitted on the default exchange")
        return self.get_exchange(exchange_name)

    def bind(self, source: str, dest: Destination, routing_key: str, arguments: dict[str, Any]) -> None:
        """Bind ``dest`` to exchange ``source`` (the destination must already be checked)."""
        exchange = self._check_bindable(source)
        if dest[0] == "exchange":
            self._check_bindable(dest[1])
        if exchange.bind(routing_key, dest, arguments):  # checked (headers: x-match), then added
            try:
                self._binding_changed(True, exchange, dest, routing_key, arguments)
            except PreconditionFailed:
                exchange.unbind(routing_key, dest, arguments)  # the store refused it: taken back
                raise
            self._sources.setdefault(dest, set()).add(source)

    def unbind(
        self,
        source: str,
        dest: Destination,
        routing_key: str,
        arguments: dict[str, Any],
        owner: object | None = None,
    ) -> None:
        """Remove a binding. As RabbitMQ 3.10, a missing exchange, destination or binding is not an
        error; an exclusive queue is checked against ``owner`` only when the binding exists.

        Raises:
            AccessRefused: the default exchange is involved.
            ResourceLocked: the binding exists and its queue is exclusive to another connection.
        """
        if source == "" or dest == ("exchange", ""):
            raise AccessRefused("operation not permitted on the default exchange")
        exchange = self.exchanges.get(source)
        if exchange is None:
            return
        if dest[0] == "queue" and exchange.has_binding(routing_key, dest, arguments):
            self.get_queue(dest[1], owner)  # 405 for another connection's exclusive queue
        if exchange.unbind(routing_key, dest, arguments):
            self._binding_changed(False, exchange, dest, routing_key, arguments)
            remaining = [b for b in exchange.bindings_list() if b[1] == dest]
            if not remaining:
                sources = self._sources.get(dest)
                if sources is not None:
                    sources.discard(source)
            self._maybe_auto_delete(exchange)

    # -- publishing -----------------------------------------------------------------------
    def publish(
        self,
        exchange: Exchange | None,
        message: Message,
        exclude: frozenset[str] | None = None,
        mandatory: bool = False,
        checked: bool = False,
        dead_letter: bool = False,
    ) -> PublishResult:
        """The one publish operation (a channel's publish and tx commit, dead-lettering): route
        ``message`` from ``exchange`` (None = the default exchange) with its routing key and its
        ``extra_keys`` (CC/BCC, checked by ``sender_selected`` at publish time), then enqueue it in
        every queue reached but those named in ``exclude`` (dead-lettering's cycle detection).

        A deduplicating exchange does not route a duplicate (``DUPLICATE``: unroutable, confirmed);
        a deduplicating queue does not enqueue one (it counts as routed). A delayed exchange hands a
        message with an ``x-delay`` to the delayer (``mandatory``: whether it must be routable now).
        ``checked``: the exchange's deduplication and delay were applied already (a delayed message
        that came due). ``dead_letter``: a dead letter, not counted as published to the queues.

        Returns:
            What the caller's protocol needs: whether any queue took it (else a mandatory message
            is returned), whether a ``reject-publish`` queue refused it (a confirm nack), and the
            entries written to the store (the confirm waits for their commit; a failed commit
            withdraws them, see ``Queue.withdraw``), and whether ``exclude`` left it nowhere to go.
        """
        extra = message.extra_keys
        if exchange is None and not extra and exclude is None:  # the hot case: one queue by name
            queue = self.queues.get(message.routing_key)
            if queue is None:
                return UNROUTED
            if queue.dedup is not None and queue.dedup.duplicate(message.headers, self.ttl.now()):
                return ROUTED
            entry = queue.enqueue(message, not dead_letter)
            if entry is None:
                return REFUSED
            return PublishResult(True, False, [(queue, entry)]) if entry.store_id else ROUTED
        if exchange is not None and not checked:
            if exchange.dedup is not None and exchange.dedup.duplicate(message.headers, self.ttl.now()):
                return DUPLICATE
            if exchange.DELAYED and self.delayer is not None:
                delay = delay_of(message.headers)
                if delay is not None:
                    return self.delayer.delay(self, exchange, message, delay, mandatory)
        queues = self.route(exchange, message, list(extra) if extra else None)
        if exclude is not None and queues:
            queues = [queue for queue in queues if queue.name not in exclude]
            if not queues:
                return EXCLUDED
        if not queues:
            return UNROUTED
        refused = False
        stored: list[tuple[Queue, Entry]] | None = None
        for queue in queues:
            if queue.dedup is not None and queue.dedup.duplicate(message.headers, self.ttl.now()):
                continue  # routed, not enqueued
            entry = queue.enqueue(message, not dead_letter)
            if entry is None:
                refused = True  # reject-publish overflow
            elif entry.store_id:
                if stored is None:
                    stored = []
                stored.append((queue, entry))
        if stored is not None:
            return PublishResult(True, refused, stored)
        return REFUSED if refused else ROUTED

    def route(
        self, exchange: Exchange | None, message: Message, extra_keys: list[str] | None = None
    ) -> list[Queue]:
        """Queues a message published to ``exchange`` (None = default exchange) reaches.

        ``extra_keys`` are further routing keys (CC/BCC, dead-lettering with several keys).
        """
        if extra_keys:
            found: dict[Queue, None] = {}
            for key in [message.routing_key, *extra_keys]:
                for queue in self._route_key(exchange, message, key):
                    found[queue] = None
            return list(found)
        return self._route_key(exchange, message, message.routing_key)

    def _route_key(self, exchange: Exchange | None, message: Message, routing_key: str) -> list[Queue]:
        if exchange is None:
            queue = self.queues.get(routing_key)
            return [queue] if queue is not None else []
        if exchange.BY_MESSAGE:
            dests = exchange.route_content(message.routing_key, message.raw_props)
        else:
            dests = exchange.route(routing_key, message.headers if exchange.type == "headers" else None)
        if len(dests) == 1 and exchange.alternate_exchange is None:
            for kind, qname in dests:
                if kind == "queue":
                    queue = self.queues.get(qname)
                    return [queue] if queue is not None else []
        return self._route_walk(exchange, dests, message, routing_key)

    def _route_walk(self, first: Exchange, dests: Any, message: Message, routing_key: str) -> list[Queue]:
        seen_exchanges = {first.name}
        queue_names: dict[str, None] = {}
        work: list[tuple[Exchange, Any]] = [(first, dests)]
        while work:
            exchange, routed = work.pop()
            if not routed and exchange.alternate_exchange:
                routed = {("exchange", exchange.alternate_exchange)}
            for kind, name in routed:
                if kind == "queue":
                    queue_names[name] = None
                elif name not in seen_exchanges:
                    seen_exchanges.add(name)
                    target = self.exchanges.get(name)
                    if target is None:
                        continue
                    if target.BY_MESSAGE:
                        found = target.route_content(message.routing_key, message.raw_props)
                    else:
                        headers = message.headers if target.type == "headers" else None
                        found = target.route(routing_key, headers)
                    work.append((target, found))
        queues = self.queues
        return [queues[n] for n in queue_names if n in queues]

    # -- consumers ------------------------------------------------------------------------
    def consumer_removed(self, queue: Queue, consumer: Consumer[Queue], dispatch: bool = True) -> None:
        """Detach a consumer; deletes an auto-delete queue that lost its last consumer (``dispatch``:
        see ``Queue.remove_consumer``)."""
        if queue.remove_consumer(consumer, dispatch) and not queue.deleted:
            self.delete_queue(queue)
