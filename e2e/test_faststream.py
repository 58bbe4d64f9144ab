"""FastStream's RabbitBroker (``faststream.rabbit``, on aio-pika) against the real broker.

FastStream's own ``TestRabbitBroker`` is an in-memory stand-in and is not used: every message here goes
through the broker under test. A ``RabbitBroker`` is started with ``await broker.start()`` (subscribers
consume, the reply consumer for requests is set up) and stopped with ``await broker.stop()``; each test is a
plain function running one coroutine with ``asyncio.run`` (no pytest-asyncio, as ``test_aio_pika.py``).
Subscribers use a channel with ``prefetch_count=1`` so each handles its queue's messages one at a time, in
order.

What FastStream 0.7 asks of the broker, and the reference values (RabbitMQ 3.10.8):
    * topic routing: a subscriber's ``RabbitQueue(routing_key=...)`` is bound to its ``RabbitExchange``;
      ``*`` matches one word, ``#`` zero or more, so ``#.created`` takes ``created`` too. With
      ``on_return_raises`` a mandatory publish nobody's binding matches raises ``PublishError`` carrying
      ``basic.return`` 312 ``NO_ROUTE``.
    * RPC: ``broker.request(...)`` publishes with ``reply_to=amq.rabbitmq.reply-to`` and consumes that
      pseudo-queue with ``no_ack`` (direct reply-to); the replier sees ``reply_to`` rewritten to
      ``amq.rabbitmq.reply-to.<token>`` and its answer, published to that name on the default exchange, comes
      back with the request's ``correlation_id``. The reply is published ``mandatory``, and RabbitMQ 3.10
      both delivers it and returns it (312 ``NO_ROUTE``: the pseudo-queue is no queue). With FastStream's
      default ``on_return_raises=False`` that return is only logged; with ``True`` the replier's publish
      raises after the requester already has its answer, and the request is then rejected (dead-lettered).
    * acknowledgement policies (``AckPolicy``): the default is ``REJECT_ON_ERROR`` (``basic.reject``
      requeue=false: the message is dead-lettered with ``x-death`` reason ``rejected``, or dropped without a
      DLX); ``NACK_ON_ERROR`` nacks with requeue=true (redelivered with ``redelivered`` set);
      ``ACK_FIRST`` consumes with ``no_ack`` (an error loses the message); ``MANUAL`` leaves ``msg.ack()``,
      ``msg.nack()`` and ``msg.reject()`` to the handler, and what it leaves unacked comes back (redelivered)
      when the connection closes. Raising ``NackMessage`` / ``RejectMessage`` / ``AckMessage`` overrides the
      policy.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import aio_pika
import aio_pika.abc
import aio_pika.exceptions
import pytest

from .polling import poll_until_async

try:
    from faststream import AckPolicy
    from faststream.exceptions import NackMessage
    from faststream.rabbit import Channel, ExchangeType, RabbitBroker, RabbitExchange, RabbitQueue
    from faststream.rabbit.annotations import RabbitMessage
except ImportError as exc:  # a dev dependency: never a silent skip
    pytest.fail(
        f"the FastStream tests need faststream[rabbit] ({exc}); run "
        "`.venv/bin/python -m pip install -e '.[dev]' --config-settings editable_mode=strict` "
        "(or `make install`)",
        pytrace=False,
    )

T = TypeVar("T")
TIMEOUT = 30  # per test, seconds: a hang fails instead of blocking the suite
WAIT = 10  # seconds for an expected delivery


def run(coro: Awaitable[T], timeout: float = TIMEOUT) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def make_broker(url: str, *, on_return_raises: bool = False) -> RabbitBroker:
    """A RabbitBroker whose subscribers take one message at a time; ``on_return_raises``: a returned
    mandatory publish raises ``PublishError`` (FastStream's default only logs it)."""
    return RabbitBroker(
        url,
        default_channel=Channel(prefetch_count=1, on_return_raises=on_return_raises),
        graceful_timeout=5,
    )


@contextlib.asynccontextmanager
async def running(broker: RabbitBroker) -> AsyncIterator[RabbitBroker]:
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


@contextlib.asynccontextmanager
async def inspector(url: str) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    """A plain aio-pika channel to look at queues from outside FastStream."""
    connection = await aio_pika.connect(url)
    try:
        yield await connection.channel()
    finally:
        await connection.close()


async def ready(channel: aio_pika.abc.AbstractChannel, queue: str) -> int:
    """Ready messages in ``queue`` (a passive declare: unacked ones are not counted)."""
    declared = await channel.declare_queue(queue, passive=True)
    assert declared.declaration_result.message_count is not None
    return declared.declaration_result.message_count


async def wait_for_len(items: list[Any], n: int, what: str) -> list[Any]:
    async def enough() -> bool:
        return len(items) >= n

    await poll_until_async(enough, WAIT, what=what, explain=lambda: f"so far: {items}")
    return list(items)


def dead_letter_args(dlq: str) -> dict[str, Any]:
    return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}


