"""Direct reply-to registry and property rewriting (``ottermq.broker.server.reply_to``); no sockets."""

from __future__ import annotations

import base64
import re

import pytest
from ottermq.amqp.errors import ChannelCrashed, NotAllowed, NotFound, PreconditionFailed
from ottermq.amqp.props import get_reply_to, replace_reply_to
from ottermq.broker.server.reply_to import (
    NODE_MARKER,
    REPLY_PREFIX,
    REPLY_QUEUE,
    ReplyConsumer,
    ReplyRegistry,
    fast_reply_to,
    new_channel_id,
    split_suffix,
)
from ottermq.vhost.message import Message, sender_selected
from pamqp import commands, header


class FakeChannel:
    def __init__(self) -> None:
        self.reply: ReplyConsumer | None = None
        self.reply_id: str | None = None
        self.got: list[tuple[str, Message]] = []

    def deliver_reply(self, consumer: ReplyConsumer, message: Message) -> None:
        self.got.append((consumer.tag, message))

    def consume(self, registry: ReplyRegistry, tag: str = "rc") -> ReplyConsumer:
        self.reply = registry.consume(self, tag, True, ())
        self.reply_id = self.reply.channel_id
        return self.reply


def raw_props(**kwargs: object) -> bytes:
    return header.ContentHeader(0, 0, commands.Basic.Properties(**kwargs)).marshal()[12:]


def message(routing_key: str, props: bytes = b"\x00\x00") -> Message:
    return Message("", routing_key, props, b"body", False, None, None)


# --- consume / cancel -----------------------------------------------------------------------------
def test_consume_checks_in_rabbitmq_order() -> None:
    registry, channel = ReplyRegistry(), FakeChannel()
    with pytest.raises(NotAllowed, match="attempt to reuse consumer tag 't1'"):
        registry.consume(channel, "t1", True, {"t1"})
    with pytest.raises(PreconditionFailed, match="reply consumer cannot acknowledge"):
        registry.consume(channel, "t2", False, ())
    channel.consume(registry)
    with pytest.raises(PreconditionFailed, match="cannot acknowledge"):  # checked before "already set"
        registry.consume(channel, "t2", False, ())
    with pytest.raises(PreconditionFailed, match="reply consumer already set"):
        registry.consume(channel, "t2", True, ())


def test_address_shape_and_uniqueness() -> None:
    registry = ReplyRegistry()
    consumers = [FakeChannel().consume(registry) for _ in range(50)]
    addresses = {c.address for c in consumers}
    assert len(addresses) == 50 and len(registry) == 50
    for consumer in consumers:
        assert consumer.address.startswith(REPLY_PREFIX)
        channel_id, key = consumer.address[len(REPLY_PREFIX) :].split(".")
        assert base64.b64decode(channel_id, validate=True).startswith(NODE_MARKER)
        assert len(base64.b64decode(key, validate=True)) == 16
        assert len(consumer.address) <= 255


def test_a_channel_keeps_its_id_but_gets_a_new_key() -> None:
    registry, channel = ReplyRegistry(), FakeChannel()
    first = channel.consume(registry)
    channel.reply = None  # basic.cancel
    second = channel.consume(registry, "rc2")
    assert first.channel_id == second.channel_id and first.key != second.key
    assert len(registry) == 1


# --- lookup / route -------------------------------------------------------------------------------
def suffix_of(consumer: ReplyConsumer) -> str:
    return consumer.address[len(REPLY_PREFIX) :]


def test_lookup_live_wrong_key_cancelled_closed() -> None:
    registry, channel = ReplyRegistry(), FakeChannel()
    consumer = channel.consume(registry)
    assert registry.lookup(suffix_of(consumer)) == (channel, consumer)
    assert registry.lookup(f"{consumer.channel_id}..{consumer.key}.") == (channel, consumer)  # lexemes
    assert registry.lookup(f"{consumer.channel_id}.wrong") is None
    channel.reply = None
    assert registry.lookup(suffix_of(consumer)) is None
    channel.consume(registry)
    registry.channel_closed(channel)
    registry.channel_closed(channel)  # idempotent
    assert registry.lookup(suffix_of(channel.reply or consumer)) is None and len(registry) == 0


@pytest.mark.parametrize("suffix", ["", ".", "garbage", "a.b.c", "...x..."])
def test_not_two_parts_names_nothing(suffix: str) -> None:
    assert split_suffix(suffix) is None
    assert ReplyRegistry().lookup(suffix) is None


