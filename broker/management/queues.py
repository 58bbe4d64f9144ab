"""``GET /api/queues``, ``/api/queues/{vhost}``, ``/api/queues/{vhost}/{name}``; ``PUT`` and ``DELETE``
``/api/queues/{vhost}/{name}`` and ``DELETE /api/queues/{vhost}/{name}/contents`` (purge).

Rules (RabbitMQ 3.10, ``rabbit_mgmt_wm_queue``): a quorum queue shows ``"type": "quorum"`` and its
quorum fields (``leader``, ``members``, ``online``: this node; ``open_files``, ``messages_dlx``,
``message_bytes_dlx``, ``single_active_consumer_ctag``) and not a classic queue's
``exclusive_consumer_tag`` and ``head_message_timestamp``. PUT declares as ``queue.declare`` does (201 when
created, 204 when it existed and is equivalent, 400 with the channel's reason otherwise); DELETE
honours ``if-empty``/``if-unused`` (400 when not met) and is 404 for a missing queue; permissions are
the API user's, as for a channel of that user (refused: 401 ``Access refused.``).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from ottermq.amqp.errors import FrameError
from ottermq.amqp.props import PROPERTY_FLAGS, split_props
from ottermq.vhost.queue import Queue
from ottermq.vhost.vhost import VHost

from .. import node_name
from ..node.info import DescribedConsumer
from ..node.operations import arguments_of
from .common import (
    NotFound,
    amqp_errors,
    bad_request,
    broker_of,
    flag,
    json_body,
    json_value,
    sampler_of,
    selected_vhosts,
    sort_by_name,
    user_of,
    vhost_or_404,
)
from .connections import consumer_json
from .exchanges import dedup_json
from .policies import policy_fields
from .rates import QUEUE_STATS, TOTALS, queue_counts, queue_key, totals, with_rates

TIMESTAMP_BIT = PROPERTY_FLAGS["timestamp"]


def head_timestamp(queue: Queue) -> int | None:
    """The ``timestamp`` property of the queue's head message, if it has one (RabbitMQ's
    ``head_message_timestamp``; null for an empty queue, a head without one, or a head paged out: as
    RabbitMQ, which shows it only for a head in memory)."""
    entry = queue.peek_in_memory()
    raw = entry.message.raw_props if entry is not None else b""
    if len(raw) < 2 or not raw[1] & TIMESTAMP_BIT:
        return None
    try:  # only the property list is walked: headers that do not decode are not this listing's concern
        octets = split_props(raw)[1].get(TIMESTAMP_BIT)
    except FrameError:
        return None
    return int.from_bytes(octets, "big") if octets else None


def unacked_bytes(request: web.Request) -> dict[Queue, int]:
    """Body bytes delivered and not yet acknowledged, per queue (one pass over the channels)."""
    counts: dict[Queue, int] = {}
    for conn in broker_of(request).connections:
        conn.count_unacked_bytes(counts)
    return counts


def consumer_details(queue: Queue, node: str) -> list[dict[str, Any]]:
    """The queue's consumers as ``/api/consumers`` shows them (RabbitMQ's ``consumer_details`` of one
    queue; its lists of queues leave them out)."""
    return [consumer_json(c.info(), node) for c in queue.consumers if isinstance(c, DescribedConsumer)]


def memory_fields(queue: Queue, unacked_bytes: int) -> dict[str, Any]:
    """What of a classic queue is in memory and what is paged to disk (RabbitMQ's ``messages_ram``,
    ``messages_paged_out``, ...: paged out counts transient messages, as RabbitMQ's, whose persistent
    ones are on disk anyway)."""
    paged = queue.paged
    transient, transient_bytes = queue.paged_transient
    if not queue.durable:  # RabbitMQ 3.10.8 counts the messages by their flag, the bytes of them all
        transient_bytes = queue.paged_bytes
    ready_ram = queue.message_count - paged
    return {
        "messages_ram": ready_ram + queue.unacked,
        "messages_ready_ram": ready_ram,
        "messages_unacknowledged_ram": queue.unacked,
        "message_bytes_ram": queue.ready_bytes - queue.paged_bytes + unacked_bytes,
        "messages_paged_out": transient,
        "message_bytes_paged_out": transient_bytes,
    }


def queue_json(queue: Queue, node: str, unacked: int, rates: tuple[float, ...]) -> dict[str, Any]:
    """One queue with RabbitMQ's field names; counts are read live (RabbitMQ samples them), ``unacked``
    is its unacknowledged body bytes and ``rates`` the sampler's (``QUEUE_STATS`` then ``TOTALS``)."""
    consumers = queue.consumers
    counts = queue_counts(queue)
    n = len(QUEUE_STATS)
    body: dict[str, Any] = {
        "name": queue.name,
        "vhost": queue.vhost,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": queue.exclusive,
        "arguments": json_value(queue.args.raw or {}),
        "type": queue.args.queue_type,
        "node": node,
        "state": "running",
        **policy_fields(queue.policy_definition, queue.policy, queue.operator_policy),
        **with_rates(TOTALS, totals([queue]), rates[n:]),
        "message_bytes": queue.ready_bytes + unacked,
        "message_bytes_ready": queue.ready_bytes,
        "message_bytes_unacknowledged": unacked,
        "consumers": len(consumers),
    }
    exclusive_tag = next((getattr(c, "tag", None) for c in consumers if getattr(c, "exclusive", False)), None)
    active = queue.selection.active  # the single active consumer (classic: ..._tag, quorum: ..._ctag)
    active_tag = active.tag if active is not None else None
    if queue.kind.name == "quorum":  # one node: the leader, the only member, online
        body.update(
            leader=node,
            members=[node],
            online=[node],
            open_files={node: 0},
            messages_dlx=0,  # dead letters are moved at once (no at-least-once backlog)
            message_bytes_dlx=0,
            single_active_consumer_ctag=active_tag,
        )
    else:
        body["head_message_timestamp"] = head_timestamp(queue)
        body["exclusive_consumer_tag"] = exclusive_tag
        body.update(memory_fields(queue, unacked))
        body["single_active_consumer_tag"] = active_tag
    if any(counts):  # RabbitMQ shows message_stats once the queue saw traffic
        body["message_stats"] = with_rates(QUEUE_STATS, counts, rates[:n])
    if queue.dedup is not None:  # ottermq extensions
        body["deduplication"] = dedup_json(queue.dedup)
    if queue.args.delayed_retry_type != "disabled":  # RabbitMQ 4.3's delayed retry, here on classic queues
        body["messages_delayed"] = queue.delayed_count
    return body


