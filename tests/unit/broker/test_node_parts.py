"""The node's parts (``broker/node/node.py``): the connection registry and its limit checks, the
cluster a worker joins, the alarms' reasons, and the management API's narrow view."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ottermq.amqp.errors import NotAllowed
from ottermq.broker.config import Settings
from ottermq.broker.node.alarms import Alarms
from ottermq.broker.node.cluster import SingleProcess
from ottermq.broker.node.info import WorkerPool
from ottermq.broker.node.limits import Limits
from ottermq.broker.node.node import Node
from ottermq.broker.node.registry import ConnectionRegistry
from ottermq.broker.node.stats import MessageStats
from ottermq.broker.node.view import NodeView
from ottermq.persistence.archive import NullArchive
from ottermq.persistence.memory import MemoryStore

MANAGEMENT = Path(__file__).resolve().parents[3] / "broker" / "management"


class Conn:
    """A ``ConnectionHandle`` with a user, a vhost and a number of channels."""

    def __init__(self, user: str, vhost: str | None, channels: int = 0) -> None:
        self.username = user
        self.vhost_name = vhost
        self.channels = channels
        self.closed: list[str] = []
        self.blocked: list[tuple[bool, str]] = []

    def channel_count(self) -> int:
        return self.channels

    def channel_stats(self) -> Iterator[MessageStats]:
        return iter(())

    def info(self) -> Any:
        raise NotImplementedError

    def count_unacked_bytes(self, into: dict[Any, int]) -> None:
        pass

    def set_blocked(self, blocked: bool, reason: str) -> None:
        self.blocked.append((blocked, reason))

    def force_close(self, reason: str, text: str | None = None) -> None:
        self.closed.append(text or reason)


class Elsewhere:
    """A worker's cluster: owns ``mine``, and reports the other workers' connections and channels."""

    def __init__(self, mine: set[str], connections: list[tuple[str, str]], channels: dict[str, int]) -> None:
        self.index = 1
        self.pool: WorkerPool | None = None
        self.mine = mine
        self.connections = connections
        self.channels = channels
        self.changed = 0

    def owns(self, vhost: str) -> bool:
        return vhost in self.mine

    def connections_elsewhere(self) -> Iterable[tuple[str, str]]:
        return self.connections

    def channels_elsewhere(self, username: str) -> int:
        return self.channels.get(username, 0)

    def channels_changed(self) -> None:
        self.changed += 1


def registry(**limits: int) -> ConnectionRegistry:
    store = Limits()
    for key, value in limits.items():
        kind, owner, name = key.split("__")
        store.set(kind, owner, name.replace("_", "-"), value)
    return ConnectionRegistry(store)


def test_alone_a_process_counts_only_its_own_connections() -> None:
    reg = registry(vhost__v__max_connections=2)
    assert isinstance(reg.cluster, SingleProcess)
    first, second, third = Conn("u", "v"), Conn("u", "v"), Conn("u", None)
    reg.add(first)
    reg.add(second)
    reg.add(third)  # still opening: not counted
    reg.check_limits(first, "v")  # itself excluded: one other
    with pytest.raises(NotAllowed, match=r"access to vhost 'v' refused for user 'u': connection limit \(2\)"):
        reg.check_limits(third, "v")
    assert len(reg) == 3 and first in reg


def test_the_limits_count_the_other_workers_connections_and_channels() -> None:
    reg = registry(user__u__max_connections=2, user__u__max_channels=5)
    reg.cluster = Elsewhere({"v"}, [("w", "u"), ("w", "u")], {"u": 3})
    conn = Conn("u", None)
    reg.add(conn)
    with pytest.raises(NotAllowed, match=r"user connection limit \(2\) is reached"):
        reg.check_limits(conn, "v")
    reg.add(Conn("u", "v", channels=1))
    assert reg.user_channels("u") == 1 + 3


def test_only_a_limited_users_channels_are_reported_to_the_cluster() -> None:
    reg = registry(user__limited__max_channels=1)
    cluster = reg.cluster = Elsewhere(set(), [], {})
    reg.channels_changed("free")
    assert cluster.changed == 0
    reg.channels_changed("limited")
    assert cluster.changed == 1
    reg.add(Conn("limited", "v", channels=2))
    reg.add(Conn("free", "v", channels=4))
    assert reg.limited_user_channels() == {"limited": 2}


def test_closing_and_blocking_reach_the_right_connections() -> None:
    reg = registry()
    a, b = Conn("alice", "a"), Conn("bob", "b")
    reg.add(a)
    reg.add(b)
    reg.close_vhost("a")
    reg.close_user("bob")
    assert a.closed == ["vhost 'a' is deleted"] and b.closed == ["user 'bob' is deleted"]
    reg.block("low on memory")
    reg.block(None)
    assert a.blocked == [(True, "low on memory"), (False, "")]


def test_a_node_that_joins_a_cluster_serves_only_the_vhosts_it_owns() -> None:
    node = Node(Settings(_env_file=None), asyncio.new_event_loop())  # type: ignore[call-arg]
    for name in ("a", "b"):
        node.ensure_vhost(name)
    assert {v.name for v in node.owned_vhosts()} == {"a", "b"}
    cluster = Elsewhere({"b"}, [], {})
    node.join(cluster)
    view = NodeView(node)
    assert node.cluster is cluster and view.cluster is cluster  # the view reads the node's, live
    assert [v.name for v in node.owned_vhosts()] == ["b"] and node.owned_vhost("a") is None


def test_the_view_follows_what_the_node_sets_after_it_was_made() -> None:
    node = Node(Settings(_env_file=None), asyncio.new_event_loop(), archive=NullArchive())  # type: ignore[call-arg]
    view = NodeView(node)
    archive = NullArchive()
    node.use_archive(archive)
    assert view.archive is archive and node.services.archive is archive
    assert view.lease is None and view.connections is node.connections and view.vhosts is node.vhosts


def test_the_disk_alarm_wins_the_reason_and_every_change_is_told() -> None:
    told: list[str | None] = []
    settings = Settings(_env_file=None, disk_free_limit=1000)  # type: ignore[call-arg]
    alarms = Alarms(settings, asyncio.new_event_loop(), MemoryStore(), told.append)
    free = [5000]
    alarms.disk_free_probe = lambda: free[0]
    alarms.set_memory(True)
    free[0] = 10
    alarms.check_disk()
    free[0] = 5000
    alarms.check_disk()
    alarms.set_memory(False)
    assert told == ["low on memory", "low on disk", "low on memory", None]


def test_the_management_api_reads_the_node_only_through_its_view() -> None:
    """No management module names ``Node`` but the two listeners that wrap it in a ``NodeView``."""
    users = set()
    for path in sorted(MANAGEMENT.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("node.node"):
                users.add(path.name)
    assert users == {"app.py", "prometheus.py"}
