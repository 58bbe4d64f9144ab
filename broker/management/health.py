"""Health checks: ``GET /api/aliveness-test/{vhost}`` and ``/api/health/checks/...``, as RabbitMQ 3.10's
management plugin answers them.

Rules:

1. A passing check is ``200 {"status":"ok", ...}``; a failing one ``503 {"status":"failed","reason":...}``
   with RabbitMQ's texts and extra fields; a malformed parameter ``400 bad_request``.
2. ``aliveness-test`` declares the non-durable queue ``aliveness-test`` in the vhost, publishes
   ``test_message`` to it through the default exchange and fetches it back, through the same vhost
   operations a channel uses.
3. ``alarms`` and ``local-alarms`` fail while the memory or the disk alarm is on; a single node's
   cluster is itself, so both look at the same alarms.
4. ``port-listener`` and ``protocol-listener`` know the AMQP, management and Prometheus listeners
   (protocols ``amqp``, ``http``, ``http/prometheus``).
5. ottermq is one node without mirrored or quorum queues: the quorum/mirror-sync criticality checks
   answer ``single node cluster`` as RabbitMQ's do on one node. ``certificate-expiration`` reads the
   certificates of the TLS listeners (AMQPS, HTTPS, Prometheus over HTTPS).
6. ottermq's ``active`` check says whether this node is the active one of an active/standby group
   (``OTTERMQ_STORE=postgresql``); a node on its own is always active.
"""

from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .. import node_name
from ..node.tls import amqps_files, read_validity, web_files
from .common import amqp_errors, bad_request, broker_of, check_permission, user_of, vhost_or_404

if TYPE_CHECKING:
    from ..node.view import NodeView

ALIVENESS_QUEUE = "aliveness-test"
ALIVENESS_BODY = b"test_message"
TIME_UNITS = ("days", "weeks", "months", "years")
# spellings RabbitMQ accepts for a protocol, lowercased -> the listener protocol name
PROTOCOL_ALIASES = {
    "amqp": "amqp",
    "amqp091": "amqp",
    "amqp0-9-1": "amqp",
    "amqp0.9.1": "amqp",
    "amqp0_9_1": "amqp",
    "http": "http",
    "management": "http",
    "http/prometheus": "http/prometheus",
    "amqps": "amqp/ssl",
    "amqp/ssl": "amqp/ssl",
    "https": "https",
    "https/prometheus": "https/prometheus",
}
DAYS = {"days": 1, "weeks": 7, "months": 30, "years": 365}  # RabbitMQ's month and year


def ok(**extra: Any) -> web.Response:
    return web.json_response({"status": "ok", **extra})


def failed(reason: str, **extra: Any) -> web.Response:
    return web.json_response({"status": "failed", "reason": reason, **extra}, status=503)


async def aliveness_test(request: web.Request) -> web.Response:
    """Declare, publish to and get from ``aliveness-test`` in the vhost."""
    vhost = vhost_or_404(request)
    check_permission(request, vhost, "configure", "queue", ALIVENESS_QUEUE)
    check_permission(request, vhost, "write", "exchange", "")
    check_permission(request, vhost, "read", "queue", ALIVENESS_QUEUE)
    with amqp_errors():  # e.g. someone declared it durable: 400 with the channel's text
        queue = vhost.declare_queue(ALIVENESS_QUEUE, False, False, False, False, None, None)
    ops = broker_of(request).ops
    with amqp_errors():  # the one publish pipeline (write permission checked above)
        ops.publish(user_of(request), vhost, "", ALIVENESS_QUEUE, b"\x00\x00", ALIVENESS_BODY, permitted=True)
    entry = queue.pop()
    if entry is None or entry.message.body != ALIVENESS_BODY:
        return failed("aliveness-test failed")
    queue.forget([entry])
    return ok()


def _alarms(request: web.Request, reason: str) -> web.Response:
    broker = broker_of(request)
    raised = [
        resource for resource, on in (("memory", broker.alarms.memory), ("disk", broker.alarms.disk)) if on
    ]
    if raised:
        return failed(reason, alarms=[{"node": node_name(), "resource": r} for r in raised])
    return ok()


async def alarms(request: web.Request) -> web.Response:
    return _alarms(request, "There are alarms in effect in the cluster")


async def local_alarms(request: web.Request) -> web.Response:
    return _alarms(request, "There are alarms in effect on the node")


async def virtual_hosts(request: web.Request) -> web.Response:
    """Every vhost of this node is running while the node is (they have no separate supervisors)."""
    return ok()


