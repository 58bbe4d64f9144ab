"""Dead-letter archive: record fields, typed headers, batching, rotation, .part files, errors."""

from __future__ import annotations

import base64
import json
import logging
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from ottermq.amqp.table import (
    Float,
    Long,
    LongLong,
    LongStr,
    Octet,
    Short,
    ShortShort,
    Timestamp,
    ULong,
    UShort,
    decode_table,
    encode_table,
)
from ottermq.dlx.deadletter import DeadLetterer, death_count
from ottermq.dlx.xdeath import dead_letter_routing_keys
from ottermq.persistence.archive import (
    SCHEMA_KEYS,
    ArchiveFiles,
    DeadLetterArchive,
    NullArchive,
    dumps_line,
    headers_from_json,
    headers_to_json,
    read_props,
)
from ottermq.vhost.message import Entry, Message
from ottermq.vhost.vhost import VHost

HOUR = 3_600_000
T0 = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC
T0_HOUR = T0 // HOUR * HOUR


def props(
    content_type: str | None = None,
    headers: dict[str, object] | None = None,
    correlation_id: str | None = None,
    expiration: str | None = None,
    message_id: str | None = None,
) -> bytes:
    """Raw property octets (flags + list) as a publisher sends them."""
    flags = 0
    out = bytearray()

    def short(value: str) -> None:
        raw = value.encode()
        out.append(len(raw))
        out.extend(raw)

    if content_type is not None:
        flags |= 0x8000
        short(content_type)
    if headers is not None:
        flags |= 0x2000
        out.extend(encode_table(headers))
    flags |= 0x1000
    out.append(2)  # delivery-mode
    if correlation_id is not None:
        flags |= 0x0400
        short(correlation_id)
    if expiration is not None:
        flags |= 0x0100
        short(expiration)
    if message_id is not None:
        flags |= 0x0080
        short(message_id)
    return flags.to_bytes(2, "big") + bytes(out)


def message(body: bytes = b"hello", routing_key: str = "rk", exchange: str = "ex", **kw: Any) -> Message:
    return Message(exchange, routing_key, props(**kw), body, True)


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make(tmp_path: Path, clock: Clock | None = None, **kw: Any) -> DeadLetterArchive:
    kw.setdefault("threaded", False)
    return DeadLetterArchive(
        tmp_path / "archive",
        routing_keys=dead_letter_routing_keys,
        death_count=death_count,
        clock=clock or Clock(),
        **kw,
    )


def rec(a: DeadLetterArchive, msg: Message | None = None, t: int = T0, **kw: Any) -> None:
    args: dict[str, Any] = {
        "time_ms": t,
        "vhost": "/",
        "queue": "q",
        "reason": "expired",
        "dlx": "dlx",
        "dlx_routing_key": "rk",
        "drop_reason": None,
        "death_count": 1,
        "message": msg or message(),
        "enqueued_at": t - 5,
    }
    args.update(kw)
    keys = ("message", "enqueued_at", "death_count", "dlx_routing_key", "drop_reason")
    items = [args[k] for k in keys]
    a.record(
        args["time_ms"],
        args["vhost"],
        args["queue"],
        args["reason"],
        args["dlx"],
        items,
        args.get("policy"),
        args.get("limit"),
    )


def files(root: Path, pattern: str = "*.jsonl") -> list[Path]:
    return sorted(root.rglob(pattern))


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


# --- typed headers ---------------------------------------------------------------------------------

EVERY_TYPE: dict[str, object] = {
    "bool": True,
    "false": False,
    "b": ShortShort(-5),
    "B": Octet(200),
    "s": Short(-30000),
    "u": UShort(60000),
    "I": Long(-2_000_000_000),
    "i": ULong(4_000_000_000),
    "l": LongLong(-(2**62)),
    "f": Float(1.5),
    "f-odd": Float(0.1),  # not exact in 32 bits: must come back as the same 32-bit value
    "d": 0.1,
    "D": Decimal("123.450"),
    "S": "text é ✓",
    "T": Timestamp(1_700_000_000),
    "F": {"inner": LongLong(1), "deeper": {"x": "y"}},
    "A": [LongLong(1), "two", [Short(3)], {"k": None}],
    "x": b"\x00\xffbytes",
    "V": None,
    "empty-A": [],
    "empty-F": {},
}


def test_typed_headers_round_trip_every_type():
    wire = encode_table(EVERY_TYPE)
    decoded = decode_table(wire)[0]
    text = json.dumps(headers_to_json(decoded), allow_nan=False)
    back = headers_from_json(json.loads(text))
    assert encode_table(back) == wire


