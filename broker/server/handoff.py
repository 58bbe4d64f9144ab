"""With several workers: a connection handed to the worker that owns its vhost, and taken over there.

Rules:
- Worker 0 accepts every AMQP connection. While the client opens it, ``HandOff.record`` keeps what
  it sent (the handshake is answered here: login, tune). At ``connection.open`` of a vhost that
  another worker owns, the server's router (``AMQPServer.router``: the supervisor's ``route``)
  offers that worker the socket with the recorded bytes (``handshake_bytes``), and the connection
  ``hold``s: it reads nothing more until the owner answers.
- The owner has the socket: ``handed_off`` forgets the connection here without a word to the client
  (a duplicate of the descriptor travelled); for TLS, whose session cannot change process, the owner
  gets one end of a socket pair and ``relayed`` gives the client's transport to worker 0's relay.
  The owner died first: ``refuse`` closes the connection with the router's error (530).
- The owner ``replay``s: the bytes up to the client's ``tune-ok`` with its output muted (the client
  had those answers from worker 0), then the rest from its ``connection.open`` on, so the connection
  reaches the same state as if it had been accepted here, and checks the login again (a user changed
  meanwhile is refused).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ottermq.amqp.errors import ConnectionException

    from .endpoints import Endpoints
    from .flow import FlowControl


class Muted(Protocol):
    """A connection's output, muted while a take-over replays what the client had answers to."""

    transport: asyncio.Transport | None


class Handed(Protocol):
    """What a hand-off uses of its connection (``AMQPConnection``)."""

    transport: asyncio.Transport | None
    username: str

    @property
    def endpoints(self) -> Endpoints: ...

    @property
    def flow(self) -> FlowControl: ...

    @property
    def output(self) -> Muted: ...

    @property
    def awaits_open(self) -> bool:
        """Logged in and tuned: ``connection.open`` is next."""

    def data_received(self, data: bytes) -> None: ...

    def close_now(self, exc: ConnectionException) -> None:
        """Send ``Connection.Close`` with ``exc`` now, outside frame handling."""

    def forget(self) -> None:
        """Closed here without a word to the client: the socket is another process's now."""

    def detach(self) -> None:
        """Leave the server's registry (the transport goes to the relay)."""

    def abort(self) -> None:
        """Close the socket at once."""


class HandOff:
    """Worker 0's record of one connection that may go to another worker (see the module rules)."""

    def __init__(self, conn: Handed) -> None:
        self.conn = conn
        self._sent: list[bytes] = []
        self.fed = 0  # bytes of handshake frames handled (after the 8-byte header)

    @property
    def username(self) -> str:
        return self.conn.username

    @property
    def endpoints(self) -> Endpoints:
        return self.conn.endpoints

    @property
    def transport(self) -> asyncio.Transport | None:
        return self.conn.transport

    def record(self, data: bytes) -> None:
        """Bytes the client sent before the connection runs."""
        self._sent.append(data)

    def handshake_bytes(self) -> tuple[bytes, bytes]:
        """What the client sent: up to its tune-ok, and from its connection.open on (the frame being
        handled included, and anything after it)."""
        sent = b"".join(self._sent)
        split = 8 + self.fed
        return sent[:split], sent[split:]

    def hold(self) -> None:
        """Offered to another worker: read nothing more until it takes the socket (``handed_off``)
        or cannot (``refuse``)."""
        self._sent = []
        flow = self.conn.flow
        flow.held = True
        flow.update_reading()

    def refuse(self, exc: ConnectionException) -> None:
        """The worker offered this connection died before taking it: close it with ``exc``."""
        self.conn.flow.held = False  # reading stays paused while it closes
        self.conn.close_now(exc)

    def relayed(self) -> asyncio.Transport:
        """Another worker serves this TLS connection, which worker 0 relays: forget it and return
        its transport (paused), whose protocol the relay replaces."""
        conn = self.conn
        transport = conn.transport
        assert transport is not None
        conn.forget()
        conn.transport = conn.output.transport = None
        conn.detach()
        return transport

    def handed_off(self) -> None:
        """Another worker has the socket now: forget it without a word to the client."""
        conn = self.conn
        conn.forget()
        if conn.transport is not None:
            conn.transport.abort()  # closes our descriptor only: the other worker holds its own


def replay(conn: Handed, transport: asyncio.Transport, before_open: bytes, rest: bytes) -> None:
    """The owner's side: bring ``conn`` (just made on ``transport``) to where worker 0 had it."""
    output = conn.output
    output.transport = None  # the client had these answers from the first worker
    conn.data_received(before_open)
    output.transport = transport
    if conn.awaits_open:
        conn.data_received(rest)
    else:  # the login the first worker accepted is refused here (its user just changed)
        conn.abort()
