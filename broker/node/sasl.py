"""Login: the SASL mechanisms RabbitMQ offers by default and how their responses are read, and the
``connection.start`` server properties."""

from __future__ import annotations

import platform
from typing import Any

from ottermq.amqp.table import decode_table

MECHANISMS = ("PLAIN", "AMQPLAIN")


def credentials(mechanism: str, response: Any) -> tuple[bytes | None, bytes | None]:
    """``(user, password)`` octets from a start-ok response, exactly as sent (``auth.AuthDB.login``
    reads them), or ``(None, None)`` when it is malformed (a protocol error for RabbitMQ, not a
    refused login)."""
    raw = response.encode("utf-8", "surrogateescape") if isinstance(response, str) else bytes(response)
    if mechanism == "PLAIN":
        # RabbitMQ 3.10 reads exactly NUL user NUL password (an authorization identity is refused;
        # so is a NUL inside the password, which PLAIN cannot carry)
        parts = raw.split(b"\x00")
        if len(parts) != 3 or parts[0]:
            return None, None
        return parts[1], parts[2]
    if mechanism == "AMQPLAIN":
        try:
            table, _ = decode_table(len(raw).to_bytes(4, "big") + raw)
        except Exception:
            return None, None
        login, password = _octets(table.get("LOGIN")), _octets(table.get("PASSWORD"))
        if login is None or password is None:
            return None, None
        return login, password
    return None, None


def _octets(value: object) -> bytes | None:
    """An AMQPLAIN field's octets: a long string (``S``, kept as text when it is UTF-8) or byte array
    (``x``), as RabbitMQ accepts both; None for any other type."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes):
        return value
    return None


def server_properties(version: str) -> dict[str, Any]:
    """``connection.start`` server properties, listing only capabilities really implemented."""
    return {
        "product": "OtterMQ",
        "version": version,
        "platform": f"Python {platform.python_version()}",
        "copyright": "OtterMQ contributors",
        "information": "https://github.com/ottermq/ottermq",
        "capabilities": {
            "publisher_confirms": True,
            "exchange_exchange_bindings": True,
            "basic.nack": True,
            "consumer_cancel_notify": True,
            "per_consumer_qos": True,
            "connection.blocked": True,
            "authentication_failure_close": True,
            "direct_reply_to": True,
        },
        "cluster_name": "ottermq",
    }
