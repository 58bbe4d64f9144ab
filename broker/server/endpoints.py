"""The two ends of a connection's socket and its TLS session, as logs and snapshots name them.

Rules:
- ``label`` (the client's ``host:port``, ``?`` when unknown), ``host`` and the client certificate
  (``cert``: sent and verified, with ``OTTERMQ_SSL_VERIFY=verify_peer``) are read once, when the
  connection is made; the addresses snapshots show are asked of the transport each time.
- An address the transport does not know is ``("?", 0)``. RabbitMQ's connection name is
  ``"<peer host>:<peer port> -> <host>:<port>"``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..node.info import TLSInfo


class Endpoints:
    """The socket of one connection (see the module rules).

    Args:
        transport: the connection's transport; None before the connection is made.
    """

    __slots__ = ("_transport", "cert", "host", "label", "tls")

    def __init__(self, transport: asyncio.Transport | None = None) -> None:
        self._transport = transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        self.label = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.host: str = peer[0] if peer else ""
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        self.tls = ssl_object is not None
        self.cert: dict[str, Any] | None = (
            (ssl_object.getpeercert() or None) if ssl_object is not None else None
        )

    def address(self, which: str) -> tuple[str, int]:
        """``(host, port)`` of ``"peername"`` (the client) or ``"sockname"`` (our end)."""
        transport = self._transport
        info = transport.get_extra_info(which) if transport is not None else None
        if isinstance(info, tuple) and len(info) >= 2:
            return str(info[0]), int(info[1])
        return "?", 0

    def names(self) -> tuple[str, str, int, str, int]:
        """RabbitMQ's connection name, then ``host, port, peer host, peer port``."""
        peer_host, peer_port = self.address("peername")
        host, port = self.address("sockname")
        return f"{peer_host}:{peer_port} -> {host}:{port}", host, port, peer_host, peer_port

    def tls_info(self) -> TLSInfo | None:
        """The TLS session (protocol, cipher, client certificate), None on a plain connection."""
        transport = self._transport
        ssl_object = transport.get_extra_info("ssl_object") if self.tls and transport is not None else None
        if ssl_object is None:
            return None
        cipher = ssl_object.cipher() or ("", "", 0)
        return TLSInfo(ssl_object.version() or "", cipher[0], self.cert)
