"""Broker settings, read from ``OTTERMQ_*`` environment variables and ``.env``.

This is the only module that reads the environment. Values follow OtterMQ's variable names with
RabbitMQ's protocol defaults. Booleans accept Go's spellings (``1``, ``t``, ``TRUE``, ``false``…),
durations accept plain seconds or Go-style units (``500ms``, ``30s``, ``5m``, ``1h``), an empty
value counts as unset, and a bad value stops start-up with a message naming the variable.
An ``OTTERMQ_*`` variable that is no setting (a typo) is reported by :func:`unknown_variables`.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from dotenv import dotenv_values
from pydantic import AliasChoices, BeforeValidator, Field, ValidationError
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

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


def parse_log_level(value: Any) -> Any:
    """``debug``/``Info``/... -> ``DEBUG``/``INFO``/...

    Raises:
        ValueError: not one of :data:`LOG_LEVELS`.
    """
    if isinstance(value, str):
        level = value.strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)} (any case)")
        return level
    return value


Duration = Annotated[float, BeforeValidator(parse_duration)]

_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_bytes(value: Any) -> Any:
    """``50MB`` (decimal units, as RabbitMQ reads them), ``2GiB`` (binary), or a plain number of bytes."""
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", value)
        if match and match.group(2).lower() in _BYTE_UNITS:
            return int(match.group(1)) * _BYTE_UNITS[match.group(2).lower()]
    return value


LogLevel = Annotated[str, BeforeValidator(parse_log_level)]
ByteSize = Annotated[int, BeforeValidator(parse_bytes)]
SSLVerify = Literal["verify_none", "verify_peer"]
CertLoginFrom = Literal["common_name", "distinguished_name", "subject_alternative_name"]
SanType = Literal["dns", "email", "uri", "ip"]
CommaList = Annotated[list[str], NoDecode, BeforeValidator(_split_list)]


def parse_workers(value: Any) -> Any:
    """``auto`` (the machine's cores, at least 1) or a number of worker processes."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return max(1, os.cpu_count() or 1)
    return value


Workers = Annotated[int, BeforeValidator(parse_workers)]


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
    broker_port: int = Field(5672, ge=0, le=65535, description="AMQP port; 0 = no plain AMQP listener")
    ssl: bool = Field(False, description="AMQPS listener (AMQP over TLS, RabbitMQ's listeners.ssl)")
    ssl_port: int = Field(5671, ge=1, le=65535, description="AMQPS port (RabbitMQ: 5671)")
    ssl_cert_file: Path | None = Field(None, description="Server certificate (PEM), its chain after it")
    ssl_key_file: Path | None = Field(None, description="The certificate's private key (PEM)")
    ssl_ca_file: Path | None = Field(
        None, description="CA bundle (PEM) client certificates are checked against; empty = the system's"
    )
    ssl_verify: SSLVerify = Field(
        "verify_none",
        description="verify_peer asks clients for a certificate (RabbitMQ's ssl_options.verify)",
    )
    ssl_fail_if_no_peer_cert: bool = Field(
        False, description="With verify_peer: refuse clients without a certificate"
    )
    ssl_cert_login_from: CertLoginFrom = Field(
        "common_name",
        description="SASL EXTERNAL user name from the client certificate: common_name, distinguished_name"
        " or subject_alternative_name (RabbitMQ's ssl_cert_login_from)",
    )
    ssl_cert_login_san_type: SanType = Field(
        "dns", description="With subject_alternative_name: dns, email, uri or ip (the first of that type)"
    )
    data_dir: Path = Field(Path("data"), description="Where durable state (SQLite) lives")
    workers: Workers = Field(
        1,
        ge=1,
        le=256,
        description="Processes sharing the virtual hosts: 1 = one process; auto = one per core"
        " (each vhost lives in one worker; see docs/workers.md)",
    )
    heartbeat_interval: Duration = Field(60.0, ge=0, description="Heartbeat the server proposes (s)")
    channel_max: int = Field(2047, ge=0, le=65535, description="Channels per connection")
    frame_max: int = Field(131072, ge=4096, le=2**31 - 1, description="Largest frame (bytes)")
    username: str = Field("guest", description="Default user, created at the first start only")
    password: str = Field(
        "guest",
        description="Its password (first start only; see 'Changing a password' in docs/configuration.md)",
    )
    vhosts: CommaList = Field(
        default_factory=lambda: ["/"], description="Comma-separated vhosts created if missing"
    )
    loopback_users: CommaList = Field(
        default_factory=lambda: ["guest"], description="Users allowed to log in only from loopback"
    )
    max_priority: int = Field(255, ge=1, le=255, description="Highest x-max-priority accepted")
    quorum_delivery_limit: int | None = Field(
        None,
        ge=0,
        description="Delivery limit of quorum queues that set none (argument or policy): RabbitMQ 4's"
        " default is 20; empty = none, as RabbitMQ 3.10",
    )
    enable_ttl: bool = Field(True, description="Message TTL and queue expiry")
    enable_dlx: bool = Field(True, description="Dead-lettering")
    enable_qll: bool = Field(True, description="Queue length limits")
    max_message_size: int = Field(134217728, ge=1, description="Largest accepted body (bytes)")
    store: str = Field(
        "sqlite",
        pattern="^(sqlite|memory|postgresql)$",
        description="sqlite (durable, default), postgresql (durable, shared by an active and its"
        " standbys: docs/postgresql.md) or memory",
    )
    postgres_url: str | None = Field(
        None,
        description="OTTERMQ_STORE=postgresql: a libpq URL (postgresql://user:password@host:5432/db);"
        " what it leaves out comes from PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGPASSFILE...",
    )
    postgres_password_file: Path | None = Field(
        None, description="A file holding the PostgreSQL password (instead of one in the URL)"
    )
    postgres_schema: str = Field(
        "ottermq",
        min_length=1,
        max_length=50,
        description="The PostgreSQL schema holding the broker's tables (created if missing); the brokers"
        " of one active/standby group share it",
    )
    lease_seconds: Duration = Field(
        10.0,
        ge=1,
        le=3600,
        description="PostgreSQL: how long the active's lease lasts unrenewed before a standby takes over"
        " (a crashed active is replaced at once; this bounds a paused or cut-off one)",
    )
    standby_poll_seconds: Duration = Field(
        0.2, gt=0, le=60, description="PostgreSQL: how often a standby checks whether it can take over"
    )
    postgres_start_timeout: Duration = Field(
        5.0,
        gt=0,
        le=3600,
        description="PostgreSQL: how long a broker that has never reached its database tries at start-up"
        " before it stops (exit status 1, naming the setting to check); a role, password or database that"
        " does not exist stops it at once. A standby (it reached the database once) keeps trying",
    )
    sync: str = Field(
        "FULL",
        pattern="^(?i:full|normal)$",
        description="SQLite synchronous level: FULL = a confirm means on disk even after power loss",
    )
    definitions_file: Path | None = Field(
        None,
        description="RabbitMQ definitions JSON imported at start-up (what it skipped: in the log and"
        " /api/overview)",
    )
    disk_free_limit: ByteSize = Field(
        50_000_000,
        ge=0,
        description="Disk alarm: block publishers when the data directory's file system has less free"
        " (bytes, or 50MB / 2GiB; RabbitMQ's disk_free_limit.absolute, 50MB); 0 = off",
    )
    disk_free_limit_relative: float | None = Field(
        None,
        gt=0,
        description="Instead: this many times the machine's RAM (RabbitMQ's disk_free_limit.relative)",
    )
    memory_high_watermark: float = Field(
        0.4,
        gt=0,
        description="Memory alarm threshold: fraction of RAM if <= 1, else bytes (RabbitMQ: 0.4)",
    )
    handshake_timeout: Duration = Field(10.0, gt=0, description="Time to finish the AMQP handshake")
    update_secret_verify: bool = Field(
        False,
        description="connection.update-secret must carry the user's current password (ottermq extension;"
        " RabbitMQ's internal users accept any secret, as passwords cannot expire)",
    )
    paging: bool = Field(
        True,
        description="Queues keep a window of ready messages in memory and page the rest to spill files"
        " (x-queue-mode lazy: a window of zero); false = every message in memory, lazy ignored",
    )
    queue_window: int = Field(
        100000,
        ge=0,
        description="Ready messages a queue keeps in memory (per priority level) before it pages",
    )
    queue_window_bytes: ByteSize = Field(
        64 << 20, ge=0, description="Ready body bytes a queue keeps in memory before it pages (64MiB)"
    )
    spill_dir: Path | None = Field(
        None, description="Where paged messages go (per process, never recovered); empty = <data dir>/spill"
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
    dlx_archive_idle_close: float = Field(
        60.0,
        ge=0,
        description="Seconds without a write after which an archive file is closed (renamed"
        " to .jsonl, so analyses see it); 0 = only at the end of its hour, on rotation and at shutdown",
    )
    dlq_move_max_ids: int = Field(
        5_000,
        ge=1,
        le=1_000_000,
        description="Ids one dead-letter move request may select; more is a 400 (move by filter or all)",
    )
    dlq_move_max_jobs: int = Field(
        10, ge=1, le=1000, description="Dead-letter moves running or paused at once; one more is a 400"
    )
    enable_web_api: bool = Field(True, description="Management HTTP API (RabbitMQ-compatible)")
    web_port: int = Field(
        15672,
        ge=0,
        le=65535,
        description="Management HTTP API port (RabbitMQ: 15672); 0 = no plain HTTP listener (HTTPS only, with"
        " OTTERMQ_WEB_SSL)",
    )
    web_host: str = Field("", description="Interface of the management HTTP API; empty = OTTERMQ_BROKER_HOST")
    web_api_path: str = Field(
        "/api",
        pattern=r"^/[A-Za-z0-9._~/-]*$",
        description="URL path prefix of the management HTTP API (RabbitMQ: /api)",
    )
    enable_ui: bool = Field(
        True, description="Web UI for operators at / on the management port (needs OTTERMQ_ENABLE_WEB_API)"
    )
    dlx_reports_dir: Path | None = Field(
        None,
        description="Folder holding `ottermq dlq report --out` outputs (one subfolder each), shown by the"
        " web UI's archive page; empty = none",
    )
    web_ssl: bool = Field(
        False, description="HTTPS for the management API and UI on OTTERMQ_WEB_SSL_PORT (RabbitMQ: 15671)"
    )
    web_ssl_port: int = Field(15671, ge=1, le=65535, description="HTTPS port of the management API and UI")
    web_ssl_cert_file: Path | None = Field(None, description="Its certificate; empty = OTTERMQ_SSL_CERT_FILE")
    web_ssl_key_file: Path | None = Field(None, description="Its key; empty = OTTERMQ_SSL_KEY_FILE")
    web_ssl_ca_file: Path | None = Field(None, description="Its CA bundle; empty = OTTERMQ_SSL_CA_FILE")
    web_header_timeout: Duration = Field(
        10.0,
        gt=0,
        description="Time an HTTP client (management API, metrics) has from connecting to the end of its"
        " first request head, a TLS handshake included; late: 408 (or closed if it sent nothing)",
    )
    web_idle_timeout: Duration = Field(
        15.0,
        gt=0,
        description="Time a kept-alive HTTP connection may wait for its next complete request head before"
        " it is closed (longer than the web UI's 5 s refresh, so the UI keeps its connection)",
    )
    web_max_connections: int = Field(
        256,
        ge=1,
        description="Concurrent HTTP connections per listener (management API, metrics); one more gets a 503"
        " and is closed at once (on an HTTPS port: closed before the handshake)",
    )
    web_max_connections_per_address: int = Field(
        32,
        ge=0,
        description="Concurrent HTTP connections per listener from one client address, so one address cannot"
        " take every place; one more gets the same 503; 0 = no such cap (behind a reverse proxy, raise it)",
    )
    enable_prometheus: bool = Field(
        True, description="Prometheus metrics endpoint (rabbitmq_prometheus-compatible)"
    )
    prometheus_port: int = Field(
        15692,
        ge=0,
        le=65535,
        description="Prometheus metrics port (RabbitMQ: 15692); 0 = no plain HTTP listener (HTTPS only,"
        " with OTTERMQ_PROMETHEUS_SSL)",
    )
    prometheus_path: str = Field(
        "/metrics",
        pattern=r"^/[A-Za-z0-9._~/-]*$",
        description="URL path of the aggregated metrics; per-queue ones under <path>/per-object",
    )
    prometheus_ssl: bool = Field(
        False, description="HTTPS for the metrics on OTTERMQ_PROMETHEUS_SSL_PORT, with the web_ssl files"
    )
    prometheus_ssl_port: int = Field(
        15691, ge=1, le=65535, description="HTTPS metrics port (RabbitMQ: 15691)"
    )
    consumer_timeout: Duration = Field(
        1800.0,
        ge=0,
        description="How long a delivery may stay unacknowledged before its channel is closed with 406"
        " (RabbitMQ's consumer_timeout, 30 min); 0 = off. x-consumer-timeout / the consumer-timeout policy"
        " key set a lower one per queue",
    )
    enable_swagger: bool = Field(
        False, description="Serve an OpenAPI description of the management API (ottermq extension)"
    )
    swagger_path: str = Field(
        "/docs",
        pattern=r"^/[A-Za-z0-9._~/-]*$",
        description="Where the management listener serves it: HTML there, JSON at <path>/openapi.json",
    )
    loop_lag_warning: Duration = Field(
        0.25,
        ge=0,
        description="Log a WARNING naming what held the event loop when one turn keeps it longer than"
        " this (0: never); ottermq_event_loop_lag_seconds is exported either way",
    )
    metrics_samples_interval: Duration = Field(
        5.0,
        gt=0,
        description="How often the management API samples counters for its *_details.rate fields"
        " (RabbitMQ's collect_statistics_interval: 5 s)",
    )
    log_level: LogLevel = Field(
        "INFO",
        validation_alias=AliasChoices("LOG_LEVEL", "OTTERMQ_LOG_LEVEL", "log_level"),
        description=f"{', '.join(LOG_LEVELS)} (any case)",
    )


def env_name(field: str) -> str:
    """The environment variable of a ``Settings`` field (``broker_port`` -> ``OTTERMQ_BROKER_PORT``)."""
    if field.lower() == "log_level" or field == "LOG_LEVEL":  # the alias pydantic reports
        return "LOG_LEVEL"
    return f"OTTERMQ_{field.upper()}"


# The admin subcommands' connection to a management API (``ottermq list queues`` ...), not broker settings.
# Unset, each falls back to the broker's own settings (see :func:`admin_defaults`); with the broker's
# defaults that gives these values.
ADMIN_DEFAULTS = {
    "OTTERMQ_ADMIN_URL": "http://localhost:15672",
    "OTTERMQ_ADMIN_USER": "guest",
    "OTTERMQ_ADMIN_PASSWORD": "guest",
}
_ANY_INTERFACE = ("", "0.0.0.0", "::", "[::]")


class AdminSettings(BaseSettings):
    """The ``OTTERMQ_ADMIN_*`` variables, read from the environment and ``./.env`` as ``Settings`` are."""

    model_config = SettingsConfigDict(**{**Settings.model_config, "env_prefix": "OTTERMQ_ADMIN_"})

    url: str = ""
    user: str = ""
    password: str = ""


def admin_defaults() -> dict[str, str]:
    """Where the admin subcommands connect, as the broker on this machine is configured.

    Each ``OTTERMQ_ADMIN_*`` variable (environment or ``./.env``) wins. Without ``OTTERMQ_ADMIN_URL`` the
    URL is the broker's management listener, read from the environment and ``./.env`` as the broker
    reads them: ``https://HOST:OTTERMQ_WEB_SSL_PORT`` with ``OTTERMQ_WEB_SSL``, else
    ``http://HOST:OTTERMQ_WEB_PORT``, HOST being ``OTTERMQ_WEB_HOST`` or ``OTTERMQ_BROKER_HOST`` (all
    interfaces: ``localhost``), and the API under ``OTTERMQ_WEB_API_PATH``. The user and password
    default to the broker's default user (``OTTERMQ_USERNAME``/``OTTERMQ_PASSWORD``). A setting with a
    bad value counts as unset here.

    Returns:
        ``url`` (without the API path), ``api_path``, ``cafile`` (the CA bundle to verify that https
        URL: ``OTTERMQ_WEB_SSL_CA_FILE`` or ``OTTERMQ_SSL_CA_FILE``; empty = the system's), ``user``,
        ``password``, and ``origin``: where the URL comes from, for people (``OTTERMQ_ADMIN_URL``,
        ``OTTERMQ_WEB_PORT=15673``, or the default port when nothing sets one).
    """
    settings = _lenient_settings()
    admin = _lenient_admin_settings()
    url, api_path, cafile, origin = admin.url, "/api", "", "OTTERMQ_ADMIN_URL"
    if not url:
        host = settings.web_host or settings.broker_host
        host = "localhost" if host in _ANY_INTERFACE else host
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        port_field = "web_ssl_port" if settings.web_ssl else "web_port"
        port = getattr(settings, port_field)
        if settings.web_ssl:
            url = f"https://{host}:{port}"
            ca = settings.web_ssl_ca_file or settings.ssl_ca_file
            cafile = str(ca) if ca else ""
        else:
            url = f"http://{host}:{port}"
        api_path = settings.web_api_path.rstrip("/") or "/api"
        if port_field in settings.model_fields_set:
            origin = f"{env_name(port_field)}={port}"
        else:
            origin = f"the default {env_name(port_field)}={port}: neither the environment nor ./.env sets it"
    return {
        "url": url,
        "api_path": api_path,
        "cafile": cafile,
        "user": admin.user or settings.username,
        "password": admin.password or settings.password,
        "origin": origin,
    }


def _lenient_admin_settings() -> AdminSettings:
    try:
        return AdminSettings()
    except ValidationError:  # pragma: no cover - three plain strings cannot be invalid
        return AdminSettings.model_construct()


def _lenient_settings() -> Settings:
    """The settings as the broker reads them, each variable with a bad value counting as unset
    (the admin commands must still reach a broker whose start-up would stop on it)."""
    fields = Settings.model_fields
    unset: dict[str, Any] = {}  # a bad variable's field -> its default (arguments win over the environment)
    for _attempt in range(2):
        try:
            return Settings(**unset)
        except ValidationError as exc:
            bad = {str(err["loc"][0]).lower() for err in exc.errors() if err["loc"]}
            unset = {
                name: fields[name].get_default(call_default_factory=True) for name in bad if name in fields
            }
    return Settings.model_construct()


# Read by ``amqp/native.py`` from the process environment before anything else is imported (it picks the
# compiled or the pure-Python hot path), so it is no ``Settings`` field and ``.env`` cannot set it.
PURE_PYTHON = "OTTERMQ_PURE_PYTHON"
KNOWN_VARIABLES = frozenset(
    {env_name(f) for f in Settings.model_fields} | {"OTTERMQ_LOG_LEVEL", PURE_PYTHON} | set(ADMIN_DEFAULTS)
)


# Bare names that mean the AMQP listener (difflib alone would pick OTTERMQ_WEB_PORT for OTTERMQ_PORT)
_HINTS = {"PORT": "BROKER_PORT", "HOST": "BROKER_HOST"}


def unknown_variables(env_file: str | Path | None = ".env") -> list[str]:
    """Warnings for ``OTTERMQ_*`` variables in the environment or ``env_file`` that are no
    setting (pydantic-settings ignores them silently), each naming the closest known one.
    """
    sources: list[tuple[str, list[str]]] = [("the environment", list(os.environ))]
    if env_file is not None and Path(env_file).is_file():
        sources.append((str(env_file), list(dotenv_values(env_file))))
    warnings = []
    for where, names in sources:
        for name in sorted(names):
            upper = name.upper()
            if upper == PURE_PYTHON and where != "the environment":
                warnings.append(
                    f"{name} in {where} is ignored: the hot path is chosen before settings are read,"
                    " so set it in the environment (OTTERMQ_PURE_PYTHON=1 ottermq)"
                )
                continue
            if not upper.startswith("OTTERMQ_") or upper in KNOWN_VARIABLES:
                continue
            suffixes = {known.removeprefix("OTTERMQ_"): known for known in sorted(KNOWN_VARIABLES)}
            suffix = upper.removeprefix("OTTERMQ_")
            close = [_HINTS[suffix]] if suffix in _HINTS else []
            close = close or difflib.get_close_matches(suffix, suffixes, n=1, cutoff=0.5)
            hint = f"; did you mean {suffixes[close[0]]}?" if close else " (see ottermq serve --help)"
            warnings.append(f"unknown setting {name} in {where} is ignored{hint}")
    return warnings


def settings_help() -> str:
    """Every setting as ``NAME=default  description``, for ``ottermq serve --help``."""
    lines = []
    for field, info in Settings.model_fields.items():
        if info.default_factory is not None:
            default: Any = info.default_factory()  # type: ignore[call-arg]
        else:
            default = "" if info.default is PydanticUndefined else info.default
        if isinstance(default, bool):
            default = str(default).lower()
        elif isinstance(default, list):
            default = ",".join(default)
        elif default is None:
            default = ""
        elif isinstance(default, float) and default.is_integer():
            default = int(default)
        text = f"  {env_name(field)}={default}"
        if info.description:
            text += f"\n      {info.description}"
        lines.append(text)
    return "\n".join(lines)


def _set_but_empty(name: str, env_file: str | Path = ".env") -> bool:
    """Whether ``name`` is set to an empty value (the environment first, then ``.env``)."""
    if name in os.environ:
        return os.environ[name].strip() == ""
    if Path(env_file).is_file():
        value = dotenv_values(env_file).get(name)
        return value is not None and value.strip() == ""
    return False


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment and ``.env``.

    Raises:
        SystemExit: a variable has an invalid value; the message names it.
    """
    if "broker_port" not in overrides and _set_but_empty("OTTERMQ_BROKER_PORT"):
        overrides["broker_port"] = 0  # an empty value elsewhere means the default; here: no plain AMQP
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            var = env_name(field)
            problems.append(f"{var}: {err['msg']} (got {err.get('input')!r})")
        raise SystemExit("invalid configuration:\n  " + "\n  ".join(problems)) from None
