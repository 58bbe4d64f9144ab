"""Messages as the broker holds them.

A ``Message`` is the content shared by every queue it was routed to: the exchange and routing key
it was published with, the content-header property bytes exactly as the publisher sent them, and
the body. Only what routing and queueing need is decoded (delivery mode, priority, expiration),
once, at publish. A per-queue ``Entry`` carries what differs between queues: redelivery state,
deadline and the queue's sequence number.
"""

from __future__ import annotations

from typing import Any, Final

from ottermq.amqp.errors import PreconditionFailed
from ottermq.amqp.props import get_headers, parse_expiration, quick_props, rewrite_props
from ottermq.amqp.table import LongLong, encode_table, field_type

# Entry states (Final: constants in compiled code); HELD: waiting out a delayed retry (``Queue.requeue``);
# PAGED: written to the queue's pager (``paging.py``), this object no longer in the queue (paged in, the
# entry is a new object)
READY: Final = 0
OUT: Final = 1
GONE: Final = 2
HELD: Final = 3
PAGED: Final = 4


class Message:
    """Immutable message content (treat as frozen; ``__slots__`` for memory)."""

    # Routing keys beyond ``routing_key`` (``CC``/``BCC`` at publish): none here, a slot of
    # ``SelectedMessage``. A class attribute, so the publish path reads it without a call.
    extra_keys: tuple[str, ...] = ()

    __slots__ = (
        "exchange",
        "routing_key",
        "raw_props",
        "body",
        "persistent",
        "priority",
        "expiration",
        "_headers",
    )

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        raw_props: bytes,
        body: bytes,
        persistent: bool = False,
        priority: int | None = None,
        expiration: int | None = None,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.raw_props = raw_props
        self.body = body
        self.persistent = persistent
        self.priority = priority
        self.expiration = expiration  # milliseconds, already validated
        self._headers: Any = False  # False = not decoded yet

    @property
    def headers(self) -> dict[str, Any] | None:
        """The decoded ``headers`` property (decoded on first use)."""
        if self._headers is False:
            self._headers = get_headers(self.raw_props)
        return self._headers  # type: ignore[no-any-return]

    def forget_headers(self) -> None:
        """Drop the decoded headers (a message that waits long: they are decoded again when needed)."""
        self._headers = False

    def with_props(self, raw_props: bytes) -> Message:
        """A copy with other property octets (same routing keys, also CC/BCC ones)."""
        return Message(
            self.exchange,
            self.routing_key,
            raw_props,
            self.body,
            self.persistent,
            self.priority,
            self.expiration,
        )

    @property
    def size(self) -> int:
        """Body size in bytes (what ``x-max-length-bytes`` counts)."""
        return len(self.body)


class Entry:
    """A message's place in one queue."""

    __slots__ = (
        "message",
        "seq",
        "redelivered",
        "deadline",
        "delivery_count",
        "store_id",
        "state",
        "enqueued_at",
    )

    def __init__(self, message: Message, seq: int, deadline: int | None = None, enqueued_at: int = 0) -> None:
        self.message = message
        self.seq = seq
        self.enqueued_at = enqueued_at  # epoch ms (time in queue, dead-letter archive)
        self.redelivered = False
        self.deadline = deadline  # epoch ms, or None: never expires
        self.delivery_count = 0  # returns so far (x-delivery-limit)
        self.store_id = 0  # persistence row id, 0 = not stored
        self.state = READY


class SelectedMessage(Message):
    """A message published with ``CC``/``BCC`` headers: it keeps every routing key it was published
    with (BCC included, although BCC is removed from its headers), because RabbitMQ routes its
    dead letters with all of them."""

    __slots__ = ("extra_keys",)

    def __init__(self, base: Message, raw_props: bytes, extra_keys: tuple[str, ...]) -> None:
        super().__init__(
            base.exchange,
            base.routing_key,
            raw_props,
            base.body,
            base.persistent,
            base.priority,
            base.expiration,
        )
        self.extra_keys = extra_keys

    def with_props(self, raw_props: bytes) -> Message:
        return SelectedMessage(self, raw_props, self.extra_keys)


