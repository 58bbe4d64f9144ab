"""Broker settings, read from ``OTTERMQ_*`` environment variables and ``.env``.

This is the only module that reads the environment. Values follow OtterMQ's variable names with
RabbitMQ's protocol defaults. Booleans accept Go's spellings (``1``, ``t``, ``TRUE``, ``false``…),
durations accept plain seconds or Go-style units (``500ms``, ``30s``, ``5m``, ``1h``), an empty
value counts as unset, and a bad value stops start-up with a message naming the variable.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, BeforeValidator, Field, ValidationError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> Any:
    """Turn ``"5m"``/``"30s"``/``"250ms"``/``"60"`` into seconds (float); pass numbers through.

    Raises:
        ValueError: the string is not a duration.
    """
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(f"invalid duration {value!r} (use e.g. 60, 30s, 5m, 1h)")
        return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    return value


def _split_list(value: Any) -> Any:
    if isinstance(value, str):
        parts = [part.strip() for part in value.split(",") if part.strip()]
        return [] if parts == ["none"] else parts
    return value


Duration = Annotated[float, BeforeValidator(parse_duration)]
CommaList = Annotated[list[str], NoDecode, BeforeValidator(_split_list)]


class Settings(BaseSettings):
    """All broker settings. See ``.env.example`` for the documented list."""

    model_config = SettingsConfigDict(
        env_prefix="OTTERMQ_",
        env_file=".env",
        env_file_encoding="utf-8",
        env_ignore_empty=True,
        extra="ignore",
        case_sensitive=False,
        populate_by_name=True,
    )

    broker_host: str = Field("", description="Interface to listen on; empty = all interfaces")
    broker_port: int = Field(5672, ge=0, le=65535)
    data_dir: Path = Path("data")
    heartbeat_interval: Duration = Field(60.0, ge=0, description="Heartbeat the server proposes (s)")
    channel_max: int = Field(2047, ge=0, le=65535)
    frame_max: int = Field(131072, ge=4096, le=2**31 - 1)
    username: str = "guest"
    password: str = "guest"
    vhosts: CommaList = Field(default_factory=lambda: ["/"])
    loopback_users: CommaList = Field(
        default_factory=lambda: ["guest"], description="Users allowed to log in only from loopback"
    )
    max_priority: int = Field(255, ge=1, le=255, description="Highest x-max-priority accepted")
    enable_ttl: bool = True
    enable_dlx: bool = True
    enable_qll: bool = True
    max_message_size: int = Field(134217728, ge=1, description="Largest accepted body (bytes)")
    store: str = Field(
        "sqlite", pattern="^(sqlite|memory)$", description="sqlite (durable, default) or memory"
    )
    sync: str = Field(
        "FULL",
        pattern="^(?i:full|normal)$",
        description="SQLite synchronous level: FULL = a confirm means on disk even after power loss",
    )
    definitions_file: Path | None = Field(
        None, description="RabbitMQ definitions JSON imported at start-up"
    )
    memory_high_watermark: float = Field(
        0.4,
        gt=0,
        description="Memory alarm threshold: fraction of RAM if <= 1, else bytes (RabbitMQ: 0.4)",
    )
    handshake_timeout: Duration = Field(10.0, gt=0)
    update_secret_verify: bool = Field(
        False,
        description="connection.update-secret must carry the user's current password (ottermq extension;"
        " RabbitMQ's internal users accept any secret, as passwords cannot expire)",
    )
    dlx_archive_dir: Path | None = Field(
        None, description="Dead-letter archive directory (JSON Lines); empty = no archive"
    )
    dlx_archive_max_bytes: int = Field(
        67108864, ge=4096, description="Archive file size before a new file is started (bytes)"
    )
    dlx_archive_body_bytes: int = Field(
        0, ge=0, description="Body bytes archived per dead letter (base64); 0 = bodies not archived"
    )
    dlx_archive_queue: int = Field(
        100000, ge=1, description="Dead letters buffered for the archive writer before new ones are lost"
    )
    log_level: str = Field(
        "INFO", validation_alias=AliasChoices("LOG_LEVEL", "OTTERMQ_LOG_LEVEL", "log_level")
    )


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment and ``.env``.

    Raises:
        SystemExit: a variable has an invalid value; the message names it.
    """
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            var = "LOG_LEVEL" if field == "log_level" else f"OTTERMQ_{field.upper()}"
            problems.append(f"{var}: {err['msg']} (got {err.get('input')!r})")
        raise SystemExit("invalid configuration:\n  " + "\n  ".join(problems)) from None
