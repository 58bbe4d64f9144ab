"""Dynamic shovels (issue 42), as RabbitMQ 3.10.8's ``rabbitmq_shovel`` and
``rabbitmq_shovel_management`` have them: ``/api/parameters`` and ``/api/shovels``, and shovels moving
messages inside the broker under test (``amqp://``) and over the network to itself.

Every test not marked ``extension`` passes against RabbitMQ 3.10.8 with both plugins enabled
(``.ci/rabbitmq.sh``). Shovel names and queue names are ``unique``; every parameter made is deleted
afterwards. ``e2e/test_shovel_interop.py`` moves messages between ottermq and RabbitMQ,
``e2e/test_shovel_crash.py`` kills brokers in the middle of a move.
"""

from __future__ import annotations

import functools
import json
import os
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pamqp.body
import pamqp.commands
import pika
import pika.exceptions
import pytest

from .polling import poll_until

eventually = functools.partial(poll_until, timeout=20, interval=0.05)


def q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


@pytest.fixture
def shovels(broker) -> Iterator[Callable[..., tuple[int, Any]]]:
    """``put(name, value, vhost=None) -> (status, body)``; every parameter put is deleted afterwards."""
    made: list[str] = []

    def put(name: str, value: Any, vhost: str | None = None) -> tuple[int, Any]:
        path = f"/api/parameters/shovel/{q(vhost or broker.vhost)}/{q(name)}"
        made.append(path)
        return broker.api(path, "PUT", {"value": value})

    yield put
    for path in made:
        broker.api(path, "DELETE")


def local(src: str, dest: str, **more: Any) -> dict[str, Any]:
    return {"src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://", "dest-queue": dest, **more}


def status_of(broker, name: str) -> dict[str, Any] | None:
    status, entries = broker.api("/api/shovels")
    assert status == 200
    return next((e for e in entries if e["name"] == name and e["vhost"] == broker.vhost), None)


