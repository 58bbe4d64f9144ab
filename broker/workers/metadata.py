"""What every worker must agree on: users, vhosts, permissions, policies and limits.

Rules:
- Worker 0 holds the metadata (its store, its management API, its definitions file); the other
  workers hold a copy, replaced whole (``snapshot`` there, ``sync`` here) when they start and after
  every change made through worker 0's management API, before that change is answered.
- ``sync`` makes the copy equal to the snapshot through the one applier (``apply_definitions``) and
  the node's own deletions: what the snapshot lacks is deleted (a vhost with its queues: it was
  deleted while this worker was down), the rest created or replaced.
- The snapshot is the definitions export without exchanges, queues and bindings (those belong to
  the vhost's owner alone).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..management.definitions import export
from ..node.definitions import apply_definitions, definitions_from_json
from ..node.view import NodeView

if TYPE_CHECKING:
    from ..node.node import Node

log = logging.getLogger(__name__)

TOPOLOGY = ("exchanges", "queues", "bindings")


def snapshot(node: Node) -> dict[str, Any]:
    """Worker 0's metadata, as the definitions export shapes it."""
    body = export(NodeView(node))
    for key in TOPOLOGY:
        body[key] = []
    body.pop("global_parameters", None)  # the cluster id only, which the import does not read
    return body


async def prepare(node: Node, data: dict[str, Any]) -> None:
    """Match the snapshot's policy patterns against this worker's names off the event loop, so that
    :func:`sync` applies them without holding it (``Operations.prepare_policy``)."""
    await node.services.ops.prepare_definitions(node.owned_vhost, definitions_from_json(data, transient=True))


def sync(node: Node, data: dict[str, Any]) -> None:
    """Make ``node``'s metadata equal to the snapshot ``data`` (see the module rules)."""
    defs = definitions_from_json(data, transient=True)
    auth, ops = node.services.auth, node.services.ops
    keep_vhosts = {v.name for v in defs.vhosts}
    for name in list(auth.vhosts):
        if name not in keep_vhosts:
            node.delete_vhost(name)
    keep_users = {u.name for u in defs.users}
    for name in list(auth.users):
        if name not in keep_users:
            node.delete_user(name)
    keep_permissions = {(p.user, p.vhost) for p in defs.permissions}
    for user, where in list(auth.permissions):
        if (user, where) not in keep_permissions:
            auth.clear_permissions(user, where)
    keep_policies = {(p.vhost, p.name, p.operator) for p in defs.policies}
    for vhost in node.vhosts.values():
        for operator, registry in ((False, vhost.policies), (True, vhost.operator_policies)):
            for name in list(registry):
                if (vhost.name, name, operator) not in keep_policies:
                    ops.delete_policy(vhost, name, operator)
    keep_limits = {(r.kind, r.owner, r.name) for r in defs.limits}
    for record in node.services.limits.records():
        if (record.kind, record.owner, record.name) not in keep_limits:
            ops.clear_limit(record.kind, record.owner, record.name)
    apply_definitions(node, defs)
