"""Vhost and user limits over the mock transport (set as the management API sets them): the refusals a
client sees, with RabbitMQ 3.10's codes and texts, and what frees room again."""

from __future__ import annotations

import re

import pytest
from pamqp import commands as spec

EVERYTHING = (".*", ".*", ".*")


@pytest.fixture
def tenant(add_user):
    """A vhost ``lim``; ``bob`` may use it and ``/``, ``other`` only ``lim``."""
    add_user("bob", "pw", EVERYTHING, vhost="lim")
    add_user("bob", "pw", EVERYTHING, vhost="/")
    add_user("other", "pw", EVERYTHING, vhost="lim")
    return "lim", "bob"


def connect(make_client, user="bob", vhost="lim"):
    """Log in and open ``vhost``: the client, and the Connection.Close if the open was refused."""
    c = make_client()
    c.send_raw(b"AMQP\x00\x00\x09\x01")
    c.send(0, spec.Connection.StartOk(mechanism="PLAIN", response=f"\0{user}\0pw"))
    c.send(
        0,
        spec.Connection.TuneOk(channel_max=2047, frame_max=131072),
        spec.Connection.Open(virtual_host=vhost),
    )
    frames = [f for _, f in c.methods()]
    close = next((f for f in frames if isinstance(f, spec.Connection.Close)), None)
    if close is None:
        assert isinstance(frames[-1], spec.Connection.OpenOk), frames
        return c, None
    return c, (close.reply_code, close.reply_text, (close.class_id, close.method_id))


def test_the_vhost_connection_limit_refuses_the_open_530(make_client, tenant, set_limit):
    set_limit("vhost", "lim", "max-connections", 1)
    assert connect(make_client)[1] is None
    assert connect(make_client)[1] == (
        530,
        "NOT_ALLOWED - access to vhost 'lim' refused for user 'bob': connection limit (1) is reached",
        (10, 40),
    )


def test_a_closed_connection_makes_room_under_the_vhost_limit(make_client, tenant, set_limit):
    set_limit("vhost", "lim", "max-connections", 1)
    first, _ = connect(make_client)
    first.rpc(0, spec.Connection.Close(200, "", 0, 0), spec.Connection.CloseOk)
    first.transport.close()  # the client closes the socket after close-ok
    assert connect(make_client)[1] is None


def test_the_vhost_connection_limit_counts_every_user_and_only_that_vhost(make_client, tenant, set_limit):
    set_limit("vhost", "lim", "max-connections", 1)
    connect(make_client, "other")
    assert connect(make_client)[1][0] == 530
    guest = make_client()
    guest.handshake()  # guest, vhost "/"


def test_a_negative_connection_limit_is_no_limit(make_client, tenant, set_limit):
    set_limit("vhost", "lim", "max-connections", -1)
    assert [connect(make_client)[1] for _ in range(3)] == [None] * 3


def test_max_connections_0_refuses_every_connection(make_client, tenant, set_limit):
    set_limit("vhost", "lim", "max-connections", 0)
    assert connect(make_client)[1][:2] == (
        530,
        "NOT_ALLOWED - access to vhost 'lim' refused for user 'bob': connection limit (0) is reached",
    )


def test_the_vhost_queue_limit_refuses_a_new_queue_406(make_client, tenant, set_limit):
    set_limit("vhost", "lim", "max-queues", 1)
    c, _ = connect(make_client)
    c.open_channel(1)
    c.rpc(1, spec.Queue.Declare(queue="q1"), spec.Queue.DeclareOk)
    c.rpc(1, spec.Queue.Declare(queue="q1"), spec.Queue.DeclareOk)  # redeclaring is not a new queue
    assert c.refused(1, spec.Queue.Declare(queue="q2")) == (
        406,
        "PRECONDITION_FAILED - cannot declare queue 'q2': queue limit in vhost 'lim' (1) is reached",
        (50, 10),
    )


