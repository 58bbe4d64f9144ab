"""Message counters: plain integers the hot path increments.

Rules:

1. The publish, delivery and ack paths only do ``stats.<name> += 1`` on a slotted object; nothing
   here allocates, locks or schedules.
2. Each channel counts into its own :class:`MessageStats`. When it shuts down,
   ``ConnectionRegistry.retire`` adds its counts to the node's and its vhost's retired totals and the
   channel's counters are reset to zero in place, so nothing is counted twice. Totals (node-wide for
   Prometheus and ``/api/overview``, per vhost for ``/api/vhosts``) are the retired counts plus the
   live channels', summed when read.
3. Names follow RabbitMQ's ``rabbit_global_counters`` (``rabbitmq_global_messages_<name>_total``);
   :data:`MESSAGE_STATS` maps them to the management API's ``message_stats`` fields.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["MESSAGE_STATS", "Churn", "MessageStats"]


class Churn:
    """Connections and channels opened and closed since start-up (RabbitMQ's ``churn_rates`` and
    ``rabbitmq_{connections,channels}_{opened,closed}_total``); queue churn is counted per vhost."""

    __slots__ = ("connections_opened", "connections_closed", "channels_opened", "channels_closed")

    def __init__(self) -> None:
        self.connections_opened = 0
        self.connections_closed = 0
        self.channels_opened = 0
        self.channels_closed = 0


class MessageStats:
    """Message counters of one channel, or a sum of them.

    ``received``: publishes accepted from clients (``basic.publish``; dead letters not counted);
    ``received_confirm``: those on a channel in confirm mode;
    ``routed``: received and routed to at least one queue;
    ``unroutable_dropped`` / ``unroutable_returned``: received, no queue, without / with ``mandatory``;
    ``confirmed``: ``basic.ack`` confirms sent to publishers;
    ``delivered_consume_auto_ack`` / ``delivered_consume_manual_ack`` / ``delivered_get_auto_ack`` /
    ``delivered_get_manual_ack``: deliveries by kind (``delivered`` is their sum);
    ``get_empty``: ``basic.get`` answered with ``get-empty``;
    ``redelivered``: deliveries with the redelivered flag; ``acknowledged``: messages acked by clients.
    """

    __slots__ = (
        "received",
        "received_confirm",
        "routed",
        "unroutable_dropped",
        "unroutable_returned",
        "confirmed",
        "delivered_consume_auto_ack",
        "delivered_consume_manual_ack",
        "delivered_get_auto_ack",
        "delivered_get_manual_ack",
        "get_empty",
        "redelivered",
        "acknowledged",
    )

    def __init__(self) -> None:
        self.received = 0
        self.received_confirm = 0
        self.routed = 0
        self.unroutable_dropped = 0
        self.unroutable_returned = 0
        self.confirmed = 0
        self.delivered_consume_auto_ack = 0
        self.delivered_consume_manual_ack = 0
        self.delivered_get_auto_ack = 0
        self.delivered_get_manual_ack = 0
        self.get_empty = 0
        self.redelivered = 0
        self.acknowledged = 0

    def add(self, other: MessageStats) -> None:
        """Add ``other``'s counts to these."""
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @classmethod
    def total(cls, parts: Iterable[MessageStats]) -> MessageStats:
        """A new object holding the sum of ``parts``."""
        result = cls()
        for part in parts:
            result.add(part)
        return result

    @property
    def delivered(self) -> int:
        """Every delivery: consumed and fetched, auto and manual ack."""
        return (
            self.delivered_consume_auto_ack
            + self.delivered_consume_manual_ack
            + self.delivered_get_auto_ack
            + self.delivered_get_manual_ack
        )


# The management API's ``message_stats`` field -> the MessageStats attribute it shows, in RabbitMQ's
# order for channels, vhosts and the overview.
MESSAGE_STATS: tuple[tuple[str, str], ...] = (
    ("publish", "received"),
    ("confirm", "confirmed"),
    ("return_unroutable", "unroutable_returned"),
    ("drop_unroutable", "unroutable_dropped"),
    ("deliver", "delivered_consume_manual_ack"),
    ("deliver_no_ack", "delivered_consume_auto_ack"),
    ("get", "delivered_get_manual_ack"),
    ("get_no_ack", "delivered_get_auto_ack"),
    ("get_empty", "get_empty"),
    ("deliver_get", "delivered"),
    ("redeliver", "redelivered"),
    ("ack", "acknowledged"),
)
