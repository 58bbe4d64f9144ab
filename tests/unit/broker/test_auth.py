"""Users, vhosts and permissions (``ottermq.broker.node.auth``).

Every hash below was produced by RabbitMQ 3.10.8 (``rabbitmqctl add_user`` + ``export_definitions``;
the sha512 and md5 ones with ``password_hashing_module`` switched for the call), and every refusal
text is the reply RabbitMQ 3.10.8 sent to pika for a user with ``configure "cfg"``, ``write "wr"``,
``read "rd"`` on vhost ``ottprobe`` (minus the ``ACCESS_REFUSED - `` / ``NOT_ALLOWED - `` prefix).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from ottermq.amqp.errors import AccessRefused, NotAllowed
from ottermq.broker.config import Settings
from ottermq.broker.node.auth import (
    DEFAULT_HASHING_ALGORITHM,
    REQUIRED_PERMISSIONS,
    AuthDB,
    AuthError,
    Requirement,
    check_password,
    hash_password,
    is_loopback,
    login_refused_text,
    required_permissions,
)
from ottermq.persistence.store import Definitions, PermissionRecord, UserRecord, VHostRecord

SHA256 = "rabbit_password_hashing_sha256"
SHA512 = "rabbit_password_hashing_sha512"
MD5 = "rabbit_password_hashing_md5"

RABBITMQ_HASHES = [
    ("s3cret-Pässword", "eeu6sEb9Fb/zZvxR+7GR1JUYMJ7mHT8anjnjeUvGiAXCHxd6", SHA256),
    ("guest", "CitKeqmWSbLfPYCSGYWpJdImuJKli9p2c1QinsNvFTY2gQE7", SHA256),
    ("bobpw", "ZuQOnuV7PHaN56S6io8WNRCH+dRBtzElvPx9+4SR2G3a7kG1", SHA256),
    (
        "pw-sha512-Ünï",
        "+6Qyni8SE5gFio/GDdb+JM6uN7ynzEU0AHugQJciqJplUTpWoFxC5REUkQiKn+rYk1bX7jOhQakOrJRQOxjVobbMrsU=",
        SHA512,
    ),
    ("pw-md5-Ünï", "C2urCPBwD3xA2eiaLbFM0NWAbSM=", MD5),
]


class FakeStore:
    """Records the definition writes ``AuthDB`` queues (the rest of ``Store`` is not needed)."""

    def __init__(self) -> None:
        self.ops: list[tuple[Any, ...]] = []

    def put_vhost(self, record: VHostRecord) -> None:
        self.ops.append(("put_vhost", record))

    def delete_vhost(self, name: str) -> None:
        self.ops.append(("delete_vhost", name))

    def put_user(self, record: UserRecord) -> None:
        self.ops.append(("put_user", record))

    def delete_user(self, name: str) -> None:
        self.ops.append(("delete_user", name))

    def put_permission(self, record: PermissionRecord) -> None:
        self.ops.append(("put_permission", record))

    def delete_permission(self, user: str, vhost: str) -> None:
        self.ops.append(("delete_permission", user, vhost))

    def kinds(self) -> list[str]:
        return [op[0] for op in self.ops]


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "username": "guest",
        "password": "guest",
        "vhosts": ["/"],
        "loopback_users": ["guest"],
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def db() -> AuthDB:
    """RabbitMQ's probe set-up: bob (cfg/wr/rd), empty (all ""), none (no entry) on ``ottprobe``."""
    auth = AuthDB(loopback_users=["guest"])
    auth.add_vhost("ottprobe")
    auth.add_vhost("/")
    auth.add_user("guest", "guest", tags=["administrator"])
    auth.add_user("ottprobe_bob", "bobpw")
    auth.add_user("ottprobe_empty", "emptypw")
    auth.add_user("ottprobe_none", "nonepw")
    auth.set_permissions("guest", "/", ".*", ".*", ".*")
    auth.set_permissions("ottprobe_bob", "ottprobe", "cfg", "wr", "rd")
    auth.set_permissions("ottprobe_empty", "ottprobe", "", "", "")
    return auth


