"""The node's dynamic shovels: the ``shovel`` component of the runtime parameters, and the status
registry the management API, Prometheus and the command line read.

Rules:

1. ``validate`` is ``definition.validate``; ``set`` (a parameter set or replaced) stops the
   shovel of that name if it runs and starts it with the new definition; ``clear`` stops it and
   forgets its status (RabbitMQ's ``notify``/``notify_clear``).
2. Nothing connects before ``start``: the node restores its parameters before its AMQP listener
   accepts, so shovels set until then wait, in the ``starting`` state, and ``start`` runs them.
   ``stop`` (shutting down) stops every shovel; their unacked messages go back to their sources.
3. ``restart`` stops a running shovel and starts it again with its definition (RabbitMQ's
   ``DELETE /api/shovels/vhost/{vhost}/{name}/restart``); it is False for a shovel that has no
   status.
4. ``status`` lists every shovel as RabbitMQ's ``rabbit_shovel_status`` reports it, in name order
   per vhost: ``node``, ``timestamp`` (local time, ``rabbit_time``), ``name``, ``vhost``, ``type``
   ``dynamic``, ``state``, ``reason`` when terminated, the ends' fields when running. A shovel that
   cannot connect stays ``starting`` (its timestamp renewed at each attempt), as in RabbitMQ.
5. A shovel whose ``src-delete-after`` is reached leaves its status at once and its parameter is
   cleared through the node (``Ends.finished``), as RabbitMQ does about 0.2 s after the last message.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .definition import spec_of, validate
from .link import LocalBroker
from .worker import Counters, Ends, Shovel

log = logging.getLogger(__name__)

__all__ = ["Entry", "Shovels"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One shovel as ``status`` reports it (rule 4), with its counters."""

    vhost: str
    name: str
    state: str
    timestamp: float
    reason: str | None
    info: dict[str, str]
    counters: Counters

    def as_json(self, node: str) -> dict[str, Any]:
        """RabbitMQ's ``/api/shovels`` entry, its fields in RabbitMQ's order."""
        out: dict[str, Any] = {
            "node": node,
            "timestamp": rabbit_time(self.timestamp),
            "name": self.name,
            "vhost": self.vhost,
            "type": "dynamic",
            "state": self.state,
        }
        if self.reason is not None:
            out["reason"] = self.reason
        out.update(self.info)
        return out


def rabbit_time(timestamp: float) -> str:
    """RabbitMQ's status time: local, ``~w-~2.2.0w-~2.2.0w ~w:~2.2.0w:~2.2.0w`` (``2026-12-08 0:42:52``:
    the hour is not padded)."""
    t = time.localtime(timestamp)
    return f"{t.tm_year}-{t.tm_mon:02}-{t.tm_mday:02} {t.tm_hour}:{t.tm_min:02}:{t.tm_sec:02}"


class Shovels:
    """Every dynamic shovel of the node (see the module rules).

    Args:
        local: where this node's AMQP listener is (None while it is not accepting).
        cluster_name: ``shovelled-by`` in forward headers.
        finished: clears a shovel's parameter (``src-delete-after`` reached).
    """

    def __init__(
        self,
        local: Callable[[], LocalBroker | None],
        cluster_name: str,
        finished: Callable[[str, str], None],
    ) -> None:
        self._ends = Ends(local, cluster_name, self._finished)
        self._clear = finished
        self._shovels: dict[tuple[str, str], Shovel] = {}
        self._started = False

    # -- the ``shovel`` component (rule 1) --------------------------------------------------------
    def validate(
        self, vhost: str, name: str, value: Any, access: Callable[[str], bool] | None, username: str | None
    ) -> list[str]:
        """RabbitMQ's problems with a definition (empty: valid)."""
        return validate(name, value, access, username)

    def set(self, vhost: str, name: str, value: Mapping[str, Any]) -> None:
        """A shovel parameter was set or replaced: (re)start it."""
        self._replace(Shovel(vhost, name, spec_of(value), self._ends))

    def clear(self, vhost: str, name: str) -> None:
        """A shovel parameter was cleared: stop it and forget it."""
        self._stop((vhost, name))

    # -- life (rules 2, 3, 5) -----------------------------------------------------------------------
    def start(self) -> None:
        """The local broker accepts connections: run every shovel."""
        self._started = True
        for shovel in self._shovels.values():
            if shovel.task is None:
                self._run(shovel)

    async def stop(self) -> None:
        """Stop every shovel (shutting down); their parameters stay."""
        self._started = False
        tasks = [s.task for s in self._shovels.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for shovel in self._shovels.values():
            shovel.task = None

    def restart(self, vhost: str, name: str) -> bool:
        """Stop and start a shovel again (rule 3); False when it has no status."""
        shovel = self._shovels.get((vhost, name))
        if shovel is None:
            return False
        log.info("Shovel '%s' in virtual host '%s' will be restarted", name, vhost)
        again = Shovel(vhost, name, shovel.spec, self._ends)
        again.counters = shovel.counters
        self._replace(again)
        return True

    def _replace(self, shovel: Shovel) -> None:
        """Put ``shovel`` in place of its namesake, which is stopped first (its connections closed
        before the new one connects, so the two never consume side by side)."""
        previous = self._stop((shovel.vhost, shovel.name))
        self._shovels[(shovel.vhost, shovel.name)] = shovel
        if self._started:
            self._run(shovel, previous)

    def _run(self, shovel: Shovel, after: asyncio.Task[None] | None = None) -> None:
        async def life() -> None:
            if after is not None:
                await asyncio.gather(after, return_exceptions=True)
            await shovel.run()

        shovel.task = asyncio.get_running_loop().create_task(life(), name=f"shovel {shovel.name}")

    def _stop(self, key: tuple[str, str]) -> asyncio.Task[None] | None:
        shovel = self._shovels.pop(key, None)
        if shovel is None or shovel.task is None:
            return None
        shovel.task.cancel()
        return shovel.task

    def _finished(self, vhost: str, name: str) -> None:
        shovel = self._shovels.pop((vhost, name), None)
        if shovel is not None:
            shovel.task = None
        self._clear(vhost, name)

    # -- reading (rule 4) -------------------------------------------------------------------------
    def status(self) -> list[Entry]:
        """Every shovel's status, by vhost and name."""
        return [
            Entry(v, n, s.status.state, s.status.timestamp, s.status.reason, dict(s.status.info), s.counters)
            for (v, n), s in sorted(self._shovels.items())
        ]

    def find(self, vhost: str, name: str) -> Entry | None:
        """One shovel's status (None: no such shovel)."""
        return next((e for e in self.status() if e.vhost == vhost and e.name == name), None)
