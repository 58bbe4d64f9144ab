"""``VHost.unbind``: RabbitMQ 3.10's idempotent unbind (no sockets)."""

from __future__ import annotations

import pytest
from ottermq.amqp.errors import AccessRefused, ResourceLocked
from ottermq.vhost.vhost import VHost

OWNER, OTHER = object(), object()


def vhost_with_binding(exclusive: bool = False) -> VHost:
    vh = VHost()
    vh.declare_exchange("x", "direct", False, False, False, False, None)
    vh.declare_queue("q", False, False, exclusive, False, None, OWNER)
    vh.bind("x", ("queue", "q"), "k", {})
    return vh


def bound(vh: VHost) -> bool:
    return vh.exchanges["x"].has_binding("k", ("queue", "q"), {})


@pytest.mark.parametrize(
    "source, queue, key",
    [("x", "missing", "k"), ("missing", "q", "k"), ("missing", "missing", "k"), ("x", "q", "other")],
    ids=["missing-queue", "missing-exchange", "both-missing", "missing-binding"],
)
def test_unbinding_what_does_not_exist_is_ok(source: str, queue: str, key: str) -> None:
    vh = vhost_with_binding()
    vh.unbind(source, ("queue", queue), key, {}, OWNER)
    assert bound(vh)


def test_unbind_removes_the_binding() -> None:
    vh = vhost_with_binding()
    vh.unbind("x", ("queue", "q"), "k", {}, OWNER)
    assert not bound(vh)


def test_default_exchange_is_refused_even_for_a_missing_queue() -> None:
    with pytest.raises(AccessRefused):
        VHost().unbind("", ("queue", "missing"), "k", {}, OWNER)


def test_another_connections_exclusive_queue_is_locked_only_when_the_binding_exists() -> None:
    vh = vhost_with_binding(exclusive=True)
    vh.unbind("x", ("queue", "q"), "not-bound", {}, OTHER)
    vh.unbind("missing", ("queue", "q"), "k", {}, OTHER)
    with pytest.raises(ResourceLocked):
        vh.unbind("x", ("queue", "q"), "k", {}, OTHER)
    assert bound(vh)
    vh.unbind("x", ("queue", "q"), "k", {}, OWNER)
    assert not bound(vh)