def test_a_value_nested_deeper_than_the_broker_reads_is_archived_as_its_octets():
    inner: object = "leaf"
    for _ in range(200):
        inner = {"a": inner}
    wire = encode_table({"deep": inner})
    decoded = decode_table(wire)[0]
    text = json.dumps(headers_to_json(decoded), allow_nan=False)
    assert '"t": "R"' in text
    assert encode_table(headers_from_json(json.loads(text))) == wire


def test_typed_headers_json_shape():
    typed = json.loads(json.dumps(headers_to_json(decode_table(encode_table(EVERY_TYPE))[0])))
    assert {k: v["t"] for k, v in typed.items()} == {
        "bool": "t",
        "false": "t",
        "b": "b",
        "B": "B",
        "s": "s",
        "u": "u",
        "I": "I",
        "i": "i",
        "l": "l",
        "f": "f",
        "f-odd": "f",
        "d": "d",
        "D": "D",
        "S": "S",
        "T": "T",
        "F": "F",
        "A": "A",
        "x": "x",
        "V": "V",
        "empty-A": "A",
        "empty-F": "F",
    }
    assert typed["bool"]["v"] is True and typed["i"]["v"] == 4_000_000_000
    assert typed["D"]["v"] == "123.450" and typed["T"]["v"] == 1_700_000_000
    assert typed["x"]["v"] == base64.b64encode(b"\x00\xffbytes").decode()
    assert typed["F"]["v"] == {
        "inner": {"t": "l", "v": 1},
        "deeper": {"t": "F", "v": {"x": {"t": "S", "v": "y"}}},
    }
    assert typed["A"]["v"][2] == {"t": "A", "v": [{"t": "s", "v": 3}]}
    assert typed["V"] == {"t": "V", "v": None}


def test_typed_headers_odd_values_stay_valid_json():
    typed = headers_to_json({"nan": float("nan"), "inf": Float(float("inf")), "bad": LongStr(b"a\xffb")})
    assert typed == {
        "nan": {"t": "d", "v": "NaN"},
        "inf": {"t": "f", "v": "Infinity"},
        "bad": {"t": "S", "v": "a\ufffdb"},
    }
    back = headers_from_json(typed)
    assert back["inf"] == float("inf") and back["nan"] != back["nan"]  # NaN


def test_read_props():
    raw = props("text/plain", {"a": 1}, "corr", "60000", "mid")
    assert read_props(raw) == ("text/plain", "corr", "60000", "mid", {"a": 1})
    assert read_props(b"\x00\x00") == (None, None, None, None, None)


# --- records ---------------------------------------------------------------------------------------


def test_record_fields(tmp_path):
    headers = {"CC": ["cc1", "cc2"], "n": Long(7), "who": "José ✓"}
    msg = message(
        b"x" * 10,
        "rk",
        "orders",
        content_type="application/json",
        headers=headers,
        correlation_id="c-1",
        expiration="5000",
        message_id="m-1",
    )
    a = make(tmp_path, body_bytes=4)
    rec(a, msg, drop_reason=None, death_count=3)
    rec(a, message(b"", headers=None), drop_reason="no_dlx", dlx=None, dlx_routing_key=None, enqueued_at=0)
    a.close_sync()
    (path,) = files(tmp_path)
    first, second = lines(path)
    assert list(first) == list(SCHEMA_KEYS)
    # the writer's templated lines are exactly compact JSON of the record
    assert path.read_bytes() == dumps_line(first) + dumps_line(second)
    assert first == {
        "schema": 2,
        "time_ms": T0,
        "reason": "expired",
        "vhost": "/",
        "queue": "q",
        "exchange": "orders",
        "routing_keys": ["rk", "cc1", "cc2"],
        "dlx": "dlx",
        "dlx_routing_key": "rk",
        "policy": None,
        "outcome": "routed",
        "drop_reason": None,
        "death_count": 3,
        "original_expiration": "5000",
        "enqueued_ms": T0 - 5,
        "message_id": "m-1",
        "correlation_id": "c-1",
        "content_type": "application/json",
        "headers": {
            "CC": {"t": "A", "v": [{"t": "S", "v": "cc1"}, {"t": "S", "v": "cc2"}]},
            "n": {"t": "I", "v": 7},
            "who": {"t": "S", "v": "José ✓"},
        },
        "body_size": 10,
        "body_b64": base64.b64encode(b"xxxx").decode(),
        "body_truncated": True,
        # no queue TTL given: the message's own expiration killed it
        "limit": "expiration",
        "limit_value": 5000,
        "limit_source": "message",
    }
    assert (second["outcome"], second["drop_reason"], second["dlx"], second["dlx_routing_key"]) == (
        "dropped",
        "no_dlx",
        None,
        None,
    )
    assert (second["headers"], second["enqueued_ms"], second["body_b64"], second["body_truncated"]) == (
        None,
        None,
        "",
        False,
    )