def check_user_id(username: str | None, user_id: str | None) -> None:
    """RabbitMQ's ``user_id`` rule: when set, it must be the publishing user's name.

    Raises:
        PreconditionFailed: ``user_id`` is another user's name.
    """
    if user_id is not None and username is not None and user_id != username:
        raise PreconditionFailed(
            f"user_id property set to '{user_id}' but authenticated user was '{username}'"
        )


def incoming_message(
    exchange: str, routing_key: str, raw_props: bytes, body: bytes, username: str | None
) -> tuple[Message, list[str] | None]:
    """A message a client publishes (a channel, the management API): the one place its properties are
    checked, in RabbitMQ's order (``user_id``, ``expiration``, CC/BCC), and its CC/BCC routing keys
    read.

    Returns:
        The message to route and its CC/BCC keys (None: it has neither header).

    Raises:
        PreconditionFailed: ``user_id`` is not ``username``, an invalid ``expiration``, CC/BCC that are
            not arrays.
    """
    delivery_mode, priority, expiration, user_id = quick_props(raw_props)
    if user_id is not None:
        check_user_id(username, user_id)
    ttl = parse_expiration(expiration) if expiration is not None else None
    message = Message(exchange, routing_key, raw_props, body, delivery_mode == 2, priority, ttl)
    if raw_props.find(b"CC") >= 0:  # `b"CC" in raw_props` first tries it as an int: an error per call
        return sender_selected(message)  # rare: sender-selected distribution
    return message, None


def published_message(exchange: str, routing_key: str, raw_props: bytes, body: bytes) -> Message:
    """A message from its property octets as published: delivery mode, priority and ``expiration``
    read from them (the management API's publish, delayed messages read back from the store).

    Raises:
        PreconditionFailed: an invalid ``expiration`` (``props.parse_expiration``).
    """
    delivery_mode, priority, expiration, _ = quick_props(raw_props)
    ttl = parse_expiration(expiration) if expiration is not None else None
    return Message(exchange, routing_key, raw_props, body, delivery_mode == 2, priority, ttl)


def with_delivery_count(message: Message, count: int) -> Message:
    """A copy of ``message`` whose headers carry ``x-delivery-count`` as a long, the table sorted by
    key as RabbitMQ's quorum queues write it (``rabbit_basic:add_header``)."""
    headers = dict(message.headers or {})
    headers["x-delivery-count"] = LongLong(count)
    table = dict(sorted(headers.items(), key=_key_octets))
    return message.with_props(rewrite_props(message.raw_props, encode_table(table), drop_expiration=False))


def _key_octets(item: tuple[str, Any]) -> bytes:
    return item[0].encode("utf-8", "surrogateescape")


def sender_selected(message: Message) -> tuple[Message, list[str] | None]:
    """RabbitMQ's sender-selected distribution: ``CC``/``BCC`` header arrays add routing keys.

    Returns:
        The message to enqueue (with ``BCC`` removed from its headers, as RabbitMQ does) and the
        extra routing keys (None when the message has neither header). Array elements that are
        not long strings are ignored.

    Raises:
        PreconditionFailed: ``CC`` or ``BCC`` is not an array (RabbitMQ's ``header_routes``).
    """
    headers = message.headers
    if not headers or ("CC" not in headers and "BCC" not in headers):
        return message, None
    keys: list[str] = []
    for name in ("CC", "BCC"):  # RabbitMQ's order: a bad CC is reported before a bad BCC
        if name not in headers:
            continue
        value = headers[name]
        if not isinstance(value, list):
            raise PreconditionFailed(
                f'invalid message: {{unacceptable_type_in_header,"{name}",{field_type(value)}}}'
            )
        keys.extend(k for k in value if isinstance(k, str))  # other elements are ignored
    raw = message.raw_props
    if "BCC" in headers:
        stripped = {k: v for k, v in headers.items() if k != "BCC"}
        raw = rewrite_props(raw, encode_table(stripped), drop_expiration=False)
    return SelectedMessage(message, raw, tuple(keys)), keys
