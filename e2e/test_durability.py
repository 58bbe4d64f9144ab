"""Durable storage with the real process: restarts, TTL across restarts, SIGTERM flush, and the
crash test (kill -9 under confirmed load: every confirmed message survives exactly once).

These restart the broker, so they run against ottermq only (``extension``)."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time

import pika
import pytest

pytestmark = pytest.mark.extension

PERSISTENT = pika.BasicProperties(delivery_mode=2)
# tests of the SQLite store's data dir and file (the PostgreSQL pass of make test runs them on SQLite too)
SQLITE = {"OTTERMQ_STORE": "sqlite"}


def connect(broker) -> tuple[pika.BlockingConnection, pika.adapters.blocking_connection.BlockingChannel]:
    conn = pika.BlockingConnection(broker.params())
    return conn, conn.channel()


def count(ch, q: str) -> int:
    return ch.queue_declare(q, passive=True).method.message_count


def test_durable_entities_and_persistent_messages_survive_restart(broker_process, drain):
    process = broker_process()
    conn, ch = connect(process.start())
    ch.confirm_delivery()
    ch.exchange_declare("dx", "topic", durable=True)
    ch.exchange_declare("tx", "fanout")  # transient exchange: gone after restart
    ch.queue_declare("dq", durable=True, arguments={"x-max-priority": 5})
    ch.queue_declare("tq")  # transient queue: gone
    ch.queue_bind("dq", "dx", "a.#")
    for i in range(5):
        ch.basic_publish("dx", "a.b", b"p%d" % i, pika.BasicProperties(delivery_mode=2, priority=i % 2))
    ch.basic_publish("dx", "a.b", b"transient-msg")  # delivery_mode 1: not kept
    method, _, body = ch.basic_get("dq")  # delivered, not acked: comes back redelivered
    assert body == b"p1"  # priority 1 first
    conn.close()
    assert process.stop() == 0

    conn, ch = connect(process.start())
    assert drain(ch, "dq", redelivered=True) == [
        (b"p1", True),
        (b"p3", False),
        (b"p0", False),
        (b"p2", False),
        (b"p4", False),
    ]
    ch.basic_publish("dx", "a.z", b"routed", PERSISTENT)  # binding survived
    assert drain(ch, "dq", redelivered=True) == [(b"routed", False)]
    for name in ("tq",):
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            ch.queue_declare(name, passive=True)
        ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        ch.exchange_declare("tx", passive=True)
    conn.close()


def test_acked_messages_do_not_come_back(broker_process, drain):
    process = broker_process()
    conn, ch = connect(process.start())
    ch.confirm_delivery()
    ch.queue_declare("q", durable=True)
    for i in range(10):
        ch.basic_publish("", "q", b"%d" % i, PERSISTENT)
    for _ in range(4):
        method, _, _ = ch.basic_get("q")
        ch.basic_ack(method.delivery_tag)
    ch.queue_declare("q", passive=True)  # round trip: the acks were processed
    conn.close()
    process.stop()
    conn, ch = connect(process.start())
    assert [b for b, _ in drain(ch, "q", redelivered=True)] == [b"%d" % i for i in range(4, 10)]
    conn.close()


def wait_past(epoch_s: float, poll_until) -> None:
    """Return once the wall clock (which the broker's deadlines use) is past ``epoch_s``."""
    poll_until(lambda: time.time() > epoch_s, timeout=max(epoch_s - time.time(), 0) + 5)


def test_ttl_keeps_counting_across_restart_and_lapsed_messages_are_dead_lettered(
    broker_process, poll_until, drain
):
    process = broker_process()
    conn, ch = connect(process.start())
    ch.confirm_delivery()
    ch.exchange_declare("dlx", "fanout", durable=True)
    ch.queue_declare("dlq", durable=True)
    ch.queue_bind("dlq", "dlx")
    args = {"x-message-ttl": 60000, "x-dead-letter-exchange": "dlx"}
    ch.queue_declare("work", durable=True, arguments=args)
    ch.basic_publish("", "work", b"short", pika.BasicProperties(delivery_mode=2, expiration="400"))
    confirmed_at = time.time()  # the broker enqueued it before confirming: its deadline is earlier + 0.4
    ch.basic_publish("", "work", b"long", PERSISTENT)
    conn.close()
    process.stop()
    wait_past(confirmed_at + 0.45, poll_until)  # "short" lapses while the broker is down
    conn, ch = connect(process.start())
    method, props, body = ch.basic_get("dlq", auto_ack=True)
    assert body == b"short"
    death = props.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["original-expiration"]) == ("expired", "work", "400")
    assert count(ch, "work") == 1 and count(ch, "dlq") == 0
    conn.close()
    process.stop()
    conn, ch = connect(process.start())
    assert count(ch, "dlq") == 0  # dead-lettered once, not again
    assert [b for b, _ in drain(ch, "work", redelivered=True)] == [b"long"]
    conn.close()


