"""Errors before ``connection.open-ok``, as RabbitMQ 3.10 answers them (checked side by side).

While starting (awaiting start-ok) and tuning (awaiting tune-ok) RabbitMQ sends nothing back for a bad
frame or method: it stops reading and drops the socket after 3 s (``?SILENT_CLOSE_DELAY``). The one
exception is a well-formed login with wrong credentials from a client announcing
``authentication_failure_close`` (403). While opening (awaiting open) errors get a Connection.Close, as
when running.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from ottermq.broker.server import handshake
from ottermq.broker.server.connection import SILENT_CLOSE_DELAY
from pamqp import commands as spec
from pamqp import frame as pframe

HEADER = b"AMQP\x00\x00\x09\x01"
AFC = {"capabilities": {"authentication_failure_close": True}}


def raw_frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + b"\xce"


def start_ok(response: str = "\0guest\0guest", mechanism: str = "PLAIN", props: Any = None) -> bytes:
    return pframe.marshal(
        spec.Connection.StartOk(client_properties=props or {}, mechanism=mechanism, response=response), 0
    )


def tune_ok(channel_max: int = 2047, frame_max: int = 131072) -> bytes:
    return pframe.marshal(spec.Connection.TuneOk(channel_max=channel_max, frame_max=frame_max), 0)


OPEN = pframe.marshal(spec.Connection.Open(virtual_host="/"), 0)
CLOSE = pframe.marshal(spec.Connection.Close(200, "bye", 0, 0), 0)

STARTING: dict[str, bytes] = {
    "garbage": b"hello world, this is not a frame\r\n",
    "header-frame": raw_frame(2, 0, struct.pack(">HHQH", 60, 0, 0, 0)),
    "body-frame": raw_frame(3, 0, b"abc"),
    "start-ok-on-channel-1": pframe.marshal(
        spec.Connection.StartOk(client_properties={}, mechanism="PLAIN", response="\0guest\0guest"), 1
    ),
    "bad-frame-end": start_ok()[:-1] + b"\x00",
    "frame-too-large": raw_frame(1, 0, b"\x00\x0a\x00\x0b" + b"x" * 5000),
    "short-method": raw_frame(1, 0, b"\x00\x0a"),
    "close": CLOSE,
    "plain-without-nuls": start_ok("guestguest", props=AFC),
    "plain-two-fields": start_ok("\0guest", props=AFC),
    "plain-authzid": start_ok("admin\0guest\0guest", props=AFC),
    "amqplain-garbage": start_ok("\x7f\x7f\x7f", mechanism="AMQPLAIN", props=AFC),
    "unknown-mechanism": start_ok(mechanism="FOO", props=AFC),
}
TUNING: dict[str, bytes] = {
    "start-ok-twice": start_ok(),
    "open-before-tune-ok": OPEN,
    "frame-max-4095": tune_ok(frame_max=4095),
    "frame-max-0": tune_ok(frame_max=0),
    "frame-max-too-big": tune_ok(frame_max=1 << 30),
    "channel-max-0": tune_ok(channel_max=0),
    "channel-max-65535": tune_ok(channel_max=65535),
    "close": CLOSE,
    "channel-open": pframe.marshal(spec.Channel.Open(), 1),
    "garbage": b"garbage garbage garbage",
}


def _assert_silent_close(c: Any, loop: Any) -> None:
    assert c.methods() == []
    assert not c.transport.reading  # nothing more is read...
    loop.advance(SILENT_CLOSE_DELAY - 0.5)
    assert not c.transport.closed  # ...and the socket is dropped only after RabbitMQ's delay
    loop.advance(1.0)
    assert c.transport.closed
    assert c.methods() == []


@pytest.mark.parametrize("data", list(STARTING.values()), ids=list(STARTING))
def test_error_while_starting_closes_silently(make_client, loop, data):
    c = make_client()
    c.send_raw(HEADER)
    c.expect(spec.Connection.Start)
    c.send_raw(data)
    _assert_silent_close(c, loop)


@pytest.mark.parametrize("data", list(TUNING.values()), ids=list(TUNING))
def test_error_while_tuning_closes_silently(make_client, loop, data):
    c = make_client()
    c.send_raw(HEADER)
    c.send_raw(start_ok())
    c.expect(spec.Connection.Tune)
    c.send_raw(data)
    _assert_silent_close(c, loop)


def test_heartbeat_while_starting_is_ignored(make_client):
    c = make_client()
    c.send_raw(HEADER)
    c.send_raw(raw_frame(8, 0, b"") + start_ok())
    c.expect(spec.Connection.Tune)


def _opening(make_client: Any) -> Any:
    c = make_client()
    c.send_raw(HEADER)
    c.send_raw(start_ok())
    c.send_raw(tune_ok())
    c.frames()
    return c


@pytest.mark.parametrize(
    "frame,class_method",
    [
        (spec.Connection.Close(200, "bye", 0, 0), (10, 50)),
        (spec.Connection.TuneOk(channel_max=2047, frame_max=131072), (10, 31)),
        (spec.Connection.UpdateSecret(new_secret="guest", reason="r"), (10, 70)),
        (spec.Queue.Declare(queue="x"), (50, 10)),
    ],
    ids=["close", "tune-ok", "update-secret", "queue-declare"],
)
def test_unexpected_method_while_opening_is_504(make_client, frame, class_method):
    c = _opening(make_client)
    c.send(0, frame)
    close = c.expect(spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (
        504,
        "CHANNEL_ERROR - unexpected method in connection state opening",
    )
    assert (close.class_id, close.method_id) == class_method


def test_channel_frame_while_opening_is_505_with_the_octets(make_client):
    c = _opening(make_client)
    c.send(1, spec.Channel.Open())
    close = c.expect(spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (
        505,
        "UNEXPECTED_FRAME - type 1, all octets = <<0,20,0,10,1,48>>",
    )
    assert (close.class_id, close.method_id) == (0, 0)


def test_heartbeat_on_channel_1_while_opening_is_505(make_client):
    c = _opening(make_client)
    c.send_raw(raw_frame(8, 1, b""))
    close = c.expect(spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (505, "UNEXPECTED_FRAME - type 8, all octets = <<>>")


def test_start_ok_while_running_is_504(client):
    client.send_raw(start_ok())
    close = client.expect(spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (
        504,
        "CHANNEL_ERROR - unexpected method in connection state running",
    )
    assert (close.class_id, close.method_id) == (10, 11)


def test_content_frame_on_channel_0_while_running_is_505_with_the_octets(client):
    client.send_raw(raw_frame(3, 0, b"abc"))
    close = client.expect(spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (505, 'UNEXPECTED_FRAME - type 3, all octets = <<"abc">>')
    assert (close.class_id, close.method_id) == (0, 0)


def test_short_method_frame_while_closing_is_ignored(client, loop):
    client.send_raw(raw_frame(1, 0, b"\x00\x0a\x00\x0b"))  # start-ok with no fields: 501
    assert client.expect(spec.Connection.Close).reply_code in (501, 504)
    client.send_raw(raw_frame(1, 0, b"\x00\x0a"))  # must not raise out of data_received
    client.send(0, spec.Connection.CloseOk())
    assert client.transport.closed


def test_content_frame_after_a_method_reports_class_0(client):
    client.send(1, spec.Exchange.Declare(exchange="amq.direct", exchange_type="direct", passive=True))
    client.expect(spec.Exchange.DeclareOk)
    client.send_raw(raw_frame(3, 1, b"abc"))
    close = client.expect(spec.Connection.Close)
    assert close.reply_code == 505
    assert (close.class_id, close.method_id) == (0, 0)


@pytest.mark.parametrize("verify", [False, True])
def test_update_secret_with_the_password_is_accepted(make_client, verify):
    c = make_client()
    c.conn.settings = c.conn.settings.model_copy(update={"update_secret_verify": verify})
    c.handshake()
    c.send(0, spec.Connection.UpdateSecret(new_secret="guest", reason="token refresh"))
    c.expect(spec.Connection.UpdateSecretOk)
    assert not c.transport.closed


def test_update_secret_accepts_any_secret_by_default_as_rabbitmq(client):
    client.send(0, spec.Connection.UpdateSecret(new_secret="not-the-password", reason="r"))
    client.expect(spec.Connection.UpdateSecretOk)


def test_update_secret_verify_refuses_a_wrong_secret_with_530(make_client):
    c = make_client()
    c.conn.settings = c.conn.settings.model_copy(update={"update_secret_verify": True})
    c.handshake()
    c.send(0, spec.Connection.UpdateSecret(new_secret="wrong", reason="r"))
    close = c.expect(spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (
        530,
        "NOT_ALLOWED - New secret was refused by one of the backends",
    )
    assert (close.class_id, close.method_id) == (10, 70)


def test_a_bug_in_a_handler_closes_541_and_never_escapes(client, monkeypatch):
    def broken(method):
        raise RuntimeError("bug")

    monkeypatch.setattr(client.conn.opening, "update_secret", broken)
    client.send(0, spec.Connection.UpdateSecret(new_secret="s", reason="r"))  # must not raise
    close = client.expect(spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (541, "INTERNAL_ERROR - internal error")


def test_a_bug_during_the_handshake_drops_the_socket(make_client, monkeypatch):
    c = make_client()
    # a module function it calls, not the method: compiled (mypyc), the connection binds its methods early
    monkeypatch.setattr(handshake, "authenticate", lambda *args: 1 / 0)
    c.send_raw(HEADER)
    c.send_raw(start_ok())  # must not raise
    assert c.transport.closed
