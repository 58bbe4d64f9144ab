"""Login: the SASL mechanisms RabbitMQ offers by default and how their responses are read, and the
``connection.start`` server properties."""

from __future__ import annotations

import platform
from typing import Any

from ottermq.amqp.table import decode_table

MECHANISMS = ("PLAIN", "AMQPLAIN")


def credentials(mechanism: str, response: Any) -> tuple[str | None, str | None]:
    """``(user, password)`` from a start-ok response, or ``(None, None)`` when it is malformed (a
    protocol error for RabbitMQ, not a refused login)."""
    raw = response.encode("utf-8", "surrogateescape") if isinstance(response, str) else bytes(response)
    if mechanism == "PLAIN":
        # RabbitMQ 3.10 reads exactly NUL user NUL password (an authorization identity is refused)
        parts = raw.split(b"\x00")
        if len(parts) != 3 or parts[0]:
            return None, None
        return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
    if mechanism == "AMQPLAIN":
        try:
            table, _ = decode_table(len(raw).to_bytes(4, "big") + raw)
        except Exception:
            return None, None
        login, password = table.get("LOGIN"), table.get("PASSWORD")
        if isinstance(login, bytes):
            login = login.decode("utf-8", "replace")
        if isinstance(password, bytes):
            password = password.decode("utf-8", "replace")
        if not isinstance(login, str) or not isinstance(password, str):
            return None, None
        return login, password
    return None, None


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
