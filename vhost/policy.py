"""Policies and operator policies (issue 15): validation, matching and merging, as RabbitMQ 3.10 does them.

Pure: no I/O, no broker state. ``VHost`` keeps the policies and applies :func:`effective_args` to its
queues; the management API validates with :func:`make_policy`.

Rules:

1. A policy has ``pattern`` (a regular expression *searched* in the queue or exchange name),
   ``apply-to`` (``all``, ``queues``, ``exchanges``; and RabbitMQ 3.12's ``classic_queues`` and
   ``quorum_queues``, which match queues of that type, and ``streams``, which matches nothing),
   ``priority`` (an integer, default 0) and a non-empty ``definition``. Invalid ones raise
   :class:`PolicyError` with RabbitMQ's text (its ``Validation failed`` reasons, Erlang terms as
   ``~p`` prints them).
2. Of the policies that match an object, the one with the highest priority applies (ties: the
   first by name); at most one user policy and one operator policy apply to an object.
3. A queue's effective settings merge, key by key:
   - user and operator policy: the lower value of ``message-ttl``, ``expires``, ``max-length``,
     ``max-length-bytes``, ``delivery-limit``; the operator's ``overflow``; every other key from
     the user policy;
   - then the queue's own ``x-`` arguments: the lower value of ``message-ttl``, ``expires``,
     ``max-length``, ``max-length-bytes``, ``delivery-limit``, ``consumer-timeout``; the argument
     wins for ``dead-letter-exchange``, ``dead-letter-routing-key`` and ``overflow``. A quorum queue
     differs (``rabbit_quorum_queue:ra_machine_config``): the policy wins for ``overflow`` and
     ``expires``; with neither argument nor policy, its ``delivery-limit`` is the node's default
     (``OTTERMQ_QUORUM_DELIVERY_LIMIT``, RabbitMQ 4's 20 when set; unset by default, as 3.10).
4. ``ottermq-exact-ttl`` (true/false) is the policy spelling of the ``x-ottermq-exact-ttl``
   extension argument (policy keys are argument names without ``x-``, as RabbitMQ's are); the
   argument wins when the queue declares it. RabbitMQ refuses the key as not recognised, so a
   policy that uses it is ottermq-only; operator policies do not take it.
5. Keys other RabbitMQ features read (``ha-*``, ``queue-version``, ``max-age``, federation, ...) are
   accepted and have no effect here. A policy holding a key a queue type does not support does not
   apply to a queue of that type, as in RabbitMQ 3.10 (``is_policy_applicable``), which skips it and
   applies the next matching policy: for classic queues the keys of quorum queues and streams
   (``max-age``, ``stream-max-segment-size-bytes``, ``initial-cluster-size``,
   ``dead-letter-strategy``, ``queue-leader-locator``; RabbitMQ skips ``delivery-limit`` policies for
   classic queues too, ottermq applies them, its extension, as the ``x-delivery-limit`` argument
   is); for quorum queues ``max-priority``, ``queue-mode``, ``single-active-consumer``, ``ha-*``,
   ``queue-master-locator`` and the stream keys. Unknown keys are refused (``... are not recognised
   policy settings``). ``consumer-timeout`` is RabbitMQ 3.12's key; 3.10 refuses it.
6. Deduplication keys (ottermq extensions, LavinMQ's queue and exchange arguments without ``x-``):
   ``message-deduplication``, ``cache-size``, ``cache-ttl``, ``deduplication-header``,
   ``cache-persistence``; they apply to queues and exchanges, the argument wins (``dedup.py``).
7. RabbitMQ 4.3's quorum-queue keys ``delayed-retry-type`` / ``-min`` / ``-max`` apply to our classic
   queues (an extension); the argument wins.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ottermq.amqp.erlang import Atom, format_term

from .arguments import QueueArgs
from .bounds import MAX_DURATION, OutOfBounds, check_duration, check_int64
from .patterns import Pattern, PatternError, compile_pattern

# RabbitMQ 3.10's three, and 3.12's queue-type ones (``streams`` matches nothing here)
APPLY_TO = ("all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams")
_APPLIES = {
    "all": ("queue", "exchange"),
    "queues": ("queue",),
    "exchanges": ("exchange",),
    "classic_queues": ("queue",),
    "quorum_queues": ("queue",),
    "streams": (),
}
_QUEUE_TYPE_OF = {"classic_queues": "classic", "quorum_queues": "quorum"}
OVERFLOW = ("drop-head", "reject-publish", "reject-publish-dlx")
RETRY_TYPES = ("disabled", "all", "failed", "returned")
LOWER_WINS = ("message-ttl", "expires", "max-length", "max-length-bytes", "delivery-limit")
# Accepted (RabbitMQ features without a counterpart here), never applied
INERT_KEYS = frozenset(
    {
        "ha-mode",
        "ha-params",
        "ha-sync-mode",
        "ha-sync-batch-size",
        "ha-promote-on-shutdown",
        "ha-promote-on-failure",
        "queue-master-locator",
        "queue-version",
        "max-age",
        "stream-max-segment-size-bytes",
        "federation-upstream",
        "federation-upstream-set",
        "initial-cluster-size",
    }
)
# Keys a queue type does not support: RabbitMQ 3.10 does not apply a policy holding one to a queue of
# that type at all (``is_policy_applicable``), so the next matching policy applies. ``delivery-limit``
# is one for classic queues there; here it is our extension on classic queues (rule 5).
NOT_FOR_CLASSIC = frozenset(
    {
        "max-age",
        "stream-max-segment-size-bytes",
        "initial-cluster-size",
        "dead-letter-strategy",
        "queue-leader-locator",
    }
)
NOT_FOR_QUORUM = frozenset(
    {
        "max-priority",
        "queue-mode",
        "single-active-consumer",
        "ha-mode",
        "ha-params",
        "ha-sync-mode",
        "ha-promote-on-shutdown",
        "ha-promote-on-failure",
        "queue-master-locator",
        "max-age",
        "stream-max-segment-size-bytes",
        "initial-cluster-size",
    }
)
_NOT_FOR = {"classic": NOT_FOR_CLASSIC, "quorum": NOT_FOR_QUORUM}
OPERATOR_KEYS = frozenset(
    {
        "expires",
        "message-ttl",
        "max-length",
        "max-length-bytes",
        "overflow",
        "delivery-limit",
        "max-in-memory-length",
        "max-in-memory-bytes",
    }
)


def kinds_of(apply_to: object) -> tuple[str, ...]:
    """The kinds of object (``queue``, ``exchange``) a policy with this ``apply-to`` may match (any
    value not valid: both, the widest)."""
    return (
        _APPLIES.get(apply_to, ("queue", "exchange")) if isinstance(apply_to, str) else ("queue", "exchange")
    )


class PolicyError(ValueError):
    """A policy RabbitMQ would refuse; ``str(error)`` is RabbitMQ's reason."""


