"""RabbitMQ-compatible management HTTP API, served by aiohttp on the broker's event loop.

Layout: ``app.py`` (app factory, Basic auth and JSON errors, the listener), ``common.py`` (shared
helpers), one module per resource family (``overview``, ``vhosts``, ``queues``, ``exchanges``,
``connections``, ``users``). Handlers only read broker state; nothing here runs on the AMQP hot path.
"""

from __future__ import annotations

from .app import ManagementServer, make_app

__all__ = ["ManagementServer", "make_app"]