def running(broker, name: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        entry = status_of(broker, name)
        return entry if entry is not None and entry["state"] == "running" else None

    return eventually(check, what=f"shovel {name} running")


def depth(channel, queue: str) -> int:
    """Messages ready in ``queue`` (-1 while it does not exist: the shovel declares it), asked on a
    channel of its own (a passive declare of a missing queue closes the channel)."""
    ch = channel.connection.channel()
    try:
        return int(ch.queue_declare(queue, passive=True).method.message_count)
    except pika.exceptions.ChannelClosedByBroker:
        return -1
    finally:
        if ch.is_open:
            ch.close()


# -- the parameters API -------------------------------------------------------------------------------
def test_put_answers_201_then_204_and_the_value_reads_back_with_sorted_keys(broker, shovels, unique):
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    value = {"src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://", "dest-queue": dest}
    assert shovels(name, value) == (201, None)
    assert shovels(name, value) == (204, None)
    path = f"/api/parameters/shovel/{q(broker.vhost)}/{q(name)}"
    status, _, body = broker.http(path)
    expected = {
        "value": dict(sorted(value.items())),
        "vhost": broker.vhost,
        "component": "shovel",
        "name": name,
    }
    assert (status, body) == (200, expected) and list(body) == ["value", "vhost", "component", "name"]
    assert list(body["value"]) == sorted(value)
    for listing in ("/api/parameters", "/api/parameters/shovel", f"/api/parameters/shovel/{q(broker.vhost)}"):
        status, items = broker.api(listing)
        assert status == 200 and expected in items
    assert broker.api(path, "DELETE") == (204, None)
    assert broker.api(path) == (404, {"error": "Object Not Found", "reason": "Not Found"})
    assert broker.api(path, "DELETE") == (404, {"error": "Object Not Found", "reason": "Not Found"})


def test_what_rabbitmq_answers_about_components_vhosts_and_bodies(broker, unique):
    name = unique("sh")
    value = local("a", "b")
    path = f"/api/parameters/shovel/{q(broker.vhost)}/{q(name)}"
    assert broker.api("/api/parameters/no-such-component") == (200, [])
    assert broker.api(f"/api/parameters/no-such-component/{q(broker.vhost)}") == (200, [])
    assert broker.api("/api/parameters/shovel/no-such-vhost") == (
        404,
        {"error": "Object Not Found", "reason": "Not Found"},
    )
    assert broker.api(
        f"/api/parameters/no-such-component/{q(broker.vhost)}/{q(name)}", "PUT", {"value": value}
    ) == (
        400,
        {"error": "bad_request", "reason": "Validation failed\n\ncomponent no-such-component not found\n"},
    )
    assert broker.api(f"/api/parameters/shovel/no-such-vhost/{q(name)}", "PUT", {"value": value}) == (
        404,
        {"error": "not_found", "reason": "vhost_not_found"},
    )
    assert broker.api(path, "PUT", {"nothing": 1}) == (
        400,
        {"error": "bad_request", "reason": "[{key_missing,value}]"},
    )
    assert broker.api(path, "PUT", raw=b"not json") == (400, {"error": "bad_request", "reason": "not_json"})
    assert broker.api(f"/api/parameters/policy/{q(broker.vhost)}/{q(name)}", "PUT", {"value": {}}) == (
        400,
        {"error": "bad_request", "reason": "policies may not be set using this method"},
    )
    assert broker.api(path) == (404, {"error": "Object Not Found", "reason": "Not Found"})


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (
            {"src-uri": "amqp://", "src-queue": "a", "dest-queue": "b"},
            'Validation failed\n\nKey "dest-uri" not found in {name}\n',
        ),
        (
            {},
            "Validation failed\n\nMust specify 'src-exchange' or 'src-queue'\n"
            'Key "dest-uri" not found in {name}\nKey "src-uri" not found in {name}\n',
        ),
        (
            {**local("a", "b"), "ack-mode": "foo", "reconnect-delay": "x", "zz": 1},
            'Validation failed\n\nUnrecognised terms [{&lt;&lt;"zz"&gt;&gt;,1}] in {name}\n'
            'ack-mode should be one of [&lt;&lt;"no-ack"&gt;&gt;,&lt;&lt;"on-publish"&gt;&gt;,'
            '&lt;&lt;"on-confirm"&gt;&gt;], actually was &lt;&lt;"foo"&gt;&gt;\n'
            'reconnect-delay should be a number, actually was &lt;&lt;"x"&gt;&gt;\n',
        ),
        (
            {**local("a", "b"), "src-uri": "amqp://h?heartbeat=x"},
            'Validation failed\n\n"amqp://h?heartbeat=x" not a valid URI: {{invalid_amqp_params_parameter,\n'
            '                                          heartbeat,"x",\n'
            '                                          [{"heartbeat","x"}],\n'
            '                                          {not_an_integer,"x"}},\n'
            '                                         "amqp://h?heartbeat=x"}\n',
        ),
        (
            {**local("a", "b"), "src-uri": "amqp:///no-such-vhost"},
            'Validation failed\n\nuser "{user}" may not connect to vhost "no-such-vhost"\n',
        ),
    ],
    ids=["no dest-uri", "empty", "three problems", "a bad uri", "a vhost the user cannot open"],
)
def test_a_refused_value_gets_rabbitmqs_text(broker, shovels, unique, value, reason):
    name = unique("sh")
    assert shovels(name, value) == (
        400,
        {"error": "bad_request", "reason": reason.replace("{name}", name).replace("{user}", broker.user)},
    )


# -- running shovels ------------------------------------------------------------------------------------
def test_a_local_shovel_moves_every_message_and_declares_missing_queues_durable(
    broker, shovels, unique, channel
):
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    channel.queue_declare(src, durable=True)
    for i in range(20):
        channel.basic_publish("", src, b"m%d" % i)
    assert shovels(name, local(src, dest))[0] == 201
    entry = running(broker, name)
    assert list(entry) == [
        "node",
        "timestamp",
        "name",
        "vhost",
        "type",
        "state",
        "src_uri",
        "src_protocol",
        "dest_protocol",
        "dest_uri",
        "src_queue",
        "dest_queue",
    ]
    assert {k: v for k, v in entry.items() if k not in ("node", "timestamp")} == {
        "name": name,
        "vhost": broker.vhost,
        "type": "dynamic",
        "state": "running",
        "src_uri": "amqp://",
        "src_protocol": "amqp091",
        "dest_protocol": "amqp091",
        "dest_uri": "amqp://",
        "src_queue": src,
        "dest_queue": dest,
    }
    eventually(lambda: depth(channel, dest) == 20 and depth(channel, src) == 0, what="20 messages moved")
    bodies = [channel.basic_get(dest, auto_ack=True)[2] for _ in range(20)]
    assert bodies == [b"m%d" % i for i in range(20)]  # in order
    status, info = broker.api(f"/api/queues/{q(broker.vhost)}/{q(dest)}")
    assert status == 200 and (info["durable"], info["auto_delete"], info["arguments"]) == (True, False, {})


