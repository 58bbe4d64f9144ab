"""A missing dead-letter exchange drops dead letters with a rate-limited warning."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from ottermq.dlx.deadletter import WARN_EVERY_MS, DeadLetterer
from ottermq.vhost.arguments import parse_queue_args
from ottermq.vhost.message import Entry, Message
from ottermq.vhost.queue import Queue


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def test_missing_dlx_warns_at_most_every_interval_with_the_count(caplog):
    clock = Clock()
    vhost = SimpleNamespace(name="/", exchanges={}, call_soon=None)
    sink = DeadLetterer(vhost, clock)  # type: ignore[arg-type]
    args = parse_queue_args({"x-dead-letter-exchange": "gone"}, "work")
    queue = Queue("work", "/", False, False, False, None, args)

    def die(n: int) -> None:
        entries = [Entry(Message("", "work", b"\x00\x00", b"x", False, None, None), i) for i in range(n)]
        sink.dead_letter(queue, entries, "expired")

    with caplog.at_level(logging.WARNING, logger="ottermq.dlx.deadletter"):
        die(2)
        clock.ms += WARN_EVERY_MS - 1
        die(3)  # within the interval: counted, not logged
        clock.ms += 1
        die(1)
    counts = [r.getMessage().split(" ")[1] for r in caplog.records]
    assert counts == ["2", "4"]
    text = caplog.records[0].getMessage()
    assert "dead-letter exchange 'gone' of queue 'work' in vhost '/' not found" in text
    assert sink.dropped == 6
