"""Runtime parameters (``broker/node/parameters.py``) through the one front door
(``Operations.set_parameter``/``clear_parameter``), with a recording component, a real AuthDB and a
MemoryStore; and the internal principal and the impersonator tag (``broker/node/auth.py``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from ottermq.amqp.errors import NotAllowed, PreconditionFailed
from ottermq.broker.node.auth import INTERNAL_USER, AuthDB
from ottermq.broker.node.limits import Limits
from ottermq.broker.node.operations import Operations
from ottermq.broker.node.parameters import ParameterError, Parameters
from ottermq.broker.shovel.engine import Shovels
from ottermq.persistence import MemoryStore
from ottermq.persistence.store import ParameterRecord

SHOVEL = {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp:///other", "dest-queue": "b"}


class Recorder:
    """A component: ``validate`` refuses ``{"bad": ...}``; ``set``/``clear`` are recorded."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, Any]] = []

    def validate(self, vhost: str, name: str, value: Any, access: Any, username: str | None) -> list[str]:
        return ["bad <value>", "twice"] if isinstance(value, dict) and "bad" in value else []

    def set(self, vhost: str, name: str, value: Any) -> None:
        self.events.append(("set", vhost, name, value))

    def clear(self, vhost: str, name: str) -> None:
        self.events.append(("clear", vhost, name, None))


class World:
    def __init__(self) -> None:
        self.store = MemoryStore()
        self.auth = AuthDB()
        for vhost in ("/", "other"):
            self.auth.add_vhost(vhost)
        self.auth.add_user("bob", "pw")
        self.auth.set_permissions("bob", "/", ".*", ".*", ".*")
        self.parameters = Parameters(self.store)
        self.recorder = Recorder()
        self.parameters.register("test", self.recorder)
        self.shovels = Shovels(lambda: None, "node", lambda _v, _n: None)
        self.parameters.register("shovel", self.shovels)
        self.ops = Operations(self.auth, self.store, Limits(), lambda: None, self.parameters)


@pytest.fixture
def w() -> World:
    return World()


async def stored(w: World) -> list[tuple[str, str, str, Any]]:
    await w.store.flush()
    return [
        (r.vhost, r.component, r.name, json.loads(r.value))
        for r in (await w.store.load_definitions()).parameters
    ]


def on_a_loop(test: Any) -> Any:
    """Run ``test(w)`` (a coroutine function) on an event loop with the store open (writes need one)."""

    def wrapper(w: World, *args: Any) -> None:
        async def main() -> None:
            await w.store.open()
            await test(w, *args)
            await w.store.close()

        asyncio.run(main())

    wrapper.__name__ = test.__name__
    return wrapper


def test_an_unknown_component_and_a_refused_value_get_rabbitmqs_texts(w: World) -> None:
    with pytest.raises(ParameterError) as unknown:
        w.ops.set_parameter(None, "/", "federation-upstream", "x", {})
    assert str(unknown.value) == "Validation failed\n\ncomponent federation-upstream not found\n"
    with pytest.raises(ParameterError) as refused:
        w.ops.set_parameter(None, "/", "test", "x", {"bad": 1})
    assert str(refused.value) == "Validation failed\n\nbad <value>\ntwice\n"
    assert w.recorder.events == [] and w.parameters.items() == []


@on_a_loop
async def test_set_replace_same_value_and_clear(w: World) -> None:
    assert w.ops.set_parameter(None, "/", "test", "x", {"v": 1}) is True
    assert w.ops.set_parameter(None, "/", "test", "x", {"v": 1}) is False  # unchanged: nobody told
    assert w.ops.set_parameter(None, "/", "test", "x", {"v": 2}) is False
    assert w.recorder.events == [("set", "/", "x", {"v": 1}), ("set", "/", "x", {"v": 2})]
    assert await stored(w) == [("/", "test", "x", {"v": 2})]
    assert w.ops.clear_parameter("/", "test", "x") is True
    assert w.ops.clear_parameter("/", "test", "x") is False
    assert w.recorder.events[-1] == ("clear", "/", "x", None) and await stored(w) == []