def encode_table(items: list[tuple[str, bytes, bytes]]) -> bytes:
    """A field table from ``(key, type tag, value octets)``."""
    body = b"".join(bytes((len(k),)) + k.encode() + tag + v for k, tag, v in items)
    return struct.pack(">I", len(body)) + body


def longstr(text: str) -> bytes:
    return struct.pack(">I", len(text.encode())) + text.encode()


def test_forward_and_timestamp_headers_are_rabbitmqs_and_every_other_octet_is_kept(
    broker, shovels, unique, raw_connect
):
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    raw = raw_connect()
    raw.open_channel(1)
    for queue in (src, dest):  # the raw channel's basic.get must not find the destination missing (404)
        raw.rpc(1, pamqp.commands.Queue.Declare(queue=queue, durable=True), pamqp.commands.Queue.DeclareOk)
    headers = encode_table(
        [
            ("zeta", b"I", struct.pack(">i", 1)),
            ("alpha", b"S", longstr("a")),
            ("mid", b"l", struct.pack(">q", 1 << 40)),
            ("f", b"d", struct.pack(">d", 1.5)),
            ("n", b"s", struct.pack(">h", -2)),
        ]
    )
    props = struct.pack(">H", 0x2000 | 0x1000 | 0x0010) + headers + b"\x02" + b"\x05" + broker.user.encode()
    raw.send_frame(1, pamqp.commands.Basic.Publish(exchange="", routing_key=src))
    payload = struct.pack(">HHQ", 60, 0, 4) + props
    raw.send(struct.pack(">BHI", 2, 1, len(payload)) + payload + b"\xce")
    raw.send_frame(1, pamqp.body.ContentBody(b"body"))
    src_uri = f"amqp://{broker.user}:{broker.password}@{broker.host}:{broker.port}"
    value = {
        "src-uri": src_uri,
        "src-queue": src,
        "dest-uri": "amqp://",
        "dest-queue": dest,
        "dest-add-forward-headers": True,
        "dest-add-timestamp-header": True,
    }
    before = int(time.time())
    assert shovels(name, value)[0] == 201
    entry = running(broker, name)
    assert entry["src_uri"] == f"amqp://{broker.host}:{broker.port}"  # without credentials

    def get() -> tuple[int, int, bytes] | None:
        raw.send_frame(1, pamqp.commands.Basic.Get(queue=dest, no_ack=True))
        _, frame = raw.recv_frame()
        return raw.recv_raw_frame() if isinstance(frame, pamqp.commands.Basic.GetOk) else None

    kind, _, header_payload = eventually(get, what="the shovelled message")
    assert kind == 2
    got = header_payload[12:]
    status, overview = broker.api("/api/overview")
    forward = encode_table(
        [
            (key, b"S", longstr(text))
            for key, text in (
                ("shovelled-by", overview["cluster_name"]),
                ("shovel-type", "dynamic"),
                ("shovel-name", name),
                ("shovel-vhost", broker.vhost),
                ("src-uri", entry["src_uri"]),
                ("dest-uri", "amqp://"),
                ("src-queue", src),
                ("dest-queue", dest),
            )
        ]
    )
    array = b"F" + forward
    stamp_at = got.index(b"\x15x-shovelled-timestamp") + 1 + 21
    assert got[stamp_at : stamp_at + 1] == b"l"
    stamp = struct.unpack(">q", got[stamp_at + 1 : stamp_at + 9])[0]
    assert before <= stamp <= int(time.time()) + 1  # seconds
    expected_headers = encode_table(
        [  # sorted by key (rabbit_misc:set_table_value)
            ("alpha", b"S", longstr("a")),
            ("f", b"d", struct.pack(">d", 1.5)),
            ("mid", b"l", struct.pack(">q", 1 << 40)),
            ("n", b"s", struct.pack(">h", -2)),
            ("x-shovelled", b"A", struct.pack(">I", len(array)) + array),
            ("x-shovelled-timestamp", b"l", struct.pack(">q", stamp)),
            ("zeta", b"I", struct.pack(">i", 1)),
        ]
    )
    assert (
        got
        == struct.pack(">H", 0x2000 | 0x1000 | 0x0010)
        + expected_headers
        + b"\x02"
        + b"\x05"
        + broker.user.encode()
    )


