"""``GET /api/connections``, ``/api/channels``, ``/api/consumers`` (each also per vhost).

Only open connections (past ``connection.open``) are listed, as RabbitMQ's management does.
Connection names follow RabbitMQ: ``"<peer host>:<peer port> -> <host>:<port>"``; a channel is
``"<connection name> (<number>)"``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..channel import Channel
from ..connection import AMQPConnection
from ..tls import distinguished_name
from .common import (
    SEE_ALL_TAGS,
    NotFound,
    broker_of,
    json_value,
    node_name,
    sampler_of,
    selected_vhosts,
    user_of,
)
from .rates import MESSAGE_FIELDS, OCTETS, channel_key, connection_key, message_counts, with_rates

CLOSE_REASON = "Closed via management plugin"


def _address(conn: AMQPConnection, which: str) -> tuple[str, int]:
    info = conn.transport.get_extra_info(which) if conn.transport is not None else None
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return "?", 0


def connection_name(conn: AMQPConnection) -> str:
    peer_host, peer_port = _address(conn, "peername")
    host, port = _address(conn, "sockname")
    return f"{peer_host}:{peer_port} -> {host}:{port}"


def tls_json(conn: AMQPConnection) -> dict[str, Any]:
    """RabbitMQ's TLS fields of a connection: ``ssl`` and, over TLS, the protocol, cipher and the
    client certificate's subject, issuer and validity (null without one)."""
    ssl_object = conn.transport.get_extra_info("ssl_object") if conn.tls else None
    if ssl_object is None:
        return {"ssl": False}
    cipher = ssl_object.cipher() or ("", "", 0)
    cert = conn.peer_cert or {}
    issuer = distinguished_name({"subject": cert.get("issuer", ())}) if cert else None
    return {
        "ssl": True,
        "ssl_protocol": {"TLSv1.2": "tlsv1.2", "TLSv1.3": "tlsv1.3"}.get(ssl_object.version() or "", ""),
        "ssl_cipher": cipher[0],
        "peer_cert_subject": distinguished_name(cert) if cert else None,
        "peer_cert_issuer": issuer,
        "peer_cert_validity": f"{cert['notBefore']} - {cert['notAfter']}" if cert else None,
    }


def connection_json(conn: AMQPConnection, node: str, rates: tuple[float, ...]) -> dict[str, Any]:
    """One connection with RabbitMQ's field names; ``rates`` are its ``OCTETS``' (the sampler's)."""
    peer_host, peer_port = _address(conn, "peername")
    host, port = _address(conn, "sockname")
    return {
        "name": connection_name(conn),
        "node": node,
        "type": "network",
        "state": "blocked" if conn.alarm_blocked and conn.has_published else "running",
        "user": conn.username,
        "vhost": conn.vhost.name,
        "protocol": "AMQP 0-9-1",
        "host": host,
        "port": port,
        "peer_host": peer_host,
        "peer_port": peer_port,
        **tls_json(conn),
        "channels": len(conn.channels),
        "channel_max": conn.channel_max,
        "frame_max": conn.frame_max,
        "timeout": conn.heartbeat,
        "client_properties": json_value(conn.client_properties),
        **with_rates(OCTETS, (conn.recv_oct, conn.send_oct), rates),
        "recv_cnt": conn.recv_cnt,
        "send_cnt": conn.send_cnt,
        "send_pend": 0,
    }


def channel_json(channel: Channel, node: str, rates: tuple[float, ...]) -> dict[str, Any]:
    """One channel with RabbitMQ's field names and its ``message_stats`` with these ``rates``."""
    conn = channel.conn
    peer_host, peer_port = _address(conn, "peername")
    name = connection_name(conn)
    return {
        "name": f"{name} ({channel.number})",
        "number": channel.number,
        "node": node,
        "user": conn.username,
        "vhost": channel.vhost.name,
        "state": "running",
        "connection_details": {"name": name, "peer_host": peer_host, "peer_port": peer_port},
        "consumer_count": len(channel.consumers),
        "messages_unacknowledged": channel.unacked_count,
        "prefetch_count": channel.prefetch,
        "global_prefetch_count": channel.global_prefetch,
        "confirm": channel.confirm,
        "transactional": channel.tx,
        "message_stats": with_rates(MESSAGE_FIELDS, message_counts(channel.stats), rates),
    }


