"""One end of a shovel: an aiormq connection to the URI's broker, over the tap (``tap.py``).

Rules:

1. A local URI (no host) connects over loopback to this node's own AMQP listener (``LocalBroker``):
   with the URI's credentials when it names a user, else as the node's internal principal (a
   secret made at start-up, never stored, not a user: ``broker/node/auth.py``), so the connection
   is handed to the vhost's worker and checked like any client's.
2. A network URI connects to its host and port (5672, or 5671 for ``amqps``) as its user
   (``guest``/``guest`` when it names none, as RabbitMQ's client). Of the mechanisms it allows,
   the first aiormq speaks is used: ``plain`` (``amqplain`` is refused by aiormq: ``plain`` is tried
   in its place), or ``external`` (the client certificate names the user).
3. ``amqps``: a TLS context from the URI's options (``uri.py`` rule 5), built off the event loop:
   ``cacertfile`` (else the system's CAs), ``certfile`` and ``keyfile`` (with ``password``), the peer
   verified only with ``verify=verify_peer`` (RabbitMQ 3.10's default on Erlang 25 does not verify;
   a warning is logged, as RabbitMQ logs one), SNI and the host name checked against
   ``server_name_indication`` (``disable``: neither), else the host.
4. ``heartbeat`` is the URI's (RabbitMQ's client: 10 s); connecting gives up after
   ``connection_timeout`` ms (60,000). The connection is named ``Shovel <name>``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass

import aiormq
from yarl import URL

from .tap import Tap
from .uri import AmqpUri

log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT = 10
DEFAULT_CONNECTION_TIMEOUT_MS = 60_000


class LinkError(Exception):
    """An end could not be reached (the reason, as the status shows it)."""


@dataclass(frozen=True, slots=True)
class LocalBroker:
    """Where this node's AMQP listener is and who the shovel is there (rule 1)."""

    host: str
    port: int
    username: str
    password: str
    tls: ssl.SSLContext | None = None


def tls_context(uri: AmqpUri) -> tuple[ssl.SSLContext, str]:
    """Rule 3's context and the name sent and checked (``""``: no SNI).

    Raises:
        OSError, ssl.SSLError, ValueError: a file that cannot be read or used.
    """
    options = uri.tls_options
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    verify = options.get("verify") == "verify_peer"
    if "cacertfile" in options:
        context.load_verify_locations(cafile=str(options["cacertfile"]))
    elif verify:
        context.load_default_certs()
    if "certfile" in options:
        keyfile = options.get("keyfile")
        password = options.get("password")
        context.load_cert_chain(
            str(options["certfile"]),
            str(keyfile) if keyfile is not None else None,
            password=str(password) if password is not None else None,
        )
    sni = options.get("server_name_indication")
    name = "" if sni == "disable" else str(sni) if sni is not None else str(uri.host)
    context.check_hostname = verify and bool(name)
    context.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    if not verify:
        log.warning(
            "shovel connection to %s: certificate chain verification is not enabled for this TLS"
            " connection (verify=verify_peer enables it)",
            uri.safe,
        )
    return context, name


def _mechanism(uri: AmqpUri) -> str:
    """Rule 2's mechanism.

    Raises:
        LinkError: none the client speaks.
    """
    for mechanism in uri.mechanisms:
        if mechanism in ("plain", "amqplain"):
            return "plain"
        if mechanism == "external":
            return "external"
    raise LinkError(f"no supported authentication mechanism among {', '.join(uri.mechanisms)}")


async def connect(uri: AmqpUri, name: str, local: LocalBroker | None) -> tuple[aiormq.Connection, Tap]:
    """Open the connection ``uri`` names (see the module rules).

    Raises:
        LinkError: the local broker is not serving, or no supported mechanism.
        Exception: what connecting raised (refused, unreachable, login refused, TLS...).
    """
    mechanism = "plain"
    if uri.direct:
        if local is None:
            raise LinkError("the local broker is not accepting connections")
        host, port = local.host, local.port
        user = uri.username if uri.username is not None else local.username
        password = uri.password if uri.username is not None else local.password
        tap = Tap(local.tls, "" if local.tls is not None else None)
    else:
        host, port = str(uri.host), uri.port or (5671 if uri.tls else 5672)
        user = uri.username if uri.username is not None else "guest"
        password = uri.password if uri.password is not None else "guest"
        mechanism = _mechanism(uri)
        if uri.tls:
            context, server_name = await asyncio.to_thread(tls_context, uri)
            tap = Tap(context, server_name)
        else:
            tap = Tap()
    heartbeat = uri.heartbeat if uri.heartbeat is not None else DEFAULT_HEARTBEAT
    url = URL.build(
        scheme="amqp",
        host=host,
        port=port,
        user=user,
        password=password or "",
        query={"heartbeat": str(max(0, heartbeat)), "auth": mechanism},
    )
    connection = aiormq.Connection(
        url, transport_factory=tap, client_properties={"connection_name": f"Shovel {name}"}
    )
    connection.vhost = uri.vhost
    timeout = (uri.connection_timeout or DEFAULT_CONNECTION_TIMEOUT_MS) / 1000
    try:
        await asyncio.wait_for(connection.connect(), max(timeout, 0.001))
    except BaseException:
        await close(connection)
        raise
    return connection, tap


async def close(connection: aiormq.Connection) -> None:
    """Close a connection, whatever state it is in (bounded: a broker that does not answer is left)."""
    try:
        await asyncio.wait_for(connection.close(), 10)
    except Exception as exc:  # closing a broken connection: nothing more to do
        log.debug("closing a shovel connection: %r", exc)