def death_of(headers: dict[str, Any]) -> dict[str, Any]:
    """The one ``x-death`` entry, without its ``time``."""
    (death,) = headers["x-death"]
    return {k: v for k, v in death.items() if k != "time"}


# ---------------------------------------------------------------------------------------------------------
# topic routing
# ---------------------------------------------------------------------------------------------------------
def test_topic_exchange_routes_to_the_subscribers_whose_binding_matches(broker, unique):
    exchange = RabbitExchange(unique("topic"), type=ExchangeType.TOPIC)
    qa, qb = unique("orders"), unique("created")
    got: dict[str, list[tuple[str, str]]] = {qa: [], qb: []}
    fs = make_broker(broker.url, on_return_raises=True)

    @fs.subscriber(RabbitQueue(qa, routing_key="orders.*"), exchange)
    async def orders(body: str, msg: RabbitMessage) -> None:
        got[qa].append((msg.raw_message.routing_key or "", body))

    @fs.subscriber(RabbitQueue(qb, routing_key="#.created"), exchange)
    async def created(body: str, msg: RabbitMessage) -> None:
        got[qb].append((msg.raw_message.routing_key or "", body))

    routed = ["orders.created", "orders.paid", "users.created", "eu.users.created", "created"]
    unroutable = ["orders", "orders.paid.late", "orders.created.eu", "users.deleted"]

    async def scenario() -> None:
        async with running(fs):
            for key in routed:
                await fs.publish(f"body of {key}", exchange=exchange, routing_key=key)
            for key in unroutable:
                with pytest.raises(aio_pika.exceptions.PublishError) as info:
                    await fs.publish(f"body of {key}", exchange=exchange, routing_key=key)
                assert (info.value.frame.reply_code, info.value.frame.reply_text) == (312, "NO_ROUTE"), key
            # last, to both: each subscriber takes its queue in order, so its marker comes after the rest
            await fs.publish("end", exchange=exchange, routing_key="orders.created")
            await wait_for_len(got[qa], 3, f"3 deliveries to {qa}")
            await wait_for_len(got[qb], 5, f"5 deliveries to {qb}")
            for queue in (qa, qb):
                await poll_until_async(
                    lambda queue=queue: _ended(got[queue]), WAIT, what=f"the end marker in {queue}"
                )

    run(scenario())
    expected = {
        qa: [("orders.created", "body of orders.created"), ("orders.paid", "body of orders.paid")],
        qb: [
            ("orders.created", "body of orders.created"),
            ("users.created", "body of users.created"),
            ("eu.users.created", "body of eu.users.created"),
            ("created", "body of created"),
        ],
    }
    for queue in (qa, qb):
        assert got[queue] == [*expected[queue], ("orders.created", "end")], queue


async def _ended(items: list[tuple[str, str]]) -> bool:
    return bool(items) and items[-1][1] == "end"