@pytest.mark.parametrize(
    ("reason", "queue_limit", "expiration", "expected"),
    [
        ("expired", ("message-ttl", 60000, "policy"), "5000", ["expiration", 5000, "message"]),
        ("expired", ("message-ttl", 2000, "argument"), "5000", ["message-ttl", 2000, "argument"]),
        ("expired", ("message-ttl", 5000, "operator-policy"), "5000", ["expiration", 5000, "message"]),
        ("expired", ("message-ttl", 2000, "argument"), None, ["message-ttl", 2000, "argument"]),
        ("maxlen", ("max-length", 10, "argument"), "5000", ["max-length", 10, "argument"]),
        ("delivery_limit", ("delivery-limit", 3, "policy"), None, ["delivery-limit", 3, "policy"]),
        ("rejected", None, "5000", [None, None, None]),
    ],
)
def test_the_limit_that_killed_a_message(tmp_path, reason, queue_limit, expiration, expected):
    a = make(tmp_path)
    rec(a, message(expiration=expiration), reason=reason, limit=queue_limit)
    a.close_sync()
    ((line,),) = [lines(path) for path in files(tmp_path)]
    assert [line["limit"], line["limit_value"], line["limit_source"]] == expected
    assert list(line) == list(SCHEMA_KEYS)


def test_bodies_not_archived_by_default(tmp_path):
    a = make(tmp_path)
    rec(a, message(b"secret"))
    a.close_sync()
    (record,) = lines(files(tmp_path)[0])
    assert (record["body_size"], record["body_b64"], record["body_truncated"]) == (6, None, False)


def test_death_count_computed_in_the_writer_when_unknown(tmp_path):
    earlier = {"x-death": [{"count": LongLong(2), "queue": "q", "reason": "expired"}]}
    a = make(tmp_path)
    rec(a, message(headers=earlier), death_count=None)
    rec(a, message(headers=earlier), death_count=None, reason="rejected")
    rec(a, message(), death_count=None)
    a.close_sync()
    assert [r["death_count"] for r in lines(files(tmp_path)[0])] == [3, 1, 1]


def test_death_count_follows_rabbitmq_grouping():
    assert death_count(None, "q", "expired") == 1
    same_twice = {"x-death": [{"queue": "q", "reason": "expired"}, {"queue": "q", "reason": "expired"}]}
    assert death_count(same_twice, "q", "expired") == 3


# --- batching, files -------------------------------------------------------------------------------


def test_writes_in_batches_not_per_record(tmp_path, monkeypatch):
    chunks: list[int] = []
    real = ArchiveFiles._write_chunk

    def counting(self: ArchiveFiles, f: Any, data: bytes) -> None:
        chunks.append(data.count(b"\n"))
        real(self, f, data)

    monkeypatch.setattr(ArchiveFiles, "_write_chunk", counting)
    a = make(tmp_path)
    for i in range(500):
        rec(a, t=T0 + i)
    assert a.waiting == 500 and not list((tmp_path / "archive").rglob("*"))  # nothing until the writer runs
    a.write_pending()
    assert chunks == [500] and a.written == 500 and a.waiting == 0
    (part,) = files(tmp_path, "*.jsonl.part")
    assert part.parent.relative_to(tmp_path / "archive").as_posix() == "2023-11-14/22"
    assert part.name == f"deadletters-{T0}-{os.getpid()}-1.jsonl.part"
    assert files(tmp_path) == []  # readers see nothing until it is closed
    a.close_sync()
    (done,) = files(tmp_path)
    assert done == part.with_suffix("") and [r["time_ms"] for r in lines(done)] == list(range(T0, T0 + 500))


