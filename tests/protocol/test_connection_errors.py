"""Connection-level rules over the mock transport, as RabbitMQ 3.10 answers them byte for byte: what
Start and Tune advertise, logins, channel numbers and ``channel_max``, and every framing error of a
running connection with its reply code, text and class/method ids.

(e2e/test_connection.py and e2e/test_handshake.py keep one case of each rule against both brokers;
tests/protocol/test_handshake.py covers the errors before ``connection.open-ok``.)
"""

from __future__ import annotations

import struct

import pytest
from pamqp import body as pbody
from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp import header as pheader
from pamqp.heartbeat import Heartbeat

HEADER = b"AMQP\x00\x00\x09\x01"
LOGIN_REFUSED = (
    "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
    "For details see the broker logfile."
)
SHORT = "FRAME_ERROR - type 1, all octets ="
UNEXPECTED_RUNNING = "CHANNEL_ERROR - unexpected method in connection state running"
EXPECTED_OPEN = "CHANNEL_ERROR - expected 'channel.open'"


def raw_frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + b"\xce"


def closed(c):
    """The Connection.Close the broker sent: ``(code, text, (class, method))``."""
    close = c.expect(spec.Connection.Close, 0)
    return close.reply_code, close.reply_text, (close.class_id, close.method_id)


def login(c, response="\0guest\0guest", capabilities=None):
    c.send_raw(HEADER)
    c.frames()
    props = {"capabilities": capabilities} if capabilities is not None else {}
    c.send(0, spec.Connection.StartOk(client_properties=props, mechanism="PLAIN", response=response))


def tuned(make_client, channel_max=2047, frame_max=131072, heartbeat=0):
    """A connection through tune-ok (not yet opened)."""
    c = make_client()
    login(c)
    c.expect(spec.Connection.Tune)
    c.send(0, spec.Connection.TuneOk(channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat))
    return c


def opened(make_client, **tune):
    c = tuned(make_client, **tune)
    c.rpc(0, spec.Connection.Open(virtual_host="/"), spec.Connection.OpenOk)
    return c


# -- start and tune ---------------------------------------------------------------------------------------
def test_start_advertises_rabbitmqs_version_locales_and_capabilities(make_client):
    c = make_client()
    c.send_raw(HEADER)
    start = c.expect(spec.Connection.Start)
    assert (start.version_major, start.version_minor, start.locales) == (0, 9, "en_US")
    caps = start.server_properties["capabilities"]
    for cap in (
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
        "per_consumer_qos",
        "direct_reply_to",
    ):
        assert caps.get(cap) is True, cap


def test_tune_proposes_rabbitmqs_defaults(make_client):
    c = make_client()
    login(c)
    tune = c.expect(spec.Connection.Tune)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)


@pytest.mark.parametrize(
    "header",
    [b"AMQP\x00\x00\x09\x00", b"AMQP\x00\x00\x0a\x00", b"AMQP\x00\x01\x00\x00", b"AMQP\x03\x01\x00\x00"],
    ids=["0-9-0", "0-10", "1.0", "1.0-sasl"],
)
def test_another_amqp_version_gets_our_header_and_the_socket_closed(make_client, header):
    c = make_client()
    c.send_raw(header)
    assert c.frames() == [(-1, HEADER)]
    assert c.transport.closed


def test_a_client_that_never_finishes_the_handshake_is_dropped_silently(make_client, loop):
    c = make_client()
    c.send_raw(HEADER)
    c.frames()
    loop.advance(9.9)
    assert not c.transport.closed
    loop.advance(0.1)  # RabbitMQ's handshake_timeout: 10 s
    assert c.transport.closed and c.methods() == []


def test_wrong_password_with_authentication_failure_close_is_403_naming_no_method(make_client):
    c = make_client()
    login(c, "\0guest\0wrong", capabilities={"authentication_failure_close": True})
    assert closed(c) == (403, LOGIN_REFUSED, (0, 0))


def test_wrong_password_without_the_capability_drops_the_socket_without_a_close(make_client, loop):
    c = make_client()
    login(c, "\0guest\0wrong")
    loop.advance(3)
    assert c.methods() == [] and c.transport.closed


