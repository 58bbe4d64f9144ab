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

from .. import node_name
from ..node.info import ChannelInfo, ConnectionInfo, ConsumerInfo
from ..node.tls import distinguished_name
from .common import (
    SEE_ALL_TAGS,
    NotFound,
    broker_of,
    json_value,
    not_authorised,
    sampler_of,
    user_of,
    vhost_or_404,
)
from .rates import MESSAGE_FIELDS, OCTETS, channel_key, connection_key, message_counts, with_rates

CLOSE_REASON = "Closed via management plugin"
NOT_YOURS = "User not authorised to access object"


def tls_json(conn: ConnectionInfo) -> dict[str, Any]:
    """RabbitMQ's TLS fields of a connection: ``ssl`` and, over TLS, the protocol, cipher and the
    client certificate's subject, issuer and validity (null without one)."""
    tls = conn.tls
    if tls is None:
        return {"ssl": False}
    cert = tls.peer_cert or {}
    issuer = distinguished_name({"subject": cert.get("issuer", ())}) if cert else None
    return {
        "ssl": True,
        "ssl_protocol": {"TLSv1.2": "tlsv1.2", "TLSv1.3": "tlsv1.3"}.get(tls.version, ""),
        "ssl_cipher": tls.cipher,
        "peer_cert_subject": distinguished_name(cert) if cert else None,
        "peer_cert_issuer": issuer,
        "peer_cert_validity": f"{cert['notBefore']} - {cert['notAfter']}" if cert else None,
    }


def connection_json(conn: ConnectionInfo, node: str, rates: tuple[float, ...]) -> dict[str, Any]:
    """One connection with RabbitMQ's field names; ``rates`` are its ``OCTETS``' (the sampler's)."""
    return {
        "name": conn.name,
        "node": node,
        "type": "network",
        "state": "blocked" if conn.blocked else "flow" if conn.flow else "running",
        "user": conn.user,
        "vhost": conn.vhost,
        "protocol": "AMQP 0-9-1",
        "host": conn.host,
        "port": conn.port,
        "peer_host": conn.peer_host,
        "peer_port": conn.peer_port,
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


def channel_json(channel: ChannelInfo, node: str, rates: tuple[float, ...]) -> dict[str, Any]:
    """One channel with RabbitMQ's field names and its ``message_stats`` with these ``rates``."""
    ref = channel.ref
    return {
        "name": ref.name,
        "number": ref.number,
        "node": node,
        "user": ref.user,
        "vhost": channel.vhost,
        "state": "running",
        "connection_details": {
            "name": ref.connection_name,
            "peer_host": ref.peer_host,
            "peer_port": ref.peer_port,
        },
        "consumer_count": len(channel.consumers),
        "messages_unacknowledged": channel.unacked,
        "prefetch_count": channel.prefetch,
        "global_prefetch_count": channel.global_prefetch,
        "confirm": channel.confirm,
        "transactional": channel.transactional,
        "message_stats": with_rates(MESSAGE_FIELDS, message_counts(channel.stats), rates),
    }


def consumer_json(consumer: ConsumerInfo, node: str) -> dict[str, Any]:
    """One consumer with RabbitMQ's field names (``/api/consumers``, a queue's and a channel's
    ``consumer_details``)."""
    ref = consumer.channel
    return {
        "consumer_tag": consumer.tag,
        "queue": {"name": consumer.queue, "vhost": consumer.vhost},
        "channel_details": {
            "name": ref.name,
            "number": ref.number,
            "connection_name": ref.connection_name,
            "peer_host": ref.peer_host,
            "peer_port": ref.peer_port,
            "user": ref.user,
            "node": node,
        },
        "ack_required": consumer.ack_required,
        "exclusive": consumer.exclusive,
        "prefetch_count": consumer.prefetch,
        "arguments": json_value(consumer.arguments),
        "active": consumer.active,
        "activity_status": consumer.activity_status,
    }


def _sees_all(request: web.Request) -> bool:
    return not SEE_ALL_TAGS.isdisjoint(user_of(request).tags)


def open_connections(request: web.Request, vhost: str | None = None) -> list[ConnectionInfo]:
    """Snapshots of the open connections (in ``vhost`` if given), by name; rule 1 is the caller's."""
    conns = broker_of(request).connections
    found = [c.info() for c in conns if c.vhost_name is not None and (vhost is None or c.vhost_name == vhost)]
    return sorted(found, key=lambda c: c.name)


def _connections(request: web.Request) -> list[ConnectionInfo]:
    """The listed connections (rules 1 and 3)."""
    vhost = vhost_or_404(request).name if "vhost" in request.match_info else None
    conns = open_connections(request, vhost)
    if _sees_all(request):
        return conns
    name = user_of(request).name
    return [c for c in conns if c.user == name]


def _channels(conns: list[ConnectionInfo]) -> list[ChannelInfo]:
    return [ch for conn in conns for ch in conn.channels]


def _channels_json(request: web.Request, channels: list[ChannelInfo]) -> list[dict[str, Any]]:
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
    conns = open_connections(request, vhost)
    if not _sees_all(request):
        conns = [c for c in conns if c.user == user_of(request).name]
    node = node_name()
    return web.json_response([consumer_json(c, node) for conn in conns for c in conn.consumers()])


def _named_connection(request: web.Request, closing: bool = False) -> ConnectionInfo:
    """The connection named by the path, if the user may see it (or, ``closing``, close it): rule 2.

    Raises:
        NotFound: no open connection has that name.
        HTTPUnauthorized: another user's connection (``User not authorised to access object``).
    """
    name = request.match_info["name"]
    for conn in open_connections(request):
        if conn.name == name:
            user = user_of(request)
            allowed = "administrator" in user.tags if closing else _sees_all(request)
            if not allowed and conn.user != user.name:
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
    for conn in open_connections(request):
        for channel in conn.channels:
            if channel.name != name:
                continue
            if not _sees_all(request) and conn.user != user_of(request).name:
                raise not_authorised(NOT_YOURS)
            body = _channels_json(request, [channel])[0]
            node = node_name()
            body["consumer_details"] = [consumer_json(c, node) for c in channel.consumers]
            return web.json_response(body)
    raise NotFound()


async def close_connection(request: web.Request) -> web.Response:
    """Close with 320 and RabbitMQ's text (``X-Reason`` replaces ``Closed via management plugin``)."""
    info = _named_connection(request, closing=True)
    reason = request.headers.get("X-Reason", CLOSE_REASON)
    for conn in list(broker_of(request).connections):
        if id(conn) == info.key:
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
