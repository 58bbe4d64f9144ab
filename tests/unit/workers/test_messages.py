"""The control messages' one codec (broker/workers/messages.py): every registered message round-trips
field by field (the tests iterate ``REGISTRY``, so a new message is covered without a new test), a
field renamed or retyped on one side only is a ``MessageError`` on the other, anything else that is
not a message is refused with a clear reason, and each side's dispatch table handles exactly the
messages sent to it."""

from __future__ import annotations

import contextlib
import dataclasses
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from ottermq.broker.config import Settings
from ottermq.broker.workers import messages
from ottermq.broker.workers.messages import (
    REGISTRY,
    TO_WORKER,
    TO_WORKER_0,
    ChannelsElsewhere,
    Closed,
    Connection,
    Message,
    MessageError,
    Ready,
    Start,
    Taken,
    decode,
    encode,
    message,
    pack,
    unpack,
)
from ottermq.broker.workers.supervisor import Supervisor
from ottermq.broker.workers.worker import Worker, worker_settings

# values of each field type the codec knows, awkward where the wire could bend them: bytes that are
# not UTF-8, text that is not ASCII, JSON values of every kind under Any
SAMPLES: dict[Any, list[Any]] = {
    bool: [True, False],
    int: [0, -1, 2**63],
    str: ["", "vhost/ä ✓"],
    bytes: [b"", b"\x00\xffAMQP\x00\x00\x09\x01"],
    type(None): [None],
    Any: [{"k": [1, 2.5, "x", None, True, {"deep": []}]}, [], "text"],
}


def samples(kind: Any) -> list[Any]:
    """Values of the field type ``kind``: at least one of each arm of a union."""
    if kind in SAMPLES:
        return SAMPLES[kind]
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is tuple:
        return [(), tuple(samples(args[0]))]
    if origin is dict:
        return [{}, {f"key{i}": value for i, value in enumerate(samples(args[1]))}]
    return [value for arm in args for value in samples(arm)]  # X | None