def test_x_expires_clock_resumes_after_restart(broker_process, poll_until):
    """The queue's x-expires deadline lapses while the broker is down: it is deleted at once after
    the restart, well before a clock restarted at boot would delete it (x-expires after recovery)."""
    expires_ms = 2500
    process = broker_process()
    conn, ch = connect(process.start())
    ch.queue_declare("exp", durable=True, arguments={"x-expires": expires_ms})
    declared_at = time.time()  # declare-ok came back: the deadline is before this + x-expires
    conn.close()
    process.stop()
    wait_past(declared_at + expires_ms / 1000 + 0.05, poll_until)
    conn, _ = connect(process.start())

    def gone() -> bool:
        probe = conn.channel()
        try:
            probe.queue_declare("exp", passive=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            assert exc.reply_code == 404
            return True
        probe.close()
        return False

    poll_until(gone, timeout=expires_ms / 2000)  # a restarted clock needs the whole x-expires
    conn.close()


def test_sigterm_flushes_what_was_accepted(broker_process):
    process = broker_process()
    conn, ch = connect(process.start())
    ch.queue_declare("flush", durable=True)
    for i in range(2000):
        ch.basic_publish("", "flush", b"m%d" % i, PERSISTENT)  # no confirms
    assert count(ch, "flush") == 2000  # a round trip: all 2000 were accepted
    process.stop()
    conn, ch = connect(process.start())
    assert count(ch, "flush") == 2000
    conn.close()


def test_non_durable_and_exclusive_queues_are_gone_after_restart(broker_process):
    process = broker_process()
    conn, ch = connect(process.start())
    ch.queue_declare("excl", durable=True, exclusive=True)
    ch.queue_declare("plain", durable=False)
    process.stop()
    conn, ch = connect(process.start())
    for name in ("excl", "plain"):
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            ch.queue_declare(name, passive=True)
        ch = conn.channel()
    conn.close()


def _confirmed_publisher(
    broker, tag: int, stop: threading.Event, confirmed: list[bytes], errors: list[BaseException]
) -> None:
    try:
        conn, ch = connect(broker)
        ch.confirm_delivery()
        i = 0
        while not stop.is_set():
            body = b"c%d-%08d" % (tag, i)
            ch.basic_publish("", "crash", body, PERSISTENT)  # returns once confirmed
            confirmed.append(body)
            i += 1
    except (pika.exceptions.AMQPError, OSError) as exc:
        errors.append(exc)


@pytest.mark.parametrize("attempt", range(3))
def test_kill_9_under_load_loses_no_confirmed_message(broker_process, poll_until, attempt, drain):
    process = broker_process()
    b = process.start()
    conn, ch = connect(b)
    ch.queue_declare("crash", durable=True)
    conn.close()
    stop = threading.Event()
    per_thread: list[list[bytes]] = [[] for _ in range(3)]
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_confirmed_publisher, args=(b, i, stop, per_thread[i], errors), daemon=True)
        for i in range(3)
    ]
    for t in threads:
        t.start()
    target = random.randint(60, 1500)  # the kill comes at a random point of the load
    poll_until(lambda: errors or sum(map(len, per_thread)) >= target, timeout=30)
    process.kill()  # SIGKILL
    stop.set()
    for t in threads:
        t.join(10)
    confirmed = {body for bodies in per_thread for body in bodies}
    assert len(confirmed) > 50, "the load did not get going"

    conn, ch = connect(process.start())  # the store opens cleanly
    stored = [body for body, _ in drain(ch, "crash", redelivered=True)]
    assert len(stored) == len(set(stored)), "a message came back twice"
    missing = confirmed - set(stored)
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:3]}"
    conn.close()


def test_corrupt_database_is_reported_not_replaced(broker_process):
    process = broker_process(SQLITE)
    process.start()
    process.stop()
    db = process.data_dir / "ottermq.db"
    for extra in ("-wal", "-shm"):
        (process.data_dir / f"ottermq.db{extra}").unlink(missing_ok=True)
    db.write_bytes(b"this is not a database" * 100)
    with pytest.raises(pytest.fail.Exception):
        process.start(timeout=10)
    process.died = False
    log = process.log_tail().lower()
    assert "corrupt" in log or "not a database" in log
    assert db.read_bytes().startswith(b"this is not a database")


