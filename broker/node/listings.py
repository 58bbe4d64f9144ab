"""What each bound listener of a node reports, for the management API and the logs.

Each listener registers a function returning its ``(protocol, ip, port)`` entries, with RabbitMQ's
protocol names (``amqp``, ``amqp/ssl``, ``http``, ``https``, ``http/prometheus``,
``https/prometheus``); they are read at the time of asking, so a listener bound later (or on an
ephemeral port) shows what it has now.
"""

from __future__ import annotations

from collections.abc import Callable

Listing = Callable[[], list[tuple[str, str, int]]]  # () -> [(protocol, ip, port)]


class Listings:
    """Every listener's report, in registration order: AMQP, HTTP, Prometheus."""

    def __init__(self) -> None:
        self._listings: list[Listing] = []

    def add(self, listing: Listing) -> None:
        self._listings.append(listing)

    def all(self) -> list[tuple[str, str, int]]:
        """Every bound listener: AMQP first, then the management API, then Prometheus."""
        return [entry for listing in self._listings for entry in listing()]

    def amqp(self) -> list[tuple[str, str, int]]:
        return [entry for entry in self.all() if entry[0] in ("amqp", "amqp/ssl")]

    def web(self) -> list[tuple[str, str, int]]:
        return [entry for entry in self.all() if entry[0] in ("http", "https")]

    def prometheus(self) -> list[tuple[str, str, int]]:
        return [entry for entry in self.all() if entry[0].endswith("/prometheus")]

    def web_addresses(self) -> list[tuple[str, int]]:
        """``(ip, port)`` of each management API socket (none when disabled)."""
        return [(ip, port) for _protocol, ip, port in self.web()]
