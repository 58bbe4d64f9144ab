"""Shovels between two brokers: the broker under test and a private ottermq process beside it.

Under ``make conformance`` the broker under test is RabbitMQ 3.10.8 (with ``rabbitmq_shovel``), so
these are the interoperability tests of issue 42: an ottermq shovel draining a RabbitMQ queue into
ottermq, and RabbitMQ's own shovel plugin pulling from ottermq and pushing to it. On ottermq they run
between two ottermq processes. Each moves 1,000 persistent messages on ``on-confirm`` and checks
that every one arrived once, in order, with its properties.

The TLS test (``amqps://`` with a client certificate, ``verify_peer`` and SASL EXTERNAL) is an
``extension``: the RabbitMQ of the conformance run has no TLS listener.
"""

from __future__ import annotations

import functools
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pika.exceptions
import pytest

from .polling import poll_until

COUNT = 1000
eventually = functools.partial(poll_until, timeout=60, interval=0.1)


def q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def network_uri(b: Any) -> str:
    return f"amqp://{q(b.user)}:{q(b.password)}@{b.host}:{b.port}/{q(b.vhost)}"


@pytest.fixture
def ottermq(broker_process) -> Any:
    """A private ottermq process beside the broker under test."""
    return broker_process().start()


@pytest.fixture
def put_shovel() -> Iterator[Callable[..., None]]:
    """``put(broker, name, value)``: a shovel parameter on that broker, deleted afterwards."""
    made: list[tuple[Any, str]] = []

    def put(b: Any, name: str, value: dict[str, Any]) -> None:
        path = f"/api/parameters/shovel/{q(b.vhost)}/{q(name)}"
        made.append((b, path))
        status, body = b.api(path, "PUT", {"value": value})
        assert status == 201, body

    yield put
    for b, path in made:
        b.api(path, "DELETE")


def publish(b: Any, queue: str, count: int = COUNT) -> None:
    conn = pika.BlockingConnection(b.params())
    try:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        for i in range(count):
            props = pika.BasicProperties(delivery_mode=2, headers={"seq": i}, content_type="text/plain")
            ch.basic_publish("", queue, b"message %d" % i, props)
    finally:
        conn.close()


def depth(b: Any, queue: str) -> int:
    """Messages ready in ``queue``; -1 while it does not exist or the broker is not answering."""
    try:
        conn = pika.BlockingConnection(b.params())
    except pika.exceptions.AMQPConnectionError:
        return -1
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    except pika.exceptions.ChannelClosedByBroker:
        return -1
    finally:
        if conn.is_open:
            conn.close()


def drain(b: Any, queue: str) -> list[tuple[bytes, Any]]:
    conn = pika.BlockingConnection(b.params())
    out = []
    try:
        ch = conn.channel()
        while True:
            method, props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return out
            out.append((body, props))
    finally:
        conn.close()


def delete_queue(b: Any, queue: str) -> None:
    conn = pika.BlockingConnection(b.params())
    try:
        conn.channel().queue_delete(queue)
    finally:
        conn.close()


def moved(source: Any, src: str, target: Any, dest: str) -> list[tuple[bytes, Any]]:
    """Wait until every message left ``src`` and arrived in ``dest``; return them."""
    eventually(lambda: depth(source, src) == 0 and depth(target, dest) == COUNT, what=f"{COUNT} moved")
    got = drain(target, dest)
    assert [body for body, _ in got] == [b"message %d" % i for i in range(COUNT)]  # each once, in order
    assert all(p.delivery_mode == 2 and p.content_type == "text/plain" for _, p in got)
    assert [p.headers["seq"] for _, p in got] == list(range(COUNT))
    return got


def test_an_ottermq_shovel_drains_a_queue_of_the_broker_under_test(broker, ottermq, put_shovel, unique):
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    publish(broker, src)
    value = {"src-uri": network_uri(broker), "src-queue": src, "dest-uri": "amqp://", "dest-queue": dest}
    put_shovel(ottermq, name, value)
    try:
        moved(broker, src, ottermq, dest)
    finally:
        delete_queue(broker, src)


def test_the_broker_under_test_shovels_from_ottermq(broker, ottermq, put_shovel, unique):
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    publish(ottermq, src)
    value = {
        "src-uri": network_uri(ottermq),
        "src-queue": src,
        "dest-uri": "amqp://",
        "dest-queue": dest,
        "dest-add-forward-headers": True,
    }
    put_shovel(broker, name, value)
    got = moved(ottermq, src, broker, dest)
    assert got[0][1].headers["x-shovelled"][0]["src-queue"] == src


