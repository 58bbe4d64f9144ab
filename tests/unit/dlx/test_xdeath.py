"""``record_death`` / ``dead_letter_routing_keys`` against golden bytes captured from RabbitMQ 3.10.8.

``rabbitmq_3_10_8_dead_letters.json`` holds, per case, the raw content-header properties of a
message before it was dead-lettered and as RabbitMQ delivered it from the dead-letter queue
(captured over a raw socket, so every type tag and every key position is RabbitMQ's own).
"""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from ottermq.amqp.props import rewrite_props
from ottermq.amqp.table import (
    Long,
    LongLong,
    LongStr,
    Timestamp,
    decode_table,
    encode_table,
)
from ottermq.dlx.reasons import Reason
from ottermq.dlx.xdeath import dead_letter_routing_keys, record_death

GOLDEN = json.loads((Path(__file__).parent / "rabbitmq_3_10_8_dead_letters.json").read_text())
CASES: list[dict[str, Any]] = GOLDEN["cases"]

# basic property flag bits, most significant first, with their wire kinds
_PROPS = [
    ("content_type", 15, "s"),
    ("content_encoding", 14, "s"),
    ("headers", 13, "t"),
    ("delivery_mode", 12, "o"),
    ("priority", 11, "o"),
    ("correlation_id", 10, "s"),
    ("reply_to", 9, "s"),
    ("expiration", 8, "s"),
    ("message_id", 7, "s"),
    ("timestamp", 6, "q"),
    ("type", 5, "s"),
    ("user_id", 4, "s"),
    ("app_id", 3, "s"),
    ("cluster_id", 2, "s"),
]


def split(raw: bytes) -> dict[str, bytes]:
    """Property name -> its octets as on the wire (length prefixes included)."""
    (flags,) = struct.unpack_from(">H", raw)
    pos, out = 2, {}
    for name, bit, kind in _PROPS:
        if not flags & (1 << bit):
            continue
        if kind == "s":
            end = pos + 1 + raw[pos]
        elif kind == "t":
            end = pos + 4 + struct.unpack_from(">I", raw, pos)[0]
        elif kind == "o":
            end = pos + 1
        else:
            end = pos + 8
        out[name], pos = raw[pos:end], end
    assert pos == len(raw)
    return out


def headers_of(props: dict[str, bytes]) -> dict[str, object] | None:
    return decode_table(props["headers"])[0] if "headers" in props else None


def replay(case: dict[str, Any], **kwargs: Any) -> dict[str, object]:
    """What ottermq writes for ``case``: decode ``before``, record the death."""
    before = split(bytes.fromhex(case["before"]))
    headers = headers_of(before)
    expiration = before["expiration"][1:].decode() if "expiration" in before else None
    return record_death(
        headers,
        case["queue"],
        case["reason"],
        case["exchange"],
        dead_letter_routing_keys(case["routing_key"], headers),
        expiration,
        case["now"],
        **{"last_death": False, "strip_cc": case["dead_letter_routing_key"] is not None, **kwargs},
    )


def test_golden_set_covers_the_interesting_cases() -> None:
    names = {c["name"] for c in CASES}
    assert {"none", "allprops", "qttl", "msgttl", "maxlen", "ccbcc", "ccdlrk", "xd_new", "xd_match"} <= names
    assert {"cycle1_rejected", "cycle3_expired", "xd_invalid", "xd_dupes"} <= names
    assert {c["reason"] for c in CASES} == {"rejected", "expired", "maxlen"}


# --------------------------------------------------------------------------------------------------
# the headers table, byte for byte
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_headers_match_rabbitmq_byte_for_byte(case: dict[str, Any]) -> None:
    after = split(bytes.fromhex(case["after"]))
    assert encode_table(replay(case)).hex() == after["headers"].hex()


WITH_HEADERS = [c for c in CASES if "headers" in split(bytes.fromhex(c["before"]))]


