"""The one front door (``broker/operations.py``): its rules, tested once, on a real AuthDB, MemoryStore
and VHost (no sockets). Every adapter (channel, HTTP, definitions, moves) calls these."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ottermq.amqp.errors import AccessRefused, NotFound, PreconditionFailed, ResourceLocked
from ottermq.broker.node.auth import AuthDB
from ottermq.broker.node.limits import LimitError, Limits
from ottermq.broker.node.operations import Operations, arguments_of, check_name, publish_target
from ottermq.persistence import MemoryStore
from ottermq.vhost.policy import PolicyError
from ottermq.vhost.vhost import VHost

PROPS_USER_ID_GUEST = b"\x00\x10\x05guest"  # only user_id set (flag 0x0010)


class World:
    def __init__(self) -> None:
        self.store = MemoryStore()
        self.auth = AuthDB()
        self.auth.add_vhost("/")
        self.auth.add_user("bob", "pw")
        self.auth.set_permissions("bob", "/", "^(q|x|dlx)", "^(q|x|amq.default)", "^(q|x)")
        self.bob = self.auth.users["bob"]
        self.vhost = VHost("/")
        self.limits = Limits()
        self.applied = 0
        self.ops = Operations(self.auth, self.store, self.limits, self._apply)

    def _apply(self) -> None:
        self.applied += 1


@pytest.fixture
def w() -> World:
    return World()


def test_declare_queue_checks_configure_then_dlx_read_and_write(w: World) -> None:
    with pytest.raises(AccessRefused, match="access to queue 'other' in vhost '/' refused for user 'bob'"):
        w.ops.declare_queue(w.bob, w.vhost, "other")
    # a new queue naming a dead-letter exchange needs write on that exchange
    with pytest.raises(AccessRefused, match="access to exchange 'dlx' in vhost '/'"):
        w.ops.declare_queue(w.bob, w.vhost, "q1", arguments={"x-dead-letter-exchange": "dlx"})
    declared = w.ops.declare_queue(w.bob, w.vhost, "q1")
    assert declared.created and declared.queue is w.vhost.queues["q1"]
    assert not w.ops.declare_queue(w.bob, w.vhost, "q1").created  # redeclare: not created
    assert w.ops.declare_queue(None, w.vhost, "broker-own").created  # the broker itself: no checks


def test_names_and_json_arguments_are_bounded(w: World) -> None:
    with pytest.raises(PreconditionFailed, match="queue should be less than 255 bytes, actually was 256"):
        check_name("queue", "q" * 256)
    with pytest.raises(PreconditionFailed, match="exchange should be less than 255 bytes"):
        w.ops.declare_exchange(None, w.vhost, "x" * 300, "direct")
    with pytest.raises(PreconditionFailed, match="'x-big' 18446744073709551616 is out of range"):
        arguments_of({"x-big": 2**64})
    with pytest.raises(PreconditionFailed, match="arguments must be an object"):
        arguments_of([1])
    assert arguments_of(None) == {}


def test_bind_order_is_write_destination_default_exchange_then_read_source(w: World) -> None:
    w.ops.declare_queue(None, w.vhost, "q1")
    w.ops.declare_exchange(None, w.vhost, "x1", "direct")
    w.ops.declare_exchange(None, w.vhost, "zz", "direct")
    with pytest.raises(AccessRefused, match="access to queue 'nope'"):  # write on the destination first
        w.ops.bind(w.bob, w.vhost, "", ("queue", "nope"), "k")
    with pytest.raises(AccessRefused, match="operation not permitted on the default exchange"):
        w.ops.bind(w.bob, w.vhost, "", ("queue", "q1"), "k")  # before read on the source
    with pytest.raises(AccessRefused, match="access to exchange 'zz'"):
        w.ops.bind(w.bob, w.vhost, "zz", ("queue", "q1"), "k")
    with pytest.raises(NotFound, match="no queue 'q9'"):
        w.ops.bind(w.bob, w.vhost, "x1", ("queue", "q9"), "k")
    w.ops.bind(w.bob, w.vhost, "x1", ("queue", "q1"), "k")
    assert w.vhost.exchanges["x1"].has_binding("k", ("queue", "q1"), {})
    w.ops.unbind(w.bob, w.vhost, "x1", ("queue", "q1"), "k")
    w.ops.unbind(w.bob, w.vhost, "x1", ("queue", "q1"), "k")  # a missing binding is fine


def test_publish_rules(w: World) -> None:
    w.ops.declare_queue(None, w.vhost, "q1")
    w.ops.declare_exchange(None, w.vhost, "xi", "fanout", internal=True)
    assert publish_target(w.vhost, "") is None
    with pytest.raises(NotFound, match="no exchange 'x-missing'"):
        w.ops.publish_exchange(w.bob, w.vhost, "x-missing")
    with pytest.raises(AccessRefused, match="cannot publish to internal exchange 'xi'"):
        w.ops.publish_exchange(None, w.vhost, "xi")
    with pytest.raises(AccessRefused, match="access to exchange 'zz'"):
        w.ops.publish_exchange(w.bob, w.vhost, "zz")
    refused = "user_id property set to 'guest' but authenticated user was 'bob'"
    with pytest.raises(PreconditionFailed, match=refused):
        w.ops.publish(w.bob, w.vhost, "", "q1", PROPS_USER_ID_GUEST, b"body")
    result = w.ops.publish(None, w.vhost, "", "q1", b"\x00\x00", b"body")
    assert result.routed and w.vhost.queues["q1"].message_count == 1


@pytest.mark.parametrize("access", ["consume", "get", "purge", "browse", "move"])
def test_every_queue_access_checks_permission_then_existence_then_exclusivity(w: World, access: str) -> None:
    w.ops.declare_queue(None, w.vhost, "qx", exclusive=True, owner="conn-a")
    w.ops.declare_queue(None, w.vhost, "other", exclusive=True, owner="conn-a")  # bob may not read it
    with pytest.raises(AccessRefused, match="access to queue 'other' in vhost '/' refused for user 'bob'"):
        w.ops.access_queue(w.bob, w.vhost, "other", access, owner="conn-b")  # before exclusivity
    with pytest.raises(AccessRefused, match="access to queue 'nope'"):
        w.ops.access_queue(w.bob, w.vhost, "nope", access)  # before existence
    with pytest.raises(NotFound, match="no queue 'q-missing'"):
        w.ops.access_queue(w.bob, w.vhost, "q-missing", access)
    for owner in ("conn-b", None):  # another connection, or the management API's none
        with pytest.raises(ResourceLocked, match="cannot obtain exclusive access to locked queue 'qx'"):
            w.ops.access_queue(w.bob, w.vhost, "qx", access, owner=owner)
        with pytest.raises(ResourceLocked):
            w.ops.check_queue_access(None, w.vhost, "qx", access, owner=owner)
    assert w.ops.access_queue(w.bob, w.vhost, "qx", access, owner="conn-a") is w.vhost.queues["qx"]
    w.ops.check_queue_access(w.bob, w.vhost, "q-missing", access)  # gone: only the permission


def test_a_publish_is_settled_routed_or_not(w: World) -> None:
    """``settled`` is the confirm of a publish without a channel (moves wait for it; a failed commit is
    ``test_move_jobs.py``'s, on a node whose queues write to the store)."""

    async def main() -> list[bool]:
        w.ops.declare_queue(None, w.vhost, "q1")
        outcomes: list[bool] = []
        w.ops.publish(None, w.vhost, "", "q1", b"\x00\x00", b"m", settled=outcomes.append)
        w.ops.publish(None, w.vhost, "", "nowhere", b"\x00\x00", b"m", settled=outcomes.append)
        await w.store.flush()
        await asyncio.sleep(0)
        return outcomes

    assert asyncio.run(main()) == [True, True]


def test_delete_and_purge(w: World) -> None:
    w.ops.declare_queue(None, w.vhost, "q1")
    w.ops.declare_queue(None, w.vhost, "qx", exclusive=True, owner="conn-a")
    assert w.ops.delete_queue(w.bob, w.vhost, "q0") == 0  # permitted and missing: fine on a channel
    with pytest.raises(NotFound):
        w.ops.delete_queue(w.bob, w.vhost, "q2", missing_ok=False)
    with pytest.raises(ResourceLocked):
        w.ops.purge_queue(None, w.vhost, "qx", owner="conn-b")
    w.ops.publish(None, w.vhost, "", "q1", b"\x00\x00", b"m")
    with pytest.raises(PreconditionFailed, match="queue 'q1' in vhost '/' not empty"):
        w.ops.delete_queue(w.bob, w.vhost, "q1", if_empty=True)
    assert w.ops.purge_queue(w.bob, w.vhost, "q1") == 1


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_policies_are_validated_applied_stored_and_taken_back_on_a_failed_write(w: World) -> None:
    async def main() -> None:
        w.ops.declare_queue(None, w.vhost, "q1")
        assert w.ops.set_policy(w.vhost, "p", "^q", {"max-length": 3}) is True
        assert w.vhost.queues["q1"].args.max_length == 3
        assert w.ops.set_policy(w.vhost, "p", "^q", {"max-length": 2}) is False  # replaced
        await w.store.flush()
        assert [p.name for p in (await w.store.load_definitions()).policies] == ["p"]
        with pytest.raises(PolicyError, match="priority 9223372036854775808 is out of range"):
            w.ops.set_policy(w.vhost, "big", "^q", {"max-length": 1}, "all", 2**63)
        w.store.fail_batches = 1  # the store refuses the next write: the policy is taken back
        w.ops.set_policy(w.vhost, "lost", "^q", {"max-length": 1}, "all", 5)
        with pytest.raises(Exception, match="could not commit"):
            await w.store.flush()
        assert "lost" not in w.vhost.policies and w.vhost.queues["q1"].args.max_length == 2
        await w.store.flush()  # the retried write and its undo: the store agrees with memory
        assert [p.name for p in (await w.store.load_definitions()).policies] == ["p"]
        assert w.ops.delete_policy(w.vhost, "p") and not w.ops.delete_policy(w.vhost, "p")

    run(main())


def test_limits(w: World) -> None:
    async def main() -> None:
        w.ops.set_limit("vhost", "/", "max-queues", 5)
        assert w.limits.of("vhost", "/") == {"max-queues": 5} and w.applied == 1
        with pytest.raises(LimitError, match="out of range"):
            w.ops.set_limit("vhost", "/", "max-queues", 2**63)
        w.ops.clear_limit("vhost", "/", "max-queues")
        assert w.limits.of("vhost", "/") == {} and w.applied == 2

    run(main())
