"""Golden tests: the hand-rolled fast path produces and reads exactly what pamqp does."""

from __future__ import annotations

import datetime
import itertools
from typing import TypeVar

import pytest
from ottermq.amqp import fastpath
from ottermq.amqp.reader import FrameReader
from pamqp import base
from pamqp import body as pbody
from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp import header as pheader
from pamqp.heartbeat import Heartbeat

# installed (compiled by mypyc) and pure-Python modules, the same expectations (tests/conftest.py)
pytestmark = pytest.mark.hot_path

M = TypeVar("M", bound=base.Frame)

FRAME_MAX = 4096

NAMES = [
    "",
    "amq.direct",
    "x" * 255,
    "é" * 127,  # 254 octets
    "日本" * 42 + "x" * 3,  # 255 octets
]

BODIES = {
    "empty": b"",
    "one": b"\x00",
    "exact": b"a" * (FRAME_MAX - 8),
    "one-over": b"b" * (FRAME_MAX - 7),
    "three-frames": bytes(range(256)) * (3 * FRAME_MAX // 256),
}

EMPTY_PROPS = spec.Basic.Properties()
FULL_PROPS = spec.Basic.Properties(
    content_type="text/plain",
    content_encoding="utf-8",
    headers={"h": "v", "n": 7, "list": [1, "two", {"three": 3.5}]},
    delivery_mode=2,
    priority=9,
    correlation_id="c" * 255,
    reply_to="reply",
    expiration="1000",
    message_id="m-1",
    timestamp=datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC),
    message_type="t",
    user_id="guest",
    app_id="app",
)
PROPS = {"empty": EMPTY_PROPS, "full": FULL_PROPS}


def unvalidated(cls: type[M], **kwargs: object) -> M:
    """Build a pamqp method without its name checks (UTF-8 and 255-octet names are legal AMQP)."""
    loose = type(cls.__name__, (cls,), {"validate": lambda self: None})
    return loose(**kwargs)  # type: ignore[no-any-return]


def pamqp_content(channel: int, props: spec.Basic.Properties, body: bytes, frame_max: int) -> bytes:
    out = pframe.marshal(pheader.ContentHeader(0, len(body), props), channel)
    chunk = frame_max - 8 if frame_max else max(len(body), 1)
    for start in range(0, len(body), chunk):
        out += pframe.marshal(pbody.ContentBody(body[start : start + chunk]), channel)
    return out


def test_constants() -> None:
    assert fastpath.HEARTBEAT == Heartbeat().marshal()
    methods: list[tuple[str, type[base.Frame]]] = [
        ("BASIC_PUBLISH", spec.Basic.Publish),
        ("BASIC_ACK", spec.Basic.Ack),
        ("BASIC_REJECT", spec.Basic.Reject),
        ("BASIC_NACK", spec.Basic.Nack),
        ("BASIC_DELIVER", spec.Basic.Deliver),
        ("BASIC_GET_OK", spec.Basic.GetOk),
        ("BASIC_RETURN", spec.Basic.Return),
    ]
    for name, method in methods:
        assert getattr(fastpath, name) == method.index


@pytest.mark.parametrize("body_name", BODIES)
@pytest.mark.parametrize("props_name", PROPS)
@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_encode_deliver_matches_pamqp(name: str, props_name: str, body_name: str) -> None:
    body, props = BODIES[body_name], PROPS[props_name]
    for channel, tag, redelivered in [(1, 1, False), (65535, 2**63 - 1, True)]:
        expected = pframe.marshal(
            unvalidated(
                spec.Basic.Deliver,
                consumer_tag=name,
                delivery_tag=tag,
                redelivered=redelivered,
                exchange=name,
                routing_key=name,
            ),
            channel,
        ) + pamqp_content(channel, props, body, FRAME_MAX)
        got = fastpath.encode_deliver(
            channel, name, tag, redelivered, name, name, props.marshal(), body, FRAME_MAX
        )
        assert type(got) is bytes
        assert got == expected


