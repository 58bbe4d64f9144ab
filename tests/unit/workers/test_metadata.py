"""Worker 0's metadata and a worker's copy of it (broker/workers/metadata.py) on real nodes: the snapshot
is the definitions export without topology; ``sync`` (after ``prepare``, as the worker runs them)
makes a worker's node hold exactly what worker 0's holds, deleting what the snapshot lacks, and
leaves the topology of the vhosts the worker owns alone. The snapshot crosses as a ``Metadata``
message's bytes, as between the processes."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from ottermq.broker.config import Settings
from ottermq.broker.node.auth import hash_password
from ottermq.broker.node.definitions import definitions_from_json
from ottermq.broker.node.node import Node
from ottermq.broker.workers import metadata
from ottermq.broker.workers.cluster import WorkerCluster
from ottermq.broker.workers.messages import Metadata, pack, unpack
from ottermq.persistence.archive import NullArchive

from .conftest import Run

ALL = {"configure": ".*", "write": ".*", "read": ".*"}


def user(name: str, tags: list[str], limits: dict[str, int]) -> dict[str, Any]:
    return {
        "name": name,
        "password_hash": hash_password(name),
        "hashing_algorithm": "rabbit_password_hashing_sha256",
        "tags": tags,
        "limits": limits,
    }


def vhost(name: str, limits: dict[str, int] | None = None) -> dict[str, Any]:
    return {"name": name, "limits": limits or {}, "metadata": {"description": f"{name}!", "tags": ["t"]}}


BEFORE: dict[str, Any] = {
    "users": [user("guest", ["administrator"], {}), user("bob", ["management"], {"max-channels": 5})],
    "vhosts": [vhost("/"), vhost("a", {"max-queues": 10}), vhost("b")],
    "permissions": [
        {"user": "guest", "vhost": "/", **ALL},
        {"user": "bob", "vhost": "a", "configure": "^bob", "write": ".*", "read": ""},
        {"user": "bob", "vhost": "b", **ALL},
    ],
    "policies": [
        {
            "vhost": "a",
            "name": "cap",
            "pattern": "^q",
            "apply-to": "queues",
            "definition": {"max-length": 10},
            "priority": 1,
        }
    ],
    "parameters": [
        {
            "vhost": "b",
            "component": "operator_policy",
            "name": "op",
            "value": {
                "pattern": ".*",
                "apply-to": "queues",
                "definition": {"max-length": 100},
                "priority": 0,
            },
        }
    ],
    # worker 0's topology, which the snapshot leaves out: the owner's store has it
    "queues": [{"name": "q0", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}],
    "exchanges": [],
    "bindings": [],
}

# bob, vhost b, the policy and the limits gone; vhost c, a user and a permission added
AFTER: dict[str, Any] = {
    **BEFORE,
    "users": [user("guest", ["administrator"], {}), user("carol", [], {"max-connections": 2})],
    "vhosts": [vhost("/"), vhost("a"), vhost("c")],
    "permissions": [{"user": "guest", "vhost": "/", **ALL}, {"user": "carol", "vhost": "c", **ALL}],
    "policies": [],
    "parameters": [],
}


async def worker_0(definitions: dict[str, Any]) -> dict[str, Any]:
    """The snapshot worker 0 sends, of a node that imported ``definitions``, as the worker decodes it."""
    settings = Settings(_env_file=None, vhosts=[])  # type: ignore[call-arg]
    node = Node(settings, asyncio.get_running_loop(), archive=NullArchive())
    await node.open(definitions_from_json(copy.deepcopy(definitions)))
    try:
        sent = Metadata(1, metadata.snapshot(node), ("a",))
    finally:
        node.stop()
        await node.close()
    received = unpack(pack(sent))
    assert isinstance(received, Metadata) and received == sent
    return received.definitions


async def a_worker() -> Node:
    """A worker's node before worker 0's first snapshot: nothing seeded, vhost ``a`` its own."""
    node = Node(Settings(_env_file=None), asyncio.get_running_loop(), archive=NullArchive())  # type: ignore[call-arg]
    node.join(WorkerCluster(1, lambda name: name == "a", lambda: None))
    await node.open(seed=False)
    return node


async def sync(node: Node, data: dict[str, Any]) -> None:
    await metadata.prepare(node, data)
    metadata.sync(node, data)


def test_the_snapshot_is_the_metadata_without_topology(run: Run) -> None:
    async def main() -> None:
        data = await worker_0(BEFORE)
        assert (data["queues"], data["exchanges"], data["bindings"]) == ([], [], [])
        assert "global_parameters" not in data
        assert [u["name"] for u in data["users"]] == ["bob", "guest"]
        assert [v["name"] for v in data["vhosts"]] == ["/", "a", "b"]
        assert [(p["user"], p["vhost"]) for p in data["permissions"]] == [
            ("bob", "a"),
            ("bob", "b"),
            ("guest", "/"),
        ]
        assert [p["name"] for p in data["policies"]] == ["cap"]
        assert {(p["component"], p["vhost"]) for p in data["parameters"]} == {
            ("operator_policy", "b"),
            ("vhost-limits", "a"),
        }

    run(main())


def test_sync_makes_the_workers_metadata_worker_0s(run: Run) -> None:
    async def main() -> None:
        before, after = await worker_0(BEFORE), await worker_0(AFTER)
        node = await a_worker()
        try:
            await sync(node, before)
            assert metadata.snapshot(node) == before
            assert sorted(node.vhosts) == ["/", "a", "b"] and [v.name for v in node.owned_vhosts()] == ["a"]
            assert node.services.limits.of("user", "bob") == {"max-channels": 5}
            assert node.vhosts["a"].policies["cap"].definition == {"max-length": 10}
            assert node.vhosts["b"].queues == {}  # worker 0's topology is not in the snapshot

            owned = node.vhosts["a"]
            owned.declare_queue("q1", False, True, False, False, None, None)  # the owner's topology

            await sync(node, after)  # what the snapshot lacks is deleted, the rest replaced
            assert metadata.snapshot(node) == after
            assert sorted(node.vhosts) == ["/", "a", "c"] and sorted(node.services.auth.users) == [
                "carol",
                "guest",
            ]
            assert (
                node.services.limits.of("user", "bob") == {} and node.services.limits.of("vhost", "a") == {}
            )
            assert node.vhosts["a"] is owned and list(owned.queues) == ["q1"] and owned.policies == {}

            await sync(node, after)  # the same snapshot again changes nothing
            assert metadata.snapshot(node) == after
        finally:
            node.stop()
            await node.close()

    run(main())
