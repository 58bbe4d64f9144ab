"""The broker's ``channel.close`` and the client's crossing on the wire (amqp091-go's
``TestChannelExceptionWithCloseIssue43``): as RabbitMQ's ``rabbit_reader``, a channel the broker is
closing answers a ``channel.close`` with ``close-ok``, drops every other frame, and is forgotten only
at the client's ``close-ok``; the connection and its other channels carry on."""

from __future__ import annotations

from pamqp import body as pbody
from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp import header as pheader

NOT_FOUND = "NOT_FOUND - no exchange 'missing' in vhost '/'"


def publish_frames(channel: int, exchange: str = "missing") -> bytes:
    return b"".join(
        pframe.marshal(f, channel)
        for f in (
            spec.Basic.Publish(exchange=exchange, routing_key="k"),
            pheader.ContentHeader(0, 1, spec.Basic.Properties()),
            pbody.ContentBody(b"x"),
        )
    )


def close_frame(channel: int) -> bytes:
    return pframe.marshal(spec.Channel.Close(200, "bye", 0, 0), channel)


def close_ok_frame(channel: int) -> bytes:
    return pframe.marshal(spec.Channel.CloseOk(), channel)


def said(client) -> list[tuple[int, str, tuple[object, ...]]]:
    """What the broker wrote since the last call: channel, method name and, for a close, its fields."""
    out = []
    for channel, method in client.methods():
        fields = (
            (method.reply_code, method.reply_text, method.class_id, method.method_id)
            if isinstance(method, spec.Channel.Close)
            else ()
        )
        out.append((channel, method.name, fields))
    return out


OURS = (1, "Channel.Close", (404, NOT_FOUND, 60, 40))
CLOSE_OK = (1, "Channel.CloseOk", ())


def still_serves(client, channel: int = 2) -> None:
    """The connection is up and ``channel`` works (a declare answered)."""
    ok = client.rpc(channel, spec.Queue.Declare(queue="", exclusive=True), spec.Queue.DeclareOk)
    assert ok.queue.startswith("amq.gen-")


def test_ours_first_then_theirs_then_their_close_ok(client):
    client.open_channel(2)
    client.send_raw(publish_frames(1))
    assert said(client) == [OURS]
    client.send_raw(close_frame(1))  # theirs, sent before ours arrived
    assert said(client) == [CLOSE_OK]
    client.send_raw(close_ok_frame(1))  # their answer to ours: the channel is gone now
    assert said(client) == []
    still_serves(client, 2)
    client.open_channel(1)  # the number is free again
    still_serves(client, 1)


def test_both_in_one_packet(client):
    client.open_channel(2)
    client.send_raw(publish_frames(1) + close_frame(1))
    assert said(client) == [OURS, CLOSE_OK]
    client.send_raw(close_ok_frame(1))
    assert said(client) == []
    still_serves(client, 2)


def test_theirs_first_is_the_plain_handshake(client):
    client.send_raw(close_frame(1))
    assert said(client) == [CLOSE_OK]
    client.open_channel(1)
    still_serves(client, 1)


def test_frames_after_our_close_are_dropped_until_their_close_ok(client):
    client.open_channel(2)
    client.send_raw(publish_frames(1))
    assert said(client) == [OURS]
    # content and methods still in flight from the client: nothing answered, nothing closed
    client.send_raw(publish_frames(1, exchange="") + pframe.marshal(spec.Basic.Qos(prefetch_count=1), 1))
    client.send_raw(pframe.marshal(spec.Channel.Open(), 1))  # not even a reopen before the close-ok
    assert said(client) == []
    client.send_raw(close_frame(1) + close_ok_frame(1))
    assert said(client) == [CLOSE_OK]
    still_serves(client, 2)
    client.open_channel(1)
    still_serves(client, 1)


def test_a_method_after_their_close_ok_is_504_as_on_any_closed_channel(client):
    client.send_raw(publish_frames(1))
    client.methods()
    client.send_raw(close_ok_frame(1))
    client.send(1, spec.Basic.Qos())
    [(channel, close)] = client.methods()
    assert channel == 0 and (close.reply_code, close.class_id, close.method_id) == (504, 60, 10)