def test_a_large_body_is_encoded_as_parts_that_do_not_copy_it() -> None:
    """Over ``LARGE_BODY`` the encoders return the frames' parts (the body's as memoryviews of it, so
    a 100 MB delivery is never copied into one more 100 MB object); joined, pamqp's octets."""
    frame_max = 131072
    body = bytes(range(256)) * (fastpath.LARGE_BODY // 256) + b"tail"
    raw = FULL_PROPS.marshal()
    content = pamqp_content(3, FULL_PROPS, body, frame_max)
    deliver = pframe.marshal(
        spec.Basic.Deliver(consumer_tag="c", delivery_tag=9, exchange="e", routing_key="r"), 3
    )
    get_ok = pframe.marshal(
        spec.Basic.GetOk(delivery_tag=9, exchange="e", routing_key="r", message_count=2), 3
    )
    returned = pframe.marshal(spec.Basic.Return(312, "NO_ROUTE", "e", "r"), 3)
    for got, expected in (
        (fastpath.encode_deliver(3, "c", 9, False, "e", "r", raw, body, frame_max), deliver + content),
        (fastpath.encode_get_ok(3, 9, False, "e", "r", 2, raw, body, frame_max), get_ok + content),
        (fastpath.encode_return(3, 312, "NO_ROUTE", "e", "r", raw, body, frame_max), returned + content),
        (fastpath.encode_content(3, raw, body, frame_max), content),
    ):
        assert isinstance(got, list)
        assert b"".join(got) == expected
        slices = [part for part in got if isinstance(part, memoryview)]
        assert sum(len(s) for s in slices) == len(body) and all(s.obj is body for s in slices)
    # one octet less than the bound: still one bytes object
    assert type(fastpath.encode_content(3, raw, body[: fastpath.LARGE_BODY], frame_max)) is bytes


@pytest.mark.parametrize("body_name", BODIES)
@pytest.mark.parametrize("props_name", PROPS)
def test_encode_content_matches_pamqp(props_name: str, body_name: str) -> None:
    body, props = BODIES[body_name], PROPS[props_name]
    assert fastpath.encode_content(7, props.marshal(), body, FRAME_MAX) == pamqp_content(
        7, props, body, FRAME_MAX
    )


@pytest.mark.parametrize("body_name", BODIES)
def test_frame_max_zero_means_one_body_frame(body_name: str) -> None:
    body = BODIES[body_name]
    raw = FULL_PROPS.marshal()
    assert fastpath.encode_content(1, raw, body, 0) == pamqp_content(1, FULL_PROPS, body, 0)
    assert fastpath.encode_deliver(1, "c", 1, False, "e", "r", raw, body, 0) == pframe.marshal(
        spec.Basic.Deliver(consumer_tag="c", delivery_tag=1, exchange="e", routing_key="r"), 1
    ) + pamqp_content(1, FULL_PROPS, body, 0)


@pytest.mark.parametrize("body_name", BODIES)
@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_encode_get_ok_matches_pamqp(name: str, body_name: str) -> None:
    body = BODIES[body_name]
    for redelivered, count in [(False, 0), (True, 2**32 - 1)]:
        expected = pframe.marshal(
            unvalidated(
                spec.Basic.GetOk,
                delivery_tag=99,
                redelivered=redelivered,
                exchange=name,
                routing_key=name,
                message_count=count,
            ),
            3,
        ) + pamqp_content(3, FULL_PROPS, body, FRAME_MAX)
        got = fastpath.encode_get_ok(
            3, 99, redelivered, name, name, count, FULL_PROPS.marshal(), body, FRAME_MAX
        )
        assert got == expected


@pytest.mark.parametrize("body_name", BODIES)
@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_encode_return_matches_pamqp(name: str, body_name: str) -> None:
    body = BODIES[body_name]
    expected = pframe.marshal(
        unvalidated(
            spec.Basic.Return, reply_code=312, reply_text="NO_ROUTE", exchange=name, routing_key=name
        ),
        2,
    ) + pamqp_content(2, EMPTY_PROPS, body, FRAME_MAX)
    got = fastpath.encode_return(2, 312, "NO_ROUTE", name, name, EMPTY_PROPS.marshal(), body, FRAME_MAX)
    assert got == expected
    long_text = fastpath.encode_return(2, 313, name, "", "", b"\x00\x00", b"", FRAME_MAX)
    assert long_text == pframe.marshal(
        spec.Basic.Return(reply_code=313, reply_text=name, exchange="", routing_key=""), 2
    ) + pamqp_content(2, EMPTY_PROPS, b"", FRAME_MAX)


@pytest.mark.parametrize(
    ("tag", "multiple", "requeue"),
    list(itertools.product([0, 1, 2**63 - 1], [False, True], [False, True])),
)
def test_ack_nack_match_pamqp(tag: int, multiple: bool, requeue: bool) -> None:
    assert fastpath.encode_ack(5, tag, multiple) == pframe.marshal(
        spec.Basic.Ack(delivery_tag=tag, multiple=multiple), 5
    )
    assert fastpath.encode_nack(5, tag, multiple, requeue) == pframe.marshal(
        spec.Basic.Nack(delivery_tag=tag, multiple=multiple, requeue=requeue), 5
    )


def test_unsigned_64_bit_delivery_tags() -> None:
    """pamqp packs longlong as signed; AMQP's delivery tag is unsigned and so is ours."""
    top = 2**64 - 1
    ack = fastpath.encode_ack(1, top, True)
    assert ack == b"\x01\x00\x01\x00\x00\x00\x0d\x00\x3c\x00\x50" + b"\xff" * 8 + b"\x01\xce"
    assert fastpath.decode_ack(ack[7:-1]) == (top, True)
    nack = fastpath.encode_nack(1, top, False, True)
    assert fastpath.decode_nack(nack[7:-1]) == (top, False, True)
    deliver = fastpath.encode_deliver(1, "c", top, False, "e", "r", b"\x00\x00", b"", 0)
    assert deliver[7 + 4 + 2 : 7 + 4 + 2 + 8] == b"\xff" * 8


def test_encode_nack_default_requeue_false() -> None:
    assert fastpath.encode_nack(1, 1, False) == pframe.marshal(
        spec.Basic.Nack(delivery_tag=1, requeue=False), 1
    )


def test_encode_method_is_pamqp_marshal() -> None:
    method = spec.Queue.DeclareOk(queue="q", message_count=1, consumer_count=2)
    assert fastpath.encode_method(9, method) == pframe.marshal(method, 9)


def payload_of(wire: bytes) -> bytes:
    """Strip the frame header and frame end of one marshalled frame."""
    return wire[7:-1]


@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
@pytest.mark.parametrize(("mandatory", "immediate"), list(itertools.product([False, True], repeat=2)))
def test_decode_publish_reads_pamqp(name: str, mandatory: bool, immediate: bool) -> None:
    wire = pframe.marshal(
        unvalidated(
            spec.Basic.Publish, exchange=name, routing_key=name, mandatory=mandatory, immediate=immediate
        ),
        1,
    )
    payload = payload_of(wire)
    assert fastpath.method_key(payload) == fastpath.BASIC_PUBLISH
    assert fastpath.decode_publish(payload) == (name, name, mandatory, immediate)


@pytest.mark.parametrize(
    ("tag", "flag_a", "flag_b"), list(itertools.product([1, 2**63 - 1], [False, True], [False, True]))
)
def test_decode_ack_nack_reject_read_pamqp(tag: int, flag_a: bool, flag_b: bool) -> None:
    ack = payload_of(pframe.marshal(spec.Basic.Ack(delivery_tag=tag, multiple=flag_a), 1))
    assert fastpath.method_key(ack) == fastpath.BASIC_ACK
    assert fastpath.decode_ack(ack) == (tag, flag_a)
    reject = payload_of(pframe.marshal(spec.Basic.Reject(delivery_tag=tag, requeue=flag_a), 1))
    assert fastpath.method_key(reject) == fastpath.BASIC_REJECT
    assert fastpath.decode_reject(reject) == (tag, flag_a)
    nack = payload_of(pframe.marshal(spec.Basic.Nack(delivery_tag=tag, multiple=flag_a, requeue=flag_b), 1))
    assert fastpath.method_key(nack) == fastpath.BASIC_NACK
    assert fastpath.decode_nack(nack) == (tag, flag_a, flag_b)


@pytest.mark.parametrize("props_name", PROPS)
@pytest.mark.parametrize("size", [0, 1, 2**40])
def test_decode_header_reads_pamqp(props_name: str, size: int) -> None:
    props = PROPS[props_name]
    wire = pframe.marshal(pheader.ContentHeader(0, size, props), 1)
    assert fastpath.decode_header(payload_of(wire)) == (60, size, props.marshal())


@pytest.mark.parametrize(
    "method",
    [
        spec.Connection.StartOk(
            client_properties={"product": "x", "capabilities": {"a": True}}, response="\0u\0p"
        ),
        spec.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=60),
        spec.Connection.Open(virtual_host="/"),
        spec.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0),
        spec.Channel.Open(),
        spec.Channel.CloseOk(),
        spec.Exchange.Declare(
            exchange="ex", exchange_type="topic", durable=True, arguments={"alternate-exchange": "ae"}
        ),
        spec.Queue.Declare(
            queue="q", durable=True, arguments={"x-message-ttl": 100, "x-dead-letter-exchange": "dlx"}
        ),
        spec.Queue.Bind(queue="q", exchange="ex", routing_key="a.#", arguments={"x-match": "any"}),
        spec.Basic.Consume(queue="q", consumer_tag="ct", no_ack=True, exclusive=True),
        spec.Basic.Qos(prefetch_count=10, global_=True),
        spec.Basic.Get(queue="q", no_ack=True),
        spec.Basic.Cancel(consumer_tag="ct"),
        spec.Basic.Recover(requeue=True),
        spec.Confirm.Select(nowait=False),
        spec.Tx.Select(),
    ],
    ids=lambda m: m.name,
)
def test_decode_method_reads_pamqp(method: spec.Connection.StartOk) -> None:
    decoded = fastpath.decode_method(payload_of(pframe.marshal(method, 1)))
    assert type(decoded) is type(method)
    assert dict(decoded) == dict(method)