def test_deleting_a_queue_makes_room_under_the_queue_limit(make_client, tenant, set_limit):
    set_limit("vhost", "lim", "max-queues", 1)
    c, _ = connect(make_client)
    c.open_channel(1)
    c.rpc(1, spec.Queue.Declare(queue="q1"), spec.Queue.DeclareOk)
    c.rpc(1, spec.Queue.Delete(queue="q1"), spec.Queue.DeleteOk)
    c.rpc(1, spec.Queue.Declare(queue="q2"), spec.Queue.DeclareOk)


def test_the_queue_limit_is_per_vhost(client, tenant, set_limit):
    set_limit("vhost", "lim", "max-queues", 0)
    client.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)  # guest, vhost "/"


def test_the_user_connection_limit_refuses_the_open_530(make_client, tenant, set_limit):
    set_limit("user", "bob", "max-connections", 1)
    connect(make_client)
    assert connect(make_client, vhost="/")[1] == (  # in any vhost
        530,
        "NOT_ALLOWED - connection refused for user 'bob': user connection limit (1) is reached",
        (10, 40),
    )
    assert connect(make_client, "other")[1] is None


def test_the_user_channel_limit_closes_the_connection_530(make_client, tenant, set_limit):
    set_limit("user", "bob", "max-channels", 1)
    c, _ = connect(make_client)
    c.open_channel(1)
    c.send(2, spec.Channel.Open())
    close = c.expect(spec.Connection.Close, 0)
    assert (close.reply_code, close.reply_text) == (
        530,
        "NOT_ALLOWED - number of channels opened for user 'bob' has reached the maximum allowed user "
        "limit of (1)",
    )


def test_the_user_channel_limit_counts_channels_of_all_the_users_connections(make_client, tenant, set_limit):
    set_limit("user", "bob", "max-channels", 1)
    first, _ = connect(make_client)
    first.open_channel(1)
    second, _ = connect(make_client)
    second.send(1, spec.Channel.Open())
    assert second.expect(spec.Connection.Close, 0).reply_code == 530


def test_a_closed_channel_makes_room_under_the_user_channel_limit(make_client, tenant, set_limit):
    set_limit("user", "bob", "max-channels", 1)
    c, _ = connect(make_client)
    c.open_channel(1)
    c.rpc(1, spec.Channel.Close(200, "", 0, 0), spec.Channel.CloseOk)
    c.open_channel(2)


def test_a_server_named_queue_over_the_limit_is_refused_by_its_generated_name(make_client, tenant, set_limit):
    set_limit("vhost", "lim", "max-queues", 0)
    c, _ = connect(make_client)
    c.open_channel(1)
    code, text, _ = c.refused(1, spec.Queue.Declare(queue="", exclusive=True))
    assert code == 406
    assert re.fullmatch(
        r"PRECONDITION_FAILED - cannot declare queue 'amq\.gen-[A-Za-z0-9_-]{22}': "
        r"queue limit in vhost 'lim' \(0\) is reached",
        text,
    ), text


def test_a_limit_set_below_the_current_count_closes_nothing(make_client, tenant, set_limit):
    first, _ = connect(make_client)
    second, _ = connect(make_client)
    set_limit("vhost", "lim", "max-connections", 1)
    for c in (first, second):
        c.open_channel(1)
        c.rpc(1, spec.Queue.Declare(queue="", exclusive=True), spec.Queue.DeclareOk)
    assert connect(make_client)[1][0] == 530


def test_the_queue_limit_counts_the_queues_of_every_connection_in_the_vhost(make_client, tenant, set_limit):
    set_limit("vhost", "lim", "max-queues", 1)
    other, _ = connect(make_client, "other")
    other.open_channel(1)
    other.rpc(1, spec.Queue.Declare(queue="", exclusive=True), spec.Queue.DeclareOk)
    c, _ = connect(make_client)
    c.open_channel(1)
    assert c.refused(1, spec.Queue.Declare(queue="mine"))[:2] == (
        406,
        "PRECONDITION_FAILED - cannot declare queue 'mine': queue limit in vhost 'lim' (1) is reached",
    )
