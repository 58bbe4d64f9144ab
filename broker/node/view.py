"""What the management API reads of a node, and the few node-wide writes it makes.

The management API (``broker/management``) takes a ``NodeView`` instead of the ``Node``: the
services it reads (settings, users and permissions, limits, logins, the store's and delayed
delivery's counters, the archive), the open connections' registry, the alarms, this process's place
among the workers, the listeners, the vhosts; and its writes go through the operations layer
(``ops``) or the four node-wide ones below (vhosts and users, a definitions import). What it does
not list, the management API cannot reach: a new reader shows up as a new line here.
"""

from __future__ import annotations

import time

from ottermq.persistence.lease import Lease
from ottermq.persistence.store import Definitions
from ottermq.vhost.vhost import VHost

from .cluster import Cluster
from .definitions import DefinitionsFile, apply_definitions
from .definitions.apply import Durability
from .definitions.report import ImportReport
from .node import Node
from .wiring import Archive


class NodeView:
    """A node as the management API sees it (see the module docstring).

    Args:
        node: the node.
    """

    def __init__(self, node: Node) -> None:
        self._node = node
        services = node.services
        self.settings = services.settings
        self.auth = services.auth  # users, vhosts, permissions (changed through ``ops``)
        self.ops = services.ops  # runtime parameters too (``ops.parameters``)
        self.shovels = services.shovels  # the dynamic shovels' status, restart
        self.limits = services.limits
        self.logins = services.logins  # login counts (rabbitmq_auth_attempts_*) and HTTP logins
        self.store = services.store  # its metrics
        self.delays = services.delays  # delayed messages per exchange
        self.connections = node.connections
        self.alarms = node.alarms
        self.listings = node.listings
        self.vhosts: dict[str, VHost] = node.vhosts
        self.owned_vhost = node.owned_vhost
        self.owned_vhosts = node.owned_vhosts
        self.started_at = node.started_at

    @property
    def cluster(self) -> Cluster:
        return self._node.cluster

    @property
    def archive(self) -> Archive:
        return self._node.services.archive

    @property
    def lease(self) -> Lease | None:
        return self._node.lease

    @property
    def definitions_file(self) -> DefinitionsFile | None:
        """``OTTERMQ_DEFINITIONS_FILE`` as imported at this start, with its report."""
        return self._node.definitions_file

    @property
    def uptime(self) -> float:
        return time.time() - self.started_at

    def add_vhost(self, name: str, description: str = "", tags: list[str] | None = None) -> bool:
        """``Node.add_vhost``."""
        return self._node.add_vhost(name, description, tags)

    def delete_vhost(self, name: str) -> None:
        """``Node.delete_vhost``."""
        self._node.delete_vhost(name)

    def delete_user(self, name: str) -> None:
        """``Node.delete_user``."""
        self._node.delete_user(name)

    def apply_definitions(
        self, defs: Definitions, durable: Durability | None = None, report: ImportReport | None = None
    ) -> Definitions:
        """Import ``defs`` (``definitions/apply.py``, the one applier), counted in ``report``."""
        return apply_definitions(self._node, defs, durable, report=report)
