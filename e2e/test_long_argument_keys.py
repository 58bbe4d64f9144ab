"""Argument keys longer than an AMQP field table allows (255 octets), through the management API and
definitions (issue 38, measured on RabbitMQ 3.10.8).

RabbitMQ accepts a queue, exchange or binding argument whose key has 300 characters from the HTTP API
and from a definitions import (201, or 204 for the import), shows it back and exports it, and keeps it:
its arguments are Erlang terms, never an AMQP table. ottermq stores such arguments in a widened form
(``persistence/arguments.py``) and keeps them across a restart too (extension tests: restarting
RabbitMQ is not done here). AMQP clients use such objects as any other (issue 41): a declare's
equivalence check compares only the arguments a client can send (an exchange's are not compared at
all; a queue's ``x-message-ttl`` is, and a refusal names its type as ``long``), and messages flow
through the binding, before and after a restart. A *message* header with such a key is another
matter: RabbitMQ accepts the HTTP publish (200) and then closes every AMQP connection that is handed
the message (541 INTERNAL_ERROR, the message stays at the head of its queue); ottermq refuses the
publish with 400.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pika
import pytest

from .polling import poll_until
from .test_management_definitions import rabbit_hash
from .test_management_write import call, q

LONG = "k" * 300  # 300 octets: no AMQP field table can carry this key
DEEP = {"nested": {"n" * 260: [1, {"m" * 256: "deep"}]}}  # long keys below the top level too


def _declare(broker, vh: str, queue: str, exchange: str) -> None:
    queue_path = f"/api/queues/{vh}/{q(queue)}"
    assert call(broker, queue_path, "PUT", {"durable": True, "arguments": {LONG: "v", **DEEP}})[0] == 201
    _declare_exchange_and_binding(broker, vh, queue, exchange)


def _declare_exchange_and_binding(broker, vh: str, queue: str, exchange: str) -> None:
    exchange_path = f"/api/exchanges/{vh}/{q(exchange)}"
    assert (
        call(broker, exchange_path, "PUT", {"type": "direct", "durable": True, "arguments": {LONG: 1}})[0]
        == 201
    )
    between = f"/api/bindings/{vh}/e/{q(exchange)}/q/{q(queue)}"
    assert call(broker, between, "POST", {"routing_key": "rk", "arguments": {LONG: True}})[0] == 201


def _shown(broker, vh: str, queue: str, exchange: str) -> tuple[Any, Any, Any]:
    """The arguments the API shows for the queue, the exchange and their binding."""
    queue_args = call(broker, f"/api/queues/{vh}/{q(queue)}")[2]["arguments"]
    exchange_args = call(broker, f"/api/exchanges/{vh}/{q(exchange)}")[2]["arguments"]
    bindings = call(broker, f"/api/bindings/{vh}/e/{q(exchange)}/q/{q(queue)}")[2]
    return queue_args, exchange_args, [(b["routing_key"], b["arguments"]) for b in bindings]


def _visible(broker, vh: str, queue: str) -> None:
    """After a start: with workers, worker 0's API learns another worker's recovered queues a moment
    later (docs/workers.md)."""
    poll_until(lambda: call(broker, f"/api/queues/{vh}/{q(queue)}")[0] == 200, what=f"queue {queue} listed")


EXPECTED = ({LONG: "v", **DEEP}, {LONG: 1}, [("rk", {LONG: True})])


def test_long_argument_keys_are_declared_shown_and_exported(broker, unique):
    vh, queue, exchange = q(broker.vhost), unique("long-q"), unique("long-x")
    _declare(broker, vh, queue, exchange)
    assert _shown(broker, vh, queue, exchange) == EXPECTED
    exported = call(broker, f"/api/definitions/{vh}")[2]
    [queue_def] = [x for x in exported["queues"] if x["name"] == queue]
    [exchange_def] = [x for x in exported["exchanges"] if x["name"] == exchange]
    [binding_def] = [x for x in exported["bindings"] if x["source"] == exchange]
    assert (queue_def["arguments"], exchange_def["arguments"], binding_def["arguments"]) == (
        {LONG: "v", **DEEP},
        {LONG: 1},
        {LONG: True},
    )
    listed = call(broker, f"/api/bindings/{vh}/e/{q(exchange)}/q/{q(queue)}")[2]
    between = f"/api/bindings/{vh}/e/{q(exchange)}/q/{q(queue)}/{listed[0]['properties_key']}"
    assert call(broker, between, "DELETE")[0] == 204
    assert _shown(broker, vh, queue, exchange)[2] == []
    for path in (f"/api/queues/{vh}/{q(queue)}", f"/api/exchanges/{vh}/{q(exchange)}"):
        assert call(broker, path, "DELETE")[0] == 204


def _definitions(queue: str, exchange: str) -> dict[str, Any]:
    return {
        "queues": [{"name": queue, "durable": True, "auto_delete": False, "arguments": {LONG: "v", **DEEP}}],
        "exchanges": [
            {
                "name": exchange,
                "type": "direct",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {LONG: 1},
            }
        ],
        "bindings": [
            {
                "source": exchange,
                "destination": queue,
                "destination_type": "queue",
                "routing_key": "rk",
                "arguments": {LONG: True},
            }
        ],
    }


def _over_amqp(connect, queue: str, exchange: str, channel_error) -> None:
    """What a client does with the objects (``_declare``'s, with ``x-message-ttl`` on the queue): the
    equivalence checks of declares compare only the arguments AMQP clients can send, a refused one
    names the queue's argument as RabbitMQ types an HTTP one (``long``), messages flow through the
    binding, and a consumer gets them (measured on RabbitMQ 3.10.8)."""
    channel = connect().channel()
    channel.exchange_declare(exchange, passive=True)
    channel.exchange_declare(exchange, "direct", durable=True)  # its arguments are not compared
    channel.exchange_declare(exchange, "direct", durable=True, arguments={"other": 1})
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
    channel.queue_declare(queue, durable=True, arguments={"x-message-ttl": 60000, "other": "v"})
    channel_error(
        lambda: connect().channel().queue_declare(queue, durable=True),
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue '{queue}' in vhost '/': "
        "received none but current is the value '60000' of type 'long'",
    )
    channel.confirm_delivery()
    channel.basic_publish(exchange, "rk", b"through", mandatory=True)
    got: list[bytes] = []
    channel.basic_consume(queue, lambda ch, method, _props, body: got.append(body), auto_ack=True)
    poll_until(lambda: channel.connection.process_data_events(time_limit=0.05) or got, what="a delivery")
    assert got == [b"through"]


def test_clients_use_objects_with_long_argument_keys(broker, connect, channel_error, unique):
    vh, queue, exchange = q(broker.vhost), unique("long-q"), unique("long-x")
    queue_path = f"/api/queues/{vh}/{q(queue)}"
    assert (
        call(broker, queue_path, "PUT", {"durable": True, "arguments": {LONG: "v", "x-message-ttl": 60000}})[
            0
        ]
        == 201
    )
    _declare_exchange_and_binding(broker, vh, queue, exchange)
    _over_amqp(connect, queue, exchange, channel_error)
    assert _shown(broker, vh, queue, exchange)[1:] == EXPECTED[1:]


def test_a_definitions_import_with_long_argument_keys_works(broker, unique):
    vh, queue, exchange = q(broker.vhost), unique("long-q"), unique("long-x")
    assert call(broker, f"/api/definitions/{vh}", "POST", _definitions(queue, exchange))[0] == 204
    try:
        assert _shown(broker, vh, queue, exchange) == EXPECTED
    finally:
        for path in (f"/api/queues/{vh}/{q(queue)}", f"/api/exchanges/{vh}/{q(exchange)}"):
            call(broker, path, "DELETE")


@pytest.mark.extension
def test_long_argument_keys_survive_a_restart(broker_process, tmp_path: Path):
    """Declared over HTTP and read from a definitions file (a RabbitMQ export) at start-up: all of it is
    in the store, clients declare and publish through it after the restart, and a binding deleted after
    the restart is gone after the next one."""
    file_queue, file_exchange = "long-file-q", "long-file-x"
    guest = {"name": "guest", "password_hash": rabbit_hash("guest"), "tags": ["administrator"]}
    definitions = {
        "vhosts": [{"name": "/"}],
        "users": [{**guest, "hashing_algorithm": "rabbit_password_hashing_sha256"}],
        "permissions": [{"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}],
        **_definitions(file_queue, file_exchange),
    }
    for kind in ("queues", "exchanges", "bindings"):
        for item in definitions[kind]:
            item["vhost"] = "/"
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps(definitions))
    process = broker_process({"OTTERMQ_DEFINITIONS_FILE": str(path)})
    b = process.start()
    vh = q(b.vhost)
    _declare(b, vh, "long-http-q", "long-http-x")
    process.stop()
    path.unlink()  # what comes back now comes from the store
    process.extra_env.pop("OTTERMQ_DEFINITIONS_FILE")
    b = process.start()
    _visible(b, vh, "long-http-q")
    _visible(b, vh, file_queue)
    for queue, exchange in (("long-http-q", "long-http-x"), (file_queue, file_exchange)):
        assert _shown(b, vh, queue, exchange) == EXPECTED, (queue, b.log_tail())
        with pika.BlockingConnection(b.params()) as connection:  # a client uses the recovered objects
            channel = connection.channel()
            channel.exchange_declare(exchange, "direct", durable=True)
            channel.queue_declare(queue, durable=True, arguments={"other": 1})
            channel.confirm_delivery()
            channel.basic_publish(exchange, "rk", b"after a restart", mandatory=True)
            assert channel.basic_get(queue, auto_ack=True)[2] == b"after a restart"
    [binding] = call(b, f"/api/bindings/{vh}/e/long-http-x/q/long-http-q")[2]
    assert (
        call(b, f"/api/bindings/{vh}/e/long-http-x/q/long-http-q/{binding['properties_key']}", "DELETE")[0]
        == 204
    )
    process.stop()
    b = process.start()
    _visible(b, vh, "long-http-q")
    assert _shown(b, vh, "long-http-q", "long-http-x")[2] == []
    assert _shown(b, vh, file_queue, file_exchange) == EXPECTED


@pytest.mark.extension
def test_a_header_key_amqp_cannot_carry_is_a_400_for_http_publish(broker, channel, unique):
    """RabbitMQ answers 200 and then closes every consumer's connection with 541 (measured)."""
    queue = unique("long-h")
    channel.queue_declare(queue)
    body = {
        "properties": {"headers": {LONG: "v"}},
        "routing_key": queue,
        "payload": "p",
        "payload_encoding": "string",
    }
    status, _, error = call(broker, f"/api/exchanges/{q(broker.vhost)}/amq.default/publish", "POST", body)
    assert (status, error["error"]) == (400, "bad_request")
    assert "255" in error["reason"], error
    channel.basic_publish("", queue, b"ordinary")
    method, _props, got = channel.basic_get(queue, auto_ack=True)
    assert got == b"ordinary" and method.message_count == 0  # nothing else was queued