def test_newer_schema_is_refused(broker_process):
    process = broker_process(SQLITE)
    process.start()
    process.stop()
    with sqlite3.connect(process.data_dir / "ottermq.db") as db:
        db.execute("PRAGMA user_version = 999")
    with pytest.raises(pytest.fail.Exception):
        process.start(timeout=10)
    process.died = False
    assert "newer" in process.log_tail()


def test_second_broker_on_the_same_data_dir_is_refused(broker_process):
    first = broker_process(SQLITE)
    first.start()
    second = broker_process(SQLITE, data_dir=first.data_dir)
    with pytest.raises(pytest.fail.Exception):
        second.start(timeout=10)
    second.died = False
    assert "in use" in second.log_tail()


def test_each_vhost_recovers_its_own_entities(broker_process, drain):
    process = broker_process({"OTTERMQ_VHOSTS": "/,other"})
    b = process.start()
    for vhost, tag in (("/", b"root"), ("other", b"other")):
        conn = pika.BlockingConnection(b.params(virtual_host=vhost))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare(f"x-{tag.decode()}", "direct", durable=True)
        ch.queue_declare("shared-name", durable=True)
        ch.queue_bind("shared-name", f"x-{tag.decode()}", "k")
        ch.basic_publish(f"x-{tag.decode()}", "k", tag, PERSISTENT)
        conn.close()
    process.stop()
    b = process.start()
    for vhost, tag, other in (("/", b"root", "other"), ("other", b"other", "root")):
        conn = pika.BlockingConnection(b.params(virtual_host=vhost))
        ch = conn.channel()
        assert drain(ch, "shared-name", redelivered=True) == [(tag, False)]
        ch.exchange_declare(f"x-{tag.decode()}", passive=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            ch.exchange_declare(f"x-{other}", passive=True)
        conn.close()


GUEST_HASH = "Jb2wpdgX4zZI0JVNeMTMC7OAG9s6Sfzya9BR1t4X/gv300Iq"  # RabbitMQ's sha256 format, password "guest"


def _cli(*args: str, data_dir) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OTTERMQ_DATA_DIR=str(data_dir), PYTHONSAFEPATH="1", **SQLITE)
    return subprocess.run(
        [sys.executable, "-m", "ottermq.broker", "definitions", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_definitions_cli_import_then_serve_then_export(broker_process, tmp_path):
    defs = {
        "rabbit_version": "3.10.8",
        "users": [
            {
                "name": "guest",
                "password_hash": GUEST_HASH,
                "hashing_algorithm": "rabbit_password_hashing_sha256",
                "tags": ["administrator"],
            }
        ],
        "vhosts": [{"name": "/"}],
        "permissions": [{"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}],
        "exchanges": [
            {
                "name": "orders",
                "vhost": "/",
                "type": "topic",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            }
        ],
        "queues": [
            {
                "name": "orders.eu",
                "vhost": "/",
                "durable": True,
                "auto_delete": False,
                "arguments": {"x-message-ttl": 60000},
            }
        ],
        "bindings": [
            {
                "source": "orders",
                "vhost": "/",
                "destination": "orders.eu",
                "destination_type": "queue",
                "routing_key": "eu.#",
                "arguments": {},
            }
        ],
    }
    path = tmp_path / "defs.json"
    path.write_text(json.dumps(defs))
    process = broker_process(SQLITE)
    result = _cli("import", str(path), data_dir=process.data_dir)
    assert result.returncode == 0, result.stderr
    b = process.start()
    conn = pika.BlockingConnection(b.params())
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("orders", "eu.fr", b"order", PERSISTENT)
    assert count(ch, "orders.eu") == 1
    conn.close()
    # while the broker runs, the CLI refuses to touch its data dir
    busy = _cli("export", data_dir=process.data_dir)
    assert busy.returncode == 1 and "in use" in busy.stderr
    process.stop()
    exported = json.loads(_cli("export", data_dir=process.data_dir).stdout)
    assert [q["name"] for q in exported["queues"]] == ["orders.eu"]
    assert exported["queues"][0]["arguments"] == {"x-message-ttl": 60000}
    assert exported["bindings"][0]["routing_key"] == "eu.#"
