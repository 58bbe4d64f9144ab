"""One running dynamic shovel: its connections, its states and its reconnect loop
(RabbitMQ 3.10's ``rabbit_shovel_worker`` with ``rabbit_amqp091_shovel``).

States (the status RabbitMQ's ``/api/shovels`` shows):

- ``starting``: connecting to the source, then the destination, then declaring;
- ``running``: consuming; the status names the ends (``src_uri``/``dest_uri`` without
  credentials, the queues or exchanges, ``src_protocol``/``dest_protocol`` ``amqp091``);
- ``terminated``: a running shovel failed (``reason``); after ``reconnect-delay`` seconds it starts
  again (never with a delay of 0, a fraction or less: ``ShovelSpec.restarts``). A shovel that cannot
  connect or declare stays ``starting`` (RabbitMQ's worker stops with ``shutdown`` there, which
  reports nothing), its timestamp renewed at each attempt; the log says why.

Rules:

1. Connecting: each end's URIs are tried in a random order until one connects (RabbitMQ's
   ``make_conn_and_chan``); a destination channel in ``on-confirm`` mode selects confirms.
2. Declaring (RabbitMQ's ``ensure_queue``): a named source or destination queue that a passive
   declare does not find is declared durable with its ``*-queue-args``; a source exchange gets an
   exclusive server-named queue bound with ``src-exchange-key``. The source channel's prefetch is
   ``src-prefetch-count`` (not with ``no-ack``).
3. Forwarding, in delivery order: to ``dest-queue`` through the default exchange, else to
   ``dest-exchange`` (or the message's own exchange) with ``dest-exchange-key`` (or the message's
   routing key); the properties byte for byte but for ``headers.rewrite``; the body as it came.
4. Acknowledging: ``on-confirm`` acks the source once the destination confirmed (a nack is passed
   back as a nack with requeue); ``on-publish`` once the publish is handed to the connection;
   ``no-ack`` consumes without acks. The acks of one event-loop turn go out in delivery order, a run
   of them as one ``multiple`` ack (RabbitMQ passes a confirm's ``multiple`` flag on the same way).
   A message whose source was not acked is redelivered by the source when a connection drops: it
   may arrive twice (counted: ``redelivered``), it is never lost.
5. ``src-delete-after``: ``queue-length`` is the source queue's length when the shovel starts, a
   number is that many; once that many are done (acked, or published with ``no-ack``), the shovel
   closes and its parameter is cleared (``Finished``). With ``on-confirm`` nothing beyond that many
   is published (the rest stays in the source).
6. A connection or channel that closes, a publish the destination refuses, a message whose
   properties cannot be rewritten: the attempt ends, both connections are closed (unacked messages
   go back to the source), the state becomes ``terminated``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiormq
from aiormq.abc import AbstractChannel, DeliveredMessage
from pamqp import commands

from . import headers, link
from .definition import ShovelSpec
from .link import LinkError, LocalBroker
from .tap import Tap
from .uri import parse_uri

log = logging.getLogger(__name__)

STARTING, RUNNING, TERMINATED = "starting", "running", "terminated"


class Finished(Exception):
    """``src-delete-after`` is reached (rule 5): the shovel is done."""


@dataclass(slots=True)
class Counters:
    """What a shovel did since its parameter was set (``ottermq_shovel_*``)."""

    forwarded: int = 0  # published to the destination
    acked: int = 0  # acknowledged at the source (confirmed or published)
    nacked: int = 0  # refused by the destination, handed back to the source
    redelivered: int = 0  # delivered again by the source: possibly a duplicate downstream
    restarts: int = 0  # attempts after a failure


@dataclass(slots=True)
class Status:
    """The status entry of a shovel (``/api/shovels``)."""

    state: str = STARTING
    reason: str | None = None
    timestamp: float = field(default_factory=time.time)
    info: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Ends:
    """What a shovel needs from its node: where the local broker is (None: not serving yet), the
    cluster name for ``shovelled-by``, and what to do when ``src-delete-after`` is reached."""

    local: Callable[[], LocalBroker | None]
    cluster_name: str
    finished: Callable[[str, str], None]


class Attempt:
    """One attempt: two connections and the forwarding between them (rules 1-6)."""

    def __init__(self, shovel: Shovel) -> None:
        self.shovel = shovel
        self.spec = shovel.spec
        self.connections: list[aiormq.Connection] = []
        self.failed: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
        self.remaining: int | None = None
        self.unpublished: int | None = None
        self.publishes: set[asyncio.Task[None]] = set()
        self.delivered: collections.deque[int] = collections.deque()  # source tags, in delivery order
        self.settled: dict[int, bool] = {}  # tag -> ack (True) or hand back (False), not yet sent
        self.acking = False
        self.source: AbstractChannel | None = None
        self.dest: aiormq.Channel | None = None
        self.src_tap = self.dest_tap = Tap()
        self.src_uri = self.dest_uri = ""
        self.forward_table: list[tuple[str, str]] | None = None

    async def _connect(self, uris: tuple[str, ...]) -> tuple[aiormq.Connection, Tap, str]:
        order = list(uris)
        random.shuffle(order)
        last: BaseException = LinkError("failed_to_connect_using_provided_uris")
        for text in order:
            uri = parse_uri(text)
            try:
                connection, tap = await link.connect(uri, self.shovel.name, self.shovel.ends.local())
            except Exception as exc:
                log.error(
                    "Shovel '%s' in vhost '%s' failed to connect (URI: %s): %s",
                    self.shovel.name,
                    self.shovel.vhost,
                    uri.safe,
                    describe(exc),
                )
                last = exc
                continue
            self.connections.append(connection)
            connection.closing.add_done_callback(self._closed)
            return connection, tap, uri.safe
        raise last

    def _closed(self, closing: asyncio.Future[Any]) -> None:
        if not self.failed.done():
            reason = closing.exception() if not closing.cancelled() else None
            self.failed.set_result(reason or ConnectionError("connection closed"))

    def _cancelled(self, _frame: Any) -> None:
        """The source cancelled the consumer (its queue was deleted): RabbitMQ's shovel restarts."""
        self.fail(ConnectionError("needed a restart: the source cancelled the consumer"))

    def fail(self, exc: BaseException) -> None:
        if not self.failed.done():
            self.failed.set_result(exc)

    async def run(self) -> None:
        """Connect, declare, consume and forward until something fails or the shovel is done.

        Raises:
            Finished: rule 5.
            Exception: rule 6's failure.
        """
        spec = self.spec
        src_conn, self.src_tap, self.src_uri = await self._connect(spec.src_uris)
        dest_conn, self.dest_tap, self.dest_uri = await self._connect(spec.dest_uris)
        confirms = spec.ack_mode == "on-confirm"
        dest = await dest_conn.channel(publisher_confirms=confirms)
        assert isinstance(dest, aiormq.Channel)  # its basic_publish takes wait=False
        self.dest = dest
        self.dest.closing.add_done_callback(self._closed)
        if spec.dest_queue is not None:
            await ensure_queue(dest_conn, spec.dest_queue, spec.dest_queue_args)
        self.source = source = await src_conn.channel(publisher_confirms=False)
        source.closing.add_done_callback(self._closed)
        source.on_consumer_cancel_callbacks.add(self._cancelled)
        queue = await self._declare_source(src_conn, source)
        no_ack = spec.ack_mode == "no-ack"
        if not no_ack:
            await source.basic_qos(prefetch_count=int(spec.prefetch))
        self.remaining = await self._remaining(source, queue)
        if self.remaining == 0:
            raise Finished()
        self.unpublished = self.remaining if confirms else None
        if spec.add_forward_headers:
            self.forward_table = self._forward_table()
        await source.basic_consume(
            queue, self._on_message, no_ack=no_ack, arguments=spec.src_consumer_args or None
        )
        self.shovel.report(RUNNING, info=self._info())
        raise await self.failed

    async def _declare_source(self, connection: aiormq.Connection, channel: AbstractChannel) -> str:
        spec = self.spec
        if spec.src_queue is not None:
            await ensure_queue(connection, spec.src_queue, spec.src_queue_args)
            return spec.src_queue
        declared = await channel.queue_declare(exclusive=True)
        queue = str(declared.queue)
        await channel.queue_bind(queue, str(spec.src_exchange), routing_key=spec.src_exchange_key)
        return queue

    async def _remaining(self, channel: AbstractChannel, queue: str) -> int | None:
        after = self.spec.delete_after
        if after == "queue-length":
            declared = await channel.queue_declare(queue, passive=True)
            return int(declared.message_count or 0)
        return after if isinstance(after, int) else None

    def _forward_table(self) -> list[tuple[str, str]]:
        spec, shovel = self.spec, self.shovel
        table = [
            ("shovelled-by", shovel.ends.cluster_name),
            ("shovel-type", "dynamic"),
            ("shovel-name", shovel.name),
            ("shovel-vhost", shovel.vhost),
            ("src-uri", self.src_uri),
            ("dest-uri", self.dest_uri),
        ]
        if spec.src_queue is not None:
            table.append(("src-queue", spec.src_queue))
        else:
            table += [("src-exchange", str(spec.src_exchange)), ("src-exchange-key", spec.src_exchange_key)]
        for key, value in (
            ("dest-exchange", spec.dest_exchange),
            ("dest-exchange-key", spec.dest_exchange_key),
            ("dest-queue", spec.dest_queue),
        ):
            if value is not None:
                table.append((key, value))
        return table

    def _info(self) -> dict[str, str]:
        spec = self.spec
        info = {
            "src_uri": self.src_uri,
            "src_protocol": "amqp091",
            "dest_protocol": "amqp091",
            "dest_uri": self.dest_uri,
        }
        if spec.src_queue is not None:
            info["src_queue"] = spec.src_queue
        else:
            info["src_exchange"] = str(spec.src_exchange)
            info["src_exchange_key"] = spec.src_exchange_key
        for key, value in (
            ("dest_exchange", spec.dest_exchange),
            ("dest_exchange_key", spec.dest_exchange_key),
            ("dest_queue", spec.dest_queue),
        ):
            if value is not None:
                info[key] = value
        return info

    # -- forwarding (rules 3-5) -----------------------------------------------------------------
    async def _on_message(self, message: DeliveredMessage) -> None:
        try:
            self._forward(message)
        except Exception as exc:  # a message that cannot be forwarded ends the attempt (rule 6)
            self.fail(exc)

    def _forward(self, message: DeliveredMessage) -> None:
        spec, counters = self.spec, self.shovel.counters
        deliver = message.delivery
        assert isinstance(deliver, commands.Basic.Deliver) and self.source is not None
        tag = int(deliver.delivery_tag or 0)
        raw = self.src_tap.take(self.source.number, tag)
        if deliver.redelivered:
            counters.redelivered += 1
        if self.unpublished == 0:
            return  # on-confirm, delete-after reached: left unacked for the source (rule 5)
        if self.unpublished is not None:
            self.unpublished -= 1
        if spec.ack_mode != "no-ack":
            self.delivered.append(tag)
        if spec.dest_queue is not None:
            exchange, key = "", spec.dest_queue
        else:
            exchange = spec.dest_exchange if spec.dest_exchange is not None else str(deliver.exchange or "")
            key = (
                spec.dest_exchange_key
                if spec.dest_exchange_key is not None
                else str(deliver.routing_key or "")
            )
        stamp = int(time.time()) if spec.add_timestamp_header else None
        props = headers.rewrite(raw, spec.publish_properties, self.forward_table, stamp)
        task = asyncio.get_running_loop().create_task(self._publish(tag, exchange, key, props, message.body))
        self.publishes.add(task)
        task.add_done_callback(self.publishes.discard)

    async def _publish(self, tag: int, exchange: str, key: str, props: bytes, body: bytes) -> None:
        dest, source, mode = self.dest, self.source, self.spec.ack_mode
        assert dest is not None and source is not None
        placeholder = self.dest_tap.placeholder(props)
        confirmation: object
        try:
            confirmation = await dest.basic_publish(  # wait=False: queued for the writer, not drained
                body, exchange=exchange, routing_key=key, properties=placeholder, wait=False
            )
        except aiormq.exceptions.DeliveryError as refused:  # a nack
            confirmation = refused.frame
        except BaseException as exc:
            self.dest_tap.forget(placeholder)
            if not isinstance(exc, asyncio.CancelledError):
                self.fail(exc)
            raise
        self.shovel.counters.forwarded += 1
        if mode == "no-ack":
            self._done(1)
        else:  # on-publish: settled once written; on-confirm: once the destination answered
            self._settle(tag, mode == "on-publish" or isinstance(confirmation, commands.Basic.Ack))

    def _settle(self, tag: int, ack: bool) -> None:
        """A delivery to acknowledge (or, ``ack`` false, to hand back); the acknowledgements of a
        loop turn go out together, each run of acks as one ``multiple`` ack (rule 4)."""
        self.settled[tag] = ack
        if not self.acking:
            self.acking = True
            asyncio.get_running_loop().call_soon(self._ack_soon)

    def _ack_soon(self) -> None:
        task = asyncio.get_running_loop().create_task(self._ack())
        self.publishes.add(task)
        task.add_done_callback(self.publishes.discard)

    async def _ack(self) -> None:
        """Acknowledge the settled deliveries at the head of ``delivered`` (in delivery order)."""
        source, counters = self.source, self.shovel.counters
        assert source is not None
        try:
            while self.delivered and self.delivered[0] in self.settled:
                run: list[int] = []
                while self.delivered and self.settled.get(self.delivered[0]) is True:
                    run.append(self.delivered.popleft())
                if run:
                    await source.basic_ack(run[-1], multiple=len(run) > 1, wait=False)
                    counters.acked += len(run)
                    for tag in run:
                        del self.settled[tag]
                    self._done(len(run))
                elif self.delivered and self.settled.get(self.delivered[0]) is False:
                    tag = self.delivered.popleft()
                    del self.settled[tag]
                    await source.basic_nack(tag, requeue=True, wait=False)
                    counters.nacked += 1
                    self._done(1)
        except Exception as exc:
            self.fail(exc)
        finally:
            self.acking = False
            if self.delivered and self.delivered[0] in self.settled:
                self._settle(self.delivered[0], self.settled[self.delivered[0]])

    def _done(self, count: int) -> None:
        if self.remaining is None:
            return
        self.remaining -= count
        if self.remaining <= 0:
            log.info("shutting down Shovel '%s', no messages left to transfer", self.shovel.name)
            self.fail(Finished())

    async def close(self) -> None:
        for task in list(self.publishes):
            task.cancel()
        await asyncio.gather(*self.publishes, return_exceptions=True)
        await asyncio.gather(*(link.close(c) for c in self.connections))


