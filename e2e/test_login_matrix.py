"""Logins that must not work, and the ones that must, on the wire: AMQP PLAIN and AMQPLAIN (a raw socket
client, so any octets can be sent) and HTTP Basic, for the same users, against both brokers.

Every expected outcome is RabbitMQ 3.10.8's: an empty password never logs in (a user created with
``{"password": ""}`` has a hash, yet ``""`` is refused: AMQP 403, HTTP 401), a user stored with
``password_hash: ""`` has no password at all (certificate login only), credentials are compared as the
octets sent, and deleting a user closes its connections with 320. tests/protocol/test_login_matrix.py
runs the same rows over the mock transport, with EXTERNAL; e2e/test_tls.py logs a password-less user in
with its certificate.
"""

from __future__ import annotations

import base64
import struct
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pamqp.commands as C
import pamqp.encode
import pika
import pika.exceptions
import pytest

from .polling import poll_until

AFC = {"capabilities": {"authentication_failure_close": True}}
LOGIN_FAILED = {"error": "not_authorized", "reason": "Login failed"}
# how each user is created (the body of PUT /api/users/{name}, tags added)
USERS: dict[str, dict[str, str]] = {
    "pw": {"password": "pw"},
    "empty": {"password": ""},  # stored hashed, as RabbitMQ does; "" still never logs in
    "certonly": {"password_hash": ""},  # no password at all: certificate login only
    "nul": {"password": "a\x00b"},
    "fffd": {"password": "\ufffd"},
    "ete": {"password": "été"},
    "big": {"password": "p" * 65536},
    "noperm": {"password": "pw"},  # no permissions on the vhost
}
HASH_OF_PW = b"<the stored hash of pw>"

# (case, user, password, PLAIN, AMQPLAIN, HTTP whoami status). AMQP outcomes: "open", "refused" (403 right
# after start-ok), "dropped" (socket closed without a frame: PLAIN cannot carry a NUL; a 64 KB start-ok is
# over the handshake's frame limit), "530" (connection.open refused: no permissions on the vhost).
# HTTP: 200, 401 (Login failed), or "too large" (RabbitMQ 431 for a 64 KB Authorization header).
CASES: list[tuple[str, bytes, bytes, str, str, int | str]] = [
    ("right password", b"pw", b"pw", "open", "open", 200),
    ("empty password of a user created with ''", b"empty", b"", "refused", "refused", 401),
    ("a password for a user created with ''", b"empty", b"x", "refused", "refused", 401),
    ("empty password of a password-less user", b"certonly", b"", "refused", "refused", 401),
    ("any password of a password-less user", b"certonly", b"certonly", "refused", "refused", 401),
    ("password with NUL", b"nul", b"a\x00b", "dropped", "open", 200),
    ("password cut at its NUL", b"nul", b"a", "refused", "refused", 401),
    ("U+FFFD as UTF-8", b"fffd", "\ufffd".encode(), "open", "open", 200),
    ("0xFF where U+FFFD is stored", b"fffd", b"\xff", "refused", "refused", 401),
    ("UTF-8 password", b"ete", "été".encode(), "open", "open", 200),
    ("the same password in Latin-1", b"ete", "été".encode("latin-1"), "refused", "refused", 401),
    ("non-UTF-8 password", b"pw", b"\xff\xfe", "refused", "refused", 401),
    ("the user's hash as its password", b"pw", HASH_OF_PW, "refused", "refused", 401),
    ("another user's hash", b"ete", HASH_OF_PW, "refused", "refused", 401),
    ("64 KB password", b"big", b"p" * 65536, "dropped", "dropped", "too large"),
    ("64 KB user name", b"N" * 65536, b"pw", "dropped", "dropped", "too large"),
    ("non-UTF-8 user name", b"\xff\xfe", b"pw", "refused", "refused", 401),
    ("unknown user, empty password", b"nobody", b"", "refused", "refused", 401),
    ("no permissions on the vhost", b"noperm", b"pw", "530", "530", 200),
]