def examples(cls: type[Message]) -> list[Message]:
    """Instances of ``cls``: one per sample of its widest field, the other fields cycling theirs."""
    hints = typing.get_type_hints(cls)
    fields = [(f.name, samples(hints[f.name])) for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    count = max((len(values) for _name, values in fields), default=1)
    return [cls(**{name: values[i % len(values)] for name, values in fields}) for i in range(count)]


def field_names(cls: type[Message]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]


ALL = sorted(REGISTRY.values(), key=lambda cls: cls.TYPE)


@pytest.mark.parametrize("cls", ALL, ids=lambda cls: cls.TYPE)
def test_every_message_round_trips_field_by_field(cls: type[Message]) -> None:
    for sent in examples(cls):
        received = unpack(pack(sent))  # what the other process decodes from the bytes
        assert type(received) is cls
        for name in field_names(cls):
            assert getattr(received, name) == getattr(sent, name), name
            assert type(getattr(received, name)) is type(getattr(sent, name)), name
        assert received == sent
        assert decode(encode(sent)) == sent


@pytest.mark.parametrize("cls", ALL, ids=lambda cls: cls.TYPE)
def test_the_wire_has_the_type_and_one_key_per_field(cls: type[Message]) -> None:
    data = encode(examples(cls)[0])
    assert data["type"] == cls.TYPE and REGISTRY[cls.TYPE] is cls
    assert set(data) == {"type", *field_names(cls)}


@contextlib.contextmanager
def sender_copy(
    cls: type[Message], rename: dict[str, str], retype: dict[str, Any]
) -> Iterator[type[Message]]:
    """The sender's copy of ``cls`` with fields renamed or retyped (registered under a scratch name for
    as long as the block runs: ``encode`` only encodes registered messages)."""
    hints = typing.get_type_hints(cls)
    spec = [(rename.get(n, n), retype.get(n, hints[n])) for n in field_names(cls)]
    copy = dataclasses.make_dataclass(
        f"Sender{cls.__name__}", spec, bases=(Message,), frozen=True, slots=True
    )
    scratch = f"sender copy of {cls.TYPE}"
    message(scratch)(copy)
    try:
        yield copy
    finally:
        del REGISTRY[scratch]


def as_sent_by(copy: type[Message], original: type[Message], values: dict[str, Any]) -> dict[str, Any]:
    """What a sender holding ``copy`` as its version of ``original`` puts on the wire."""
    data = encode(copy(**values))
    data["type"] = original.TYPE
    return data


@pytest.mark.parametrize("cls", ALL, ids=lambda cls: cls.TYPE)
def test_an_identical_sender_copy_decodes(cls: type[Message]) -> None:
    """The control for the tests below: a copy that matches decodes on the receiver, equal field by
    field."""
    sent = examples(cls)[-1]
    values = {n: getattr(sent, n) for n in field_names(cls)}
    with sender_copy(cls, {}, {}) as copy:
        assert decode(as_sent_by(copy, cls, values)) == sent


@pytest.mark.parametrize(
    ("cls", "field"),
    [(cls, name) for cls in ALL for name in field_names(cls)],
    ids=lambda v: getattr(v, "TYPE", v),
)
def test_a_field_renamed_on_one_side_only_is_refused(cls: type[Message], field: str) -> None:
    sent = examples(cls)[-1]
    values = {(f"{n}_renamed" if n == field else n): getattr(sent, n) for n in field_names(cls)}
    with sender_copy(cls, {field: f"{field}_renamed"}, {}) as copy:
        data = as_sent_by(copy, cls, values)
    with pytest.raises(MessageError) as info:
        decode(data)
    assert str(info.value) == f"control message '{cls.TYPE}': missing '{field}'; unexpected '{field}_renamed'"


def test_a_field_retyped_on_one_side_only_is_refused() -> None:
    with sender_copy(Taken, {}, {"id": str}) as copy:
        data = as_sent_by(copy, Taken, {"id": "7"})
    with pytest.raises(MessageError, match=r"^control message field taken.id: str, not int$"):
        decode(data)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ([], "a control message is a JSON object, not list"),
        ({}, "unknown control message type None"),
        ({"type": 7, "id": 1}, "unknown control message type 7"),
        ({"type": "bogus"}, "unknown control message type 'bogus'"),
        ({"type": "taken"}, "control message 'taken': missing 'id'"),
        ({"type": "taken", "id": 1, "fds": 0}, "control message 'taken': unexpected 'fds'"),
        ({"type": "taken", "id": None}, "control message field taken.id: null, not int"),
        ({"type": "taken", "id": True}, "control message field taken.id: bool, not int"),
        ({"type": "taken", "id": 1.0}, "control message field taken.id: float, not int"),
        (
            {"type": "ready", "web": "80", "prometheus": None, "report": None},
            "control message field ready.web: str, not int | None",
        ),
        (
            {"type": "channels", "counts": {"u": "1"}},
            "control message field channels.counts['u']: str, not int",
        ),
        (
            {"type": "channels", "counts": [1]},
            "control message field channels.counts: list, not dict[str, int]",
        ),
        (
            {"type": "metadata", "seq": 1, "definitions": {}, "owned": ["a", 1]},
            "control message field metadata.owned[1]: int, not str",
        ),
        (
            {"type": "connection", "id": 1, "before": "AMQP", "rest": "!!", "endpoints": None},
            "control message field connection.rest: not base64",
        ),
        (
            {"type": "connection", "id": 1, "before": 1, "rest": "", "endpoints": None},
            "control message field connection.before: int, not bytes",
        ),
    ],
)
def test_what_is_not_a_message_is_refused_with_its_reason(data: Any, reason: str) -> None:
    with pytest.raises(MessageError) as info:
        decode(data)
    assert str(info.value) == reason


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "a control message that is not JSON: Expecting value"),
        (b'{"type": "taken", "id": 1', "a control message that is not JSON: Expecting ',' delimiter"),
        (
            b'{"type": "taken", "id": "\xff"}',
            "a control message that is not JSON: 'utf-8' codec can't decode",
        ),
        (b"[" * 100_000 + b"]" * 100_000, "a control message that is not JSON: maximum recursion depth"),
    ],
)
def test_bytes_that_are_not_json_are_refused(payload: bytes, reason: str) -> None:
    with pytest.raises(MessageError) as info:
        unpack(payload)
    assert str(info.value).startswith(reason)


