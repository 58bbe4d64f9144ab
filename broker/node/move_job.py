"""A dead-letter move job's settings and progress (``MoveJob``: the JSON the API shows, the store's
record), and the jobs of an older ottermq's ``dlq-moves.json``. ``move_jobs.py`` runs them."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ottermq.persistence.store import MoveJobRecord

from .dlq_move import Selection, selection_from_json

KEEP = 100  # finished jobs kept
ACTIVE = ("running", "paused")
STATES = ("running", "paused", "done", "failed", "cancelled")


class TooManyJobs(Exception):
    """As many jobs as allowed are running or paused already."""


@dataclass
class MoveJob:
    """One move's settings and progress (the JSON the API shows)."""

    id: str
    vhost: str
    queue: str
    selection: Selection
    target: tuple[str, str] | None
    keep_death_headers: bool
    rate: float
    state: str = "running"
    selected: int = 0
    moved: int = 0
    unroutable: int = 0
    skipped: int = 0
    refused: int = 0
    error: str | None = None
    started: int = field(default_factory=lambda: int(time.time() * 1000))
    finished: int | None = None

    @property
    def done(self) -> int:
        """Messages dealt with, whatever the outcome."""
        return self.moved + self.unroutable + self.skipped + self.refused

    def as_json(self, ids: bool = True) -> dict[str, Any]:
        """The API's view (``ids``: with the selected ids, not only their count)."""
        target = {"exchange": self.target[0], "routing_key": self.target[1]} if self.target else None
        return {
            "id": self.id,
            "vhost": self.vhost,
            "queue": self.queue,
            "state": self.state,
            **self.selection.as_json(ids),
            "target": target,
            "keep_death_headers": self.keep_death_headers,
            "rate": self.rate,
            "selected": self.selected,
            "moved": self.moved,
            "unroutable": self.unroutable,
            "skipped": self.skipped,
            "refused": self.refused,
            "error": self.error,
            "started": self.started,
            "finished": self.finished,
        }

    def record(self, with_ids: bool = False) -> MoveJobRecord:
        """The store's row (``with_ids``: and the ids, written once when the job starts)."""
        selection = self.selection
        spec = {
            "selection": selection.kind(),
            "reason": selection.reason,
            "source_queue": selection.source_queue,
            "target": list(self.target) if self.target else None,
            "keep_death_headers": self.keep_death_headers,
            "rate": self.rate,
        }
        return MoveJobRecord(
            int(self.id),
            self.vhost,
            self.queue,
            json.dumps(spec),
            self.state,
            self.selected,
            self.moved,
            self.unroutable,
            self.skipped,
            self.refused,
            self.error,
            self.started,
            self.finished,
            selection.ids if with_ids else None,
        )

    @classmethod
    def from_record(cls, record: MoveJobRecord) -> MoveJob:
        """The job a stored row describes.

        Raises:
            ValueError, KeyError, TypeError: not a row this version wrote.
        """
        spec = json.loads(record.spec)
        kind = spec["selection"]
        if kind == "ids":
            selection = Selection(ids=record.ids or b"")
        elif kind == "all":
            selection = Selection(all_=True)
        elif kind == "filter":
            selection = Selection(reason=spec.get("reason"), source_queue=spec.get("source_queue"))
        else:
            raise ValueError(f"unknown selection {kind!r}")
        target = spec.get("target")
        return cls(
            str(record.id),
            record.vhost,
            record.queue,
            selection,
            (str(target[0]), str(target[1])) if target else None,
            bool(spec.get("keep_death_headers")),
            float(spec.get("rate") or 0),
            record.state if record.state in STATES else "failed",
            record.selected,
            record.moved,
            record.unroutable,
            record.skipped,
            record.refused,
            record.error,
            record.started,
            record.finished,
        )


def legacy_records(path: Path) -> list[MoveJobRecord]:
    """The jobs of an older ottermq's ``dlq-moves.json``: every running or paused one and the last
    ``KEEP`` finished (run in a thread: the file may be large).

    Raises:
        OSError, ValueError, KeyError, TypeError: the file cannot be read or is not such a file.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError("not a list of jobs")
    jobs = []
    for item in data:
        target = item.get("target")
        job = MoveJob(
            str(int(item["id"])),
            str(item["vhost"]),
            str(item["queue"]),
            selection_from_json(item["selection"]),
            (str(target[0]), str(target[1])) if target else None,
            bool(item.get("keep_death_headers")),
            float(item.get("rate") or 0),
            item.get("state") if item.get("state") in STATES else "failed",
            int(item.get("selected") or 0),
            int(item.get("moved") or 0),
            int(item.get("unroutable") or 0),
            int(item.get("skipped") or 0),
            0,
            item.get("error"),
            int(item.get("started") or 0),
            item.get("finished"),
        )
        jobs.append(job)
    finished = sorted((j for j in jobs if j.state not in ACTIVE), key=lambda j: (j.started, int(j.id)))
    kept = [j for j in jobs if j.state in ACTIVE] + finished[-KEEP:]
    return [j.record(with_ids=True) for j in kept]