@pytest.mark.parametrize("case", WITH_HEADERS, ids=[c["name"] for c in WITH_HEADERS])
def test_input_headers_are_not_mutated(case: dict[str, Any]) -> None:
    headers = headers_of(split(bytes.fromhex(case["before"])))
    assert headers is not None
    snapshot = copy.deepcopy(headers)
    record_death(headers, case["queue"], case["reason"], case["exchange"], ["k"], "5", case["now"])
    assert headers == snapshot
    assert encode_table(headers) == encode_table(snapshot)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_only_headers_and_expiration_change(case: dict[str, Any]) -> None:
    """RabbitMQ drops ``expiration`` and rewrites ``headers``; every other property is kept verbatim."""
    before, after = split(bytes.fromhex(case["before"])), split(bytes.fromhex(case["after"]))
    assert "expiration" not in after
    assert {k: v for k, v in before.items() if k not in ("headers", "expiration")} == {
        k: v for k, v in after.items() if k != "headers"
    }


def test_every_property_survives_dead_lettering() -> None:
    case = next(c for c in CASES if c["name"] == "allprops")
    before, after = split(bytes.fromhex(case["before"])), split(bytes.fromhex(case["after"]))
    assert set(before) - set(after) == {"expiration"}
    assert set(after) == {name for name, _, _ in _PROPS} - {"expiration"}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_whole_property_list_via_rewrite_props(case: dict[str, Any]) -> None:
    """The dead-letter path's property rewrite reproduces RabbitMQ's content header exactly."""
    new = rewrite_props(bytes.fromhex(case["before"]), encode_table(replay(case)), drop_expiration=True)
    assert new.hex() == case["after"]


# --------------------------------------------------------------------------------------------------
# the facts the golden bytes establish, spelled out
# --------------------------------------------------------------------------------------------------
def golden_after(name: str) -> dict[str, object]:
    case = next(c for c in CASES if c["name"] == name)
    headers = headers_of(split(bytes.fromhex(case["after"])))
    assert headers is not None
    return headers


def test_first_death_entry_field_order_and_types() -> None:
    h = golden_after("allprops")
    (entry,) = h["x-death"]  # type: ignore[misc]
    assert list(entry) == [
        "count",
        "reason",
        "queue",
        "time",
        "exchange",
        "routing-keys",
        "original-expiration",
    ]
    assert type(entry["count"]) is LongLong and entry["count"] == 1
    assert type(entry["time"]) is Timestamp
    assert entry["original-expiration"] == "60000"
    raw = encode_table({"e": entry})
    assert b"\x05countl\x00\x00\x00\x00\x00\x00\x00\x01" in raw
    assert b"\x04timeT" in raw
    assert b"\x0crouting-keysA\x00\x00\x00\x0fS\x00\x00\x00\x0ak.allprops" in raw


def test_no_original_expiration_without_expiration() -> None:
    (entry,) = golden_after("qttl")["x-death"]  # type: ignore[misc]
    assert "original-expiration" not in entry


def test_original_expiration_is_verbatim() -> None:
    (entry,) = golden_after("msgttl_odd")["x-death"]  # type: ignore[misc]
    assert entry["original-expiration"] == "+040"


def test_whole_headers_table_is_sorted_by_key_octets() -> None:
    keys = list(golden_after("allprops"))
    assert keys == sorted(keys, key=lambda k: k.encode())
    assert keys[0] == "" and keys[-1] == "ünï"
    assert (
        keys.index("x-custom")
        < keys.index("x-death")
        < keys.index("x-first-death-exchange")
        < keys.index("zeta")
    )


def test_nested_tables_keep_their_order() -> None:
    assert list(golden_after("allprops")["nested"]) == ["z", "a", "m"]  # type: ignore[arg-type]