@on_a_loop
async def test_a_local_uri_needs_the_acting_users_access_to_its_vhost(w: World) -> None:
    bob = w.auth.users["bob"]
    with pytest.raises(ParameterError) as refused:
        w.ops.set_parameter(bob, "/", "shovel", "s", SHOVEL)
    assert str(refused.value) == 'Validation failed\n\nuser "bob" may not connect to vhost "other"\n'
    assert w.ops.set_parameter(None, "/", "shovel", "s", SHOVEL) is True  # the broker itself: not checked
    w.auth.set_permissions("bob", "other", "", "", "")  # any entry opens the vhost, as RabbitMQ's
    assert w.ops.set_parameter(bob, "/", "shovel", "s", {**SHOVEL, "dest-queue": "c"}) is False
    assert [e.name for e in w.shovels.status()] == ["s"]
    w.ops.clear_parameter("/", "shovel", "s")
    assert w.shovels.status() == []


def test_restore_skips_what_does_not_validate_any_more(w: World, caplog: pytest.LogCaptureFixture) -> None:
    records = [
        ParameterRecord("/", "test", "good", '{"v": 1}'),
        ParameterRecord("/", "test", "refused", '{"bad": 1}'),
        ParameterRecord("/", "test", "not-json", "{"),
        ParameterRecord("gone", "test", "orphan", "{}"),
        ParameterRecord("/", "federation-upstream", "unknown", "{}"),
    ]
    w.parameters.restore(records, w.auth.vhosts)
    assert w.parameters.items() == [("/", "test", "good", {"v": 1})]
    assert caplog.text.count("skipping stored parameter") == 4


@on_a_loop
async def test_clearing_a_vhost_clears_its_parameters(w: World) -> None:
    w.ops.set_parameter(None, "/", "test", "x", {})
    w.ops.set_parameter(None, "other", "test", "y", {})
    w.parameters.clear_vhost("other")
    assert [(v, n) for v, _, n, _ in w.parameters.items()] == [("/", "x")]
    assert w.recorder.events[-1] == ("clear", "other", "y", None)


def test_the_internal_principal_logs_in_with_its_secret_only_and_may_do_anything() -> None:
    auth = AuthDB()
    auth.add_vhost("/")
    assert auth.login(INTERNAL_USER, "secret", "127.0.0.1") is None  # no secret set: nobody
    internal = auth.set_internal("secret")
    assert auth.login(INTERNAL_USER, "secret", "10.0.0.1") is internal
    assert auth.login(INTERNAL_USER, "wrong", "127.0.0.1") is None
    assert auth.login(INTERNAL_USER.encode(), b"secret", "127.0.0.1") is internal
    assert INTERNAL_USER not in auth.users
    auth.check_vhost(internal, "/")
    assert auth.is_allowed(internal, "/", "configure", "queue", "anything")
    with pytest.raises(NotAllowed, match="vhost nope not found"):
        auth.check_vhost(internal, "nope")
    auth.add_user(INTERNAL_USER, "its-own", tags=[])  # a user of that name keeps its own password
    assert auth.login(INTERNAL_USER, "its-own", "127.0.0.1") is auth.users[INTERNAL_USER]
    assert auth.login(INTERNAL_USER, "secret", "127.0.0.1") is internal
    assert not auth.is_allowed(auth.users[INTERNAL_USER], "/", "read", "queue", "q")


def test_an_impersonator_may_claim_another_user_id(w: World) -> None:
    props = b"\x00\x10\x05alice"  # user_id alice
    with pytest.raises(PreconditionFailed, match="user_id property set to 'alice' but authenticated user"):
        w.ops.message(w.auth.users["bob"], "", "q", props, b"")
    w.auth.add_user("imp", "pw", tags=["impersonator"])
    message, _ = w.ops.message(w.auth.users["imp"], "", "q", props, b"")
    assert message.raw_props == props


@on_a_loop
async def test_a_parameter_whose_write_fails_is_taken_back(w: World) -> None:
    w.ops.set_parameter(None, "/", "test", "kept", {"v": 1})
    await w.store.flush()
    w.store.fail_batches = 1  # the store refuses the next write: both changes below are taken back
    w.ops.set_parameter(None, "/", "test", "kept", {"v": 2})
    w.ops.set_parameter(None, "/", "test", "lost", {"v": 3})
    with pytest.raises(Exception, match="could not commit"):
        await w.store.flush()
    assert w.parameters.items() == [("/", "test", "kept", {"v": 1})]
    assert w.recorder.events[-2:] == [("set", "/", "kept", {"v": 1}), ("clear", "/", "lost", None)]
    assert await stored(w) == [("/", "test", "kept", {"v": 1})]  # the retried writes and their undo
