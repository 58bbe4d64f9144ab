"""Exchanges: direct, fanout, topic and headers, each a small ``route`` over its own index, and the
plugins' types built in (delayed messages, deduplication, consistent hashing).

Rules (RabbitMQ 3.10.8 behaviour, see ``tests/unit/vhost/test_exchange.py``):
- A binding is identified by (destination, routing key, arguments); binding the same triple twice
  is a no-op and unbinding a missing one is not an error. Argument tables compare as RabbitMQ
  stores them: top-level keys in any order, values with their kind (``1``, ``True`` and ``"1"``
  are three different bindings).
- Several bindings may join the same destination and key with different arguments; the direct,
  fanout and topic indexes count them so the destination stays routed until the last one goes.
- ``route`` results are shared, read-only sets: callers must not mutate them, and must not keep
  them across a bind/unbind (they may be the index's own sets).
- An exchange whose ``BY_MESSAGE`` is true (consistent hashing) routes with ``route_content``, which
  sees the message's first routing key and property octets, instead of ``route``.
- ``exchange.declare`` checks the type first (even for an existing exchange, never for a passive
  declare); redeclare compares type, durable, auto_delete, internal, then ``alternate-exchange``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ottermq.amqp.erlang import Atom, format_term
from ottermq.amqp.errors import CommandInvalid, PreconditionFailed

from .arguments import assert_args_equivalence, parse_exchange_args
from .chash import CHASH_EXCHANGE_TYPE, MAX_CACHED, HashRing, HashSource, binding_weight
from .dedup import DEDUP_EXCHANGE_TYPE, DedupCache
from .delayed import DELAYED_EXCHANGE_TYPE, DELAYED_TYPE_ERROR
from .headers import HeadersMatcher, validate_binding_args
from .topic import Destination, TopicTrie
from .values import amqp_type_name, erl_term, freeze_value, longstr_text

__all__ = [
    "EXCHANGE_TYPES",
    "ConsistentHashExchange",
    "Destination",
    "DedupExchange",
    "DelayedExchange",
    "DirectExchange",
    "Exchange",
    "FanoutExchange",
    "HeadersExchange",
    "Routed",
    "TopicExchange",
    "check_exchange_type",
    "equivalent",
    "make_exchange",
]

EXCHANGE_TYPES = (
    "direct",
    "fanout",
    "topic",
    "headers",
    "x-delayed-message",
    "x-message-deduplication",
    "x-consistent-hash",
)

_EMPTY: frozenset[Destination] = frozenset()

# Names that exist as atoms in a RabbitMQ 3.10.8 node: for these RabbitMQ says "invalid exchange
# type", for any other unknown name "unknown exchange type" (binary_to_existing_atom succeeds or
# fails). The list holds common names probed against a real broker; it cannot be complete.
_ERLANG_ATOMS = frozenset(
    "a b c d e f g h i j k l m n p q r s t u v w x y z "
    "all any args arguments array bad bar binary bool boolean classic config consistent count data "
    "decimal default double dummy erlang error event exchange expires false federation float foo "
    "hash header id infinity info int integer internal invalid invalid_type io key lazy length list "
    "lists local long map match message mode module name nil node none normal not_found null ok pid "
    "priority queue queue_type quorum rabbit random reason ref short size state status stream string "
    "system table temp test timestamp tmp trace true ttl type undefined unknown unknown_type user "
    "value version vhost void".split()
) | {""}

Frozen = tuple[Any, ...]
Routed = set[Destination] | frozenset[Destination]
"""What ``Exchange.route`` returns: a shared set the caller must not mutate or keep."""
Binding = tuple[str, Destination, dict[str, Any]]
BindingKey = tuple[Destination, str, Frozen]
"""A binding's identity: destination, routing key, frozen arguments."""


def check_exchange_type(type_: str) -> None:
    """Refuse an exchange type ottermq does not implement, as ``exchange.declare`` does.

    Raises:
        CommandInvalid: (503, closes the connection) ``invalid exchange type 'foo'`` or
            ``unknown exchange type 'x-delayed-message'`` (see ``_ERLANG_ATOMS``).
    """
    if type_ not in _TYPES:
        word = "invalid" if type_ in _ERLANG_ATOMS else "unknown"
        raise CommandInvalid(f"{word} exchange type '{type_}'")


