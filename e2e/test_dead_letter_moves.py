"""Dead letters browsed in place and sent back (issue 16; ottermq extensions: RabbitMQ has no such API).

pika makes the dead letters (TTL, reject) and checks where every message ends up: each moved message
arrives exactly once, the rest stay in the dead-letter queue.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import subprocess
import sys
import time
import uuid
from typing import Any

import pika
import pytest

from .polling import poll_until
from .test_management_write import call, q

pytestmark = pytest.mark.extension


# the one poll helper at this file's pace (moves run in rate-limited batches)
eventually = functools.partial(poll_until, timeout=20, interval=0.05)


def drain(channel: Any, queue: str) -> list[tuple[Any, bytes]]:
    got = []
    while True:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return got
        got.append((props, body))


def depth(channel: Any, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


@pytest.fixture
def setup(broker, channel) -> Any:
    """``(work, dlq, names)``: work dead-letters to dlq; 3 messages expire, 2 are rejected."""
    token = uuid.uuid4().hex[:6]
    work, dlq, other = f"dlm.work.{token}", f"dlm.dlq.{token}", f"dlm.other.{token}"
    channel.queue_declare(dlq)
    channel.queue_declare(other)
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    for i in range(3):
        props = pika.BasicProperties(expiration="1", headers={"n": i})
        channel.basic_publish("", work, f"ttl-{i}".encode(), props)
    assert eventually(lambda: depth(channel, dlq) == 3)
    for i in range(2):
        channel.basic_publish("", work, f"rej-{i}".encode())
    for _ in range(2):
        method, _, _ = eventually(lambda: (got := channel.basic_get(work))[0] and got)
        channel.basic_reject(method.delivery_tag, requeue=False)
    assert eventually(lambda: depth(channel, dlq) == 5)
    yield work, dlq, other
    for name in (work, dlq, other):
        channel.queue_delete(name)


def browse(broker, dlq: str, **query: Any) -> dict[str, Any]:
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    status, _, body = call(broker, f"/api/dead-letters/%2F/{q(dlq)}?{qs}")
    assert status == 200, body
    return dict(body)


def move(broker, dlq: str, body: dict[str, Any]) -> dict[str, Any]:
    status, headers, job = call(broker, f"/api/dead-letters/%2F/{q(dlq)}/moves", "POST", body)
    assert status == 201, job
    assert headers["location"] == f"/api/dead-letter-moves/{job['id']}"
    return dict(job)


def finished(broker, job_id: str) -> dict[str, Any]:
    def done() -> Any:
        job = call(broker, f"/api/dead-letter-moves/{job_id}")[2]
        return job if job["state"] not in ("running", "paused") else None

    return dict(eventually(done, what=f"dead-letter move {job_id} finished"))


def test_browse_decodes_x_death_without_consuming(broker, channel, setup):
    work, dlq, _ = setup
    data = browse(broker, dlq)
    assert (data["total"], data["dead_lettered"], data["matching"]) == (5, 5, 5)
    assert data["summary"] == [
        {"reason": "expired", "source_queue": work, "count": 3},
        {"reason": "rejected", "source_queue": work, "count": 2},
    ]
    first = data["messages"][0]
    assert first["payload"] == "ttl-0" and first["properties"]["headers"]["n"] == 0
    death = first["deaths"][0]
    assert (death["reason"], death["queue"], death["exchange"], death["routing_keys"], death["count"]) == (
        "expired",
        work,
        "",
        [work],
        1,
    )
    assert death["original_expiration"] == "1" and isinstance(death["time"], int)
    assert first["first_death"] == {"reason": "expired", "queue": work, "exchange": ""}
    rejected = browse(broker, dlq, reason="rejected", limit=1, offset=1)
    assert rejected["matching"] == 2 and [m["payload"] for m in rejected["messages"]] == ["rej-1"]
    assert browse(broker, dlq, source_queue="nope")["matching"] == 0
    # nothing was consumed or marked redelivered
    got = drain(channel, dlq)
    assert [b for _, b in got] == [b"ttl-0", b"ttl-1", b"ttl-2", b"rej-0", b"rej-1"]
    index = call(broker, "/api/dead-letters")[2]
    assert all(item["name"] != dlq for item in index)  # drained: no longer listed


def test_index_lists_queues_holding_dead_letters(broker, setup):
    _, dlq, _ = setup
    item = next(i for i in call(broker, "/api/dead-letters")[2] if i["name"] == dlq)
    assert item["reasons"] == {"expired": 3, "rejected": 2} and item["dead_lettered"] == 5


def test_move_a_filter_back_to_the_original_queue_once(broker, channel, setup):
    work, dlq, _ = setup
    job = move(broker, dlq, {"filter": {"reason": "expired"}})
    assert job["state"] in ("running", "done")
    assert job["filter"] == {"reason": "expired", "source_queue": None}
    job = finished(broker, job["id"])
    counts = (job["state"], job["selected"], job["moved"], job["unroutable"], job["skipped"])
    assert counts == ("done", 3, 3, 0, 0)
    back = drain(channel, work)
    assert sorted(b for _, b in back) == [b"ttl-0", b"ttl-1", b"ttl-2"]
    for props, _ in back:  # death headers gone, the others kept
        assert "x-death" not in props.headers and "x-first-death-reason" not in props.headers
        assert set(props.headers) == {"n"}
    assert sorted(b for _, b in drain(channel, dlq)) == [b"rej-0", b"rej-1"]


def test_move_by_ids_to_a_chosen_target_keeping_x_death(broker, channel, setup):
    _, dlq, other = setup
    ids = [m["id"] for m in browse(broker, dlq, reason="rejected")["messages"]]
    job = finished(
        broker,
        move(
            broker,
            dlq,
            {"ids": ids, "target": {"exchange": "", "routing_key": other}, "keep_death_headers": True},
        )["id"],
    )
    assert (job["moved"], job["selected"]) == (2, 2)
    moved = drain(channel, other)
    assert [b for _, b in moved] == [b"rej-0", b"rej-1"]
    assert moved[0][0].headers["x-death"][0]["reason"] == "rejected"
    assert depth(channel, dlq) == 3


def test_unroutable_messages_stay_and_a_rate_limit_paces_the_job(broker, channel, setup):
    _, dlq, _ = setup
    channel.exchange_declare("dlm.nowhere", "direct")
    try:
        nowhere = {"exchange": "dlm.nowhere", "routing_key": "x"}
        job = finished(broker, move(broker, dlq, {"all": True, "target": nowhere})["id"])
        assert (job["moved"], job["unroutable"]) == (0, 5)
        assert depth(channel, dlq) == 5
    finally:
        channel.exchange_delete("dlm.nowhere")
    started = time.monotonic()
    job = finished(broker, move(broker, dlq, {"filter": {"reason": "expired"}, "rate": 4})["id"])
    assert job["moved"] == 3 and time.monotonic() - started >= 0.5  # 3 messages at 4/s, in batches of 4


def test_pause_resume_and_cancel(broker, channel, setup):
    work, dlq, _ = setup
    for i in range(40):
        channel.basic_publish("", dlq, f"plain-{i}".encode())  # no x-death: unroutable to "original"
    path = "/api/dead-letter-moves/"
    job = move(broker, dlq, {"all": True, "target": {"exchange": "", "routing_key": work}, "rate": 10})
    assert call(broker, path + job["id"], "PUT", {"state": "paused"})[2]["state"] == "paused"
    paused_at = call(broker, path + job["id"])[2]["moved"]
    time.sleep(0.5)  # a window in which nothing may happen: a paused job moves nothing
    assert call(broker, path + job["id"])[2]["moved"] == paused_at
    assert call(broker, path + job["id"], "PUT", {"state": "running"})[2]["state"] == "running"
    assert eventually(lambda: call(broker, path + job["id"])[2]["moved"] > paused_at)
    assert call(broker, path + job["id"], "DELETE")[0] == 204
    job = call(broker, path + job["id"])[2]
    assert job["state"] == "cancelled"

    def landed() -> bool:
        """Every message the cancelled job counts as moved is in ``work``, the rest still in ``dlq``."""
        moved = call(broker, path + job["id"])[2]["moved"]
        return depth(channel, work) == moved and depth(channel, dlq) == 45 - moved

    eventually(landed)
    assert call(broker, path + job["id"], "PUT", {"state": "running"})[0] == 400
    assert any(j["id"] == job["id"] for j in call(broker, "/api/dead-letter-moves")[2])


def test_bad_requests(broker, setup):
    _, dlq, _ = setup
    base = f"/api/dead-letters/%2F/{q(dlq)}/moves"
    assert call(broker, base, "POST", {})[0] == 400
    assert call(broker, base, "POST", {"all": True, "ids": [1]})[0] == 400
    nope = {"exchange": "nope", "routing_key": ""}
    status, _, body = call(broker, base, "POST", {"all": True, "target": nope})
    assert status == 400 and body["reason"] == "target exchange 'nope' not found in vhost '/'"
    assert call(broker, base, "POST", {"all": True, "rate": -1})[0] == 400
    assert call(broker, "/api/dead-letters/%2F/no-such-queue")[0] == 404
    assert call(broker, "/api/dead-letters/%2F/no-such-queue/moves", "POST", {"all": True})[0] == 404
    assert call(broker, "/api/dead-letter-moves/999999")[0] == 404
    assert call(broker, f"/api/dead-letters/%2F/{q(dlq)}?limit=x")[0] == 400


def test_durable_move_survives_a_restart_without_loss_or_duplicates(broker_process):
    process = broker_process()
    b = process.start()
    connection = pika.BlockingConnection(b.params())
    channel = connection.channel()
    channel.queue_declare("dur.dlq", durable=True)
    channel.queue_declare(
        "dur.work",
        durable=True,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dur.dlq"},
    )
    channel.confirm_delivery()
    for i in range(300):
        channel.basic_publish("", "dur.work", f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    for _ in range(300):
        method, _, _ = channel.basic_get("dur.work")
        channel.basic_reject(method.delivery_tag, requeue=False)
    assert eventually(lambda: depth(channel, "dur.dlq") == 300)
    connection.close()
    job = move(b, "dur.dlq", {"all": True, "rate": 100})  # ~3 s: the restart lands mid-way
    eventually(lambda: call(b, f"/api/dead-letter-moves/{job['id']}")[2]["moved"] >= 100, timeout=10)
    assert process.stop() == 0
    b = process.start()  # the job resumes from what is still in the dead-letter queue
    job = finished(b, job["id"])
    assert job["state"] == "done"
    connection = pika.BlockingConnection(b.params())
    channel = connection.channel()
    bodies = [body for _, body in drain(channel, "dur.work")]
    assert sorted(bodies) == sorted(f"m{i}".encode() for i in range(300))  # each exactly once
    assert depth(channel, "dur.dlq") == 0
    connection.close()


def test_cli_moves_and_reports(broker, channel, setup):
    work, dlq, _ = setup
    login = ["--url", broker.management_url, "--user", broker.user, "--password", broker.password]
    command = [sys.executable, "-m", "ottermq.broker", "dlq", "move", "/", dlq, "--reason", "rejected"]
    command += login
    run = subprocess.run(command, capture_output=True, text=True, timeout=60, env={"PYTHONSAFEPATH": "1"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "done: moved 2, unroutable 0, skipped 0"
    assert sorted(b for _, b in drain(channel, work)) == [b"rej-0", b"rej-1"]
    again = subprocess.run(command, capture_output=True, text=True, timeout=60, env={"PYTHONSAFEPATH": "1"})
    assert again.returncode == 0 and again.stdout.strip().endswith("done: moved 0, unroutable 0, skipped 0")
    missing = subprocess.run(
        [*command[:6], "no-such-queue", *command[7:]],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONSAFEPATH": "1"},
    )
    assert missing.returncode == 1 and "404" in missing.stderr


# -- issue 38: what a request can make the broker do is bounded ------------------------------------------
PINGER = """
import json, select, sys, time
import pika
channel = pika.BlockingConnection(pika.URLParameters(sys.argv[1])).channel()
print("ready", flush=True)
times = []
while not select.select([sys.stdin], [], [], 0.005)[0]:  # until the test closes stdin
    started = time.perf_counter()
    channel.queue_declare(sys.argv[2], passive=True)  # one AMQP round trip
    times.append(time.perf_counter() - started)
