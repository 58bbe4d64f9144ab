"""Users, virtual hosts and permissions, as RabbitMQ 3.10's internal auth backend.

Password hashes use RabbitMQ's format, so hashes move both ways through definitions files:
``base64(salt + H(salt + password octets))`` with a random 4-byte salt and ``H`` named by the user's
``hashing_algorithm`` (``rabbit_password_hashing_sha256`` by default, ``_sha512`` and the legacy
``_md5`` are also checked).

Login rules (``AuthDB.login``, the one check behind PLAIN, AMQPLAIN, EXTERNAL, HTTP Basic, the web
UI's login and ``update-secret``; each measured on RabbitMQ 3.10.8):

- User names and passwords are octets, compared as sent: a name that is not UTF-8 names nobody, and
  a password is hashed as its bytes (``\xff`` is not ``U+FFFD``; NUL is an ordinary octet).
- An empty password never logs in, whatever the stored hash (RabbitMQ creates a user with
  ``{"password": ""}`` and hashes it, but refuses ``""`` at login: AMQP 403, HTTP 401).
- A user whose hash is empty has no password (RabbitMQ's ``password_hash: ""``): no password logs
  it in; it logs in with a verified client certificate (SASL EXTERNAL) only.
- A user in ``loopback_users`` logs in from a loopback address only.

The internal principal (``AuthDB.set_internal``): the node's own AMQP client (a shovel's local end,
``broker/shovel/link.py``) logs in as ``INTERNAL_USER`` with a secret made at every start (never
stored; worker 0 gives it to the other workers), compared in constant time. It is no user (not
listed, not exported, its name may also be a user's, who keeps logging in with its own password),
it may open every vhost and do everything in it, and it may publish any ``user_id`` (RabbitMQ's
local shovel connects as its ``none`` user, which has every permission).

Permission rules (``rabbit_access_control`` + ``rabbit_auth_backend_internal``):

- A user reaches a vhost only if it has a permission entry there, even an all-empty one.
  ``Connection.Open`` on a missing vhost is refused first, with a different text.
- Each of ``configure``/``write``/``read`` is a regular expression *searched* (not anchored)
  in the resource name: ``cfg`` allows ``x.cfg.1``; anchor it yourself (``^cfg``). The empty
  string means ``^$``, which matches nothing a client can name.
- The default exchange ``""`` is checked under the name ``amq.default`` (the refusal names it
  that way too).
- Checks run before the resource is looked up: a refused operation on a missing resource is a 403,
  not a 404. Dead-lettering, alternate-exchange routing and expiry check nothing.

Which method needs what (verified against RabbitMQ 3.10.8 with pika; every refusal is a channel
error ``403 ACCESS_REFUSED - access to <kind> '<name>' in vhost '<vhost>' refused for user
'<user>'``). Rows with several checks list them in the order RabbitMQ makes them; the first
failing one is reported:

=====================  ==============================================================================
method                 checks
=====================  ==============================================================================
exchange.declare       configure on the exchange (not when ``passive``: a passive declare needs
                       nothing). When the exchange is created and has an ``alternate-exchange``
                       argument, then: read on the exchange, write on the alternate exchange.
exchange.delete        configure on the exchange
exchange.bind/unbind   write on the destination exchange, then read on the source exchange
queue.declare          configure on the queue (on the generated ``amq.gen-...`` name for a
                       server-named queue; nothing when ``passive``). When the queue is created and
                       has an ``x-dead-letter-exchange`` argument, then: read on the queue, write on
                       the dead-letter exchange (``""`` -> ``amq.default``).
queue.delete           configure on the queue
queue.purge            read on the queue
queue.bind/unbind      write on the queue, then read on the exchange
basic.publish          write on the exchange (``""`` -> ``amq.default``)
basic.consume          read on the queue
basic.get              read on the queue
(everything else)      nothing: basic.ack/nack/reject/recover/qos/cancel, channel.*, confirm.select,
                       tx.*, dead-lettering, alternate-exchange routing, expiry
=====================  ==============================================================================

``REQUIRED_PERMISSIONS`` holds the same table as data. For the queue methods an empty queue
name means the channel's most recently declared queue, and the check applies to that name.

Connection-level texts (``Connection.Close``):

- missing vhost: ``530 NOT_ALLOWED - vhost <vhost> not found`` (no quotes, RabbitMQ's text)
- no permission entry: ``530 NOT_ALLOWED - access to vhost '<vhost>' refused for user '<user>'``
- bad user, bad password, or a loopback-only user from another address:
  ``403 ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see
  the broker logfile.`` (see ``login_refused_text``).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import ipaddress
import logging
import os
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING

from ottermq.amqp.errors import AccessRefused, NotAllowed
from ottermq.persistence.store import (
    Definitions,
    PermissionRecord,
    Store,
    UserRecord,
    VHostRecord,
)
from ottermq.vhost.patterns import Pattern, PatternError, PatternTimeout, compile_pattern

from .requirements import REQUIRED_PERMISSIONS, Permission, Requirement, ResourceKind, required_permissions

if TYPE_CHECKING:
    from ..config import Settings

__all__ = [
    "DEFAULT_HASHING_ALGORITHM",
    "HASHING_ALGORITHMS",
    "REQUIRED_PERMISSIONS",
    "AuthDB",
    "AuthError",
    "Permission",
    "Requirement",
    "ResourceKind",
    "check_password",
    "hash_password",
    "is_loopback",
    "login_refused_text",
    "required_permissions",
]

log = logging.getLogger(__name__)

DEFAULT_HASHING_ALGORITHM = "rabbit_password_hashing_sha256"
HASHING_ALGORITHMS: dict[str, Callable[[bytes], bytes]] = {
    "rabbit_password_hashing_sha256": lambda data: hashlib.sha256(data).digest(),
    "rabbit_password_hashing_sha512": lambda data: hashlib.sha512(data).digest(),
    "rabbit_password_hashing_md5": lambda data: hashlib.md5(data).digest(),
}
SALT_SIZE = 4
FULL_ACCESS = ".*"
_DUMMY_HASH = base64.b64encode(bytes(SALT_SIZE + 32)).decode("ascii")
_CACHE_LIMIT = 4096
INTERNAL_USER = "ottermq-internal"  # the internal principal's name in connection listings
IMPERSONATOR = "impersonator"  # RabbitMQ's tag of users who may publish any user_id


class AuthError(ValueError):
    """An administrative change is impossible (unknown user or vhost, bad regex, duplicate...)."""


# ---------------------------------------------------------------------------------------------
# passwords
# ---------------------------------------------------------------------------------------------
def _hasher(algorithm: str) -> Callable[[bytes], bytes]:
    try:
        return HASHING_ALGORITHMS[algorithm]
    except KeyError:
        raise AuthError(f"unsupported password hashing algorithm '{algorithm}'") from None


def _octets(text: str | bytes) -> bytes:
    """A credential's octets: bytes as they are, text as UTF-8 (a lone surrogate kept, never raised)."""
    return text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")