@pytest.mark.parametrize(
    "suffix",
    [
        "a.b",
        "YWJj.x",
        "a..b",
        "!!!!.x",
        base64.b64encode(b"rabbitmq" + bytes(16)).decode() + ".k",  # wrong node marker
        base64.b64encode(NODE_MARKER + bytes(15)).decode() + ".k",
    ],  # wrong length
)
def test_two_parts_that_are_not_our_ids_crash_like_rabbitmq(suffix: str) -> None:
    with pytest.raises(ChannelCrashed) as info:
        split_suffix(suffix)
    assert (info.value.reply_code, info.value.reply_text) == (541, "INTERNAL_ERROR")


def test_unknown_well_formed_id_is_dropped() -> None:
    assert split_suffix(new_channel_id() + ".key") is not None
    assert ReplyRegistry().lookup(new_channel_id() + ".key") is None


def test_route_delivers_each_named_consumer_once_in_key_order() -> None:
    registry = ReplyRegistry()
    a, b = FakeChannel(), FakeChannel()
    ca, cb = a.consume(registry, "a"), b.consume(registry, "b")
    registry.route(message(ca.address))
    assert [tag for tag, _ in a.got] == ["a"] and b.got == []
    props = raw_props(headers={"CC": [cb.address, ca.address, "plain-queue"], "BCC": [cb.address]})
    selected, keys = sender_selected(message(ca.address, props))
    registry.route(selected, keys)
    assert len(a.got) == 2 and len(b.got) == 1
    delivered = b.got[0][1]
    assert delivered.routing_key == ca.address  # the publish's routing key, as RabbitMQ
    assert delivered.headers == {"CC": [cb.address, ca.address, "plain-queue"]}  # BCC removed
    registry.route(message("plain-queue"))
    registry.route(message(REPLY_QUEUE))
    assert len(a.got) == 2 and len(b.got) == 1


def test_route_crashes_on_a_malformed_key() -> None:
    with pytest.raises(ChannelCrashed):
        ReplyRegistry().route(message(REPLY_PREFIX + "a.b"))


# --- declare --------------------------------------------------------------------------------------
def test_declare() -> None:
    registry, owner, other = ReplyRegistry(), FakeChannel(), FakeChannel()
    consumer = owner.consume(registry)
    assert registry.declare(REPLY_QUEUE, "/", other) == REPLY_QUEUE
    assert registry.declare(REPLY_QUEUE + "\r\n", "/", owner) == REPLY_QUEUE
    assert registry.declare(consumer.address, "/", other) == consumer.address
    for name in (REPLY_QUEUE + "x", REPLY_PREFIX + "garbage", f"{REPLY_PREFIX}{consumer.channel_id}.bad"):
        with pytest.raises(NotFound, match=re.escape(f"no queue '{name}' in vhost 'v'")):
            registry.declare(name, "v", other)
    with pytest.raises(ChannelCrashed):  # RabbitMQ's channel would call itself
        registry.declare(consumer.address, "/", owner)
    with pytest.raises(ChannelCrashed):
        registry.declare(f"{REPLY_PREFIX}{consumer.channel_id}.bad", "/", owner)


# --- properties -----------------------------------------------------------------------------------
def test_fast_reply_to_rewrites_only_reply_to() -> None:
    registry, channel = ReplyRegistry(), FakeChannel()
    consumer = channel.consume(registry)
    fields = dict(content_type="t", headers={"n": 1 << 40, "f": 1.5}, priority=3, expiration="9", app_id="a")
    before = raw_props(reply_to=REPLY_QUEUE, **fields)
    after = fast_reply_to(before, consumer)
    assert after == raw_props(reply_to=consumer.address, **fields)
    assert get_reply_to(after) == consumer.address
    others = (raw_props(**fields), raw_props(reply_to="q", **fields), raw_props(reply_to=REPLY_PREFIX))
    for untouched in others:
        assert fast_reply_to(untouched, None) is untouched
    with pytest.raises(PreconditionFailed, match="^fast reply consumer does not exist$"):
        fast_reply_to(before, None)


def test_replace_reply_to_adds_the_property() -> None:
    assert replace_reply_to(raw_props(app_id="a"), "r") == raw_props(app_id="a", reply_to="r")
    assert get_reply_to(b"\x00\x00") is None
    with pytest.raises(ValueError):
        replace_reply_to(b"\x00\x00", "x" * 256)
