"""The one definitions applier: every way definitions come in ends here.

- start-up (``OTTERMQ_DEFINITIONS_FILE``): ``Node.open`` recovers the store, then applies the file;
- the HTTP API (``POST /api/definitions`` and ``/api/definitions/{vhost}``);
- the command line offline (``ottermq definitions import FILE`` without ``--url``): a node opened on
  the data directory's store (as a start-up would), the file applied, the node closed.

Rules (RabbitMQ's import):
1. ``check_references`` is the one validator beyond the JSON parser: every permission, exchange,
   queue, binding, policy and limit must name a user and a vhost that exists in the node or in
   the definitions; otherwise ``DefinitionsError`` and nothing is applied.
2. ``apply_definitions`` then performs each item through the node's services, the broker itself
   acting (no permission checks, as an administrator's import): vhosts created, users created or
   replaced, permissions set; exchanges and queues declared through the operations layer when
   missing (durable ones reach the store as a client's declare would), existing ones left as they
   are; bindings made when both ends exist (else skipped with a warning); policies and limits set.
3. It raises what those operations raise (``AuthError``, ``PolicyError``, ``LimitError``, an
   ``AMQPError`` for a declare or bind the broker refuses); each way in translates it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from ottermq.amqp.table import decode_table
from ottermq.persistence.store import Definitions
from ottermq.vhost.vhost import VHost

from ..auth import AuthDB
from ..operations import Operations
from .arguments import DefinitionsError

log = logging.getLogger(__name__)

Durability = Callable[[str, str, str], bool]  # (kind "exchange"/"queue", vhost, name) -> durable


class Target(Protocol):
    """What the applier changes: a node's users and vhosts, its vhosts' topology."""

    auth: AuthDB
    ops: Operations
    vhosts: dict[str, VHost]

    def add_vhost(self, name: str, description: str = "", tags: list[str] | None = None) -> bool: ...


def check_references(defs: Definitions, users: Iterable[str], vhosts: Iterable[str]) -> None:
    """Rule 1: ``users`` and ``vhosts`` are those that exist already.

    Raises:
        DefinitionsError: an item names a user or vhost that exists neither there nor in ``defs``.
    """
    known_users = set(users) | {u.name for u in defs.users}
    known_vhosts = set(vhosts) | {v.name for v in defs.vhosts}
    for p in defs.permissions:
        if p.user not in known_users:
            raise DefinitionsError(f"permission of user '{p.user}' in vhost '{p.vhost}': no such user")
        if p.vhost not in known_vhosts:
            raise DefinitionsError(f"permission of user '{p.user}' in vhost '{p.vhost}': no such vhost")
    entities = [("exchange", x.vhost, x.name) for x in defs.exchanges]
    entities += [("queue", q.vhost, q.name) for q in defs.queues]
    entities += [("binding to exchange", b.vhost, b.source) for b in defs.bindings]
    entities += [("operator policy" if p.operator else "policy", p.vhost, p.name) for p in defs.policies]
    for kind, vhost, name in entities:
        if vhost not in known_vhosts:
            raise DefinitionsError(f"{kind} '{name}' in vhost '{vhost}': no such vhost")
    for r in defs.limits:
        if r.kind == "vhost" and r.owner not in known_vhosts:
            raise DefinitionsError(f"limits of vhost '{r.owner}': no such vhost")
        if r.kind == "user" and r.owner not in known_users:
            raise DefinitionsError(f"limits of user '{r.owner}': no such user")


def apply_definitions(node: Target, defs: Definitions, durable: Durability | None = None) -> Definitions:
    """Check ``defs`` (rule 1), then apply them to ``node`` (rule 2).

    Args:
        node: the node to change.
        defs: parsed definitions.
        durable: the ``durable`` flag of each exchange and queue (default: all durable, as a
            definitions file read for start-up keeps only durable ones).

    Returns:
        What changed: the vhosts, users, permissions, policies and limits set, and the exchanges,
        queues and bindings created.

    Raises:
        DefinitionsError: rule 1.
        AuthError, PolicyError, LimitError, AMQPError: rule 3.
    """
    check_references(defs, node.auth.users, node.auth.vhosts)
    is_durable = durable or (lambda _kind, _vhost, _name: True)
    auth, ops = node.auth, node.ops  # the broker itself acts: no permission checks
    done = Definitions()
    for v in defs.vhosts:
        node.add_vhost(v.name, v.description, v.tags)
        done.vhosts.append(v)
    for u in defs.users:
        auth.put_user(u)
        done.users.append(u)
    for p in defs.permissions:
        auth.set_permissions(p.user, p.vhost, p.configure, p.write, p.read)
        done.permissions.append(p)
    for x in defs.exchanges:
        vhost = node.vhosts[x.vhost]
        if x.name in vhost.exchanges:
            log.info("exchange '%s' in vhost '%s' already exists; left unchanged", x.name, x.vhost)
            continue
        ops.declare_exchange(
            None,
            vhost,
            x.name,
            x.type,
            durable=is_durable("exchange", x.vhost, x.name),
            auto_delete=x.auto_delete,
            internal=x.internal,
            arguments=decode_table(x.arguments)[0],
        )
        done.exchanges.append(x)
    for q in defs.queues:
        vhost = node.vhosts[q.vhost]
        if q.name in vhost.queues:
            log.info("queue '%s' in vhost '%s' already exists; left unchanged", q.name, q.vhost)
            continue
        ops.declare_queue(
            None,
            vhost,
            q.name,
            durable=is_durable("queue", q.vhost, q.name),
            auto_delete=q.auto_delete,
            arguments=decode_table(q.arguments)[0],
        )
        done.queues.append(q)
    for b in defs.bindings:
        vhost = node.vhosts[b.vhost]
        targets = vhost.queues if b.destination_kind == "queue" else vhost.exchanges
        if b.source not in vhost.exchanges or b.destination not in targets:
            log.warning(
                "definitions: skipping binding of %s '%s' to exchange '%s' in vhost '%s': no such %s",
                b.destination_kind,
                b.destination,
                b.source,
                b.vhost,
                "exchange" if b.source not in vhost.exchanges else b.destination_kind,
            )
            continue
        kind = "queue" if b.destination_kind == "queue" else "exchange"
        ops.bind(None, vhost, b.source, (kind, b.destination), b.routing_key, decode_table(b.arguments)[0])
        done.bindings.append(b)
    for pol in defs.policies:  # created or replaced; validated again by the operations layer
        vhost = node.vhosts[pol.vhost]
        definition = json.loads(pol.definition)
        ops.set_policy(vhost, pol.name, pol.pattern, definition, pol.apply_to, pol.priority, pol.operator)
        done.policies.append(pol)
    for limit in defs.limits:
        ops.set_limit(limit.kind, limit.owner, limit.name, limit.value)
        done.limits.append(limit)
    return done