def test_opening_an_unknown_vhost_is_530_on_connection_open(make_client):
    c = tuned(make_client)
    c.send(0, spec.Connection.Open(virtual_host="no-such-vhost"))
    assert closed(c) == (530, "NOT_ALLOWED - vhost no-such-vhost not found", (10, 40))


def test_heartbeat_0_in_tune_ok_turns_heartbeats_off(make_client, loop):
    c = opened(make_client, heartbeat=0)
    loop.advance(600)
    assert c.frames() == [] and not c.transport.closed


def test_the_broker_heartbeats_at_the_negotiated_interval(make_client, loop):
    c = opened(make_client, heartbeat=4)
    beats = []
    for _ in range(8):
        loop.advance(1)
        c.send_raw(raw_frame(8, 0, b""))  # the client keeps talking
        beats += [loop.now for _, f in c.frames() if isinstance(f, Heartbeat)]
    assert len(beats) == 2 and beats[1] - beats[0] == 4


# -- channel numbers and channel_max ----------------------------------------------------------------------
def test_channel_numbers_above_channel_max_are_fine(make_client):
    # RabbitMQ limits the number of open channels, not the channel number
    c = opened(make_client, channel_max=10)
    for number in (11, 65535):
        c.open_channel(number)
    assert c.rpc(11, spec.Queue.Declare(queue="", exclusive=True), spec.Queue.DeclareOk).queue


def test_opening_more_channels_than_channel_max_is_530_naming_no_method(make_client):
    c = opened(make_client, channel_max=2)
    c.open_channel(1)
    c.open_channel(2)
    c.send(3, spec.Channel.Open())
    assert closed(c) == (
        530,
        "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)",
        (0, 0),
    )


def test_a_closed_channel_frees_its_place_under_channel_max(make_client):
    c = opened(make_client, channel_max=1)
    c.open_channel(1)
    c.rpc(1, spec.Channel.Close(200, "", 0, 0), spec.Channel.CloseOk)
    c.open_channel(2)


ACCESS_REQUEST = struct.pack(">HHB", 30, 10, 5) + b"/data" + bytes([0b11111])  # class 30: not in pamqp


def test_access_request_gets_ticket_1(client):
    # AMQP 0-8's access.request: RabbitMQ grants ticket 1 and carries on
    client.send_raw(raw_frame(1, 1, ACCESS_REQUEST))
    assert bytes(client.transport.buffer) == raw_frame(1, 1, struct.pack(">HHH", 30, 11, 1))
    client.transport.buffer.clear()
    assert client.rpc(1, spec.Queue.Declare(queue="", exclusive=True), spec.Queue.DeclareOk).queue


def test_access_request_on_an_unopened_channel_is_504(client):
    client.send_raw(raw_frame(1, 2, ACCESS_REQUEST))
    assert closed(client) == (504, EXPECTED_OPEN, (30, 10))


# -- channel state errors (504) ---------------------------------------------------------------------------
def test_a_method_on_an_unopened_channel_is_504_naming_the_method(client):
    client.send(5, spec.Queue.Declare(queue="", exclusive=True))
    assert closed(client) == (504, EXPECTED_OPEN, (50, 10))


def test_a_method_on_a_channel_the_client_closed_is_504(client):
    client.rpc(1, spec.Channel.Close(200, "", 0, 0), spec.Channel.CloseOk)
    client.send(1, spec.Basic.Qos())
    assert closed(client) == (504, EXPECTED_OPEN, (60, 10))


def test_reopening_an_open_channel_is_504(client):
    client.send(1, spec.Channel.Open())
    assert closed(client) == (504, "CHANNEL_ERROR - second 'channel.open' seen", (20, 10))


def test_a_channel_method_on_channel_0_is_504(client):
    client.send(0, spec.Queue.Declare(queue="", exclusive=True))
    assert closed(client) == (504, UNEXPECTED_RUNNING, (50, 10))


