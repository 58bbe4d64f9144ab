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
from typing import Any

from aiohttp import web
from ottermq.amqp.errors import AccessRefused, AMQPError
from ottermq.amqp.props import PROPERTIES, decode_properties
from ottermq.vhost.message import Entry, published_message
from ottermq.vhost.queue import Queue
from pamqp import commands

from .common import (
    NotFound,
    bad_request,
    broker_of,
    check_permission,
    json_body,
    json_value,
    vhost_or_404,
)

ACKMODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")
PROPERTY_NAMES = frozenset(name for _, name, _ in PROPERTIES)


def _required(body: dict[str, Any], key: str) -> Any:
    if key not in body:
        raise bad_request(f"{key} not found")
    return body[key]


def properties_json(raw_props: bytes) -> dict[str, Any] | list[Any]:
    """The set properties of a message by RabbitMQ's names (none: ``[]``, as RabbitMQ shows an
    empty Erlang property list)."""
    props = decode_properties(raw_props)
    flags = int.from_bytes(raw_props[:2], "big") if len(raw_props) >= 2 else 0
    shown = {name: json_value(getattr(props, name)) for bit, name, _ in PROPERTIES if flags & bit}
    return shown or []


def payload_json(body: bytes, encoding: str, truncate: int | None) -> tuple[str, str]:
    """``(payload, payload_encoding)`` of a message body."""
    cut = body if truncate is None else body[:truncate]
    if encoding == "auto":
        try:
            return cut.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(cut).decode("ascii"), "base64"


def message_json(entry: Entry, message_count: int, encoding: str, truncate: int | None) -> dict[str, Any]:
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
    if name not in vhost.queues:
        raise NotFound()
    check_permission(request, vhost, "read", "queue", name)
    try:  # a channel's basic.get in RabbitMQ: "<code> <reply text>"
        queue = vhost.get_queue(name, None)
    except AMQPError as exc:
        raise bad_request(f"{exc.reply_code} {exc.reply_text}") from None
    queue.touch()
    taken: list[Entry] = []
    shown: list[dict[str, Any]] = []
    for _ in range(count):
        entry = queue.pop()
        if entry is None:
            break
        taken.append(entry)
        shown.append(message_json(entry, queue.message_count, encoding, truncate))
    if ackmode.endswith("requeue_true"):
        queue.requeue(taken, failed=None)  # a look at the queue, not a consumer's return: never held
    elif ackmode == "reject_requeue_false":
        queue.reject(taken)
    else:
        queue.forget(taken)
    return web.json_response(shown)


def _withdraw(stored: list[tuple[Queue, Entry]]) -> None:
    for queue, entry in stored:
        queue.withdraw(entry)


def encode_properties(props: object) -> bytes:
    """JSON ``properties`` as raw content-header property octets.

    Raises:
        HTTPBadRequest: not an object, or a property name or value AMQP cannot carry.
    """
    if props in ([], None):  # RabbitMQ shows (and accepts) no properties as []
        props = {}
    if not isinstance(props, dict):
        raise bad_request("properties must be an object")
    unknown = sorted(set(props) - set(PROPERTY_NAMES))
    if unknown:
        raise bad_request(f"unknown property: {unknown[0]}")
    try:
        return bytes(commands.Basic.Properties(**props).marshal())
    except (TypeError, ValueError, AttributeError) as exc:
        raise bad_request(f"bad properties: {exc}") from None


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
    if payload_encoding == "string":
        data = payload.encode("utf-8")
    elif payload_encoding == "base64":
        try:
            data = base64.b64decode(payload, validate=True)
        except binascii.Error:
            raise bad_request("not_base64") from None
    else:
        raise bad_request(f"Unknown payload_encoding: {payload_encoding}")
    check_permission(request, vhost, "write", "exchange", name)
    try:  # RabbitMQ publishes on a channel: its errors come back as "<code> <reply text>"
        exchange = vhost.get_exchange(name) if name else None
        if exchange is not None and exchange.internal:
            raise AccessRefused(f"cannot publish to internal exchange '{name}' in vhost '{vhost.name}'")
        message = published_message(name, routing_key, raw_props, data)
    except AMQPError as exc:
        raise bad_request(f"{exc.reply_code} {exc.reply_text}") from None
    result = vhost.publish(exchange, message)
    stored = result.stored
    if stored is not None:  # a failed store commit takes the message back, as for a channel

        def committed(ok: bool) -> None:
            if not ok:
                _withdraw(stored)

        broker_of(request).store.after_commit(committed)
    return web.json_response({"routed": result.routed})


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.post(f"{prefix}/queues/{{vhost}}/{{name}}/get")(get_messages)
    routes.post(f"{prefix}/exchanges/{{vhost}}/{{name}}/publish")(publish)