print(json.dumps(times), flush=True)
"""


class Pinger:
    """Another connection's AMQP round trips, timed in a process of its own (the test's threads would
    otherwise share its interpreter lock)."""

    def __init__(self, broker: Any, queue: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PINGER, broker.url, queue],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> list[float]:
        out, _ = self.proc.communicate(timeout=30)
        return list(json.loads(out))


def post_all(broker, path: str, bodies: list[bytes]) -> list[tuple[int, Any]]:
    """Every body POSTed to ``path`` at once, 8 at a time."""
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda raw: broker.api(path, "POST", raw=raw), bodies))


def test_forty_move_requests_of_any_size_keep_other_clients_under_250_ms(broker, channel):
    """40 requests of 115,000 ids each used to stall every client for seconds (p50 2.6 s, max 7.4 s) and
    every later move about 3 s: now ids beyond OTTERMQ_DLQ_MOVE_MAX_IDS (5,000) are a 400 before the body
    is parsed, at most OTTERMQ_DLQ_MOVE_MAX_JOBS (10) moves run at once, their state is a row each in the
    store and their work takes turns with the other clients."""
    token = uuid.uuid4().hex[:6]
    dlq, work = f"dlm.bound.dlq.{token}", f"dlm.bound.work.{token}"
    channel.queue_declare(dlq, durable=True)
    channel.queue_declare(work, durable=True)
    death = [{"count": 1, "reason": "rejected", "queue": work, "exchange": "", "routing-keys": [work]}]
    props = pika.BasicProperties(delivery_mode=2, headers={"x-death": death})
    for i in range(5000):
        channel.basic_publish("", dlq, b"m%d" % i, props)
    assert eventually(lambda: depth(channel, dlq) == 5000)
    first = browse(broker, dlq, limit=1)["messages"][0]["id"]
    path = f"/api/dead-letters/%2F/{q(dlq)}/moves"
    pinger = Pinger(broker, dlq)
    try:
        huge = json.dumps({"ids": list(range(10**6, 10**6 + 115_000))}).encode()
        refused = post_all(broker, path, [huge] * 40)
        assert all(status == 400 for status, _ in refused), refused[:3]
        assert "it selects at most 5000 ids" in refused[0][1]["reason"]
        most = [
            json.dumps({"ids": list(range(first + 100 * i, first + 100 * i + 5000))}).encode()
            if i % 2
            else b'{"all": true}'
            for i in range(40)
        ]
        answers = post_all(broker, path, most)
        started = [job for status, job in answers if status == 201]
        assert started and all(
            status == 201 or "moves are running or paused already" in job["reason"] for status, job in answers
        )
        for job in started:
            assert finished(broker, job["id"])["state"] == "done"
        assert eventually(lambda: depth(channel, work) == 5000) and depth(channel, dlq) == 0  # each once
        legit = time.perf_counter()
        channel.basic_publish("", dlq, b"late", props)
        assert eventually(lambda: depth(channel, dlq) == 1)
        assert finished(broker, move(broker, dlq, {"all": True})["id"])["moved"] == 1
        assert time.perf_counter() - legit < 2.0  # a later move is not held up (it took ~3 s)
    finally:
        times = pinger.stop()
        channel.queue_delete(dlq)
        channel.queue_delete(work)
    assert len(times) > 20 and max(times) < 0.25, f"worst {max(times) * 1000:.0f} ms of {len(times)}"


def test_an_older_brokers_job_file_is_read_into_the_store_once(broker_process):
    process = broker_process({"OTTERMQ_WORKERS": "1"})
    b = process.start()
    connection = pika.BlockingConnection(b.params())
    channel = connection.channel()
    channel.queue_declare("mig.dlq", durable=True)
    channel.queue_declare("mig.work", durable=True)
    channel.confirm_delivery()
    death = [
        {"count": 1, "reason": "expired", "queue": "mig.work", "exchange": "", "routing-keys": ["mig.work"]}
    ]
    for i in range(50):
        props = pika.BasicProperties(delivery_mode=2, headers={"x-death": death})
        channel.basic_publish("", "mig.dlq", f"m{i}".encode(), props)
    connection.close()
    assert process.stop() == 0
    common = {"vhost": "/", "queue": "mig.dlq", "target": None, "keep_death_headers": False, "rate": 0}
    old = [  # as an ottermq before issue 38 wrote it
        {**common, "id": "7", "selection": {"all": True}, "state": "running", "selected": 0, "moved": 0},
        {**common, "id": "3", "selection": {"ids": [1, 2]}, "state": "done", "moved": 2, "finished": 5},
    ]
    legacy = process.data_dir / "dlq-moves.json"
    legacy.write_text(json.dumps(old))
    b = process.start()
    job = finished(b, "7")
    assert (job["state"], job["moved"]) == ("done", 50)
    assert not legacy.exists() and (process.data_dir / "dlq-moves.json.migrated").is_file()
    assert process.stop() == 0
    b = process.start()  # from the store now
    listed = {j["id"]: j for j in call(b, "/api/dead-letter-moves")[2]}
    assert (listed["7"]["moved"], listed["3"]["moved"], listed["3"]["ids_count"]) == (50, 2, 2)
    connection = pika.BlockingConnection(b.params())
    assert depth(connection.channel(), "mig.work") == 50 and depth(connection.channel(), "mig.dlq") == 0
    connection.close()


def test_a_lazy_dead_letter_queue_is_browsed_and_moved_from_disk(broker, channel):
    """The backlog of a lazy queue is on disk: browsing reads it back, a move takes every message once."""
    token = uuid.uuid4().hex[:6]
    work, dlq, other = f"dlm.work.{token}", f"dlm.lazy.{token}", f"dlm.back.{token}"
    channel.queue_declare(dlq, arguments={"x-queue-mode": "lazy"})
    channel.queue_declare(other)
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    try:
        for i in range(300):
            channel.basic_publish("", work, f"m-{i:03d}".encode(), pika.BasicProperties(expiration="1"))
        assert eventually(lambda: depth(channel, dlq) == 300)
        data = browse(broker, dlq, limit=5, offset=295)
        assert (data["total"], data["dead_lettered"]) == (300, 300)
        assert [m["payload"] for m in data["messages"]] == [f"m-{i:03d}" for i in range(295, 300)]
        target = {"exchange": "", "routing_key": other}
        job = finished(broker, move(broker, dlq, {"all": True, "target": target})["id"])
        assert (job["moved"], job["selected"], job["skipped"]) == (300, 300, 0)
        assert [b for _, b in drain(channel, other)] == [f"m-{i:03d}".encode() for i in range(300)]
        assert depth(channel, dlq) == 0
    finally:
        for name in (work, dlq, other):
            channel.queue_delete(name)
