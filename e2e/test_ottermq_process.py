"""ottermq process-level behaviour RabbitMQ's suite cannot share: the OTTERMQ_ENABLE_* toggles,
graceful shutdown on SIGTERM/SIGINT, configuration errors. Each test runs a private broker."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pika
import pytest

from .conftest import _free_port

pytestmark = pytest.mark.extension


def open_channel(broker):
    conn = pika.BlockingConnection(broker.params())
    return conn, conn.channel()


def count(ch, q: str) -> int:
    return ch.queue_declare(q, passive=True).method.message_count


def stays(predicate, seconds: float) -> None:
    """Assert ``predicate`` holds on every check for ``seconds`` (a bounded window for "nothing happens")."""
    deadline = time.monotonic() + seconds
    while True:
        assert predicate(), "the condition stopped holding"
        if time.monotonic() >= deadline:
            return
        time.sleep(0.02)


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
    stays(lambda: (count(ch, "work"), count(ch, "dlq")) == (1, 0), 0.3)  # six queue TTLs, 30 message TTLs
    method, _, body = ch.basic_get("work", auto_ack=True)  # a take runs the expiry check too
    assert body == b"kept"
    conn.close()


def test_ttl_enabled_by_default(broker_process, poll_until):
    b = broker_process().start()
    conn, ch = open_channel(b)
    ttl_dlx_topology(ch)
    ch.basic_publish("", "work", b"dies")
    poll_until(lambda: count(ch, "dlq") == 1, timeout=3)
    conn.close()


def test_dlx_disabled_drops_dead_letters(broker_process, poll_until):
    b = broker_process({"OTTERMQ_ENABLE_DLX": "0"}).start()
    conn, ch = open_channel(b)
    ttl_dlx_topology(ch)
    ch.basic_publish("", "work", b"dropped")
    poll_until(lambda: count(ch, "work") == 0, timeout=3)
    # dead-lettering happens in the same step as the expiry: had it been routed, it would be there
    stays(lambda: count(ch, "dlq") == 0, 0.1)
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
def test_signal_closes_connections_with_320_and_exits_cleanly(broker_process, poll_until, sig):
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
    watcher = pika.BlockingConnection(b.params())

    def consuming() -> bool:
        probe = watcher.channel()
        try:
            return probe.queue_declare("q", passive=True).method.consumer_count == 1
        except pika.exceptions.ChannelClosedByBroker:  # not declared yet
            return False
        finally:
            if probe.is_open:
                probe.close()

    poll_until(lambda: not t.is_alive() or consuming())
    watcher.close()
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


# --------------------------------------------------------------------------------------------------------
# what an operator meets at start-up: one line per problem, non-zero exit, nothing left on disk
# --------------------------------------------------------------------------------------------------------
def run_broker(tmp_path, timeout: float = 30, args: tuple[str, ...] = (), **settings: str):
    """Run ``python -m ottermq.broker`` in ``tmp_path`` until it exits (it must not start)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTTERMQ_") and k != "LOG_LEVEL"}
    env.update(  # no HTTP listener: none of these is about one (a port of 0 would be "no plain HTTP")
        PYTHONSAFEPATH="1",
        OTTERMQ_BROKER_HOST="127.0.0.1",
        OTTERMQ_ENABLE_WEB_API="false",
        OTTERMQ_ENABLE_PROMETHEUS="false",
    )
    env.update(settings)
    result = subprocess.run(
        [sys.executable, "-m", "ottermq.broker", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        timeout=timeout,
        text=True,
    )
    return result.returncode, (result.stdout + result.stderr).strip().splitlines()


def free_port() -> str:
    return str(_free_port())


def test_no_amqp_listener_is_one_line(tmp_path):
    code, lines = run_broker(tmp_path, OTTERMQ_BROKER_PORT="0", OTTERMQ_DATA_DIR=str(tmp_path / "data"))
    assert code != 0
    assert single_error(lines) == "OTTERMQ_BROKER_PORT=0: no AMQP listener (set it, or OTTERMQ_SSL=true)"
    assert list(tmp_path.iterdir()) == []


def single_error(lines: list[str]) -> str:
    """The one ``cannot start:`` line, with the timestamp and logger cut off."""
    assert len(lines) == 1, "\n".join(lines)
    assert " ERROR ottermq: cannot start: " in lines[0], lines[0]
    return lines[0].split(" ERROR ottermq: cannot start: ", 1)[1]


def test_port_in_use_is_one_line_and_creates_nothing(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, lines = run_broker(
            tmp_path,
            OTTERMQ_BROKER_PORT=str(port),
            OTTERMQ_DATA_DIR=str(tmp_path / "data"),
            OTTERMQ_DLX_ARCHIVE_DIR=str(tmp_path / "archive"),
        )
    assert code != 0
    assert single_error(lines) == (
        f"OTTERMQ_BROKER_PORT={port}: address already in use (set OTTERMQ_BROKER_PORT to a free port)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no data dir, no archive dir


@pytest.mark.parametrize("kind", ["file", "below a file", "unwritable"])
def test_unusable_data_dir_is_one_line(tmp_path, kind):
    (tmp_path / "file").write_text("")
    if kind == "file":
        data_dir, cause = tmp_path / "file", "not a directory"
    elif kind == "below a file":
        data_dir, cause = tmp_path / "file" / "data", "not a directory"
    elif os.geteuid() != 0:
        (tmp_path / "ro").mkdir(mode=0o500)
        data_dir, cause = tmp_path / "ro" / "data", "permission denied"
    else:  # root ignores file modes; sysfs refuses new directories even to root
        data_dir, cause = Path("/sys/ottermq-e2e-data"), None
    code, lines = run_broker(tmp_path, OTTERMQ_BROKER_PORT=free_port(), OTTERMQ_DATA_DIR=str(data_dir))
    assert code != 0
    text = single_error(lines)
    assert text.startswith(f"OTTERMQ_DATA_DIR={data_dir}: ")
    assert text.endswith(" (set OTTERMQ_DATA_DIR to a writable directory)")
    if cause is not None:
        assert text == f"OTTERMQ_DATA_DIR={data_dir}: {cause} (set OTTERMQ_DATA_DIR to a writable directory)"


def test_missing_definitions_file_is_one_line_and_creates_nothing(tmp_path):
    code, lines = run_broker(
        tmp_path,
        OTTERMQ_BROKER_PORT=free_port(),
        OTTERMQ_DATA_DIR=str(tmp_path / "data"),
        OTTERMQ_DEFINITIONS_FILE="definitions.json",
    )
    assert code != 0
    assert single_error(lines) == "OTTERMQ_DEFINITIONS_FILE=definitions.json: no such file or directory"
    assert list(tmp_path.iterdir()) == []


def test_unwritable_archive_dir_is_reported_at_startup(tmp_path):
    (tmp_path / "file").write_text("")
    code, lines = run_broker(
        tmp_path,
        OTTERMQ_BROKER_PORT=free_port(),
        OTTERMQ_DATA_DIR=str(tmp_path / "data"),
        OTTERMQ_DLX_ARCHIVE_DIR=str(tmp_path / "file"),
    )
    assert code != 0
    assert single_error(lines) == (
        f"OTTERMQ_DLX_ARCHIVE_DIR={tmp_path / 'file'}: not a directory"
        " (set OTTERMQ_DLX_ARCHIVE_DIR to a writable directory, or empty for no archive)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # no data dir either


def test_unknown_log_level_stops_startup(tmp_path):
    code, lines = run_broker(tmp_path, LOG_LEVEL="VERBOSE")
    assert code != 0
    assert lines == [
        "invalid configuration:",
        "  LOG_LEVEL: Value error, must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL (any case)"
        " (got 'VERBOSE')",
    ]


def test_typo_in_a_setting_is_a_warning_naming_the_right_one(broker_process):
    process = broker_process({"OTTERMQ_BROKER_PROT": "5673"})
    (process.tmp / ".env").write_text("OTTERMQ_DLX_ARCHIVE_DRI=archive\n")
    process.start()
    log = process.log_tail(200)
    assert (
        "WARNING ottermq: unknown setting OTTERMQ_BROKER_PROT in the environment is ignored;"
        " did you mean OTTERMQ_BROKER_PORT?"
    ) in log
    assert (
        "WARNING ottermq: unknown setting OTTERMQ_DLX_ARCHIVE_DRI in .env is ignored;"
        " did you mean OTTERMQ_DLX_ARCHIVE_DIR?"
    ) in log


def test_changed_password_is_ignored_with_a_warning(broker_process):
    first = broker_process({"OTTERMQ_PASSWORD": "first-secret"})
    first.start()
    assert first.stop() == 0
    second = broker_process({"OTTERMQ_PASSWORD": "second-secret"}, data_dir=first.data_dir)
    b = second.start()
    log = second.log_tail(200)
    assert "second-secret" not in log and "first-secret" not in log
    assert (
        "WARNING ottermq.broker.node.node: OTTERMQ_PASSWORD is not the stored password of user 'guest' and is"
        " ignored: the default user is created at the first start only"
        " (see 'Changing a password' in docs/configuration.md)"
    ) in log
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(b.params(credentials=pika.PlainCredentials("guest", "second-secret")))
    conn = pika.BlockingConnection(b.params(credentials=pika.PlainCredentials("guest", "first-secret")))
    conn.close()


def test_info_log_follows_a_connection_like_rabbitmq(broker_process, poll_until):
    process = broker_process({"OTTERMQ_DLX_ARCHIVE_DIR": "archive"})
    b = process.start()
    conn = pika.BlockingConnection(b.params(client_properties={"connection_name": "orders-app"}))
    ch = conn.channel()
    ch.queue_declare("doomed")
    ch.basic_consume("doomed", lambda *a: None, consumer_tag="c1")
    other, och = open_channel(b)
    och.queue_delete("doomed")
    other.close()
    conn.process_data_events(time_limit=0.2)  # take the basic.cancel
    ch.queue_declare("work", arguments={"x-dead-letter-exchange": "no-such-dlx", "x-message-ttl": 0})
    for _ in range(3):
        ch.basic_publish("", "work", b"x")
    conn.close()
    poll_until(lambda: " - orders-app (vhost '/', user 'guest')" in process.log_tail(200))
    log = process.log_tail(200)
    peer = re.search(r"connection (127\.0\.0\.1:\d+) - orders-app: user", log).group(1)  # type: ignore[union-attr]
    expected = [
        f"INFO ottermq.broker.server.connection: accepting AMQP connection {peer}",
        f"INFO ottermq.broker.server.connection: connection {peer} - orders-app: user 'guest'"
        " authenticated and granted access to vhost '/'",
        f"INFO ottermq.broker.server.channel: consumer 'c1' on channel 1 of {peer} cancelled by the broker:"
        " queue 'doomed' deleted",
        "WARNING ottermq.dlx.deadletter: dropped 1 dead letter(s) since the last warning: dead-letter"
        " exchange 'no-such-dlx' of queue 'work' in vhost '/' not found (declare it, or change"
        " x-dead-letter-exchange; reported at most every 10 s)",
        f"INFO ottermq.broker.server.connection: closing AMQP connection {peer} - orders-app (vhost '/',"
        " user 'guest')",
    ]
    for line in expected:
        assert line in log
    assert log.count("dead-letter exchange 'no-such-dlx'") == 1  # rate-limited: 3 drops, 1 warning
    assert "INFO ottermq.broker.node.wiring: dead-letter archive on: every dead letter is written to" in log
    assert "aiosqlite" not in log


def test_debug_log_has_no_aiosqlite_chatter(broker_process):
    process = broker_process({"LOG_LEVEL": "debug"})
    b = process.start()
    conn, ch = open_channel(b)
    ch.queue_declare("durable", durable=True)
    ch.basic_publish("", "durable", b"x", pika.BasicProperties(delivery_mode=2))
    conn.close()
    assert process.stop() == 0
    log = process.log_tail(500)
    assert " DEBUG " in log
    assert "aiosqlite" not in log


def test_version_and_help(tmp_path):
    code, lines = run_broker(tmp_path, args=("--version",))
    assert (code, lines) == (0, ["ottermq 0.1.0"])
    code, lines = run_broker(tmp_path, args=("serve", "--help"))
    text = "\n".join(lines)
    assert code == 0
    example = (Path(__file__).resolve().parents[1] / ".env.example").read_text().splitlines()
    for line in example:
        if "=" in line and not line.startswith("#"):
            assert f"  {line}\n" in text + "\n"  # every setting with its default
    code, lines = run_broker(tmp_path, args=("definitions", "import", "--help"))
    text = " ".join(lines)
    assert "broker using that directory must be stopped" in text and "non-durable" in text
    code, lines = run_broker(tmp_path, args=("definitions", "export", "--help"))
    assert "(default: -)" in " ".join(lines)


def test_password_changed_with_definitions_import(broker_process, tmp_path):
    """README "Changing a password": ottermq definitions import of a users entry, broker stopped."""
    process = broker_process()
    process.start()
    defs = tmp_path / "defs.json"
    defs.write_text('{"users": [{"name": "guest", "password": "new-secret", "tags": ["administrator"]}]}')
    env = dict(os.environ, PYTHONSAFEPATH="1", **process.store_env())  # its data dir, or its PostgreSQL
    command = [sys.executable, "-m", "ottermq.broker", "definitions", "import", str(defs)]
    running = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert running.returncode == 1 and "stop the broker first" in running.stderr
    assert process.stop() == 0
    stopped = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert stopped.returncode == 0, stopped.stderr
    b = process.start()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(b.params())  # guest/guest no more
    conn = pika.BlockingConnection(b.params(credentials=pika.PlainCredentials("guest", "new-secret")))
    conn.channel().queue_declare("still-allowed")  # permissions kept
    conn.close()


def test_start_up_log_says_where_the_web_ui_is(broker_process, poll_until):
    process = broker_process({})
    process.start()
    line = f"INFO ottermq.broker.management.app: web UI on http://127.0.0.1:{process.web_port}/"
    poll_until(lambda: line in process.log_tail(200))
