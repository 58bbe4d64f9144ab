"""Runtime parameters of components, as RabbitMQ 3.10's ``rabbit_runtime_parameters``: the values
``PUT /api/parameters/{component}/{vhost}/{name}``, ``rabbitmqctl set_parameter`` and definitions
set, kept per ``(vhost, component, name)``, validated and acted on by the component that owns them.

Rules:

1. A component registers once (``register``), as a RabbitMQ plugin does: ``shovel`` (the node's
   ``Shovels``). It validates a value (RabbitMQ's texts, one per problem) and is told when its
   parameter is set (``set``) or cleared (``clear``).
2. Setting (``Operations.set_parameter``, the one way in): an unknown component is refused
   (``component <name> not found``); a value the component refuses is refused with every problem:
   ``Validation failed`` and a blank line, then one line per problem (RabbitMQ's ``format_many``).
   A value equal to the stored one changes nothing and tells no one (RabbitMQ's ``{old, Term}``).
3. A parameter is stored (``ParameterRecord``, its value as JSON) and survives a restart: the node
   restores them before it accepts connections (``restore``), validated again by their component
   (one that no longer validates is logged and skipped, not a reason to stop the start-up).
4. Deleting a vhost clears its parameters (their components are told; the store drops the rows
   with the vhost).
5. With several workers, parameters and their components live in worker 0 (the management API
   there answers ``/api/parameters``); the other workers neither keep nor apply them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ottermq.persistence.store import ParameterRecord, Store

log = logging.getLogger(__name__)

VHostAccess = Callable[[str], bool]


class ParameterError(ValueError):
    """A parameter refused (rule 2): ``str()`` is RabbitMQ's text."""


class Component(Protocol):
    """What owns a component's parameters (rule 1)."""

    def validate(
        self, vhost: str, name: str, value: Any, access: VHostAccess | None, username: str | None
    ) -> list[str]:
        """The problems with ``value`` (empty: valid); ``access`` says whether the acting user may
        open a vhost (None: the broker itself acts)."""
        ...

    def set(self, vhost: str, name: str, value: Any) -> None: ...

    def clear(self, vhost: str, name: str) -> None: ...


def validation_failed(problems: Iterable[str]) -> str:
    """RabbitMQ's text for refused values (rule 2)."""
    return "Validation failed\n\n" + "".join(f"{p}\n" for p in problems)


class Parameters:
    """The node's runtime parameters (see the module rules).

    Args:
        store: where ``set`` and ``clear`` write them (None: kept in memory only).
    """

    def __init__(self, store: Store | None = None) -> None:
        self.store = store
        self.components: dict[str, Component] = {}
        self.values: dict[tuple[str, str, str], Any] = {}

    def register(self, name: str, component: Component) -> None:
        self.components[name] = component

    def component(self, name: str) -> Component:
        """The component called ``name``.

        Raises:
            ParameterError: no such component (rule 2's text).
        """
        found = self.components.get(name)
        if found is None:
            raise ParameterError(validation_failed([f"component {name} not found"]))
        return found

    def check(
        self,
        vhost: str,
        component: str,
        name: str,
        value: Any,
        access: VHostAccess | None,
        username: str | None,
    ) -> Component:
        """Rule 2's checks; returns the component.

        Raises:
            ParameterError: an unknown component or a refused value.
        """
        owner = self.component(component)
        problems = owner.validate(vhost, name, value, access, username)
        if problems:
            raise ParameterError(validation_failed(problems))
        return owner

    def put(self, vhost: str, component: str, name: str, value: Any) -> bool:
        """Keep ``value`` and tell its component; returns False when it equals the stored one."""
        key = (vhost, component, name)
        if key in self.values and self.values[key] == value:
            return False
        self.values[key] = value
        self.components[component].set(vhost, name, value)
        return True

    def set(
        self,
        vhost: str,
        component: str,
        name: str,
        value: Any,
        access: VHostAccess | None,
        username: str | None,
    ) -> bool:
        """Rule 2 and 3: check, keep, tell the component and store; returns whether it is new. A
        value whose write fails is taken back (the previous one put again), as a policy is.

        Raises:
            ParameterError: an unknown component or a refused value.
        """
        self.check(vhost, component, name, value, access, username)
        previous = self.get(vhost, component, name)
        if self.put(vhost, component, name, value) and self.store is not None:
            self.store.put_parameter(record(vhost, component, name, value))
            self.store.after_commit(lambda ok: self._stored(ok, vhost, component, name, value, previous))
        return previous is None

    def _stored(self, ok: bool, vhost: str, component: str, name: str, value: Any, previous: Any) -> None:
        if ok or self.get(vhost, component, name) != value:  # stored, or replaced since
            return
        log.error(
            "parameter '%s' of %s in vhost '%s' could not be stored; taken back", name, component, vhost
        )
        if previous is None:
            self.clear(vhost, component, name)
        else:
            self.set(vhost, component, name, previous, None, None)

    def clear(self, vhost: str, component: str, name: str) -> bool:
        """Forget a parameter, tell its component and the store; returns whether there was one."""
        if not self.remove(vhost, component, name):
            return False
        if self.store is not None:
            self.store.delete_parameter(vhost, component, name)
        return True

    def remove(self, vhost: str, component: str, name: str) -> bool:
        """Forget a parameter and tell its component; returns whether there was one."""
        key = (vhost, component, name)
        if key not in self.values:
            return False
        del self.values[key]
        owner = self.components.get(component)
        if owner is not None:
            owner.clear(vhost, name)
        return True

    def get(self, vhost: str, component: str, name: str) -> Any | None:
        return self.values.get((vhost, component, name))

    def items(
        self, vhost: str | None = None, component: str | None = None
    ) -> list[tuple[str, str, str, Any]]:
        """``(vhost, component, name, value)`` of the parameters, by vhost, component and name."""
        return [
            (v, c, n, value)
            for (v, c, n), value in sorted(self.values.items())
            if (vhost is None or v == vhost) and (component is None or c == component)
        ]

    def records(self) -> list[ParameterRecord]:
        """Every parameter as the store keeps it (definitions export)."""
        return [record(v, c, n, value) for v, c, n, value in self.items()]

    def restore(self, records: Iterable[ParameterRecord], vhosts: Iterable[str]) -> None:
        """Rule 3: the store's parameters, validated again and handed to their components."""
        known = set(vhosts)
        for r in records:
            try:
                value = json.loads(r.value)
                if r.vhost not in known:
                    raise ParameterError(f"vhost {r.vhost} does not exist")
                self.check(r.vhost, r.component, r.name, value, None, None)
            except (ValueError, ParameterError) as exc:
                log.warning(
                    "skipping stored parameter '%s' of %s in vhost '%s': %s",
                    r.name,
                    r.component,
                    r.vhost,
                    exc,
                )
                continue
            self.put(r.vhost, r.component, r.name, value)

    def clear_vhost(self, vhost: str) -> None:
        """Rule 4."""
        for v, c, n, _ in self.items(vhost):
            self.remove(v, c, n)


def record(vhost: str, component: str, name: str, value: Any) -> ParameterRecord:
    """The store's record of a parameter."""
    return ParameterRecord(vhost, component, name, json.dumps(value, separators=(",", ":")))
