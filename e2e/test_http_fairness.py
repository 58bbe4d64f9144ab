"""One client address cannot take the management listener from the others (issue 38).

260 half-open HTTP sockets from 127.0.0.1 (each sent half a request head and waits): RabbitMQ 3.10.8
keeps answering other clients. ottermq's listener caps its connections in total
(``OTTERMQ_WEB_MAX_CONNECTIONS``, 256) and, so that one address cannot hold all of those places, per
client address (``OTTERMQ_WEB_MAX_CONNECTIONS_PER_ADDRESS``, 32): before that cap every other client
got 503 until the sockets' header timeout. The other client here is 127.0.0.2 (loopback too).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import socket
import urllib.parse

import pytest

from .polling import poll_until

HALF_OPEN = 260
HALF_HEAD = b"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthoriz"


def overview_status(broker, source: str) -> int | None:
    """``GET /api/overview`` from the local address ``source``: its status, None if the connection failed."""
    parts = urllib.parse.urlsplit(broker.management_url)
    conn = http.client.HTTPConnection(
        parts.hostname or "", parts.port, timeout=10, source_address=(source, 0)
    )
    auth = base64.b64encode(f"{broker.user}:{broker.password}".encode()).decode()
    try:
        conn.request("GET", "/api/overview", headers={"Authorization": f"Basic {auth}"})
        response = conn.getresponse()
        response.read()
        return response.status
    except OSError:
        return None
    finally:
        conn.close()


def test_half_open_sockets_from_one_address_do_not_starve_another(broker):
    parts = urllib.parse.urlsplit(broker.management_url)
    if parts.hostname != "127.0.0.1":
        pytest.skip("needs the management API on 127.0.0.1, to be reached from 127.0.0.2 as well")
    held: list[socket.socket] = []
    try:
        for _ in range(HALF_OPEN):
            sock = socket.create_connection((parts.hostname, parts.port or 80), timeout=10)
            with contextlib.suppress(OSError):  # a refused one may already be closed
                sock.sendall(HALF_HEAD)
            held.append(sock)
        assert overview_status(broker, "127.0.0.2") == 200
        assert overview_status(broker, "127.0.0.2") == 200
    finally:
        for sock in held:
            sock.close()
    poll_until(lambda: overview_status(broker, "127.0.0.1") == 200, timeout=15, interval=0.1)