async def ensure_queue(connection: aiormq.Connection, queue: str, arguments: dict[str, Any]) -> None:
    """RabbitMQ's ``ensure_queue``: a passive declare, and a durable declare if it was not found."""
    channel = await connection.channel(publisher_confirms=False)
    try:
        await channel.queue_declare(queue, passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        declaring = await connection.channel(publisher_confirms=False)
        await declaring.queue_declare(queue, durable=True, arguments=arguments or None)
        await declaring.close()
    else:
        await channel.close()


def describe(exc: BaseException) -> str:
    """A failure as the status' ``reason`` and the log show it."""
    if isinstance(exc, aiormq.exceptions.AMQPError) and exc.args:
        return " ".join(str(a) for a in exc.args)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


class Shovel:
    """A dynamic shovel (``vhost``, ``name``) with its definition, status and counters; ``run``
    is its life: attempts, and the waits between them (see the module states).

    Args:
        vhost, name: the parameter's.
        spec: the definition.
        ends: the node's side (``Ends``).
    """

    def __init__(self, vhost: str, name: str, spec: ShovelSpec, ends: Ends) -> None:
        self.vhost = vhost
        self.name = name
        self.spec = spec
        self.ends = ends
        self.status = Status()
        self.counters = Counters()
        self.task: asyncio.Task[None] | None = None

    def report(self, state: str, reason: str | None = None, info: dict[str, str] | None = None) -> None:
        self.status = Status(state, reason, time.time(), info or {})

    async def run(self) -> None:
        """Attempts until the shovel is done or cancelled (rules 1-6)."""
        while True:
            self.report(STARTING)
            attempt = Attempt(self)
            try:
                await attempt.run()
            except Finished:
                await attempt.close()
                log.info(
                    "Shovel '%s' in virtual host '%s' is stopping (it was configured to autodelete and"
                    " transfer is completed)",
                    self.name,
                    self.vhost,
                )
                self.ends.finished(self.vhost, self.name)
                return
            except asyncio.CancelledError:
                await attempt.close()
                raise
            except Exception as exc:
                await attempt.close()
                reason = describe(exc)
                if self.status.state == RUNNING:
                    log.error(
                        "Shovel '%s' in virtual host '%s' is stopping, reason: %s",
                        self.name,
                        self.vhost,
                        reason,
                    )
                    self.report(TERMINATED, reason=reason)
                else:  # RabbitMQ's worker stops with `shutdown` here: the status stays `starting`
                    log.error(
                        "Shovel '%s' in virtual host '%s' could not start: %s", self.name, self.vhost, reason
                    )
            if not self.spec.restarts:
                return
            await asyncio.sleep(float(self.spec.reconnect_delay))
            self.counters.restarts += 1