def test_later_deaths_sort_fields_and_reverse_the_rest() -> None:
    h = golden_after("xd_new")
    deaths: list[dict[str, object]] = h["x-death"]  # type: ignore[assignment]
    assert list(deaths[0]) == ["count", "exchange", "queue", "reason", "routing-keys", "time"]
    assert [d["queue"] for d in deaths] == ["cap.xd_new", "qc", "qb", "qa"]  # was qa, qb, qc
    assert "x-first-death-queue" not in h


def test_repeated_death_keeps_first_time_exchange_and_routing_keys() -> None:
    (entry, *_rest) = golden_after("xd_match")["x-death"]  # type: ignore[misc]
    assert entry == {
        "count": 6,
        "exchange": "old-ex",
        "original-expiration": "77",
        "queue": "cap.xd_match",
        "reason": "rejected",
        "routing-keys": ["old"],
        "time": 1000000000,
        "zz-extra": "kept",
    }
    assert type(entry["count"]) is LongLong  # was 'I'


def test_invalid_x_death_is_reset_without_first_death_headers() -> None:
    h = golden_after("xd_invalid")
    assert list(h) == ["a", "x-death"]


def test_dead_letter_routing_key_removes_cc() -> None:
    assert "CC" in golden_after("ccbcc")
    h = golden_after("ccdlrk")
    assert "CC" not in h and "BCC" not in h
    assert h["x-death"][0]["routing-keys"] == ["k.ccdlrk", "c1", "c2"]  # type: ignore[index]


def test_retry_cycle_counts() -> None:
    deaths = golden_after("cycle3_expired")["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [  # type: ignore[union-attr, index]
        ("cap.retry", "expired", 3),
        ("cap.work", "rejected", 3),
    ]


# --------------------------------------------------------------------------------------------------
# behaviour beyond the captured set
# --------------------------------------------------------------------------------------------------
def test_first_death_without_headers() -> None:
    h = record_death(None, "q", Reason.EXPIRED, "ex", ["rk"], None, 1700000000, last_death=False)
    assert h == {
        "x-death": [
            {
                "count": 1,
                "reason": "expired",
                "queue": "q",
                "time": 1700000000,
                "exchange": "ex",
                "routing-keys": ["rk"],
            }
        ],
        "x-first-death-exchange": "ex",
        "x-first-death-queue": "q",
        "x-first-death-reason": "expired",
    }
    assert type(h["x-death"][0]["time"]) is Timestamp  # type: ignore[index]
    assert type(h["x-death"][0]["reason"]) is str  # type: ignore[index]


def test_last_death_headers_follow_every_death() -> None:
    h1 = record_death({"a": 1}, "q1", Reason.REJECTED, "", ["q1"], None, 10)
    assert list(h1) == [
        "a",
        "x-death",
        "x-first-death-exchange",
        "x-first-death-queue",
        "x-first-death-reason",
        "x-last-death-exchange",
        "x-last-death-queue",
        "x-last-death-reason",
    ]
    assert (h1["x-last-death-queue"], h1["x-last-death-reason"], h1["x-last-death-exchange"]) == (
        "q1",
        "rejected",
        "",
    )
    h2 = record_death(h1, "q2", "expired", "dlx", ["q1"], None, 11)
    assert (h2["x-first-death-queue"], h2["x-first-death-reason"]) == ("q1", "rejected")
    assert (h2["x-last-death-queue"], h2["x-last-death-reason"], h2["x-last-death-exchange"]) == (
        "q2",
        "expired",
        "dlx",
    )
    assert [d["queue"] for d in h2["x-death"]] == ["q2", "q1"]  # type: ignore[union-attr, index]


def test_reason_accepts_enum_or_string() -> None:
    a = record_death(None, "q", Reason.DELIVERY_LIMIT, "", ["q"], None, 1)
    b = record_death(None, "q", "delivery_limit", "", ["q"], None, 1)
    assert encode_table(a) == encode_table(b)
    assert str(Reason.MAXLEN) == "maxlen" and Reason("rejected") is Reason.REJECTED


