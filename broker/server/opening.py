"""A connection's opening: from the protocol header to ``connection.open-ok``, and its login again.

Rules (RabbitMQ 3.x's ``rabbit_reader``; what each step decides is in ``handshake.py``, without I/O):
- The 8-byte protocol header picks the dialect (``amqp/legacy.py``): AMQP 0-9-1, or 0-8 whose method
  frames are translated; anything else is answered with our header and the socket is closed.
- Until the connection runs, frames are cut one at a time, because ``tune-ok`` changes the frame
  size limit for the frames after it, even those that arrived in the same read.
- ``start-ok``: the login (a protocol error closes silently; a refused login is answered with 403
  for clients with ``authentication_failure_close`` and dropped for the others); ``tune-ok``: the
  limits; ``connection.open``: the vhost, the limits and the permission, then ``open-ok`` and the
  alarm's ``connection.blocked`` if one is raised.
- ``update-secret`` (a running connection's login again, RabbitMQ 3.8+): accepted for internal
  users, whose credentials cannot expire, unless ``OTTERMQ_UPDATE_SECRET_VERIFY`` wants the password.
- With several workers (in worker 0) a connection whose vhost another worker owns is handed to it at
  ``connection.open`` (``handoff.py``), its bytes recorded until then; a connection taken over
  replays them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Final

from ottermq.amqp import legacy
from ottermq.amqp.errors import NotAllowed
from pamqp import commands as spec

from . import handoff, handshake
from .handoff import HandOff
from .handshake import ClientCapabilities, HandshakeError
from .states import State

if TYPE_CHECKING:
    from .interfaces import OpeningPort

# the connection's logger: a connection's log lines (accepted, logged in, opened, taken over) keep one name
log: Final = logging.getLogger(__name__.rpartition(".")[0] + ".connection")

PROTOCOL_HEADER: Final = legacy.PROTOCOL_0_9_1
AWAIT_HEADER: Final = State.AWAIT_HEADER
STARTING: Final = State.STARTING
TUNING: Final = State.TUNING
OPENING: Final = State.OPENING
RUNNING: Final = State.RUNNING
CLOSING: Final = State.CLOSING


class Opening:
    """The opening of one connection (see the module rules).

    Args:
        conn: the connection.
        takes_over: another worker may take the connection (record what the client sends).
        replay: a connection taken over: the bytes worker 0 had (up to tune-ok; the rest).
    """

    def __init__(self, conn: OpeningPort, takes_over: bool, replay: tuple[bytes, bytes] | None) -> None:
        self.conn = conn
        self.header = b""
        self.pending = b""  # an incomplete handshake frame
        self.mechanisms: tuple[str, ...] = ()
        self.handoff: HandOff | None = HandOff(conn) if takes_over else None
        self.replay = replay

    def made(self, transport: asyncio.Transport) -> None:
        """The socket is there: offer the mechanisms its certificate allows; replay a take-over."""
        conn = self.conn
        self.mechanisms = handshake.mechanisms(conn.endpoints.cert)
        replay, self.replay = self.replay, None
        if replay is None:
            log.info("accepting AMQP connection %s", conn.peer)
            return
        log.info("taking over AMQP connection %s", conn.peer)
        handoff.replay(conn, transport, *replay)

    def received(self, data: bytes) -> bytes:
        """Bytes read before the connection runs; returns those left once it runs (for its frames)."""
        if self.handoff is not None:
            self.handoff.record(data)
        if self.conn.state is AWAIT_HEADER:
            data = self._header(data)
        return self._frames(data)

    def _header(self, data: bytes) -> bytes:
        conn = self.conn
        need = 8 - len(self.header)
        self.header += data[:need]
        rest = data[need:]
        if len(self.header) < 8 and legacy.is_header_prefix(self.header):
            return b""
        dialect = legacy.dialect_of(self.header)
        if dialect is None:
            log.info("connection %s: bad protocol header %r", conn.peer, self.header)
            conn.send(PROTOCOL_HEADER)
            conn.flush()
            conn.abort()
            return b""
        if dialect.framing_0_8:  # served by the 0-9-1 code, its method frames translated (amqp/legacy.py)
            log.info("connection %s: AMQP %s client", conn.peer, dialect.name)
            conn.use_0_8()
        conn.to(STARTING)
        conn.send_method(0, handshake.start(conn.server.server_properties, self.mechanisms, dialect.version))
        return rest

    def _frames(self, data: bytes) -> bytes:
        """Cut handshake frames one at a time (see the module rules)."""
        conn = self.conn
        buf = self.pending + data if self.pending else data
        self.pending = b""
        pos = 0
        while AWAIT_HEADER < conn.state < RUNNING and len(buf) - pos >= 7 and not conn.flow.held:
            size = int.from_bytes(buf[pos + 3 : pos + 7], "big")
            end = pos + size + 8
            if size > conn.reader.frame_max:
                end = len(buf)  # the reader reports the oversized frame from its header
            elif end > len(buf):
                break
            conn.feed(buf[pos:end])
            if self.handoff is not None:
                self.handoff.fed += end - pos
            pos = end
        if AWAIT_HEADER < conn.state < RUNNING:
            self.pending = buf[pos:]
            return b""
        return buf[pos:] if conn.state is RUNNING else b""

    def start_ok(self, method: spec.Connection.StartOk) -> None:
        conn = self.conn
        conn.client_properties = method.client_properties or {}
        conn.capabilities = capabilities = ClientCapabilities.of(conn.client_properties)
        mechanism = method.mechanism
        endpoints = conn.endpoints
        try:
            username, user = handshake.authenticate(
                conn.node, conn.settings, method, self.mechanisms, endpoints.cert, endpoints.host
            )
        except HandshakeError as exc:
            conn.silent_close(exc.reason)
            return
        if user is None:
            log.warning("connection %s: login refused for user %r (%s)", conn.peer, username, mechanism)
            if capabilities.authentication_failure_close:
                # RabbitMQ answers with a Connection.Close straight away (no tune) and closes
                conn.send_method(0, handshake.refused_login(mechanism))
                conn.to(CLOSING)
                conn.flush()
                conn.set_close_timer()
            else:
                conn.abort()
            return
        conn.user = user
        conn.username = user.name
        conn.to(TUNING)
        conn.send_method(0, handshake.tune(conn.settings))

    def tune_ok(self, method: spec.Connection.TuneOk) -> None:
        conn = self.conn
        conn.frame_max, conn.channel_max, conn.heartbeat = handshake.negotiate(conn.settings, method)
        conn.reader.frame_max = conn.frame_max
        conn.to(OPENING)

    def open(self, method: spec.Connection.Open) -> None:
        """``connection.open``.

        Raises:
            NotAllowed: no such vhost, a connection limit is reached, or the user may not use it
                (530, RabbitMQ's texts).
        """
        conn = self.conn
        node = conn.node
        vhost = node.vhosts.get(method.virtual_host)
        if vhost is None:
            raise NotAllowed(f"vhost {method.virtual_host} not found")
        if self.handoff is not None:  # with workers: the one that owns the vhost checks the rest
            node.connections.check_limits(conn, vhost.name)  # every worker's connections count
            if conn.server.hand_off(self.handoff, vhost.name):
                return
            self.handoff = None
        node.connections.check_limits(conn, vhost.name)
        node.services.auth.check_vhost(conn.user, vhost.name)
        conn.vhost = vhost
        log.info(
            "connection %s: user '%s' authenticated and granted access to vhost '%s'",
            conn.label(),
            conn.username,
            vhost.name,
        )
        conn.to(RUNNING)
        conn.send_method(0, spec.Connection.OpenOk())
        reason = node.alarms.reason
        if reason is not None:
            conn.set_blocked(True, reason)
        conn.running()

    def update_secret(self, method: spec.Connection.UpdateSecret) -> None:
        """RabbitMQ 3.8+: a client refreshes its credentials (OAuth 2 tokens) on a live connection.

        Internal users cannot expire, so RabbitMQ accepts any secret for them; with
        ``OTTERMQ_UPDATE_SECRET_VERIFY`` the secret must be the user's current password.

        Raises:
            NotAllowed: the new secret was refused (the user is gone or the password differs).
        """
        conn = self.conn
        if conn.settings.update_secret_verify:
            secret = handshake.new_secret(method)
            if conn.node.services.logins.authenticate(conn.username, secret, conn.endpoints.host) is None:
                log.error("Secret update was refused for user '%s'", conn.username)
                raise NotAllowed("New secret was refused by one of the backends")
        conn.send_method(0, spec.Connection.UpdateSecretOk())
        log.info(
            "connection %s: user '%s' updated secret, reason: %s", conn.peer, conn.username, method.reason
        )
