"""Settings: OtterMQ names, RabbitMQ defaults, Go-style values, and .env.example completeness."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ottermq.broker.config import (
    Settings,
    env_name,
    load_settings,
    parse_duration,
    settings_help,
    unknown_variables,
)

ROOT = Path(__file__).resolve().parents[3]


def test_env_example_lists_every_setting_with_its_default(monkeypatch):
    for key in list(os.environ):
        if key.startswith("OTTERMQ_") or key == "LOG_LEVEL":
            monkeypatch.delenv(key)
    lines = [line for line in (ROOT / ".env.example").read_text().splitlines() if "=" in line]
    example = dict(line.split("=", 1) for line in lines if not line.startswith("#"))
    assert sorted(example) == sorted(env_name(f) for f in Settings.model_fields)
    # the documented values are the defaults: loading the example gives default settings
    for key, value in example.items():
        monkeypatch.setenv(key, value)
    assert load_settings(_env_file=None) == Settings(_env_file=None)  # type: ignore[call-arg]


def test_rabbitmq_protocol_defaults(monkeypatch):
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert (s.broker_port, s.channel_max, s.frame_max, s.heartbeat_interval) == (5672, 2047, 131072, 60)
    assert (s.username, s.password, s.vhosts, s.loopback_users) == ("guest", "guest", ["/"], ["guest"])
    assert s.enable_ttl and s.enable_dlx and s.enable_qll


@pytest.mark.parametrize(
    "value,expected",
    [("1", True), ("t", True), ("TRUE", True), ("0", False), ("F", False), ("false", False)],
)
def test_go_style_booleans(monkeypatch, value, expected):
    monkeypatch.setenv("OTTERMQ_ENABLE_TTL", value)
    assert load_settings(_env_file=None).enable_ttl is expected


def test_durations_and_empty_values(monkeypatch):
    assert parse_duration("5m") == 300 and parse_duration("250ms") == 0.25 and parse_duration("1h") == 3600
    monkeypatch.setenv("OTTERMQ_HEARTBEAT_INTERVAL", "30s")
    monkeypatch.setenv("OTTERMQ_CHANNEL_MAX", "")  # empty = unset (but see OTTERMQ_BROKER_PORT below)
    s = load_settings(_env_file=None)
    assert (s.heartbeat_interval, s.channel_max) == (30, 2047)


def test_bad_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("OTTERMQ_FRAME_MAX", "tiny")
    with pytest.raises(SystemExit) as info:
        load_settings(_env_file=None)
    assert "OTTERMQ_FRAME_MAX" in str(info.value)


def test_dotenv_file(tmp_path, monkeypatch):
    monkeypatch.delenv("OTTERMQ_CHANNEL_MAX", raising=False)
    env = tmp_path / ".env"
    env.write_text("OTTERMQ_CHANNEL_MAX=7\n")
    assert load_settings(_env_file=env).channel_max == 7


@pytest.mark.parametrize("value,expected", [("debug", "DEBUG"), ("Warning", "WARNING"), ("error", "ERROR")])
def test_log_level_any_case(monkeypatch, value, expected):
    monkeypatch.setenv("LOG_LEVEL", value)
    assert load_settings(_env_file=None).log_level == expected


@pytest.mark.parametrize("var", ["LOG_LEVEL", "OTTERMQ_LOG_LEVEL"])
def test_unknown_log_level_stops_startup(monkeypatch, var):
    monkeypatch.delenv("LOG_LEVEL", raising=False)
    monkeypatch.setenv(var, "VERBOSE")
    with pytest.raises(SystemExit) as info:
        load_settings(_env_file=None)
    text = str(info.value)
    assert text.startswith("invalid configuration:\n  LOG_LEVEL: ")
    assert "DEBUG, INFO, WARNING, ERROR, CRITICAL" in text and "'VERBOSE'" in text


# One bad value per setting: every one of them must stop start-up naming its variable.
BAD_VALUES = {
    "web_header_timeout": "0",
    "web_idle_timeout": "soon",
    "web_max_connections": "0",
    "web_max_connections_per_address": "-1",
    "broker_host": None,  # any string is an interface name; bind reports a bad one (StartupError)
    "broker_port": "65536",
    "ssl": "perhaps",
    "disk_free_limit": "lots",
    "disk_free_limit_relative": "0",
    "ssl_port": "0",
    "ssl_cert_file": None,  # any path; start-up checks the file (StartupError naming it)
    "ssl_key_file": None,
    "ssl_ca_file": None,
    "ssl_verify": "verify_maybe",
    "ssl_fail_if_no_peer_cert": "perhaps",
    "ssl_cert_login_from": "nickname",
    "ssl_cert_login_san_type": "phone",
    "web_ssl": "perhaps",
    "web_ssl_port": "70000",
    "web_ssl_cert_file": None,
    "web_ssl_key_file": None,
    "web_ssl_ca_file": None,
    "prometheus_ssl": "perhaps",
    "prometheus_ssl_port": "0",
    "data_dir": None,  # any path; start-up reports an unusable one (StartupError)
    "workers": "many",
    "heartbeat_interval": "soon",
    "channel_max": "-1",
    "frame_max": "100",
    "username": None,  # any string
    "password": None,  # any string
    "vhosts": None,  # any list of names
    "loopback_users": None,  # any list of names
    "max_priority": "256",
    "quorum_delivery_limit": "-1",
    "enable_ttl": "maybe",
    "enable_dlx": "2",
    "enable_qll": "yes please",
    "max_message_size": "0",
    "store": "postgres",
    "sync": "OFF",
    "postgres_url": None,  # any string; connecting reports a bad one (StartupError)
    "postgres_password_file": None,  # any path; start-up reports an unreadable one (StartupError)
    "postgres_schema": "s" * 51,  # over the 50 characters allowed (PostgreSQL names stop at 63 bytes)
    "lease_seconds": "0.5",
    "standby_poll_seconds": "0",
    "postgres_start_timeout": "0",
    "definitions_file": None,  # any path; start-up reports a missing file (StartupError)
    "memory_high_watermark": "0",
    "handshake_timeout": "0",
    "update_secret_verify": "sometimes",
    "paging": "sometimes",
    "queue_window": "-1",
    "queue_window_bytes": "big",
    "spill_dir": None,  # any path; made when a queue first pages (a queue that cannot keeps memory)
    "dlx_archive_dir": None,  # any path; start-up reports an unwritable one (StartupError)
    "dlx_archive_max_bytes": "10",
    "dlx_archive_body_bytes": "-1",
    "dlx_archive_queue": "0",
    "dlx_archive_idle_close": "-1",
    "dlq_move_max_ids": "0",
    "dlq_move_max_jobs": "1001",
    "enable_web_api": "perhaps",
    "enable_ui": "perhaps",
    "dlx_reports_dir": None,  # any path; a missing folder shows as no reports in the UI
    "web_port": "70000",
    "web_host": None,  # any string is an interface name; bind reports a bad one (StartupError)
    "web_api_path": "api",
    "enable_prometheus": "sometimes",
    "prometheus_port": "-1",
    "prometheus_path": "metrics",
    "metrics_samples_interval": "0",
    "loop_lag_warning": "-1",
    "enable_swagger": "maybe",
    "consumer_timeout": "-1",
    "swagger_path": "docs",
    "log_level": "VERBOSE",
}


def test_bad_values_cover_every_setting():
    assert sorted(BAD_VALUES) == sorted(Settings.model_fields)


@pytest.mark.parametrize("field", [f for f, v in BAD_VALUES.items() if v is not None])
def test_every_bad_value_stops_startup_naming_the_variable(monkeypatch, field):
    for key in list(os.environ):
        if key.startswith("OTTERMQ_") or key == "LOG_LEVEL":
            monkeypatch.delenv(key)
    monkeypatch.setenv(env_name(field), BAD_VALUES[field])  # type: ignore[arg-type]
    with pytest.raises(SystemExit) as info:
        load_settings(_env_file=None)
    assert str(info.value).startswith(f"invalid configuration:\n  {env_name(field)}: ")
    assert "(got " in str(info.value)  # the value as read (a duration already in seconds)


def test_unknown_variables_name_the_closest_setting(tmp_path, monkeypatch):
    for key in list(os.environ):
        if key.startswith("OTTERMQ_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("OTTERMQ_BROKER_PROT", "5673")
    monkeypatch.setenv("OTTERMQ_LOG_LEVEL", "INFO")  # an accepted spelling of LOG_LEVEL
    monkeypatch.setenv("OTTERMQ_PORT", "1")
    env = tmp_path / ".env"
    env.write_text("OTTERMQ_PASWORD=secret\nOTTERMQ_ZZZ=1\nOTTERMQ_VHOSTS=/\n")
    ignored = "in the environment is ignored; did you mean"
    assert unknown_variables(env) == [
        f"unknown setting OTTERMQ_BROKER_PROT {ignored} OTTERMQ_BROKER_PORT?",
        f"unknown setting OTTERMQ_PORT {ignored} OTTERMQ_BROKER_PORT?",
        f"unknown setting OTTERMQ_PASWORD in {env} is ignored; did you mean OTTERMQ_PASSWORD?",
        f"unknown setting OTTERMQ_ZZZ in {env} is ignored (see ottermq serve --help)",
    ]
    assert unknown_variables(tmp_path / "missing.env") == unknown_variables(None)


def test_pure_python_is_known_in_the_environment_and_said_to_be_ignored_in_dot_env(tmp_path, monkeypatch):
    """amqp/native.py reads OTTERMQ_PURE_PYTHON from the environment before any setting is read."""
    for key in list(os.environ):
        if key.startswith("OTTERMQ_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("OTTERMQ_PURE_PYTHON", "1")
    env = tmp_path / ".env"
    env.write_text("OTTERMQ_PURE_PYTHON=1\n")
    assert unknown_variables(env) == [
        f"OTTERMQ_PURE_PYTHON in {env} is ignored: the hot path is chosen before settings are read, so set"
        " it in the environment (OTTERMQ_PURE_PYTHON=1 ottermq)"
    ]
    assert unknown_variables(None) == []


def test_settings_help_lists_every_setting_with_the_env_example_default(monkeypatch):
    names = [line.strip() for line in settings_help().splitlines() if not line.startswith("      ")]
    listed = dict(line.split("=", 1) for line in names)
    example_lines = (ROOT / ".env.example").read_text().splitlines()
    example = dict(line.split("=", 1) for line in example_lines if "=" in line and not line.startswith("#"))
    assert listed == example


def test_an_empty_broker_port_means_no_plain_listener(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OTTERMQ_BROKER_PORT", "")
    assert load_settings().broker_port == 0
    monkeypatch.delenv("OTTERMQ_BROKER_PORT")
    assert load_settings().broker_port == 5672
    (tmp_path / ".env").write_text("OTTERMQ_BROKER_PORT=\n")
    assert load_settings().broker_port == 0