def test_a_large_message_crosses_intact(broker, shovels, unique, channel):
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    body = bytes(range(256)) * (3 * 4096 + 7)  # 3 MiB and a bit: many body frames
    channel.queue_declare(src, durable=True)
    channel.basic_publish("", src, body, pika.BasicProperties(content_type="application/octet-stream"))
    assert shovels(name, local(src, dest))[0] == 201
    eventually(lambda: depth(channel, dest) == 1, what="the large message moved")
    _, props, got = channel.basic_get(dest, auto_ack=True)
    assert got == body and props.content_type == "application/octet-stream"


def test_exchange_to_exchange_with_keys(broker, shovels, unique, channel):
    name, source_x, dest_x, out = unique("sh"), unique("srcx"), unique("destx"), unique("out")
    channel.exchange_declare(source_x, "direct")
    channel.exchange_declare(dest_x, "direct")
    channel.queue_declare(out)
    channel.queue_bind(out, dest_x, "to-out")
    value = {
        "src-uri": "amqp://",
        "src-exchange": source_x,
        "src-exchange-key": "in",
        "dest-uri": "amqp://",
        "dest-exchange": dest_x,
        "dest-exchange-key": "to-out",
    }
    assert shovels(name, value)[0] == 201
    entry = running(broker, name)
    assert {k: entry[k] for k in list(entry)[6:]} == {
        "src_uri": "amqp://",
        "src_protocol": "amqp091",
        "dest_protocol": "amqp091",
        "dest_uri": "amqp://",
        "src_exchange": source_x,
        "src_exchange_key": "in",
        "dest_exchange": dest_x,
        "dest_exchange_key": "to-out",
    }
    channel.basic_publish(source_x, "in", b"routed")
    channel.basic_publish(source_x, "other", b"not bound")
    eventually(lambda: depth(channel, out) == 1, what="the message routed by key")
    method, _, body = channel.basic_get(out, auto_ack=True)
    assert (body, method.exchange, method.routing_key) == (b"routed", dest_x, "to-out")


def test_without_dest_queue_or_key_the_message_keeps_its_routing_key(broker, shovels, unique, channel):
    name, src, dest_x, out = unique("sh"), unique("src"), unique("destx"), unique("out")
    channel.exchange_declare(dest_x, "direct")
    channel.queue_declare(out)
    channel.queue_bind(out, dest_x, src)  # the messages come through the default exchange, key = src
    channel.queue_declare(src, durable=True)
    channel.basic_publish("", src, b"kept key")
    assert (
        shovels(
            name, {"src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://", "dest-exchange": dest_x}
        )[0]
        == 201
    )
    eventually(lambda: depth(channel, out) == 1, what="the message under its own key")


@pytest.mark.parametrize("ack_mode", ["on-confirm", "on-publish", "no-ack"])
def test_each_ack_mode_moves_everything(broker, shovels, unique, channel, ack_mode):
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    channel.queue_declare(src, durable=True)
    for i in range(50):
        channel.basic_publish("", src, b"%d" % i)
    assert shovels(name, local(src, dest, **{"ack-mode": ack_mode, "src-prefetch-count": 10}))[0] == 201
    eventually(
        lambda: depth(channel, dest) == 50 and depth(channel, src) == 0, what=f"50 moved with {ack_mode}"
    )


