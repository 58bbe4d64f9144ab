"""No input can crash the broker: random and mutated frames always end in a clean close or are
served; a slow consumer is held back by back-pressure instead of buffered without limit."""

from __future__ import annotations

import logging
import random

import pytest
from ottermq.broker.server.states import State
from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp import header as pheader

CLOSED, CLOSING, OPEN = State.CLOSED, State.CLOSING, State.RUNNING

VALID_FRAMES = [
    pframe.marshal(spec.Queue.Declare(queue="fz"), 1),
    pframe.marshal(spec.Basic.Publish(exchange="", routing_key="fz"), 1),
    pframe.marshal(pheader.ContentHeader(0, 3, spec.Basic.Properties(headers={"a": 1})), 1),
    b"\x03\x00\x01\x00\x00\x00\x03abc\xce",
    pframe.marshal(spec.Basic.Get(queue="fz"), 1),
    pframe.marshal(spec.Basic.Consume(queue="fz"), 1),
    pframe.marshal(spec.Basic.Ack(delivery_tag=1), 1),
    pframe.marshal(spec.Exchange.Declare(exchange="fzx", exchange_type="topic"), 1),
    pframe.marshal(spec.Queue.Bind(queue="fz", exchange="fzx", routing_key="#"), 1),
    pframe.marshal(spec.Basic.Qos(prefetch_count=3), 1),
    pframe.marshal(spec.Tx.Select(), 1),
    pframe.marshal(spec.Confirm.Select(), 1),
]


def mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if op < 0.5 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op < 0.75 and b:
            del b[rng.randrange(len(b))]
        else:
            b.insert(rng.randrange(len(b) + 1), rng.randrange(256))
    return bytes(b)


@pytest.mark.parametrize("seed", range(300))
def test_mutated_frames_never_cause_internal_errors(make_client, loop, caplog, seed):
    rng = random.Random(seed)
    c = make_client()
    c.handshake()
    c.open_channel(1)
    stream = b"".join(mutate(rng, f) if rng.random() < 0.3 else f for f in rng.choices(VALID_FRAMES, k=12))
    with caplog.at_level(logging.ERROR, logger="ottermq"):
        for i in range(0, len(stream), rng.randint(1, 64)):
            c.send_raw(stream[i : i + 64])
            if c.conn.state == CLOSED:
                break
        loop.advance(5)  # close timers run out
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    frames = c.methods()
    closes = [f for _, f in frames if isinstance(f, (spec.Connection.Close, spec.Channel.Close))]
    assert all(f.reply_code != 541 for f in closes)
    assert c.conn.state in (OPEN, CLOSED, CLOSING)
    if c.conn.state == CLOSING:
        pytest.fail("connection left hanging in CLOSING after the close timeout")


@pytest.mark.parametrize("seed", range(100))
def test_random_bytes_after_handshake(make_client, loop, caplog, seed):
    rng = random.Random(1000 + seed)
    c = make_client()
    c.handshake()
    with caplog.at_level(logging.ERROR, logger="ottermq"):
        c.send_raw(bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))))
        loop.advance(5)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_paused_transport_holds_deliveries_back(client, loop):
    client.send(1, spec.Queue.Declare(queue="slow"))
    client.send(1, spec.Basic.Consume(queue="slow", no_ack=True))
    client.frames()
    client.conn.pause_writing()  # the socket's buffer is full
    for i in range(100):
        client.publish(1, "", "slow", b"m%d" % i)
    assert not [f for _, f in client.frames() if isinstance(f, spec.Basic.Deliver)]
    assert client.conn.vhost.queues["slow"].message_count == 100
    assert not client.transport.reading  # and we stop reading from it
    client.conn.resume_writing()
    loop.run_soon()
    delivered = [f for _, f in client.frames() if isinstance(f, spec.Basic.Deliver)]
    assert len(delivered) == 100 and client.transport.reading
