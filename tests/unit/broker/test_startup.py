"""Start-up checks: each unusable setting is one StartupError line naming it, cause and fix."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from ottermq.broker.config import Settings
from ottermq.broker.node.auth import AuthDB
from ottermq.broker.node.startup import (
    StartupError,
    check_archive_dir,
    lock_data_dir,
    os_cause,
    prepare_data_dir,
    read_definitions,
)


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_startup_error_is_one_line_naming_the_setting():
    exc = StartupError("broker_port", 5672, "address already in use", "set OTTERMQ_BROKER_PORT to a free one")
    assert str(exc) == (
        "OTTERMQ_BROKER_PORT=5672: address already in use (set OTTERMQ_BROKER_PORT to a free one)"
    )
    assert exc.setting == "OTTERMQ_BROKER_PORT"
    assert str(StartupError("definitions_file", None, "gone")) == "OTTERMQ_DEFINITIONS_FILE=: gone"


def test_os_cause_is_the_bare_reason():
    bind = OSError(errno.EADDRINUSE, "error while attempting to bind on address ('0.0.0.0', 5672): in use")
    assert os_cause(bind) == "address already in use"
    assert os_cause(FileExistsError(errno.EEXIST, "File exists")) == "not a directory"
    assert os_cause(PermissionError(errno.EACCES, "Permission denied")) == "permission denied"


def test_data_dir_that_is_a_file(tmp_path):
    path = tmp_path / "data"
    path.write_text("")
    with pytest.raises(StartupError) as info:
        prepare_data_dir(settings(data_dir=path))
    fix = "set OTTERMQ_DATA_DIR to a writable directory"
    assert str(info.value) == f"OTTERMQ_DATA_DIR={path}: not a directory ({fix})"


def test_data_dir_below_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(StartupError, match="OTTERMQ_DATA_DIR=.*/file/data: not a directory"):
        prepare_data_dir(settings(data_dir=tmp_path / "file" / "data"))


def test_unwritable_data_dir(tmp_path, monkeypatch):
    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(Path, "mkdir", refuse)  # root ignores modes: refuse as the kernel would
    with pytest.raises(StartupError, match="OTTERMQ_DATA_DIR=.*: permission denied"):
        prepare_data_dir(settings(data_dir=tmp_path / "data"))
    assert not (tmp_path / "data").exists()


def test_data_dir_in_use_names_the_pid(tmp_path):
    fd = lock_data_dir(tmp_path)
    try:
        with pytest.raises(StartupError) as info:
            prepare_data_dir(settings(data_dir=tmp_path))
    finally:
        os.close(fd)
    assert str(info.value) == (
        f"OTTERMQ_DATA_DIR={tmp_path}: in use by another OtterMQ process (pid {os.getpid()})"
        " (stop it, or set OTTERMQ_DATA_DIR to another directory)"
    )


def test_memory_store_needs_no_data_dir(tmp_path):
    path = tmp_path / "file"
    path.write_text("")
    assert prepare_data_dir(settings(store="memory", data_dir=path)) is None


def test_archive_dir_checked_and_created(tmp_path):
    check_archive_dir(settings())  # unset: nothing to check
    check_archive_dir(settings(dlx_archive_dir=tmp_path / "a" / "b"))
    assert list((tmp_path / "a" / "b").iterdir()) == []  # the probe file is gone
    (tmp_path / "f").write_text("")
    with pytest.raises(StartupError) as info:
        check_archive_dir(settings(dlx_archive_dir=tmp_path / "f"))
    assert str(info.value) == (
        f"OTTERMQ_DLX_ARCHIVE_DIR={tmp_path / 'f'}: not a directory"
        " (set OTTERMQ_DLX_ARCHIVE_DIR to a writable directory, or empty for no archive)"
    )


def test_definitions_file(tmp_path):
    assert read_definitions(settings()) is None
    missing = tmp_path / "defs.json"
    with pytest.raises(StartupError) as info:
        read_definitions(settings(definitions_file=missing))
    assert str(info.value) == f"OTTERMQ_DEFINITIONS_FILE={missing}: no such file or directory"
    missing.write_text("{")
    with pytest.raises(StartupError, match="OTTERMQ_DEFINITIONS_FILE=.*: definitions file .* not valid JSON"):
        read_definitions(settings(definitions_file=missing))
    missing.write_text(json.dumps({"vhosts": [{"name": "v"}]}))
    read = read_definitions(settings(definitions_file=missing))
    assert read is not None and [v.name for v in read.definitions.vhosts] == ["v"]
    assert read.path == str(missing) and read.report.complete


def test_password_differs_from_the_stored_one():
    auth = AuthDB()
    auth.seed_defaults(settings(password="first"))
    assert not auth.password_differs("guest", "first")
    assert auth.password_differs("guest", "second")
    assert not auth.password_differs("nobody", "second")  # no such user: nothing to compare


def test_the_postgresql_password_file_gives_its_first_line(tmp_path):
    from ottermq.broker.node.wiring import postgres_password

    secret = tmp_path / "pw"
    secret.write_text("s3cret\nignored\n")
    assert postgres_password(Settings(_env_file=None, postgres_password_file=secret)) == "s3cret"
    assert postgres_password(Settings(_env_file=None)) is None
    with pytest.raises(StartupError, match="OTTERMQ_POSTGRES_PASSWORD_FILE=.*cannot be read"):
        postgres_password(Settings(_env_file=None, postgres_password_file=tmp_path / "missing"))


def test_a_postgresql_url_is_shown_without_its_password():
    from ottermq.broker.node.wiring import redact_url, store_setting

    assert (
        redact_url("postgresql://u:pw@db:5432/x?sslmode=require")
        == "postgresql://u:***@db:5432/x?sslmode=require"
    )
    assert redact_url("postgresql://u@db/x") == "postgresql://u@db/x"
    settings = Settings(_env_file=None, store="postgresql", postgres_url="postgresql://u:pw@db/x")
    assert store_setting(settings) == ("postgres_url", "postgresql://u:***@db/x")