def test_delete_after_queue_length_moves_what_was_there_then_goes(broker, shovels, unique, channel):
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    channel.queue_declare(src, durable=True)
    for i in range(10):
        channel.basic_publish("", src, b"%d" % i)
    path = f"/api/parameters/shovel/{q(broker.vhost)}/{q(name)}"
    assert shovels(name, local(src, dest, **{"src-delete-after": "queue-length"}))[0] == 201
    eventually(lambda: broker.api(path)[0] == 404, what="the parameter cleared")
    assert status_of(broker, name) is None
    assert (depth(channel, dest), depth(channel, src)) == (10, 0)


def test_delete_after_a_count_moves_that_many(broker, shovels, unique, channel):
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    channel.queue_declare(src, durable=True)
    for i in range(10):
        channel.basic_publish("", src, b"%d" % i)
    path = f"/api/parameters/shovel/{q(broker.vhost)}/{q(name)}"
    assert shovels(name, local(src, dest, **{"src-delete-after": 4}))[0] == 201
    eventually(lambda: broker.api(path)[0] == 404, what="the parameter cleared")
    eventually(lambda: (depth(channel, dest), depth(channel, src)) == (4, 6), what="4 moved, 6 left")


def test_amqp_without_a_path_is_the_vhost_slash(broker, shovels, unique, channel):
    vhost, name, src, dest = unique("vh"), unique("sh"), unique("src"), unique("dest")
    assert broker.api(f"/api/vhosts/{q(vhost)}", "PUT", {})[0] == 201
    try:
        assert shovels(name, local(src, dest), vhost=vhost)[0] == 201
        eventually(
            lambda: broker.api(f"/api/queues/%2F/{q(dest)}")[0] == 200, what="the queues declared in /"
        )
        assert broker.api(f"/api/queues/{q(vhost)}")[1] == []
    finally:
        broker.api(f"/api/parameters/shovel/{q(vhost)}/{q(name)}", "DELETE")
        broker.api(f"/api/vhosts/{q(vhost)}", "DELETE")


def test_the_shovels_api_lists_restarts_and_deletes(broker, shovels, unique, channel):
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    assert shovels(name, local(src, dest))[0] == 201
    running(broker, name)
    vh = q(broker.vhost)
    for path in (f"/api/shovels/{vh}", f"/api/shovels/vhost/{vh}/{q(name)}"):
        status, entries = broker.api(path)
        assert status == 200 and name in [e["name"] for e in entries]
    missing = {"error": "Object Not Found", "reason": "Not Found"}
    assert broker.api(f"/api/shovels/vhost/{vh}/{q(name)}.nope") == (404, missing)
    assert broker.api("/api/shovels/no-such-vhost") == (404, missing)
    assert broker.api(f"/api/shovels/vhost/{vh}/{q(name)}.nope/restart", "DELETE") == (404, missing)
    assert broker.api(f"/api/shovels/vhost/{vh}/{q(name)}/restart", "DELETE") == (204, None)
    running(broker, name)
    channel.queue_declare(src, passive=True)
    channel.basic_publish("", src, b"after the restart")
    eventually(lambda: depth(channel, dest) == 1, what="moving again")
    assert broker.api(f"/api/shovels/vhost/{vh}/{q(name)}", "DELETE") == (204, None)
    assert broker.api(f"/api/parameters/shovel/{vh}/{q(name)}")[0] == 404
    eventually(lambda: status_of(broker, name) is None, what="the shovel gone")


def test_a_shovel_that_cannot_connect_stays_starting(broker, shovels, unique):
    name = unique("sh")
    value = {**local("a", "b"), "src-uri": "amqp://guest:guest@127.0.0.1:1", "reconnect-delay": 1}
    assert shovels(name, value)[0] == 201
    eventually(lambda: status_of(broker, name) is not None, what="a status")
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        entry = status_of(broker, name)
        assert entry is not None and entry["state"] == "starting" and "reason" not in entry
        time.sleep(0.2)


def test_the_definitions_export_holds_the_parameter(broker, shovels, unique):
    name = unique("sh")
    value = local(unique("src"), unique("dest"))
    assert shovels(name, value)[0] == 201
    expected = {
        "value": dict(sorted(value.items())),
        "vhost": broker.vhost,
        "component": "shovel",
        "name": name,
    }
    for path in ("/api/definitions", f"/api/definitions/{q(broker.vhost)}"):
        status, defs = broker.api(path)
        assert status == 200
        found = [p for p in defs["parameters"] if p.get("name") == name]
        assert found == [expected] and list(found[0]) == ["value", "vhost", "component", "name"]


