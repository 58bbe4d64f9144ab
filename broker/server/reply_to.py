"""Direct reply-to (``amq.rabbitmq.reply-to``), as RabbitMQ 3.10 does it.

Rules (each checked against RabbitMQ 3.10.8):
- A channel gets at most one *reply consumer*: ``basic.consume`` on ``amq.rabbitmq.reply-to`` with
  ``no_ack``. It gets an address ``amq.rabbitmq.reply-to.<id>.<key>``: ``<id>`` names the channel
  (base64 of a node marker + random octets), ``<key>`` is a random secret. Both are unguessable.
- A publish whose ``reply-to`` property is exactly ``amq.rabbitmq.reply-to`` has it rewritten to the
  channel's address (406 when the channel has no reply consumer).
- The default exchange delivers to every routing key (and ``CC``/``BCC`` key) that starts with
  ``amq.rabbitmq.reply-to.`` straight to the reply consumer, without counting it as a routed queue:
  a mandatory reply still comes back as ``basic.return`` 312 and a confirm is an ack. Keys are
  handled once each, in sorted order, before any queue is reached.
- RabbitMQ splits the suffix on ``.`` dropping empty parts (``string:lexemes``). Not exactly two
  parts: nothing happens. Two parts whose first is not one of our channel ids (not base64, wrong
  length or node marker): RabbitMQ's channel crashes decoding it, so the connection is closed with
  541 ``INTERNAL_ERROR``. A well-formed id of a gone channel, or a wrong key: dropped.
- Addresses are node-wide (one registry per broker, any vhost may reply), as RabbitMQ's pids are.
- The reply consumer ends on ``basic.cancel`` of its tag or when its channel closes; later replies
  to its address are dropped and a ``queue.declare`` of it is 404. A channel keeps its id while it
  is open (RabbitMQ's id is the channel's pid): declaring any address with the declaring channel's
  own id crashes RabbitMQ's channel (it calls itself), so that is a 541 too.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from collections.abc import Iterable
from typing import Protocol

from ottermq.amqp.errors import ChannelCrashed, NotAllowed, NotFound, PreconditionFailed
from ottermq.amqp.props import get_reply_to, replace_reply_to
from ottermq.vhost.message import Message

REPLY_QUEUE = "amq.rabbitmq.reply-to"
REPLY_PREFIX = REPLY_QUEUE + "."
NODE_MARKER = b"ottermq\x00"  # RabbitMQ puts a node-name hash in the same place
_ID_RANDOM = 16
_KEY_OCTETS = 16


class ReplyTarget(Protocol):
    """A channel that consumes replies (``Channel``)."""

    @property
    def reply(self) -> ReplyConsumer | None:
        """Its reply consumer now, if any."""

    @property
    def reply_id(self) -> str | None:
        """Its id in reply addresses, given by the first reply consume and kept until it closes."""

    def deliver_reply(self, consumer: ReplyConsumer, message: Message) -> None: ...


class ReplyConsumer:
    """A channel's reply consumer: its tag and the address replies are published to."""

    __slots__ = ("tag", "channel_id", "key")

    def __init__(self, tag: str, channel_id: str, key: str) -> None:
        self.tag = tag
        self.channel_id = channel_id
        self.key = key

    @property
    def address(self) -> str:
        """The routing key (and rewritten ``reply-to``) that reaches this consumer."""
        return f"{REPLY_PREFIX}{self.channel_id}.{self.key}"


def new_channel_id() -> str:
    """A fresh, unguessable channel id: base64 of the node marker + random octets."""
    return base64.b64encode(NODE_MARKER + secrets.token_bytes(_ID_RANDOM)).decode()


def new_key() -> str:
    """A fresh secret key (base64 of 16 random octets, as RabbitMQ's)."""
    return base64.b64encode(secrets.token_bytes(_KEY_OCTETS)).decode()


def fast_reply_to(raw_props: bytes, consumer: ReplyConsumer | None) -> bytes:
    """A publish's properties with reply-to ``amq.rabbitmq.reply-to`` set to the publishing
    channel's reply address (every other property octet kept); other properties unchanged.

    Raises:
        PreconditionFailed: the reply-to is ``amq.rabbitmq.reply-to`` and ``consumer`` is None.
        FrameError: malformed properties.
    """
    if get_reply_to(raw_props) != REPLY_QUEUE:
        return raw_props
    if consumer is None:
        raise PreconditionFailed("fast reply consumer does not exist")
    return replace_reply_to(raw_props, consumer.address)


