"""What the connection's handshake decides, without I/O (``AMQPConnection`` carries out the steps).

Rules (RabbitMQ 3.x's ``rabbit_reader``):
- ``connection.start`` offers PLAIN and AMQPLAIN (``node.sasl.MECHANISMS``), and EXTERNAL when the
  client sent a verified certificate.
- ``start-ok``: the client's ``capabilities`` and product (``ClientCapabilities``). An unknown
  mechanism or a response that does not parse is a protocol error (``HandshakeError``: the
  connection closes silently), not a refused login. EXTERNAL takes the user name from the
  certificate (``OTTERMQ_SSL_CERT_LOGIN_FROM``), with no password; PLAIN and AMQPLAIN hand the octets
  sent to the node's one login check (``auth.AuthDB.login``). A refused login is answered with
  ``refused_login`` (403) for clients with ``authentication_failure_close``; others are dropped.
- ``tune-ok`` (``negotiate``): ``frame_max`` within [``FRAME_MIN_SIZE``, ours] (0 is refused),
  ``channel_max`` within ours (0 refused when we have a limit); otherwise 530 ``NOT_ALLOWED``.
- ``update-secret`` (``new_secret``): internal users cannot expire, so any secret is accepted unless
  ``OTTERMQ_UPDATE_SECRET_VERIFY``; then it must be the user's password.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ottermq.amqp.errors import NotAllowed
from pamqp import commands as spec

from ..node.sasl import MECHANISMS, credentials
from ..node.tls import peer_identity

if TYPE_CHECKING:
    from ottermq.persistence.store import UserRecord

    from ..config import Settings
    from ..node.node import Node

FRAME_MIN_SIZE = 4096


class HandshakeError(Exception):
    """The client broke the handshake's protocol: RabbitMQ closes without a word."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ClientCapabilities:
    """What a client's ``start-ok`` properties say it understands."""

    consumer_cancel_notify: bool = False
    authentication_failure_close: bool = False
    connection_blocked: bool = False
    # kombu (Celery's transport, on py-amqp) picks the meaning of basic.qos "global" from the
    # server's product: for anything but RabbitMQ it assumes the AMQP spec, where global=false
    # limits the whole channel. Give py-amqp clients that meaning; everyone else gets
    # RabbitMQ's (global=false: per new consumer).
    spec_qos: bool = False

    @classmethod
    def of(cls, client_properties: dict[str, Any]) -> ClientCapabilities:
        capabilities = client_properties.get("capabilities") or {}
        if not isinstance(capabilities, dict):
            capabilities = {}
        return cls(
            consumer_cancel_notify=bool(capabilities.get("consumer_cancel_notify")),
            authentication_failure_close=bool(capabilities.get("authentication_failure_close")),
            connection_blocked=bool(capabilities.get("connection.blocked")),
            spec_qos=client_properties.get("product") == "py-amqp",
        )


def mechanisms(peer_cert: dict[str, Any] | None) -> tuple[str, ...]:
    """The SASL mechanisms offered: EXTERNAL too when the client's certificate was verified."""
    return (*MECHANISMS, "EXTERNAL") if peer_cert else MECHANISMS


def start(
    server_properties: dict[str, Any], offered: tuple[str, ...], version: tuple[int, int] = (0, 9)
) -> spec.Connection.Start:
    """``connection.start`` for a client whose header asked for ``version`` (8-0 for AMQP 0-8)."""
    return spec.Connection.Start(
        version_major=version[0],
        version_minor=version[1],
        server_properties=server_properties,
        mechanisms=" ".join(offered),
        locales="en_US",
    )


def authenticate(
    node: Node,
    settings: Settings,
    method: spec.Connection.StartOk,
    offered: tuple[str, ...],
    peer_cert: dict[str, Any] | None,
    peer_host: str,
) -> tuple[str | None, UserRecord | None]:
    """The login a ``start-ok`` asks for.

    Returns:
        ``(user name as sent, for the log; user)``; the user is None when the login is refused.

    Raises:
        HandshakeError: the mechanism was not offered, or its response does not parse.
    """
    mechanism = method.mechanism
    if mechanism not in offered:
        raise HandshakeError(f"unknown authentication mechanism '{mechanism}'")
    if mechanism == "EXTERNAL":  # the verified client certificate names the user; no password
        login_from, san_type = settings.ssl_cert_login_from, settings.ssl_cert_login_san_type
        username = peer_identity(peer_cert, login_from, san_type)
        return username, node.services.logins.authenticate_external(username, peer_host)
    login, password = credentials(mechanism, method.response)
    if login is None or password is None:  # RabbitMQ: a protocol error, not a refused login
        raise HandshakeError(f"{mechanism} response invalid")
    return login.decode("utf-8", "backslashreplace"), node.services.logins.authenticate(
        login, password, peer_host
    )


def refused_login(mechanism: str) -> spec.Connection.Close:
    """RabbitMQ's answer to a refused login, straight away (no tune), to capable clients."""
    return spec.Connection.Close(
        403,
        f"ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}. "
        "For details see the broker logfile.",
        0,
        0,
    )


def tune(settings: Settings) -> spec.Connection.Tune:
    return spec.Connection.Tune(
        channel_max=settings.channel_max,
        frame_max=settings.frame_max,
        heartbeat=int(settings.heartbeat_interval),
    )


def negotiate(settings: Settings, method: spec.Connection.TuneOk) -> tuple[int, int, int]:
    """``(frame_max, channel_max, heartbeat)`` from the client's ``tune-ok``.

    Raises:
        NotAllowed: a limit outside ours.
    """
    server_frame_max = settings.frame_max
    frame_max = method.frame_max
    if frame_max != 0 and frame_max < FRAME_MIN_SIZE:
        raise NotAllowed(f"frame_max={frame_max} < {FRAME_MIN_SIZE} min size")
    if frame_max == 0 or frame_max > server_frame_max:
        raise NotAllowed(f"frame_max={frame_max} > {server_frame_max} max size")
    server_channel_max = settings.channel_max
    channel_max = method.channel_max
    if server_channel_max and (channel_max == 0 or channel_max > server_channel_max):
        raise NotAllowed(f"channel_max={channel_max} > {server_channel_max} max size")
    return frame_max, channel_max, method.heartbeat


def new_secret(method: spec.Connection.UpdateSecret) -> str:
    """The secret of an ``update-secret`` as text (invalid UTF-8 replaced; not a string: empty)."""
    secret: Any = method.new_secret
    if isinstance(secret, bytes):
        secret = secret.decode("utf-8", "replace")
    return secret if isinstance(secret, str) else ""