def test_a_client_sent_connection_blocked_is_504(client):
    client.send(0, spec.Connection.Blocked(reason="x"))
    assert closed(client) == (504, UNEXPECTED_RUNNING, (10, 60))


def test_a_server_only_method_from_the_client_is_503(client):
    client.send(1, spec.Channel.OpenOk())
    assert closed(client) == (503, "COMMAND_INVALID - unimplemented method", (20, 11))


# -- framing errors: 501 and 505, class/method 0/0 unless a method was being assembled --------------------
def test_a_frame_over_frame_max_is_501_with_rabbitmqs_limit(make_client):
    c = opened(make_client, frame_max=4096)
    c.open_channel(1)
    c.send_raw(raw_frame(3, 1, b"x" * 4097))  # payloads up to frame_max (sic) pass; frame_max - 8 is shown
    assert closed(c) == (501, "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,4097,4088}", (0, 0))


def test_a_payload_of_exactly_frame_max_passes(make_client):
    c = opened(make_client, frame_max=4096)
    c.open_channel(1)
    c.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    c.send(1, spec.Basic.Publish(exchange="", routing_key="q"), pheader.ContentHeader(0, 4096))
    c.send_raw(raw_frame(3, 1, b"x" * 4096))
    assert c.get("q")[2] == b"x" * 4096


def test_a_bad_frame_end_is_501_with_the_octets(client):
    frame = pframe.marshal(spec.Basic.Qos(prefetch_count=1), 1)
    client.send_raw(frame[:-1] + b"\x00")
    assert closed(client) == (
        501,
        "FRAME_ERROR - type 1, all octets = <<0,60,0,10,0,0,0,0,0,1,0>>: {invalid_frame_end_marker,0}",
        (0, 0),
    )


@pytest.mark.parametrize(
    "channel,payload,octets",
    [(0, b"\x00\x0a", "<<0,10>>"), (1, b"\x00\x3c", "<<0,60>>")],
    ids=["channel-0", "channel-1"],
)
def test_a_method_frame_too_short_for_its_ids_is_501_unknown_frame(client, channel, payload, octets):
    client.send_raw(raw_frame(1, channel, payload))
    assert closed(client) == (501, f"{SHORT} {octets}: unknown_frame", (0, 0))


@pytest.mark.parametrize(
    "frame", [pbody.ContentBody(b"hello"), pheader.ContentHeader(0, 5)], ids=["body", "header"]
)
def test_a_content_frame_without_a_publish_is_505(client, frame):
    client.send(1, frame)
    assert closed(client) == (
        505,
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead",
        (0, 0),
    )


def test_a_method_instead_of_the_content_header_is_505_naming_the_publish(client):
    client.send(1, spec.Basic.Publish(exchange="", routing_key="nowhere"), spec.Basic.Qos())
    assert closed(client) == (
        505,
        "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead",
        (60, 40),
    )


def test_a_method_instead_of_the_content_body_is_505_naming_the_publish(client):
    client.send(
        1,
        spec.Basic.Publish(exchange="", routing_key="nowhere"),
        pheader.ContentHeader(0, 10, spec.Basic.Properties()),
        pbody.ContentBody(b"12345"),
        spec.Basic.Qos(),
    )
    assert closed(client) == (
        505,
        "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
        (60, 40),
    )


def test_a_heartbeat_on_a_channel_is_505(client):
    client.send_raw(raw_frame(8, 1, b""))
    assert closed(client) == (505, "UNEXPECTED_FRAME - type 8, all octets = <<>>", (0, 0))


def test_a_long_content_frame_on_channel_0_shows_its_first_16_octets(client):
    client.send_raw(raw_frame(3, 0, b"abcdefghijklmnopqrstuvwxyz"))
    assert closed(client) == (
        505,
        'UNEXPECTED_FRAME - type 3, first 16 octets = <<"abcdefghijklmnop">>',
        (0, 0),
    )