# ---------------------------------------------------------------------------------------------
# passwords
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("password", "password_hash", "algorithm"), RABBITMQ_HASHES)
def test_rabbitmq_hashes_check(password: str, password_hash: str, algorithm: str) -> None:
    assert check_password(password, password_hash, algorithm)
    assert not check_password(password + "x", password_hash, algorithm)
    assert not check_password(password.upper(), password_hash, algorithm)


def test_rabbitmq_hash_needs_its_algorithm() -> None:
    password, password_hash, _ = RABBITMQ_HASHES[3]
    assert not check_password(password, password_hash, SHA256)


@pytest.mark.parametrize(("algorithm", "digest_size"), [(SHA256, 32), (SHA512, 64), (MD5, 16)])
def test_hash_password_format(algorithm: str, digest_size: int) -> None:
    first = hash_password("pässword", algorithm)
    second = hash_password("pässword", algorithm)
    assert len(base64.b64decode(first)) == 4 + digest_size
    assert first != second  # random salt
    assert check_password("pässword", first, algorithm)
    assert check_password("pässword", second, algorithm)
    assert not check_password("password", first, algorithm)


def test_hash_password_defaults_to_sha256() -> None:
    assert DEFAULT_HASHING_ALGORITHM == SHA256
    assert check_password("x", hash_password("x"), SHA256)


def test_hash_password_unknown_algorithm() -> None:
    with pytest.raises(AuthError, match="unsupported password hashing algorithm 'rot13'"):
        hash_password("x", "rot13")


@pytest.mark.parametrize("bad", ["", "AAAA", "not base64!", "AAAAAA=="])
def test_malformed_hashes_match_nothing(bad: str) -> None:
    assert not check_password("", bad)
    assert not check_password("x", bad)


