"""Delayed delivery and deduplication (issue 19) with pika: ottermq extensions.

RabbitMQ 3.10 without the community plugins refuses both exchange types, so every test here is an
``extension``. Delays are 100-1500 ms; due times are checked against wall-clock publish times.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from .polling import poll_until

pytestmark = pytest.mark.extension

H = "x-deduplication-header"


def props(headers: dict[str, Any] | None = None, persistent: bool = False) -> pika.BasicProperties:
    return pika.BasicProperties(headers=headers, delivery_mode=2 if persistent else None)


def delayed_exchange(ch: Any, name: str, kind: str = "direct", durable: bool = False) -> None:
    ch.exchange_declare(name, "x-delayed-message", durable=durable, arguments={"x-delayed-type": kind})


def collect(ch: Any, queue: str, n: int, timeout: float = 10) -> list[tuple[float, Any, bytes]]:
    """``n`` deliveries as (arrival time, properties, body), consuming with no-ack."""
    got: list[tuple[float, Any, bytes]] = []
    for _method, properties, body in ch.consume(queue, auto_ack=True, inactivity_timeout=timeout):
        if body is None:
            break
        got.append((time.time(), properties, body))
        if len(got) == n:
            break
    ch.cancel()
    return got


def _http(broker: Any, path: str, method: str = "GET", body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{broker.management_url}{path}", data=data, method=method)
    request.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
    request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def api(broker: Any, path: str) -> Any:
    return _http(broker, f"/api/{path}")


@contextlib.contextmanager
def queue_policy(broker: Any, name: str, queue: str, definition: dict[str, Any]) -> Iterator[None]:
    """A policy on exactly ``queue`` while the block runs."""
    path = f"/api/policies/%2F/{name}"
    _http(broker, path, "PUT", {"pattern": f"^{queue}$", "apply-to": "queues", "definition": definition})
    try:
        yield
    finally:
        _http(broker, path, "DELETE")


def durable_delayed(broker: Any) -> tuple[pika.BlockingConnection, Any]:
    """A connection and channel with the durable delayed exchange ``dx`` bound to the durable queue ``dq``."""
    conn = pika.BlockingConnection(broker.params())
    ch = conn.channel()
    delayed_exchange(ch, "dx", durable=True)
    ch.queue_declare("dq", durable=True)
    ch.queue_bind("dq", "dx", "k")
    return conn, ch


# -- delayed delivery ---------------------------------------------------------------------------------
def test_messages_arrive_in_due_order_after_their_delay(channel: Any, unique: Any, declare: Any) -> None:
    exchange = unique("dx")
    delayed_exchange(channel, exchange)
    queue = declare(channel, "q")
    channel.queue_bind(queue, exchange, "k")
    start = time.time()
    for delay in (900, 300, 600):
        channel.basic_publish(exchange, "k", str(delay).encode(), props({"x-delay": delay, "keep": "me"}))
    assert channel.basic_get(queue, auto_ack=True)[0] is None  # nothing yet
    got = collect(channel, queue, 3)
    assert [body for _, _, body in got] == [b"300", b"600", b"900"]
    for arrived, properties, body in got:
        delay = int(body)
        assert arrived - start >= delay / 1000 - 0.005, f"{body!r} came {arrived - start:.3f} s after publish"
        assert properties.headers == {"x-delay": -delay, "keep": "me"}


@pytest.mark.parametrize("value", [None, 0, -500, "soon", 2**32])
def test_a_message_without_a_usable_delay_is_routed_at_once(
    channel: Any, unique: Any, declare: Any, value: Any
) -> None:
    exchange = unique("dx")
    delayed_exchange(channel, exchange, "fanout")
    queue = declare(channel, "q")
    channel.queue_bind(queue, exchange, "")
    headers = {} if value is None else {"x-delay": value}
    channel.basic_publish(exchange, "any", b"now", props(headers))
    method, properties, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"now"
    assert (properties.headers or {}) == headers  # untouched: it was never delayed


def test_a_string_delay_is_parsed_as_the_plugin_does(channel: Any, unique: Any, declare: Any) -> None:
    exchange = unique("dx")
    delayed_exchange(channel, exchange, "topic")
    queue = declare(channel, "q")
    channel.queue_bind(queue, exchange, "a.*")
    start = time.time()
    channel.basic_publish(exchange, "a.b", b"later", props({"x-delay": "300"}))
    ((arrived, properties, body),) = collect(channel, queue, 1)
    assert body == b"later" and arrived - start >= 0.295
    assert properties.headers == {"x-delay": -300}


def test_equal_due_times_keep_publish_order(channel: Any, unique: Any, declare: Any) -> None:
    exchange = unique("dx")
    delayed_exchange(channel, exchange)
    queue = declare(channel, "q")
    channel.queue_bind(queue, exchange, "k")
    for i in range(300):
        channel.basic_publish(exchange, "k", str(i).encode(), props({"x-delay": 200}))
    got = collect(channel, queue, 300)
    assert [int(body) for _, _, body in got] == list(range(300))


def test_declare_needs_a_delayed_type(
    connect: Any, unique: Any, channel_error: Any, connection_error: Any
) -> None:
    ch = connect().channel()
    channel_error(
        lambda: ch.exchange_declare(unique("dx"), "x-delayed-message"),
        406,
        "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must bean existing exchnage type",
    )
    ch = connect().channel()
    connection_error(
        lambda: ch.exchange_declare(unique("dx"), "x-delayed-message", arguments={"x-delayed-type": "nope"}),
        503,
        "COMMAND_INVALID - unknown exchange type 'nope'",
    )


def test_mandatory_is_checked_when_published(channel: Any, unique: Any, declare: Any) -> None:
    exchange = unique("dx")
    delayed_exchange(channel, exchange)
    queue = declare(channel, "q")
    channel.queue_bind(queue, exchange, "bound")
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as info:
        channel.basic_publish(exchange, "unbound", b"lost", props({"x-delay": 100}), mandatory=True)
    assert info.value.messages[0].method.reply_code == 312
    channel.basic_publish(exchange, "bound", b"kept", props({"x-delay": 100}), mandatory=True)  # no return
    ((_, _, body),) = collect(channel, queue, 1)
    assert body == b"kept"


def test_pending_count_in_the_api_and_metrics(broker: Any, channel: Any, unique: Any, declare: Any) -> None:
    exchange = unique("dx")
    delayed_exchange(channel, exchange)
    queue = declare(channel, "q")
    channel.queue_bind(queue, exchange, "k")
    for _ in range(5):
        channel.basic_publish(exchange, "k", b"x", props({"x-delay": 60_000}))
    channel.basic_publish(exchange, "k", b"x", props())  # not delayed
    info = api(broker, f"exchanges/%2F/{urllib.request.quote(exchange, safe='')}")
    assert info["type"] == "x-delayed-message" and info["messages_delayed"] == 5
    assert info["arguments"] == {"x-delayed-type": "direct"}
    with urllib.request.urlopen(f"{broker.prometheus_url}/metrics", timeout=5) as response:
        metrics = response.read().decode()
    assert f'ottermq_delayed_messages{{exchange="{exchange}",vhost="/"}} 5.0' in metrics
    channel.exchange_delete(exchange)  # drops them
    assert all(x["name"] != exchange for x in api(broker, "exchanges/%2F"))


def _publish_confirmed(ch: Any, exchange: str, delays: list[int]) -> dict[bytes, float]:
    """Publish one persistent message per delay, each confirmed before the next; each body's due time
    (its publish time plus its delay: a slow confirm on a busy machine moves the later ones)."""
    ch.confirm_delivery()
    due = {}
    for delay in delays:
        body = str(delay).encode()
        sent = time.time()
        ch.basic_publish(exchange, "k", body, props({"x-delay": delay}, persistent=True))
        due[body] = sent + delay / 1000
    return due


@pytest.mark.parametrize("crash", [False, True], ids=["restart", "kill-9"])
def test_delayed_messages_survive_a_restart_and_keep_their_due_time(broker_process: Any, crash: bool) -> None:
    process = broker_process()
    conn, ch = durable_delayed(process.start())
    due = _publish_confirmed(ch, "dx", [1500, 300, 1200])  # every one confirmed: it is on disk
    if crash:
        process.kill()
    else:
        conn.close()
        process.stop()
    time.sleep(0.5)  # the 300 ms one comes due while the broker is down
    broker = process.start()
    restarted = time.time()
    conn = pika.BlockingConnection(broker.params())
    ch = conn.channel()
    got = collect(ch, "dq", 3)
    assert [body for _, _, body in got] == sorted(due, key=due.__getitem__)  # in due order
    for arrived, properties, body in got:
        assert arrived >= due[body] - 0.005
        assert properties.headers == {"x-delay": -int(body)} and properties.delivery_mode == 2
    assert got[0][0] - restarted < 5  # the overdue one went out right after the start
    assert api(broker, "exchanges/%2F/dx")["messages_delayed"] == 0
    conn.close()


def test_transient_delayed_messages_do_not_survive_a_restart(broker_process: Any) -> None:
    process = broker_process()
    conn, ch = durable_delayed(process.start())
    ch.confirm_delivery()
    ch.basic_publish("dx", "k", b"transient", props({"x-delay": 300}))
    ch.basic_publish("dx", "k", b"persistent", props({"x-delay": 300}, persistent=True))
    conn.close()
    process.stop()
    broker = process.start()
    ch = pika.BlockingConnection(broker.params()).channel()
    assert [body for _, _, body in collect(ch, "dq", 1)] == [b"persistent"]
    assert ch.basic_get("dq", auto_ack=True)[0] is None


def test_100k_delayed_messages(channel: Any, unique: Any, declare: Any, broker: Any) -> None:
    exchange = unique("dx")
    delayed_exchange(channel, exchange)
    queue = declare(channel, "q")
    channel.queue_bind(queue, exchange, "k")
    n = 100_000
    start = time.time()
    for i in range(n):  # due times spread over ~2 s, published in an order unlike due order
        channel.basic_publish(exchange, "k", str(i).encode(), props({"x-delay": 1000 + (i * 7919) % 2000}))
    published = time.time()
    order = []
    for _method, _props, body in channel.consume(queue, auto_ack=True, inactivity_timeout=30):
        assert body is not None, f"only {len(order)} of {n} arrived"
        order.append(int(body))
        if len(order) == n:
            break
    channel.cancel()
    assert sorted(order) == list(range(n))
    dues = [1000 + (i * 7919) % 2000 for i in order]
    # due order, up to the publish spread (a message published later may be due earlier)
    spread_ms = (published - start) * 1000
    assert all(b >= a - spread_ms for a, b in zip(dues, dues[1:], strict=False))


# -- deduplication ------------------------------------------------------------------------------------
def test_exchange_dedup_with_confirms_and_mandatory(channel: Any, unique: Any, declare: Any) -> None:
    exchange = unique("ux")
    arguments = {"x-message-deduplication": True, "x-cache-size": 2}
    channel.exchange_declare(exchange, "direct", arguments=arguments)
    queue = declare(channel, "q")
    channel.queue_bind(queue, exchange, "k")
    channel.confirm_delivery()
    channel.basic_publish(exchange, "k", b"1", props({H: "a"}), mandatory=True)
    with pytest.raises(pika.exceptions.UnroutableError):  # a duplicate: returned, yet confirmed
        channel.basic_publish(exchange, "k", b"2", props({H: "a"}), mandatory=True)
    channel.basic_publish(exchange, "k", b"3", props({H: "a"}))  # not mandatory: dropped, confirmed
    channel.basic_publish(exchange, "k", b"4", props({H: "b"}))
    channel.basic_publish(exchange, "k", b"5", props({H: "c"}))  # evicts "a" (oldest first)
    channel.basic_publish(exchange, "k", b"6", props({H: "a"}))
    channel.basic_publish(exchange, "k", b"7", props())  # no header: never a duplicate
    channel.basic_publish(exchange, "k", b"8", props())
    bodies = []
    while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
        bodies.append(got[2])
    assert bodies == [b"1", b"4", b"5", b"6", b"7", b"8"]


def test_cache_ttl_and_per_message_override(channel: Any, unique: Any, declare: Any) -> None:
    queue = declare(
        channel,
        "q",
        **{"x-message-deduplication": True, "x-cache-ttl": 300, "x-deduplication-header": "msg-id"},
    )
    for body in (b"1", b"2"):
        channel.basic_publish("", queue, body, props({"msg-id": "a"}))
    channel.basic_publish("", queue, b"3", props({"msg-id": "b", "x-cache-ttl": 5000}))
    time.sleep(0.35)
    channel.basic_publish("", queue, b"4", props({"msg-id": "a"}))  # its entry expired
    channel.basic_publish("", queue, b"5", props({"msg-id": "b"}))  # still remembered (5 s)
    channel.basic_publish("", queue, b"6", props({H: "a"}))  # another header: not checked
    bodies = []
    while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
        bodies.append(got[2])
    assert bodies == [b"1", b"3", b"4", b"6"]


def test_plugin_exchange_type(
    channel: Any, unique: Any, declare: Any, channel_error: Any, connect: Any
) -> None:
    exchange = unique("px")
    channel.exchange_declare(exchange, "x-message-deduplication", arguments={"x-cache-size": 10})
    queues = [declare(channel, "a"), declare(channel, "b")]
    for queue in queues:
        channel.queue_bind(queue, exchange, "ignored")
    for body in (b"1", b"2"):
        channel.basic_publish(exchange, "any key", body, props({H: 42}))
    for queue in queues:
        assert channel.basic_get(queue, auto_ack=True)[2] == b"1"
        assert channel.basic_get(queue, auto_ack=True)[0] is None
    ch = connect().channel()
    name = unique("px")
    channel_error(
        lambda: ch.exchange_declare(name, "x-message-deduplication"),
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-cache-size' for exchange '{name}' in vhost '/': "
        "required for exchange type "
        "x-message-deduplication",
    )


def test_dedup_policy_and_api(broker: Any, channel: Any, unique: Any, declare: Any) -> None:
    queue = declare(channel, "q")
    with queue_policy(broker, unique("pol"), queue, {"message-deduplication": True, "cache-size": 3}):
        for key in ("a", "a", "b"):
            channel.basic_publish("", queue, key.encode(), props({H: key}))
        info = api(broker, f"queues/%2F/{urllib.request.quote(queue, safe='')}")
        assert info["deduplication"] == {
            "cache_size": 3,
            "cache_ttl": None,
            "header": H,
            "persistent": False,
            "entries": 2,
            "duplicates": 1,
        }


def test_durable_dedup_cache_survives_a_restart(broker_process: Any) -> None:
    process = broker_process()
    broker = process.start()
    conn = pika.BlockingConnection(broker.params())
    ch = conn.channel()
    ch.exchange_declare("ux", "direct", durable=True, arguments={"x-message-deduplication": True})
    ch.exchange_declare(
        "mx",
        "direct",
        durable=True,
        arguments={"x-message-deduplication": True, "x-cache-persistence": "memory"},
    )
    ch.queue_declare("uq", durable=True)
    ch.queue_declare("dq", durable=True, arguments={"x-message-deduplication": True, "x-cache-size": 2})
    for x in ("ux", "mx"):
        ch.queue_bind("uq", x, "k")
    ch.confirm_delivery()
    ch.basic_publish("ux", "k", b"1", props({H: "x1"}, persistent=True))
    ch.basic_publish("mx", "k", b"2", props({H: "m1"}, persistent=True))
    for key in ("q1", "q2", "q3"):  # the queue's own cache keeps the last two
        ch.basic_publish("", "dq", key.encode(), props({H: key}, persistent=True))
    conn.close()
    process.kill()
    broker = process.start()
    ch = pika.BlockingConnection(broker.params()).channel()
    ch.confirm_delivery()
    for queue in ("uq", "dq"):
        ch.queue_purge(queue)
    ch.basic_publish("ux", "k", b"again-x1", props({H: "x1"}))  # remembered across the crash
    ch.basic_publish("mx", "k", b"again-m1", props({H: "m1"}))  # memory only: new again
    for key in ("q3", "q2", "q1"):  # q3 and q2 are remembered, q1 was evicted before the crash
        ch.basic_publish("", "dq", f"again-{key}".encode(), props({H: key}))

    def bodies(queue: str) -> list[bytes]:
        out = []
        while (got := ch.basic_get(queue, auto_ack=True))[0] is not None:
            out.append(got[2])
        return out

    assert bodies("uq") == [b"again-m1"]
    assert bodies("dq") == [b"again-q1"]


# -- delayed retry (RabbitMQ 4.3's, on classic queues) ---------------------------------------------
def _get(ch: Any, queue: str, timeout: float = 5) -> tuple[float, Any, Any, bytes]:
    """The first message got from ``queue`` within ``timeout``, with the time basic.get returned it."""

    def got() -> tuple[float, Any, Any, bytes] | None:
        method, properties, body = ch.basic_get(queue)
        if method is None:
            return None
        return time.monotonic(), method, properties, body  # taken right as basic.get returns the message

    return poll_until(got, timeout=timeout, interval=0.005, what=f"a message in {queue}")


def test_delayed_retry_backs_off_linearly_then_dead_letters(channel: Any, with_dlq: Any) -> None:
    queue, dlq = with_dlq(
        channel,
        **{
            "x-delayed-retry-type": "all",
            "x-delayed-retry-min": 150,
            "x-delayed-retry-max": 400,
            "x-delivery-limit": 4,
        },
    )
    channel.basic_publish("", queue, b"job")
    times, counts = [], []
    for _ in range(5):  # first delivery + 4 retries
        at, method, properties, _ = _get(channel, queue)
        times.append(at)
        counts.append((properties.headers or {}).get("x-delivery-count"))
        channel.basic_reject(method.delivery_tag, requeue=True)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    for gap, want in zip(gaps, (0.15, 0.3, 0.4, 0.4), strict=True):
        assert want - 0.01 <= gap < want + 1.0, gaps
    assert counts == [None, 1, 2, 3, 4]
    _, _, properties, body = _get(channel, dlq)
    assert body == b"job" and properties.headers["x-death"][0]["reason"] == "delivery_limit"


def test_delayed_retry_type_failed_leaves_nacks_alone(channel: Any, declare: Any, broker: Any) -> None:
    queue = declare(channel, "q", **{"x-delayed-retry-type": "failed", "x-delayed-retry-min": 60_000})
    channel.basic_publish("", queue, b"job")
    _, method, _, _ = _get(channel, queue)
    channel.basic_nack(method.delivery_tag, requeue=True)  # not a failure: back at once
    _, method, _, _ = _get(channel, queue, timeout=1)
    channel.basic_reject(method.delivery_tag, requeue=True)  # a failure: held for a minute
    assert channel.basic_get(queue)[0] is None
    info = api(broker, f"queues/%2F/{urllib.request.quote(queue, safe='')}")
    assert info["messages_delayed"] == 1 and info["messages_ready"] == 0


def test_delayed_retry_from_a_policy(broker: Any, channel: Any, declare: Any, unique: Any) -> None:
    queue = declare(channel, "q")
    with queue_policy(broker, unique("pol"), queue, {"delayed-retry-type": "all", "delayed-retry-min": 200}):
        channel.basic_publish("", queue, b"job")
        first, method, _, _ = _get(channel, queue)
        channel.basic_nack(method.delivery_tag, requeue=True)
        second, _, _, _ = _get(channel, queue)
        assert second - first >= 0.19


def test_definitions_carry_delayed_and_deduplicating_objects(
    broker: Any, channel: Any, unique: Any, nothing_for: Any
) -> None:
    dx, ux, dq = unique("dx"), unique("ux"), unique("dq")
    definitions = {
        "exchanges": [
            {
                "name": dx,
                "vhost": "/",
                "type": "x-delayed-message",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {"x-delayed-type": "topic"},
            },
            {
                "name": ux,
                "vhost": "/",
                "type": "x-message-deduplication",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {"x-cache-size": 5},
            },
        ],
        "queues": [
            {
                "name": dq,
                "vhost": "/",
                "durable": True,
                "auto_delete": False,
                "arguments": {
                    "x-message-deduplication": True,
                    "x-delayed-retry-type": "failed",
                    "x-delayed-retry-min": 100,
                },
            }
        ],
        "bindings": [
            {
                "source": dx,
                "vhost": "/",
                "destination": dq,
                "destination_type": "queue",
                "routing_key": "a.#",
                "arguments": {},
            },
            {
                "source": ux,
                "vhost": "/",
                "destination": dq,
                "destination_type": "queue",
                "routing_key": "",
                "arguments": {},
            },
        ],
    }
    _http(broker, "/api/definitions", "POST", definitions)
    exported = _http(broker, "/api/definitions")
    by_name = {x["name"]: x for x in exported["exchanges"]}
    assert by_name[dx]["type"] == "x-delayed-message"
    assert by_name[dx]["arguments"] == {"x-delayed-type": "topic"}
    assert by_name[ux]["type"] == "x-message-deduplication"
    (queue,) = [q for q in exported["queues"] if q["name"] == dq]
    assert queue["arguments"]["x-delayed-retry-type"] == "failed"
    # and they work as declared
    channel.basic_publish(dx, "a.b", b"later", props({"x-delay": 200, H: "k"}))
    channel.basic_publish(ux, "", b"now", props({H: "k"}))
    channel.basic_publish(ux, "", b"dup", props({H: "k"}))  # the exchange's cache drops it
    ((_, _, first),) = collect(channel, dq, 1)
    assert first == b"now"
    nothing_for(channel, dq, 0.5)  # "later" comes due after 200 ms: a duplicate for the queue's cache
