"""The control messages between worker 0 and the other workers, as typed values (h11's ``_events.py``
for the worker processes' control socket, ``control.Control``).

Rules:
- Every message is a frozen, slotted dataclass registered once, with the name it has on the wire
  (``@message("taken")``), in ``REGISTRY``. ``TO_WORKER`` lists what worker 0 sends, ``TO_WORKER_0``
  what the other workers send; each side's dispatch table (``Worker.HANDLERS``,
  ``Supervisor.HANDLERS``) handles exactly its list.
- One ``encode`` and one ``decode`` serve every message, driven by its fields and their annotations:
  on the wire a message is a JSON object, its name under ``"type"`` and one key per field.
- Field types: ``bool``, ``int``, ``str``, ``bytes`` (base64 text on the wire), ``X | None``,
  ``tuple[X, ...]`` (a JSON array), ``dict[str, X]`` (a JSON object) and ``Any`` (any JSON value,
  for what another layer checks: the settings, the definitions).
- ``decode`` takes exactly the fields of the type named: an unknown type, a key missing or left over
  (a field renamed on one side only) and a value of another type raise ``MessageError``, naming it.
  The receiver closes that control socket and logs why (``Control``); nothing else fails. ``encode``
  checks the same, so a bug shows on the side that has it.
- ``FDS`` is how many file descriptors a message carries (``SCM_RIGHTS``, beside its JSON);
  ``Control`` checks the count both ways.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from ..config import Settings


class MessageError(ValueError):
    """A control message that is not one: not JSON, an unknown type, a field missing, left over or of
    another type, or the wrong number of file descriptors."""


class Message:
    """A control message (see the module rules); ``TYPE`` and ``FDS`` are set by ``@message``."""

    __slots__ = ()
    TYPE: ClassVar[str] = ""
    FDS: ClassVar[int] = 0


REGISTRY: dict[str, type[Message]] = {}  # wire name -> class
_FIELDS: dict[type[Message], tuple[tuple[str, Any], ...]] = {}  # class -> (field name, resolved type)

M = TypeVar("M", bound=Message)


def message(name: str, fds: int = 0) -> Callable[[type[M]], type[M]]:
    """Register a frozen dataclass as the message ``name`` carrying ``fds`` file descriptors.

    Raises:
        TypeError: the name is taken, the class is not a frozen, slotted dataclass, or a field is
            named ``type`` or has a type the codec does not know.
    """

    def register(cls: type[M]) -> type[M]:
        params = getattr(cls, "__dataclass_params__", None)
        if params is None or not params.frozen or "__slots__" not in cls.__dict__:
            raise TypeError(f"control message {cls.__name__} must be @dataclass(frozen=True, slots=True)")
        if name in REGISTRY:
            raise TypeError(f"control message name {name!r} is taken by {REGISTRY[name].__name__}")
        hints = typing.get_type_hints(cls)
        fields = tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        for field_name, kind in fields:
            if field_name == "type" or not _known(kind):
                raise TypeError(f"control message {cls.__name__}: field {field_name!r} of type {kind!r}")
        cls.TYPE, cls.FDS = name, fds
        REGISTRY[name] = cls
        _FIELDS[cls] = fields
        return cls

    return register


# -- the codec ----------------------------------------------------------------------------------------
def encode(msg: Message) -> dict[str, Any]:
    """``msg`` as a JSON-able object: ``{"type": name, field: value, ...}``.

    Raises:
        MessageError: ``msg`` is not a registered message, or a field holds a value of another type.
    """
    cls = type(msg)
    fields = _FIELDS.get(cls)
    if fields is None:
        raise MessageError(f"{cls.__name__} is not a registered control message")
    out: dict[str, Any] = {"type": cls.TYPE}
    for name, kind in fields:
        out[name] = _convert(getattr(msg, name), kind, f"{cls.TYPE}.{name}", decoding=False)
    return out


def decode(data: object) -> Message:
    """The message ``data`` (a JSON object as ``encode`` made it) stands for.

    Raises:
        MessageError: ``data`` is not an object with a known ``"type"``, a field is missing or left
            over, or a value is of another type than its field's.
    """
    if not isinstance(data, dict):
        raise MessageError(f"a control message is a JSON object, not {_kind(data)}")
    name = data.get("type")
    cls = REGISTRY.get(name) if isinstance(name, str) else None
    if cls is None:
        raise MessageError(f"unknown control message type {name!r}")
    fields = _FIELDS[cls]
    expected = {field_name for field_name, _type in fields}
    missing = sorted(expected.difference(data))
    extra = sorted(set(data).difference(expected, {"type"}))
    problems = [f"missing {', '.join(map(repr, missing))}"] if missing else []
    problems += [f"unexpected {', '.join(map(repr, extra))}"] if extra else []
    if problems:
        raise MessageError(f"control message {name!r}: {'; '.join(problems)}")
    values = {n: _convert(data[n], kind, f"{name}.{n}", decoding=True) for n, kind in fields}
    return cls(**values)


def pack(msg: Message) -> bytes:
    """``encode(msg)`` as compact JSON bytes.

    Raises:
        MessageError: as ``encode``, or an ``Any`` field holds what JSON cannot carry.
    """
    data = encode(msg)
    try:
        return json.dumps(data, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise MessageError(f"control message {msg.TYPE!r}: {exc}") from None


def unpack(payload: bytes) -> Message:
    """The message in ``payload`` (``pack``'s bytes).

    Raises:
        MessageError: not UTF-8 JSON, or as ``decode``.
    """
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise MessageError(f"a control message that is not JSON: {exc}") from None
    return decode(data)


def _known(kind: Any) -> bool:
    """Whether the codec knows the field type ``kind``."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind in (Any, bool, int, str, bytes, type(None)):
        return True
    if origin in (types.UnionType, typing.Union):
        return all(_known(arm) for arm in args)
    if origin is tuple:
        return len(args) == 2 and args[1] is Ellipsis and _known(args[0])
    if origin is dict:
        return len(args) == 2 and args[0] is str and _known(args[1])
    return False


def _convert(value: Any, kind: Any, where: str, decoding: bool) -> Any:
    """``value`` checked against ``kind`` and converted to the wire (``decoding`` False) or from it.

    Raises:
        MessageError: ``value`` is not of type ``kind``.
    """
    origin = typing.get_origin(kind)
    if kind is Any:
        return value
    if origin in (types.UnionType, typing.Union):
        for arm in typing.get_args(kind):
            try:
                return _convert(value, arm, where, decoding)
            except MessageError:
                continue
    elif kind is type(None):
        if value is None:
            return None
    elif kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is str:
        if isinstance(value, str):
            return value
    elif kind is bytes:
        if not decoding and isinstance(value, bytes):
            return base64.b64encode(value).decode("ascii")
        if decoding and isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise MessageError(f"control message field {where}: not base64") from None
    elif origin is tuple:
        if isinstance(value, list if decoding else tuple):
            item = typing.get_args(kind)[0]
            converted = [_convert(v, item, f"{where}[{i}]", decoding) for i, v in enumerate(value)]
            return tuple(converted) if decoding else converted
    elif origin is dict and isinstance(value, dict):
        item = typing.get_args(kind)[1]
        if all(isinstance(k, str) for k in value):
            return {k: _convert(v, item, f"{where}[{k!r}]", decoding) for k, v in value.items()}
    raise MessageError(f"control message field {where}: {_kind(value)}, not {_name(kind)}")


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _name(kind: Any) -> str:
    """``int``, ``int | None``, ``dict[str, Any]``: a field type as its annotation reads."""
    if isinstance(kind, type) and typing.get_origin(kind) is None:
        return "None" if kind is type(None) else kind.__name__
    return str(kind).replace("typing.", "").replace("NoneType", "None")


# -- worker 0 -> a worker ----------------------------------------------------------------------------
@message("start")
@dataclass(frozen=True, slots=True)
class Start(Message):
    """The first message to a worker: worker 0's settings (``Settings`` as JSON; the worker makes its
    own of them, ``worker.worker_settings``), its metadata (``metadata.snapshot``), the vhosts
    given to the worker (``ownership``), the exchanges, queues and bindings of the start-up
    definitions file (``OTTERMQ_DEFINITIONS_FILE``) in those vhosts, as definitions JSON, for the
    worker to declare (what it has already is left as it is), and the internal principal's secret
    (``secret``: a shovel's connection to a vhost of this worker logs in with it; made by worker 0 at
    start-up, never stored)."""

    settings: dict[str, Any]
    definitions: dict[str, Any]
    owned: tuple[str, ...]
    topology: dict[str, Any] = dataclasses.field(default_factory=dict)
    secret: str = ""

    @classmethod
    def of(
        cls,
        settings: Settings,
        definitions: dict[str, Any],
        owned: Iterable[str],
        topology: dict[str, Any] | None = None,
        secret: str = "",
    ) -> Start:
        """The start message of a worker given ``owned`` (worker 0's ``settings`` and metadata, the
        start-up file's ``topology`` in the worker's vhosts, and the internal principal's secret)."""
        return cls(settings.model_dump(mode="json"), definitions, tuple(owned), topology or {}, secret)

    def read_settings(self) -> Settings:
        """Worker 0's settings, as it sent them (not the environment's)."""
        return Settings(_env_file=None, **self.settings)  # type: ignore[call-arg]


@message("connection", fds=1)
@dataclass(frozen=True, slots=True)
class Connection(Message):
    """A client connection for the worker that owns its vhost, with one descriptor: the client's TCP
    socket, or (TLS, which stays in worker 0) one end of a socket pair worker 0 relays the session
    to, described by ``endpoints`` (``server.endpoints.describe``). ``before`` and ``rest`` are the
    handshake's bytes to replay (``AMQPServer.adopt``); ``id`` numbers the offer (``Taken``,
    ``Closed``)."""

    id: int
    before: bytes
    rest: bytes
    endpoints: dict[str, Any] | None


@message("metadata")
@dataclass(frozen=True, slots=True)
class Metadata(Message):
    """A new metadata snapshot (``metadata.snapshot``), number ``seq``, and the worker's vhosts now;
    answered with ``Synced`` once applied."""

    seq: int
    definitions: dict[str, Any]
    owned: tuple[str, ...]


@message("channels_elsewhere")
@dataclass(frozen=True, slots=True)
class ChannelsElsewhere(Message):
    """The channels each user with a ``max-channels`` limit has open in the other workers."""

    counts: dict[str, int]


# -- a worker -> worker 0 ----------------------------------------------------------------------------
@message("ready")
@dataclass(frozen=True, slots=True)
class Ready(Message):
    """The worker has started: the ports of its internal management API and Prometheus endpoint on
    127.0.0.1 (None: disabled), and its part of the start-up definitions file's import report
    (``report``: ``ImportReport.to_json`` of the exchanges, queues and bindings it declared or skipped
    from ``Start.topology``; None: nothing to declare). Worker 0 joins the reports of the workers'
    first start into the file's report (``Supervisor.start``)."""

    web: int | None
    prometheus: int | None
    report: dict[str, Any] | None = None


@message("taken")
@dataclass(frozen=True, slots=True)
class Taken(Message):
    """The worker has connection ``id`` (worker 0 forgets it, or starts relaying its TLS session)."""

    id: int


@message("closed")
@dataclass(frozen=True, slots=True)
class Closed(Message):
    """Connection ``id`` has closed in the worker (worker 0 stops counting it)."""

    id: int


@message("channels")
@dataclass(frozen=True, slots=True)
class Channels(Message):
    """The channels each user with a ``max-channels`` limit has open in this worker."""

    counts: dict[str, int]


@message("synced")
@dataclass(frozen=True, slots=True)
class Synced(Message):
    """Metadata ``seq`` is applied here."""

    seq: int


TO_WORKER: tuple[type[Message], ...] = (Start, Connection, Metadata, ChannelsElsewhere)
TO_WORKER_0: tuple[type[Message], ...] = (Ready, Taken, Closed, Channels, Synced)