def _freeze_args(arguments: Mapping[str, Any] | None) -> Frozen:
    if not arguments:
        return ()
    return tuple(sorted((key, freeze_value(value)) for key, value in arguments.items()))


class Exchange:
    """Common state and binding bookkeeping; subclasses maintain a routing index.

    Args:
        name: exchange name (the type comes from the subclass's ``TYPE``).
        arguments: the declare arguments (kept as given).
        vhost: vhost name, for error texts.
    """

    __slots__ = (
        "name",
        "type",
        "durable",
        "auto_delete",
        "internal",
        "arguments",
        "alternate_exchange",
        "declared_alternate",
        "policy",
        "vhost",
        "dedup",
        "_bindings",
        "_by_dest",
    )
    TYPE: ClassVar[str] = ""
    DELAYED: ClassVar[bool] = False  # an x-delayed-message exchange (``delayed.py``)
    BY_MESSAGE: ClassVar[bool] = False  # routes with ``route_content`` (see the module rules)

    def __init__(
        self,
        name: str,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
        vhost: str = "/",
    ) -> None:
        self.name = name
        self.type = self.TYPE
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments: dict[str, Any] = arguments if arguments is not None else {}
        ae = self.arguments.get("alternate-exchange")
        self.alternate_exchange: str | None = longstr_text(ae) if amqp_type_name(ae) == "longstr" else None
        self.declared_alternate = self.alternate_exchange  # the argument; a policy may add one (set_policy)
        self.policy: str | None = None
        self.vhost = vhost
        self.dedup: DedupCache | None = None  # set by the vhost when it deduplicates (``dedup.py``)
        # (dest, routing key, frozen args) -> binding as given
        self._bindings: dict[BindingKey, Binding] = {}
        self._by_dest: dict[Destination, set[BindingKey]] = {}
        self._init_index()

    def _init_index(self) -> None:
        """The subclass's routing index, set up last in ``__init__`` (a hook rather than an
        ``__init__(*args, **kwargs)`` override: mypyc does not pass those through ``super()``)."""

    def set_policy(self, policy: str | None, definition: dict[str, Any]) -> None:
        """Apply the vhost's policy: its ``alternate-exchange`` unless the exchange was declared with one."""
        self.policy = policy
        ae = definition.get("alternate-exchange")
        self.alternate_exchange = self.declared_alternate or (ae if isinstance(ae, str) else None)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} bindings={len(self._bindings)}>"

    @property
    def bindings(self) -> int:
        """Number of bindings from this exchange."""
        return len(self._bindings)

    def bind(self, routing_key: str, dest: Destination, arguments: dict[str, Any] | None) -> bool:
        """Add a binding. Returns False when that exact binding already existed."""
        key = (dest, routing_key, _freeze_args(arguments))
        if key in self._bindings:
            return False
        args = arguments if arguments is not None else {}
        self._bindings[key] = (routing_key, dest, args)
        self._by_dest.setdefault(dest, set()).add(key)
        self._link(key, routing_key, dest, args)
        return True

    def has_binding(self, routing_key: str, dest: Destination, arguments: dict[str, Any] | None) -> bool:
        return (dest, routing_key, _freeze_args(arguments)) in self._bindings

    def unbind(self, routing_key: str, dest: Destination, arguments: dict[str, Any] | None) -> bool:
        """Remove a binding. Returns False when it did not exist."""
        key = (dest, routing_key, _freeze_args(arguments))
        if key not in self._bindings:
            return False
        self._drop(key)
        return True

    def _drop(self, key: BindingKey) -> None:
        routing_key, dest, _ = self._bindings.pop(key)
        keys = self._by_dest[dest]
        keys.discard(key)
        if not keys:
            del self._by_dest[dest]
        self._unlink(key, routing_key, dest)

    def remove_destination(self, dest: Destination) -> int:
        """Drop every binding to ``dest`` (a deleted queue or exchange); returns how many."""
        keys = self._by_dest.get(dest)
        if not keys:
            return 0
        removed = 0
        for key in list(keys):
            self._drop(key)
            removed += 1
        return removed

    def destinations(self) -> set[Destination]:
        """Every bound destination (a new set)."""
        return set(self._by_dest)

    def has_bindings(self) -> bool:
        """Whether anything is bound to this exchange."""
        return bool(self._bindings)

    def bindings_list(self) -> list[Binding]:
        """``(routing_key, dest, arguments)`` for every binding, in bind order."""
        return list(self._bindings.values())

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> Routed:
        """Destinations for a message (shared, read-only; see the module rules)."""
        raise NotImplementedError

    def route_content(self, routing_key: str, raw_props: bytes) -> Routed:
        """Destinations for a message by its first routing key and its property octets (for the
        types with ``BY_MESSAGE``; the others route by ``routing_key`` and the decoded headers)."""
        return self.route(routing_key, None)

    # index maintenance, one call per binding added / removed
    def _link(self, key: BindingKey, routing_key: str, dest: Destination, arguments: dict[str, Any]) -> None:
        raise NotImplementedError

    def _unlink(self, key: BindingKey, routing_key: str, dest: Destination) -> None:
        raise NotImplementedError