@pytest.fixture(scope="module")
def users(broker: Any) -> Iterator[dict[str, Any]]:
    """The users above under a unique prefix (``prefix``), with full permissions on the vhost except
    ``noperm``, and ``hash``: the stored hash of ``pw``."""
    prefix = f"e2e-login-{uuid.uuid4().hex[:8]}-"
    vhost = urllib.parse.quote(broker.vhost, safe="")
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    try:
        for name, body in USERS.items():
            assert broker.api(f"/api/users/{prefix}{name}", "PUT", {**body, "tags": "management"})[0] == 201
            if name != "noperm":
                assert broker.api(f"/api/permissions/{vhost}/{prefix}{name}", "PUT", everything)[0] == 201
        status, shown = broker.api(f"/api/users/{prefix}pw")
        assert status == 200
        yield {"prefix": prefix.encode(), "hash": shown["password_hash"].encode()}
    finally:
        for name in USERS:
            broker.api(f"/api/users/{prefix}{name}", "DELETE")


def credentials(users: dict[str, Any], user: bytes, password: bytes) -> tuple[bytes, bytes]:
    return users["prefix"] + user, users["hash"] if password == HASH_OF_PW else password


def start_ok(mechanism: str, user: bytes, password: bytes) -> bytes:
    """A start-ok frame built by hand: pamqp encodes a SASL response from text only."""
    if mechanism == "PLAIN":
        response = b"\x00" + user + b"\x00" + password
    else:
        response = b""
        for key, value in ((b"LOGIN", user), (b"PASSWORD", password)):
            response += bytes([len(key)]) + key + b"S" + struct.pack(">I", len(value)) + value
    payload = struct.pack(">HH", 10, 11) + pamqp.encode.field_table(AFC)
    payload += bytes([len(mechanism)]) + mechanism.encode() + struct.pack(">I", len(response)) + response
    payload += b"\x05en_US"
    return struct.pack(">BHI", 1, 0, len(payload)) + payload + b"\xce"


def amqp_login(raw_connect: Callable[..., Any], vhost: str, mechanism: str, user: bytes, pw: bytes) -> str:
    raw = raw_connect(handshake=False)
    raw.send(b"AMQP\x00\x00\x09\x01")
    raw.expect(C.Connection.Start)
    try:
        raw.send(start_ok(mechanism, user, pw))
        _, frame = raw.recv_frame(timeout=8)
    except ConnectionError:  # reset or EOF, before or after our start-ok went out
        return "dropped"
    if isinstance(frame, C.Connection.Close):
        assert frame.reply_text == (
            f"ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}. "
            "For details see the broker logfile."
        )
        return "refused" if frame.reply_code == 403 else f"close {frame.reply_code}"
    assert isinstance(frame, C.Connection.Tune), frame
    raw.send_frame(
        0, C.Connection.TuneOk(channel_max=frame.channel_max, frame_max=frame.frame_max, heartbeat=0)
    )
    raw.send_frame(0, C.Connection.Open(virtual_host=vhost))
    _, frame = raw.recv_frame(timeout=8)
    if isinstance(frame, C.Connection.OpenOk):
        return "open"
    assert isinstance(frame, C.Connection.Close), frame
    return str(frame.reply_code)


def test_amqp_plain_and_amqplain(broker, users, raw_connect):
    jobs = {
        (case, mechanism): credentials(users, user, password)
        for case, user, password, *_ in CASES
        for mechanism in ("PLAIN", "AMQPLAIN")
    }
    with ThreadPoolExecutor(8) as pool:  # a dropped socket may take RabbitMQ's 3 s
        futures = {
            key: pool.submit(amqp_login, raw_connect, broker.vhost, key[1], *login)
            for key, login in jobs.items()
        }
    got = {key: future.result() for key, future in futures.items()}
    expected = {}
    for case, _user, _password, plain, amqplain, _http in CASES:
        expected[(case, "PLAIN")], expected[(case, "AMQPLAIN")] = plain, amqplain
    assert got == expected


def whoami(broker: Any, user: bytes, password: bytes) -> tuple[int, Any]:
    token = base64.b64encode(user + b":" + password).decode()
    return broker.api("/api/whoami", headers={"Authorization": f"Basic {token}"})


@pytest.mark.parametrize(
    ("user", "password", "expected"), [(c[1], c[2], c[5]) for c in CASES], ids=[c[0] for c in CASES]
)
def test_http_basic(broker, users, user, password, expected):
    login, secret = credentials(users, user, password)
    status, body = whoami(broker, login, secret)
    if expected == 200:
        assert (status, body) == (200, {"name": login.decode(), "tags": ["management"]})
    elif expected == 401:
        assert (status, body) == (401, LOGIN_FAILED)
    else:  # refused before any login is tried: RabbitMQ says 431, ottermq (aiohttp's limit) 400
        assert status in (400, 431)