def test_a_definitions_import_sets_and_starts_a_shovel(broker, shovels, unique, channel):
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    channel.queue_declare(src, durable=True)
    channel.basic_publish("", src, b"imported")
    item = {"value": local(src, dest), "vhost": broker.vhost, "component": "shovel", "name": name}
    try:
        assert broker.api("/api/definitions", "POST", {"parameters": [item]}) == (204, None)
        path = f"/api/parameters/shovel/{q(broker.vhost)}/{q(name)}"
        assert broker.api(path)[1]["value"] == dict(sorted(item["value"].items()))
        running(broker, name)
        eventually(lambda: depth(channel, dest) == 1, what="the imported shovel moving")
    finally:
        broker.api(f"/api/parameters/shovel/{q(broker.vhost)}/{q(name)}", "DELETE")


def test_a_policymaker_sets_shovels_in_its_vhosts_and_a_monitoring_user_sees_them(broker, shovels, unique):
    maker, watcher, name = unique("pm"), unique("mon"), unique("sh")
    vh = q(broker.vhost)
    try:
        for user, tags in ((maker, "policymaker"), (watcher, "monitoring")):
            assert broker.api(f"/api/users/{q(user)}", "PUT", {"password": "pw", "tags": tags})[0] in (
                201,
                204,
            )
        assert broker.api(
            f"/api/permissions/{vh}/{q(maker)}", "PUT", {"configure": ".*", "write": ".*", "read": ".*"}
        )[0] in (201, 204)
        assert broker.api(
            f"/api/permissions/{vh}/{q(watcher)}", "PUT", {"configure": ".*", "write": ".*", "read": ".*"}
        )[0] in (201, 204)
        path = f"/api/parameters/shovel/{vh}/{q(name)}"
        value = local(unique("src"), unique("dest"))
        assert broker.api(path, "PUT", {"value": value}, auth=(maker, "pw")) == (201, None)
        refused = {"error": "not_authorised", "reason": "User not authorised to access object"}
        assert broker.api(path, auth=(watcher, "pw")) == (401, refused)
        assert broker.api("/api/shovels", auth=(maker, "pw")) == (
            401,
            {"error": "not_authorised", "reason": "Not monitor user"},
        )
        eventually(lambda: name in [e["name"] for e in broker.api("/api/shovels", auth=(watcher, "pw"))[1]])
        assert broker.api(path, "DELETE", auth=(maker, "pw")) == (204, None)
    finally:
        broker.api(f"/api/parameters/shovel/{vh}/{q(name)}", "DELETE")
        for user in (maker, watcher):
            broker.api(f"/api/users/{q(user)}", "DELETE")


def test_a_shovel_survives_a_broker_restart(restartable, unique):
    broker, restart = restartable("sigterm")
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    path = f"/api/parameters/shovel/{q(broker.vhost)}/{q(name)}"
    try:
        assert broker.api(path, "PUT", {"value": local(src, dest)})[0] == 201
        running(broker, name)
        restart()
        running(broker, name)
        conn = pika.BlockingConnection(broker.params())
        try:
            ch = conn.channel()
            ch.basic_publish("", src, b"after the restart", pika.BasicProperties(delivery_mode=2))
            eventually(lambda: depth(ch, dest) == 1, what="moving after the restart")
        finally:
            conn.close()
    finally:
        broker.api(path, "DELETE")


