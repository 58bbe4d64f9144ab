"""``Definitions`` -> RabbitMQ 3.10's definitions JSON (``rabbitmqctl export_definitions``'s key
names and shapes), so ``rabbitmqctl import_definitions`` and ``POST /api/definitions`` accept the
result. One deliberate difference: RabbitMQ 3.10 leaves internal exchanges out of its exports (while
keeping bindings to them); we export them with ``"internal": true`` (a key RabbitMQ's import reads),
so a round trip loses nothing."""

from __future__ import annotations

import json
from typing import Any

from ottermq.persistence.store import Definitions, LimitRecord, ParameterRecord, PolicyRecord, QueueRecord

from .arguments import arguments_to_json
from .components import OPERATOR_POLICY, VHOST_LIMITS


def policies_to_json(policies: list[PolicyRecord]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(policies, parameters)`` sections in RabbitMQ's export shapes: user policies, and operator
    policies as ``operator_policy`` runtime parameters."""
    users, operators = [], []
    for p in policies:
        value = {
            "pattern": p.pattern,
            "definition": json.loads(p.definition),
            "priority": p.priority,
            "apply-to": p.apply_to,
        }
        if p.operator:
            operators.append({"value": value, "vhost": p.vhost, "component": OPERATOR_POLICY, "name": p.name})
        else:
            users.append(
                {
                    "vhost": p.vhost,
                    "name": p.name,
                    "pattern": p.pattern,
                    "apply-to": p.apply_to,
                    "definition": value["definition"],
                    "priority": p.priority,
                }
            )
    return users, operators


def limits_of(defs_limits: list[LimitRecord], kind: str, owner: str) -> dict[str, int]:
    return {r.name: r.value for r in defs_limits if r.kind == kind and r.owner == owner}


def vhost_limit_parameters(limits: list[LimitRecord]) -> list[dict[str, Any]]:
    """``vhost-limits`` runtime parameters, as RabbitMQ exports them."""
    owners = sorted({r.owner for r in limits if r.kind == "vhost"})
    return [
        {"value": limits_of(limits, "vhost", v), "vhost": v, "component": VHOST_LIMITS, "name": "limits"}
        for v in owners
    ]


def parameter_json(p: ParameterRecord) -> dict[str, Any]:
    """A component's parameter (a shovel's) in RabbitMQ's export shape."""
    return {"value": json.loads(p.value), "vhost": p.vhost, "component": p.component, "name": p.name}


def definitions_to_json(defs: Definitions, version: str) -> dict[str, Any]:
    """RabbitMQ 3.10's export shape for ``defs`` (all queues and exchanges are durable).

    Args:
        defs: what to export.
        version: written as ``rabbit_version`` and ``rabbitmq_version``.
    """
    return {
        "rabbit_version": version,
        "rabbitmq_version": version,
        "users": [
            {
                "name": u.name,
                "password_hash": u.password_hash,
                "hashing_algorithm": u.hashing_algorithm,
                "tags": list(u.tags),
                "limits": limits_of(defs.limits, "user", u.name),
            }
            for u in defs.users
        ],
        "vhosts": [
            {
                "name": v.name,
                "limits": [list(kv) for kv in limits_of(defs.limits, "vhost", v.name).items()],
                "metadata": {"description": v.description, "tags": list(v.tags)},
            }
            for v in defs.vhosts
        ],
        "permissions": [
            {"user": p.user, "vhost": p.vhost, "configure": p.configure, "write": p.write, "read": p.read}
            for p in defs.permissions
        ],
        "topic_permissions": [],
        "parameters": policies_to_json(defs.policies)[1]
        + vhost_limit_parameters(defs.limits)
        + [parameter_json(p) for p in defs.parameters],
        "global_parameters": [],
        "policies": policies_to_json(defs.policies)[0],
        "queues": [_queue_json(q) for q in defs.queues],
        "exchanges": [
            {
                "name": x.name,
                "vhost": x.vhost,
                "type": x.type,
                "durable": True,
                "auto_delete": x.auto_delete,
                "internal": x.internal,
                "arguments": arguments_to_json(x.arguments),
            }
            for x in defs.exchanges
        ],
        "bindings": [
            {
                "source": b.source,
                "vhost": b.vhost,
                "destination": b.destination,
                "destination_type": b.destination_kind,
                "routing_key": b.routing_key,
                "arguments": arguments_to_json(b.arguments),
            }
            for b in defs.bindings
        ],
    }


def _queue_json(q: QueueRecord) -> dict[str, Any]:
    arguments = arguments_to_json(q.arguments)
    queue_type = arguments.get("x-queue-type", "classic")
    return {
        "name": q.name,
        "vhost": q.vhost,
        "durable": True,
        "auto_delete": q.auto_delete,
        "arguments": arguments,
        "type": queue_type if isinstance(queue_type, str) else "classic",
    }