def test_large_backlogs_go_out_in_bounded_chunks(tmp_path, monkeypatch):
    chunks: list[int] = []
    real = ArchiveFiles._write_chunk

    def counting(self: ArchiveFiles, f: Any, data: bytes) -> None:
        chunks.append(data.count(b"\n"))
        real(self, f, data)

    monkeypatch.setattr(ArchiveFiles, "_write_chunk", counting)
    a = make(tmp_path)
    for _ in range(10):
        a.record(T0, "/", "q", "expired", None, [message(), 0, 1, None, "no_dlx"] * 100)
    # one death event of 9000 (a TTL burst) is split between chunks
    a.record(T0 + 1, "/", "big", "expired", None, [message(), 0, 1, None, "no_dlx"] * 9000)
    rec(a, t=T0 + 2)
    a.write_pending()
    assert chunks == [4096, 4096, 1809] and a.written == 10_001 and a.waiting == 0
    a.close_sync()
    records = lines(files(tmp_path)[0])
    assert [r["queue"] for r in records] == ["q"] * 1000 + ["big"] * 9000 + ["q"]
    assert [r["time_ms"] for r in records] == [T0] * 1000 + [T0 + 1] * 9000 + [T0 + 2]


def test_rotation_by_size(tmp_path):
    a = make(tmp_path, max_bytes=4096)
    for i in range(40):
        rec(a, t=T0 + i)
    a.write_pending()
    a.close_sync()
    paths = files(tmp_path)
    assert len(paths) > 1 and files(tmp_path, "*.part") == []
    assert all(p.stat().st_size <= 4096 for p in paths)
    by_n = sorted(paths, key=lambda p: int(p.name.split("-")[3].split(".")[0]))
    times = [r["time_ms"] for p in by_n for r in lines(p)]
    assert times == list(range(T0, T0 + 40))
    # the name carries the time of the file's first record
    assert all(p.name.startswith(f"deadletters-{lines(p)[0]['time_ms']}-") for p in paths)


def test_a_line_larger_than_max_bytes_gets_its_own_file(tmp_path):
    a = make(tmp_path, max_bytes=4096, body_bytes=10_000)
    rec(a, message(b"y" * 8000))
    rec(a)
    a.close_sync()
    assert len(files(tmp_path)) == 2


def test_rotation_by_hour_and_closing_the_previous_hour(tmp_path):
    clock = Clock(T0)
    a = make(tmp_path, clock)
    rec(a, t=T0)
    a.write_pending()
    rec(a, t=T0_HOUR + HOUR + 1)  # a death in the next hour starts a new file there
    clock.now = T0_HOUR + HOUR + 1
    a.write_pending()
    root = tmp_path / "archive"
    assert [p.relative_to(root).parent.as_posix() for p in files(tmp_path)] == ["2023-11-14/22"]
    assert [p.relative_to(root).parent.as_posix() for p in files(tmp_path, "*.part")] == ["2023-11-14/23"]
    clock.now += HOUR  # an idle hour change closes the open file too
    a.write_pending()
    assert len(files(tmp_path)) == 2 and files(tmp_path, "*.part") == []
    a.close_sync()


def test_an_idle_file_is_closed_so_readers_see_it(tmp_path):
    clock = Clock(T0)
    a = make(tmp_path, clock, idle_close=60)
    rec(a, t=T0)
    a.write_pending()
    assert files(tmp_path) == [] and len(files(tmp_path, "*.part")) == 1
    clock.now = T0 + 59_999
    a.write_pending()
    assert files(tmp_path) == []  # not idle long enough
    clock.now = T0 + 60_000
    a.write_pending()
    assert len(files(tmp_path)) == 1 and files(tmp_path, "*.part") == []
    rec(a, t=clock.now)  # the next death in the same hour opens a new file
    a.write_pending()
    assert len(files(tmp_path)) == 1 and len(files(tmp_path, "*.part")) == 1
    a.close_sync()
    assert len(files(tmp_path)) == 2


def test_idle_close_off_keeps_the_file_open_within_its_hour(tmp_path):
    clock = Clock(T0)
    a = make(tmp_path, clock, idle_close=0)
    rec(a, t=T0)
    a.write_pending()
    clock.now = T0 + 10 * 60_000
    a.write_pending()
    assert files(tmp_path) == [] and len(files(tmp_path, "*.part")) == 1
    a.close_sync()


def test_records_of_other_hours_are_filed_by_time_of_death(tmp_path):
    a = make(tmp_path)
    for t in (T0, T0 - HOUR, T0, T0 - HOUR):
        rec(a, t=t)
    a.close_sync()
    paths = files(tmp_path)
    assert [p.parent.name for p in paths] == ["21", "22"]
    assert [len(lines(p)) for p in paths] == [2, 2]