def hash_password(password: str | bytes, algorithm: str = DEFAULT_HASHING_ALGORITHM) -> str:
    """RabbitMQ's password hash: base64 of a random 4-byte salt + ``H(salt + password octets)``
    (text is hashed as UTF-8).

    Raises:
        AuthError: ``algorithm`` is not one of ``HASHING_ALGORITHMS``.
    """
    digest = _hasher(algorithm)
    salt = os.urandom(SALT_SIZE)
    return base64.b64encode(salt + digest(salt + _octets(password))).decode("ascii")


def check_password(
    password: str | bytes, password_hash: str, algorithm: str = DEFAULT_HASHING_ALGORITHM
) -> bool:
    """Whether ``password`` logs in against ``password_hash`` (constant-time compare of the digest
    of its octets).

    An empty password matches nothing, whatever the hash (RabbitMQ refuses it at login); an empty
    hash (a password-less user), a malformed one or an unknown algorithm matches nothing either.
    """
    digest = HASHING_ALGORITHMS.get(algorithm)
    if digest is None:
        return False
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except (binascii.Error, ValueError):
        return False
    if len(raw) <= SALT_SIZE:
        return False
    octets = _octets(password)
    salt, expected = raw[:SALT_SIZE], raw[SALT_SIZE:]
    matches = hmac.compare_digest(expected, digest(salt + octets))
    return matches and bool(octets)


def _name(username: str | bytes) -> str | None:
    """A user name as sent, as text; None for octets that are not UTF-8 (they name nobody)."""
    if isinstance(username, str):
        return username
    try:
        return username.decode("utf-8")
    except UnicodeDecodeError:
        return None


