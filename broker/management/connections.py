"""``GET /api/connections``, ``/api/channels``, ``/api/consumers`` (each also per vhost), one
connection (``GET``, ``DELETE`` to close it), its channels, and one channel.

Only open connections (past ``connection.open``) are listed, as RabbitMQ's management does.
Connection names follow RabbitMQ: ``"<peer host>:<peer port> -> <host>:<port>"``; a channel is
``"<connection name> (<number>)"``.

Who sees what (RabbitMQ 3.10's ``filter_user`` and ``is_authorized_user``):

1. administrator and monitoring users see every connection, channel and consumer; anyone else only
   those of its own connections (lists leave the others out).
2. One named connection, its channels or one channel of another user's connection: 401 ``User not
   authorised to access object``, unless administrator or monitoring. Closing one (``DELETE``)
   needs the administrator tag or the user's own connection (monitoring is not enough).
3. A per-vhost list of connections or channels needs access to the vhost (``vhost_or_404``: 401
   ``User not authorised to access virtual host`` without permissions there, monitoring included);
   ``/api/consumers/{vhost}`` only needs the vhost to exist (RabbitMQ filters, it does not refuse).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..node.tls import distinguished_name
from ..server.channel import Channel
from ..server.connection import AMQPConnection
from .common import (
    SEE_ALL_TAGS,
    NotFound,
    broker_of,
    json_value,
    node_name,
    not_authorised,
    sampler_of,
    user_of,
    vhost_or_404,
)
from .rates import MESSAGE_FIELDS, OCTETS, channel_key, connection_key, message_counts, with_rates

CLOSE_REASON = "Closed via management plugin"
NOT_YOURS = "User not authorised to access object"


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
    transport = conn.transport
    ssl_object = transport.get_extra_info("ssl_object") if conn.tls and transport is not None else None
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
    """One consumer with RabbitMQ's field names (``/api/consumers``, a queue's and a channel's
    ``consumer_details``)."""
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
        # basic.consume's arguments, once the channel keeps them on the consumer (its slot)
        "arguments": json_value(getattr(consumer, "arguments", None) or {}),
        "active": True,
        "activity_status": "up",
    }


def _sees_all(request: web.Request) -> bool:
    return not SEE_ALL_TAGS.isdisjoint(user_of(request).tags)


def _open_connections(request: web.Request, vhost: str | None = None) -> list[AMQPConnection]:
    """Open connections (in ``vhost`` if given), by name; rule 1 is the caller's."""
    conns = broker_of(request).connections
    found = [c for c in conns if c.vhost is not None and (vhost is None or c.vhost.name == vhost)]
    return sorted(found, key=connection_name)


def _connections(request: web.Request) -> list[AMQPConnection]:
    """The listed connections (rules 1 and 3)."""
    vhost = vhost_or_404(request).name if "vhost" in request.match_info else None
    conns = _open_connections(request, vhost)
    if _sees_all(request):
        return conns
    name = user_of(request).name
    return [c for c in conns if c.username == name]


def _channels(conns: list[AMQPConnection]) -> list[Channel]:
    return [ch for conn in conns for _, ch in sorted(conn.channels.items())]


def _channels_json(request: web.Request, channels: list[Channel]) -> list[dict[str, Any]]:
    node = node_name()
    sampler = sampler_of(request)
    n = len(MESSAGE_FIELDS)
    return [channel_json(ch, node, sampler.rates(channel_key(ch), n)) for ch in channels]


async def list_connections(request: web.Request) -> web.Response:
    node = node_name()
    rates = sampler_of(request).rates
    conns = _connections(request)
    return web.json_response([connection_json(c, node, rates(connection_key(c), len(OCTETS))) for c in conns])


async def list_channels(request: web.Request) -> web.Response:
    return web.json_response(_channels_json(request, _channels(_connections(request))))


async def list_consumers(request: web.Request) -> web.Response:
    """Every consumer (per vhost: that vhost must exist), the user's own unless rule 1 lets it see all."""
    vhost = request.match_info.get("vhost")
    if vhost is not None and vhost not in broker_of(request).vhosts:
        raise NotFound()
    conns = _open_connections(request, vhost)
    if not _sees_all(request):
        conns = [c for c in conns if c.username == user_of(request).name]
    node = node_name()
    return web.json_response(
        [consumer_json(ch, tag, node) for ch in _channels(conns) for tag in sorted(ch.consumers)]
    )


def _named_connection(request: web.Request, closing: bool = False) -> AMQPConnection:
    """The connection named by the path, if the user may see it (or, ``closing``, close it): rule 2.

    Raises:
        NotFound: no open connection has that name.
        HTTPUnauthorized: another user's connection (``User not authorised to access object``).
    """
    name = request.match_info["name"]
    for conn in _open_connections(request):
        if connection_name(conn) == name:
            user = user_of(request)
            allowed = "administrator" in user.tags if closing else _sees_all(request)
            if not allowed and conn.username != user.name:
                raise not_authorised(NOT_YOURS)
            return conn
    raise NotFound()


async def get_connection(request: web.Request) -> web.Response:
    conn = _named_connection(request)
    rates = sampler_of(request).rates(connection_key(conn), len(OCTETS))
    return web.json_response(connection_json(conn, node_name(), rates))


async def connection_channels(request: web.Request) -> web.Response:
    """``GET /api/connections/{name}/channels``: that connection's channels, as ``/api/channels``."""
    return web.json_response(_channels_json(request, _channels([_named_connection(request)])))


async def get_channel(request: web.Request) -> web.Response:
    """``GET /api/channels/{name}``: one channel, with its ``consumer_details`` (rule 2)."""
    name = request.match_info["name"]
    for conn in _open_connections(request):
        for channel in conn.channels.values():
            if f"{connection_name(conn)} ({channel.number})" != name:
                continue
            if not _sees_all(request) and conn.username != user_of(request).name:
                raise not_authorised(NOT_YOURS)
            body = _channels_json(request, [channel])[0]
            node = node_name()
            tags = sorted(channel.consumers)
            body["consumer_details"] = [consumer_json(channel, tag, node) for tag in tags]
            return web.json_response(body)
    raise NotFound()


async def close_connection(request: web.Request) -> web.Response:
    """Close with 320 and RabbitMQ's text (``X-Reason`` replaces ``Closed via management plugin``)."""
    conn = _named_connection(request, closing=True)
    reason = request.headers.get("X-Reason", CLOSE_REASON)
    conn.force_close(reason, reason)
    return web.Response(status=204)


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/connections/{{name}}")(get_connection)
    routes.delete(f"{prefix}/connections/{{name}}")(close_connection)
    routes.get(f"{prefix}/connections/{{name}}/channels")(connection_channels)
    routes.get(f"{prefix}/connections")(list_connections)
    routes.get(f"{prefix}/vhosts/{{vhost}}/connections")(list_connections)
    routes.get(f"{prefix}/channels")(list_channels)
    routes.get(f"{prefix}/channels/{{name}}")(get_channel)
    routes.get(f"{prefix}/vhosts/{{vhost}}/channels")(list_channels)
    routes.get(f"{prefix}/consumers")(list_consumers)
    routes.get(f"{prefix}/consumers/{{vhost}}")(list_consumers)
