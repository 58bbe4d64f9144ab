"""This process among the broker's processes: the small interface the node asks of its cluster.

A node alone in its process (the default, ``SingleProcess``) owns every vhost and counts only its own
connections and channels. With several workers (``ottermq.broker.workers``) each process joins the
node to its own implementation (``Node.join``): which vhosts this worker serves (the others' are
copies of their metadata, with no traffic), the connections and channels the limits count in the
other workers, and whom to tell when this worker's channels change. Handing a connection to the
worker that owns its vhost happens one layer up, where sockets are (``broker/server/handoff.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from .info import WorkerPool


class Cluster(Protocol):
    """What the node and its readers ask of the processes around it."""

    @property
    def index(self) -> int:
        """This process's number among the workers (0: the first, or the only one)."""
        ...

    @property
    def pool(self) -> WorkerPool | None:
        """The other workers as worker 0's management API reaches them (None elsewhere)."""
        ...

    def owns(self, vhost: str) -> bool:
        """Whether this process serves ``vhost`` (its queues, messages and connections)."""
        ...

    def connections_elsewhere(self) -> Iterable[tuple[str, str]]:
        """``(vhost, user)`` of each connection open in the other workers (connection limits count
        every worker's)."""
        ...

    def channels_elsewhere(self, username: str) -> int:
        """Channels ``username`` has open in the other workers (``max-channels`` counts them all)."""
        ...

    def channels_changed(self) -> None:
        """A user with a ``max-channels`` limit opened or closed a channel here."""
        ...


class SingleProcess:
    """The one process of a broker without workers: it owns everything and has no one to tell."""

    index = 0
    pool: WorkerPool | None = None

    def owns(self, vhost: str) -> bool:
        return True

    def connections_elsewhere(self) -> Iterable[tuple[str, str]]:
        return ()

    def channels_elsewhere(self, username: str) -> int:
        return 0

    def channels_changed(self) -> None:
        pass
