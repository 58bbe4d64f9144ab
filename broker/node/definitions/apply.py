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
   are; bindings made when both ends exist; policies and limits set; component parameters
   (shovels) set through the operations layer, in worker 0 only. The ``ImportReport`` counts what
   was applied and what was left unchanged.
3. A binding the broker refuses (a bind answered with an ``AMQPError``, or one whose end does not
   exist) is skipped and reported with the reason, and the rest is applied, as RabbitMQ's import
   skips a binding it refuses. Otherwise it raises what the operations raise (``AuthError``,
   ``PolicyError``, ``LimitError``, ``ParameterError``, an ``AMQPError`` for a declare the broker
   refuses, which makes RabbitMQ's import fail too); each way in translates it.
4. Restore (``restore=``, start-up recovery, ``recovery.py``): the records are the node's own store's,
   validated when they were written. Rule 1 is not applied (an item of a vhost the node lacks is
   skipped), nothing is written back (recovery detaches the store from the vhosts meanwhile, and
   policies are applied without being stored again), server-named ``amq.gen-`` queues are
   accepted, and an item the broker refuses today (an argument a newer version rejects, a policy
   that no longer validates) is logged, skipped and reported to ``Restore.skipped`` instead of
   raised, so one bad record cannot stop a start-up.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ottermq.amqp.errors import AMQPError
from ottermq.persistence.arguments import decode_arguments
from ottermq.persistence.store import BindingRecord, Definitions, QueueRecord
from ottermq.vhost.queue import Queue
from ottermq.vhost.vhost import VHost

from ..operations import policy_of
from .arguments import DefinitionsError
from .json_format import binding_names
from .report import ImportReport

if TYPE_CHECKING:
    from ..cluster import Cluster
    from ..operations import Operations
    from ..services import Services

log = logging.getLogger(__name__)

Durability = Callable[[str, str, str], bool]  # (kind "exchange"/"queue", vhost, name) -> durable


class Target(Protocol):
    """What the applier changes: a node's users and vhosts, its vhosts' topology."""

    vhosts: dict[str, VHost]

    @property
    def services(self) -> Services:
        """Its users (``auth``) and the operations layer (``ops``)."""

    @property
    def cluster(self) -> Cluster:
        """With several workers: which vhosts' topology this one declares (``owns``)."""

    def add_vhost(self, name: str, description: str = "", tags: list[str] | None = None) -> bool: ...


@dataclass(frozen=True, slots=True)
class Restore:
    """Rule 4's callbacks: ``skipped(kind, record)`` after a refused item was logged (recovery drops
    refused queues and dangling bindings from the store), ``restored(record, queue)`` for each
    queue declared (recovery then attaches its store id and loads its messages)."""

    skipped: Callable[[str, Any], None] = lambda _kind, _record: None
    restored: Callable[[QueueRecord, Queue], None] = lambda _record, _queue: None


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
    entities += [(p.component, p.vhost, p.name) for p in defs.parameters]
    for kind, vhost, name in entities:
        if vhost not in known_vhosts:
            raise DefinitionsError(f"{kind} '{name}' in vhost '{vhost}': no such vhost")
    for r in defs.limits:
        if r.kind == "vhost" and r.owner not in known_vhosts:
            raise DefinitionsError(f"limits of vhost '{r.owner}': no such vhost")
        if r.kind == "user" and r.owner not in known_users:
            raise DefinitionsError(f"limits of user '{r.owner}': no such user")


def apply_definitions(
    node: Target,
    defs: Definitions,
    durable: Durability | None = None,
    restore: Restore | None = None,
    report: ImportReport | None = None,
) -> Definitions:
    """Check ``defs`` (rule 1), then apply them to ``node`` (rule 2), or restore them (rule 4).

    Args:
        node: the node to change.
        defs: parsed definitions, or the store's records.
        durable: the ``durable`` flag of each exchange and queue (default: all durable, as a
            definitions file read for start-up keeps only durable ones).
        restore: rule 4's mode and callbacks (start-up recovery).
        report: where what was applied, left unchanged and skipped is counted (rule 3).

    Returns:
        What changed: the vhosts, users, permissions, policies and limits set, and the exchanges,
        queues and bindings created.

    Raises:
        DefinitionsError: rule 1.
        AuthError, PolicyError, LimitError, AMQPError: rule 3 (not with ``restore``).
    """
    if restore is None:
        check_references(defs, node.services.auth.users, node.services.auth.vhosts)
    is_durable = durable or (lambda _kind, _vhost, _name: True)
    auth, ops = node.services.auth, node.services.ops  # the broker itself acts: no permission checks
    report = report if report is not None else ImportReport()
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
    owns = node.cluster.owns if restore is None else (lambda _name: True)
    for x in defs.exchanges:
        vhost = node.vhosts.get(x.vhost)
        if vhost is None or not owns(x.vhost):  # rule 4 only / another worker's vhost
            continue
        if x.name in vhost.exchanges:
            log.info("exchange '%s' in vhost '%s' already exists; left unchanged", x.name, x.vhost)
            report.kept("exchanges")
            continue
        try:
            ops.declare_exchange(
                None,
                vhost,
                x.name,
                x.type,
                durable=is_durable("exchange", x.vhost, x.name),
                auto_delete=x.auto_delete,
                internal=x.internal,
                arguments=decode_arguments(x.arguments),
            )
        except AMQPError as exc:
            if restore is None:
                raise
            _skipped(restore, "exchange", x, x.name, x.vhost, exc.text)
            continue
        done.exchanges.append(x)
    for q in defs.queues:
        vhost = node.vhosts.get(q.vhost)
        if vhost is None or not owns(q.vhost):
            continue
        if q.name in vhost.queues:
            log.info("queue '%s' in vhost '%s' already exists; left unchanged", q.name, q.vhost)
            report.kept("queues")
            continue
        try:
            declared = ops.declare_queue(
                None,
                vhost,
                q.name,
                durable=is_durable("queue", q.vhost, q.name),
                auto_delete=q.auto_delete,
                arguments=decode_arguments(q.arguments),
                generated=restore is not None,
            )
        except AMQPError as exc:
            if restore is None:
                raise
            _skipped(restore, "queue", q, q.name, q.vhost, exc.text)
            continue
        if restore is not None and declared.queue is not None:
            restore.restored(q, declared.queue)
        done.queues.append(q)
    for b in defs.bindings:
        if owns(b.vhost) and _bind(node, ops, b, restore, report):
            done.bindings.append(b)
    for pol in defs.policies:  # created or replaced; validated again by the operations layer
        vhost = node.vhosts.get(pol.vhost)
        if vhost is None:
            continue
        if restore is None:
            definition = json.loads(pol.definition)
            ops.set_policy(vhost, pol.name, pol.pattern, definition, pol.apply_to, pol.priority, pol.operator)
        else:
            try:
                vhost.set_policy(policy_of(pol))
            except ValueError as exc:  # PolicyError, or a definition that is no JSON object
                _skipped(restore, "policy", pol, pol.name, pol.vhost, str(exc))
                continue
        done.policies.append(pol)
    for limit in defs.limits:
        ops.set_limit(limit.kind, limit.owner, limit.name, limit.value)
        done.limits.append(limit)
    for param in defs.parameters if node.cluster.index == 0 and restore is None else ():  # worker 0's
        ops.set_parameter(None, param.vhost, param.component, param.name, json.loads(param.value))
        done.parameters.append(param)
    if restore is None:
        _count(report, done)
    return done


def _count(report: ImportReport, done: Definitions) -> None:
    for kind in ("users", "vhosts", "permissions", "exchanges", "queues", "bindings", "limits", "parameters"):
        report.done(kind, len(getattr(done, kind)))
    operators = sum(p.operator for p in done.policies)
    report.done("policies", len(done.policies) - operators)
    report.done("operator_policies", operators)


def _bind(
    node: Target, ops: Operations, b: BindingRecord, restore: Restore | None, report: ImportReport
) -> bool:
    """One binding, when both ends exist (else skipped: reported (rule 3), or under rule 4)."""
    vhost = node.vhosts.get(b.vhost)
    if vhost is None:
        return False
    targets = vhost.queues if b.destination_kind == "queue" else vhost.exchanges
    if b.source not in vhost.exchanges or b.destination not in targets:
        if restore is not None:  # an end was deleted, or refused above: the binding goes too
            restore.skipped("binding", b)
            return False
        missing = (
            f"exchange '{b.source}'"
            if b.source not in vhost.exchanges
            else f"{b.destination_kind} '{b.destination}'"
        )
        report.skip("bindings", f"no such {missing}", **binding_names(b))
        return False
    kind = "queue" if b.destination_kind == "queue" else "exchange"
    try:
        ops.bind(None, vhost, b.source, (kind, b.destination), b.routing_key, decode_arguments(b.arguments))
    except AMQPError as exc:
        if restore is None:
            report.skip("bindings", exc.text, **binding_names(b))
        else:
            _skipped(restore, "binding", b, f"{b.source} -> {b.destination}", b.vhost, exc.text)
        return False
    return True


def _skipped(restore: Restore, kind: str, record: Any, name: str, vhost: str, reason: str) -> None:
    """Rule 4 for an item the broker refuses: logged, skipped and reported."""
    log.warning("skipping stored %s '%s' in vhost '%s': %s", kind, name, vhost, reason)
    restore.skipped(kind, record)
