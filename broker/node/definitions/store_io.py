"""Definitions against the store: ``import_definitions`` (as RabbitMQ imports a definitions file)
and ``export_definitions``; the JSON side is ``json_format``."""

from __future__ import annotations

import dataclasses
import logging

from ottermq.persistence.store import Definitions, Store
from ottermq.vhost.vhost import PREDECLARED

from .json_format import DefinitionsError, binding_key

log = logging.getLogger(__name__)


async def import_definitions(store: Store, defs: Definitions) -> Definitions:
    """Write ``defs`` into ``store`` the way RabbitMQ imports a definitions file, then flush.

    Users, vhosts and permissions are created or replaced. Exchanges and queues that already
    exist are left as they are (a declare of an existing entity changes nothing). Bindings whose
    source or destination exists neither in the store nor in ``defs`` (nor among the predeclared
    ``amq.*`` exchanges) are skipped with a warning, and so are bindings already present.
    Everything is validated before anything is written.

    Returns:
        What was actually written.

    Raises:
        DefinitionsError: a permission names an unknown user or vhost, or a queue or exchange
            (or binding) lives in an unknown vhost.
    """
    current = await store.load_definitions()
    users = {u.name for u in current.users} | {u.name for u in defs.users}
    vhosts = {v.name for v in current.vhosts} | {v.name for v in defs.vhosts}
    for p in defs.permissions:
        if p.user not in users:
            raise DefinitionsError(f"permission of user '{p.user}' in vhost '{p.vhost}': no such user")
        if p.vhost not in vhosts:
            raise DefinitionsError(f"permission of user '{p.user}' in vhost '{p.vhost}': no such vhost")
    entities: list[tuple[str, str, str]] = [("exchange", x.vhost, x.name) for x in defs.exchanges]
    entities += [("queue", q.vhost, q.name) for q in defs.queues]
    entities += [("binding to exchange", b.vhost, b.source) for b in defs.bindings]
    entities += [("operator policy" if p.operator else "policy", p.vhost, p.name) for p in defs.policies]
    for kind, vhost, name in entities:
        if vhost not in vhosts:
            raise DefinitionsError(f"{kind} '{name}' in vhost '{vhost}': no such vhost")
    for r in defs.limits:
        if r.kind == "vhost" and r.owner not in vhosts:
            raise DefinitionsError(f"limits of vhost '{r.owner}': no such vhost")
        if r.kind == "user" and r.owner not in users:
            raise DefinitionsError(f"limits of user '{r.owner}': no such user")

    written = Definitions()
    old_exchanges = {(x.vhost, x.name) for x in current.exchanges}
    old_queues = {(q.vhost, q.name) for q in current.queues}
    for v in defs.vhosts:
        store.put_vhost(dataclasses.replace(v, tags=list(v.tags)))
        written.vhosts.append(v)
    for u in defs.users:
        store.put_user(dataclasses.replace(u, tags=list(u.tags)))
        written.users.append(u)
    for p in defs.permissions:
        store.put_permission(dataclasses.replace(p))
        written.permissions.append(p)
    for x in defs.exchanges:
        if (x.vhost, x.name) in old_exchanges:
            log.info("exchange '%s' in vhost '%s' already exists; left unchanged", x.name, x.vhost)
            continue
        store.put_exchange(dataclasses.replace(x))
        written.exchanges.append(x)
    for q in defs.queues:
        if (q.vhost, q.name) in old_queues:
            log.info("queue '%s' in vhost '%s' already exists; left unchanged", q.name, q.vhost)
            continue
        record = dataclasses.replace(q, id=0)
        store.put_queue(record)
        written.queues.append(record)

    exchanges = old_exchanges | {(x.vhost, x.name) for x in defs.exchanges}
    exchanges |= {(vhost, name) for vhost in vhosts for name, _type, _internal in PREDECLARED}
    queues = old_queues | {(q.vhost, q.name) for q in defs.queues}
    old_bindings = {binding_key(b) for b in current.bindings}
    for b in defs.bindings:
        targets = queues if b.destination_kind == "queue" else exchanges
        if (b.vhost, b.source) not in exchanges or (b.vhost, b.destination) not in targets:
            log.warning(
                "skipping binding of %s '%s' to exchange '%s' in vhost '%s': no such %s",
                b.destination_kind,
                b.destination,
                b.source,
                b.vhost,
                "exchange" if (b.vhost, b.source) not in exchanges else b.destination_kind,
            )
            continue
        if binding_key(b) in old_bindings:
            continue
        old_bindings.add(binding_key(b))
        store.put_binding(dataclasses.replace(b))
        written.bindings.append(b)
    for policy in defs.policies:  # created or replaced, as RabbitMQ's import does
        store.put_policy(dataclasses.replace(policy))
        written.policies.append(policy)
    for limit in defs.limits:  # set, as RabbitMQ's import does
        store.put_limit(dataclasses.replace(limit))
        written.limits.append(limit)
    await store.flush()
    return written


async def export_definitions(store: Store) -> Definitions:
    """Everything durable the store holds, ready for ``definitions_to_json``."""
    return await store.load_definitions()
