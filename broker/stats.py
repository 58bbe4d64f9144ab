"""Broker-wide message counters (issue 14): plain integers the hot path increments.

Rules: the publish, delivery and ack paths only do ``stats.<name> += 1`` on a slotted object;
nothing here allocates, locks or schedules. The Prometheus collector
(``broker/management/prometheus.py``) reads them at scrape time. Names follow RabbitMQ's
``rabbit_global_counters`` (``rabbitmq_global_messages_<name>_total``).
"""

from __future__ import annotations

__all__ = ["BrokerStats"]


class BrokerStats:
    """Message counters since the broker started (AMQP 0-9-1, every vhost).

    ``received``: publishes accepted from clients (``basic.publish``; dead letters not counted);
    ``received_confirm``: those on a channel in confirm mode;
    ``routed``: received and routed to at least one queue;
    ``unroutable_dropped`` / ``unroutable_returned``: received, no queue, without / with ``mandatory``;
    ``confirmed``: ``basic.ack`` confirms sent to publishers;
    ``delivered_consume_auto_ack`` / ``delivered_consume_manual_ack`` / ``delivered_get_auto_ack`` /
    ``delivered_get_manual_ack``: deliveries by kind (``delivered`` is their sum);
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
        self.redelivered = 0
        self.acknowledged = 0

    @property
    def delivered(self) -> int:
        """Every delivery: consumed and fetched, auto and manual ack."""
        return (
            self.delivered_consume_auto_ack
            + self.delivered_consume_manual_ack
            + self.delivered_get_auto_ack
            + self.delivered_get_manual_ack
        )