@pytest.mark.parametrize(
    "header",
    [
        "Basic " + base64.b64encode(b"guest").decode(),  # no ':'
        "Basic !!!",
        "Basic",
        "Basic Z3Vlc3Q6Z3Vlc3Q",  # missing padding
    ],
)
def test_a_basic_header_that_does_not_parse_is_400_with_no_body(broker, header):
    assert broker.api("/api/whoami", headers={"Authorization": header}) == (400, None)


def test_another_scheme_is_login_failed(broker):
    assert broker.api("/api/whoami", headers={"Authorization": "Bearer abc"}) == (401, LOGIN_FAILED)


def test_deleting_a_user_closes_its_connections_with_320(broker, unique):
    name = unique("deleted-user")
    vhost = urllib.parse.quote(broker.vhost, safe="")
    assert broker.api(f"/api/users/{name}", "PUT", {"password": "pw", "tags": ""})[0] == 201
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert broker.api(f"/api/permissions/{vhost}/{name}", "PUT", everything)[0] == 201
    conn = pika.BlockingConnection(broker.params(credentials=pika.PlainCredentials(name, "pw")))
    other = pika.BlockingConnection(broker.params())
    try:
        conn.channel()
        assert broker.api(f"/api/users/{name}", "DELETE")[0] == 204

        def closed() -> Any:
            try:
                conn.process_data_events(time_limit=0.05)
            except pika.exceptions.ConnectionClosedByBroker as exc:
                return exc
            return None

        exc = poll_until(closed, timeout=10, what="the deleted user's connection to be closed")
        assert (exc.reply_code, exc.reply_text) == (320, f"CONNECTION_FORCED - user '{name}' is deleted")
        other.process_data_events(time_limit=0.1)
        assert other.is_open  # another user's connection stays
    finally:
        for c in (conn, other):
            if c.is_open:
                c.close()


# -- creating a user without a password, and its definitions ------------------------------------------------
PUT_ERRORS = [
    ({"password": "x"}, "tags_not_present"),
    ({"password": "x", "password_hash": "", "tags": ""}, "both_password_and_password_hash_are_provided"),
    ({"password_hash": "!!", "tags": ""}, ["not_base64", "!!"]),
]


@pytest.mark.parametrize(("body", "reason"), PUT_ERRORS)
def test_user_put_refusals(broker, unique, body, reason):
    name = unique("user-put")
    assert broker.api(f"/api/users/{name}", "PUT", body) == (400, {"error": "bad_request", "reason": reason})
    assert broker.api(f"/api/users/{name}")[0] == 404


def test_a_password_less_user_round_trips_through_definitions(broker, unique, raw_connect):
    """``password_hash: ""`` is shown and exported as it is, imported back unchanged, and no password
    (empty or not) logs that user in, on either way in."""
    name = unique("certonly")
    try:
        user = {"name": name, "password_hash": "", "tags": ["management"]}
        assert broker.api("/api/definitions", "POST", {"users": [user]})[0] in (201, 204)
        status, shown = broker.api(f"/api/users/{name}")
        assert (status, shown["password_hash"], shown["tags"]) == (200, "", ["management"])
        (exported,) = [u for u in broker.api("/api/definitions")[1]["users"] if u["name"] == name]
        assert (exported["password_hash"], exported["tags"]) == ("", ["management"])
        assert broker.api(f"/api/users/{name}", "DELETE")[0] == 204
        assert broker.api("/api/definitions", "POST", {"users": [exported]})[0] in (201, 204)
        assert broker.api(f"/api/users/{name}")[1]["password_hash"] == ""
        for password in (b"", b"x", name.encode()):
            assert whoami(broker, name.encode(), password) == (401, LOGIN_FAILED)
            for mechanism in ("PLAIN", "AMQPLAIN"):
                assert amqp_login(raw_connect, broker.vhost, mechanism, name.encode(), password) == "refused"
    finally:
        broker.api(f"/api/users/{name}", "DELETE")