def test_a_user_with_the_impersonator_tag_publishes_any_user_id(broker, unique):
    """What lets a shovel forward a message whose ``user_id`` names the original publisher (RabbitMQ's
    local shovels act as a user that may, ottermq's as its internal principal with this tag)."""
    user, queue = unique("imp"), unique("q")
    vh = q(broker.vhost)
    try:
        assert (
            broker.api(f"/api/users/{q(user)}", "PUT", {"password": "pw", "tags": "impersonator"})[0] == 201
        )
        perms = {"configure": ".*", "write": ".*", "read": ".*"}
        assert broker.api(f"/api/permissions/{vh}/{q(user)}", "PUT", perms)[0] in (201, 204)
        conn = pika.BlockingConnection(broker.params(credentials=pika.PlainCredentials(user, "pw")))
        try:
            ch = conn.channel()
            ch.queue_declare(queue)
            ch.basic_publish("", queue, b"as someone else", pika.BasicProperties(user_id="someone-else"))
            method, props, _ = poll_until(lambda: (got := ch.basic_get(queue, auto_ack=True))[0] and got)
            assert props.user_id == "someone-else"
            ch.queue_delete(queue)
        finally:
            conn.close()
    finally:
        broker.api(f"/api/users/{q(user)}", "DELETE")


