"""Which worker owns which virtual host.

Rules:
- Every vhost lives in exactly one worker: its exchanges, queues, messages, timers and store. A
  vhost is given to a worker the first time anyone asks who owns it (a connection opening it, a
  request to the management API about it, the metadata sent to the workers): the worker with the
  fewest vhosts, the lowest number among equals. Worker 0 is the first process, which also accepts
  every connection and serves the management API.
- The assignment is kept in ``OTTERMQ_DATA_DIR/workers.json`` (with the memory store: for the life
  of the process), written atomically on every change, so a vhost finds its store again after a
  restart. Vhosts holding exchanges or queues but in no assignment (a data directory written by
  one process) belong to worker 0, whose store is that process's.
- A vhost assigned to a worker that no longer exists (``OTTERMQ_WORKERS`` lowered) stops the start:
  its messages are in that worker's store (``StartupError``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

FILE_NAME = "workers.json"


class OwnershipError(ValueError):
    """The assignment cannot be used with this many workers."""


class VhostOwners:
    """The vhost -> worker assignment (see the module rules).

    Args:
        workers: the number of workers (``OTTERMQ_WORKERS``).
        path: the file that keeps it; None keeps it in memory only.
    """

    def __init__(self, workers: int, path: Path | None) -> None:
        self.workers = workers
        self.path = path
        self._owner: dict[str, int] = {}

    def load(self, existing: Iterable[str]) -> None:
        """Read the kept assignment; ``existing`` vhosts (those with exchanges or queues) missing from
        it belong to worker 0.

        Raises:
            OwnershipError: a vhost belongs to a worker beyond ``workers``.
        """
        owner: dict[str, int] = {}
        if self.path is not None and self.path.exists():
            data = json.loads(self.path.read_text())
            owner = {str(k): int(v) for k, v in dict(data.get("vhosts", {})).items()}
        changed = False
        for name in existing:
            if name not in owner:
                owner[name] = 0
                changed = True
        beyond = sorted(name for name, index in owner.items() if index >= self.workers)
        if beyond:
            highest = max(owner[name] for name in beyond)
            raise OwnershipError(
                f"vhost '{beyond[0]}' lives in the store of worker {highest}; "
                f"set OTTERMQ_WORKERS to at least {highest + 1}"
            )
        self._owner = owner
        if changed:
            self._save()

    def owner(self, vhost: str) -> int:
        """The worker that owns ``vhost``, given to the least busy one if it has none yet."""
        index = self._owner.get(vhost)
        if index is None:
            load = [0] * self.workers
            for owned in self._owner.values():
                load[owned] += 1
            index = self._owner[vhost] = min(range(self.workers), key=lambda i: (load[i], i))
            self._save()
        return index

    def owned_by(self, index: int) -> list[str]:
        return sorted(name for name, owner in self._owner.items() if owner == index)

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the vhosts not in ``keep`` (deleted)."""
        keep = set(keep)
        gone = [name for name in self._owner if name not in keep]
        for name in gone:
            del self._owner[name]
        if gone:
            self._save()

    def snapshot(self) -> dict[str, int]:
        return dict(self._owner)

    def _save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"workers": self.workers, "vhosts": self._owner}, indent=1, sort_keys=True))
        os.replace(tmp, self.path)
