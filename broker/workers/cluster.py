"""A worker process as its node's cluster (``broker/node/cluster.py``).

Each worker joins its node to a ``WorkerCluster`` at start-up: which vhosts it owns (worker 0 asks
the ownership file, the others the list worker 0 sent), whom to tell when a user with a
``max-channels`` limit opens or closes a channel here, and what the limits count in the other
workers: in worker 0 the connections it handed over (``handed``, by offer number, until their worker
says they closed), in every worker the channels the others have open per limited user (``channels``,
as worker 0 last sent them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..node.info import WorkerPool


class WorkerCluster:
    """One worker's place among the workers (see the module docstring).

    Args:
        index: this worker's number (0: the first, which accepts every connection).
        owns: whether this worker serves a vhost.
        channels_changed: called when a limited user's channels here changed.
        pool: the other workers, in worker 0 (its management API reaches them).
    """

    def __init__(
        self,
        index: int,
        owns: Callable[[str], bool],
        channels_changed: Callable[[], None],
        pool: WorkerPool | None = None,
    ) -> None:
        self.index = index
        self.pool = pool
        self._owns = owns
        self._channels_changed = channels_changed
        self.handed: dict[int, tuple[str, str]] = {}  # worker 0: offer number -> (vhost, user)
        self.channels: dict[str, int] = {}  # user -> channels open in the other workers

    def owns(self, vhost: str) -> bool:
        return self._owns(vhost)

    def connections_elsewhere(self) -> Iterable[tuple[str, str]]:
        return self.handed.values()

    def channels_elsewhere(self, username: str) -> int:
        return self.channels.get(username, 0)

    def channels_changed(self) -> None:
        self._channels_changed()
