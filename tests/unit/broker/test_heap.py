"""``broker/node/heap.py``: glibc's free heap pages handed back after a backlog drains."""

from __future__ import annotations

import sys

import pytest
from ottermq.broker.node.alarms import process_rss
from ottermq.broker.node.heap import HeapTrimmer


@pytest.fixture
def trimmer() -> HeapTrimmer:
    t = HeapTrimmer(process_rss, threshold=1 << 20, every=2)
    if not t.enabled:
        pytest.fail("this machine's C library is glibc (Debian): mallinfo2 and malloc_trim must be found")
    return t


def test_a_freed_backlog_is_trimmed_on_the_next_look(trimmer: HeapTrimmer) -> None:
    blocks = [bytearray(4096) for _ in range(20_000)]  # 80 MiB in glibc's heap (over pymalloc's 512 B)
    pin = bytearray(4096)  # still alive above them: glibc cannot give the freed blocks back by itself
    held = process_rss()
    del blocks
    assert trimmer.free_held() >= 64 << 20
    trimmer.tick()  # not a looking tick (every 2)
    assert trimmer.trims == 0
    trimmer.tick()
    assert trimmer.trims == 1
    rss = process_rss()
    assert held is not None and rss is not None and held - rss >= 32 << 20 and trimmer.trimmed > 0
    trimmer.tick()
    trimmer.tick()
    assert trimmer.trims == 1  # nothing new was freed: the trimmed pages still count as free chunks
    del pin


def test_nothing_is_trimmed_below_the_threshold() -> None:
    t = HeapTrimmer(process_rss, threshold=1 << 62, every=1)
    for _ in range(3):
        t.tick()
    assert t.trims == 0


def test_off_without_glibc() -> None:
    t = HeapTrimmer(process_rss, threshold=0, every=1)
    t._libc = None  # as on musl or macOS
    t.tick()
    assert (t.enabled, t.trims, t.free_held(), t.trim()) == (False, 0, 0, 0)


def test_a_drained_python_heap_is_collected_once_then_handed_back() -> None:
    drained: list[int] = []
    t = HeapTrimmer(process_rss, threshold=1 << 62, every=1, blocks_drop=100_000)
    t.on_drained = lambda: drained.append(t.collections)
    # a backlog of more blocks than the process holds (a drain must halve the count): a tuple, a str and
    # an int each
    backlog = [(i + 1000, str(i)) for i in range(max(200_000, sys.getallocatedblocks()))]
    t.tick()  # the peak
    assert drained == []
    del backlog
    t.tick()
    assert drained == [1] and t.collections == 1
    t.tick()
    t.tick()
    assert t.collections == 1  # the peak was reset to what was left


def test_a_small_drop_is_no_drain() -> None:
    t = HeapTrimmer(process_rss, threshold=1 << 62, every=1, blocks_drop=1 << 40)
    t.on_drained = lambda: pytest.fail("not a drain")
    backlog = [(i, str(i)) for i in range(50_000)]
    t.tick()
    del backlog
    t.tick()
    assert t.collections == 0
