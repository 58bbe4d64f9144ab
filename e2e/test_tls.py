"""AMQPS, SASL EXTERNAL, HTTPS and certificate reloads (issue 17), with a CA made in the test.

Private ottermq processes on free ports (their TLS settings differ per test), so these are extension
tests: ``make conformance``'s RabbitMQ has no TLS listener configured.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import urllib.parse
import urllib.request
from typing import Any

import pika
import pytest

from .conftest import _free_port
from .polling import poll_until
from .test_management_write import call

pytest.importorskip("cryptography", reason="pip install cryptography (the dev extra)")
from .tls_certs import CA, Issued  # noqa: E402

pytestmark = pytest.mark.extension


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("pki")
    ca, other = CA(folder / "ca"), CA(folder / "other", "another CA")
    return {
        "ca": ca,
        "other": other,
        "server": ca.issue("localhost", server=True),
        "alice": ca.issue("alice", server=False, org="Otters"),
        "mallory": other.issue("alice", server=False),
        "folder": folder,
    }


def tls_env(pki: dict[str, Any], server: Issued | None = None, **extra: str) -> dict[str, str]:
    server = server or pki["server"]
    env = {
        "OTTERMQ_SSL": "true",
        "OTTERMQ_SSL_PORT": str(_free_port()),
        "OTTERMQ_SSL_CERT_FILE": str(server.cert),
        "OTTERMQ_SSL_KEY_FILE": str(server.key),
        "OTTERMQ_SSL_CA_FILE": str(pki["ca"].cert_file),
    }
    env.update(extra)
    return env


def client_context(pki: dict[str, Any], client: Issued | None = None, ca: CA | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str((ca or pki["ca"]).cert_file))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


def amqps(port: int, context: ssl.SSLContext, credentials: Any = None) -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
        "localhost",
        port,
        ssl_options=pika.SSLOptions(context, "localhost"),
        credentials=credentials or pika.PlainCredentials("guest", "guest"),
        heartbeat=0,
        blocked_connection_timeout=10,
        socket_timeout=10,
        stack_timeout=10,
    )
    return pika.BlockingConnection(params)


def round_trip(connection: pika.BlockingConnection, queue: str = "tls.q") -> bytes:
    channel = connection.channel()
    channel.queue_declare(queue, auto_delete=True)
    channel.basic_publish("", queue, b"over tls")

    def got() -> bytes | None:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        return None if method is None else bytes(body)  # the body sent above is never empty

    return poll_until(got, timeout=5, interval=0.02, what=f"the message to come back from {queue}")


def test_amqps_and_plain_side_by_side(broker_process, pki):
    env = tls_env(pki)
    process = broker_process(env)
    broker = process.start()
    with amqps(int(env["OTTERMQ_SSL_PORT"]), client_context(pki)) as conn:
        assert round_trip(conn) == b"over tls"
    with pika.BlockingConnection(broker.params()) as plain:  # the plain listener goes on as before
        assert round_trip(plain, "plain.q") == b"over tls"
    listeners = {(item["protocol"], item["port"]) for item in call(broker, "/api/overview")[2]["listeners"]}
    assert ("amqp/ssl", int(env["OTTERMQ_SSL_PORT"])) in listeners and ("amqp", broker.port) in listeners
    assert "(TLS)" in process.log_tail()


def test_tls_only_and_bad_clients_are_refused_cleanly(broker_process, pki):
    env = tls_env(
        pki,
        OTTERMQ_BROKER_PORT="0",
        OTTERMQ_SSL_VERIFY="verify_peer",
        OTTERMQ_SSL_FAIL_IF_NO_PEER_CERT="true",
    )
    process = broker_process(env)
    port = process.port = int(env["OTTERMQ_SSL_PORT"])  # start() waits for this port: the only one
    process.start()
    good = amqps(port, client_context(pki, pki["alice"]))
    # plain AMQP sent to the TLS port: the handshake fails, the socket is closed, nothing else happens
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(b"AMQP\x00\x00\x09\x01")
        answer = raw.recv(100)
        assert answer == b"" or answer[:1] == b"\x15"  # closed at once: EOF or a TLS alert record
    # a client certificate from another CA, an expired one, and none at all
    expired = pki["ca"].issue("alice", server=False, expired=True)
    for context in (client_context(pki, pki["mallory"]), client_context(pki, expired), client_context(pki)):
        with pytest.raises((pika.exceptions.AMQPConnectionError, ssl.SSLError, OSError)):
            amqps(port, context)
    assert round_trip(good) == b"over tls"  # the good one never noticed
    good.close()
    assert process.proc.poll() is None and "Traceback" not in process.log_tail()


def test_sasl_external_with_the_certificate_common_name(broker_process, pki):
    env = tls_env(pki, OTTERMQ_SSL_VERIFY="verify_peer")
    process = broker_process(env)
    broker = process.start()
    port = int(env["OTTERMQ_SSL_PORT"])
    assert call(broker, "/api/users/alice", "PUT", {"password_hash": "", "tags": ""})[0] in (201, 204)
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert call(broker, "/api/permissions/%2F/alice", "PUT", everything)[0] in (201, 204)
    with amqps(port, client_context(pki, pki["alice"]), pika.credentials.ExternalCredentials()) as conn:
        assert round_trip(conn, "ext.q") == b"over tls"
        (shown,) = [c for c in call(broker, "/api/connections")[2] if c["user"] == "alice"]
        assert shown["ssl"] is True and shown["ssl_protocol"] in ("tlsv1.2", "tlsv1.3")
        assert shown["ssl_cipher"] and shown["peer_cert_subject"] == "CN=alice,O=Otters"
        assert shown["peer_cert_issuer"] == "CN=ottermq test CA"
    # alice has no password: with her certificate but PLAIN, neither "" nor any password logs her in
    for password in ("", "alice"):
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            amqps(port, client_context(pki, pki["alice"]), pika.PlainCredentials("alice", password))
    # EXTERNAL is offered only with a verified certificate: without one the mechanism is unknown
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        amqps(port, client_context(pki), pika.credentials.ExternalCredentials())
    # a certificate naming a user that does not exist: refused like a wrong password
    bob = pki["ca"].issue("bob", server=False)
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        amqps(port, client_context(pki, bob), pika.credentials.ExternalCredentials())
    assert "login refused for user 'bob' (EXTERNAL)" in process.log_tail()


def test_distinguished_name_login(broker_process, pki):
    env = tls_env(pki, OTTERMQ_SSL_VERIFY="verify_peer", OTTERMQ_SSL_CERT_LOGIN_FROM="distinguished_name")
    process = broker_process(env)
    broker = process.start()
    dn = urllib.parse.quote("CN=alice,O=Otters", safe="")
    assert call(broker, f"/api/users/{dn}", "PUT", {"password_hash": "", "tags": ""})[0] == 201
    call(broker, f"/api/permissions/%2F/{dn}", "PUT", {"configure": ".*", "write": ".*", "read": ".*"})
    with amqps(
        int(env["OTTERMQ_SSL_PORT"]),
        client_context(pki, pki["alice"]),
        pika.credentials.ExternalCredentials(),
    ) as conn:
        assert round_trip(conn, "dn.q") == b"over tls"


@pytest.mark.parametrize("problem", ["missing", "mismatch", "expired", "not pem"])
def test_unusable_certificate_files_stop_start_up_naming_the_file(pki, tmp_path, problem):
    server = pki["server"]
    other = pki["ca"].issue("localhost", server=True)
    cert, key, field = server.cert, server.key, "OTTERMQ_SSL_CERT_FILE"
    if problem == "missing":
        cert = tmp_path / "nope.pem"
        reason = "no such file"
    elif problem == "mismatch":
        key, field = other.key, "OTTERMQ_SSL_KEY_FILE"
        reason = f"does not match the certificate in {cert}"
    elif problem == "expired":
        old = pki["ca"].issue("localhost", server=True, expired=True)
        cert, key = old.cert, old.key
        reason = "the certificate expired on "
    else:
        cert = tmp_path / "garbage.pem"
        cert.write_text("hello")
        reason = "not a PEM certificate"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTTERMQ_")}
    env.update(
        PYTHONSAFEPATH="1",
        OTTERMQ_BROKER_HOST="127.0.0.1",
        OTTERMQ_BROKER_PORT=str(_free_port()),
        OTTERMQ_WEB_PORT=str(_free_port()),
        OTTERMQ_PROMETHEUS_PORT=str(_free_port()),
        OTTERMQ_SSL="true",
        OTTERMQ_SSL_PORT=str(_free_port()),
        OTTERMQ_SSL_CERT_FILE=str(cert),
        OTTERMQ_SSL_KEY_FILE=str(key),
        OTTERMQ_DATA_DIR=str(tmp_path / "data"),
    )
    run = subprocess.run(
        [sys.executable, "-m", "ottermq.broker"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode != 0
    line = (run.stdout + run.stderr).strip().splitlines()[-1]
    named = str(key if field.endswith("KEY_FILE") else cert)
    assert f"cannot start: {field}={named}: {reason}" in line, line


def test_sighup_reloads_the_certificate_without_dropping_connections(broker_process, pki, tmp_path):
    first = pki["ca"].issue("localhost", server=True)
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    cert.write_bytes(first.cert.read_bytes())
    key.write_bytes(first.key.read_bytes())
    env = tls_env(pki, Issued(cert, key, first.serial))
    process = broker_process(env)
    process.start()
    port = int(env["OTTERMQ_SSL_PORT"])

    def served_serial() -> int:
        with socket.create_connection(("127.0.0.1", port)) as raw:
            with client_context(pki).wrap_socket(raw, server_hostname="localhost") as tls:
                der = tls.getpeercert(binary_form=True)
        from cryptography import x509

        return int(x509.load_der_x509_certificate(der).serial_number)

    assert served_serial() == first.serial
    kept = amqps(port, client_context(pki))
    second = pki["ca"].issue("localhost", server=True)
    cert.write_bytes(second.cert.read_bytes())
    key.write_bytes(second.key.read_bytes())
    process.proc.send_signal(signal.SIGHUP)
    poll_until(
        lambda: served_serial() == second.serial,
        timeout=10,
        interval=0.1,
        what="the new certificate to be served",
        explain=process.log_tail,
    )
    assert round_trip(kept, "kept.q") == b"over tls"  # the open connection was not dropped
    kept.close()
    # a broken file on reload: the old certificate stays, the broker says why
    cert.write_text("broken")
    process.proc.send_signal(signal.SIGHUP)
    poll_until(  # once this is logged the reload attempt is over
        lambda: "TLS files not reloaded, the previous ones stay in use" in process.log_tail(),
        timeout=10,
        interval=0.05,
        what="the broker to log the failed reload",
        explain=process.log_tail,
    )
    assert served_serial() == second.serial


def test_https_for_the_management_api_and_metrics(broker_process, pki):
    web_port, metrics_port = _free_port(), _free_port()
    env = tls_env(
        pki,
        OTTERMQ_WEB_SSL="true",
        OTTERMQ_WEB_SSL_PORT=str(web_port),
        OTTERMQ_PROMETHEUS_SSL="true",
        OTTERMQ_PROMETHEUS_SSL_PORT=str(metrics_port),
    )
    process = broker_process(env)
    broker = process.start()
    context = client_context(pki)
    request = urllib.request.Request(f"https://localhost:{web_port}/api/overview")
    request.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        listeners = {(i["protocol"], i["port"]) for i in json.loads(response.read())["listeners"]}
    http_port = int(broker.management_url.rsplit(":", 1)[1])
    assert ("https", web_port) in listeners and ("http", http_port) in listeners
    with urllib.request.urlopen(f"https://localhost:{web_port}/", context=context, timeout=10) as response:
        assert b"OtterMQ" in response.read()  # the web UI over HTTPS
    metrics = f"https://localhost:{metrics_port}/metrics"
    with urllib.request.urlopen(metrics, context=context, timeout=10) as response:
        assert b"rabbitmq_build_info" in response.read()


def test_https_only_when_the_plain_ports_are_0(broker_process, pki):
    """OTTERMQ_WEB_PORT=0 and OTTERMQ_PROMETHEUS_PORT=0 turn plain HTTP off, as OTTERMQ_BROKER_PORT=0
    does for AMQP: only the HTTPS ports listen (before, 0 bound a plain port anywhere free)."""
    web_port, metrics_port = _free_port(), _free_port()
    env = tls_env(
        pki,
        OTTERMQ_WEB_SSL="true",
        OTTERMQ_WEB_SSL_PORT=str(web_port),
        OTTERMQ_WEB_PORT="0",
        OTTERMQ_PROMETHEUS_SSL="true",
        OTTERMQ_PROMETHEUS_SSL_PORT=str(metrics_port),
        OTTERMQ_PROMETHEUS_PORT="0",
    )
    process = broker_process(env)
    process.start()
    context = client_context(pki)
    request = urllib.request.Request(f"https://localhost:{web_port}/api/overview")
    request.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        listeners = {(i["protocol"], i["port"]) for i in json.loads(response.read())["listeners"]}
    assert {p for p in listeners if p[0].startswith("http")} == {  # what the broker has bound
        ("https", web_port),
        ("https/prometheus", metrics_port),
    }, listeners
    with urllib.request.urlopen(
        f"https://localhost:{metrics_port}/metrics", context=context, timeout=10
    ) as r:
        assert b"rabbitmq_build_info" in r.read()


# -- the other clients over TLS ------------------------------------------------------------------------
from . import client_programs as programs  # noqa: E402
from .test_go_client import go_client  # noqa: E402,F401 - the session fixture building the Go client
from .test_java_client import java_client  # noqa: E402,F401 - javac'd once per session
from .test_node_client import node_client  # noqa: E402,F401 - node and the locked amqplib
from .test_php_clients import AMQPLIB, EXTENSION, php  # noqa: E402,F401
from .test_ruby_client import ruby_client  # noqa: E402,F401

ALICE_ONLY = "alice-only"


@pytest.fixture(scope="module")
def tls_broker(pki, tmp_path_factory):
    """One AMQPS broker (verify_peer, client certificates optional) with user ``alice`` for EXTERNAL."""
    from .conftest import BrokerProcess

    env = tls_env(pki, OTTERMQ_SSL_VERIFY="verify_peer")
    process = BrokerProcess(env)
    broker = process.start()
    call(broker, "/api/users/alice", "PUT", {"password_hash": "", "tags": ""})
    call(broker, "/api/permissions/%2F/alice", "PUT", {"configure": ".*", "write": ".*", "read": ".*"})
    # a vhost only alice may use: a client that says EXTERNAL but logs in as guest is refused there
    call(broker, f"/api/vhosts/{ALICE_ONLY}", "PUT", {})
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    call(broker, f"/api/permissions/{ALICE_ONLY}/alice", "PUT", everything)
    call(broker, f"/api/permissions/{ALICE_ONLY}/guest", "DELETE")
    try:
        yield int(env["OTTERMQ_SSL_PORT"])
    finally:
        process.close()


def client_run(argv: list[str]) -> dict[str, Any]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    result = json.loads(done.stdout)
    assert done.returncode == 0 and result["ok"], f"{done.stdout}\n{done.stderr}"
    return dict(result["data"])


@pytest.mark.parametrize("login", ["plain", "certificate", "external"])
def test_amqp091_go_over_tls(go_client, pki, tls_broker, login):  # noqa: F811
    port, alice = tls_broker, pki["alice"]
    url = (
        f"amqps://guest:guest@localhost:{port}/%2F"
        if login != "external"
        else f"amqps://localhost:{port}/%2F"
    )
    argv = [
        str(go_client),
        "pubsub",
        "-url",
        url,
        "-prefix",
        f"tls.go.{login}",
        "-count",
        "20",
        "-prefetch",
        "5",
        "-ca",
        str(pki["ca"].cert_file),
    ]
    if login != "plain":
        argv += ["-cert", str(alice.cert), "-key", str(alice.key)]
    if login == "external":
        argv.append("-external")
    assert client_run(argv)["received"] == 20


@pytest.mark.parametrize("login", ["plain", "certificate", "external"])
def test_amqplib_over_tls(node_client, pki, tls_broker, login):  # noqa: F811
    port, alice = tls_broker, pki["alice"]
    url = (
        f"amqps://guest:guest@localhost:{port}/%2F"
        if login != "external"
        else f"amqps://localhost:{port}/%2F"
    )
    argv = [
        *node_client,
        "confirm",
        "--url",
        url,
        "--prefix",
        f"tls.node.{login}",
        "--ca",
        str(pki["ca"].cert_file),
    ]
    if login != "plain":
        argv += ["--cert", str(alice.cert), "--key", str(alice.key)]
    if login == "external":
        argv.append("--external")
    client_run(argv)


# RabbitMQ's Java client, Bunny and both PHP libraries run their ``pubsub`` scenario (confirms, typed headers,
# 200 messages consumed with manual acks) over TLS: the server's certificate checked against the test's CA,
# with a client certificate, and logged in by it (SASL EXTERNAL as user ``alice``).
OTHER_CLIENTS = ["java", "ruby", "php-amqplib", "php-amqp"]


def other_client(request: pytest.FixtureRequest, client: str) -> list[str]:
    if client.startswith("php"):
        return [request.getfixturevalue("php"), str(AMQPLIB if client == "php-amqplib" else EXTENSION)]
    return list(request.getfixturevalue(f"{client}_client"))


def tls_client_env(pki: dict[str, Any], login: str, ca: CA | None = None) -> dict[str, str]:
    env = {"OTTER_TLS_CA": str((ca or pki["ca"]).cert_file)}
    if login != "plain":
        env |= {"OTTER_TLS_CERT": str(pki["alice"].cert), "OTTER_TLS_KEY": str(pki["alice"].key)}
    if login == "external":
        env["OTTER_TLS_EXTERNAL"] = "1"
    return env


@pytest.mark.parametrize("login", ["plain", "certificate", "external"])
@pytest.mark.parametrize("client", OTHER_CLIENTS)
def test_java_ruby_and_php_clients_over_tls(request, pki, tls_broker, client, login):
    where = f"localhost:{tls_broker}/{ALICE_ONLY}" if login == "external" else f"localhost:{tls_broker}/%2F"
    url = f"amqps://{'' if login == 'external' else 'guest:guest@'}{where}"
    argv = [*other_client(request, client), "pubsub", url, f"tls.{client}.{login}"]
    run = programs.run(argv, "pubsub", env=tls_client_env(pki, login))
    assert run.data["consumed"] == 200
    run.self_check()


@pytest.mark.parametrize("client", OTHER_CLIENTS)
def test_java_ruby_and_php_clients_check_the_server_certificate(request, pki, tls_broker, client):
    """Trusting another CA, each client refuses the broker's certificate (and so never sends a frame)."""
    argv = [*other_client(request, client), "pubsub", f"amqps://guest:guest@localhost:{tls_broker}/%2F", "x"]
    run = programs.run(argv, "pubsub", env=tls_client_env(pki, "plain", pki["other"]), allow_error=True)
    assert run.error is not None and run.data == {}


