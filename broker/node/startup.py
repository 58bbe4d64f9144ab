"""What the broker checks before it serves, and the one-line error it stops with.

Every failure before the listeners accept is a :class:`StartupError`: one line naming the setting,
its value, the cause and what to do (``cannot start: OTTERMQ_BROKER_PORT=5672: address already in
use (...)``). The start-up order itself is ``ottermq.broker.runtime``'s.
"""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
from pathlib import Path

from ottermq.persistence.store import StoreError

from ..config import Settings, env_name
from .definitions import DefinitionsError, DefinitionsFile, load_definitions_file


class StartupError(Exception):
    """The broker cannot start; ``str()`` is one line: ``SETTING=value: cause (what to do)``.

    Args:
        field: the ``Settings`` field at fault (``broker_port``).
        value: its value.
        cause: what went wrong, in a few words.
        fix: what to do about it (optional).
    """

    def __init__(self, field: str, value: object, cause: str, fix: str = "", *, in_use: bool = False) -> None:
        self.setting = env_name(field)
        self.in_use = in_use  # a listening address another process holds (it may let go soon)
        text = f"{self.setting}={'' if value is None else value}: {cause}"
        super().__init__(f"{text} ({fix})" if fix else text)


def os_cause(exc: OSError) -> str:
    """``[Errno 98] error while attempting to bind ...`` -> ``address already in use``."""
    if isinstance(exc, FileExistsError):  # mkdir on a file
        return "not a directory"
    if exc.errno:  # uvloop's strerror is a whole sentence
        return os.strerror(exc.errno).lower()
    return (exc.strerror or str(exc)).lower()


def listener_startup_error(settings: Settings, exc: OSError, port_field: str, switch: str) -> StartupError:
    """The one-line start-up error for an HTTP listener (the management API's ``web_port``, the
    metrics' ``prometheus_port``) whose address cannot be bound; ``switch`` is the field that turns
    the listener off (``enable_web_api``, ``enable_prometheus``)."""
    port = getattr(settings, port_field)
    if exc.errno == errno.EADDRINUSE:
        fix = f"set {env_name(port_field)} to a free port, or {env_name(switch)}=false"
        return StartupError(port_field, port, os_cause(exc), fix, in_use=True)
    if settings.web_host or settings.broker_host:  # unknown or foreign address
        field = "web_host" if settings.web_host else "broker_host"
        return StartupError(field, settings.web_host or settings.broker_host, os_cause(exc))
    return StartupError(port_field, port, os_cause(exc))


def lock_data_dir(data_dir: Path) -> int:
    """Take an exclusive lock on the data dir (created if missing) so two brokers never share one
    store.

    Raises:
        StoreError: another process holds the lock.
        OSError: the directory cannot be created or written (a file, no permission).
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StoreError(f"data dir {data_dir} is {_in_use(data_dir)}") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


def _in_use(data_dir: Path) -> str:
    """``in use by another OtterMQ process (pid N)``: the holder writes its pid into ``.lock``."""
    try:
        holder = (data_dir / ".lock").read_text("ascii", "replace").strip()
    except OSError:
        holder = ""
    return "in use by another OtterMQ process" + (f" (pid {holder})" if holder.isdigit() else "")


def prepare_data_dir(settings: Settings) -> int | None:
    """Lock ``OTTERMQ_DATA_DIR`` (durable stores: SQLite's file, and with PostgreSQL the dead-letter
    move jobs' state); returns the lock's descriptor.

    Raises:
        StartupError: the directory is a file, not writable, or in use.
    """
    if settings.store == "memory":
        return None
    try:
        return lock_data_dir(settings.data_dir)
    except StoreError:
        raise StartupError(
            "data_dir",
            settings.data_dir,
            _in_use(settings.data_dir),
            "stop it, or set OTTERMQ_DATA_DIR to another directory",
        ) from None
    except OSError as exc:
        raise StartupError(
            "data_dir", settings.data_dir, os_cause(exc), "set OTTERMQ_DATA_DIR to a writable directory"
        ) from None


def check_archive_dir(settings: Settings) -> None:
    """Create ``OTTERMQ_DLX_ARCHIVE_DIR`` if missing and check a file can be written there.

    Raises:
        StartupError: it cannot.
    """
    directory = settings.dlx_archive_dir
    if directory is None:
        return
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise StartupError(
            "dlx_archive_dir",
            directory,
            os_cause(exc),
            "set OTTERMQ_DLX_ARCHIVE_DIR to a writable directory, or empty for no archive",
        ) from None


def read_definitions(settings: Settings) -> DefinitionsFile | None:
    """Parse ``OTTERMQ_DEFINITIONS_FILE`` (None when unset); reads only.

    Raises:
        StartupError: missing, unreadable or invalid file.
    """
    path = settings.definitions_file
    if path is None:
        return None
    try:
        return load_definitions_file(path)
    except DefinitionsError as exc:
        cause = str(exc)
        if isinstance(exc.__context__, OSError):
            cause = os_cause(exc.__context__)
        raise StartupError("definitions_file", path, cause) from None