def test_overflow_counts_lost_and_warns_once(tmp_path, caplog):
    a = make(tmp_path, queue_limit=3)
    with caplog.at_level(logging.WARNING, logger="ottermq.persistence.archive"):
        for _ in range(10):
            rec(a)
    assert a.lost == 7 and a.waiting == 3
    assert len([r for r in caplog.records if "not archived" in r.message]) == 1
    a.close_sync()
    assert len(lines(files(tmp_path)[0])) == 3


def test_a_death_event_larger_than_the_room_left_is_cut(tmp_path):
    a = make(tmp_path, queue_limit=5)
    rec(a)
    rec(a)
    a.record(T0, "/", "q", "expired", None, [message(), 0, 1, None, "no_dlx"] * 4)
    assert (a.lost, a.waiting) == (1, 5)
    a.write_pending()
    a.record(T0, "/", "q", "expired", None, [message(), 0, 1, None, "no_dlx"] * 4)
    assert (a.lost, a.waiting) == (1, 4)
    a.close_sync()
    assert len(lines(files(tmp_path)[0])) == 9


def test_records_after_close_are_lost_not_raised(tmp_path):
    a = make(tmp_path)
    a.close_sync()
    rec(a)
    assert a.lost == 1


def test_unwritable_directory_is_logged_counted_and_retried(tmp_path, caplog):
    blocker = tmp_path / "archive"
    blocker.write_text("a file where the archive directory should be")
    a = make(tmp_path)
    with caplog.at_level(logging.ERROR, logger="ottermq.persistence.archive"):
        rec(a)
        a.write_pending()
        rec(a)
        a.write_pending()
    assert a.write_errors == 2 and a.written == 0 and a.waiting == 2
    assert len([r for r in caplog.records if "cannot write" in r.message]) == 1  # rate-limited
    blocker.unlink()  # the disk is fine again: the waiting lines go out
    rec(a)
    a.write_pending()
    assert a.written == 3 and a.waiting == 0
    a.close_sync()
    assert len(lines(files(tmp_path)[0])) == 3


