"""What a definitions import did, for the answer of every way in (HTTP body, command-line output,
start-up log and the management API's overview).

Rules:

1. An item RabbitMQ 3.10.8 imports that ottermq cannot (a stream, a federation upstream, a global
   parameter, an exchange type it lacks, a binding to one of those, a topic permission), and a
   binding the broker refuses (RabbitMQ's import skips those silently), is *skipped*: ``skip`` logs
   it at WARNING and keeps it, with the section it came from, what names it and why; the rest of the
   file is applied.
2. An invalid item (one RabbitMQ refuses the whole file for: a value of the wrong type, a permission
   of an unknown user) is not skipped: the parser raises ``DefinitionsError`` and nothing is applied;
   a queue or exchange the broker refuses to declare stops the import there (``apply.py`` rule 3).
3. ``applied`` counts what was created or replaced, by kind of object; ``unchanged`` what was
   already there and left as it was (an existing queue or exchange, as RabbitMQ's import leaves it).
4. ``complete`` is true when nothing was skipped: the HTTP API then answers 204 as RabbitMQ does;
   otherwise 200 with ``to_json()`` (``{"applied": {...}, "unchanged": {...}, "skipped": [...]}``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

KINDS = (
    "users",
    "vhosts",
    "permissions",
    "policies",
    "operator_policies",
    "limits",
    "parameters",
    "exchanges",
    "queues",
    "bindings",
    "global_parameters",
)
"""What ``applied`` and ``unchanged`` count, in the order they are shown."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """One item left out: its ``section`` of the file, the fields that name it (``vhost``,
    ``name``, ``component``, ``source``...), and why."""

    section: str
    names: tuple[tuple[str, str], ...]
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"section": self.section, **dict(self.names), "reason": self.reason}

    def describe(self) -> str:
        """``queues: vhost '/' name 's1': stream queues are not supported``."""
        named = " ".join(f"{key} '{value}'" for key, value in self.names)
        return f"{self.section}: {named}: {self.reason}"


@dataclass(slots=True)
class ImportReport:
    """Rules 1, 3 and 4 (see the module docstring)."""

    applied: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    unchanged: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    skipped: list[Skipped] = field(default_factory=list)
    quiet: bool = False  # skipped items are not logged here: another process logs them (a worker's part)

    def skip(self, section: str, reason: str, **names: str) -> None:
        """Rule 1: leave one item out, logged (unless ``quiet``) and kept for the answer."""
        item = Skipped(section, tuple(names.items()), reason.strip())
        if not self.quiet:
            log.warning("definitions: skipped %s", item.describe())
        self.skipped.append(item)

    def done(self, kind: str, count: int = 1) -> None:
        self.applied[kind] += count

    def kept(self, kind: str) -> None:
        self.unchanged[kind] += 1

    @property
    def complete(self) -> bool:
        return not self.skipped

    def to_json(self) -> dict[str, Any]:
        return {
            "applied": dict(self.applied),
            "unchanged": dict(self.unchanged),
            "skipped": [item.to_json() for item in self.skipped],
        }

    @classmethod
    def from_json(cls, data: Any) -> ImportReport:
        """A report as ``to_json`` wrote it (another worker's answer, or the HTTP API's for the
        command line); what does not have that shape is left out."""
        report = cls()
        data = data if isinstance(data, dict) else {}
        for key, counts in (("applied", report.applied), ("unchanged", report.unchanged)):
            given = data.get(key)
            for kind, n in given.items() if isinstance(given, dict) else ():
                if isinstance(n, int) and not isinstance(n, bool):
                    counts[str(kind)] = n
        for item in data.get("skipped") or ():
            if isinstance(item, dict):
                names = tuple((str(k), str(v)) for k, v in item.items() if k not in ("section", "reason"))
                report.skipped.append(Skipped(str(item.get("section")), names, str(item.get("reason"))))
        return report

    def add_topology(self, other: ImportReport) -> list[Skipped]:
        """Another worker's import of the same file (it declares the exchanges, queues and bindings
        of the vhosts it owns): its topology counts added, its skipped items not yet here added.

        Returns:
            The skipped items added (the start-up import logs them, ``Supervisor.start``).
        """
        for kind in ("exchanges", "queues", "bindings"):
            self.applied[kind] += other.applied.get(kind, 0)
            self.unchanged[kind] += other.unchanged.get(kind, 0)
        added: list[Skipped] = []
        for item in other.skipped:
            if item not in self.skipped:
                self.skipped.append(item)
                added.append(item)
        return added

    def summary(self) -> str:
        """One line: ``applied 3 users, 2 vhosts; unchanged 1 queue; skipped 2 items``."""
        parts = [f"applied {_counts(self.applied) or 'nothing'}"]
        if any(self.unchanged.values()):
            parts.append(f"unchanged {_counts(self.unchanged)}")
        parts.append(f"skipped {len(self.skipped)} item(s)" if self.skipped else "skipped nothing")
        return "; ".join(parts)

    def lines(self) -> list[str]:
        """The summary, then one line per skipped item (the command line prints these)."""
        return [self.summary(), *(f"  skipped {item.describe()}" for item in self.skipped)]


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in counts.items() if n)
