"""Connection-level behaviour: handshake, auth, vhosts, heartbeats, channel limits and framing errors.

Reply codes and texts are RabbitMQ 3.10's, byte for byte. Several frame errors make RabbitMQ stop reading and
drop the socket ~3 s later (it ignores our Close-Ok); tests only bound that delay from above. This file keeps
one case per rule against both brokers; the variants (every 501/504/505 with its text and class/method ids,
channel numbers, access.request, update-secret's verify mode) are protocol tests in
tests/protocol/test_connection_errors.py, test_handshake.py and test_connection_protocol.py.
"""

from __future__ import annotations

import struct
import time

import pamqp.body
import pamqp.commands as C
import pamqp.frame
import pamqp.header
import pamqp.heartbeat
import pika
import pika.exceptions
import pytest

AMQP_0_9_1 = b"AMQP\x00\x00\x09\x01"


def method_frame(channel: int, class_id: int, method_id: int, args: bytes = b"") -> bytes:
    payload = struct.pack(">HH", class_id, method_id) + args
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + b"\xce"


# ---------------------------------------------------------------------------------------------------------
# handshake
# ---------------------------------------------------------------------------------------------------------
def test_pika_connect_and_close(connect):
    conn = connect()
    ch = conn.channel()
    assert ch.is_open
    conn.close()
    assert conn.is_closed


def test_start_and_tune_advertise_rabbitmq_defaults(raw_connect):
    raw = raw_connect()
    start, tune = raw.start, raw.tune
    assert (start.version_major, start.version_minor) == (0, 9)
    assert "PLAIN" in start.mechanisms.split()
    assert start.locales == "en_US"
    caps = start.server_properties["capabilities"]
    for cap in (
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
        "per_consumer_qos",
    ):
        assert caps.get(cap) is True, cap
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)


@pytest.mark.parametrize(
    "header",
    [
        b"AMQP\x00\x01\x00\x00",  # AMQP 1.0 (the other versions: tests/protocol)
        b"HTTP/1.1 200 OK\r\n\r\n",
        # NB: RabbitMQ still speaks 0-8 for AMQP\x01\x01\x00\x09 and AMQP\x01\x01\x09\x01: not tested
    ],
    ids=["1.0", "http"],
)
def test_wrong_protocol_header_gets_ours_and_close(raw_connect, header):
    raw = raw_connect(handshake=False)
    raw.send(header)
    assert raw.recv_bytes(8) == AMQP_0_9_1
    assert raw.closed(5)


def test_bad_credentials_pika(connect):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        connect(credentials=pika.PlainCredentials("guest", "wrong"))
    assert (
        "(403) 'ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
        "For details see the broker logfile.'" in str(info.value)
    )


def test_bad_credentials_raw_without_capability_just_drops(raw_connect):
    raw = raw_connect(handshake=False)
    raw.send(AMQP_0_9_1)
    raw.expect(C.Connection.Start)
    raw.send_frame(
        0, C.Connection.StartOk(client_properties={}, mechanism="PLAIN", response="\0guest\0wrong")
    )
    # RabbitMQ: without authentication_failure_close the socket is closed without any Connection.Close
    with pytest.raises(ConnectionError):
        raw.recv_frame(timeout=5)


def test_unknown_vhost_pika(connect):
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        connect(virtual_host="no-such-vhost")
    assert "(530) 'NOT_ALLOWED - vhost no-such-vhost not found'" in str(info.value)


# ---------------------------------------------------------------------------------------------------------
# heartbeats
# ---------------------------------------------------------------------------------------------------------


def test_silent_client_is_disconnected_after_missed_heartbeats(raw_connect):
    raw = raw_connect(heartbeat=1)
    start = time.monotonic()
    heartbeats = 0
    with pytest.raises(ConnectionError):
        while time.monotonic() - start < 8:
            _, frame = raw.recv_frame(timeout=8, skip_heartbeats=False)
            # RabbitMQ sends only heartbeats, then drops TCP without a Connection.Close
            assert isinstance(frame, pamqp.heartbeat.Heartbeat), frame
            heartbeats += 1
    elapsed = time.monotonic() - start
    assert 1.5 <= elapsed <= 6, elapsed
    assert heartbeats >= 1


# ---------------------------------------------------------------------------------------------------------
# channel_max
# ---------------------------------------------------------------------------------------------------------


_ACCESS_REQUEST = struct.pack(">HHB", 30, 10, 5) + b"/data" + bytes([0b11111])  # class 30: not in pamqp
ACCESS_REQUEST_ON_1 = struct.pack(">BHI", 1, 1, len(_ACCESS_REQUEST)) + _ACCESS_REQUEST + b"\xce"


def test_access_request_gets_ticket_1(raw_connect):
    # AMQP 0-8's access.request (class 30, unknown to pamqp): RabbitMQ grants ticket 1 and carries on
    raw = raw_connect()
    raw.open_channel(1)
    raw.send(ACCESS_REQUEST_ON_1)
    assert raw.recv_raw_frame() == (1, 1, struct.pack(">HHH", 30, 11, 1))
    assert raw.rpc(1, C.Queue.Declare(queue="", exclusive=True), C.Queue.DeclareOk).queue