def consumer_json(channel: Channel, tag: str, node: str) -> dict[str, Any]:
    """One consumer with RabbitMQ's field names."""
    consumer = channel.consumers[tag]
    conn = channel.conn
    peer_host, peer_port = _address(conn, "peername")
    name = connection_name(conn)
    return {
        "consumer_tag": tag,
        "queue": {"name": consumer.queue.name, "vhost": channel.vhost.name},
        "channel_details": {
            "name": f"{name} ({channel.number})",
            "number": channel.number,
            "connection_name": name,
            "peer_host": peer_host,
            "peer_port": peer_port,
            "user": conn.username,
            "node": node,
        },
        "ack_required": not consumer.no_ack,
        "exclusive": consumer.exclusive,
        "prefetch_count": consumer.prefetch,
        "arguments": {},
        "active": True,
        "activity_status": "up",
    }


def _connections(request: web.Request) -> list[AMQPConnection]:
    """Open connections in the selected vhosts; users without administrator/monitoring see their own."""
    names = {vhost.name for vhost in selected_vhosts(request)}
    user = user_of(request)
    sees_all = not SEE_ALL_TAGS.isdisjoint(user.tags)
    conns = [
        c
        for c in broker_of(request).connections
        if c.vhost is not None and c.vhost.name in names and (sees_all or c.username == user.name)
    ]
    return sorted(conns, key=connection_name)


def _channels(request: web.Request) -> list[Channel]:
    return [ch for conn in _connections(request) for _, ch in sorted(conn.channels.items())]


async def list_connections(request: web.Request) -> web.Response:
    node = node_name()
    rates = sampler_of(request).rates
    conns = _connections(request)
    return web.json_response([connection_json(c, node, rates(connection_key(c), len(OCTETS))) for c in conns])


async def list_channels(request: web.Request) -> web.Response:
    node = node_name()
    sampler = sampler_of(request)
    n = len(MESSAGE_FIELDS)
    return web.json_response(
        [channel_json(ch, node, sampler.rates(channel_key(ch), n)) for ch in _channels(request)]
    )


async def list_consumers(request: web.Request) -> web.Response:
    node = node_name()
    return web.json_response(
        [consumer_json(ch, tag, node) for ch in _channels(request) for tag in sorted(ch.consumers)]
    )


async def get_connection(request: web.Request) -> web.Response:
    conn = _named_connection(request)
    rates = sampler_of(request).rates(connection_key(conn), len(OCTETS))
    return web.json_response(connection_json(conn, node_name(), rates))


def _named_connection(request: web.Request) -> AMQPConnection:
    name = request.match_info["name"]
    for conn in _connections(request):
        if connection_name(conn) == name:
            return conn
    raise NotFound()


async def close_connection(request: web.Request) -> web.Response:
    """Close with 320 and RabbitMQ's text (``X-Reason`` replaces ``Closed via management plugin``)."""
    conn = _named_connection(request)
    reason = request.headers.get("X-Reason", CLOSE_REASON)
    conn.force_close(reason, reason)
    return web.Response(status=204)


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/connections/{{name}}")(get_connection)
    routes.delete(f"{prefix}/connections/{{name}}")(close_connection)
    routes.get(f"{prefix}/connections")(list_connections)
    routes.get(f"{prefix}/vhosts/{{vhost}}/connections")(list_connections)
    routes.get(f"{prefix}/channels")(list_channels)
    routes.get(f"{prefix}/vhosts/{{vhost}}/channels")(list_channels)
    routes.get(f"{prefix}/consumers")(list_consumers)
    routes.get(f"{prefix}/consumers/{{vhost}}")(list_consumers)