def is_loopback(host: str) -> bool:
    """Whether a peer address is loopback (127.0.0.0/8, ``::1``, IPv4-mapped ``::ffff:127.x``)."""
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return host == "localhost"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def login_refused_text(mechanism: str = "PLAIN") -> str:
    """RabbitMQ's reply text (without ``ACCESS_REFUSED - ``) for any failed login."""
    return (
        f"Login was refused using authentication mechanism {mechanism}. For details see the broker logfile."
    )


# ---------------------------------------------------------------------------------------------
# the database
# ---------------------------------------------------------------------------------------------
def _compile(regex: str) -> Pattern:
    """RabbitMQ's reading of a permission regex: the empty string means ``^$``. Matching is bounded
    (``vhost.patterns``): a PCRE-only pattern that runs out of time refuses.

    Raises:
        AuthError: the expression does not compile.
    """
    try:
        return compile_pattern(regex or "^$")
    except PatternError as exc:
        raise AuthError(f"regular expression '{regex}' is invalid: {exc}") from None


class AuthDB:
    """Users, vhosts and permissions in memory, written through to an optional ``Store``.

    Args:
        store: when given, every mutation also queues the matching ``put_*``/``delete_*``.
        loopback_users: users allowed to log in only from a loopback address
            (``OTTERMQ_LOOPBACK_USERS``, RabbitMQ's ``loopback_users``).
    """

    def __init__(self, store: Store | None = None, *, loopback_users: Collection[str] = ("guest",)) -> None:
        self.store = store
        self.loopback_users = frozenset(loopback_users)
        self.users: dict[str, UserRecord] = {}
        self.vhosts: dict[str, VHostRecord] = {}
        self.permissions: dict[tuple[str, str], PermissionRecord] = {}
        self._patterns: dict[str, Pattern] = {}
        self._allowed: dict[tuple[str, str, str, str, str], bool] = {}
        self.internal: UserRecord | None = None  # the internal principal (set_internal)
        self._internal_secret = b""

    def set_internal(self, secret: str) -> UserRecord:
        """Let the internal principal log in with ``secret`` (see the module docstring)."""
        self._internal_secret = secret.encode("utf-8")
        self.internal = UserRecord(INTERNAL_USER, "", tags=[IMPERSONATOR])
        return self.internal

    @property
    def internal_secret(self) -> str:
        """The internal principal's secret (worker 0 hands it to the other workers)."""
        return self._internal_secret.decode("utf-8")

    # -- loading -----------------------------------------------------------------------------
    def load(self, defs: Definitions) -> None:
        """Replace the contents with ``defs`` (as read from the store); writes nothing back.

        Permissions with a regex Python cannot compile are kept and match nothing (logged).
        """
        self.users = {u.name: dataclasses.replace(u, tags=list(u.tags)) for u in defs.users}
        self.vhosts = {v.name: dataclasses.replace(v, tags=list(v.tags)) for v in defs.vhosts}
        self.permissions = {(p.user, p.vhost): dataclasses.replace(p) for p in defs.permissions}
        self._invalidate()
        for perm in self.permissions.values():
            for regex in (perm.configure, perm.write, perm.read):
                try:
                    self._pattern(regex)
                except AuthError as exc:
                    log.warning("user '%s' in vhost '%s': %s; it matches nothing", perm.user, perm.vhost, exc)

    def seed_defaults(self, settings: Settings) -> bool:
        """RabbitMQ's first-boot defaults from ``OTTERMQ_USERNAME``/``PASSWORD``/``VHOSTS``.

        With no users at all (first boot) the default user is created with the ``administrator``
        tag. Every vhost in ``settings.vhosts`` that does not exist yet is created, and the
        default user (if it exists) gets full permissions (``.*`` x 3) on each vhost created now.
        Existing users, vhosts and permissions are never touched.

        Returns:
            True if this was a first boot (the default user was created).
        """
        first_boot = not self.users
        if first_boot:
            password = settings.password or None  # an empty password would never log in
            self.add_user(settings.username, password, tags=["administrator"])
            log.info("created default user '%s'", settings.username)
            if password is None:
                log.warning(
                    "OTTERMQ_PASSWORD is empty: user '%s' has no password and can log in only with a"
                    " client certificate (SASL EXTERNAL)",
                    settings.username,
                )
        for name in settings.vhosts:
            if name in self.vhosts:
                continue
            self.add_vhost(name)
            log.info("created vhost '%s'", name)
            if settings.username in self.users:
                self.set_permissions(settings.username, name, FULL_ACCESS, FULL_ACCESS, FULL_ACCESS)
        return first_boot

    def password_differs(self, username: str, password: str) -> bool:
        """True when ``username`` is stored and ``password`` is not its password (so a changed
        ``OTTERMQ_PASSWORD`` has no effect, as RabbitMQ's ``default_pass`` after the first boot)."""
        user = self.users.get(username)
        if user is None or not user.password_hash:
            return False
        return not check_password(password, user.password_hash, user.hashing_algorithm)

    # -- authentication and authorisation ----------------------------------------------------
    def login(self, username: str | bytes, password: str | bytes | None, peer_host: str) -> UserRecord | None:
        """The one login check (see the module's login rules), for every mechanism.

        Args:
            username: as the client sent it (bytes from SASL and HTTP Basic).
            password: as the client sent it; None when the credential is a verified client
                certificate naming the user (SASL EXTERNAL): no password is checked then.
            peer_host: the client's address, for ``loopback_users``.

        Returns:
            The user, or None when the login is refused (RabbitMQ gives every refusal the same
            answer, ``login_refused_text``).
        """
        name = _name(username)
        internal = self.internal
        if internal is not None and password is not None and name == INTERNAL_USER:
            if hmac.compare_digest(_octets(password), self._internal_secret):
                return internal
        user = None if name is None else self.users.get(name)
        if user is None:
            if password is not None:
                check_password(password or b"-", _DUMMY_HASH)  # about the same work as for a known user
            return None
        if password is not None and not check_password(password, user.password_hash, user.hashing_algorithm):
            return None
        if user.name in self.loopback_users and not is_loopback(peer_host):
            log.warning("user '%s' can only connect via localhost", user.name)
            return None
        return user

    def authenticate(self, username: str | bytes, password: str | bytes, peer_host: str) -> UserRecord | None:
        """A password login (PLAIN, AMQPLAIN, HTTP Basic): ``login`` with a password."""
        return self.login(username, password, peer_host)

    def authenticate_external(self, username: str | bytes, peer_host: str) -> UserRecord | None:
        """SASL EXTERNAL: ``login`` as the user a verified client certificate names, if it exists (the
        certificate is the credential; a password-less user logs in this way only)."""
        return self.login(username, None, peer_host)

    def check_vhost(self, user: UserRecord, vhost: str) -> None:
        """``Connection.Open``: the vhost must exist and the user needs a permission entry there.

        Raises:
            NotAllowed: ``vhost <vhost> not found`` or
                ``access to vhost '<vhost>' refused for user '<user>'`` (530, RabbitMQ's texts).
        """
        if vhost not in self.vhosts:
            raise NotAllowed(f"vhost {vhost} not found")
        if user is not self.internal and (user.name, vhost) not in self.permissions:
            raise NotAllowed(f"access to vhost '{vhost}' refused for user '{user.name}'")

    def is_allowed(
        self, user: UserRecord, vhost: str, permission: Permission, kind: ResourceKind, name: str
    ) -> bool:
        """Whether ``user`` holds ``permission`` on the resource (see the module rules)."""
        if user is self.internal:
            return True
        if kind == "exchange" and name == "":
            name = "amq.default"
        key = (user.name, vhost, permission, kind, name)
        allowed = self._allowed.get(key)
        if allowed is None:
            perm = self.permissions.get((user.name, vhost))
            if perm is None:
                allowed = False
            else:
                try:
                    allowed = self._pattern(getattr(perm, permission)).search(name)
                except (AuthError, PatternTimeout):
                    allowed = False
            if len(self._allowed) >= _CACHE_LIMIT:
                self._allowed.clear()
            self._allowed[key] = allowed
        return allowed

    def check(
        self, user: UserRecord, vhost: str, permission: Permission, kind: ResourceKind, name: str
    ) -> None:
        """Raise unless ``user`` holds ``permission`` on ``kind`` ``name`` in ``vhost``.

        Raises:
            AccessRefused: ``access to queue 'q' in vhost '/' refused for user 'bob'`` (403); the
                default exchange is named ``amq.default``.
        """
        if not self.is_allowed(user, vhost, permission, kind, name):
            shown = "amq.default" if kind == "exchange" and name == "" else name
            raise AccessRefused(
                f"access to {kind} '{shown}' in vhost '{vhost}' refused for user '{user.name}'"
            )

    # -- users -------------------------------------------------------------------------------
    def add_user(
        self,
        name: str,
        password: str | None,
        tags: Iterable[str] = (),
        hashing_algorithm: str = DEFAULT_HASHING_ALGORITHM,
    ) -> UserRecord:
        """Create a user; ``password=None`` creates one that cannot log in with a password.

        Raises:
            AuthError: the user exists, or the algorithm is unknown.
        """
        if name in self.users:
            raise AuthError(f"User {name} already exists")
        password_hash = "" if password is None else hash_password(password, hashing_algorithm)
        return self.put_user(UserRecord(name, password_hash, hashing_algorithm, list(tags)))

    def put_user(self, record: UserRecord) -> UserRecord:
        """Create or replace a user record as given (hash included, as definitions import does)."""
        record = dataclasses.replace(record, tags=list(record.tags))
        self.users[record.name] = record
        if self.store is not None:
            self.store.put_user(dataclasses.replace(record, tags=list(record.tags)))
        return record

    def change_password(self, name: str, password: str) -> UserRecord:
        """Set a new password (hashed with the default algorithm, as RabbitMQ does).

        Raises:
            AuthError: no such user.
        """
        user = self._user(name)
        return self.put_user(
            dataclasses.replace(
                user,
                password_hash=hash_password(password, DEFAULT_HASHING_ALGORITHM),
                hashing_algorithm=DEFAULT_HASHING_ALGORITHM,
            )
        )

    def delete_user(self, name: str) -> None:
        """Delete a user and all its permissions.

        Raises:
            AuthError: no such user.
        """
        self._user(name)
        for user, vhost in [key for key in self.permissions if key[0] == name]:
            self.clear_permissions(user, vhost)
        del self.users[name]
        if self.store is not None:
            self.store.delete_user(name)

    # -- vhosts ------------------------------------------------------------------------------
    def add_vhost(self, name: str, description: str = "", tags: Iterable[str] = ()) -> VHostRecord:
        """Create a vhost, or return the existing one unchanged.

        Raises:
            AuthError: the name is empty.
        """
        existing = self.vhosts.get(name)
        if existing is not None:
            return existing
        if not name:
            raise AuthError("a vhost name cannot be empty")
        record = VHostRecord(name, description, list(tags))
        self.vhosts[name] = record
        if self.store is not None:
            self.store.put_vhost(dataclasses.replace(record, tags=list(record.tags)))
        return record

    def delete_vhost(self, name: str) -> None:
        """Delete a vhost's record and every permission on it (its entities are the broker's job).

        Raises:
            AuthError: no such vhost.
        """
        self._vhost(name)
        for user, vhost in [key for key in self.permissions if key[1] == name]:
            self.clear_permissions(user, vhost)
        del self.vhosts[name]
        if self.store is not None:
            self.store.delete_vhost(name)

    # -- permissions -------------------------------------------------------------------------
    def set_permissions(
        self, user: str, vhost: str, configure: str, write: str, read: str
    ) -> PermissionRecord:
        """Grant (replace) a user's permissions on a vhost.

        Raises:
            AuthError: unknown user or vhost, or a regex that does not compile.
        """
        self._user(user)
        self._vhost(vhost)
        for regex in (configure, write, read):
            self._pattern(regex)
        record = PermissionRecord(user, vhost, configure, write, read)
        self.permissions[(user, vhost)] = record
        self._invalidate()
        if self.store is not None:
            self.store.put_permission(dataclasses.replace(record))
        return record

    def clear_permissions(self, user: str, vhost: str) -> None:
        """Remove a user's permissions on a vhost (no error if there were none)."""
        if self.permissions.pop((user, vhost), None) is None:
            return
        self._invalidate()
        if self.store is not None:
            self.store.delete_permission(user, vhost)

    # -- helpers -----------------------------------------------------------------------------
    def _user(self, name: str) -> UserRecord:
        try:
            return self.users[name]
        except KeyError:
            raise AuthError(f"User {name} does not exist") from None

    def _vhost(self, name: str) -> VHostRecord:
        try:
            return self.vhosts[name]
        except KeyError:
            raise AuthError(f"Virtual host {name} does not exist") from None

    def _pattern(self, regex: str) -> Pattern:
        pattern = self._patterns.get(regex)
        if pattern is None:
            pattern = self._patterns[regex] = _compile(regex)
        return pattern

    def _invalidate(self) -> None:
        self._allowed.clear()