# Keys added to "now" as milliseconds: at most ten years (``bounds`` rule 2); other integers fit 64 bits
DURATIONS = frozenset(
    {"message-ttl", "expires", "consumer-timeout", "cache-ttl", "delayed-retry-min", "delayed-retry-max"}
)


def _bounded(check: Any, value: Any, key: str) -> None:
    """A value RabbitMQ accepts but the store or a deadline cannot hold: refused, naming the key
    (an ottermq bound, ``vhost.bounds``)."""
    try:
        check(value, key)
    except OutOfBounds as exc:
        raise PolicyError(str(exc)) from None


def json_term(value: Any) -> str:
    """A JSON value as RabbitMQ prints the decoded term (``<<"x">>``, ``1.5``, ``true``, ``null``)."""
    if value is None:
        return format_term(Atom("null"))
    if isinstance(value, dict):
        return "#{" + ",".join(f"{json_term(k)} => {json_term(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(json_term(v) for v in value) + "]"
    return format_term(value)


def _non_negative(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _positive(value: Any) -> bool:
    return _non_negative(value) and value >= 1


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _bool(value: Any) -> bool:
    return isinstance(value, bool)


# key -> (check, "is not a valid ..." noun)
CHECKS: dict[str, tuple[Any, str]] = {
    "message-ttl": (_non_negative, "message TTL"),
    "expires": (_positive, "queue expiry"),
    "max-length": (_non_negative, "maximum length"),
    "max-length-bytes": (_non_negative, "maximum length in bytes"),
    "dead-letter-exchange": (_text, "dead letter exchange name"),
    "dead-letter-routing-key": (_text, "dead letter routing key"),
    "overflow": (lambda v: v in OVERFLOW, "overflow value"),
    "delivery-limit": (_non_negative, "delivery limit"),
    "dead-letter-strategy": (lambda v: v in ("at-most-once", "at-least-once"), "dead letter strategy"),
    "max-in-memory-length": (_non_negative, "maximum memory in bytes"),  # sic (RabbitMQ's text)
    "max-in-memory-bytes": (_non_negative, "maximum memory in bytes"),
    "queue-leader-locator": (
        lambda v: v in ("client-local", "balanced", "random", "least-leaders"),
        "queue leader locator value",
    ),
    "alternate-exchange": (_text, "alternate exchange name"),
    "consumer-timeout": (_non_negative, "consumer timeout"),
    "queue-mode": (lambda v: v in ("default", "lazy"), "queue-mode value"),
    # ottermq extensions (rule 4)
    "ottermq-exact-ttl": (_bool, "exact TTL setting (true or false)"),
    # deduplication (LavinMQ's arguments without x-, rule 6) and RabbitMQ 4.3's delayed retry (rule 7)
    "message-deduplication": (_bool, "deduplication setting (true or false)"),
    "cache-size": (_positive, "deduplication cache size"),
    "cache-ttl": (_non_negative, "deduplication cache TTL"),
    "deduplication-header": (lambda v: isinstance(v, str) and v != "", "deduplication header name"),
    "cache-persistence": (lambda v: v in ("memory", "disk"), "cache persistence (memory or disk)"),
    "delayed-retry-type": (lambda v: v in RETRY_TYPES, "delayed retry type"),
    "delayed-retry-min": (_positive, "delayed retry minimum"),
    "delayed-retry-max": (_positive, "delayed retry maximum"),
}


@dataclass(frozen=True, slots=True)
class Policy:
    """One validated policy (user or operator) of a vhost."""

    vhost: str
    name: str
    pattern: str
    apply_to: str
    priority: int
    definition: dict[str, Any]
    operator: bool = False
    regex: Pattern = field(compare=False, repr=False, default=compile_pattern(""))

    def applies(self, kind: str, name: str, queue_type: str = "classic") -> bool:
        """Whether this policy matches the ``kind`` (``queue``/``exchange``) object ``name`` (a queue
        of ``queue_type``: ``classic`` or ``quorum``)."""
        if kind not in _APPLIES[self.apply_to]:
            return False
        if kind == "queue":
            if _QUEUE_TYPE_OF.get(self.apply_to, queue_type) != queue_type:
                return False
            if not _NOT_FOR[queue_type].isdisjoint(self.definition):
                return False  # a key this queue type does not support (rule 5)
        return self.regex.matches(name)  # bounded; out of time counts as no match (logged)

    def as_json(self) -> dict[str, Any]:
        """As the management API shows it."""
        return {
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": dict(self.definition),
            "priority": self.priority,
        }


def make_policy(
    vhost: str,
    name: str,
    pattern: Any,
    definition: Any,
    apply_to: Any = "all",
    priority: Any = 0,
    *,
    operator: bool = False,
) -> Policy:
    """A validated policy.

    Raises:
        PolicyError: RabbitMQ's reason, without its ``Validation failed`` prefix.
    """
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise PolicyError(f"priority should be a number, actually was {json_term(priority)}")
    _bounded(check_int64, priority, "priority")
    if apply_to not in APPLY_TO:
        shown = f"'{apply_to}'" if isinstance(apply_to, str) else json_term(apply_to)
        raise PolicyError(f"apply-to {shown} unrecognised; should be 'queues', 'exchanges' or 'all'")
    if not isinstance(pattern, str):
        raise PolicyError(f"pattern should be a string, actually was {json_term(pattern)}")
    try:
        regex = compile_pattern(pattern)
    except PatternError as exc:
        raise PolicyError(f"pattern should be regular expression but is invalid: {exc}") from None
    if not isinstance(definition, dict) or not definition:
        raise PolicyError("no policy provided")
    known = OPERATOR_KEYS if operator else CHECKS.keys() | INERT_KEYS
    unknown = [(k, v) for k, v in sorted(definition.items()) if k not in known]
    if unknown:
        terms = ",".join("{" + json_term(k) + "," + json_term(v) + "}" for k, v in unknown)
        raise PolicyError(f"[{terms}] are not recognised policy settings")
    for key, value in sorted(definition.items()):
        check = CHECKS.get(key)
        if check is not None and not check[0](value):
            raise PolicyError(f"{json_term(value)} is not a valid {check[1]}")
        _bounded(check_duration if key in DURATIONS else check_int64, value, key)
    return Policy(vhost, name, pattern, apply_to, priority, dict(definition), operator, regex)


def choose(policies: Iterable[Policy], kind: str, name: str, queue_type: str = "classic") -> Policy | None:
    """The policy that applies to ``name`` (a queue of ``queue_type``): the highest priority among
    those matching, ties by name."""
    best: Policy | None = None
    for policy in sorted(policies, key=lambda p: p.name):
        if policy.applies(kind, name, queue_type) and (best is None or policy.priority > best.priority):
            best = policy
    return best


def merge(user: Policy | None, operator: Policy | None) -> dict[str, Any]:
    """The definition in force from a user and an operator policy (rule 3, first step)."""
    merged = dict(user.definition) if user is not None else {}
    if operator is None:
        return merged
    for key, value in operator.definition.items():
        if key in LOWER_WINS and key in merged:
            merged[key] = min(merged[key], value)
        else:
            merged[key] = value  # the operator's overflow, or a key the user policy lacks
    return merged


# policy key -> QueueArgs field
_QUEUE_FIELDS = {
    "message-ttl": "message_ttl",
    "expires": "expires",
    "max-length": "max_length",
    "max-length-bytes": "max_length_bytes",
    "delivery-limit": "delivery_limit",
    "dead-letter-exchange": "dead_letter_exchange",
    "dead-letter-routing-key": "dead_letter_routing_key",
    "overflow": "overflow",
    "ottermq-exact-ttl": "exact_ttl",
    "queue-mode": "queue_mode",
    "delayed-retry-type": "delayed_retry_type",
    "delayed-retry-min": "delayed_retry_min",
    "delayed-retry-max": "delayed_retry_max",
}
# a quorum queue's policy value wins over its argument (``policyHasPrecedence``)
_QUORUM_POLICY_WINS = ("overflow", "expires")
_ARGUMENT_WINS = (
    "queue-mode",
    "dead-letter-exchange",
    "dead-letter-routing-key",
    "overflow",
    "ottermq-exact-ttl",
    "delayed-retry-type",
    "delayed-retry-min",
    "delayed-retry-max",
)


def effective_args(
    declared: QueueArgs, definition: Mapping[str, Any], quorum_delivery_limit: int | None = None
) -> QueueArgs:
    """``declared`` (a queue's own arguments) with a merged policy ``definition`` applied (rule 3,
    second step); a quorum queue left without a delivery limit gets ``quorum_delivery_limit``.
    ``raw`` stays the declared table, so declare-equivalence is unchanged."""
    changes: dict[str, Any] = {}
    quorum = declared.queue_type == "quorum"
    for key, attribute in _QUEUE_FIELDS.items():
        if key not in definition:
            continue
        value = definition[key]
        own = getattr(declared, attribute)
        argument_given = f"x-{key}" in declared.raw
        if quorum and key in _QUORUM_POLICY_WINS:
            changes[attribute] = value
        elif key in _ARGUMENT_WINS:
            if not argument_given:
                changes[attribute] = value
        elif own is None:
            changes[attribute] = value
        else:
            changes[attribute] = min(own, value)
    if quorum and quorum_delivery_limit is not None:
        if changes.get("delivery_limit", declared.delivery_limit) is None:
            changes["delivery_limit"] = quorum_delivery_limit
    return dataclasses.replace(declared, **changes) if changes else declared


def consumer_timeout(declared: QueueArgs, definition: Mapping[str, Any], default: int | None) -> int | None:
    """Milliseconds a delivery may stay unacked on this queue: the lower of the queue's
    ``x-consumer-timeout``, the policy's ``consumer-timeout`` and the node's default (None = off)."""
    values = [
        v
        for v in (declared.raw.get("x-consumer-timeout"), definition.get("consumer-timeout"), default)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0
    ]
    return min(min(values), MAX_DURATION) if values else None  # a timer at now + timeout (bounds)