class DirectExchange(Exchange):
    """Routes to the destinations bound with exactly the message's routing key."""

    __slots__ = ("_routes", "_refs")
    TYPE = "direct"

    def _init_index(self) -> None:
        self._routes: dict[str, set[Destination]] = {}
        self._refs: dict[tuple[str, Destination], int] = {}

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> Routed:
        return self._routes.get(routing_key, _EMPTY)

    def _link(self, key: BindingKey, routing_key: str, dest: Destination, arguments: dict[str, Any]) -> None:
        pair = (routing_key, dest)
        count = self._refs.get(pair, 0)
        self._refs[pair] = count + 1
        if not count:
            self._routes.setdefault(routing_key, set()).add(dest)

    def _unlink(self, key: BindingKey, routing_key: str, dest: Destination) -> None:
        pair = (routing_key, dest)
        count = self._refs[pair] - 1
        if count:
            self._refs[pair] = count
            return
        del self._refs[pair]
        dests = self._routes[routing_key]
        dests.discard(dest)
        if not dests:
            del self._routes[routing_key]


class FanoutExchange(Exchange):
    """Routes to every bound destination, ignoring the routing key."""

    __slots__ = ("_dests", "_refs")
    TYPE = "fanout"

    def _init_index(self) -> None:
        self._dests: set[Destination] = set()
        self._refs: dict[Destination, int] = {}

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> Routed:
        return self._dests

    def _link(self, key: BindingKey, routing_key: str, dest: Destination, arguments: dict[str, Any]) -> None:
        count = self._refs.get(dest, 0)
        self._refs[dest] = count + 1
        if not count:
            self._dests.add(dest)

    def _unlink(self, key: BindingKey, routing_key: str, dest: Destination) -> None:
        count = self._refs[dest] - 1
        if count:
            self._refs[dest] = count
        else:
            del self._refs[dest]
            self._dests.discard(dest)


class TopicExchange(Exchange):
    """Routes by ``*`` / ``#`` patterns (``topic.TopicTrie``), caching results per routing key."""

    __slots__ = ("_trie", "_refs", "_cache")
    TYPE = "topic"
    CACHE_SIZE: ClassVar[int] = 4096

    def _init_index(self) -> None:
        self._trie = TopicTrie()
        self._refs: dict[tuple[str, Destination], int] = {}
        self._cache: dict[str, set[Destination]] = {}

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> Routed:
        cached = self._cache.get(routing_key)
        if cached is not None:
            return cached
        if not self._refs:
            return _EMPTY
        result = self._trie.match(routing_key)
        if len(self._cache) >= self.CACHE_SIZE:
            self._cache.clear()
        self._cache[routing_key] = result
        return result

    def _link(self, key: BindingKey, routing_key: str, dest: Destination, arguments: dict[str, Any]) -> None:
        pair = (routing_key, dest)
        count = self._refs.get(pair, 0)
        self._refs[pair] = count + 1
        if not count:
            self._trie.add(routing_key, dest)
            self._cache.clear()

    def _unlink(self, key: BindingKey, routing_key: str, dest: Destination) -> None:
        pair = (routing_key, dest)
        count = self._refs[pair] - 1
        if count:
            self._refs[pair] = count
            return
        del self._refs[pair]
        self._trie.remove(routing_key, dest)
        self._cache.clear()