def test_the_sender_is_refused_what_the_receiver_would_refuse() -> None:
    with pytest.raises(MessageError, match=r"^control message field taken.id: str, not int$"):
        encode(Taken("7"))  # type: ignore[arg-type]
    with pytest.raises(
        MessageError, match=r"^control message field start.owned: list, not tuple\[str, \.\.\.\]$"
    ):
        encode(Start({}, {}, ["a"]))  # type: ignore[arg-type]
    with pytest.raises(MessageError, match=r"^control message 'metadata': Object of type set is not JSON"):
        pack(messages.Metadata(1, {"names": {"a"}}, ()))

    @dataclasses.dataclass(frozen=True, slots=True)
    class Unregistered(Message):
        id: int

    with pytest.raises(MessageError, match="^Unregistered is not a registered control message$"):
        encode(Unregistered(1))


def test_only_frozen_slotted_dataclasses_of_known_field_types_register() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable(Message):
        id: int

    @dataclasses.dataclass(frozen=True)
    class Unslotted(Message):
        id: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Floating(Message):
        ratio: float

    @dataclasses.dataclass(frozen=True, slots=True)
    class Listing(Message):
        names: list[str]

    @dataclasses.dataclass(frozen=True, slots=True)
    class Typed(Message):
        type: str

    @dataclasses.dataclass(frozen=True, slots=True)
    class Taken2(Message):
        id: int

    for cls in (Mutable, Unslotted):
        with pytest.raises(TypeError, match="must be @dataclass"):
            message("scratch")(cls)
    for cls, field in ((Floating, "ratio"), (Listing, "names"), (Typed, "type")):
        with pytest.raises(TypeError, match=f"field '{field}'"):
            message("scratch")(cls)
    with pytest.raises(TypeError, match="name 'taken' is taken by Taken"):
        message("taken")(Taken2)
    assert "scratch" not in REGISTRY


def test_each_side_handles_exactly_the_messages_sent_to_it() -> None:
    assert set(TO_WORKER).isdisjoint(TO_WORKER_0)
    assert set(TO_WORKER) | set(TO_WORKER_0) == set(REGISTRY.values())
    assert set(Worker.HANDLERS) == set(TO_WORKER)
    assert set(Supervisor.HANDLERS) == set(TO_WORKER_0)


def test_only_a_connection_carries_a_descriptor() -> None:
    assert {cls.TYPE: cls.FDS for cls in ALL if cls.FDS} == {"connection": 1}


def test_start_carries_worker_0s_settings_and_the_worker_makes_its_own_of_them(tmp_path: Any) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path, broker_port=5999, vhosts=["/", "a"])  # type: ignore[call-arg]
    sent = Start.of(settings, {"users": []}, ["a", "b"])
    received = unpack(pack(sent))
    assert isinstance(received, Start) and received == sent and received.owned == ("a", "b")
    assert received.read_settings() == settings
    mine = worker_settings(received.read_settings(), 2)
    assert mine.data_dir == tmp_path / "worker-2"
    assert (mine.web_host, mine.web_port, mine.prometheus_port, mine.definitions_file, mine.ssl) == (
        "127.0.0.1",
        0,
        0,
        None,
        False,
    )


def test_a_connection_keeps_its_handshake_bytes_exactly() -> None:
    every_byte = bytes(range(256))
    sent = Connection(3, b"AMQP\x00\x00\x09\x01" + every_byte, every_byte * 3, {"peer": ["::1", 5]})
    assert unpack(pack(sent)) == sent
    assert unpack(pack(ChannelsElsewhere({}))) == ChannelsElsewhere({})
    assert unpack(pack(Ready(None, 15672))) == Ready(None, 15672)
    assert unpack(pack(Closed(2**40))) == Closed(2**40)