def test_unknown_algorithm_matches_nothing() -> None:
    assert not check_password("guest", RABBITMQ_HASHES[1][1], "rabbit_password_hashing_rot13")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.4.5.6", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("192.0.2.2", False),
        ("10.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("fe80::1%eth0", False),
        ("", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_login_refused_text() -> None:
    assert login_refused_text() == (
        "Login was refused using authentication mechanism PLAIN. For details see the broker logfile."
    )
    assert login_refused_text("AMQPLAIN").startswith(
        "Login was refused using authentication mechanism AMQPLAIN."
    )


# ---------------------------------------------------------------------------------------------
# authentication
# ---------------------------------------------------------------------------------------------
def test_authenticate(db: AuthDB) -> None:
    user = db.authenticate("ottprobe_bob", "bobpw", "127.0.0.1")
    assert user is not None and user.name == "ottprobe_bob"
    assert db.authenticate("ottprobe_bob", "wrong", "127.0.0.1") is None
    assert db.authenticate("nobody", "bobpw", "127.0.0.1") is None
    assert db.authenticate("ottprobe_bob", "bobpw", "192.0.2.2") is not None  # not loopback-only


def test_loopback_users_only_from_loopback(db: AuthDB) -> None:
    assert db.authenticate("guest", "guest", "127.0.0.1") is not None
    assert db.authenticate("guest", "guest", "::1") is not None
    assert db.authenticate("guest", "guest", "192.0.2.2") is None
    assert AuthDB(loopback_users=[]).loopback_users == frozenset()


def test_user_without_password_cannot_log_in(db: AuthDB) -> None:
    db.add_user("nopass", None)
    assert db.users["nopass"].password_hash == ""
    assert db.authenticate("nopass", "", "127.0.0.1") is None


# The one login rule (``AuthDB.login``), every credential as octets; each row's outcome is RabbitMQ
# 3.10.8's for the same user and credentials (PLAIN, AMQPLAIN and HTTP Basic all agree there).
# Users: "pw" (password "pw"), "empty" (created with password ""), "certonly" (password_hash ""),
# "nul" ("a\0b"), "fffd" ("\ufffd"), "ete" ("été"), "big" (64 KB of "p"), "guest" (loopback only).
LOGINS: list[tuple[str, bytes, bytes | None, str, str | None]] = [
    ("right password", b"pw", b"pw", "192.0.2.1", "pw"),
    ("wrong password", b"pw", b"pW", "192.0.2.1", None),
    ("empty password of a user created with ''", b"empty", b"", "192.0.2.1", None),
    ("any password of a user created with ''", b"empty", b"x", "192.0.2.1", None),
    ("empty password of a password-less user", b"certonly", b"", "192.0.2.1", None),
    ("any password of a password-less user", b"certonly", b"certonly", "192.0.2.1", None),
    ("certificate of a password-less user", b"certonly", None, "192.0.2.1", "certonly"),
    ("certificate of a user with a password", b"pw", None, "192.0.2.1", "pw"),
    ("certificate naming nobody", b"nobody", None, "192.0.2.1", None),
    ("password with NUL", b"nul", b"a\x00b", "192.0.2.1", "nul"),
    ("password cut at its NUL", b"nul", b"a", "192.0.2.1", None),
    ("U+FFFD sent as UTF-8", b"fffd", "\ufffd".encode(), "192.0.2.1", "fffd"),
    ("non-UTF-8 octet where U+FFFD is stored", b"fffd", b"\xff", "192.0.2.1", None),
    ("UTF-8 password", b"ete", "été".encode(), "192.0.2.1", "ete"),
    ("the same password in Latin-1", b"ete", "été".encode("latin-1"), "192.0.2.1", None),
    ("non-UTF-8 password", b"pw", b"\xff\xfe", "192.0.2.1", None),
    ("the user's own hash as its password", b"pw", b"<hash of pw>", "192.0.2.1", None),
    ("another user's hash", b"ete", b"<hash of pw>", "192.0.2.1", None),
    ("64 KB password", b"big", b"p" * 65536, "192.0.2.1", "big"),
    ("64 KB password, one octet short", b"big", b"p" * 65535, "192.0.2.1", None),
    ("64 KB user name", b"N" * 65536, b"pw", "192.0.2.1", None),
    ("non-UTF-8 user name", b"\xff\xfe", b"pw", "192.0.2.1", None),
    ("empty user name and password", b"", b"", "192.0.2.1", None),
    ("unknown user, empty password", b"nobody", b"", "192.0.2.1", None),
    ("loopback-only user from loopback", b"guest", b"guest", "127.0.0.1", "guest"),
    ("loopback-only user from elsewhere", b"guest", b"guest", "192.0.2.1", None),
    ("loopback-only user's certificate from elsewhere", b"guest", None, "192.0.2.1", None),
]


@pytest.fixture
def logins() -> AuthDB:
    auth = AuthDB(loopback_users=["guest"])
    for name, password in [
        ("pw", "pw"),
        ("empty", ""),
        ("certonly", None),
        ("nul", "a\x00b"),
        ("fffd", "\ufffd"),
        ("ete", "été"),
        ("big", "p" * 65536),
        ("guest", "guest"),
    ]:
        auth.add_user(name, password)
    return auth


@pytest.mark.parametrize(
    ("user", "password", "peer", "expected"), [c[1:] for c in LOGINS], ids=[c[0] for c in LOGINS]
)
def test_login_table(
    logins: AuthDB, user: bytes, password: bytes | None, peer: str, expected: str | None
) -> None:
    if password == b"<hash of pw>":
        password = logins.users["pw"].password_hash.encode()
    found = logins.login(user, password, peer)
    assert (found.name if found else None) == expected
    if password is not None:  # text is the same credential as its UTF-8 octets
        try:
            as_text = (user.decode(), password.decode())
        except UnicodeDecodeError:
            return
        found = logins.authenticate(*as_text, peer)
        assert (found.name if found else None) == expected


def test_an_empty_password_matches_not_even_its_own_hash() -> None:
    assert not check_password("", hash_password(""))
    assert not check_password(b"", hash_password(b""))
    assert check_password(b"\xff", hash_password(b"\xff"))  # octets are hashed as they are


def test_an_empty_default_password_makes_a_password_less_user(caplog: pytest.LogCaptureFixture) -> None:
    auth = AuthDB()
    auth.seed_defaults(settings(password=""))
    assert auth.users["guest"].password_hash == ""
    assert "OTTERMQ_PASSWORD is empty" in caplog.text


def test_authenticate_imported_rabbitmq_hash() -> None:
    auth = AuthDB()
    for i, (password, password_hash, algorithm) in enumerate(RABBITMQ_HASHES):
        auth.put_user(UserRecord(f"u{i}", password_hash, algorithm))
        assert auth.authenticate(f"u{i}", password, "127.0.0.1") is not None


# ---------------------------------------------------------------------------------------------
# vhost access (Connection.Open)
# ---------------------------------------------------------------------------------------------
def test_check_vhost(db: AuthDB) -> None:
    db.check_vhost(db.users["ottprobe_bob"], "ottprobe")
    db.check_vhost(db.users["ottprobe_empty"], "ottprobe")  # an all-empty entry still opens the vhost
    with pytest.raises(NotAllowed) as info:
        db.check_vhost(db.users["ottprobe_none"], "ottprobe")
    assert info.value.reply_code == 530
    assert (
        info.value.reply_text == "NOT_ALLOWED - access to vhost 'ottprobe' refused for user 'ottprobe_none'"
    )
    with pytest.raises(NotAllowed) as info:
        db.check_vhost(db.users["ottprobe_bob"], "/")
    assert info.value.text == "access to vhost '/' refused for user 'ottprobe_bob'"


def test_check_vhost_missing_vhost(db: AuthDB) -> None:
    with pytest.raises(NotAllowed) as info:
        db.check_vhost(db.users["ottprobe_bob"], "nosuchvhost")
    assert info.value.reply_text == "NOT_ALLOWED - vhost nosuchvhost not found"


# ---------------------------------------------------------------------------------------------
# resource permissions
# ---------------------------------------------------------------------------------------------
def refused(kind: str, name: str, user: str = "ottprobe_bob") -> str:
    return f"access to {kind} '{name}' in vhost 'ottprobe' refused for user '{user}'"


# (permission, kind, name, RabbitMQ's refusal text or None when allowed), from the pika probes
BOB_CASES = [
    ("configure", "exchange", "x.new", refused("exchange", "x.new")),  # exchange.declare
    ("configure", "exchange", "x.new.cfg", None),
    ("configure", "exchange", "x.missing", refused("exchange", "x.missing")),  # exchange.delete
    ("read", "exchange", "x.ae.cfg", refused("exchange", "x.ae.cfg")),  # declare with an AE
    ("write", "exchange", "ae.none", refused("exchange", "ae.none")),
    ("write", "exchange", "ae.wr", None),
    ("configure", "queue", "q.new", refused("queue", "q.new")),  # queue.declare
    ("configure", "queue", "q.new.cfg", None),
    (
        "configure",
        "queue",
        "amq.gen-YHrdrmzU7s0ZncI9FR5_Uw",
        refused("queue", "amq.gen-YHrdrmzU7s0ZncI9FR5_Uw"),
    ),
    ("read", "queue", "q.dlx.cfg", refused("queue", "q.dlx.cfg")),  # declare with a DLX
    ("write", "exchange", "dlx.none", refused("exchange", "dlx.none")),
    ("write", "exchange", "", refused("exchange", "amq.default")),  # DLX "" / publish to ""
    ("write", "exchange", "amq.default", refused("exchange", "amq.default")),
    ("read", "queue", "q.cfg", refused("queue", "q.cfg")),  # queue.purge
    ("read", "queue", "q.rd", None),
    ("write", "queue", "q.none", refused("queue", "q.none")),  # queue.bind
    ("write", "queue", "q.wr", None),
    ("read", "exchange", "x.none", refused("exchange", "x.none")),
    ("read", "exchange", "x.rd", None),
    ("write", "exchange", "x.none", refused("exchange", "x.none")),  # basic.publish
    ("write", "exchange", "x.missing.wr", None),
    ("read", "queue", "q.missing", refused("queue", "q.missing")),  # basic.consume / get
]


@pytest.mark.parametrize(("permission", "kind", "name", "text"), BOB_CASES)
def test_rabbitmq_refusals(db: AuthDB, permission: Any, kind: Any, name: str, text: str | None) -> None:
    bob = db.users["ottprobe_bob"]
    assert db.is_allowed(bob, "ottprobe", permission, kind, name) is (text is None)
    if text is None:
        db.check(bob, "ottprobe", permission, kind, name)
        return
    with pytest.raises(AccessRefused) as info:
        db.check(bob, "ottprobe", permission, kind, name)
    assert info.value.reply_code == 403
    assert info.value.reply_text == f"ACCESS_REFUSED - {text}"


def test_empty_regex_matches_nothing(db: AuthDB) -> None:
    empty = db.users["ottprobe_empty"]
    for permission in ("configure", "write", "read"):
        for name in ("q.e", "x", "amq.gen-abc", ".*", "^$"):
            assert not db.is_allowed(empty, "ottprobe", permission, "queue", name)
        assert not db.is_allowed(empty, "ottprobe", permission, "exchange", "")  # amq.default
    with pytest.raises(AccessRefused, match=r"access to queue 'q\.e' in vhost 'ottprobe' refused for user"):
        db.check(empty, "ottprobe", "configure", "queue", "q.e")
    with pytest.raises(AccessRefused, match="access to exchange 'amq.default'"):
        db.check(empty, "ottprobe", "write", "exchange", "")


def test_regex_is_searched_not_anchored(db: AuthDB) -> None:
    db.add_user("alice", "pw")
    db.set_permissions("alice", "ottprobe", "^allowed", "allowed$", "^allowed$")
    alice = db.users["alice"]
    assert db.is_allowed(alice, "ottprobe", "configure", "queue", "allowed.q")
    assert not db.is_allowed(alice, "ottprobe", "configure", "queue", "notallowed")
    assert db.is_allowed(alice, "ottprobe", "write", "queue", "notallowed")
    assert not db.is_allowed(alice, "ottprobe", "write", "queue", "allowed.q")
    assert db.is_allowed(alice, "ottprobe", "read", "queue", "allowed")
    assert not db.is_allowed(alice, "ottprobe", "read", "queue", "allowed2")


def test_full_access(db: AuthDB) -> None:
    guest = db.users["guest"]
    for name in ("q", "", "amq.gen-x", "ünï"):
        db.check(guest, "/", "configure", "queue", name)
        db.check(guest, "/", "write", "exchange", name)


def test_no_entry_refuses_everything(db: AuthDB) -> None:
    with pytest.raises(
        AccessRefused, match="access to queue 'q' in vhost 'ottprobe' refused for user 'ottprobe_none'"
    ):
        db.check(db.users["ottprobe_none"], "ottprobe", "read", "queue", "q")
    with pytest.raises(AccessRefused):
        db.check(db.users["ottprobe_bob"], "/", "configure", "queue", "q.cfg")  # permissions are per vhost


def test_permission_changes_invalidate_the_cache(db: AuthDB) -> None:
    bob = db.users["ottprobe_bob"]
    assert not db.is_allowed(bob, "ottprobe", "configure", "queue", "q")
    db.set_permissions("ottprobe_bob", "ottprobe", ".*", "wr", "rd")
    assert db.is_allowed(bob, "ottprobe", "configure", "queue", "q")
    db.clear_permissions("ottprobe_bob", "ottprobe")
    assert not db.is_allowed(bob, "ottprobe", "configure", "queue", "q")
    with pytest.raises(NotAllowed):
        db.check_vhost(bob, "ottprobe")


def test_set_permissions_errors(db: AuthDB) -> None:
    with pytest.raises(AuthError, match="User nosuchuser does not exist"):
        db.set_permissions("nosuchuser", "ottprobe", "", "", "")
    with pytest.raises(AuthError, match="Virtual host nosuch does not exist"):
        db.set_permissions("ottprobe_bob", "nosuch", "", "", "")
    with pytest.raises(AuthError, match=r"regular expression '\(' is invalid"):
        db.set_permissions("ottprobe_bob", "ottprobe", "(", "", "")
    assert db.permissions[("ottprobe_bob", "ottprobe")].configure == "cfg"  # unchanged


def test_loaded_bad_regex_matches_nothing() -> None:
    auth = AuthDB()
    auth.load(
        Definitions(
            vhosts=[VHostRecord("/")],
            users=[UserRecord("u", hash_password("p"))],
            permissions=[PermissionRecord("u", "/", "(", ".*", ".*")],
        )
    )
    user = auth.users["u"]
    assert not auth.is_allowed(user, "/", "configure", "queue", "(")
    assert auth.is_allowed(user, "/", "write", "queue", "q")


# ---------------------------------------------------------------------------------------------
# mutators and the store
# ---------------------------------------------------------------------------------------------
def test_mutations_write_through() -> None:
    store = FakeStore()
    auth = AuthDB(store)  # type: ignore[arg-type]
    auth.add_vhost("v", "desc", ["t"])
    auth.add_user("bob", "pw", tags=["management"])
    auth.set_permissions("bob", "v", "a", "b", "c")
    assert store.ops[0] == ("put_vhost", VHostRecord("v", "desc", ["t"]))
    assert store.ops[1][0] == "put_user" and store.ops[1][1].tags == ["management"]
    assert check_password("pw", store.ops[1][1].password_hash, SHA256)
    assert store.ops[2] == ("put_permission", PermissionRecord("bob", "v", "a", "b", "c"))
    auth.change_password("bob", "new")
    assert store.kinds()[-1] == "put_user" and check_password("new", store.ops[-1][1].password_hash)
    store.ops.clear()
    auth.delete_user("bob")
    assert store.ops == [("delete_permission", "bob", "v"), ("delete_user", "bob")]
    assert "bob" not in auth.users and not auth.permissions
    store.ops.clear()
    auth.add_user("carol", "pw")
    auth.set_permissions("carol", "v", ".*", ".*", ".*")
    store.ops.clear()
    auth.delete_vhost("v")
    assert store.ops == [("delete_permission", "carol", "v"), ("delete_vhost", "v")]
    auth.clear_permissions("carol", "v")  # nothing left: no error, no write
    assert store.kinds() == ["delete_permission", "delete_vhost"]


def test_store_records_are_not_shared() -> None:
    store = FakeStore()
    auth = AuthDB(store)  # type: ignore[arg-type]
    auth.add_user("bob", "pw", tags=["a"])
    store.ops[0][1].tags.append("b")
    assert auth.users["bob"].tags == ["a"]


def test_mutator_errors(db: AuthDB) -> None:
    with pytest.raises(AuthError, match="User guest already exists"):
        db.add_user("guest", "x")
    with pytest.raises(AuthError, match="User nobody does not exist"):
        db.delete_user("nobody")
    with pytest.raises(AuthError, match="User nobody does not exist"):
        db.change_password("nobody", "x")
    with pytest.raises(AuthError, match="Virtual host nosuch does not exist"):
        db.delete_vhost("nosuch")
    with pytest.raises(AuthError):
        db.add_vhost("")
    assert db.add_vhost("ottprobe") is db.vhosts["ottprobe"]  # existing: returned unchanged


def test_load_replaces_contents(db: AuthDB) -> None:
    db.load(Definitions(vhosts=[VHostRecord("x")], users=[UserRecord("u", "")]))
    assert list(db.vhosts) == ["x"] and list(db.users) == ["u"] and not db.permissions


# ---------------------------------------------------------------------------------------------
# first boot
# ---------------------------------------------------------------------------------------------
def test_seed_defaults_first_boot() -> None:
    store = FakeStore()
    auth = AuthDB(store)  # type: ignore[arg-type]
    assert auth.seed_defaults(settings(username="admin", password="s3cret", vhosts=["/", "dev"]))
    admin = auth.users["admin"]
    assert admin.tags == ["administrator"] and admin.hashing_algorithm == SHA256
    assert auth.authenticate("admin", "s3cret", "127.0.0.1") is not None
    assert set(auth.vhosts) == {"/", "dev"}
    for vhost in ("/", "dev"):
        assert auth.permissions[("admin", vhost)] == PermissionRecord("admin", vhost, ".*", ".*", ".*")
    assert store.kinds() == ["put_user", "put_vhost", "put_permission", "put_vhost", "put_permission"]


def test_seed_defaults_later_boot() -> None:
    first = AuthDB()
    first.seed_defaults(settings())
    first.add_user("bob", "pw")
    first.delete_user("guest")  # an operator removed the default user
    stored = Definitions(
        vhosts=list(first.vhosts.values()),
        users=list(first.users.values()),
        permissions=list(first.permissions.values()),
    )
    store = FakeStore()
    later = AuthDB(store)  # type: ignore[arg-type]
    later.load(stored)
    assert not later.seed_defaults(settings(vhosts=["/", "new"]))
    assert "guest" not in later.users  # not re-created
    assert set(later.vhosts) == {"/", "new"}
    assert store.kinds() == ["put_vhost"]  # no default user left to grant


def test_seed_defaults_later_boot_grants_default_user_on_new_vhosts() -> None:
    auth = AuthDB()
    auth.seed_defaults(settings(password="one"))
    auth.set_permissions("guest", "/", "^x", "^x", "^x")
    assert not auth.seed_defaults(settings(password="two", vhosts=["/", "extra"]))
    assert auth.authenticate("guest", "one", "127.0.0.1") is not None  # password not reset
    assert auth.permissions[("guest", "/")].configure == "^x"  # existing permissions untouched
    assert auth.permissions[("guest", "extra")].configure == ".*"


# ---------------------------------------------------------------------------------------------
# the permission table
# ---------------------------------------------------------------------------------------------
def test_required_permissions_names() -> None:
    expected = REQUIRED_PERMISSIONS["queue.bind"]
    assert required_permissions("queue.bind") == expected
    assert required_permissions("Queue.Bind") == expected
    assert required_permissions("queue_bind") == expected
    assert required_permissions("basic.ack") == ()
    assert required_permissions("tx.select") == ()


def test_required_permissions_table() -> None:
    def plain(method: str) -> list[tuple[str, str, str]]:
        return [(r.permission, r.kind, r.field) for r in required_permissions(method) if not r.when]

    assert plain("queue.bind") == [("write", "queue", "queue"), ("read", "exchange", "exchange")]
    assert plain("queue.unbind") == plain("queue.bind")
    assert plain("exchange.bind") == [("write", "exchange", "destination"), ("read", "exchange", "source")]
    assert plain("exchange.unbind") == plain("exchange.bind")
    assert plain("basic.publish") == [("write", "exchange", "exchange")]
    assert (
        plain("basic.consume") == plain("basic.get") == plain("queue.purge") == [("read", "queue", "queue")]
    )
    assert plain("queue.delete") == [("configure", "queue", "queue")]
    assert plain("exchange.delete") == [("configure", "exchange", "exchange")]
    declare = required_permissions("queue.declare")
    assert declare[0] == Requirement("configure", "queue", "queue", "not passive")
    assert [(r.permission, r.kind, r.field) for r in declare[1:]] == [
        ("read", "queue", "queue"),
        ("write", "exchange", "arguments[x-dead-letter-exchange]"),
    ]
    exchange_declare = required_permissions("exchange.declare")
    assert [(r.permission, r.field) for r in exchange_declare] == [
        ("configure", "exchange"),
        ("read", "exchange"),
        ("write", "arguments[alternate-exchange]"),
    ]