class HeadersExchange(Exchange):
    """Routes by matching message headers against each binding's arguments (``headers``)."""

    __slots__ = ("_matchers",)
    TYPE = "headers"

    def _init_index(self) -> None:
        self._matchers: dict[BindingKey, tuple[Destination, HeadersMatcher]] = {}

    def bind(self, routing_key: str, dest: Destination, arguments: dict[str, Any] | None) -> bool:
        """Add a binding after checking its ``x-match``.

        Raises:
            PreconditionFailed: for an invalid ``x-match`` (see ``headers.validate_binding_args``).
        """
        validate_binding_args(arguments)
        return super().bind(routing_key, dest, arguments)

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> Routed:
        result: set[Destination] | None = None
        for dest, matcher in self._matchers.values():
            if (result is None or dest not in result) and matcher.matches(headers):
                if result is None:
                    result = {dest}
                else:
                    result.add(dest)
        return _EMPTY if result is None else result

    def _link(self, key: BindingKey, routing_key: str, dest: Destination, arguments: dict[str, Any]) -> None:
        self._matchers[key] = (dest, HeadersMatcher(arguments))

    def _unlink(self, key: BindingKey, routing_key: str, dest: Destination) -> None:
        del self._matchers[key]


class DedupExchange(FanoutExchange):
    """The community deduplication plugin's exchange type: routes like ``fanout``; its cache
    (``x-cache-size`` required) is always on (``dedup.py``)."""

    __slots__ = ()
    TYPE = DEDUP_EXCHANGE_TYPE


_TYPES: dict[str, type[Exchange]] = {
    "direct": DirectExchange,
    "fanout": FanoutExchange,
    "topic": TopicExchange,
    "headers": HeadersExchange,
}
_DELAYABLE = dict(_TYPES)  # what x-delayed-type may name


class DelayedExchange(Exchange):
    """``x-delayed-message``: routes like its ``x-delayed-type`` (an inner exchange of that type
    keeps the routing index); the vhost hands messages with an ``x-delay`` to the broker's delay
    service instead of routing them at once (``delayed.py``).

    Raises:
        PreconditionFailed: ``x-delayed-type`` missing or not a string (the plugin's text).
        CommandInvalid: ``x-delayed-type`` names an unknown exchange type.
    """

    __slots__ = ("inner",)
    TYPE = DELAYED_EXCHANGE_TYPE
    DELAYED = True

    def _init_index(self) -> None:
        value = self.arguments.get("x-delayed-type")
        if amqp_type_name(value) != "longstr":
            raise PreconditionFailed(DELAYED_TYPE_ERROR)
        inner_type = longstr_text(value)
        check_exchange_type(inner_type)
        cls = _DELAYABLE.get(inner_type)
        if cls is None:  # x-delayed-message itself, x-message-deduplication
            raise PreconditionFailed(DELAYED_TYPE_ERROR)
        self.inner: Exchange = cls(self.name, self.durable, self.auto_delete, self.internal, {}, self.vhost)

    @property
    def delayed_type(self) -> str:
        return self.inner.TYPE

    def bind(self, routing_key: str, dest: Destination, arguments: dict[str, Any] | None) -> bool:
        if isinstance(self.inner, HeadersExchange):
            validate_binding_args(arguments)
        return super().bind(routing_key, dest, arguments)

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> Routed:
        return self.inner.route(routing_key, headers)

    def _link(self, key: BindingKey, routing_key: str, dest: Destination, arguments: dict[str, Any]) -> None:
        self.inner._link(key, routing_key, dest, arguments)

    def _unlink(self, key: BindingKey, routing_key: str, dest: Destination) -> None:
        self.inner._unlink(key, routing_key, dest)


