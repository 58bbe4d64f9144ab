"""A queue type joins by registering (``vhost/queue_types.py``): declare validation, the queue and the
broker's questions follow it, and classic and quorum queues stay as they were."""

from __future__ import annotations

from typing import Any

import pytest
from ottermq.amqp.errors import PreconditionFailed
from ottermq.vhost.arguments import TYPE_MODULES, check_server_named, parse_queue_args
from ottermq.vhost.classic import ClassicQueueType
from ottermq.vhost.message import Message
from ottermq.vhost.queue import Queue
from ottermq.vhost.queue_types import QUEUE_TYPES

STREAM_ARGS = ("x-queue-type", "x-max-length-bytes", "x-max-age")


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> Any:
    kind = ClassicQueueType()  # a toy "stream": classic semantics, its own name, arguments and rules
    kind.name, kind.module, kind.arguments = "stream", "rabbit_stream_queue", STREAM_ARGS
    kind.foreign_arguments = frozenset()
    kind.server_named = False
    monkeypatch.setitem(QUEUE_TYPES, "stream", kind)
    return kind


def test_unregistered_stream_is_refused_with_rabbitmqs_text() -> None:
    with pytest.raises(PreconditionFailed, match="unsupported queue type 'stream'"):
        parse_queue_args({"x-queue-type": "stream"}, "q")
    assert TYPE_MODULES["stream"] == "rabbit_stream_queue"


def test_a_registered_type_is_declared_validated_and_used(stream: Any) -> None:
    args = parse_queue_args({"x-queue-type": "stream", "x-max-age": "1D"}, "q")
    assert args.queue_type == "stream"
    with pytest.raises(PreconditionFailed, match="of queue type rabbit_stream_queue"):
        parse_queue_args({"x-queue-type": "stream", "x-max-priority": 5}, "q")  # a classic argument
    with pytest.raises(PreconditionFailed, match="server-named queue for type rabbit_stream_queue"):
        check_server_named({"x-queue-type": "stream"})
    queue = Queue("q", "/", True, False, False, None, args)
    assert queue.kind is stream


def test_the_others_do_not_change(stream: Any) -> None:
    with pytest.raises(
        PreconditionFailed, match="'x-max-age' for queue 'q' in vhost '/' of queue type rabbit_classic"
    ):
        parse_queue_args({"x-max-age": "1D"}, "q")
    queue = Queue("q", "/", True, False, False, None, parse_queue_args({}, "q"))
    for n in range(3):
        queue.enqueue(Message("", "q", b"", b"%d" % n, False))
    first = queue.pop()
    assert first is not None
    queue.requeue([first])  # a classic queue puts it back in place
    assert [e.message.body for e in queue.ready_entries()] == [b"0", b"1", b"2"]
