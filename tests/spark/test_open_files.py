"""An archive being written (``open_files.include_open_files``) and the JVM's console (``jvm_console``):
no Spark session needed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark


def hour_dir(root: Path) -> Path:
    hour = root / "archive" / "2024-05-01" / "00"
    hour.mkdir(parents=True)
    return hour


def test_open_files_give_their_complete_lines_and_every_file_is_listed_once(tmp_path: Path) -> None:
    from ottermq.spark_jobs.open_files import include_open_files

    hour = hour_dir(tmp_path)
    (hour / "deadletters-1-2-1.jsonl").write_text('{"a": 1}\n')
    (hour / "deadletters-5-2-2.jsonl.part").write_text('{"b": 1}\n{"b": 2}\n{"b": 3, "cut sh')
    copies = tmp_path / "copies"
    copies.mkdir()
    found = include_open_files([str(tmp_path / "archive")], copies)
    assert found is not None
    assert (found.files, found.lines, found.bytes) == (1, 2, len('{"b": 1}\n{"b": 2}\n'))
    assert found.paths == [
        str(hour / "deadletters-1-2-1.jsonl"),
        str(copies / "00000-deadletters-5-2-2.jsonl"),
    ]
    assert Path(found.paths[1]).read_text() == '{"b": 1}\n{"b": 2}\n'


def test_a_file_closed_after_the_listing_is_read_under_its_new_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ottermq.spark_jobs.open_files import include_open_files

    hour = hour_dir(tmp_path)
    part = hour / "deadletters-5-2-2.jsonl.part"
    part.write_text('{"b": 1}\n')
    read_bytes = Path.read_bytes

    def closed_first(self: Path) -> bytes:  # the broker renames it between the listing and the copy
        if self == part and part.exists():
            part.rename(hour / "deadletters-5-2-2.jsonl")
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", closed_first)
    found = include_open_files([str(tmp_path / "archive")], tmp_path)
    assert found is not None and (found.files, found.paths) == (0, [str(hour / "deadletters-5-2-2.jsonl")])


def test_nothing_to_include(tmp_path: Path) -> None:
    from ottermq.spark_jobs.open_files import include_open_files

    hour = hour_dir(tmp_path)
    (hour / "deadletters-1-2-1.jsonl").write_text("{}\n")
    assert include_open_files([str(tmp_path / "archive")], tmp_path) is None  # no open file
    (hour / "deadletters-5-2-2.jsonl.part").write_text("{}\n")
    assert include_open_files(["hdfs:///archive"], tmp_path) is None  # Spark lists URIs itself
    assert include_open_files([str(tmp_path / "arch*")], tmp_path) is None  # and globs
    (hour / "part-0.parquet").write_bytes(b"PAR1")
    assert include_open_files([str(tmp_path / "archive")], tmp_path) is None  # a compacted archive


def test_the_jvm_incubator_warning_is_left_out_and_the_rest_copied() -> None:
    from ottermq.spark_jobs.jvm_console import copy_lines

    source = io.BytesIO(
        b"WARNING: Using incubator modules: jdk.incubator.vector\n"
        b"12:00:01 spark ERROR Executor: task failed\n"
        b"WARNING: something else the JVM says\n"
    )
    target = io.StringIO()
    copy_lines(source, target)
    assert (
        target.getvalue()
        == "12:00:01 spark ERROR Executor: task failed\nWARNING: something else the JVM says\n"
    )
