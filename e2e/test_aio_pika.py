"""aio-pika / aiormq idioms against the broker (issue 7).

What an asyncio application does with RabbitMQ, unchanged: publisher confirms (on by default in aio-pika
channels, nacks raise ``DeliveryError``, mandatory returns raise ``PublishError``), ``basic.qos``, consuming
with ``async with queue.iterator()`` and ``message.process()``, dead-lettering configured through queue
arguments with ``x-death`` read back from the dead letter, and ``connect_robust`` coming back after a broker
restart with its topology, its consumers and the persistent messages (our own process stopped with SIGTERM,
or SIGKILL as an extension; under ``AMQP_URL`` a local RabbitMQ restarted with ``rabbitmqctl``).

No pytest-asyncio: each test is a plain function running one coroutine with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import aio_pika
import aio_pika.abc
import aio_pika.exceptions
import aio_pika.patterns
import pika
import pytest
from pamqp.commands import Basic

from .polling import poll_until_async

T = TypeVar("T")
TIMEOUT = 20  # per test, seconds: a hang fails instead of blocking the suite


def run(coro: Awaitable[T], timeout: float = TIMEOUT) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


@contextlib.asynccontextmanager
async def connected(url: str, **kwargs: Any) -> AsyncIterator[aio_pika.abc.AbstractConnection]:
    connection = await aio_pika.connect(url, **kwargs)
    try:
        yield connection
    finally:
        await connection.close()


async def next_within(inbox: asyncio.Queue[T], seconds: float = 5) -> T:
    return await asyncio.wait_for(inbox.get(), seconds)


async def nothing_within(inbox: asyncio.Queue[Any], seconds: float) -> None:
    """Nothing arrives in ``inbox`` for ``seconds`` (a bounded wait, not a sleep)."""
    with pytest.raises(asyncio.TimeoutError):
        got = await asyncio.wait_for(inbox.get(), seconds)
        pytest.fail(f"unexpected delivery {got!r}")


# ---------------------------------------------------------------------------------------------------------
# confirms, returns, nacks
# ---------------------------------------------------------------------------------------------------------
def test_publish_is_confirmed_and_properties_round_trip(broker, unique):
    q = unique("props")

    async def scenario() -> None:
        async with connected(broker.url) as connection:
            channel = await connection.channel()  # publisher_confirms=True by default
            queue = await channel.declare_queue(q)
            sent = aio_pika.Message(
                b'{"n": 1}',
                content_type="application/json",
                correlation_id="c-1",
                message_id="m-1",
                headers={"tenant": "acme", "n": 7, "ok": True, "tags": ["a", "b"]},
                priority=3,
                timestamp=datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
                type="order.created",
                app_id="e2e",
            )
            confirm = await channel.default_exchange.publish(sent, routing_key=q)
            assert isinstance(confirm, Basic.Ack)
            got = await queue.get(timeout=5)
            await got.ack()
            assert got.body == b'{"n": 1}'
            assert (got.content_type, got.correlation_id) == ("application/json", "c-1")
            assert got.message_id == "m-1"
            assert got.headers == {"tenant": "acme", "n": 7, "ok": True, "tags": ["a", "b"]}
            assert (got.priority, got.type, got.app_id) == (3, "order.created", "e2e")
            assert got.timestamp == datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
            assert got.delivery_mode == aio_pika.DeliveryMode.NOT_PERSISTENT
            assert (got.routing_key, got.exchange, got.redelivered) == (q, "", False)
            assert await queue.get(fail=False) is None

    run(scenario())


def test_unroutable_mandatory_publish_raises_publish_error(broker, unique):
    nowhere = unique("nowhere")  # never declared

    async def scenario() -> None:
        async with connected(broker.url) as connection:
            channel = await connection.channel(on_return_raises=True)
            with pytest.raises(aio_pika.exceptions.PublishError) as info:
                await channel.default_exchange.publish(aio_pika.Message(b"lost"), routing_key=nowhere)
            assert (info.value.frame.reply_code, info.value.frame.reply_text) == (312, "NO_ROUTE")
            # without mandatory the broker drops it and still confirms
            confirm = await channel.default_exchange.publish(
                aio_pika.Message(b"dropped"), routing_key=nowhere, mandatory=False
            )
            assert isinstance(confirm, Basic.Ack)
            assert not channel.is_closed

    run(scenario())


def test_nack_from_full_reject_publish_queue_raises_delivery_error(broker, unique):
    q = unique("full")

    async def scenario() -> None:
        async with connected(broker.url) as connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(
                q, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
            )
            assert isinstance(await channel.default_exchange.publish(aio_pika.Message(b"1"), q), Basic.Ack)
            with pytest.raises(aio_pika.exceptions.DeliveryError) as info:
                await channel.default_exchange.publish(aio_pika.Message(b"2"), q)
            assert isinstance(info.value.frame, Basic.Nack)
            assert queue.declaration_result.message_count == 0
            declared = await channel.declare_queue(q, passive=True)
            assert declared.declaration_result.message_count == 1

    run(scenario())


# ---------------------------------------------------------------------------------------------------------
# consuming: queue.iterator(), message.process(), basic.qos
# ---------------------------------------------------------------------------------------------------------
def test_rpc_pattern_call_and_close(broker, unique):
    """aio-pika's RPC: close() cancels the consumer of its auto-delete result queue (so the queue is gone)
    and then unbinds it from ``rpc.dlx``, which RabbitMQ 3.10 answers with unbind-ok."""
    method = unique("rpc.method")

    async def scenario() -> None:
        async with connected(broker.url) as connection:
            channel = await connection.channel()
            rpc = await aio_pika.patterns.RPC.create(channel)

            async def double(*, x: int) -> int:
                return x * 2

            await rpc.register(method, double, auto_delete=True)
            assert await rpc.call(method, kwargs={"x": 21}) == 42
            await rpc.close()
            assert not channel.is_closed  # no channel error from the unbind

    run(scenario())


def test_async_iterator_with_process_acks_and_requeues(broker, unique):
    q = unique("iter")

    async def scenario() -> None:
        async with connected(broker.url) as connection:
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=1)
            queue = await channel.declare_queue(q)
            for i in range(4):
                await channel.default_exchange.publish(aio_pika.Message(b"m%d" % i), routing_key=q)

            seen: list[tuple[bytes, bool]] = []
            failed_once = False
            async with queue.iterator() as it:
                async for message in it:
                    seen.append((message.body, message.redelivered))
                    try:
                        async with message.process(requeue=True):
                            if message.body == b"m1" and not failed_once:
                                failed_once = True
                                raise ValueError("handler failed: reject and requeue")
                    except ValueError:
                        continue
                    if len(seen) == 5:
                        break
            # the first failure is rejected with requeue and, with prefetch 1, comes straight back
            assert seen == [(b"m0", False), (b"m1", False), (b"m1", True), (b"m2", False), (b"m3", False)]
            # leaving the iterator cancelled the consumer; everything was acked
            declared = await channel.declare_queue(q, passive=True)
            assert declared.declaration_result.message_count == 0
            assert declared.declaration_result.consumer_count == 0

    run(scenario())


def test_basic_qos_prefetch_limits_unacked_deliveries(broker, unique):
    q = unique("qos")

    async def scenario() -> None:
        async with connected(broker.url) as connection:
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=2)
            queue = await channel.declare_queue(q)
            for i in range(5):
                await channel.default_exchange.publish(aio_pika.Message(b"%d" % i), routing_key=q)

            inbox: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
            tag = await queue.consume(inbox.put)
            first, second = await next_within(inbox), await next_within(inbox)
            assert (first.body, second.body) == (b"0", b"1")
            await nothing_within(inbox, 0.3)  # two unacked: the broker holds the rest

            await first.ack()
            third = await next_within(inbox)
            assert third.body == b"2"
            await nothing_within(inbox, 0.2)
            declared = await channel.declare_queue(q, passive=True)
            assert declared.declaration_result.message_count == 2  # ready; 2 more unacked

            # a new per-consumer limit applies to consumers started after it, not to this one (RabbitMQ 3.x)
            await channel.set_qos(prefetch_count=0)
            await nothing_within(inbox, 0.2)
            await second.ack()
            await third.ack()
            assert [(await next_within(inbox)).body for _ in range(2)] == [b"3", b"4"]
            await queue.cancel(tag)

    run(scenario())


# ---------------------------------------------------------------------------------------------------------
# dead-lettering configured through queue arguments
# ---------------------------------------------------------------------------------------------------------
def test_dead_letter_exchange_from_queue_arguments_and_x_death(broker, unique):
    work_name, dlx_name, dlq_name = unique("work"), unique("dlx"), unique("dlq")

    async def scenario() -> None:
        async with connected(broker.url) as connection:
            channel = await connection.channel()
            dlx = await channel.declare_exchange(dlx_name, aio_pika.ExchangeType.DIRECT)
            dlq = await channel.declare_queue(dlq_name)
            await dlq.bind(dlx, routing_key=work_name)  # dead letters keep their routing key
            work = await channel.declare_queue(work_name, arguments={"x-dead-letter-exchange": dlx_name})

            # 1. rejected by a consumer
            await channel.default_exchange.publish(
                aio_pika.Message(b"bad", headers={"tenant": "acme"}, message_id="r-1"), routing_key=work_name
            )
            message = await work.get(timeout=5)
            await message.reject(requeue=False)
            dead = await poll_until_async(
                lambda: dlq.get(fail=False), 5, 0.02, what=f"a dead letter in {dlq_name}"
            )
            await dead.ack()
            assert (dead.body, dead.message_id, dead.headers["tenant"]) == (b"bad", "r-1", "acme")
            assert (dead.exchange, dead.routing_key) == (dlx_name, work_name)
            (death,) = dead.headers["x-death"]
            assert isinstance(death["time"], datetime.datetime)
            assert {k: v for k, v in death.items() if k != "time"} == {
                "count": 1,
                "reason": "rejected",
                "queue": work_name,
                "exchange": "",
                "routing-keys": [work_name],
            }
            assert dead.headers["x-first-death-reason"] == "rejected"
            assert dead.headers["x-first-death-queue"] == work_name
            assert dead.headers["x-first-death-exchange"] == ""

            # 2. expired: aio-pika takes seconds and sends milliseconds ("100")
            await channel.default_exchange.publish(
                aio_pika.Message(b"late", expiration=0.1), routing_key=work_name
            )
            dead = await poll_until_async(
                lambda: dlq.get(fail=False), 5, 0.02, what=f"a dead letter in {dlq_name}"
            )
            await dead.ack()
            assert dead.body == b"late"
            assert dead.expiration is None  # removed from the dead letter
            (death,) = dead.headers["x-death"]
            assert (death["reason"], death["original-expiration"], death["queue"]) == (
                "expired",
                "100",
                work_name,
            )
            declared = await channel.declare_queue(work_name, passive=True)
            assert declared.declaration_result.message_count == 0

    run(scenario())


# ---------------------------------------------------------------------------------------------------------
# connect_robust across a broker restart: our own process (SIGTERM, and SIGKILL as an extension), or
# under AMQP_URL a local RabbitMQ restarted with `rabbitmqctl stop_app` / `start_app`
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["sigterm", pytest.param("sigkill", marks=pytest.mark.extension)])
def test_robust_connection_recovers_topology_consumers_and_persistent_messages(restartable, unique, how):
    b, restart = restartable(how)
    url = b.url
    x, backlog_q, live_q = unique("orders"), unique("orders.backlog"), unique("orders.live")

    def stored_count(queue: str) -> int:
        """What the restarted broker has in ``queue``, seen by another client (pika)."""
        conn = pika.BlockingConnection(b.params())
        try:
            return conn.channel().queue_declare(queue, passive=True).method.message_count
        finally:
            conn.close()

    async def scenario() -> None:
        connection = await aio_pika.connect_robust(url, reconnect_interval=0.1)
        reconnected = asyncio.Event()
        connection.reconnect_callbacks.add(lambda *_: reconnected.set())
        try:
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=10)
            orders = await channel.declare_exchange(x, aio_pika.ExchangeType.TOPIC, durable=True)
            backlog = await channel.declare_queue(backlog_q, durable=True)
            await backlog.bind(orders, "order.*")
            live = await channel.declare_queue(live_q, durable=True)
            await live.bind(orders, "order.*")
            inbox: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()

            async def on_live(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                await message.ack()
                await inbox.put(message)

            await live.consume(on_live)
            for i in range(3):
                confirm = await orders.publish(
                    aio_pika.Message(b"p%d" % i, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key="order.created",
                )
                assert isinstance(confirm, Basic.Ack)
            assert [(await next_within(inbox)).body for _ in range(3)] == [b"p0", b"p1", b"p2"]
            await live.declare()  # a round trip on the channel: the broker has handled the three acks

            await asyncio.to_thread(restart)
            # the confirmed persistent messages are back, before the robust client re-declares anything
            assert await asyncio.to_thread(stored_count, backlog_q) == 3
            await asyncio.wait_for(reconnected.wait(), 10)

            got = [await backlog.get(timeout=5) for _ in range(3)]
            assert [(m.body, m.redelivered, m.delivery_mode) for m in got] == [
                (b"p%d" % i, False, aio_pika.DeliveryMode.PERSISTENT) for i in range(3)
            ]
            for m in got:
                await m.ack()

            # the same robust objects work: publish on the restored channel, the restored consumer gets it
            confirm = await orders.publish(
                aio_pika.Message(b"after", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key="order.paid",
            )
            assert isinstance(confirm, Basic.Ack)
            live_after = await next_within(inbox)
            if how == "sigkill":
                # at-least-once: an ack still in the last uncommitted batch is lost with the process, and
                # its message comes back redelivered (RabbitMQ documents the same)
                while live_after.body != b"after":
                    assert (live_after.body in (b"p0", b"p1", b"p2"), live_after.redelivered) == (True, True)
                    live_after = await next_within(inbox)
            assert (live_after.body, live_after.redelivered) == (b"after", False)
            assert (await backlog.get(timeout=5)).body == b"after"
        finally:
            with contextlib.suppress(Exception):
                cleanup = await connection.channel()
                for name in (backlog_q, live_q):
                    await cleanup.queue_delete(name)
                await cleanup.exchange_delete(x)
            await connection.close()

    try:
        run(scenario(), timeout=60)
    except BaseException:
        print(f"broker log tail:\n{b.log_tail()}")
        raise
