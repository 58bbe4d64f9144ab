"""``Lease``: which of the brokers sharing one PostgreSQL schema is the active one.

Rules:
- The truth is the row of ``ottermq_leader`` (``postgres_sql``): an epoch, its holder and a lease
  deadline on the database's clock (one clock for every broker: no skew between machines). Every
  commit of the active checks the epoch inside its transaction (``PostgresStore``, ``ottermq_fence``),
  so a broker that lost the leadership cannot commit, hence cannot confirm, anything.
- ``acquire`` waits as a standby until it can take over, then raises the epoch (``take_over``), in a
  transaction holding the fence lock exclusively: commits of the old active in flight finish first,
  later ones see the new epoch and fail. A standby takes over when
  * the leadership advisory lock is free: the active holds it on a connection of its own for its whole
    life, so a broker killed (``kill -9``, a crash, its machine's kernel closing the socket) frees it
    at once: the standby notices within one poll (``poll_seconds``);
  * or the lease ran out (the active did not renew it for ``lease_seconds``: paused, hung, cut off
    from the database): the standby first terminates the old holder's database sessions (its
    lock and its store connection, named ``ottermq <holder>`` in ``pg_stat_activity``), then takes
    over, with the lock when it can get it.
  * or nobody ever held it, or the last holder released it (a clean shutdown, ``release``).
  A free lock is not a dead active when the database itself restarted (every session ended, the
  active's too): while the lease runs, a standby that finds the lock free but the holder connected
  (a session named after it), or the server started after the holder's last renewal
  (``renewed_at``), lets the lock go again and waits: the active takes it back at its next renewal,
  or its lease runs out. A database restart shorter than the lease is not a failover.
- The active renews the lease every ``lease_seconds / 4`` (``UPDATE ... WHERE epoch = mine``; after a
  failed renewal, again every ``poll_seconds``, so a database back within the lease keeps it). A
  renewal that finds another epoch, a failed commit's fence, or no successful renewal for a whole
  ``lease_seconds`` (the database unreachable: a standby may be taking over) is the end: ``lost`` is
  called once, and the broker stops accepting publishes, closes its connections with 320 and exits.
  Every call has a deadline: a renewal gets what is left of the lease, counted from the moment the
  last successful renewal was *sent* (so the active's own count ends no later than the database's
  ``lease_until``), and a renewal still unanswered then drops its connection and ends the
  leadership: a database that stops answering (a silent partition) stops the active within its
  lease. The standby's calls have a deadline of ``max(lease_seconds, 2)``.
- ``failovers`` counts take-overs from a holder that had not released the lease (it died or was
  fenced); a take-over after a clean shutdown is not one.
- A standby is a broker that has reached the database once (``reached``). One that never has is
  misconfigured or early, not a standby: ``acquire`` gives up with ``Unreachable`` at once when the
  server refuses who we are (a role, password or database that does not exist), and otherwise once
  ``start_timeout`` seconds of failures have passed (each try bounded by what is left of it). A
  standby that loses the database keeps trying for ever, with a warning at most every
  ``WARN_EVERY`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from . import postgres_sql as pg
from .postgres_conn import IO_ERRORS, close_quietly, connect, describe, migrate, require_driver
from .store import StoreError

try:
    import asyncpg
except ImportError:  # pragma: no cover - the postgresql extra is not installed
    asyncpg = None

log = logging.getLogger(__name__)

T = TypeVar("T")

STANDBY, ACTIVE, LOST = "standby", "active", "lost"
TAKE_OVER_LOCK_TIMEOUT = "2s"  # a take-over waits at most this for commits in flight, then retries
WARN_EVERY = 10.0  # seconds between two "standby: PostgreSQL unreachable" warnings

# The server refused who we are: no point trying again (SQLSTATE 28000, 28P01, 3D000)
_REFUSED: tuple[type[BaseException], ...] = (
    (
        asyncpg.exceptions.InvalidAuthorizationSpecificationError,
        asyncpg.exceptions.InvalidPasswordError,
        asyncpg.exceptions.InvalidCatalogNameError,
    )
    if asyncpg is not None
    else ()
)


def _fix(exc: BaseException) -> str:
    """Which setting to check for a connection that failed with ``exc``."""
    if asyncpg is not None and isinstance(exc, asyncpg.exceptions.InvalidCatalogNameError):
        return "check the database in OTTERMQ_POSTGRES_URL (its path, or PGDATABASE)"
    if isinstance(exc, _REFUSED):
        return (
            "check the user and password in OTTERMQ_POSTGRES_URL (or PGUSER, PGPASSWORD,"
            " OTTERMQ_POSTGRES_PASSWORD_FILE)"
        )
    return (
        "check the host and port in OTTERMQ_POSTGRES_URL (or PGHOST, PGPORT), and that PostgreSQL runs;"
        " OTTERMQ_POSTGRES_START_TIMEOUT is how long a start tries"
    )


class Unreachable(StoreError):
    """A broker that has never reached its database gave up (see the module rules); ``fix`` names the
    setting to check."""

    def __init__(self, where: str, exc: BaseException, waited: float) -> None:
        reason = str(exc).strip() or type(exc).__name__
        if isinstance(exc, _REFUSED):
            text = f"PostgreSQL at {where} refused the connection: {reason}"
        else:
            text = f"cannot reach PostgreSQL at {where} (tried for {waited:.1f} s): {reason}"
        super().__init__(text)
        self.fix = _fix(exc)


class _Deadline(Exception):
    """A lease call got no answer in time (its connection was dropped)."""


_FAILED: tuple[type[BaseException], ...] = (*IO_ERRORS, _Deadline)  # the database failed us


def holder_name() -> str:
    """This broker's name in the leadership row: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Lease:
    """The leadership of the brokers sharing ``schema``.

    Args:
        url, password: as ``PostgresStore``'s.
        schema: the PostgreSQL schema whose ``ottermq_leader`` row is the leadership.
        lease_seconds: how long the active's lease lasts without a renewal (``OTTERMQ_LEASE_SECONDS``).
        poll_seconds: how often a standby checks (``OTTERMQ_STANDBY_POLL_SECONDS``).
        holder: this broker's name (default ``host:pid``).
        start_timeout: how long ``acquire`` tries to reach the database the first time
            (``OTTERMQ_POSTGRES_START_TIMEOUT``); None: for ever.

    Attributes:
        role: ``standby``, ``active`` or ``lost``.
        epoch: the epoch this broker holds (0 before it is active).
        failovers: take-overs so far, this one included (as read when taking over).
        on_lost: called once with the reason when an active loses the leadership.
        reached: the database answered this broker once (it is a standby, not misconfigured).
    """

    def __init__(
        self,
        url: str | None,
        *,
        schema: str = "ottermq",
        password: str | None = None,
        lease_seconds: float = 10.0,
        poll_seconds: float = 0.2,
        holder: str | None = None,
        start_timeout: float | None = None,
    ) -> None:
        self.url = url
        self.start_timeout = start_timeout
        self.reached = False
        self.schema = schema
        self.password = password
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.holder = holder or holder_name()
        self.application_name = f"ottermq {self.holder}"[:63]
        self.role = STANDBY
        self.epoch = 0
        self.failovers = 0
        self.on_lost: Callable[[str], None] | None = None
        self._conn: Any = None
        self._locked = False  # this broker holds the leadership advisory lock
        self._migrated = False  # the schema was created or checked
        self._renewed = 0.0  # time.monotonic() of the last successful renewal
        self._renewer: asyncio.Task[None] | None = None
        self._restart_noted = False  # the standby logged that it waits out a database restart
        self._lock_key, self._fence_key, _ = pg.lock_keys(schema)

    # -- connecting ---------------------------------------------------------------------------
    async def _connection(self, timeout: float) -> Any:
        conn = self._conn
        if conn is None or conn.is_closed():
            self._locked = False  # a session's advisory lock ends with it
            conn = self._conn = await connect(
                self.url, self.schema, self.password, self.application_name, max(timeout, 0.1)
            )
        return conn

    async def _bounded(self, timeout: float, step: Callable[[Any], Awaitable[T]]) -> T:
        """``step(connection)`` within ``timeout`` seconds, connecting first if needed; past the
        deadline the connection is dropped at once (``terminate``: a polite close would wait on the
        silent server) and ``_Deadline`` raised.

        Raises:
            _Deadline: no answer in time; IO_ERRORS: the database refused or failed.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            conn, self._conn, self._locked = self._conn, None, False
            if conn is not None:
                conn.terminate()

        handle = loop.call_at(deadline, expire)
        try:
            conn = await self._connection(deadline - loop.time())
            return await step(conn)
        except IO_ERRORS as exc:
            if expired:
                raise _Deadline(f"PostgreSQL did not answer within {timeout:.2g} s") from exc
            raise
        finally:
            handle.cancel()

    async def _try_lock(self, conn: Any) -> None:
        """Take the leadership advisory lock if this session does not hold it yet (never waits)."""
        if not self._locked:
            self._locked = bool(
                await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", pg.LOCK_CLASS, self._lock_key)
            )

    async def _unlock(self, conn: Any) -> None:
        if self._locked:
            await conn.fetchval("SELECT pg_advisory_unlock($1, $2)", pg.LOCK_CLASS, self._lock_key)
            self._locked = False

    # -- standby ------------------------------------------------------------------------------
    async def acquire(self) -> None:
        """Wait (a standby) until this broker is the active one; create the schema if it is new.

        Raises:
            StoreError: no driver, or the schema belongs to another program or a newer OtterMQ;
                ``Unreachable``: the database was never reached (see the module rules).
        """
        require_driver()
        loop = asyncio.get_running_loop()
        started = loop.time()
        announced = waiting = False
        warned_at, failures = -WARN_EVERY, 0
        while True:
            first = not self.reached and self.start_timeout is not None
            timeout = max(self.lease_seconds, 2.0)
            if first and self.start_timeout is not None:
                timeout = min(timeout, max(started + self.start_timeout - loop.time(), 0.1))
            try:
                if await self.try_acquire(timeout):
                    return
                if not announced:
                    holder = await self._bounded(max(self.lease_seconds, 2.0), self._current_holder)
                    log.info("standby: %s is active; waiting to take over", holder)
                    announced = True
            except StoreError:
                raise
            except _FAILED as exc:
                await self._drop_connection()
                waited = loop.time() - started
                if first and self.start_timeout is not None:
                    if isinstance(exc, _REFUSED) or waited + self.poll_seconds >= self.start_timeout:
                        raise Unreachable(describe(self.url), exc, waited) from None
                    if not waiting:
                        log.info("waiting for PostgreSQL at %s (%s)", describe(self.url), exc)
                        waiting = True
                else:
                    failures += 1
                    if loop.time() - warned_at >= WARN_EVERY:
                        more = f" ({failures} tries since the last warning)" if failures > 1 else ""
                        log.warning("standby: PostgreSQL unreachable (%s); retrying%s", exc, more)
                        warned_at, failures = loop.time(), 0
            await asyncio.sleep(self.poll_seconds)

    async def try_acquire(self, timeout: float | None = None) -> bool:
        """Take the leadership over if it is free now (see the module rules); never waits longer than
        ``timeout`` (default: ``max(lease_seconds, 2)``).

        Returns:
            True when this broker is now the active one.

        Raises:
            StoreError: no driver, or the schema belongs to another program or a newer OtterMQ.
            IO_ERRORS: PostgreSQL is unreachable.
        """
        require_driver()
        sent = time.monotonic()
        if not await self._bounded(
            max(self.lease_seconds, 2.0) if timeout is None else timeout, self._standby_step
        ):
            return False
        self.role = ACTIVE
        self._renewed = sent
        self._renewer = asyncio.get_running_loop().create_task(self._renew_forever())
        log.info(
            "active: took the leadership over (epoch %d, %d failovers so far)", self.epoch, self.failovers
        )
        return True

    async def _standby_step(self, conn: Any) -> bool:
        self.reached = True
        if not self._migrated:
            await migrate(conn, self.schema)
            self._migrated = True
        return await self._try_take_over(conn)

    async def _current_holder(self, conn: Any) -> str:
        row = await conn.fetchrow("SELECT holder FROM ottermq_leader WHERE id = 1")
        return str(row["holder"]) if row and row["holder"] else "another broker"

    async def _try_take_over(self, conn: Any) -> bool:
        await self._try_lock(conn)
        row = await conn.fetchrow(
            "SELECT epoch, holder, lease_until IS NULL OR lease_until < clock_timestamp() AS expired, "
            "renewed_at IS NOT NULL AND pg_postmaster_start_time() > renewed_at AS restarted, "
            "EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = "
            "'ottermq ' || left(holder, 55) AND pid <> pg_backend_pid()) AS connected "
            "FROM ottermq_leader WHERE id = 1"
        )
        holder, expired = row["holder"], row["expired"]
        if self._locked and holder is not None and not expired and (row["connected"] or row["restarted"]):
            # the lock is free because the database restarted, not because the active died: it is
            # connected again (without its lock yet), or has not come back since the restart
            await self._unlock(conn)
            if not self._restart_noted:
                log.warning(
                    "standby: the leadership lock is free but %s %s; waiting (its lease still runs)",
                    holder,
                    "is connected" if row["connected"] else "has not renewed since the database restarted",
                )
                self._restart_noted = True
            return False
        self._restart_noted = False
        if not self._locked:
            if not expired and holder is not None:
                return False  # the active is alive and renewing
            if holder is not None:  # its lease ran out while it still holds the lock: end its sessions
                ended = await conn.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = $1 AND pid <> pg_backend_pid()",
                    f"ottermq {holder}"[:63],
                )
                log.warning("standby: the lease of %s ran out; ended %d of its sessions", holder, ended)
        return await self.take_over(conn, int(row["epoch"]))

    async def take_over(self, conn: Any, seen: int) -> bool:
        """Raise the epoch from ``seen`` (the one this standby found expired or free) and write this
        broker's lease, once commits in flight are done. A compare-and-set: when another standby took
        over first (the epoch is no longer ``seen``), nothing changes.

        Returns:
            False when commits of the old active held the fence lock too long, or another standby
            took over meanwhile (try again: it is the active one now).
        """
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = '{TAKE_OVER_LOCK_TIMEOUT}'")
                await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", pg.LOCK_CLASS, self._fence_key)
                row = await conn.fetchrow(
                    "UPDATE ottermq_leader SET epoch = epoch + 1, holder = $1, "
                    "failovers = failovers + (holder IS NOT NULL)::int, renewed_at = clock_timestamp(), "
                    "lease_until = clock_timestamp() + make_interval(secs => $2) "
                    "WHERE id = 1 AND epoch = $3 RETURNING epoch, failovers",
                    self.holder,
                    float(self.lease_seconds),
                    seen,
                )
        except asyncpg.exceptions.LockNotAvailableError:
            log.warning("standby: commits of the old active still hold the fence; retrying")
            return False
        if row is None:
            log.info("standby: another standby took the leadership over first (after epoch %d)", seen)
            return False
        self.epoch, self.failovers = int(row["epoch"]), int(row["failovers"])
        return True

    # -- active -------------------------------------------------------------------------------
    async def _renew_forever(self) -> None:
        every = self.lease_seconds / 4
        retry = min(every, max(self.poll_seconds, 0.05))  # after a failure: a database back soon
        failed = False
        while self.role == ACTIVE:
            await asyncio.sleep(retry if failed else every)
            failed = False
            left = self._renewed + self.lease_seconds - time.monotonic()
            if left <= 0:  # failed renewals, or the process itself stalled (SIGSTOP, a long pause)
                self.lost(f"the lease was not renewed for {self.lease_seconds:g} s")
                return
            try:
                await self.renew(left)
            except _FAILED as exc:
                await self._drop_connection()
                # a renewal's deadline is the end of the lease: past it, the lease is over (the
                # clock check alone could miss it by the loop clock's resolution, and a standby takes
                # over at that moment)
                if isinstance(exc, _Deadline) or time.monotonic() - self._renewed >= self.lease_seconds:
                    self.lost(f"the lease could not be renewed for {self.lease_seconds:g} s ({exc})")
                else:
                    log.warning("active: renewing the lease failed (%s); retrying", exc)
                    failed = True

    async def renew(self, timeout: float | None = None) -> None:
        """Extend the lease (and take the advisory lock back after a reconnect), within ``timeout``
        seconds (default: what is left of the lease).

        Raises:
            IO_ERRORS: the database is unreachable (the caller retries until the lease ends);
            _Deadline: it did not answer in time.
        """
        if timeout is None:
            timeout = max(self._renewed + self.lease_seconds - time.monotonic(), 0.1)
        sent = time.monotonic()
        renewed = await self._bounded(timeout, self._renew_step)
        if renewed is None:
            self.lost(f"another broker took the leadership over (this one held epoch {self.epoch})")
            return
        self._renewed = max(self._renewed, sent)

    async def _renew_step(self, conn: Any) -> Any:
        await self._try_lock(conn)
        return await conn.fetchval(
            "UPDATE ottermq_leader SET lease_until = clock_timestamp() + make_interval(secs => $2), "
            "renewed_at = clock_timestamp() WHERE id = 1 AND epoch = $1 RETURNING epoch",
            self.epoch,
            float(self.lease_seconds),
        )

    @property
    def lease_age(self) -> float:
        """Seconds since the last successful renewal was sent (0 unless active)."""
        return time.monotonic() - self._renewed if self.role == ACTIVE else 0.0

    def fenced(self, reason: str) -> None:
        """A commit found the epoch moved on (``PostgresStore``)."""
        self.lost(reason)

    def lost(self, reason: str) -> None:
        """The end of this broker's leadership: tell ``on_lost`` once."""
        if self.role != ACTIVE:
            return
        self.role = LOST
        log.error("active: leadership lost: %s", reason)
        if self.on_lost is not None:
            self.on_lost(reason)

    async def release(self) -> None:
        """A clean shutdown: end the lease at once (a standby takes over without waiting) and close."""
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.cancel()
        if self.role == ACTIVE and self._conn is not None and not self._conn.is_closed():
            try:
                await self._bounded(2.0, self._release_step)
            except _FAILED as exc:
                log.warning("releasing the lease: %s", exc)
        self.role = STANDBY if self.role == ACTIVE else self.role
        await self._drop_connection(polite=True)

    async def _release_step(self, conn: Any) -> None:
        await conn.execute(
            "UPDATE ottermq_leader SET holder = NULL, lease_until = NULL WHERE id = 1 AND epoch = $1",
            self.epoch,
        )

    async def _drop_connection(self, polite: bool = False) -> None:
        """Forget the connection: closed politely (at most 2 s) on a clean release, else dropped at
        once (after a failure the server may not answer at all)."""
        conn, self._conn, self._locked = self._conn, None, False
        if conn is None or conn.is_closed():
            return
        if polite:
            await close_quietly(conn, 2)
        else:
            conn.terminate()