def test_count_increments_across_many_deaths() -> None:
    h: dict[str, object] | None = None
    for _ in range(5):
        h = record_death(h, "q", "rejected", "", ["q"], None, 1, last_death=False)
    assert h is not None
    assert h["x-death"] == [  # type: ignore[comparison-overlap]
        {"count": 5, "exchange": "", "queue": "q", "reason": "rejected", "routing-keys": ["q"], "time": 1}
    ]


def test_repeat_with_new_time_keeps_old_time() -> None:
    h = record_death(None, "q", "expired", "e1", ["a"], "9", 100, last_death=False)
    h = record_death(h, "q", "expired", "e2", ["b"], None, 200, last_death=False)
    (entry,) = h["x-death"]  # type: ignore[misc]
    assert (entry["time"], entry["exchange"], entry["routing-keys"], entry["original-expiration"]) == (
        100,
        "e1",
        ["a"],
        "9",
    )


def test_non_table_entries_are_carried_along() -> None:
    h = record_death(
        {"x-death": ["junk", {"queue": "q", "reason": "expired", "count": 1}]},
        "q",
        "expired",
        "",
        ["q"],
        None,
        5,
        last_death=False,
    )
    assert h["x-death"] == [{"count": 2, "queue": "q", "reason": "expired"}, "junk"]


def test_non_integer_count_restarts_at_one() -> None:
    h = record_death(
        {"x-death": [{"queue": "q", "reason": "expired", "count": "many"}]},
        "q",
        "expired",
        "",
        ["q"],
        None,
        5,
        last_death=False,
    )
    assert h["x-death"][0]["count"] == 1  # type: ignore[index]
    assert type(h["x-death"][0]["count"]) is LongLong  # type: ignore[index]


def test_x_death_of_void_is_reset() -> None:
    h = record_death({"x-death": None}, "q", "expired", "", ["q"], None, 5, last_death=False)
    assert list(h) == ["x-death"] and h["x-death"][0]["count"] == 1  # type: ignore[index]


def test_binary_queue_names_match_long_strings() -> None:
    h = record_death(
        {"x-death": [{"count": Long(1), "queue": b"q", "reason": LongStr(b"expired")}]},
        "q",
        "expired",
        "",
        ["q"],
        None,
        5,
        last_death=False,
    )
    assert h["x-death"][0]["count"] == 2  # type: ignore[index]


def test_strip_cc_without_cc_is_harmless() -> None:
    h = record_death({"BCC": ["x"]}, "q", "expired", "", ["q"], None, 5, last_death=False, strip_cc=True)
    assert "BCC" in h  # only CC is removed; BCC never reaches a queue on a real broker


# --------------------------------------------------------------------------------------------------
# dead_letter_routing_keys
# --------------------------------------------------------------------------------------------------
def test_routing_keys_without_headers() -> None:
    assert dead_letter_routing_keys("rk", None) == ["rk"]
    assert dead_letter_routing_keys("rk", {}) == ["rk"]


def test_routing_keys_add_cc_and_never_bcc() -> None:
    headers = {"BCC": ["b1"], "CC": ["c1", "c2"], "x": "y"}
    assert dead_letter_routing_keys("rk", headers) == ["rk", "c1", "c2"]


def test_routing_keys_skip_non_string_cc_entries() -> None:
    assert dead_letter_routing_keys("rk", {"CC": ["a", Long(7), None, b"raw", "b"]}) == ["rk", "a", "b"]
    assert dead_letter_routing_keys("rk", {"CC": "not-an-array"}) == ["rk"]


def test_routing_keys_keep_non_utf8_long_strings() -> None:
    keys = dead_letter_routing_keys("rk", {"CC": [LongStr(b"\xff")]})
    h = record_death(None, "q", "rejected", "", keys, None, 1, last_death=False)
    assert b"A\x00\x00\x00\x0dS\x00\x00\x00\x02rkS\x00\x00\x00\x01\xff" in encode_table(h)