def split_suffix(suffix: str) -> tuple[str, str] | None:
    """``<id>.<key>`` split as RabbitMQ's ``string:lexemes(Bin, ".")``: empty parts are dropped.

    Returns:
        ``(id, key)``, or None when there are not exactly two parts (RabbitMQ ignores those).

    Raises:
        ChannelCrashed: two parts, but the first is not one of our channel ids.
    """
    parts = [part for part in suffix.split(".") if part]
    if len(parts) != 2:
        return None
    channel_id, key = parts
    try:
        raw = base64.b64decode(channel_id, validate=True)
    except (binascii.Error, ValueError):
        raise ChannelCrashed() from None
    if len(raw) != len(NODE_MARKER) + _ID_RANDOM or not raw.startswith(NODE_MARKER):
        raise ChannelCrashed()
    return channel_id, key


class ReplyRegistry:
    """The broker's channels that ever consumed replies and are still open, by channel id."""

    def __init__(self) -> None:
        self._channels: dict[str, ReplyTarget] = {}

    def __len__(self) -> int:
        return len(self._channels)

    def consume(
        self, target: ReplyTarget, tag: str, no_ack: bool, tags_in_use: Iterable[str]
    ) -> ReplyConsumer:
        """``basic.consume`` on ``amq.rabbitmq.reply-to``.

        Args:
            target: the consuming channel.
            tag: the consumer tag (generated when the client sent none).
            no_ack: the consume's ``no_ack`` flag.
            tags_in_use: tags of the channel's ordinary consumers.

        Returns:
            The new reply consumer: the channel's id (the same for every reply consumer of a
            channel, as RabbitMQ's encoded pid) and a fresh key. The channel keeps it as ``reply``.

        Raises:
            NotAllowed: ``tag`` is an ordinary consumer's tag (530, a connection error).
            PreconditionFailed: ``no_ack`` is false, or the channel has a reply consumer.
        """
        if tag in tags_in_use:
            raise NotAllowed(f"attempt to reuse consumer tag '{tag}'")
        if not no_ack:
            raise PreconditionFailed("reply consumer cannot acknowledge")
        if target.reply is not None:
            raise PreconditionFailed("reply consumer already set")
        channel_id = target.reply_id
        if channel_id is None:
            channel_id = new_channel_id()
            while channel_id in self._channels:  # pragma: no cover - 128 random bits
                channel_id = new_channel_id()
            self._channels[channel_id] = target
        return ReplyConsumer(tag, channel_id, new_key())

    def channel_closed(self, target: ReplyTarget) -> None:
        """Forget a closed channel: its addresses now name nothing (idempotent)."""
        if target.reply_id is not None and self._channels.get(target.reply_id) is target:
            del self._channels[target.reply_id]

    def lookup(self, suffix: str) -> tuple[ReplyTarget, ReplyConsumer] | None:
        """The live reply consumer an address suffix (after ``amq.rabbitmq.reply-to.``) names.

        Raises:
            ChannelCrashed: as ``split_suffix``.
        """
        parts = split_suffix(suffix)
        if parts is None:
            return None
        target = self._channels.get(parts[0])
        consumer = target.reply if target is not None else None
        if consumer is None or not hmac.compare_digest(consumer.key.encode(), parts[1].encode()):
            return None
        assert target is not None
        return target, consumer

    def declare(self, queue: str, vhost: str, asker: ReplyTarget) -> str:
        """``queue.declare`` (passive or not: all the same) of a name starting ``amq.rabbitmq.reply-to``.

        Args:
            queue: the name as sent.
            vhost: the declaring channel's vhost (for the 404 text only: addresses are node-wide).
            asker: the declaring channel.

        Returns:
            The name without CR/LF, as RabbitMQ reports it (declare-ok: 0 messages, 1 consumer).

        Raises:
            NotFound: no such reply queue.
            ChannelCrashed: as ``split_suffix``; also when the address names the declaring channel
                itself (RabbitMQ's channel then calls itself and crashes).
        """
        name = queue.replace("\r", "").replace("\n", "")
        if name == REPLY_QUEUE:
            return name  # "if it exists it by definition has one consumer"
        if name.startswith(REPLY_PREFIX):
            parts = split_suffix(name[len(REPLY_PREFIX) :])
            if parts is not None and asker.reply_id == parts[0]:
                raise ChannelCrashed()
            if self.lookup(name[len(REPLY_PREFIX) :]) is not None:
                return name
        raise NotFound(f"no queue '{name}' in vhost '{vhost}'")

    def route(self, message: Message, extra_keys: list[str] | None = None) -> None:
        """Deliver a message published to the default exchange to the reply consumers its routing
        key and ``CC``/``BCC`` keys (``extra_keys``, from ``sender_selected``) name; the other keys
        are left to the queues.

        Raises:
            ChannelCrashed: a key's suffix is malformed (keys sorted before it were delivered).
        """
        keys = [message.routing_key, *(extra_keys or ())]
        for key in sorted(set(keys)):
            if key.startswith(REPLY_PREFIX):
                live = self.lookup(key[len(REPLY_PREFIX) :])
                if live is not None:
                    live[0].deliver_reply(live[1], message)
