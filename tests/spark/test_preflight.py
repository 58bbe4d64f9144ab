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
    assert problem is None and found is not None and (found.files, found.parts, found.bytes) == (1, 1, 3)
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


def test_spark_fitted_to_the_input(pyspark_installed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small local archive gets a quick-starting Spark, a big one a bigger driver heap."""
    from ottermq.spark_jobs import session

    conf, java = session.fitted_conf(24_000, None)
    assert conf["spark.ui.enabled"] == "false" and conf["spark.sql.shuffle.partitions"] == "1"
    assert java == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    assert session.fitted_conf(24_000, "local[2]")[1] == java
    assert session.fitted_conf(24_000, "spark://master:7077") == ({}, "")  # a cluster: left alone
    assert session.fitted_conf(None, None) == ({}, "")  # a URI or a glob: size unknown
    c1 = "-XX:TieredStopAtLevel=1"
    assert session.fitted_conf(100 << 20, None) == ({}, c1)  # neither small nor big
    monkeypatch.setattr(session, "_memory_bytes", lambda: 24 << 30)
    assert session.fitted_conf(300 << 20, None) == ({"spark.driver.memory": "4g"}, c1)
    assert session.fitted_conf(1 << 30, None) == ({"spark.driver.memory": "4g"}, "")  # C2 pays there
    monkeypatch.setattr(session, "_memory_bytes", lambda: 6 << 30)
    assert session.fitted_conf(1 << 30, None) == ({"spark.driver.memory": "1g"}, "")
