"""Consumer timeouts: a delivery left unacknowledged too long closes its channel.

Rules (RabbitMQ 3.12's ``consumer_timeout``, its ``x-consumer-timeout`` argument and policy key):

1. The node's ``OTTERMQ_CONSUMER_TIMEOUT`` (default 30 min, 0 = off) applies to every delivery that
   needs an ack; a queue's ``x-consumer-timeout`` or a policy's ``consumer-timeout`` (ms) applies to
   its deliveries; the lowest applies.
2. A timer checks every channel's oldest unacked delivery (``Channel.overdue_ack``) every second
   (RabbitMQ checks once a minute); a delivery's time is known to 1/60 of its timeout. Nothing
   happens per message.
3. An overdue channel is closed with ``406 PRECONDITION_FAILED - delivery acknowledgement on channel
   N timed out. Timeout value used: T ms. This timeout value can be configured, see consumers doc
   guide to learn more`` (class and method 0, as RabbitMQ), a warning is logged, and closing the
   channel requeues its unacked messages (redelivered).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Set
from typing import TYPE_CHECKING

from ottermq.amqp.errors import PreconditionFailed

if TYPE_CHECKING:
    from ..config import Settings
    from .connection import AMQPConnection

log = logging.getLogger(__name__)

INTERVAL = 1.0  # seconds between checks


def timeout_text(number: int, timeout_ms: int) -> str:
    """RabbitMQ's reply text for a channel whose delivery was not acknowledged in time."""
    return (
        f"delivery acknowledgement on channel {number} timed out. Timeout value used: {timeout_ms} ms. "
        "This timeout value can be configured, see consumers doc guide to learn more"
    )


class AckTimeouts:
    """The broker's consumer-timeout checker (see the module rules)."""

    def __init__(
        self, settings: Settings, loop: asyncio.AbstractEventLoop, connections: Set[AMQPConnection]
    ) -> None:
        self.settings = settings
        self.loop = loop
        self.connections = connections
        self._timer: asyncio.TimerHandle | None = None

    @property
    def default_ms(self) -> int | None:
        seconds = self.settings.consumer_timeout
        return int(seconds * 1000) if seconds > 0 else None

    def start(self) -> None:
        self._timer = self.loop.call_later(INTERVAL, self.check)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def check(self) -> None:
        """Close every channel whose oldest unacked delivery is overdue, then re-arm."""
        try:
            now = self.loop.time()
            default = self.default_ms
            for conn in list(self.connections):
                for channel in list(conn.channels.values()):
                    if channel.closing:
                        continue
                    timeout = channel.overdue_ack(now, default)
                    if timeout is None:
                        continue
                    log.warning(
                        "consumer timeout: a delivery on channel %d of %s was not acknowledged within %d ms;"
                        " closing the channel and requeueing its unacknowledged messages",
                        channel.number,
                        conn.peer,
                        timeout,
                    )
                    channel.method_key = 0  # RabbitMQ's close names no method
                    conn.close_channel(channel, PreconditionFailed(timeout_text(channel.number, timeout)))
        except Exception:  # never stop checking over one bad channel
            log.exception("consumer timeout check failed")
        self.start()
