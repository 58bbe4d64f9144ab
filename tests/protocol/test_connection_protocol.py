"""Connection-level behaviour over a mock transport: handshake, auth, tune, heartbeats, closes."""

from __future__ import annotations

from typing import Any

from ottermq.broker.server import flow
from ottermq.broker.server.flow import READ_BUDGET
from ottermq.broker.server.states import State
from pamqp import body as pbody
from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp import header as pheader

OPEN = State.RUNNING


def test_bad_protocol_header_gets_our_header_and_close(make_client):
    c = make_client()
    c.send_raw(b"HTTP/1.1 200 OK\r\n")
    assert c.frames() == [(-1, b"AMQP\x00\x00\x09\x01")]
    assert c.transport.closed


def test_header_in_pieces_then_start(make_client):
    c = make_client()
    for b in b"AMQP\x00\x00\x09\x01":
        c.send_raw(bytes([b]))
    start = c.expect(spec.Connection.Start)
    assert start.server_properties["product"] == "OtterMQ"
    assert "PLAIN" in start.mechanisms.split() and "AMQPLAIN" in start.mechanisms.split()
    caps = start.server_properties["capabilities"]
    assert caps["publisher_confirms"] and caps["consumer_cancel_notify"]


def test_full_handshake(make_client):
    c = make_client()
    c.handshake()
    assert c.conn.state == OPEN and c.conn.username == "guest"


def test_guest_refused_from_remote_address(make_client):
    c = make_client(peer="10.1.2.3")
    c.send_raw(b"AMQP\x00\x00\x09\x01")
    c.frames()
    c.send(
        0,
        spec.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism="PLAIN",
            response="\0guest\0guest",
        ),
    )
    assert c.expect(spec.Connection.Close).reply_code == 403


def test_silent_client_is_dropped_after_two_heartbeat_intervals(make_client, loop):
    c = make_client()
    c.handshake(heartbeat=2)
    loop.advance(2.1)
    assert any(ch == 0 and f.__class__.__name__ == "Heartbeat" for ch, f in c.frames())
    loop.advance(1.8)  # 3.9 s: under two intervals of silence, still open
    assert not c.transport.closed
    loop.advance(1.5)
    assert c.transport.closed


def test_client_heartbeats_keep_connection(make_client, loop):
    c = make_client()
    c.handshake(heartbeat=2)
    for _ in range(10):
        loop.advance(0.9)
        c.send_raw(b"\x08\x00\x00\x00\x00\x00\x00\xce")
    assert not c.transport.closed


def test_connection_close_handshake(client, loop):
    client.send(0, spec.Connection.Close(200, "bye", 0, 0))
    client.expect(spec.Connection.CloseOk)
    assert not client.transport.closed  # the client closes the socket (as with RabbitMQ)...
    client.send(1, spec.Queue.Declare(queue="late"))
    assert client.methods() == []  # ...and nothing more is read
    loop.advance(3.1)
    assert client.transport.closed  # ...or we do, after a timeout


