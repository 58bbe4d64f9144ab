"""Several worker processes (``OTTERMQ_WORKERS=2``): one broker as clients and the management API see
it, while each vhost lives in one worker (an ottermq extension: RabbitMQ has no such setting).

What is checked, with pika and the management API on a private broker with vhosts ``/``, ``a`` and
``b`` (given to workers 0, 1 and 0: the least busy worker, the lowest number among equals):

- a connection to a vhost worker 1 owns is handed over at ``connection.open`` and served there
  (its queue's messages, a consumer), while worker 0 serves the others;
- the lists (queues, connections, exchanges) and the overview's counts join every worker's;
  requests about one vhost's objects are answered by its owner;
- a vhost, user, permission or policy made over the management API is in every worker when the
  request is answered (a client may use it at once);
- a worker killed is started again and recovers its vhosts' durable messages; a connection to its
  vhost meanwhile gets RabbitMQ's ``530 NOT_ALLOWED - vhost a is down``; the other worker's
  connections carry on;
- the assignment survives a restart of the whole broker;
- a user's connection and channel limits count the connections and channels in every worker.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pika
import pytest

from .polling import poll_until
from .test_tls import client_context, pki, tls_env  # noqa: F401 - pki is a fixture

pytestmark = pytest.mark.extension

EVERYTHING = {"configure": ".*", "write": ".*", "read": ".*"}


def q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def two_worker_process(broker_process: Any, data_dir: Path) -> Any:
    """A broker with 2 workers whose vhosts ``/``, ``a`` and ``b`` go to workers 0, 1 and 0 (as they
    would by themselves; written down so that a suite run with OTTERMQ_WORKERS=2, where the harness
    gives ``/`` to the last worker, does not change it)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    assignment = {"workers": 2, "vhosts": {"/": 0, "a": 1, "b": 0}}
    (data_dir / "workers.json").write_text(json.dumps(assignment))
    # SQLite: workers keep which one owns a vhost in the data dir (PostgreSQL runs one worker)
    env = {"OTTERMQ_WORKERS": "2", "OTTERMQ_VHOSTS": "/,a,b", "OTTERMQ_STORE": "sqlite"}
    return broker_process(env, data_dir)


@pytest.fixture
def two_workers(broker_process: Any, tmp_path: Path) -> Any:
    process = two_worker_process(broker_process, tmp_path / "data")
    broker = process.start()
    return process, broker


def connect(broker: Any, vhost: str, **kwargs: Any) -> pika.BlockingConnection:
    return pika.BlockingConnection(broker.params(virtual_host=vhost, **kwargs))


def closed_by_broker(conn: pika.BlockingConnection) -> pika.exceptions.ConnectionClosedByBroker | None:
    """The broker's Connection.Close of ``conn`` once it arrives, else None (after 50 ms of events)."""
    try:
        conn.process_data_events(time_limit=0.05)
    except pika.exceptions.ConnectionClosedByBroker as exc:
        return exc
    return None


def limited_user(broker: Any, user: str, limit: str, value: int) -> pika.PlainCredentials:
    """A user (password ``pw``) with every permission in vhosts ``a`` and ``b`` (worker 1's and worker
    0's) and the user limit ``limit`` set to ``value``; its credentials."""
    assert broker.api(f"/api/users/{user}", "PUT", {"password": "pw", "tags": ""})[0] == 201
    for vhost in ("a", "b"):
        assert broker.api(f"/api/permissions/{vhost}/{user}", "PUT", EVERYTHING)[0] == 201
    assert broker.api(f"/api/user-limits/{user}/{limit}", "PUT", {"value": value})[0] == 204
    return pika.PlainCredentials(user, "pw")


