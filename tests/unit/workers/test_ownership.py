"""Which worker owns which vhost (broker/workers/ownership.py): the least busy worker, the lowest number
among equals; kept in workers.json across restarts; vhosts of a one-process data dir stay in worker 0;
a vhost in a worker beyond ``OTTERMQ_WORKERS`` stops the start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ottermq.broker.workers.ownership import FILE_NAME, OwnershipError, VhostOwners


def test_a_new_vhost_goes_to_the_least_busy_worker_the_lowest_number_among_equals(tmp_path: Path) -> None:
    owners = VhostOwners(3, tmp_path / FILE_NAME)
    owners.load([])
    assert [owners.owner(name) for name in ("a", "b", "c", "d", "e")] == [0, 1, 2, 0, 1]
    assert [owners.owner(name) for name in ("a", "b", "c", "d", "e")] == [0, 1, 2, 0, 1]  # kept
    assert [owners.owned_by(i) for i in range(3)] == [["a", "d"], ["b", "e"], ["c"]]


def test_the_assignment_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    first = VhostOwners(2, path)
    first.load([])
    first.owner("/")
    first.owner("a")
    assert json.loads(path.read_text()) == {"workers": 2, "vhosts": {"/": 0, "a": 1}}
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]  # written through a temporary file
    again = VhostOwners(3, path)  # more workers: the vhosts stay where their stores are
    again.load(["/", "a"])
    assert again.snapshot() == {"/": 0, "a": 1}
    assert again.owner("b") == 2


def test_vhosts_of_a_one_process_data_dir_stay_in_worker_0(tmp_path: Path) -> None:
    owners = VhostOwners(2, tmp_path / FILE_NAME)
    owners.load(["old", "older"])
    assert owners.snapshot() == {"old": 0, "older": 0}
    assert owners.owner("new") == 1
    assert json.loads((tmp_path / FILE_NAME).read_text())["vhosts"] == {"new": 1, "old": 0, "older": 0}


def test_a_vhost_beyond_the_workers_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    path.write_text(json.dumps({"workers": 3, "vhosts": {"a": 1, "b": 2, "c": 2}}))
    with pytest.raises(OwnershipError) as info:
        VhostOwners(2, path).load([])
    assert str(info.value) == "vhost 'b' lives in the store of worker 2; set OTTERMQ_WORKERS to at least 3"
    VhostOwners(3, path).load([])


def test_deleted_vhosts_are_forgotten(tmp_path: Path) -> None:
    owners = VhostOwners(2, tmp_path / FILE_NAME)
    owners.load([])
    for name in ("a", "b", "c"):
        owners.owner(name)
    owners.forget(["a", "c"])
    assert owners.snapshot() == {"a": 0, "c": 0}
    assert json.loads((tmp_path / FILE_NAME).read_text())["vhosts"] == {"a": 0, "c": 0}
    assert owners.owner("d") == 1  # worker 1 is the least busy again


def test_without_a_file_the_assignment_lives_in_memory(tmp_path: Path) -> None:
    owners = VhostOwners(2, None)  # the memory store: nothing to find again after a restart
    owners.load(["x"])
    assert (owners.owner("x"), owners.owner("y")) == (0, 1)
    assert list(tmp_path.iterdir()) == []
