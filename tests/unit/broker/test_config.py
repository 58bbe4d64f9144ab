"""Settings: OtterMQ names, RabbitMQ defaults, Go-style values, and .env.example completeness."""

from __future__ import annotations

from pathlib import Path

import pytest
from ottermq.broker.config import Settings, load_settings, parse_duration

ROOT = Path(__file__).resolve().parents[3]


def env_name(field: str) -> str:
    return "LOG_LEVEL" if field == "log_level" else f"OTTERMQ_{field.upper()}"


def test_env_example_lists_every_setting_with_its_default(monkeypatch):
    for key in list(__import__("os").environ):
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
    monkeypatch.setenv("OTTERMQ_BROKER_PORT", "")  # empty = unset
    s = load_settings(_env_file=None)
    assert (s.heartbeat_interval, s.broker_port) == (30, 5672)


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