# ---------------------------------------------------------------------------------------------------------
# RPC over direct reply-to
# ---------------------------------------------------------------------------------------------------------
def test_request_gets_the_subscribers_return_value_over_direct_reply_to(broker, unique):
    q = unique("rpc")
    seen: list[tuple[str | None, str | None]] = []
    fs = make_broker(broker.url)

    @fs.subscriber(q)
    async def add(body: dict[str, int], msg: RabbitMessage) -> dict[str, int]:
        seen.append((msg.reply_to, msg.correlation_id))
        return {"sum": body["a"] + body["b"]}

    async def scenario() -> None:
        async with running(fs):
            for n in range(3):
                answer = await fs.request(
                    {"a": n, "b": 10}, queue=q, correlation_id=f"call-{n}", timeout=WAIT
                )
                assert await answer.decode() == {"sum": n + 10}
                assert answer.correlation_id == f"call-{n}"
                assert answer.content_type == "application/json"
                raw = answer.raw_message
                assert raw.exchange == ""
                assert (raw.routing_key or "").startswith("amq.rabbitmq.reply-to."), raw.routing_key
                assert raw.routing_key == seen[n][0]  # the replier published to the name it was given
        async with inspector(broker.url) as channel:  # stopped: an unacked request would be back
            assert await ready(channel, q) == 0

    run(scenario())
    assert [c for _, c in seen] == ["call-0", "call-1", "call-2"]
    for reply_to, _ in seen:
        assert reply_to is not None and reply_to.startswith("amq.rabbitmq.reply-to."), reply_to
        assert len(reply_to) > len("amq.rabbitmq.reply-to.")


def test_reply_is_delivered_and_returned_so_on_return_raises_rejects_the_request(broker, unique):
    q, dlq = unique("rpc"), unique("dlq")
    fs = make_broker(broker.url, on_return_raises=True)

    @fs.subscriber(RabbitQueue(q, arguments=dead_letter_args(dlq)))
    async def double(body: int) -> int:
        return body * 2

    async def scenario() -> None:
        async with inspector(broker.url) as channel:
            dead = await channel.declare_queue(dlq)
            async with running(fs):
                answer = await fs.request(21, queue=q, timeout=WAIT)
                assert await answer.decode() == 42  # delivered ...

                async def dead_lettered() -> int:
                    return await ready(channel, dlq)

                # ... and returned: the replier's publish raised, so REJECT_ON_ERROR rejected the request
                await poll_until_async(dead_lettered, WAIT, what=f"the rejected request in {dlq}")
            rejected = await dead.get(timeout=5)
            await rejected.ack()
            assert rejected.body == b"21"
            assert rejected.headers is not None
            death = death_of(dict(rejected.headers))
            assert (death["reason"], death["queue"]) == ("rejected", q)
            assert await ready(channel, q) == 0

    run(scenario())


# ---------------------------------------------------------------------------------------------------------
# acknowledgement policies
# ---------------------------------------------------------------------------------------------------------
def test_default_policy_rejects_a_failing_message_into_the_dead_letter_queue(broker, unique):
    q, dlq = unique("work"), unique("dlq")
    attempts: list[bool] = []
    dead: list[tuple[str, dict[str, Any], str | None]] = []
    fs = make_broker(broker.url)

    @fs.subscriber(RabbitQueue(q, arguments=dead_letter_args(dlq)))
    async def fails(body: str, msg: RabbitMessage) -> None:  # default policy: REJECT_ON_ERROR
        attempts.append(msg.raw_message.redelivered or False)
        raise RuntimeError("handler failed on purpose")

    @fs.subscriber(dlq)
    async def dead_letters(body: str, msg: RabbitMessage) -> None:
        dead.append((body, msg.headers, msg.raw_message.routing_key))

    async def scenario() -> None:
        async with running(fs):
            await fs.publish("poison", queue=q, headers={"tenant": "acme"})
            await wait_for_len(dead, 1, f"the dead letter in {dlq}")
            async with inspector(broker.url) as channel:
                assert await ready(channel, q) == 0

    run(scenario())
    assert attempts == [False]  # rejected without requeue: never redelivered
    body, headers, routing_key = dead[0]
    assert (body, routing_key, headers["tenant"]) == ("poison", dlq, "acme")
    assert death_of(headers) == {
        "count": 1,
        "reason": "rejected",
        "queue": q,
        "exchange": "",
        "routing-keys": [q],
    }
    assert (headers["x-first-death-queue"], headers["x-first-death-reason"]) == (q, "rejected")


def test_nack_on_error_policy_requeues_and_the_redelivery_is_flagged(broker, unique):
    q = unique("nack")
    attempts: list[tuple[str, bool]] = []
    fs = make_broker(broker.url)

    @fs.subscriber(q, ack_policy=AckPolicy.NACK_ON_ERROR)
    async def flaky(body: str, msg: RabbitMessage) -> None:
        attempts.append((body, msg.raw_message.redelivered or False))
        if len(attempts) == 1:
            raise RuntimeError("first attempt fails on purpose")

    async def scenario() -> None:
        async with running(fs):
            await fs.publish("retry me", queue=q)
            await wait_for_len(attempts, 2, "the redelivery")
        async with inspector(broker.url) as channel:  # stopped: anything unacked is back in the queue
            assert await ready(channel, q) == 0

    run(scenario())
    assert attempts == [("retry me", False), ("retry me", True)]


