"""AMQP heartbeats on a running connection, as RabbitMQ sends and checks them.

With a negotiated ``heartbeat`` of T seconds the connection ticks every T/2: a heartbeat frame goes
out unless something else was sent since the last tick, and a client from which nothing at all was
read for four ticks (two heartbeat intervals, RabbitMQ's ``missed heartbeats``) is dropped.
"""

from __future__ import annotations


class Heartbeat:
    """One connection's heartbeat count (its timer is the connection's)."""

    def __init__(self) -> None:
        self.reads = 0  # the connection's read count at the last tick
        self.silent = 0  # ticks in a row without a read

    def tick(self, sent: bool, reads: int) -> bool | None:
        """A tick: ``sent`` whether anything was sent since the last one, ``reads`` the connection's
        read count. Returns whether to send a heartbeat frame; None: the client is gone silent."""
        if reads != self.reads:
            self.reads = reads
            self.silent = 0
        else:
            self.silent += 1
            if self.silent >= 4:  # two heartbeat intervals without a byte
                return None
        return not sent
