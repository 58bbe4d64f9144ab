"""Spill files: records round-trip every field, pagers keep order through segments, drops, front
pushes and a failing disk, and a new process removes what dead ones left."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
from ottermq.persistence import spill
from ottermq.persistence.spill import SpillDir, decode, encode
from ottermq.vhost.message import PAGED, READY, Entry, Message, SelectedMessage


def entry(seq: int, body: bytes = b"body", persistent: bool = False) -> Entry:
    return Entry(Message("ex", "rk", b"\x00\x00", body, persistent), seq)


def test_a_record_round_trips_every_field():
    base = Message("amq.direct", "ключ", b"\x80\x00\x02", b"\x00" * 3000, True, 7, 1500)
    e = Entry(SelectedMessage(base, b"\x80\x00\x02", ("cc1", "bcc")), 42, 123456, 99)
    e.redelivered, e.delivery_count, e.store_id = True, 3, 1 << 40
    back, n = decode(encode(e), 0)
    assert n == len(encode(e))
    m = back.message
    assert isinstance(m, SelectedMessage) and m.extra_keys == ("cc1", "bcc")
    assert (m.exchange, m.routing_key, m.raw_props, m.body) == (
        "amq.direct",
        "ключ",
        b"\x80\x00\x02",
        b"\x00" * 3000,
    )
    assert (m.persistent, m.priority, m.expiration) == (True, 7, 1500)
    assert (back.seq, back.deadline, back.enqueued_at, back.redelivered) == (42, 123456, 99, True)
    assert (back.delivery_count, back.store_id, back.state) == (3, 1 << 40, READY)
    plain, _ = decode(encode(entry(1)), 0)
    assert not isinstance(plain.message, SelectedMessage)
    assert (plain.deadline, plain.message.priority, plain.message.expiration) == (None, None, None)


def test_pages_come_back_in_order_across_segments_which_are_deleted_when_read(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "SEGMENT_BYTES", 4096)
    pager = SpillDir(tmp_path).pager()
    for i in range(1000):
        pager.push(entry(i, b"x" * 50, persistent=i % 4 == 0))
    assert len(pager) == 1000 and pager.nbytes == 50_000 and pager.transient == (750, 37_500)
    segments = len(list(tmp_path.rglob("*.seg")))
    assert segments > 10
    got = []
    while len(pager):
        page = pager.pull(64, 1 << 20)
        assert page and all(e.state == READY for e in page)
        got += [e.seq for e in page]
    assert got == list(range(1000))
    assert len(list(tmp_path.rglob("*.seg"))) <= 1 and pager.nbytes == 0


def test_a_page_stops_at_its_byte_budget_but_holds_at_least_one_entry(tmp_path):
    pager = SpillDir(tmp_path).pager()
    pager.push(entry(1, b"x" * 500_000))
    pager.push(entry(2, b"y" * 10))
    assert [e.seq for e in pager.pull(10, 100)] == [1]
    assert [e.seq for e in pager.pull(10, 100)] == [2]


def test_dropped_entries_are_left_out_and_pulled_ones_cannot_be_dropped(tmp_path):
    pager = SpillDir(tmp_path).pager()
    es = [entry(i) for i in range(10)]
    for e in es:
        pager.push(e)
    assert pager.drop(es[5]) and len(pager) == 9
    assert [e.seq for e in pager.entries()] == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert [e.seq for e in pager.pull(3, 1 << 20)] == [0, 1, 2]
    assert not pager.drop(es[1])
    assert [e.seq for e in pager.pull(100, 1 << 20)] == [3, 4, 6, 7, 8, 9]


def test_front_pushes_go_before_the_head(tmp_path):
    pager = SpillDir(tmp_path).pager()
    for i in range(10, 15):
        pager.push(entry(i))
    pager.push_front([entry(5), entry(6)])
    pager.push_front([entry(3), entry(4)])
    assert [e.seq for e in pager.pull(100, 1 << 20)] == [3, 4, 5, 6, 10, 11, 12, 13, 14]


def test_a_disk_that_fails_keeps_entries_in_memory_in_order(tmp_path, monkeypatch):
    pager = SpillDir(tmp_path).pager()
    for i in range(5):
        pager.push(entry(i))
    real = os.pwritev
    monkeypatch.setattr(os, "pwritev", lambda *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    for i in range(5, 10):
        pager.push(entry(i))
    assert [e.seq for e in pager.pull(2, 1 << 20)] == [0, 1]  # the flush fails: memory mode
    monkeypatch.setattr(os, "pwritev", real)
    for i in range(10, 12):
        pager.push(entry(i))  # still in memory until the pager is empty again
    assert [e.seq for e in pager.pull(100, 1 << 20)] == list(range(2, 12))
    assert len(pager) == 0
    pager.push(entry(12))
    assert [e.seq for e in pager.pull(100, 1 << 20)] == [12]


def test_clear_removes_the_files(tmp_path):
    pager = SpillDir(tmp_path).pager()
    for i in range(100):
        pager.push(entry(i, b"z" * 5000))
    pager.clear()
    assert len(pager) == 0 and not list(tmp_path.rglob("*.seg"))


def test_a_new_broker_removes_the_spill_of_dead_processes_only(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = tmp_path / f"{dead.stdout.strip()}.1"
    stale.mkdir()
    (stale / "q1-1.seg").write_bytes(b"old")
    alive = tmp_path / f"{os.getppid()}.1"
    alive.mkdir()
    spill_dir = SpillDir(tmp_path)
    spill_dir.pager()
    assert not stale.exists() and alive.exists() and spill_dir.path.is_dir()
    spill_dir.close()
    assert not spill_dir.path.exists()


def test_entries_are_read_back_as_paged(tmp_path):
    pager = SpillDir(tmp_path).pager()
    pager.push(entry(1))
    assert [e.state for e in pager.entries()] == [PAGED]


@pytest.mark.parametrize("n", [0, 1])
def test_an_empty_pull_is_empty(tmp_path, n):
    pager = SpillDir(tmp_path).pager()
    for i in range(n):
        pager.push(entry(i))
        pager.pull(1, 1)
    assert pager.pull(10, 100) == []


def test_drops_at_the_head_are_stepped_over_and_forgotten(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "SEGMENT_BYTES", 2048)
    pager = SpillDir(tmp_path).pager()
    es = [entry(i, b"x" * 100) for i in range(100)]
    for e in es:
        pager.push(e)
    for e in es[:60]:  # a move taking the backlog from its head
        assert pager.drop(e)
    assert not pager._dropped and len(pager) == 40
    assert pager.drop(es[80]) and pager._dropped == {80}  # not at the head: remembered
    assert [e.seq for e in pager.pull(100, 1 << 20)] == [*range(60, 80), *range(81, 100)]
    assert not pager._dropped


def test_a_body_over_big_body_waits_in_memory_in_its_place(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "BIG_BODY", 1000)
    pager = SpillDir(tmp_path).pager()
    es = [entry(i, b"x" * (5000 if i in (2, 5) else 10)) for i in range(8)]
    for e in es:
        pager.push(e)
    assert [e.seq for e in pager.entries()] == list(range(8))  # (flushes)
    assert 0 < sum(f.stat().st_size for f in tmp_path.rglob("*.seg")) < 2000  # big bodies not written
    assert pager.drop(es[5])
    got = pager.pull(100, 1 << 30)
    assert [e.seq for e in got] == [0, 1, 2, 3, 4, 6, 7] and got[2] is es[2]
    assert not pager._big and len(pager) == 0


def test_a_front_push_keeps_a_big_body_in_memory_too(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "BIG_BODY", 1000)
    pager = SpillDir(tmp_path).pager()
    pager.push(entry(9))
    big = entry(3, b"y" * 5000)
    pager.push_front([entry(2), big])
    assert sum(f.stat().st_size for f in tmp_path.rglob("*.seg")) < 1000
    got = pager.pull(10, 1 << 30)
    assert [e.seq for e in got] == [2, 3, 9] and got[1] is big