def test_ack_first_policy_loses_a_message_whose_handler_fails(broker, unique):
    q, dlq = unique("ackfirst"), unique("dlq")
    attempts: list[str] = []
    fs = make_broker(broker.url)

    @fs.subscriber(RabbitQueue(q, arguments=dead_letter_args(dlq)), ack_policy=AckPolicy.ACK_FIRST)
    async def fails(body: str) -> None:
        attempts.append(body)
        if body == "first":
            raise RuntimeError("handler failed on purpose")

    async def scenario() -> None:
        async with inspector(broker.url) as channel:
            await channel.declare_queue(dlq)
            async with running(fs):
                await fs.publish("first", queue=q)
                await fs.publish("second", queue=q)
                await wait_for_len(attempts, 2, "both messages handled")
            # consumed with no_ack: the failure neither requeued nor dead-lettered it
            assert (await ready(channel, q), await ready(channel, dlq)) == (0, 0)

    run(scenario())
    assert attempts == ["first", "second"]


def test_manual_policy_ack_nack_reject_and_unacked(broker, unique):
    """``MANUAL``: nack (requeue) then reject on the redelivery dead-letters the message; ack removes one;
    one left unacked is back in the queue, redelivered, once the broker's connection is closed."""
    q, dlq = unique("manual"), unique("dlq")
    handled: list[tuple[str, bool]] = []
    fs = make_broker(broker.url)

    @fs.subscriber(RabbitQueue(q, arguments=dead_letter_args(dlq)), ack_policy=AckPolicy.MANUAL)
    async def manual(body: str, msg: RabbitMessage) -> None:
        redelivered = msg.raw_message.redelivered or False
        handled.append((body, redelivered))
        if body == "nack-then-reject":
            await (msg.reject() if redelivered else msg.nack())
        elif body == "ack":
            await msg.ack()
        # "leave": neither; prefetch 1 would stall the queue, so it is sent last

    async def scenario() -> None:
        async with inspector(broker.url) as channel:
            dead = await channel.declare_queue(dlq)
            async with running(fs):
                for body in ("nack-then-reject", "ack", "leave"):
                    await fs.publish(body, queue=q)
                await wait_for_len(handled, 4, "four deliveries")

                async def dead_lettered() -> int:
                    return await ready(channel, dlq)

                await poll_until_async(dead_lettered, WAIT, what=f"the rejected message in {dlq}")
                assert await ready(channel, q) == 0  # "leave" is delivered, unacked
            assert await ready(channel, q) == 1  # its channel closed: requeued
            back = await (await channel.declare_queue(q, passive=True)).get(timeout=5)
            await back.ack()
            assert (back.body, back.redelivered) == (b"leave", True)
            rejected = await dead.get(timeout=5)
            await rejected.ack()
            assert rejected.body == b"nack-then-reject"
            assert rejected.headers is not None
            assert death_of(dict(rejected.headers))["reason"] == "rejected"

    run(scenario())
    assert handled == [
        ("nack-then-reject", False),
        ("nack-then-reject", True),
        ("ack", False),
        ("leave", False),
    ]


def test_nack_message_exception_overrides_the_reject_policy(broker, unique):
    q, dlq = unique("nackexc"), unique("dlq")
    attempts: list[bool] = []
    fs = make_broker(broker.url)

    @fs.subscriber(RabbitQueue(q, arguments=dead_letter_args(dlq)), ack_policy=AckPolicy.REJECT_ON_ERROR)
    async def handler(body: str, msg: RabbitMessage) -> None:
        attempts.append(msg.raw_message.redelivered or False)
        if len(attempts) == 1:
            raise NackMessage()  # requeue=True, whatever the policy says about errors

    async def scenario() -> None:
        async with inspector(broker.url) as channel:
            await channel.declare_queue(dlq)
            async with running(fs):
                await fs.publish("again", queue=q)
                await wait_for_len(attempts, 2, "the redelivery")
            assert (await ready(channel, q), await ready(channel, dlq)) == (0, 0)

    run(scenario())
    assert attempts == [False, True]