class FullDisk:
    """An open archive file on a disk that fills up after 7 more bytes."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def write(self, data: Any) -> int:
        self.real.write(bytes(data[:7]))
        raise OSError(28, "No space left on device")

    def fileno(self) -> int:
        return int(self.real.fileno())

    def close(self) -> None:
        self.real.close()


def test_failed_write_cuts_the_file_back_and_keeps_the_lines(tmp_path):
    a = make(tmp_path)
    rec(a, t=T0)
    a.write_pending()
    (open_file,) = a.files._open.values()
    open_file.file = FullDisk(open_file.file)
    rec(a, t=T0 + 1)
    a.write_pending()
    assert a.write_errors == 1 and a.waiting == 1
    (closed,) = files(tmp_path)  # cut back to its complete lines, closed and renamed
    assert [r["time_ms"] for r in lines(closed)] == [T0]
    a.write_pending()  # the retry goes to a new file
    a.close_sync()
    assert sorted(r["time_ms"] for p in files(tmp_path) for r in lines(p)) == [T0, T0 + 1]
    assert a.written == 2 and a.waiting == 0


def test_retry_backlog_is_bounded(tmp_path):
    (tmp_path / "archive").write_text("not a directory")
    a = make(tmp_path, queue_limit=5)
    for _ in range(3):
        for _ in range(4):
            rec(a)
        a.write_pending()
    assert a.waiting == 5 and a.lost == 7


def test_stale_part_files_of_dead_processes_are_finished(tmp_path):
    root = tmp_path / "archive"
    folder = root / "2023-11-14" / "22"
    folder.mkdir(parents=True)
    dead = folder / f"deadletters-{T0}-999999999-1.jsonl.part"
    dead.write_bytes(b'{"a":1}\n{"a":2}\n{"a":')
    empty = folder / f"deadletters-{T0}-999999998-1.jsonl.part"
    empty.write_bytes(b'{"a":')
    alive = folder / f"deadletters-{T0}-1-1.jsonl.part"  # pid 1 exists: another writer
    alive.write_bytes(b"{}\n")
    a = make(tmp_path)
    a.write_pending()
    assert dead.with_suffix("").read_bytes() == b'{"a":1}\n{"a":2}\n'
    assert not dead.exists() and not empty.exists() and alive.exists()
    a.close_sync()


def test_threaded_writer_and_async_close(tmp_path):
    import asyncio

    a = make(tmp_path, threaded=True)
    for i in range(100):
        rec(a, t=T0 + i)
    asyncio.run(a.close())
    assert a.closed and a.written == 100
    assert [r["time_ms"] for r in lines(files(tmp_path)[0])] == list(range(T0, T0 + 100))


def test_threaded_writer_stops_at_close_even_when_the_disk_refuses(tmp_path):
    (tmp_path / "archive").write_text("not a directory")
    a = make(tmp_path, threaded=True)
    rec(a)
    a.close_sync(timeout=5)
    assert a._thread is not None and not a._thread.is_alive()
    assert a.write_errors >= 1 and a.waiting == 1 and a.written == 0


def test_null_archive_has_the_same_interface(tmp_path):
    import asyncio

    null = NullArchive()
    rec(null)  # type: ignore[arg-type]
    null.write_pending()
    asyncio.run(null.close())
    assert not null.enabled and null.lost == 0


# --- DeadLetterer reports every dead letter ---------------------------------------------------------


def vhost_with(a: DeadLetterArchive, enabled: bool = True) -> VHost:
    vhost = VHost("v1")
    vhost.sink = DeadLetterer(vhost, lambda: T0, enabled=enabled, archive=a)
    return vhost


def declare(vhost: VHost, name: str, **arguments: Any) -> Any:
    return vhost.declare_queue(name, False, False, False, False, arguments, None)


def die(vhost: VHost, queue: Any, reason: str = "expired", msg: Message | None = None) -> None:
    vhost.sink.dead_letter(queue, [Entry(msg or message(routing_key="k"), 1, None, T0 - 100)], reason)


def test_deadletterer_reports_routed_and_every_drop_reason(tmp_path):
    a = make(tmp_path)
    vhost = vhost_with(a)
    declare(vhost, "dlq")
    routed = declare(vhost, "routed", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    no_dlx = declare(vhost, "no-dlx")
    missing = declare(vhost, "missing", **{"x-dead-letter-exchange": "nope"})
    no_route = declare(vhost, "no-route", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "zz"})
    cycle = declare(vhost, "cycle", **{"x-dead-letter-exchange": ""})  # key "cycle" routes back to it
    die(vhost, routed)
    die(vhost, no_dlx)
    die(vhost, missing, "rejected")
    die(vhost, no_route, "maxlen")
    die(vhost, cycle, msg=message(routing_key="cycle"))
    vhost_off = vhost_with(a, enabled=False)
    die(vhost_off, declare(vhost_off, "off", **{"x-dead-letter-exchange": ""}), "delivery_limit")
    a.close_sync()
    got = [
        (
            r["vhost"],
            r["queue"],
            r["reason"],
            r["dlx"],
            r["dlx_routing_key"],
            r["outcome"],
            r["drop_reason"],
            r["death_count"],
            r["enqueued_ms"],
            r["time_ms"],
        )
        for r in lines(files(tmp_path)[0])
    ]
    assert got == [
        ("v1", "routed", "expired", "", "dlq", "routed", None, 1, T0 - 100, T0),
        ("v1", "no-dlx", "expired", None, None, "dropped", "no_dlx", 1, T0 - 100, T0),
        ("v1", "missing", "rejected", "nope", None, "dropped", "dlx_missing", 1, T0 - 100, T0),
        ("v1", "no-route", "maxlen", "", "zz", "dropped", "no_route", 1, T0 - 100, T0),
        ("v1", "cycle", "expired", "", "cycle", "dropped", "cycle", 1, T0 - 100, T0),
        ("v1", "off", "delivery_limit", "", None, "dropped", "dlx_disabled", 1, T0 - 100, T0),
    ]
    assert vhost.queues["dlq"].message_count == 1


def test_deadletterer_death_count_and_headers_before_the_death(tmp_path):
    a = make(tmp_path)
    vhost = vhost_with(a)
    q = declare(vhost, "q", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q2"})
    q2 = declare(vhost, "q2", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q"})
    die(vhost, q, "rejected", message(routing_key="k", headers={"CC": ["c"]}))
    q2.reject([q2.pop()])  # a consumer rejects it in q2: back to q
    q.reject([q.pop()])  # second rejection in q
    a.close_sync()
    records = lines(files(tmp_path)[0])
    assert [(r["queue"], r["death_count"]) for r in records] == [("q", 1), ("q2", 1), ("q", 2)]
    assert records[0]["headers"] == {"CC": {"t": "A", "v": [{"t": "S", "v": "c"}]}}
    assert records[0]["routing_keys"] == ["k", "c"]
    assert "x-death" in records[2]["headers"] and records[2]["exchange"] == ""
    assert records[2]["routing_keys"] == ["q"]
