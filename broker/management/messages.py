"""Messages through the API: ``POST /api/queues/{vhost}/{name}/get`` and
``POST /api/exchanges/{vhost}/{name}/publish`` (RabbitMQ's ``rabbit_mgmt_wm_queue_get`` and
``rabbit_mgmt_wm_exchange_publish``).

Rules (RabbitMQ 3.10):
- get takes up to ``count`` messages first, then settles them all by ``ackmode``: ``ack_requeue_true``
  and ``reject_requeue_true`` put them back (redelivered), ``ack_requeue_false`` drops them,
  ``reject_requeue_false`` dead-letters them (reason ``rejected``).
- ``encoding`` ``auto`` shows a UTF-8 payload as ``string``, anything else as ``base64``;
  ``truncate`` cuts the payload to that many bytes (``payload_bytes`` is the full size).
- publish answers ``{"routed": bool}``; the default exchange is ``amq.default`` in the path.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from ottermq.amqp.errors import AMQPError, FrameError
from ottermq.amqp.props import PROPERTIES, PROPERTY_FLAGS, join_props, split_props
from ottermq.amqp.table import decode_table, encode_table
from ottermq.vhost.bounds import OutOfBounds, field_table
from ottermq.vhost.message import Entry, Message

from .common import (
    bad_request,
    broker_of,
    check_permission,
    json_body,
    json_value,
    not_authorised,
    user_of,
    vhost_or_404,
)

ACKMODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")


def _required(body: dict[str, Any], key: str) -> Any:
    if key not in body:
        raise bad_request(f"{key} not found")
    return body[key]


def properties_json(raw_props: bytes) -> dict[str, Any] | list[Any]:
    """The set properties of a message by RabbitMQ's names (none: ``[]``, as RabbitMQ shows an
    empty Erlang property list).

    Total: each property is read on its own, ``headers`` with the bounded table codec and shown by
    ``json_value``; headers whose octets do not decode (a raw client's; RabbitMQ closes such a
    publisher's connection) show as a text saying why, and a property list that does not split at
    all as ``[]``. Never an exception: one message must not break a listing for everyone.
    """
    try:
        _flags, fields = split_props(raw_props)
    except FrameError:  # octets a raw client sent that do not decode: kept and forwarded, not shown
        return []
    shown = {
        name: _property_json(codec.name, fields[bit]) for bit, name, codec in PROPERTIES if bit in fields
    }
    return shown or []


def _property_json(codec: str, octets: bytes) -> Any:
    """One property's JSON value from its field octets (a shortstr's and a table's length included)."""
    if codec == "shortstr":
        return octets[1:].decode("utf-8", "replace")
    if codec in ("octet", "timestamp"):
        return int.from_bytes(octets, "big")  # a timestamp: epoch seconds, as RabbitMQ shows it
    try:
        return json_value(decode_table(octets)[0])
    except FrameError as exc:
        return f"(headers not shown: {exc.text})"


def payload_json(body: bytes, encoding: str, truncate: int | None) -> tuple[str, str]:
    """``(payload, payload_encoding)`` of a message body."""
    cut = body if truncate is None else body[:truncate]
    if encoding == "auto":
        try:
            return cut.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(cut).decode("ascii"), "base64"


def message_json(
    entry: Entry, message_count: int, encoding: str, truncate: int | None, message: Message | None = None
) -> dict[str, Any]:
    """One message as the API shows it; ``message``: what a ``basic.get`` hands out for the entry
    (``Queue.outgoing``; default: the entry's own)."""
    if message is None:
        message = entry.message
    payload, payload_encoding = payload_json(message.body, encoding, truncate)
    return {
        "payload_bytes": len(message.body),
        "redelivered": entry.redelivered,
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "message_count": message_count,
        "properties": properties_json(message.raw_props),
        "payload": payload,
        "payload_encoding": payload_encoding,
    }


async def get_messages(request: web.Request) -> web.Response:
    vhost = vhost_or_404(request)
    name = request.match_info["name"]
    body = await json_body(request)
    count = _required(body, "count")
    ackmode = _required(body, "ackmode")
    encoding = _required(body, "encoding")
    truncate = body.get("truncate")
    if isinstance(count, str) and count.isdigit():
        count = int(count)
    if isinstance(truncate, str) and truncate.isdigit():
        truncate = int(truncate)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise bad_request("count must be a non-negative integer")
    if ackmode not in ACKMODES:
        raise bad_request(f"Unknown ackmode: {ackmode}")
    if encoding not in ("auto", "base64"):
        raise bad_request(f"Unknown encoding: {encoding}")
    if truncate in ("", None):
        truncate = None
    elif not isinstance(truncate, int) or isinstance(truncate, bool) or truncate < 0:
        raise bad_request("truncate must be a non-negative integer")
    with queue_errors():  # as a channel's basic.get: permission, then existence, then exclusivity
        queue = broker_of(request).ops.access_queue(user_of(request), vhost, name, "get")
    queue.touch()
    taken: list[Entry] = []
    shown: list[dict[str, Any]] = []
    for _ in range(count):
        entry = queue.pop()
        if entry is None:
            break
        taken.append(entry)
        got = queue.outgoing(entry, get=True)  # as basic.get hands it out (a quorum queue's x-delivery-count)
        shown.append(message_json(entry, queue.message_count, encoding, truncate, got))
    if ackmode.endswith("requeue_true"):
        # a look at the queue, not a consumer's return: never held. RabbitMQ's ack_requeue_true closes
        # its channel with the messages unacked (a quorum queue's "down" return), reject_requeue_true
        # rejects them (a quorum queue without a delivery limit puts them at the back)
        queue.requeue(taken, failed=None, down=ackmode == "ack_requeue_true")
    elif ackmode == "reject_requeue_false":
        queue.reject(taken)
    else:
        queue.forget(taken)
    return web.json_response(shown)


CODECS = {name: codec.name for _, name, codec in PROPERTIES}  # property -> its AMQP field type


def _property_octets(name: str, value: Any) -> bytes:
    """One property's field octets from its JSON value (RabbitMQ's property names).

    Raises:
        HTTPBadRequest: a value the property's AMQP type cannot carry (the property is named).
    """
    codec = CODECS[name]
    if codec == "shortstr":
        if not isinstance(value, str):
            raise bad_request(f"property {name} must be a string")
        raw = value.encode("utf-8")
        if len(raw) > 255:
            raise bad_request(f"property {name} is longer than 255 bytes")
        return bytes([len(raw)]) + raw
    if codec == "octet":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
            raise bad_request(f"property {name} must be an integer from 0 to 255")
        return bytes([value])
    if codec == "timestamp":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
            raise bad_request("property timestamp must be a non-negative integer (epoch seconds)")
        return value.to_bytes(8, "big")
    if not isinstance(value, dict):  # the table: headers
        raise bad_request("property headers must be an object")
    try:
        table = field_table(value, "headers")
    except OutOfBounds as exc:
        raise bad_request(str(exc)) from None
    try:  # a key of more than 255 octets: no AMQP client could be handed the message
        return encode_table(table)
    except (ValueError, TypeError) as exc:
        raise bad_request(f"property headers: {exc}") from None


def encode_properties(props: object) -> bytes:
    """JSON ``properties`` (RabbitMQ's names: ``type``, ``delivery_mode``, ...) as raw content-header
    property octets.

    Raises:
        HTTPBadRequest: not an object, an unknown property, or a value AMQP cannot carry.
    """
    if props in ([], None):  # RabbitMQ shows (and accepts) no properties as []
        props = {}
    if not isinstance(props, dict):
        raise bad_request("properties must be an object")
    unknown = sorted(set(props) - CODECS.keys())
    if unknown:
        raise bad_request(f"unknown property: {unknown[0]}")
    return join_props({PROPERTY_FLAGS[k]: _property_octets(k, v) for k, v in props.items() if v is not None})


@contextlib.contextmanager
def channel_errors() -> Iterator[None]:
    """RabbitMQ runs get and publish on a channel (after its own permission check, a 401): the
    channel's errors come back as 400 ``"<code> <reply text>"``."""
    try:
        yield
    except AMQPError as exc:
        raise bad_request(f"{exc.reply_code} {exc.reply_text}") from None


@contextlib.contextmanager
def queue_errors() -> Iterator[None]:
    """What RabbitMQ's HTTP ``/get`` answers when its channel's ``basic.get`` fails (measured on
    3.10.8): ``ACCESS_REFUSED`` is 401 ``not_authorised`` and ``NOT_FOUND`` 404 ``not_found``, with
    the reply text; any other code is 400 ``"<code> <reply text>"`` (RESOURCE_LOCKED: 405)."""
    try:
        yield
    except AMQPError as exc:
        if exc.reply_code == 403:
            raise not_authorised(exc.reply_text) from None
        if exc.reply_code == 404:
            raise web.HTTPNotFound(
                text=json.dumps({"error": "not_found", "reason": exc.reply_text}, separators=(",", ":")),
                content_type="application/json",
            ) from None
        raise bad_request(f"{exc.reply_code} {exc.reply_text}") from None


async def publish(request: web.Request) -> web.Response:
    vhost = vhost_or_404(request)
    name = request.match_info["name"]
    name = "" if name == "amq.default" else name
    body = await json_body(request)
    raw_props = encode_properties(_required(body, "properties"))
    routing_key = _required(body, "routing_key")
    payload = _required(body, "payload")
    payload_encoding = _required(body, "payload_encoding")
    if not isinstance(routing_key, str) or not isinstance(payload, str):
        raise bad_request("routing_key and payload must be strings")
    if len(routing_key.encode("utf-8")) > 255:
        raise bad_request("routing_key is longer than 255 bytes")
    if payload_encoding == "string":
        data = payload.encode("utf-8")
    elif payload_encoding == "base64":
        try:
            data = base64.b64decode(payload, validate=True)
        except binascii.Error:
            raise bad_request("not_base64") from None
    else:
        raise bad_request(f"Unknown payload_encoding: {payload_encoding}")
    check_permission(request, vhost, "write", "exchange", name)  # the management plugin's own: 401
    with channel_errors():
        ops = broker_of(request).ops
        result = ops.publish(user_of(request), vhost, name, routing_key, raw_props, data, permitted=True)
    return web.json_response({"routed": result.routed})


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.post(f"{prefix}/queues/{{vhost}}/{{name}}/get")(get_messages)
    routes.post(f"{prefix}/exchanges/{{vhost}}/{{name}}/publish")(publish)
