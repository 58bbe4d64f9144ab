"""Dead-letter browse/move pieces (``broker/dlq_move.py``): x-death decoding, header stripping that keeps
AMQP types, targets, selections, and the one-step move on a real VHost (no loop, no store)."""

from __future__ import annotations

import re

import pytest
from ottermq.amqp.props import HEADERS_BIT, join_props, split_props
from ottermq.amqp.table import Long, ShortShort, decode_table, encode_table
from ottermq.broker.node.dlq_move import (
    LastDeaths,
    Selection,
    deaths_of,
    first_death,
    move_one,
    selection_from_json,
    strip_death_headers,
    target_of,
)
from ottermq.dlx.xdeath import record_death
from ottermq.vhost.message import Message
from ottermq.vhost.vhost import VHost


def dead(
    body: bytes = b"b",
    reason: str = "expired",
    queue: str = "work",
    exchange: str = "orders",
    keys: list[str] | None = None,
    extra: dict[str, object] | None = None,
) -> Message:
    keys = keys or ["eu.new"]
    headers = record_death(dict(extra or {}), queue, reason, exchange, keys, "50", 1_700_000_000)
    raw = join_props({HEADERS_BIT: encode_table(headers)})
    return Message("", "dlq", raw, body)


def test_deaths_decode_most_recent_first():
    message = dead()
    again = record_death(message.headers, "dlq", "rejected", "", ["dlq"], None, 1_700_000_100)
    twice = Message("", "dlq", join_props({HEADERS_BIT: encode_table(again)}), b"b")
    deaths = deaths_of(twice.headers)
    assert [(d["reason"], d["queue"], d["exchange"], d["routing_keys"], d["count"]) for d in deaths] == [
        ("rejected", "dlq", "", ["dlq"], 1),
        ("expired", "work", "orders", ["eu.new"], 1),
    ]
    assert deaths[1]["time"] == 1_700_000_000 and deaths[1]["original_expiration"] == "50"
    assert first_death(twice.headers) == {"reason": "expired", "queue": "work", "exchange": "orders"}
    assert deaths_of(None) == [] and first_death({}) is None


def test_stripping_keeps_other_headers_and_their_types():
    message = dead(extra={"small": ShortShort(3), "big": Long(7), "text": "t"})
    stripped = split_props(strip_death_headers(message))[1]
    headers = decode_table(stripped[HEADERS_BIT])[0]
    assert headers == {"small": 3, "big": 7, "text": "t"}
    assert type(headers["small"]) is ShortShort and type(headers["big"]) is Long
    only_deaths = dead()
    assert HEADERS_BIT not in split_props(strip_death_headers(only_deaths))[1]  # no empty table left
    plain = Message("", "q", b"\x00\x00", b"x")
    assert strip_death_headers(plain) == b"\x00\x00"


def test_targets_and_last_deaths_memo():
    last = LastDeaths(limit=2)
    assert target_of(dead(), None, last) == ("orders", "eu.new")
    assert target_of(dead(exchange=""), None, last) == ("", "eu.new")
    assert target_of(dead(), ("x", "k"), last) == ("x", "k")
    assert target_of(Message("", "q", b"\x00\x00", b""), None, last) is None
    assert len(last._memo) <= 2  # bounded
    message = dead()
    assert last(message) == ("expired", "work", "orders", "eu.new")
    assert message._headers is False  # decoded without being kept on the message


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, "give exactly one of ids, filter or all"),
        ({"ids": [1], "all": True}, "give exactly one of ids, filter or all"),
        ({"ids": ["1"]}, "ids must be a list of message ids (integers)"),
        ({"all": "yes"}, "all must be true"),
        ({"filter": "expired"}, "filter must be an object with reason and/or source_queue"),
        ({"filter": {"reason": 5}}, "filter values must be strings or null"),
    ],
)
def test_selection_errors(body, error):
    with pytest.raises(ValueError, match="^" + re.escape(error) + "$"):
        selection_from_json(body)


def test_one_step_move_on_a_vhost():
    vh = VHost()
    dlq = vh.declare_queue("dlq", False, False, False, False, None, None)
    work = vh.declare_queue("work", False, False, False, False, None, None)
    vh.declare_exchange("orders", "topic", False, False, False, False, None)
    vh.bind("orders", ("queue", "work"), "eu.#", {})
    for i, reason in enumerate(["expired", "rejected", "expired"]):
        dlq.enqueue(dead(f"m{i}".encode(), reason))
    selection = selection_from_json({"filter": {"reason": "expired"}})
    last = LastDeaths()
    chosen = [e for e in dlq.ready_entries() if selection.matches(e, last)]
    assert [e.message.body for e in chosen] == [b"m0", b"m2"]
    assert [move_one(vh, dlq, e, None, False, last)[0] for e in chosen] == ["moved", "moved"]
    assert [e.message.body for e in work.ready_entries()] == [b"m0", b"m2"]
    assert [e.message.body for e in dlq.ready_entries()] == [b"m1"]
    assert move_one(vh, dlq, chosen[0], None, False, last)[0] == "skipped"  # already gone
    rest = next(iter(dlq.ready_entries()))
    assert move_one(vh, dlq, rest, ("orders", "us.new"), True, last)[0] == "unroutable"  # no binding
    assert move_one(vh, dlq, rest, ("missing", "k"), True, last)[0] == "unroutable"
    vh.declare_exchange("hidden", "fanout", False, False, False, True, None)  # internal: no publish
    vh.bind("hidden", ("queue", "work"), "", {})
    assert move_one(vh, dlq, rest, ("hidden", "k"), True, last)[0] == "unroutable"
    assert dlq.message_count == 1
    assert Selection(ids=frozenset({rest.seq})).matches(rest, last)