def listeners(request: web.Request) -> list[tuple[str, int]]:
    """``(protocol, port)`` of every listener, in RabbitMQ's order (AMQP, then HTTP)."""
    broker = broker_of(request)
    # amqp, amqp/ssl, then http, https, then http/prometheus, https/prometheus
    return [(protocol, port) for protocol, _ip, port in broker.listings.all()]


def _unique(values: list[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


async def port_listener(request: web.Request) -> web.Response:
    text = request.match_info["port"]
    try:
        port = int(text)
    except ValueError:
        raise bad_request("Invalid port") from None
    ports = _unique([p for _protocol, p in listeners(request)])
    if port in ports:
        return ok(port=port)
    return failed("No active listener", missing=port, ports=ports)


async def protocol_listener(request: web.Request) -> web.Response:
    asked = request.match_info["protocol"]
    protocol = PROTOCOL_ALIASES.get(asked.lower(), asked)
    protocols = _unique([p for p, _port in listeners(request)])
    if protocol in protocols:
        return ok(protocol=protocol)
    return failed("No active listener", missing=asked, protocols=protocols)


async def active(request: web.Request) -> web.Response:
    """ottermq: whether this node is the active one (a load balancer's check). Standbys bind no port,
    so only an active node answers 200; one that just lost the leadership answers 503 while it stops."""
    broker = broker_of(request)
    lease = broker.lease
    if lease is None:
        return ok(role="active", store=broker.settings.store)
    if lease.role != "active":
        return failed("this node lost the leadership", role=lease.role, epoch=lease.epoch)
    return ok(role="active", store="postgresql", epoch=lease.epoch, failovers=lease.failovers)


async def single_node(request: web.Request) -> web.Response:
    """Quorum and mirror-sync criticality: nothing can be critical on a single node."""
    return ok(reason="single node cluster")


async def certificate_expiration(request: web.Request) -> web.Response:
    try:
        within = int(request.match_info["within"])
    except ValueError:
        raise bad_request("Invalid expiration value.") from None
    if within < 0:
        raise bad_request("Invalid expiration value.")
    if request.match_info["unit"] not in TIME_UNITS:
        raise bad_request("Time unit not recognised. Supported units: days, weeks, months, years.")
    broker = broker_of(request)
    deadline = time.time() + within * DAYS[request.match_info["unit"]] * 86400
    expiring = []
    for protocol, ip, port, files in tls_listeners(broker):
        try:
            not_after = read_validity(files.cert_file).not_after.timestamp()
        except (OSError, ValueError):
            continue
        if not_after <= deadline:
            expiring.append(
                {
                    "node": node_name(),
                    "protocol": protocol,
                    "interface": ip,
                    "port": port,
                    "certfile": str(files.cert_file),
                    "cacertfile": str(files.ca_file or ""),
                    "expiration_date": datetime.datetime.fromtimestamp(not_after, datetime.UTC).strftime(
                        "%Y-%m-%dT%H:%M:%SZ"
                    ),
                }
            )
    if expiring:
        return failed("Certificates expiring", expired=expiring)
    return ok()


def tls_listeners(broker: NodeView) -> list[tuple[str, str, int, Any]]:
    """``(protocol, ip, port, TLSFiles)`` of every TLS listener (AMQPS and HTTPS)."""
    found = [
        (p, ip, port, amqps_files(broker.settings))
        for p, ip, port in broker.listings.amqp()
        if p == "amqp/ssl"
    ]
    web = [(s, ip, port) for s, ip, port in broker.listings.all() if s in ("https", "https/prometheus")]
    return found + [(p, ip, port, web_files(broker.settings)) for p, ip, port in web]


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    checks = f"{prefix}/health/checks"
    routes.get(f"{prefix}/aliveness-test/{{vhost}}")(aliveness_test)
    routes.get(f"{checks}/alarms")(alarms)
    routes.get(f"{checks}/local-alarms")(local_alarms)
    routes.get(f"{checks}/virtual-hosts")(virtual_hosts)
    routes.get(f"{checks}/port-listener/{{port}}")(port_listener)
    routes.get(f"{checks}/protocol-listener/{{protocol}}")(protocol_listener)
    routes.get(f"{checks}/active")(active)
    routes.get(f"{checks}/node-is-quorum-critical")(single_node)
    routes.get(f"{checks}/node-is-mirror-sync-critical")(single_node)
    routes.get(f"{checks}/certificate-expiration/{{within}}/{{unit}}")(certificate_expiration)
