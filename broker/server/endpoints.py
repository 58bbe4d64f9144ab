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


def _tuples(value: Any) -> Any:
    """JSON's lists back to the tuples ``getpeercert`` returns (subject, issuer, subjectAltName)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


class RelayedEndpoints(Endpoints):
    """A TLS connection worker 0 terminates and relays to this worker over a socket pair: the
    client's and the listener's addresses and the TLS session, as worker 0 saw them
    (``describe``), not this process's end of the pair."""

    __slots__ = ("_info", "_peer", "_sock")

    def __init__(self, described: dict[str, Any]) -> None:
        super().__init__(None)
        self._peer = (str(described["peer"][0]), int(described["peer"][1]))
        self._sock = (str(described["sock"][0]), int(described["sock"][1]))
        self.label = f"{self._peer[0]}:{self._peer[1]}"
        self.host = self._peer[0]
        tls = described.get("tls")
        self.tls = tls is not None
        self.cert = _tuples(tls["cert"]) if tls is not None and tls.get("cert") else None
        self._info = TLSInfo(tls["version"], tls["cipher"], self.cert) if tls is not None else None

    def address(self, which: str) -> tuple[str, int]:
        return self._peer if which == "peername" else self._sock

    def tls_info(self) -> TLSInfo | None:
        return self._info


def describe(endpoints: Endpoints) -> dict[str, Any]:
    """What ``RelayedEndpoints`` needs, as JSON."""
    info = endpoints.tls_info()
    return {
        "peer": list(endpoints.address("peername")),
        "sock": list(endpoints.address("sockname")),
        "tls": None
        if info is None
        else {"version": info.version, "cipher": info.cipher, "cert": endpoints.cert},
    }