def test_aio_pika_over_tls_with_external(pki, tls_broker):
    import asyncio

    import aio_pika

    async def main() -> bytes:
        context = client_context(pki, pki["alice"])
        connection = await aio_pika.connect(
            f"amqps://localhost:{tls_broker}/%2F?auth=external", ssl_context=context, timeout=10
        )
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue("tls.aio", auto_delete=True)
            await channel.default_exchange.publish(aio_pika.Message(b"aio over tls"), routing_key=queue.name)
            message = await queue.get(timeout=5)
            await message.ack()
            return bytes(message.body)

    assert asyncio.run(main()) == b"aio over tls"


def test_health_checks_know_the_tls_listeners_and_certificate_expiry(broker_process, pki):
    short = pki["ca"].issue("localhost", server=True, days=10)
    env = tls_env(pki, short)
    broker = broker_process(env).start()
    port = int(env["OTTERMQ_SSL_PORT"])
    assert call(broker, f"/api/health/checks/port-listener/{port}")[0] == 200
    answer = call(broker, "/api/health/checks/protocol-listener/amqps")[2]
    assert answer == {"status": "ok", "protocol": "amqp/ssl"}
    assert call(broker, "/api/health/checks/certificate-expiration/1/weeks")[0] == 200
    status, _, body = call(broker, "/api/health/checks/certificate-expiration/1/months")
    assert status == 503 and body["reason"] == "Certificates expiring"
    expiring = [(e["protocol"], e["port"], e["certfile"]) for e in body["expired"]]
    assert expiring == [("amqp/ssl", port, str(short.cert))]
