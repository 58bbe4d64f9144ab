"""Argument mistakes found before Spark starts (``storage.preflight``, the jobs' ``main``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark


def test_preflight(tmp_path: Path) -> None:
    from ottermq.spark_jobs.storage import preflight

    assert preflight([str(tmp_path / "missing")])[1] == f"{tmp_path / 'missing'}: no such file or directory"
    hour = tmp_path / "a" / "2024-05-01" / "00"
    hour.mkdir(parents=True)
    (hour / "deadletters-1-2-3.jsonl.part").write_text("{}\n")
    found, problem = preflight([str(tmp_path / "a")])
    assert found is not None and (found.files, found.parts) == (0, 1)
    assert (
        problem == f"{tmp_path / 'a'}: no archive files (*.jsonl, *.jsonl.gz, *.parquet) "
        "(1 .jsonl.part file(s) still being written)"
    )
    (hour / "deadletters-1-2-4.jsonl").write_text("{}\n")
    found, problem = preflight([str(tmp_path / "a")])
    assert problem is None and found is not None and (found.files, found.parts) == (1, 1)
    assert preflight(["hdfs:///somewhere"]) == (None, None)  # Spark reads URIs and globs itself
    assert preflight([str(tmp_path / "*")]) == (None, None)


def test_report_main_refuses_an_empty_archive_without_starting_spark(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ottermq.spark_jobs import report

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr(report, "spark_session", no_spark)
    (tmp_path / "empty").mkdir()
    with caplog.at_level(logging.ERROR):
        assert report.main([str(tmp_path / "empty"), "--out", str(tmp_path / "out")]) == 2
    assert "no archive files" in caplog.text
