"""Deduplication settings and cache (vhost/dedup.py), with a fake clock (plain integers)."""

from __future__ import annotations

import pytest
from ottermq.amqp.errors import PreconditionFailed
from ottermq.amqp.props import rewrite_props
from ottermq.amqp.table import Long, encode_table
from ottermq.vhost.dedup import DedupCache, DedupSettings, dedup_key, dedup_settings
from ottermq.vhost.message import Message
from ottermq.vhost.vhost import DUPLICATE, ROUTED, UNROUTED, VHost

H = "x-deduplication-header"


def test_settings_off_unless_enabled() -> None:
    assert dedup_settings({}) is None
    assert dedup_settings({"x-message-deduplication": False}) is None
    assert dedup_settings({"x-cache-size": 5}) is None


def test_settings_defaults_and_overrides() -> None:
    assert dedup_settings({"x-message-deduplication": True}) == DedupSettings(128, None, H, False)
    durable = dedup_settings({"x-message-deduplication": True}, durable=True)
    assert durable == DedupSettings(128, None, H, True)
    args = {
        "x-message-deduplication": True,
        "x-cache-size": 3,
        "x-cache-ttl": 500,
        "x-deduplication-header": "msg-id",
        "x-cache-persistence": "memory",
    }
    assert dedup_settings(args, durable=True) == DedupSettings(3, 500, "msg-id", False)


def test_settings_from_a_policy_argument_wins() -> None:
    policy = {"message-deduplication": True, "cache-size": 7, "cache-ttl": 100}
    assert dedup_settings({}, policy) == DedupSettings(7, 100, H, False)
    assert dedup_settings({"x-cache-size": 2}, policy) == DedupSettings(2, 100, H, False)


def test_plugin_exchange_type_needs_a_size() -> None:
    with pytest.raises(PreconditionFailed, match="'x-cache-size' for exchange 'x'.*required"):
        dedup_settings({}, always=True, resource="exchange 'x' in vhost '/'")
    assert dedup_settings({"x-cache-size": 1}, always=True) == DedupSettings(1, None, H, False)


@pytest.mark.parametrize(
    ("args", "key"),
    [
        ({"x-cache-size": 0}, "x-cache-size"),
        ({"x-cache-size": "10"}, "x-cache-size"),
        ({"x-cache-ttl": -1}, "x-cache-ttl"),
        ({"x-deduplication-header": 5}, "x-deduplication-header"),
        ({"x-cache-persistence": "ram"}, "x-cache-persistence"),
        ({"x-message-deduplication": "yes"}, "x-message-deduplication"),
    ],
)
def test_invalid_settings(args: dict[str, object], key: str) -> None:
    with pytest.raises(PreconditionFailed, match=f"invalid arg '{key}' for queue 'q'"):
        dedup_settings({"x-message-deduplication": True, **args}, resource="queue 'q' in vhost '/'")


def test_keys_keep_their_type() -> None:
    assert dedup_key({H: 1}, H) != dedup_key({H: "1"}, H)
    assert dedup_key({H: "a"}, H) == dedup_key({H: "a", "other": 2}, H)
    assert dedup_key({}, H) is None
    assert dedup_key(None, H) is None


def test_cache_remembers_and_evicts_oldest_first() -> None:
    cache = DedupCache(DedupSettings(size=2))
    assert not cache.duplicate({H: "a"}, 0)
    assert cache.duplicate({H: "a"}, 1)
    assert not cache.duplicate({H: "b"}, 2)
    assert not cache.duplicate({H: "c"}, 3)  # evicts "a"
    assert len(cache) == 2
    assert not cache.duplicate({H: "a"}, 4)  # forgotten, so new again (evicts "b")
    assert cache.duplicate({H: "c"}, 5)
    assert cache.duplicates == 2


def test_no_header_is_never_a_duplicate() -> None:
    cache = DedupCache(DedupSettings(size=2))
    for now in range(5):
        assert not cache.duplicate({"other": 1}, now)
        assert not cache.duplicate(None, now)
    assert len(cache) == 0


def test_ttl_and_per_message_override() -> None:
    cache = DedupCache(DedupSettings(size=10, ttl=100))
    assert not cache.duplicate({H: "a"}, 1000)
    assert cache.duplicate({H: "a"}, 1099)
    assert not cache.duplicate({H: "a"}, 1100)  # expired: remembered again until 1200
    assert cache.duplicate({H: "a"}, 1199)
    assert not cache.duplicate({H: "b", "x-cache-ttl": Long(10)}, 2000)
    assert cache.duplicate({H: "b"}, 2009)
    assert not cache.duplicate({H: "b"}, 2010)