def _queues_json(request: web.Request, queues: list[Queue]) -> list[dict[str, Any]]:
    node = node_name()
    sampler = sampler_of(request)
    unacked = unacked_bytes(request)
    width = len(QUEUE_STATS) + len(TOTALS)
    return [queue_json(q, node, unacked.get(q, 0), sampler.rates(queue_key(q), width)) for q in queues]


async def list_queues(request: web.Request) -> web.Response:
    queues = [q for vhost in selected_vhosts(request) for q in vhost.queues.values()]
    return web.json_response(sort_by_name(_queues_json(request, queues)))


async def get_queue(request: web.Request) -> web.Response:
    queue = vhost_or_404(request).queues.get(request.match_info["name"])
    if queue is None or queue.deleted:
        raise NotFound()
    body = _queues_json(request, [queue])[0]
    body["consumer_details"] = consumer_details(queue, node_name())
    return web.json_response(body)


async def put_queue(request: web.Request) -> web.Response:
    vhost = vhost_or_404(request)
    name = request.match_info["name"]
    body = await json_body(request)
    durable = flag(body, "durable", True)
    auto_delete = flag(body, "auto_delete", False)
    if not name:
        raise bad_request("queue name cannot be empty")
    with amqp_errors():
        args = arguments_of(body.get("arguments"))
        declared = broker_of(request).ops.declare_queue(
            user_of(request), vhost, name, durable=durable, auto_delete=auto_delete, arguments=args
        )
    return web.Response(status=201 if declared.created else 204)


def _query_flag(request: web.Request, key: str) -> bool:
    return request.query.get(key, "false").lower() == "true"


def _existing(request: web.Request) -> tuple[VHost, str]:
    vhost = vhost_or_404(request)
    name = request.match_info["name"]
    queue = vhost.queues.get(name)
    if queue is None or queue.deleted:
        raise NotFound()
    return vhost, name


async def delete_queue(request: web.Request) -> web.Response:
    vhost, name = _existing(request)
    with amqp_errors():  # another connection's exclusive queue: 400 locked
        broker_of(request).ops.delete_queue(
            user_of(request),
            vhost,
            name,
            if_unused=_query_flag(request, "if-unused"),
            if_empty=_query_flag(request, "if-empty"),
            missing_ok=False,
        )
    return web.Response(status=204)


async def purge_queue(request: web.Request) -> web.Response:
    vhost, name = _existing(request)
    with amqp_errors():
        broker_of(request).ops.purge_queue(user_of(request), vhost, name)
    return web.Response(status=204)


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/queues")(list_queues)
    routes.get(f"{prefix}/queues/{{vhost}}")(list_queues)
    routes.get(f"{prefix}/queues/{{vhost}}/{{name}}")(get_queue)
    routes.put(f"{prefix}/queues/{{vhost}}/{{name}}")(put_queue)
    routes.delete(f"{prefix}/queues/{{vhost}}/{{name}}")(delete_queue)
    routes.delete(f"{prefix}/queues/{{vhost}}/{{name}}/contents")(purge_queue)