def test_reader_then_fast_decoders_over_a_pamqp_stream() -> None:
    props = FULL_PROPS
    body = BODIES["three-frames"]
    stream = (
        pframe.marshal(spec.Basic.Publish(exchange="ex", routing_key="rk", mandatory=True), 4)
        + pamqp_content(4, props, body, FRAME_MAX)
        + Heartbeat().marshal()
        + pframe.marshal(spec.Basic.Ack(delivery_tag=3, multiple=True), 4)
    )
    reader = FrameReader(FRAME_MAX)
    frames = []
    for start in range(0, len(stream), 1000):
        frames.extend(reader.feed(stream[start : start + 1000]))
    assert reader.error is None
    n_bodies = -(-len(body) // (FRAME_MAX - 8))
    assert n_bodies == 4
    kinds = [f[0] for f in frames]
    assert kinds == [1, 2] + [3] * n_bodies + [8, 1]
    assert fastpath.decode_publish(frames[0][2]) == ("ex", "rk", True, False)
    class_id, size, raw_props = fastpath.decode_header(frames[1][2])
    assert (class_id, size, raw_props) == (60, len(body), props.marshal())
    assert b"".join(f[2] for f in frames[2 : 2 + n_bodies]) == body
    assert fastpath.decode_ack(frames[-1][2]) == (3, True)
    # and the delivery side re-encodes the same properties and body into pamqp-identical frames
    again = fastpath.encode_content(4, raw_props, body, FRAME_MAX)
    assert again == pamqp_content(4, props, body, FRAME_MAX)