def worker_pids(process: Any) -> dict[int, int]:
    """Worker index -> pid, from the children of the broker process."""
    out = {}
    for status in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = status.read_bytes().split(b"\0")
            ppid = int(Path(status.parent, "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == process.proc.pid and b"ottermq.broker.workers" in argv:
            out[int(argv[argv.index(b"ottermq.broker.workers") + 1])] = int(status.parent.name)
    return out


def test_connections_are_served_by_the_owner_and_the_api_shows_one_broker(two_workers: Any) -> None:
    process, broker = two_workers
    assert set(worker_pids(process)) == {1}
    conns = {}
    for vhost in ("/", "a", "b"):
        conn = conns[vhost] = connect(broker, vhost, client_properties={"connection_name": f"in-{vhost}"})
        ch = conn.channel()
        ch.queue_declare("jobs", durable=True)
        for i in range(3):
            ch.basic_publish("", "jobs", f"{vhost}-{i}".encode(), pika.BasicProperties(delivery_mode=2))
    # worker 1 logs the connection it took over
    poll_until(lambda: "[worker 1] INFO" in process.log_tail(400) and "vhost 'a'" in process.log_tail(400))

    def full() -> list[Any]:
        return [x for x in broker.api("/api/queues")[1] if x.get("messages") == 3]

    queues = poll_until(full, timeout=10)
    assert sorted((x["vhost"], x["name"]) for x in queues) == [("/", "jobs"), ("a", "jobs"), ("b", "jobs")]
    status, one = broker.api("/api/queues/a/jobs")
    assert status == 200 and one["vhost"] == "a" and one["durable"] is True
    names = sorted(c["client_properties"].get("connection_name") for c in broker.api("/api/connections")[1])
    assert names == ["in-/", "in-a", "in-b"]
    status, page = broker.api("/api/queues?page=1&page_size=2&sort=vhost")
    assert status == 200 and page["total_count"] == 3 and [x["vhost"] for x in page["items"]] == ["/", "a"]
    exchanges = broker.api("/api/exchanges")[1]
    assert sorted({x["vhost"] for x in exchanges}) == ["/", "a", "b"]
    assert len(exchanges) == 3 * len([x for x in exchanges if x["vhost"] == "a"])  # no copies
    totals = broker.api("/api/overview")[1]["object_totals"]
    assert (totals["queues"], totals["connections"], totals["exchanges"]) == (3, 3, len(exchanges))
    assert broker.api("/api/queues/a/missing")[0] == 404
    assert broker.api("/api/queues/nowhere/jobs")[0] == 404

    # Prometheus: one broker too (worker 1's queue among the per-object series, node totals added up)
    with urllib.request.urlopen(broker.prometheus_url + "/metrics", timeout=10) as answer:
        metrics = answer.read().decode()
    assert "\nrabbitmq_queues 3.0\n" in metrics and "\nrabbitmq_connections 3.0\n" in metrics
    assert metrics.count("\nrabbitmq_identity_info{") == 1
    with urllib.request.urlopen(broker.prometheus_url + "/metrics/per-object", timeout=10) as answer:
        per_object = answer.read().decode()
    ready = [line for line in per_object.splitlines() if line.startswith("rabbitmq_queue_messages_ready{")]
    assert sorted(line.split('vhost="')[1].split('"')[0] for line in ready) == ["/", "a", "b"]

    # consume in worker 1's vhost, over the handed-over connection
    ch = conns["a"].channel()
    got = [ch.basic_get("jobs", auto_ack=True)[2] for _ in range(3)]
    assert got == [b"a-0", b"a-1", b"a-2"]
    for conn in conns.values():
        conn.close()


def test_metadata_made_over_the_api_is_usable_at_once_in_every_worker(two_workers: Any) -> None:
    _process, broker = two_workers
    for vhost in ("c", "d"):  # c goes to worker 1, d to worker 0 (or the other way): both owners
        assert broker.api(f"/api/vhosts/{vhost}", "PUT", {})[0] == 201
    assert broker.api("/api/users/ann", "PUT", {"password": "pw", "tags": ""})[0] == 201
    for vhost in ("a", "c", "d"):
        assert broker.api(f"/api/permissions/{vhost}/ann", "PUT", EVERYTHING)[0] == 201
        conn = connect(broker, vhost, credentials=pika.PlainCredentials("ann", "pw"))
        conn.channel().queue_declare("mine")
        conn.close()
    policy = {"pattern": "^ttl\\.", "definition": {"message-ttl": 1234}, "apply-to": "queues"}
    assert broker.api("/api/policies/a/short", "PUT", policy)[0] == 201
    conn = connect(broker, "a")
    conn.channel().queue_declare("ttl.q")
    conn.close()
    status, queue = broker.api("/api/queues/a/ttl.q")
    assert status == 200 and queue["policy"] == "short"
    assert queue["effective_policy_definition"] == {"message-ttl": 1234}
    # a user deleted is disconnected from every worker's vhosts (320), and cannot log in again
    assert broker.api("/api/permissions/%2F/ann", "PUT", EVERYTHING)[0] == 201
    opened = [connect(broker, vhost, credentials=pika.PlainCredentials("ann", "pw")) for vhost in ("a", "/")]
    assert broker.api("/api/users/ann", "DELETE")[0] == 204
    for conn in opened:
        closed = poll_until(lambda c=conn: closed_by_broker(c), timeout=10, what="ann's connection closed")
        assert (closed.reply_code, closed.reply_text) == (320, "CONNECTION_FORCED - user 'ann' is deleted")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(broker, "a", credentials=pika.PlainCredentials("ann", "pw"))
    # a vhost deleted is gone from its owner too: its queue with it
    assert broker.api("/api/vhosts/c", "DELETE")[0] == 204
    assert all(x["vhost"] != "c" for x in broker.api("/api/queues")[1])


def test_a_killed_worker_is_started_again_and_recovers_its_vhosts(two_workers: Any) -> None:
    process, broker = two_workers
    conn = connect(broker, "a")
    ch = conn.channel()
    ch.queue_declare("kept", durable=True)
    ch.confirm_delivery()
    ch.basic_publish("", "kept", b"survives", pika.BasicProperties(delivery_mode=2))
    conn.close()
    other = connect(broker, "b")  # worker 0's: stays open throughout
    other_ch = other.channel()
    other_ch.queue_declare("steady")

    pid = worker_pids(process)[1]
    os.kill(pid, signal.SIGKILL)
    # while it is down (or already back): RabbitMQ's answer for a vhost that is down, or service
    try:
        connect(broker, "a").close()
    except pika.exceptions.ProbableAccessDeniedError as exc:
        assert "NOT_ALLOWED - vhost a is down" in str(exc)
    other_ch.basic_publish("", "steady", b"still here")
    assert other_ch.basic_get("steady", auto_ack=True)[2] == b"still here"

    poll_until(lambda: worker_pids(process).get(1, pid) != pid, timeout=15, what="worker 1 started again")

    def recovered() -> bytes | None:
        try:
            conn = connect(broker, "a")
        except pika.exceptions.AMQPError:
            return None
        try:
            return conn.channel().basic_get("kept", auto_ack=True)[2]
        finally:
            conn.close()

    assert poll_until(recovered, timeout=15) == b"survives"
    other.close()


def test_the_assignment_and_every_workers_messages_survive_a_restart(
    broker_process: Any, tmp_path: Path
) -> None:
    process = two_worker_process(broker_process, tmp_path / "data")
    broker = process.start()
    for vhost in ("/", "a"):
        conn = connect(broker, vhost)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("durable", durable=True)
        ch.basic_publish("", "durable", vhost.encode(), pika.BasicProperties(delivery_mode=2))
        conn.close()
    assert process.stop() == 0
    assert (process.data_dir / "worker-1").is_dir()
    broker = process.start()
    for vhost in ("/", "a"):
        conn = connect(broker, vhost)
        assert conn.channel().basic_get("durable", auto_ack=True)[2] == vhost.encode()
        conn.close()
    log = process.log_tail(400)
    assert "worker 1: a" in log


def test_definitions_imported_over_the_api_land_in_each_vhosts_owner(two_workers: Any) -> None:
    _process, broker = two_workers
    definitions = {
        "vhosts": [{"name": "e"}, {"name": "f"}],
        "permissions": [
            {"user": "guest", "vhost": v, "configure": ".*", "write": ".*", "read": ".*"} for v in ("e", "f")
        ],
        "queues": [
            {"name": "imported", "vhost": v, "durable": True, "auto_delete": False, "arguments": {}}
            for v in ("a", "b", "e", "f")
        ],
        "exchanges": [],
        "bindings": [],
    }
    assert broker.api("/api/definitions", "POST", definitions)[0] == 204
    listed = sorted(x["vhost"] for x in broker.api("/api/queues")[1] if x["name"] == "imported")
    assert listed == ["a", "b", "e", "f"]  # once each: declared by the owner only
    exported = broker.api("/api/definitions")[1]
    assert sorted(x["vhost"] for x in exported["queues"] if x["name"] == "imported") == listed
    for vhost in ("e", "f"):
        conn = connect(broker, vhost)
        conn.channel().queue_declare("imported", passive=True)
        conn.close()


def test_a_tls_connection_to_another_workers_vhost_is_relayed(
    broker_process: Any,
    pki: dict[str, Any],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    env = tls_env(pki, OTTERMQ_SSL_VERIFY="verify_peer")
    data_dir = tmp_path / "data"
    process = two_worker_process(broker_process, data_dir)
    process.extra_env.update(env)
    broker = process.start()
    params = pika.ConnectionParameters(
        "localhost",
        int(env["OTTERMQ_SSL_PORT"]),
        "a",
        ssl_options=pika.SSLOptions(client_context(pki, pki["alice"]), "localhost"),
        credentials=pika.credentials.ExternalCredentials(),
        client_properties={"connection_name": "tls-to-a"},
    )
    assert broker.api("/api/users/alice", "PUT", {"password_hash": "", "tags": ""})[0] == 201
    assert broker.api("/api/permissions/a/alice", "PUT", EVERYTHING)[0] == 201
    with pika.BlockingConnection(params) as conn:  # EXTERNAL: the certificate, read in worker 1
        ch = conn.channel()
        ch.queue_declare("tls.q", auto_delete=True)
        big = b"x" * 1_000_000  # through the relay both ways, in many TLS records
        ch.basic_publish("", "tls.q", big)
        assert poll_until(lambda: ch.basic_get("tls.q", auto_ack=True)[2]) == big
        (item,) = [c for c in broker.api("/api/connections")[1] if c["vhost"] == "a"]
        assert item["ssl"] is True and item["user"] == "alice"
        assert item["peer_host"] == "127.0.0.1" and item["port"] == int(env["OTTERMQ_SSL_PORT"])
        assert item["peer_cert_subject"].startswith("CN=alice") or "alice" in item["peer_cert_subject"]
    assert "[worker 1] INFO ottermq.broker.server.connection: taking over" in process.log_tail(400)


def test_a_users_connection_limit_counts_every_workers_connections(two_workers: Any) -> None:
    _process, broker = two_workers
    bob = limited_user(broker, "bob", "max-connections", 2)
    first, second = connect(broker, "a", credentials=bob), connect(broker, "b", credentials=bob)
    for vhost in ("a", "b"):
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
            connect(broker, vhost, credentials=bob)
        assert "user connection limit (2) is reached" in str(refused.value)
    first.close()  # worker 1 tells worker 0: a connection is free again

    def third() -> bool:
        try:
            connect(broker, "b", credentials=bob).close()
        except pika.exceptions.AMQPError:
            return False
        return True

    assert poll_until(third)
    second.close()


def test_a_users_channel_limit_counts_every_workers_channels(two_workers: Any) -> None:
    _process, broker = two_workers
    carol = limited_user(broker, "carol", "max-channels", 3)
    in_a, in_b = connect(broker, "a", credentials=carol), connect(broker, "b", credentials=carol)
    held = [in_a.channel(), in_a.channel(), in_b.channel()]  # 2 in worker 1, 1 in worker 0

    def refused(vhost: str) -> bool:
        """A new connection's first channel is refused (530, connection closed) in ``vhost``'s worker."""
        conn = connect(broker, vhost, credentials=carol)
        try:
            conn.channel().close()
        except pika.exceptions.ConnectionClosedByBroker as closed:
            assert closed.reply_code == 530
            assert "has reached the maximum allowed user limit of (3)" in closed.reply_text
            return True
        conn.close()
        return False

    assert poll_until(lambda: refused("b"), interval=0.1)  # worker 0 counts worker 1's two
    assert poll_until(lambda: refused("a"), interval=0.1)  # and worker 1 worker 0's one
    held[0].close()  # one channel free in worker 1: worker 0 hears of it

    def opens_in_b() -> bool:
        conn = connect(broker, "b", credentials=carol)
        try:
            conn.channel()
        except pika.exceptions.ConnectionClosedByBroker:
            return False
        conn.close()
        return True

    assert poll_until(opens_in_b, interval=0.1)
    in_a.close()
    in_b.close()