def test_utf8_octets_in_the_text_are_sent_back_as_octets(client):
    # Erlang's ~p prints c3 a9 as two Latin-1 characters and sends them back as the same octets
    client.send_raw(raw_frame(3, 0, "é".encode()))
    assert closed(client) == (505, 'UNEXPECTED_FRAME - type 3, all octets = <<"é">>', (0, 0))


@pytest.mark.parametrize("class_id,method_id", [(60, 999), (99, 10)], ids=["method", "class"])
def test_an_unknown_method_id_drops_the_connection_without_a_close(client, loop, class_id, method_id):
    # RabbitMQ's reader crashes on {unknown_method_id, ...}: TCP goes, no Connection.Close
    client.send_raw(raw_frame(1, 1, struct.pack(">HH", class_id, method_id)))
    loop.advance(5)
    assert client.methods() == [] and client.transport.closed


def test_a_header_frame_on_channel_0_while_opening_is_505_with_the_octets(make_client):
    c = tuned(make_client)
    c.send_raw(raw_frame(2, 0, struct.pack(">HHQH", 60, 0, 0, 0)))
    assert closed(c) == (
        505,
        "UNEXPECTED_FRAME - type 2, all octets = <<0,60,0,0,0,0,0,0,0,0,0,0,0,0>>",
        (0, 0),
    )


def test_garbage_while_opening_is_501_frame_too_large(make_client):
    c = tuned(make_client)
    c.send_raw(b"garbage garbage garbage")
    assert closed(c) == (
        501,
        "FRAME_ERROR - type 103, all octets = <<>>: {frame_too_large,1650550629,131064}",
        (0, 0),
    )


def test_other_connections_are_served_while_a_bad_one_closes(make_client, loop):
    bad, good = opened(make_client), opened(make_client)
    bad.open_channel(1)
    good.open_channel(1)
    bad.send_raw(pframe.marshal(spec.Basic.Qos(), 1)[:-1] + b"\x00")
    assert closed(bad)[0] == 501
    good.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    for i in range(20):
        good.publish(1, "", "q", str(i).encode())
    assert good.drain("q") == [str(i).encode() for i in range(20)]
    loop.advance(5)
    assert bad.transport.closed and not good.transport.closed


def test_closing_a_channel_in_the_middle_of_a_publish_is_505_naming_the_publish(client):
    client.send(1, spec.Basic.Publish(exchange="", routing_key="x"), pheader.ContentHeader(0, 5))
    client.send(1, spec.Channel.Close(200, "", 0, 0))
    assert closed(client) == (
        505,
        "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
        (60, 40),
    )


def test_channel_open_on_channel_0_is_504(client):
    client.send(0, spec.Channel.Open())
    assert closed(client) == (504, UNEXPECTED_RUNNING, (20, 10))


def test_any_frame_from_the_client_counts_as_heartbeat_traffic(make_client, loop):
    c = opened(make_client, heartbeat=2)
    c.open_channel(1)
    for _ in range(10):
        loop.advance(0.9)
        c.rpc(1, spec.Basic.Qos(prefetch_count=1), spec.Basic.QosOk)  # methods only, no heartbeat frames
    assert not c.transport.closed


def test_a_client_that_never_answers_the_brokers_close_is_dropped(client, loop):
    client.send(1, spec.Channel.Open())  # 504
    assert closed(client)[0] == 504
    assert not client.transport.closed  # waiting for close-ok...
    loop.advance(30)  # ...but not for longer than RabbitMQ's ?CLOSING_TIMEOUT
    assert client.transport.closed


def test_deliveries_are_cut_into_body_frames_of_frame_max_minus_8(make_client):
    c = opened(make_client, frame_max=4096)
    c.open_channel(1)
    c.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    body = b"x" * 10000
    c.send(1, spec.Basic.Publish(exchange="", routing_key="q"), pheader.ContentHeader(0, len(body)))
    c.send(1, *[pbody.ContentBody(body[i : i + 3000]) for i in range(0, len(body), 3000)])
    c.send(1, spec.Basic.Get(queue="q", no_ack=True))
    sizes = [len(f.value) for _, f in c.frames() if isinstance(f, pbody.ContentBody)]
    assert sizes == [4088, 4088, 1824]