# -- ottermq's own ----------------------------------------------------------------------------------------
@pytest.mark.extension
def test_prometheus_counts_what_each_shovel_moved(broker, shovels, unique, channel):
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    channel.queue_declare(src, durable=True)
    for i in range(7):
        channel.basic_publish("", src, b"%d" % i)
    assert shovels(name, local(src, dest))[0] == 201
    eventually(lambda: depth(channel, dest) == 7, what="7 moved")
    labels = f'shovel="{name}",vhost="{broker.vhost}"'

    def scraped() -> str | None:
        with urllib.request.urlopen(broker.prometheus_url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        ok = f"ottermq_shovel_messages_acked_total{{{labels}}} 7.0" in text
        return text if ok else None

    text = eventually(scraped, what="the acked counter at 7")
    assert f"ottermq_shovel_messages_forwarded_total{{{labels}}} 7.0" in text
    assert f"ottermq_shovel_messages_redelivered_total{{{labels}}} 0.0" in text
    assert f'ottermq_shovel_state{{shovel="{name}",state="running",vhost="{broker.vhost}"}} 1.0' in text


@pytest.mark.extension
def test_a_message_with_headers_nested_thousands_deep_crosses_unchanged(broker, shovels, unique, raw_connect):
    """What arrives inside a message is input: 5,000 nested tables in a header pass through the shovel's
    client (which keeps the property octets aside instead of decoding them) and its forward headers
    (which read only ``x-shovelled``), octet for octet."""
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    raw = raw_connect()
    raw.open_channel(1)
    for queue in (src, dest):  # the raw channel's basic.get must not find the destination missing (404)
        raw.rpc(1, pamqp.commands.Queue.Declare(queue=queue, durable=True), pamqp.commands.Queue.DeclareOk)
    nested = b""
    for _ in range(5000):
        entry = b"\x01nF" + struct.pack(">I", len(nested)) + nested
        nested = entry
    deep = encode_table([("deep", b"F", struct.pack(">I", len(nested)) + nested)])
    props = struct.pack(">H", 0x2000) + deep
    raw.send_frame(1, pamqp.commands.Basic.Publish(exchange="", routing_key=src))
    payload = struct.pack(">HHQ", 60, 0, 1) + props
    raw.send(struct.pack(">BHI", 2, 1, len(payload)) + payload + b"\xce")
    raw.send_frame(1, pamqp.body.ContentBody(b"x"))
    assert shovels(name, local(src, dest, **{"dest-add-forward-headers": True}))[0] == 201

    def get() -> tuple[int, int, bytes] | None:
        raw.send_frame(1, pamqp.commands.Basic.Get(queue=dest, no_ack=True))
        _, frame = raw.recv_frame()
        return raw.recv_raw_frame() if isinstance(frame, pamqp.commands.Basic.GetOk) else None

    _, _, header = eventually(get, what="the deep message shovelled")
    got = header[12:]
    assert got.startswith(struct.pack(">H", 0x2000))
    start = got.index(b"\x04deepF") + 6
    assert got[start : start + 4 + len(nested)] == struct.pack(">I", len(nested)) + nested
    assert running(broker, name)["state"] == "running"


@pytest.mark.extension
def test_a_start_up_definitions_file_and_an_offline_import_set_shovels(broker_process, tmp_path):
    """``OTTERMQ_DEFINITIONS_FILE`` and ``ottermq definitions import FILE`` on a stopped broker's store
    set shovel parameters too (docs/durability.md#definitions); the shovels run once it serves."""

    def definitions(name: str, src: str, dest: str) -> Any:
        item = {"value": local(src, dest), "vhost": "/", "component": "shovel", "name": name}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"vhosts": [{"name": "/"}], "parameters": [item]}))
        return path

    process = broker_process({"OTTERMQ_DEFINITIONS_FILE": str(definitions("at-start", "s1", "d1"))})
    b = process.start()
    running(b, "at-start")
    assert process.stop() == 0
    env = {**process.store_env(), "PYTHONSAFEPATH": "1"}
    imported = subprocess.run(
        [
            sys.executable,
            "-m",
            "ottermq.broker",
            "definitions",
            "import",
            str(definitions("offline", "s2", "d2")),
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert imported.returncode == 0, imported.stderr
    process.start()
    running(b, "offline")
    running(b, "at-start")


@pytest.mark.extension
def test_values_beyond_ottermqs_bounds_are_400s(broker, unique):
    """RabbitMQ takes any JSON; ottermq bounds what a request may hold (docs/production.md#bad-input):
    nesting past 64 levels, a lone surrogate, a number that is not finite."""
    path = f"/api/parameters/shovel/{q(broker.vhost)}/{q(unique('sh'))}"
    deep: Any = "x"
    for _ in range(100):
        deep = [deep]
    assert broker.api(path, "PUT", {"value": {**local("a", "b"), "src-queue-args": deep}})[0] == 400
    assert broker.api(path, "PUT", raw=b'{"value": {"src-queue": "\\ud800"}}')[0] == 400
    status, body = broker.api(path, "PUT", raw=b'{"value": {"reconnect-delay": 1e400}}')
    assert status == 400 and "not finite" in body["reason"]
    assert broker.api(path)[0] == 404


@pytest.mark.extension
def test_a_destination_nack_hands_the_message_back_to_the_source(broker, shovels, unique, channel):
    """A destination that refuses (``reject-publish`` on a full queue) nacks; the shovel nacks the
    source with requeue, which delivers it again: nothing is lost, the counters say so."""
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    channel.queue_declare(dest, durable=True, arguments={"x-max-length": 3, "x-overflow": "reject-publish"})
    channel.queue_declare(src, durable=True)
    for i in range(6):
        channel.basic_publish("", src, b"%d" % i)
    assert shovels(name, local(src, dest, **{"reconnect-delay": 1}))[0] == 201
    labels = f'shovel="{name}",vhost="{broker.vhost}"'

    def counts() -> dict[str, float] | None:
        with urllib.request.urlopen(broker.prometheus_url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        found = {}
        for line in text.splitlines():
            if labels in line and line.startswith("ottermq_shovel_messages_"):
                found[line.split("{")[0]] = float(line.split()[-1])
        nacked = found.get("ottermq_shovel_messages_nacked_total", 0)
        return (
            found if nacked >= 3 and found.get("ottermq_shovel_messages_redelivered_total", 0) >= 3 else None
        )

    eventually(counts, what="nacks handed back and delivered again")
    broker.api(f"/api/parameters/shovel/{q(broker.vhost)}/{q(name)}", "DELETE")
    eventually(lambda: status_of(broker, name) is None, what="the shovel stopped")
    assert (depth(channel, dest), depth(channel, src)) == (3, 3)  # three moved, three back in the source


@pytest.mark.extension
def test_the_internal_principal_is_no_user(broker, shovels, unique):
    name = unique("sh")
    assert shovels(name, local(unique("src"), unique("dest")))[0] == 201
    running(broker, name)
    users = [u["name"] for u in broker.api("/api/users")[1]]
    assert "ottermq-internal" not in users
    status, conns = broker.api("/api/connections")
    shovel_conns = [c for c in conns if c["client_properties"].get("connection_name") == f"Shovel {name}"]
    assert len(shovel_conns) == 2 and {c["user"] for c in shovel_conns} == {"ottermq-internal"}
    assert broker.api("/api/whoami", auth=("ottermq-internal", ""))[0] == 401
    exported = json.dumps(broker.api("/api/definitions")[1])
    assert "ottermq-internal" not in exported