class ConsistentHashExchange(Exchange):
    """``x-consistent-hash`` (the ``rabbitmq_consistent_hash_exchange`` plugin): each message goes to
    one destination, chosen by hashing its routing key, a header or a property onto a ring of
    buckets weighted by the bindings' keys (``chash.py``).

    Raises:
        PreconditionFailed: ``hash-header`` with ``hash-property``, or an unsupported property.
        ChannelCrashed: either argument is not a long string (541, as the plugin's crash).
    """

    __slots__ = ("source", "ring", "_cache")
    TYPE = CHASH_EXCHANGE_TYPE
    BY_MESSAGE = True
    CACHE_SIZE: ClassVar[int] = 4096

    def _init_index(self) -> None:
        self.source = HashSource(self.arguments)
        self.ring = HashRing()
        self._cache: dict[bytes | str | None, Routed] = {}

    def bind(self, routing_key: str, dest: Destination, arguments: dict[str, Any] | None) -> bool:
        """Add a binding whose routing key is its weight.

        Raises:
            PreconditionFailed: the key is not an integer of at least 1 (``chash.binding_weight``).
        """
        binding_weight(routing_key)
        return super().bind(routing_key, dest, arguments)

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> Routed:
        """By ``routing_key`` alone: what ``route_content`` gives a message with no properties."""
        return self.route_content(routing_key, b"\x00\x00")

    def route_content(self, routing_key: str, raw_props: bytes) -> Routed:
        value = self.source.value(routing_key, raw_props)
        cached = self._cache.get(value)
        if cached is not None:
            return cached
        result = self.ring.pick(self.source.phash2(value))
        if value is None or len(value) <= MAX_CACHED:
            if len(self._cache) >= self.CACHE_SIZE:
                self._cache.clear()
            self._cache[value] = result
        return result

    def _link(self, key: BindingKey, routing_key: str, dest: Destination, arguments: dict[str, Any]) -> None:
        self.ring.add(dest, routing_key)
        self._cache.clear()

    def _unlink(self, key: BindingKey, routing_key: str, dest: Destination) -> None:
        self.ring.remove(dest, routing_key)
        self._cache.clear()


_TYPES[DELAYED_EXCHANGE_TYPE] = DelayedExchange
_TYPES[DEDUP_EXCHANGE_TYPE] = DedupExchange
_TYPES[CHASH_EXCHANGE_TYPE] = ConsistentHashExchange


def make_exchange(
    name: str,
    type: str,
    durable: bool = False,
    auto_delete: bool = False,
    internal: bool = False,
    arguments: dict[str, Any] | None = None,
    vhost: str = "/",
) -> Exchange:
    """Create a new exchange of ``type``.

    Raises:
        CommandInvalid: unknown type (see ``check_exchange_type``).
        PreconditionFailed: ``alternate-exchange`` is not a string (``arguments.parse_exchange_args``).
    """
    check_exchange_type(type)
    parse_exchange_args(arguments, name, vhost)
    return _TYPES[type](name, durable, auto_delete, internal, arguments, vhost)


def equivalent(
    existing: Exchange,
    type: str,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    arguments: dict[str, Any] | None,
    vhost: str | None = None,
) -> None:
    """Check a non-passive redeclare of ``existing`` against the declared properties.

    Args:
        vhost: for error texts; defaults to ``existing.vhost``.

    Raises:
        CommandInvalid: unknown ``type`` (checked before anything else, as RabbitMQ does).
        PreconditionFailed: ``inequivalent arg 'type' for exchange 'x' in vhost '/': received
            'fanout' but current is 'direct'``; likewise ``durable``, ``auto_delete``,
            ``internal``, then ``alternate-exchange`` (``arguments.assert_args_equivalence``).
    """
    check_exchange_type(type)
    resource = f"exchange '{existing.name}' in vhost '{existing.vhost if vhost is None else vhost}'"
    for flag, received, current in (
        ("type", type, existing.type),
        ("durable", durable, existing.durable),
        ("auto_delete", auto_delete, existing.auto_delete),
        ("internal", internal, existing.internal),
    ):
        if received != current:
            raise PreconditionFailed(
                f"inequivalent arg '{flag}' for {resource}: "
                f"received '{_show(received)}' but current is '{_show(current)}'"
            )
    assert_args_equivalence(existing.arguments, arguments or {}, ("alternate-exchange",), resource)


def _show(value: str | bool) -> str:
    """A flag as ``rabbit_misc:assert_field_equivalence`` prints it: the type is an atom (``~p``:
    ``'x-consistent-hash'`` keeps its quotes inside the text's own), the others booleans."""
    return format_term(Atom(value)) if isinstance(value, str) else erl_term(value)