def test_error_closes_connection_then_waits_close_ok(client, loop):
    client.send(1, spec.Basic.Publish(exchange="", routing_key="q", immediate=True))
    client.send_raw(pframe.marshal(pheader.ContentHeader(0, 0, spec.Basic.Properties()), 1))
    close = client.expect(spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - immediate=true")
    assert (close.class_id, close.method_id) == (60, 40)
    assert not client.transport.closed
    client.send(1, spec.Basic.Get(queue="q"))  # ignored while closing
    assert client.methods() == []
    client.send(0, spec.Connection.CloseOk())
    assert client.transport.closed


def test_shutdown_force_close_is_320(client):
    client.conn.force_close("shutdown")
    close = client.expect(spec.Connection.Close)
    assert close.reply_code == 320
    assert close.reply_text == "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"


def start_capable(c: Any) -> None:
    """Protocol header and a start-ok announcing the ``connection.blocked`` capability."""
    c.send_raw(b"AMQP\x00\x00\x09\x01")
    c.send(
        0,
        spec.Connection.StartOk(
            client_properties={"capabilities": {"connection.blocked": True}},
            mechanism="PLAIN",
            response="\0guest\0guest",
        ),
    )


def open_capable(c: Any) -> None:
    """Tune-ok and connection.open after ``start_capable``."""
    c.send(
        0,
        spec.Connection.TuneOk(channel_max=10, frame_max=131072, heartbeat=0),
        spec.Connection.Open(virtual_host="/"),
    )


def test_memory_alarm_blocks_publishers_and_tells_capable_clients(make_client, broker, loop):
    c = make_client()
    start_capable(c)
    open_capable(c)
    c.frames()
    c.open_channel(1)
    broker.alarms.set_memory(True)
    loop.run_soon()
    assert c.expect(spec.Connection.Blocked).reason == "low on memory"
    assert c.transport.reading  # not a publisher yet: still read
    c.publish(1, "", "nowhere", b"x")
    assert not c.transport.reading
    broker.alarms.set_memory(False)
    loop.run_soon()
    c.expect(spec.Connection.Unblocked)
    assert c.transport.reading


def test_an_alarm_raised_while_a_connection_opens_is_told_at_open_ok(make_client, broker, loop):
    c = make_client()
    start_capable(c)
    broker.alarms.set_memory(True)  # between start-ok and open: the connection is not running yet
    loop.run_soon()
    open_capable(c)
    methods = [type(m) for _, m in c.methods()]
    assert methods[-2:] == [spec.Connection.OpenOk, spec.Connection.Blocked]
    broker.alarms.set_memory(False)
    loop.run_soon()
    c.expect(spec.Connection.Unblocked)


def test_disk_alarm_from_a_fake_probe_blocks_and_unblocks(make_client, broker, loop):
    c = make_client()
    start_capable(c)
    open_capable(c)
    c.frames()
    c.open_channel(1)
    free = [broker.alarms.disk_free_limit + 1]
    broker.alarms.disk_free_probe = lambda: free[0]
    broker.alarms.check_disk()
    assert not broker.alarms.disk
    free[0] = broker.alarms.disk_free_limit - 1
    broker.alarms.check_disk()
    loop.run_soon()
    assert broker.alarms.disk and c.expect(spec.Connection.Blocked).reason == "low on disk"
    c.publish(1, "", "nowhere", b"x")
    assert not c.transport.reading
    broker.alarms.set_memory(True)  # memory too: still blocked, one reason shown
    broker.alarms.set_memory(False)
    assert not c.transport.reading
    free[0] = broker.alarms.disk_free_limit
    broker.alarms.check_disk()
    loop.run_soon()
    c.expect(spec.Connection.Unblocked)
    assert c.transport.reading and not broker.alarms.disk


def test_memory_alarm_without_capability_only_stops_reading(client, broker):
    client.publish(1, "", "nowhere", b"x")
    broker.alarms.set_memory(True)
    assert client.methods() == []
    assert not client.transport.reading
    broker.alarms.set_memory(False)
    assert client.transport.reading


def _amqplain(login: str, password: str) -> str:
    from ottermq.amqp.table import encode_table

    return encode_table({"LOGIN": login, "PASSWORD": password})[4:].decode("latin-1")


def test_amqplain_login(make_client):
    c = make_client()
    c.send_raw(b"AMQP\x00\x00\x09\x01")
    c.frames()
    c.send(0, spec.Connection.StartOk(mechanism="AMQPLAIN", response=_amqplain("guest", "guest")))
    c.expect(spec.Connection.Tune)


def test_amqplain_bad_password_is_refused(make_client):
    c = make_client()
    c.send_raw(b"AMQP\x00\x00\x09\x01")
    c.frames()
    c.send(
        0,
        spec.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism="AMQPLAIN",
            response=_amqplain("guest", "wrong"),
        ),
    )
    close = c.expect(spec.Connection.Close)
    assert close.reply_code == 403 and "AMQPLAIN" in close.reply_text


def test_publishers_are_not_read_while_the_stores_write_backlog_is_over_its_mark(
    client, make_client, broker, loop, monkeypatch
):
    monkeypatch.setattr(flow, "STORE_HIGH_WATER", 3)
    consumer = make_client()
    consumer.handshake()
    consumer.open_channel(1)
    client.send(1, spec.Queue.Declare(queue="durable", durable=True))
    client.expect(spec.Queue.DeclareOk)
    broker.services.store.after_commit(lambda _ok: None)
    loop.run_soon()  # the declaration is committed: nothing waits for the store
    persistent = spec.Basic.Properties(delivery_mode=2)

    def publishes(*bodies: bytes) -> bytes:
        frames = []
        for body in bodies:
            frames += [
                spec.Basic.Publish(exchange="", routing_key="durable"),
                pheader.ContentHeader(0, len(body), persistent),
                pbody.ContentBody(body),
            ]
        return b"".join(pframe.marshal(f, 1) for f in frames)

    client.conn.data_received(publishes(b"m0", b"m1", b"m2"))  # what one read brings, before a commit
    assert broker.services.store.pending == 3 and client.transport.reading  # up to the mark: read on
    client.conn.data_received(publishes(b"m3"))
    assert broker.services.store.pending == 4 and not client.transport.reading  # waits for the disk
    assert consumer.transport.reading  # a connection that never published is read as before
    loop.run_soon()  # the store commits what was queued
    assert broker.services.store.pending == 0 and client.transport.reading
    queued = [entry.message.body for entry in broker.vhosts["/"].queues["durable"].ready_entries()]
    assert queued == [b"m0", b"m1", b"m2", b"m3"]


def test_a_connection_read_past_its_budget_gives_way_for_a_loop_turn(client, loop):
    """libuv reads a busy socket up to 32 times per turn: past READ_BUDGET octets the connection stops
    being read until the next turn, so the process's other connections are served in between."""
    publish = b"".join(
        pframe.marshal(f, 1)
        for f in (
            spec.Basic.Publish(exchange="", routing_key="nowhere"),
            pheader.ContentHeader(0, 1000, spec.Basic.Properties()),
            pbody.ContentBody(b"x" * 1000),
        )
    )
    chunk = publish * 64  # ~70 KiB, as a read from a fast publisher
    sent = 0
    while sent <= READ_BUDGET:
        assert client.transport.reading
        client.conn.data_received(chunk)  # reads within one turn: no loop.run_soon in between
        sent += len(chunk)
    assert not client.transport.reading
    loop.run_soon()  # the next turn
    assert client.transport.reading
    client.conn.data_received(chunk)
    assert client.transport.reading  # the count starts again
