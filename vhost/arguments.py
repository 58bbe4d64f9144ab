"""Queue and exchange ``x-`` argument validation and redeclare equivalence, as RabbitMQ 3.10.

Rules (every text below was read back from RabbitMQ 3.10.8; see ``tests/unit/vhost/test_arguments.py``):
- ``queue.declare`` checks, in this order, and reports only the first failure:
  1. ``x-dead-letter-exchange`` must be a longstr:
     ``invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'``.
  2. ``x-queue-type`` (``classic`` or ``quorum``; a stream is refused with a text that says so):
     ``invalid arg 'x-queue-type' for queue 'q' in vhost '/': "unsupported queue type 'foo'"``.
  3. RabbitMQ's ``declare_args`` in its fixed order, whatever the order in the table, for the
     arguments of the queue's type (``CLASSIC_ARGS``/``QUORUM_ARGS``): ``x-expires``, ``x-message-ttl``,
     ``x-dead-letter-routing-key``, ``x-dead-letter-strategy``, ``x-max-length``, ``x-max-length-bytes``,
     ``x-max-in-memory-length``, ``x-max-in-memory-bytes``, ``x-max-priority``, ``x-overflow``,
     ``x-queue-mode``, ``x-queue-version``, ``x-single-active-consumer``,
     ``x-quorum-initial-group-size``, ``x-queue-leader-locator``:
     ``invalid arg 'K' for queue 'q' in vhost '/': <erlang term>``.
  4. Arguments that belong to another queue type, in table order:
     ``invalid arg 'x-max-age' for queue 'q' in vhost '/' of queue type rabbit_classic_queue``
     (``x-max-priority`` on a quorum queue: ``... of queue type rabbit_quorum_queue``).
  5. A quorum queue's declare flags (``check_quorum_properties``), after its arguments: ``invalid
     property 'auto-delete' for queue 'q' in vhost '/'``, then ``'exclusive-owner'``, then ``'non-durable'``.
  Unknown arguments are accepted and ignored. A server-named quorum queue is refused before anything
  else (``check_server_named``: ``Cannot declare a server-named queue for type rabbit_quorum_queue``).
- A quorum queue's ``x-delivery-limit`` is not validated (RabbitMQ 3.10 compares the delivery count
  with whatever it is, in Erlang term order): an integer is the limit (negative ones dead-letter at
  the first return), a float counts as its floor, anything else is a limit never reached.
- On redeclare RabbitMQ validates nothing: it compares the existing queue type's own argument list
  only (``EQUIVALENCE_KEYS`` for classic queues, ``QUORUM_EQUIVALENCE_KEYS`` for quorum queues), so
  ``x-message-ttl: -1`` on an existing queue reports inequivalence, and ``x-max-priority`` on a
  quorum queue is ignored.
- Error texts name AMQP types (``signedint``, ``longstr``, ...): values decoded by
  ``ottermq.amqp.table`` carry their wire tag; plain values are inferred the way pika encodes them
  (``int`` -> ``signedint``, ``long`` outside 32 bits, ``str`` -> ``longstr``, ``bytes`` ->
  ``binary``, ``float`` -> ``double``; see ``values.amqp_type_name``). ``types`` mappings (key ->
  type name) override both.

ottermq extensions (RabbitMQ 3.10 accepts the first and rejects the second on classic queues):
- ``x-ottermq-exact-ttl`` (bool, default false): expire messages at their deadline even when they
  are not at the head of the queue.
- ``x-delivery-limit`` (non-negative integer) on classic queues.
- RabbitMQ 4.3's quorum-queue delayed retry on classic queues: ``x-delayed-retry-type``
  (``disabled``, ``all``, ``failed``, ``returned``), ``x-delayed-retry-min`` / ``-max`` (ms, positive).
- Deduplication (LavinMQ's): ``x-message-deduplication`` and its ``x-cache-*`` arguments, validated
  by ``dedup.dedup_settings``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ottermq.amqp.errors import PreconditionFailed

# the value helpers live in .values; re-exported here for callers of the older layout
from .classic import CLASSIC_ARGUMENTS
from .queue_args import QueueArgs
from .queue_types import QUEUE_TYPES
from .quorum import QUORUM_ARGUMENTS
from .values import amqp_type_name, erl_binary, erl_equal, erl_term, freeze_value, longstr_text

__all__ = [
    "EQUIVALENCE_KEYS",
    "EXACT_TTL_ARG",
    "NEVER",
    "MAX_EXPIRY",
    "OVERFLOW_MODES",
    "QUORUM_EQUIVALENCE_KEYS",
    "QueueArgs",
    "amqp_type_name",
    "assert_args_equivalence",
    "check_args_equivalence",
    "check_consume_arguments",
    "check_flag_equivalence",
    "check_server_named",
    "erl_binary",
    "erl_equal",
    "erl_term",
    "freeze_value",
    "longstr_text",
    "parse_exchange_args",
    "parse_queue_args",
    "queue_type_of",
]

MAX_EXPIRY = 315_360_000_000
"""Largest ``x-message-ttl`` / ``x-expires`` RabbitMQ accepts (ten years in milliseconds)."""

EXACT_TTL_ARG = "x-ottermq-exact-ttl"
OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
QUEUE_MODES = ("default", "lazy")
RETRY_TYPES = ("disabled", "all", "failed", "returned")  # RabbitMQ 4.3's x-delayed-retry-type
QUEUE_VERSIONS = (1, 2)
SUPPORTED_QUEUE_TYPES = tuple(QUEUE_TYPES)
DLX_STRATEGIES = ("at-most-once", "at-least-once")
LEADER_LOCATORS = ("client-local", "balanced", "random", "least-leaders")
# RabbitMQ's types not implemented here (a registered type of the name wins): their module (as its
# texts name it) and their arguments
_UNIMPLEMENTED_TYPES = {
    "stream": (
        "rabbit_stream_queue",
        (
            "x-queue-type",
            "x-max-length-bytes",
            "x-queue-leader-locator",
            "x-max-age",
            "x-stream-max-segment-size-bytes",
            "x-initial-cluster-size",
        ),
    ),
}
# RabbitMQ's module per queue type, as its texts name it
TYPE_MODULES = {
    **{name: module for name, (module, _) in _UNIMPLEMENTED_TYPES.items()},
    **{name: kind.module for name, kind in QUEUE_TYPES.items()},
}
NEVER = 2**63
"""A quorum queue's delivery limit when ``x-delivery-limit`` is no number: never exceeded (in RabbitMQ
an integer count is below any atom or binary), but a limit all the same (returns go first, see
``vhost/quorum.py``), and the lower of it and a policy's is the policy's."""

EQUIVALENCE_KEYS = CLASSIC_ARGUMENTS
QUORUM_EQUIVALENCE_KEYS = QUORUM_ARGUMENTS


def _other_type_args(queue_type: str) -> frozenset[str]:
    """The arguments of other queue types that RabbitMQ 3.10 refuses on a queue of this type."""
    kind = QUEUE_TYPES[queue_type]
    every = frozenset(k for other in QUEUE_TYPES.values() for k in other.arguments)
    every |= frozenset(k for _, keys in _UNIMPLEMENTED_TYPES.values() for k in keys)
    return every - frozenset(kind.arguments) - kind.foreign_arguments


_INTEGER_TYPES = frozenset(
    {"byte", "short", "signedint", "long", "unsignedbyte", "unsignedshort", "unsignedint"}
)
_TYPE_CLASS = {
    "byte": "int",
    "short": "int",
    "signedint": "int",
    "long": "int",
    "decimal": "int",
    "unsignedbyte": "int",
    "unsignedshort": "int",
    "unsignedint": "int",
    "float": "float",
    "double": "float",
}

Types = Mapping[str, str] | None


def _type_of(key: str, value: object, types: Types) -> str:
    if types is not None:
        name = types.get(key)
        if name is not None:
            return name
    return amqp_type_name(value)


def _plain(value: object) -> str:
    """Erlang ``~s`` of a binary (its text; invalid UTF-8 shown as Latin-1), else ``~p``."""
    if isinstance(value, str | bytes | bytearray | memoryview):
        raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("latin-1")
    return erl_term(value)


def _val_untyped(value: object) -> str:
    """rabbit_misc:val/1 of a bare value (a void value prints as ``none``, like a missing one)."""
    return "none" if value is None else f"'{_plain(value)}'"


def _val_typed(value: object, type_name: str) -> str:
    return f"the value '{_plain(value)}' of type '{type_name}'"


# ---------------------------------------------------------------------------------------------
# Redeclare equivalence
# ---------------------------------------------------------------------------------------------
def check_flag_equivalence(name: str, flag: str, received: bool, current: bool, vhost: str = "/") -> None:
    """Compare a queue's ``durable`` / ``auto_delete`` flag on redeclare.

    Raises:
        PreconditionFailed: ``inequivalent arg 'durable' for queue 'q' in vhost '/': received
            'true' but current is 'false'``.
    """
    if received != current:
        raise PreconditionFailed(
            f"inequivalent arg '{flag}' for queue '{name}' in vhost '{vhost}': "
            f"received '{erl_term(received)}' but current is '{erl_term(current)}'"
        )


def assert_args_equivalence(
    current: Mapping[str, Any],
    received: Mapping[str, Any],
    keys: tuple[str, ...],
    resource: str,
    current_types: Types = None,
    received_types: Types = None,
) -> None:
    """RabbitMQ's ``rabbit_misc:assert_args_equivalence`` over ``keys``.

    Args:
        resource: ``queue 'q' in vhost '/'`` or ``exchange 'x' in vhost '/'``.

    Raises:
        PreconditionFailed: for the first key (in ``keys`` order) whose values differ.
    """
    for key in keys:
        has_old, has_new = key in current, key in received
        if not has_old and not has_new:
            continue
        old, new = current.get(key), received.get(key)
        if has_old and has_new:
            old_type = _type_of(key, old, current_types)
            new_type = _type_of(key, new, received_types)
            same_class = _TYPE_CLASS.get(old_type, old_type) == _TYPE_CLASS.get(new_type, new_type)
            if (same_class and erl_equal(old, new)) or erl_equal(old, new, exact=True):
                continue
            shown_new, shown_old = _val_untyped(new), _val_untyped(old)
        else:
            present, types = (old, current_types) if has_old else (new, received_types)
            type_name = _type_of(key, present, types)
            if key == "x-queue-type" and type_name == "longstr" and present == "classic":
                continue
            shown_new = _val_typed(new, type_name) if has_new else "none"
            shown_old = _val_typed(old, type_name) if has_old else "none"
        raise PreconditionFailed(
            f"inequivalent arg '{key}' for {resource}: received {shown_new} but current is {shown_old}"
        )


def check_args_equivalence(
    existing_raw: Mapping[str, Any] | None,
    new_raw: Mapping[str, Any] | None,
    queue: str,
    vhost: str = "/",
    *,
    existing_types: Types = None,
    new_types: Types = None,
    queue_type: str = "classic",
) -> None:
    """Compare a redeclared queue's arguments with the existing ones: the arguments of the existing
    queue's type only (``EQUIVALENCE_KEYS``, ``QUORUM_EQUIVALENCE_KEYS``).

    Raises:
        PreconditionFailed: e.g. ``inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/':
            received the value '2000' of type 'signedint' but current is none`` or ``... received
            '2000' but current is '1000'``.
    """
    assert_args_equivalence(
        existing_raw or {},
        new_raw or {},
        QUEUE_TYPES[queue_type].arguments,
        f"queue '{queue}' in vhost '{vhost}'",
        existing_types,
        new_types,
    )


# ---------------------------------------------------------------------------------------------
# queue.declare validation
# ---------------------------------------------------------------------------------------------
class _Invalid(Exception):
    """An argument check failed; ``term`` is what RabbitMQ prints after the colon."""

    def __init__(self, term: str) -> None:
        super().__init__(term)
        self.term = term


def _expected_integer(type_name: str) -> _Invalid:
    return _Invalid(f'"expected integer, got {type_name}"')


def _int_arg(value: object, type_name: str) -> int:
    if type_name not in _INTEGER_TYPES or not isinstance(value, int) or isinstance(value, bool):
        raise _expected_integer(type_name)
    return value


def _non_neg_int(value: object, type_name: str) -> int:
    number = _int_arg(value, type_name)
    if number < 0:
        raise _Invalid(f"{{value_negative,{number}}}")
    return number


def _expiry(number: int) -> int:
    if number > MAX_EXPIRY:
        raise _Invalid(f"{{value_too_large,{number}}}")
    if number < 0:
        raise _Invalid(f"{{value_negative,{number}}}")
    return number


def _longstr(value: object, type_name: str) -> str:
    if type_name != "longstr":
        raise _Invalid(f"{{unacceptable_type,{type_name}}}")
    return longstr_text(value)


def _unsupported(what: str, value: object) -> _Invalid:
    return _Invalid(f"\"unsupported {what} '{_plain(value)}'\"")


def queue_type_of(arguments: Mapping[str, Any] | None, types: Types = None) -> str | None:
    """The ``x-queue-type`` a declare asks for: ``classic`` without one, None when it is no longstr."""
    if not arguments or "x-queue-type" not in arguments:
        return "classic"
    value = arguments["x-queue-type"]
    if _type_of("x-queue-type", value, types) != "longstr":
        return None
    return longstr_text(value)


def check_consume_arguments(arguments: Mapping[str, Any] | None, queue: str, vhost: str = "/") -> None:
    """``basic.consume``'s arguments as RabbitMQ 3.10 checks them first (``rabbit_amqqueue``'s
    ``check_consume_arguments``): ``x-priority`` is an integer.

    Raises:
        PreconditionFailed: ``invalid arg 'x-priority' for queue 'q' in vhost '/': "expected integer,
            got longstr"``.
    """
    if arguments and "x-priority" in arguments:
        value = arguments["x-priority"]
        try:
            _int_arg(value, _type_of("x-priority", value, None))
        except _Invalid as invalid:
            raise PreconditionFailed(
                f"invalid arg 'x-priority' for queue '{queue}' in vhost '{vhost}': {invalid.term}"
            ) from None


def check_server_named(arguments: Mapping[str, Any] | None, types: Types = None) -> None:
    """A server-named queue (``queue.declare`` with an empty name) must be a classic one; checked
    before anything else (RabbitMQ's channel, before it generates the name).

    Raises:
        PreconditionFailed: ``Cannot declare a server-named queue for type rabbit_quorum_queue``.
    """
    name = queue_type_of(arguments, types) or "classic"
    kind = QUEUE_TYPES.get(name)
    if name in TYPE_MODULES and (kind is None or not kind.server_named):  # (an unknown type: refused later)
        raise PreconditionFailed(f"Cannot declare a server-named queue for type {TYPE_MODULES[name]}")


def _lenient_delivery_limit(value: object) -> int:
    """A quorum queue's ``x-delivery-limit``: see the module rules."""
    if isinstance(value, bool):
        return NEVER
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return math.floor(value)
    return NEVER


def parse_queue_args(
    arguments: Mapping[str, Any] | None,
    queue: str,
    vhost: str = "/",
    max_priority_cap: int = 255,
    *,
    types: Types = None,
) -> QueueArgs:
    """Validate ``queue.declare`` arguments exactly as RabbitMQ 3.10 does for a new queue.

    Args:
        arguments: the decoded argument table (None or empty for none).
        queue: queue name, for error texts.
        vhost: vhost name, for error texts.
        max_priority_cap: highest accepted ``x-max-priority`` (RabbitMQ: 255).
        types: optional wire type names per key (see the module docstring).

    Returns:
        The parsed ``QueueArgs``.

    Raises:
        PreconditionFailed: with RabbitMQ's text for the first invalid argument.
    """
    args: Mapping[str, Any] = arguments or {}
    resource = f"queue '{queue}' in vhost '{vhost}'"

    def type_of(key: str) -> str:
        return _type_of(key, args[key], types)

    if "x-dead-letter-exchange" in args and type_of("x-dead-letter-exchange") != "longstr":
        raise PreconditionFailed(
            f"invalid type '{type_of('x-dead-letter-exchange')}' for arg "
            f"'x-dead-letter-exchange' in {resource}"
        )
    key = ""
    try:
        queue_type = "classic"
        if "x-queue-type" in args:
            key = "x-queue-type"
            queue_type = _longstr(args[key], type_of(key))
            if queue_type not in QUEUE_TYPES and queue_type in _UNIMPLEMENTED_TYPES:
                raise _Invalid(
                    f"\"unsupported queue type '{queue_type}'\" (ottermq does not implement {queue_type}s)"
                )
            if queue_type not in QUEUE_TYPES:
                raise _unsupported("queue type", queue_type)
        qtype = QUEUE_TYPES[queue_type]
        own = qtype.arguments
        parsed: dict[str, Any] = {}
        for key, check in _DECLARE_CHECKS:
            if key in args and key in own:
                parsed[key] = check(args[key], type_of(key), args, max_priority_cap)
        others = _other_type_args(queue_type)
        for key in args:
            if key in others:
                raise PreconditionFailed(
                    f"invalid arg '{key}' for {resource} of queue type {TYPE_MODULES[queue_type]}"
                )
        delivery_limit = None
        exact_ttl = False
        retry: dict[str, Any] = {}
        for key, value in args.items():  # ottermq extensions, checked last
            if key == "x-delivery-limit":
                if qtype.lenient_delivery_limit:
                    delivery_limit = _lenient_delivery_limit(value)
                else:
                    delivery_limit = _non_neg_int(value, type_of(key))
            elif key == "x-delayed-retry-type":
                kind = _longstr(value, type_of(key))
                if kind not in RETRY_TYPES:
                    raise _unsupported("delayed retry type", kind)
                retry["delayed_retry_type"] = kind
            elif key in ("x-delayed-retry-min", "x-delayed-retry-max"):
                number = _non_neg_int(value, type_of(key))
                if number == 0:
                    raise _Invalid("{value_zero,0}")
                if number > MAX_EXPIRY:  # a retry is due at now + delay (vhost.bounds)
                    raise _Invalid(f"{{value_too_large,{number}}}")
                retry["delayed_retry_" + key[-3:]] = number
            elif key == EXACT_TTL_ARG:
                if type_of(key) != "bool":
                    raise _Invalid(f"{{unacceptable_type,{type_of(key)}}}")
                exact_ttl = bool(value)
    except _Invalid as invalid:
        raise PreconditionFailed(f"invalid arg '{key}' for {resource}: {invalid.term}") from None
    return QueueArgs(
        message_ttl=parsed.get("x-message-ttl"),
        expires=parsed.get("x-expires"),
        max_length=parsed.get("x-max-length"),
        max_length_bytes=parsed.get("x-max-length-bytes"),
        overflow=parsed.get("x-overflow", "drop-head"),
        dead_letter_exchange=(
            longstr_text(args["x-dead-letter-exchange"]) if "x-dead-letter-exchange" in args else None
        ),
        dead_letter_routing_key=parsed.get("x-dead-letter-routing-key"),
        max_priority=parsed.get("x-max-priority"),
        delivery_limit=delivery_limit,
        single_active_consumer=parsed.get("x-single-active-consumer", False),
        queue_mode=parsed.get("x-queue-mode", "default"),
        exact_ttl=exact_ttl,
        queue_type=queue_type,
        raw=dict(args),
        **retry,
    )


def _check_expires(value: object, type_name: str, _args: Mapping[str, Any], _cap: int) -> int:
    number = _int_arg(value, type_name)
    if number == 0:
        raise _Invalid("{value_zero,0}")
    return _expiry(number)


def _check_ttl(value: object, type_name: str, _args: Mapping[str, Any], _cap: int) -> int:
    return _expiry(_int_arg(value, type_name))


def _check_dlrk(value: object, type_name: str, args: Mapping[str, Any], _cap: int) -> str:
    routing_key = _longstr(value, type_name)
    if "x-dead-letter-exchange" not in args:
        raise _Invalid("routing_key_but_no_dlx_defined")
    return routing_key


def _check_non_neg(value: object, type_name: str, _args: Mapping[str, Any], _cap: int) -> int:
    return _non_neg_int(value, type_name)


def _check_priority(value: object, type_name: str, _args: Mapping[str, Any], cap: int) -> int:
    number = _non_neg_int(value, type_name)
    if number > cap:
        raise _Invalid(f"{{max_value_exceeded,{number}}}")
    return number


def _check_overflow(value: object, type_name: str, _args: Mapping[str, Any], _cap: int) -> str:
    mode = _longstr(value, type_name)
    if mode not in OVERFLOW_MODES:
        raise _Invalid("invalid_overflow")
    return mode


def _check_mode(value: object, type_name: str, _args: Mapping[str, Any], _cap: int) -> str:
    mode = _longstr(value, type_name)
    if mode not in QUEUE_MODES:
        raise _unsupported("queue mode", mode)
    return mode


def _check_version(value: object, type_name: str, _args: Mapping[str, Any], _cap: int) -> int:
    version = _non_neg_int(value, type_name)
    if version not in QUEUE_VERSIONS:
        raise _unsupported("queue version", version)
    return version


def _check_sac(value: object, type_name: str, _args: Mapping[str, Any], _cap: int) -> bool:
    if type_name != "bool":
        raise _Invalid(f"{{unacceptable_type,{type_name}}}")
    return bool(value)


def _check_dls(value: object, type_name: str, _args: Mapping[str, Any], _cap: int) -> str:
    strategy = _longstr(value, type_name)
    if strategy not in DLX_STRATEGIES:
        raise _Invalid("invalid_dlx_strategy")
    return strategy


def _check_group_size(value: object, type_name: str, _args: Mapping[str, Any], _cap: int) -> int:
    number = _non_neg_int(value, type_name)
    if number == 0:
        raise _Invalid("{value_zero,0}")
    return number


def _check_locator(value: object, type_name: str, _args: Mapping[str, Any], _cap: int) -> str:
    locator = _longstr(value, type_name)
    if locator not in LEADER_LOCATORS:
        raise _Invalid("invalid_queue_locator_arg")
    return locator


# RabbitMQ's declare_args, in its order; each queue type checks those of its own arguments
_DECLARE_CHECKS = (
    ("x-expires", _check_expires),
    ("x-message-ttl", _check_ttl),
    ("x-dead-letter-routing-key", _check_dlrk),
    ("x-dead-letter-strategy", _check_dls),
    ("x-max-length", _check_non_neg),
    ("x-max-length-bytes", _check_non_neg),
    ("x-max-in-memory-length", _check_non_neg),
    ("x-max-in-memory-bytes", _check_non_neg),
    ("x-max-priority", _check_priority),
    ("x-overflow", _check_overflow),
    ("x-queue-mode", _check_mode),
    ("x-queue-version", _check_version),
    ("x-single-active-consumer", _check_sac),
    ("x-quorum-initial-group-size", _check_group_size),
    ("x-queue-leader-locator", _check_locator),
)


# ---------------------------------------------------------------------------------------------
# exchange.declare validation
# ---------------------------------------------------------------------------------------------
def parse_exchange_args(
    arguments: Mapping[str, Any] | None, exchange: str, vhost: str = "/", *, types: Types = None
) -> str | None:
    """Validate a new exchange's arguments; returns its ``alternate-exchange`` (or None).

    RabbitMQ checks only that ``alternate-exchange`` is a longstr (it may name a missing exchange,
    the exchange itself or ``""``); every other argument is accepted and ignored.

    Raises:
        PreconditionFailed: ``invalid type 'signedint' for arg 'alternate-exchange' in exchange
            'x' in vhost '/'``.
    """
    if not arguments or "alternate-exchange" not in arguments:
        return None
    value = arguments["alternate-exchange"]
    type_name = _type_of("alternate-exchange", value, types)
    if type_name != "longstr":
        raise PreconditionFailed(
            f"invalid type '{type_name}' for arg 'alternate-exchange' in exchange '{exchange}' "
            f"in vhost '{vhost}'"
        )
    return longstr_text(value)
