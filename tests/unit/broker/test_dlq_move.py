"""Dead-letter browse/move pieces (``broker/node/dlq_move.py``): x-death decoding, header stripping that
keeps AMQP types, targets, selections and their bounds, and copies of messages whose headers cannot be
read (no loop, no store; the jobs are ``test_move_jobs.py``)."""

from __future__ import annotations

import re

import pytest
from ottermq.amqp.props import HEADERS_BIT, join_props, split_props
from ottermq.amqp.table import Long, ShortShort, decode_table, encode_table
from ottermq.broker.node.dlq_move import (
    LastDeaths,
    Unmovable,
    copy_for,
    deaths_of,
    first_death,
    pack_ids,
    selection_from_json,
    strip_death_headers,
    target_of,
    unpack_ids,
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


def test_selections_match_and_pack_their_ids():
    vh = VHost()
    dlq = vh.declare_queue("dlq", False, False, False, False, None, None)
    for i, reason in enumerate(["expired", "rejected", "expired"]):
        dlq.enqueue(dead(f"m{i}".encode(), reason))
    entries = list(dlq.ready_entries())
    last = LastDeaths()
    expired = selection_from_json({"filter": {"reason": "expired"}}).matcher(last)
    assert [e.message.body for e in entries if expired(e)] == [b"m0", b"m2"]
    by_ids = selection_from_json({"ids": [entries[1].seq, entries[1].seq, 10**12]})
    assert by_ids.id_count == 2 and by_ids.ids == pack_ids([10**12, entries[1].seq])
    assert [e.message.body for e in entries if by_ids.matcher(last)(e)] == [b"m1"]
    assert by_ids.as_json() == {"ids": [entries[1].seq, 10**12], "ids_count": 2}
    assert by_ids.as_json(ids=False) == {"ids_count": 2}
    assert unpack_ids(pack_ids([2**63 - 1, 0])) == [0, 2**63 - 1]


def test_a_request_selects_at_most_max_ids():
    assert selection_from_json({"ids": list(range(3))}, max_ids=3).id_count == 3
    with pytest.raises(ValueError, match="^a move selects at most 3 ids, not 4: move by filter or all$"):
        selection_from_json({"ids": list(range(4))}, max_ids=3)
    for bad in ([-1], [2**63], [True]):
        with pytest.raises(ValueError, match="ids must be a list of message ids"):
            selection_from_json({"ids": bad})


def nested(depth: int) -> bytes:
    """A headers table nested ``depth`` tables deep, encoded by hand (the encoder would recurse)."""
    inner = b""
    for _ in range(depth):
        inner = b"\x01aF" + len(inner).to_bytes(4, "big") + inner
    return len(inner).to_bytes(4, "big") + inner


def test_copies_of_messages_whose_headers_cannot_be_read_or_written_are_unmovable():
    last = LastDeaths()
    good = dead()
    assert copy_for(good, None, False, last) == ("orders", "eu.new", strip_death_headers(good))
    assert copy_for(good, ("x", "k"), True, last) == ("x", "k", good.raw_props)
    assert copy_for(Message("", "q", b"\x00\x00", b""), None, False, last) is None  # never died
    deep = Message("", "dlq", join_props({HEADERS_BIT: nested(15_000)}), b"b")
    malformed = Message("", "dlq", join_props({HEADERS_BIT: b"\x00\x00\x00\x03\x01aZ"}), b"b")
    # headers 15,000 deep are read 64 levels deep (the rest kept as octets): movable as they are
    assert last(deep) is None and not last.unreadable(deep)
    assert copy_for(deep, ("x", "k"), False, last) == ("x", "k", deep.raw_props)
    for message in (malformed,):
        assert last(message) is None and last.unreadable(message)  # reading never raises
        with pytest.raises(Unmovable, match="its headers cannot be decoded"):
            copy_for(message, None, False, last)  # no original target to be found
        with pytest.raises(Unmovable, match="its headers cannot be rewritten"):
            copy_for(message, ("x", "k"), False, last)
        assert copy_for(message, ("x", "k"), True, last) == ("x", "k", message.raw_props)  # kept as is
