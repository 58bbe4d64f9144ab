"""Every SASL mechanism x odd credentials, over the mock transport: what a client sees for each login,
as RabbitMQ 3.10.8 answered the same users and bytes (measured with a raw socket client).

Outcomes: ``open`` (connection.open-ok), ``refused`` (403 ACCESS_REFUSED straight after start-ok, to a
client announcing ``authentication_failure_close``), ``dropped`` (closed without a frame, RabbitMQ's
few seconds later: a response
PLAIN cannot parse, or a start-ok over the 4096-byte handshake frame limit), ``530`` (logged in, then
``connection.open`` refused: no permissions on the vhost). EXTERNAL rows log in with a verified client
certificate naming the user, and send no password. The rule itself is ``AuthDB.login``
(tests/unit/broker/test_auth.py); e2e/test_login_matrix.py sends the same rows to both brokers.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from pamqp import commands as spec
from pamqp import encode

HEADER = b"AMQP\x00\x00\x09\x01"
AFC = {"capabilities": {"authentication_failure_close": True}}
PASSWORDS = {
    "pw": "pw",
    "empty": "",  # created with password "": stored hashed, as RabbitMQ does
    "certonly": None,  # no password at all (password_hash ""), for certificate login
    "nul": "a\x00b",
    "fffd": "\ufffd",
    "ete": "été",
    "big": "p" * 65536,
    "noperm": "pw",
}
HASH_OF_PW = b"<the stored hash of pw>"

# (case, user, password, PLAIN, AMQPLAIN)
CASES: list[tuple[str, bytes, bytes, str, str]] = [
    ("right password", b"pw", b"pw", "open", "open"),
    ("empty password of a user created with ''", b"empty", b"", "refused", "refused"),
    ("a password for a user created with ''", b"empty", b"x", "refused", "refused"),
    ("empty password of a password-less user", b"certonly", b"", "refused", "refused"),
    ("any password of a password-less user", b"certonly", b"certonly", "refused", "refused"),
    ("password with NUL", b"nul", b"a\x00b", "dropped", "open"),  # PLAIN cannot carry a NUL
    ("password cut at its NUL", b"nul", b"a", "refused", "refused"),
    ("U+FFFD as UTF-8", b"fffd", "\ufffd".encode(), "open", "open"),
    ("0xFF where U+FFFD is stored", b"fffd", b"\xff", "refused", "refused"),
    ("UTF-8 password", b"ete", "été".encode(), "open", "open"),
    ("the same password in Latin-1", b"ete", "été".encode("latin-1"), "refused", "refused"),
    ("non-UTF-8 password", b"pw", b"\xff\xfe", "refused", "refused"),
    ("the user's hash as its password", b"pw", HASH_OF_PW, "refused", "refused"),
    ("another user's hash", b"ete", HASH_OF_PW, "refused", "refused"),
    ("64 KB password", b"big", b"p" * 65536, "dropped", "dropped"),
    ("64 KB user name", b"N" * 65536, b"pw", "dropped", "dropped"),
    ("non-UTF-8 user name", b"\xff\xfe", b"pw", "refused", "refused"),
    ("unknown user, empty password", b"nobody", b"", "refused", "refused"),
    ("no permissions on the vhost", b"noperm", b"pw", "530", "530"),
]


@pytest.fixture
def users(broker: Any) -> None:
    auth = broker.services.auth
    for name, password in PASSWORDS.items():
        auth.add_user(name, password)
        if name != "noperm":
            auth.set_permissions(name, "/", ".*", ".*", ".*")


def start_ok(mechanism: bytes, response: bytes) -> bytes:
    """A start-ok frame built by hand: pamqp encodes a response from text only."""
    payload = struct.pack(">HH", 10, 11) + encode.field_table(AFC)
    payload += bytes([len(mechanism)]) + mechanism + struct.pack(">I", len(response)) + response
    payload += b"\x05en_US"
    return struct.pack(">BHI", 1, 0, len(payload)) + payload + b"\xce"


def response(mechanism: str, user: bytes, password: bytes) -> bytes:
    if mechanism == "PLAIN":
        return b"\x00" + user + b"\x00" + password
    fields = b""
    for key, value in ((b"LOGIN", user), (b"PASSWORD", password)):
        fields += bytes([len(key)]) + key + b"S" + struct.pack(">I", len(value)) + value
    return fields


def outcome(c: Any) -> str:
    """How the login ends for client ``c`` (start-ok sent)."""
    methods = [f for _, f in c.methods()]
    if not methods:  # RabbitMQ stops reading and drops the socket a few seconds later
        c.loop.advance(10)
        return "dropped" if c.transport.closed and not c.methods() else "still open"
    if methods and isinstance(methods[0], spec.Connection.Close):
        close = methods[0]
        assert close.reply_text.startswith(
            "ACCESS_REFUSED - Login was refused using authentication mechanism"
        )
        return "refused" if close.reply_code == 403 else f"close {close.reply_code}"
    assert isinstance(methods[0], spec.Connection.Tune), methods
    c.send(
        0,
        spec.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0),
        spec.Connection.Open(virtual_host="/"),
    )
    methods = [f for _, f in c.methods()]
    if isinstance(methods[0], spec.Connection.OpenOk):
        return "open"
    assert isinstance(methods[0], spec.Connection.Close), methods
    return str(methods[0].reply_code)


def login(make_client: Any, broker: Any, mechanism: str, user: bytes, password: bytes) -> str:
    if password == HASH_OF_PW:
        password = broker.services.auth.users["pw"].password_hash.encode()
    c = make_client(peer="192.0.2.7")
    c.send_raw(HEADER)
    c.expect(spec.Connection.Start)
    c.send_raw(start_ok(mechanism.encode(), response(mechanism, user, password)))
    return outcome(c)


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
@pytest.mark.parametrize(
    ("user", "password", "plain", "amqplain"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_password_mechanisms(users, make_client, broker, mechanism, user, password, plain, amqplain):
    expected = plain if mechanism == "PLAIN" else amqplain
    assert login(make_client, broker, mechanism, user, password) == expected


def cert(common_name: str) -> dict[str, Any]:
    return {"subject": ((("commonName", common_name),),)}


@pytest.mark.parametrize(
    ("common_name", "expected"),
    [("certonly", "open"), ("pw", "open"), ("nobody", "refused"), ("noperm", "530")],
)
def test_external_logs_in_whom_the_certificate_names(users, make_client, common_name, expected):
    c = make_client(peer="192.0.2.7", cert=cert(common_name))
    c.send_raw(HEADER)
    start = c.expect(spec.Connection.Start)
    assert start.mechanisms.split() == ["PLAIN", "AMQPLAIN", "EXTERNAL"]
    c.send_raw(start_ok(b"EXTERNAL", b""))
    assert outcome(c) == expected


@pytest.mark.parametrize("password", [b"", b"certonly", b"x"])
def test_a_password_less_user_with_a_certificate_still_cannot_use_a_password(users, make_client, password):
    c = make_client(peer="192.0.2.7", cert=cert("certonly"))
    c.send_raw(HEADER)
    c.expect(spec.Connection.Start)
    c.send_raw(start_ok(b"PLAIN", response("PLAIN", b"certonly", password)))
    assert outcome(c) == "refused"


def test_without_authentication_failure_close_an_empty_password_is_dropped(users, make_client):
    c = make_client(peer="192.0.2.7")
    c.send_raw(HEADER)
    c.expect(spec.Connection.Start)
    c.send(0, spec.Connection.StartOk(client_properties={}, mechanism="PLAIN", response="\0empty\0"))
    assert c.methods() == [] and c.transport.closed


def test_deleting_a_user_closes_its_connections_with_320(users, make_client, broker):
    mine, other = make_client(), make_client()
    mine.handshake("pw", "pw")
    other.handshake("ete", "été")
    broker.delete_user("pw")
    close = mine.expect(spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (320, "CONNECTION_FORCED - user 'pw' is deleted")
    assert other.methods() == [] and not other.transport.closed
    again = make_client()
    again.send_raw(HEADER)
    again.expect(spec.Connection.Start)
    again.send_raw(start_ok(b"PLAIN", response("PLAIN", b"pw", b"pw")))
    assert outcome(again) == "refused"


@pytest.mark.parametrize("secret", ["", "certonly"])
def test_update_secret_verify_never_takes_a_password_for_a_password_less_user(users, make_client, secret):
    c = make_client(peer="192.0.2.7", cert=cert("certonly"))
    c.conn.settings = c.conn.settings.model_copy(update={"update_secret_verify": True})
    c.send_raw(HEADER)
    c.expect(spec.Connection.Start)
    c.send_raw(start_ok(b"EXTERNAL", b""))
    assert outcome(c) == "open"
    c.send(0, spec.Connection.UpdateSecret(new_secret=secret, reason="r"))
    close = c.expect(spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (
        530,
        "NOT_ALLOWED - New secret was refused by one of the backends",
    )