def test_opening_more_channels_than_channel_max_is_530(raw_connect):
    raw = raw_connect(channel_max=2)
    raw.open_channel(1)
    raw.open_channel(2)
    raw.send_frame(3, C.Channel.Open())
    close = raw.expect_close()
    assert close.reply_code == 530
    assert (
        close.reply_text
        == "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
    )
    # RabbitMQ reports class/method 0/0 here, not channel.open
    assert (close.class_id, close.method_id) == (0, 0)
    assert close.socket_closed


# ---------------------------------------------------------------------------------------------------------
# framing errors (hard errors: Connection.Close, socket closed)
# ---------------------------------------------------------------------------------------------------------
def test_frame_larger_than_frame_max_is_501(raw_connect):
    raw = raw_connect(frame_max=4096)
    raw.open_channel(1)
    payload = (
        b"x" * 4097
    )  # RabbitMQ accepts payloads up to frame_max (sic), reports frame_max - 8 as the limit
    raw.send(struct.pack(">BHI", 3, 1, len(payload)) + payload + b"\xce")
    close = raw.expect_close(closed_timeout=0)
    assert close.channel == 0
    assert close.reply_code == 501
    assert close.reply_text == "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,4097,4088}"
    assert (close.class_id, close.method_id) == (0, 0)
    # RabbitMQ drops the socket only ~3 s later; test_broker_serves_others_... checks that it does


def test_method_on_unopened_channel_is_504(raw_connect):
    raw = raw_connect()
    raw.send_frame(5, C.Queue.Declare(queue="", exclusive=True))
    close = raw.expect_close()
    assert close.reply_code == 504
    assert close.reply_text == "CHANNEL_ERROR - expected 'channel.open'"
    assert (close.class_id, close.method_id) == (50, 10)
    assert close.socket_closed


def test_content_frame_without_publish_is_505(raw_connect):
    raw = raw_connect()
    raw.open_channel(1)
    raw.send_frame(1, pamqp.body.ContentBody(b"hello"))
    close = raw.expect_close()
    assert close.reply_code == 505
    assert close.reply_text == "UNEXPECTED_FRAME - expected method frame, got non method frame instead"
    assert (close.class_id, close.method_id) == (0, 0)
    assert close.socket_closed


def test_server_only_method_from_client_is_503(raw_connect):
    raw = raw_connect()
    raw.open_channel(1)
    raw.send_frame(1, C.Channel.OpenOk())
    close = raw.expect_close()
    assert (close.reply_code, close.reply_text) == (503, "COMMAND_INVALID - unimplemented method")
    assert (close.class_id, close.method_id) == (20, 11)


def test_unknown_method_id_drops_connection_without_close(raw_connect):
    raw = raw_connect()
    raw.open_channel(1)
    raw.send(method_frame(1, 60, 999))
    # RabbitMQ's reader crashes on {unknown_method_id,...}: TCP is dropped, no Connection.Close is sent
    with pytest.raises(ConnectionError):
        raw.recv_frame(timeout=5)


def test_broker_serves_others_while_closing_a_bad_connection(raw_connect, connect, unique):
    bad = raw_connect()
    bad.open_channel(1)
    bad.send(pamqp.frame.marshal(C.Basic.Qos(), 1)[:-1] + b"\x00")
    assert bad.expect_close(closed_timeout=0.01).reply_code == 501

    ch = connect().channel()
    q = unique("q")
    ch.queue_declare(q, exclusive=True)
    for i in range(20):
        ch.basic_publish("", q, str(i).encode())
    bodies = [ch.basic_get(q, auto_ack=True)[2] for _ in range(20)]
    assert bodies == [str(i).encode() for i in range(20)]
    assert bad.closed(5)


# ---------------------------------------------------------------------------------------------------------
# connection.update-secret and channel.flow (issue 12, items 1 and 2)
# ---------------------------------------------------------------------------------------------------------
def test_pika_update_secret_is_accepted_and_the_connection_goes_on(connect, unique):
    # RabbitMQ's internal users cannot expire: any new secret is accepted (update-secret-ok)
    conn = connect()
    conn.update_secret("an-oauth-token", "token refresh")
    ch = conn.channel()
    queue = unique("after-update-secret")
    ch.queue_declare(queue)
    ch.basic_publish("", queue, b"still here")
    method, _props, body = ch.basic_get(queue, auto_ack=True)
    assert method is not None and body == b"still here"


def test_pika_channel_flow_true_is_answered(channel):
    assert channel.flow(True) is True


def test_pika_channel_flow_false_is_not_implemented_540(connect, connection_error):
    conn = connect()
    ch = conn.channel()
    connection_error(lambda: ch.flow(False), 540, "NOT_IMPLEMENTED - active=false")
