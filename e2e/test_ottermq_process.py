"""ottermq process-level behaviour RabbitMQ's suite cannot share: the OTTERMQ_ENABLE_* toggles,
graceful shutdown on SIGTERM/SIGINT, configuration errors. Each test runs a private broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pika
import pytest

pytestmark = pytest.mark.extension


def open_channel(broker):
    conn = pika.BlockingConnection(broker.params())
    return conn, conn.channel()


def count(ch, q: str) -> int:
    return ch.queue_declare(q, passive=True).method.message_count


def wait_for(predicate, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def ttl_dlx_topology(ch):
    ch.exchange_declare("dlx", "fanout")
    ch.queue_declare("dlq")
    ch.queue_bind("dlq", "dlx")
    ch.queue_declare("work", arguments={"x-message-ttl": 50, "x-dead-letter-exchange": "dlx"})


def test_ttl_disabled_messages_never_expire(broker_process):
    b = broker_process({"OTTERMQ_ENABLE_TTL": "false"}).start()
    conn, ch = open_channel(b)
    ttl_dlx_topology(ch)
    ch.basic_publish("", "work", b"kept", pika.BasicProperties(expiration="10"))
    time.sleep(0.3)  # six TTLs: with TTL disabled nothing may happen
    assert (count(ch, "work"), count(ch, "dlq")) == (1, 0)
    conn.close()


def test_ttl_enabled_by_default(broker_process):
    b = broker_process().start()
    conn, ch = open_channel(b)
    ttl_dlx_topology(ch)
    ch.basic_publish("", "work", b"dies")
    assert wait_for(lambda: count(ch, "dlq") == 1)
    conn.close()


def test_dlx_disabled_drops_dead_letters(broker_process):
    b = broker_process({"OTTERMQ_ENABLE_DLX": "0"}).start()
    conn, ch = open_channel(b)
    ttl_dlx_topology(ch)
    ch.basic_publish("", "work", b"dropped")
    assert wait_for(lambda: count(ch, "work") == 0)
    time.sleep(0.1)
    assert count(ch, "dlq") == 0
    conn.close()


def test_qll_disabled_ignores_length_limits(broker_process):
    b = broker_process({"OTTERMQ_ENABLE_QLL": "F"}).start()
    conn, ch = open_channel(b)
    ch.queue_declare("short", arguments={"x-max-length": 1})
    for i in range(3):
        ch.basic_publish("", "short", b"%d" % i)
    assert count(ch, "short") == 3
    conn.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_closes_connections_with_320_and_exits_cleanly(broker_process, sig):
    process = broker_process()
    b = process.start()
    conn, ch = open_channel(b)
    closed: list[BaseException] = []

    def consume() -> None:
        try:
            ch.queue_declare("q")
            ch.basic_consume("q", lambda *a: None)
            ch.start_consuming()
        except BaseException as exc:  # noqa: BLE001 - we want the close reason
            closed.append(exc)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    time.sleep(0.2)
    assert process.stop(sig) == 0
    t.join(5)
    assert closed and isinstance(closed[0], pika.exceptions.ConnectionClosedByBroker)
    assert closed[0].reply_code == 320
    assert closed[0].reply_text == (
        "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
    )


def test_bad_setting_stops_startup_naming_the_variable(tmp_path):
    env = dict(os.environ, OTTERMQ_BROKER_PORT="not-a-port", PYTHONSAFEPATH="1")
    result = subprocess.run(
        [sys.executable, "-m", "ottermq.broker"], env=env, cwd=tmp_path, capture_output=True, timeout=30
    )
    assert result.returncode != 0
    assert b"OTTERMQ_BROKER_PORT" in result.stderr


def test_dotenv_file_is_read(broker_process, tmp_path):
    process = broker_process()
    (process.tmp / ".env").write_text("OTTERMQ_ENABLE_QLL=false\n")
    b = process.start()
    conn, ch = open_channel(b)
    ch.queue_declare("short", arguments={"x-max-length": 1})
    for i in range(2):
        ch.basic_publish("", "short", b"%d" % i)
    assert count(ch, "short") == 2
    conn.close()
