"""Content assembly over the mock transport: a publish's header and body frames as RabbitMQ 3.10.8
assembles them, and the errors (with its texts) when they do not fit together."""

from __future__ import annotations

import struct

from ottermq.amqp import fastpath
from pamqp import commands as spec


def header(channel: int, body_size: int, class_id: int = 60) -> bytes:
    payload = struct.pack(">HHQH", class_id, 0, body_size, 0)
    return struct.pack(">BHI", 2, channel, len(payload)) + payload + b"\xce"


def body(channel: int, data: bytes) -> bytes:
    return struct.pack(">BHI", 3, channel, len(data)) + data + b"\xce"


def start_publish(c, channel=1):
    c.send(channel, spec.Basic.Publish(exchange="", routing_key="q"))


def closed(c):
    close = c.expect(spec.Connection.Close, 0)
    return close.reply_code, close.reply_text, (close.class_id, close.method_id)


def test_a_publish_with_body_size_0_needs_no_body_frame(client):
    client.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    start_publish(client)
    client.send_raw(header(1, 0))
    got_ok, _, data = client.get("q")
    assert data == b"" and got_ok.message_count == 0


def test_a_body_in_several_frames_is_joined(client):
    client.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    start_publish(client)
    client.send_raw(header(1, 6) + body(1, b"ab") + body(1, b"cd"))
    assert client.methods() == []  # not complete yet: nothing routed
    client.send_raw(body(1, b"ef"))
    assert client.drain("q") == [b"abcdef"]


def test_publishes_on_two_channels_may_interleave_their_frames(client):
    client.open_channel(2)
    client.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    start_publish(client, 1)
    start_publish(client, 2)
    client.send_raw(header(1, 1) + header(2, 1) + body(2, b"2") + body(1, b"1"))
    assert client.drain("q") == [b"2", b"1"]  # in the order they were completed


def test_a_content_header_of_another_class_is_505(client):
    start_publish(client)
    client.send_raw(header(1, 1, class_id=50) + body(1, b"x"))
    assert closed(client) == (
        505,
        "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 instead",
        (60, 40),
    )


def test_an_unknown_frame_type_is_501(client):
    client.send_raw(struct.pack(">BHI", 4, 1, 0) + b"\xce")
    assert closed(client) == (501, "FRAME_ERROR - type 4, all octets = <<>>: unknown_frame", (0, 0))


def test_headers_binding_arguments_starting_with_x_are_not_matched(client):
    client.rpc(1, spec.Exchange.Declare(exchange="h", exchange_type="headers"), spec.Exchange.DeclareOk)
    client.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    bind = spec.Queue.Bind(queue="q", exchange="h", arguments={"x-match": "all", "x-foo": 1, "a": 1})
    client.rpc(1, bind, spec.Queue.BindOk)
    client.publish(1, "h", "", b"m", spec.Basic.Properties(headers={"a": 1}))
    assert client.drain("q") == [b"m"]


def test_a_large_body_is_assembled_in_place_and_delivered_as_sent(client):
    """Over ``fastpath.LARGE_BODY`` the frames are written into one growing buffer (no join at the
    end) and the delivery's frames point into the body (no copy): both give back the octets sent."""
    client.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    data = bytes(range(256)) * (fastpath.LARGE_BODY // 256) + b"tail"
    chunk = 131072 - 8
    start_publish(client)
    client.send_raw(header(1, len(data)))
    for at in range(0, len(data), chunk):
        assert client.methods() == []
        client.send_raw(body(1, data[at : at + chunk]))
    assert client.rpc(1, spec.Queue.Declare(queue="q", passive=True), spec.Queue.DeclareOk).message_count == 1
    client.send(1, spec.Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
    frames = [f for ch, f in client.frames() if ch == 1]
    assert isinstance(frames[0], spec.Basic.ConsumeOk) and isinstance(frames[1], spec.Basic.Deliver)
    assert len(frames) == 3 + -(-len(data) // chunk)
    assert b"".join(f.value for f in frames[3:]) == data


def test_a_large_body_longer_than_its_header_says_is_505(client):
    client.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    size, chunk = fastpath.LARGE_BODY + 1, 131072 - 8
    start_publish(client)
    client.send_raw(header(1, size))
    for at in range(0, size - 1, chunk):
        client.send_raw(body(1, b"a" * min(chunk, size - 1 - at)))
    client.send_raw(body(1, b"bc"))
    assert closed(client)[:2] == (
        505,
        "UNEXPECTED_FRAME - content body exceeds the size in its content header",
    )


def test_a_large_body_is_never_copied_whole_on_receipt(client):
    """The frames of a body over ``LARGE_BODY`` go into one growing buffer that becomes the message's
    body: memory peaks near one body, where keeping the frames and joining them at the end needed two
    (a 100 MB join is one copy into fresh memory, 0.25 s of one event-loop turn on a 2-core VM)."""
    import tracemalloc

    client.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    size, chunk = 4 * fastpath.LARGE_BODY, 131072 - 8
    frames = [body(1, bytes([at % 251]) * min(chunk, size - at)) for at in range(0, size, chunk)]
    start_publish(client)
    client.send_raw(header(1, size))
    tracemalloc.start()
    try:
        for frame in frames:
            client.send_raw(frame)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert client.rpc(1, spec.Queue.Declare(queue="q", passive=True), spec.Queue.DeclareOk).message_count == 1
    assert peak < 1.5 * size, f"peak {peak / size:.2f} bodies while receiving one"
