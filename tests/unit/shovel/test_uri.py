"""RabbitMQ's AMQP URIs (``broker/shovel/uri.py``): what a valid one means (the refusals' texts are
RabbitMQ's answers in ``test_definition.py``)."""

from __future__ import annotations

import pytest
from ottermq.broker.shovel.uri import AmqpUri, UriError, parse_uri, without_credentials


def test_no_host_is_the_local_broker_and_its_vhost_slash() -> None:
    assert parse_uri("amqp://") == AmqpUri("amqp://", direct=True, vhost="/")
    assert parse_uri("amqp:///orders").vhost == "orders"
    assert parse_uri("amqp:///").vhost == ""  # a path of "/" names the vhost ""
    local = parse_uri("amqp://alice:pw@/%2F?password=other")
    assert (local.direct, local.username, local.password, local.vhost) == (True, "alice", "other", "/")


def test_a_network_uri() -> None:
    uri = parse_uri(
        "AMQP://us%40er:p%3Aw:ignored@[::1]:5673/v%2Fh?heartbeat=5&connection_timeout=100&x=y&plain"
    )
    assert (uri.direct, uri.host, uri.port, uri.vhost, uri.tls) == (False, "::1", 5673, "v/h", False)
    assert (uri.username, uri.password, uri.heartbeat, uri.connection_timeout) == ("us@er", "p:w", 5, 100)
    assert uri.mechanisms == ("plain", "amqplain")
    assert parse_uri("amqp://h?auth_mechanism=external").mechanisms == ("external",)
    assert parse_uri("amqp://h").port is None and parse_uri("amqp://h").username is None


def test_amqps_options() -> None:
    uri = parse_uri(
        "amqps://h/?cacertfile=%2Ftmp%2Fca.pem&certfile=/c.pem&keyfile=/k.pem&verify=verify_peer"
        "&fail_if_no_peer_cert=true&server_name_indication=disable&depth=3&password=k"
    )
    assert uri.tls and uri.tls_options == {
        "cacertfile": "/tmp/ca.pem",
        "certfile": "/c.pem",
        "keyfile": "/k.pem",
        "verify": "verify_peer",
        "fail_if_no_peer_cert": True,
        "password": "k",
        "server_name_indication": "disable",
        "depth": 3,
    }
    assert parse_uri("amqp://h?cacertfile=/x").tls_options == {}  # only amqps has them


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("amqp://guest:guest@127.0.0.1:5672", "amqp://127.0.0.1:5672"),
        ("amqps://u:p@h/%2F?cacertfile=/ca.pem", "amqps://h/%2F"),
        ("amqp://", "amqp://"),
        ("amqp:///v", "amqp:///v"),
    ],
)
def test_credentials_and_the_query_are_never_shown(text: str, shown: str) -> None:
    assert without_credentials(text) == shown


def test_a_refusal_carries_rabbitmqs_term() -> None:
    with pytest.raises(UriError) as refused:
        parse_uri("foo://x")
    assert refused.value.term == (("unexpected_uri_scheme", "foo"), "foo://x")