def test_the_broker_under_test_shovels_to_ottermq(broker, ottermq, put_shovel, unique):
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    publish(broker, src)
    value = {
        "src-uri": "amqp://",
        "src-queue": src,
        "dest-uri": network_uri(ottermq),
        "dest-queue": dest,
        "src-delete-after": "queue-length",
    }
    put_shovel(broker, name, value)
    try:
        moved(broker, src, ottermq, dest)
        path = f"/api/parameters/shovel/{q(broker.vhost)}/{q(name)}"
        eventually(lambda: broker.api(path)[0] == 404, what="the parameter cleared after the move")
    finally:
        delete_queue(broker, src)


# -- amqps ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("cryptography", reason="pip install cryptography (the dev extra)")
    from .tls_certs import CA

    folder = tmp_path_factory.mktemp("pki")
    ca = CA(folder / "ca")
    return {"ca": ca, "server": ca.issue("localhost", server=True), "client": ca.issue("guest", server=False)}


def tls_broker(broker_process: Any, pki: dict[str, Any], **extra: str) -> tuple[Any, int]:
    """A private ottermq with a TLS listener (the test CA's ``localhost`` certificate); its port."""
    from .conftest import _free_port

    port = _free_port()
    env = {
        "OTTERMQ_SSL": "true",
        "OTTERMQ_SSL_PORT": str(port),
        "OTTERMQ_SSL_CERT_FILE": str(pki["server"].cert),
        "OTTERMQ_SSL_KEY_FILE": str(pki["server"].key),
        **extra,
    }
    return broker_process(env).start(), port


@pytest.mark.extension
def test_amqps_with_a_client_certificate_verify_peer_and_sasl_external(
    broker_process, pki, put_shovel, unique
):
    tls, ssl_port = tls_broker(
        broker_process,
        pki,
        OTTERMQ_SSL_CA_FILE=str(pki["ca"].cert_file),
        OTTERMQ_SSL_VERIFY="verify_peer",
        OTTERMQ_SSL_FAIL_IF_NO_PEER_CERT="true",
    )
    here = broker_process().start()
    name, src, dest = unique("sh"), unique("src"), unique("dest")
    publish(tls, src)
    query = urllib.parse.urlencode(
        {
            "cacertfile": pki["ca"].cert_file,
            "certfile": pki["client"].cert,
            "keyfile": pki["client"].key,
            "verify": "verify_peer",
            "server_name_indication": "localhost",
            "auth_mechanism": "external",
        }
    )
    value = {
        "src-uri": f"amqps://127.0.0.1:{ssl_port}/%2F?{query}",
        "src-queue": src,
        "dest-uri": "amqp://",
        "dest-queue": dest,
    }
    put_shovel(here, name, value)
    moved(tls, src, here, dest)
    status, entries = here.api("/api/shovels")
    entry = next(e for e in entries if e["name"] == name)
    assert entry["src_uri"] == f"amqps://127.0.0.1:{ssl_port}/%2F"  # no query, no credentials


@pytest.mark.extension
def test_amqps_refuses_a_server_whose_name_does_not_match(broker_process, pki, put_shovel, unique):
    tls, ssl_port = tls_broker(broker_process, pki)
    here = broker_process().start()
    name, src = unique("sh"), unique("src")
    publish(tls, src, 1)
    query = urllib.parse.urlencode(
        {
            "cacertfile": pki["ca"].cert_file,
            "verify": "verify_peer",
            "server_name_indication": "elsewhere.example",
        }
    )
    value = {
        "src-uri": f"amqps://guest:guest@127.0.0.1:{ssl_port}/%2F?{query}",
        "src-queue": src,
        "dest-uri": "amqp://",
        "dest-queue": unique("dest"),
        "reconnect-delay": 1,
    }
    put_shovel(here, name, value)
    entry = eventually(lambda: next((e for e in here.api("/api/shovels")[1] if e["name"] == name), None))
    assert entry["state"] == "starting"
    assert depth(tls, src) == 1  # never consumed
    log = here.log_tail(200)
    assert "certificate verify failed" in log or "Hostname mismatch" in log or "doesn't match" in log