def test_hooks_see_every_change() -> None:
    events: list[tuple[str, bytes, int | None]] = []
    cache = DedupCache(
        DedupSettings(size=1, ttl=5),
        on_add=lambda k, e: events.append(("add", k, e)),
        on_remove=lambda k: events.append(("remove", k, None)),
    )
    cache.duplicate({H: "a"}, 0)
    cache.duplicate({H: "b"}, 1)
    cache.duplicate({H: "b"}, 10)
    ka, kb = dedup_key({H: "a"}, H), dedup_key({H: "b"}, H)
    assert events == [
        ("add", ka, 5),
        ("remove", ka, None),
        ("add", kb, 6),
        ("remove", kb, None),
        ("add", kb, 15),
    ]


def test_resize_trims_oldest() -> None:
    cache = DedupCache(DedupSettings(size=3))
    for i, key in enumerate("abc"):
        cache.duplicate({H: key}, i)
    cache.resize(DedupSettings(size=1))
    assert [k for k, _ in cache.items()] == [dedup_key({H: "c"}, H)]


# -- through VHost.publish -----------------------------------------------------------------------------
def _msg(key: str | None, routing_key: str = "q") -> Message:
    headers = {H: key} if key is not None else {}
    return Message("", routing_key, rewrite_props(b"\x00\x00", encode_table(headers), False), b"x")


def test_exchange_dedup_does_not_route_a_duplicate() -> None:
    vhost = VHost()
    vhost.declare_queue("q", False, False, False, False, None, None)
    x = vhost.declare_exchange("x", "direct", False, False, False, False, {"x-message-deduplication": True})
    vhost.bind("x", ("queue", "q"), "q", {})
    assert vhost.publish(x, _msg("1")) is ROUTED
    assert vhost.publish(x, _msg("1")) is DUPLICATE
    assert vhost.publish(x, _msg(None)) is ROUTED
    assert vhost.queues["q"].message_count == 2


def test_plugin_exchange_routes_like_fanout() -> None:
    vhost = VHost()
    for name in ("a", "b"):
        vhost.declare_queue(name, False, False, False, False, None, None)
    x = vhost.declare_exchange(
        "d", "x-message-deduplication", False, False, False, False, {"x-cache-size": 5}
    )
    vhost.bind("d", ("queue", "a"), "", {})
    vhost.bind("d", ("queue", "b"), "ignored", {})
    assert vhost.publish(x, _msg("k", "whatever")) is ROUTED
    assert vhost.publish(x, _msg("k", "whatever")) is DUPLICATE
    assert [vhost.queues[n].message_count for n in "ab"] == [1, 1]


def test_plugin_exchange_without_size_is_refused() -> None:
    vhost = VHost()
    with pytest.raises(PreconditionFailed, match="x-cache-size"):
        vhost.declare_exchange("d", "x-message-deduplication", False, False, False, False, {})
    assert "d" not in vhost.exchanges


def test_queue_dedup_routes_but_does_not_enqueue() -> None:
    vhost = VHost()
    vhost.declare_queue("q", False, False, False, False, {"x-message-deduplication": True}, None)
    vhost.declare_queue("plain", False, False, False, False, None, None)
    x = vhost.declare_exchange("f", "fanout", False, False, False, False, None)
    vhost.bind("f", ("queue", "q"), "", {})
    vhost.bind("f", ("queue", "plain"), "", {})
    assert vhost.publish(None, _msg("1")) is not UNROUTED
    assert vhost.publish(None, _msg("1")) is ROUTED  # the default exchange: routed, not enqueued
    vhost.publish(x, _msg("1"))
    assert vhost.queues["q"].message_count == 1
    assert vhost.queues["plain"].message_count == 1


def test_policy_switches_dedup_on_and_off() -> None:
    from ottermq.vhost.policy import make_policy

    vhost = VHost()
    vhost.declare_queue("q", False, False, False, False, None, None)
    vhost.set_policy(make_policy("/", "d", "^q$", {"message-deduplication": True, "cache-size": 5}, "queues"))
    queue = vhost.queues["q"]
    assert queue.dedup is not None and queue.dedup.settings.size == 5
    vhost.publish(None, _msg("1"))
    vhost.publish(None, _msg("1"))
    assert queue.message_count == 1
    vhost.delete_policy("d")
    assert queue.dedup is None
    vhost.publish(None, _msg("1"))
    assert queue.message_count == 2
