"""A dynamic shovel's definition (the ``value`` of a ``shovel`` runtime parameter): validated with
RabbitMQ 3.10's texts (``rabbit_shovel_parameters:validate/5``), then read into a ``ShovelSpec``.

Rules:

1. The value is a JSON object (the management API's ``value``, ``rabbitmqctl set_parameter``'s JSON,
   a definitions file's ``value``). Each problem is one line of RabbitMQ's text, in RabbitMQ's order:
   the source's checks (``src-queue`` or ``src-exchange``; no numeric ``src-delete-after`` with
   ``no-ack``), the destination's (not both ``dest-queue`` and ``dest-exchange``), then the keys:
   ``Unrecognised terms [...] in <name>`` first, then each key's problem, last key first (RabbitMQ
   folds over its list of keys and prepends). A missing ``src-uri`` or ``dest-uri`` is
   ``Key "dest-uri" not found in <name>``.
2. Values are printed as Erlang prints JSON's terms (``amqp.erlang``): strings as binaries
   (``<<"x">>``), ``null`` as the atom ``null``, objects as maps (``#{<<"k">> => 1}``), a list of
   printable character codes as a string.
3. ``src-uri`` and ``dest-uri`` are a URI or a list of them (``uri.parse_uri``). A local URI
   (no host) names a vhost the acting user must be able to open (``user "u" may not connect to vhost
   "v"``); the broker acting for itself (definitions, the command line) is not checked.
4. Only AMQP 0-9-1 is spoken: ``src-protocol``/``dest-protocol`` ``amqp10`` is refused (an ottermq
   difference: RabbitMQ 3.10 has AMQP 1.0 shovels).
5. ``ShovelSpec`` holds what the shovel runs with, RabbitMQ's defaults filled in: ``ack-mode``
   ``on-confirm``, ``src-prefetch-count`` (or the legacy ``prefetch-count``) 1000,
   ``src-delete-after`` (or ``delete-after``) ``never``, ``reconnect-delay`` 5 s, the legacy
   ``add-forward-headers``, ``add-timestamp-header`` and ``publish-properties`` under their
   ``dest-`` names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ottermq.amqp.erlang import Atom, Charlist, format_term, pretty_term, to_wire

from .uri import UriError, parse_uri

__all__ = ["ShovelSpec", "erlang_term", "spec_of", "validate"]

ACK_MODES = ("no-ack", "on-publish", "on-confirm")
PROTOCOLS = ("amqp10", "amqp091")
DEFAULT_PREFETCH = 1000
DEFAULT_RECONNECT_DELAY = 5
# rabbit_amqqueue:declare_args() and consume_args() keys: what src-/dest-queue-args and
# src-consumer-args may name (their values are checked by the broker that declares or consumes)
QUEUE_ARGS = (
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-version",
    "x-single-active-consumer",
    "x-queue-type",
    "x-quorum-initial-group-size",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
    "x-queue-leader-locator",
)
CONSUMER_ARGS = ("x-priority", "x-cancel-on-ha-failover", "x-stream-offset")
# publish-properties: (key, kind) as rabbit_shovel_parameters:validate_properties lists them
PUBLISH_PROPERTIES = (
    ("content_type", "binary"),
    ("content_encoding", "binary"),
    ("delivery_mode", "number"),
    ("priority", "number"),
    ("correlation_id", "binary"),
    ("reply_to", "binary"),
    ("expiration", "binary"),
    ("message_id", "binary"),
    ("timestamp", "number"),
    ("type", "binary"),
    ("user_id", "binary"),
    ("app_id", "binary"),
    ("cluster_id", "binary"),
)

VHostAccess = Callable[[str], bool]  # may the acting user open this vhost? (None: the broker itself)


class Map(dict[str, object]):
    """A JSON object as an Erlang map term (printed ``#{K => V}``, keys in Erlang's order)."""


def erlang_term(value: Any) -> object:
    """A JSON value as the Erlang term RabbitMQ decodes it to (rule 2), for ``amqp.erlang``."""
    if value is None:
        return Atom("null")
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return Map({k: erlang_term(v) for k, v in value.items()})
    if isinstance(value, list):
        if value and all(isinstance(v, int) and not isinstance(v, bool) and 32 <= v <= 126 for v in value):
            return Charlist("".join(map(chr, value)))
        return [erlang_term(v) for v in value]
    return str(value)


def _p(term: object, column: int = 0) -> str:
    """``~p`` of ``term`` printed from ``column`` (0-based), maps on one line."""
    if _has_map(term):
        return _one_line(term)
    return pretty_term(term, column + 1)


def _has_map(term: object) -> bool:
    if isinstance(term, Map):
        return True
    return isinstance(term, list | tuple) and any(_has_map(t) for t in term)


def _one_line(term: object) -> str:
    if isinstance(term, Map):
        keys = sorted(term, key=lambda k: k.encode("utf-8", "surrogatepass"))
        return "#{" + ",".join(f"{format_term(k)} => {_one_line(term[k])}" for k in keys) + "}"
    if isinstance(term, list) and not isinstance(term, Charlist):
        return "[" + ",".join(_one_line(t) for t in term) + "]"
    if isinstance(term, tuple):
        return "{" + ",".join(_one_line(t) for t in term) + "}"
    return format_term(term)


def _s(value: str) -> str:
    """``~s`` of a binary: its octets as Latin-1 characters (``to_wire`` turns them back)."""
    return value.encode("utf-8", "surrogatepass").decode("latin-1")


def _fmt(text: str, *terms: object) -> str:
    """``rabbit_misc:format`` of a text whose ``{}`` are ``~p`` of ``terms`` (each from its column)."""
    out = ""
    pieces = text.split("{}")
    for piece, term in zip(pieces, terms, strict=False):
        out += piece
        out += _p(term, len(out.rsplit("\n", 1)[-1]))
    return out + pieces[-1]


# -- the checks of one key: rabbit_parameter_validation ---------------------------------------------
Check = Callable[[str, Any], list[str]]


def _number(name: str, value: Any) -> list[str]:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return []
    return [_fmt(f"{_s(name)} should be a number, actually was {{}}", erlang_term(value))]


def _binary(name: str, value: Any) -> list[str]:
    if isinstance(value, str):
        return []
    return [_fmt(f"{_s(name)} should be binary, actually was {{}}", erlang_term(value))]


def _boolean(name: str, value: Any) -> list[str]:
    if isinstance(value, bool):
        return []
    return [_fmt(f"{_s(name)} should be boolean, actually was {{}}", erlang_term(value))]


def _queue_name(name: str, value: Any) -> list[str]:
    if not isinstance(value, str):
        return _binary(name, value)
    size = len(value.encode("utf-8", "surrogatepass"))
    return [] if size <= 255 else [f"{_s(name)} should be less than 255 bytes, actually was {size}"]


def _enum(options: tuple[str, ...]) -> Check:
    def check(name: str, value: Any) -> list[str]:
        if not isinstance(value, str):
            return _binary(name, value)
        if value in options:
            return []
        return [_fmt(f"{_s(name)} should be one of {{}}, actually was {{}}", list(options), value)]

    return check


def _delete_after(name: str, value: Any) -> list[str]:
    if value in ("never", "queue-length") or (
        isinstance(value, int) and not isinstance(value, bool) and value >= 0
    ):
        return []
    text = '{} should be a number greater than or equal to 0, "never" or "queue-length", actually was {{}}'
    return [_fmt(text.format(_s(name)), erlang_term(value))]


def _proplist(name: str, constraints: list[tuple[str, Check, bool]], value: Any) -> list[str]:
    """``rabbit_parameter_validation:proplist``: each key's check, missing mandatory keys, then the
    terms no constraint names (rule 1's order). A JSON array is a list of terms no key matches."""
    remainder: list[Any]
    if isinstance(value, Mapping):
        remainder = sorted(value.items(), key=lambda kv: str(kv[0]).encode("utf-8", "surrogatepass"))
    elif isinstance(value, list):
        remainder = list(value)
    else:
        return [_fmt(f"{_s(name)} not a list {{}}", erlang_term(value))]
    results: list[list[str]] = []
    for key, check, mandatory in constraints:
        found = next((i for i, kv in enumerate(remainder) if isinstance(kv, tuple) and kv[0] == key), None)
        if found is not None:
            results.insert(0, check(key, remainder.pop(found)[1]))
        elif mandatory:
            results.insert(0, [f'Key "{_s(key)}" not found in {_s(name)}'])
    errors = [e for r in results for e in r]
    if remainder:
        terms = [
            (kv[0], erlang_term(kv[1])) if isinstance(kv, tuple) else erlang_term(kv) for kv in remainder
        ]
        prefix = "Unrecognised terms "
        errors.insert(0, prefix + _p(terms, len(prefix)) + f" in {_s(name)}")
    return errors


def _keys_of(allowed: tuple[str, ...]) -> Check:
    def check(name: str, value: Any) -> list[str]:
        return _proplist(name, [(k, lambda _n, _v: [], False) for k in allowed], value)

    return check


def _properties(name: str, value: Any) -> list[str]:
    checks = {"binary": _binary, "number": _number}
    return _proplist(name, [(k, checks[kind], False) for k, kind in PUBLISH_PROPERTIES], value)


def _uri_check(access: VHostAccess | None, username: str | None) -> Check:
    def check(name: str, value: Any) -> list[str]:
        if isinstance(value, list):
            for item in value:
                problems = check(name, item)
                if problems:
                    return problems
            return []
        if not isinstance(value, str):
            return [_fmt(f"{_s(name)} should be list, actually was {{}}", erlang_term(value))]
        try:
            uri = parse_uri(value)
        except UriError as exc:
            prefix = f'"{_s(value)}" not a valid URI: '
            return [prefix + _p(exc.term, len(prefix))]
        if uri.direct and access is not None and not access(uri.vhost):
            return [f'user "{_s(username or "")}" may not connect to vhost "{_s(uri.vhost)}"']
        return []

    return check


def _pget2(value: Mapping[str, Any], first: str, second: str) -> int:
    return (first in value) + (second in value)


def validate(
    name: str, value: Any, access: VHostAccess | None = None, username: str | None = None
) -> list[str]:
    """RabbitMQ's validation of a shovel definition (see the module rules).

    Args:
        name: the shovel's name (it appears in some texts).
        value: the decoded JSON value: an object (a JSON array is read as RabbitMQ reads it, a list of
            terms no key matches; anything else RabbitMQ cannot read at all, and answers 500: ottermq
            refuses it as ``<name> not a list <value>``).
        access: whether the acting user may open a vhost (None: the broker acting, unchecked).
        username: the acting user's name, for rule 3's text.

    Returns:
        The problems, each one line as the reply text shows it (empty: valid).
    """
    if isinstance(value, list):
        fields: Mapping[str, Any] = {}
    elif isinstance(value, Mapping):
        fields = value
    else:
        return [_wire(_fmt(f"{_s(name)} not a list {{}}", erlang_term(value)))]
    errors: list[str] = []
    for side in ("src", "dest"):
        protocol = fields.get(f"{side}-protocol", "amqp091")
        if protocol == "amqp10":
            errors.append(f"{side}-protocol amqp10 (AMQP 1.0) is not supported by ottermq")
        elif protocol != "amqp091":  # RabbitMQ answers 500
            errors += _enum(PROTOCOLS)(f"{side}-protocol", protocol)
    if errors:
        return [_wire(e) for e in errors]
    both = _pget2(fields, "src-exchange", "src-queue")
    if both == 0:
        errors.append("Must specify 'src-exchange' or 'src-queue'")
    elif both == 2:
        errors.append("Cannot specify 'src-exchange' and 'src-queue'")
    delete_after = fields.get("src-delete-after", fields.get("delete-after"))
    if _integer(delete_after) and fields.get("ack-mode") == "no-ack":
        errors.append("Cannot specify 'no-ack' and numerical 'delete-after'")
    if _pget2(fields, "dest-exchange", "dest-queue") == 2:
        errors.append("Cannot specify 'dest-exchange' and 'dest-queue'")
    uri = _uri_check(access, username)
    args = _keys_of(QUEUE_ARGS)
    constraints: list[tuple[str, Check, bool]] = [
        ("reconnect-delay", _number, False),
        ("ack-mode", _enum(ACK_MODES), False),
        ("src-protocol", _enum(PROTOCOLS), False),
        ("dest-protocol", _enum(PROTOCOLS), False),
        ("src-uri", uri, True),
        ("src-exchange", _binary, False),
        ("src-exchange-key", _binary, False),
        ("src-queue", _binary, False),
        ("src-queue-args", args, False),
        ("src-consumer-args", _keys_of(CONSUMER_ARGS), False),
        ("prefetch-count", _number, False),
        ("src-prefetch-count", _number, False),
        ("delete-after", _delete_after, False),
        ("src-delete-after", _delete_after, False),
        ("dest-uri", uri, True),
        ("dest-exchange", _binary, False),
        ("dest-exchange-key", _binary, False),
        ("dest-queue", _queue_name, False),
        ("dest-queue-args", args, False),
        ("add-forward-headers", _boolean, False),
        ("add-timestamp-header", _boolean, False),
        ("dest-add-forward-headers", _boolean, False),
        ("dest-add-timestamp-header", _boolean, False),
        ("publish-properties", _properties, False),
        ("dest-publish-properties", _properties, False),
    ]
    errors += _proplist(name, constraints, value)
    return [_wire(e) for e in errors]


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _wire(chars: str) -> str:
    return to_wire(chars)


@dataclass(frozen=True, slots=True)
class ShovelSpec:
    """What a valid definition says (rule 5)."""

    src_uris: tuple[str, ...]
    dest_uris: tuple[str, ...]
    src_queue: str | None = None
    src_exchange: str | None = None
    src_exchange_key: str = ""
    src_queue_args: dict[str, Any] = field(default_factory=dict)
    src_consumer_args: dict[str, Any] = field(default_factory=dict)
    prefetch: int | float = DEFAULT_PREFETCH
    delete_after: str | int = "never"
    dest_queue: str | None = None
    dest_exchange: str | None = None
    dest_exchange_key: str | None = None
    dest_queue_args: dict[str, Any] = field(default_factory=dict)
    add_forward_headers: bool = False
    add_timestamp_header: bool = False
    publish_properties: dict[str, Any] = field(default_factory=dict)
    ack_mode: str = "on-confirm"
    reconnect_delay: int | float = DEFAULT_RECONNECT_DELAY

    @property
    def restarts(self) -> bool:
        """Whether a failed shovel connects again: a whole positive ``reconnect-delay``
        (``rabbit_shovel_dyn_worker_sup``: 0, a fraction or a negative number means never)."""
        delay = self.reconnect_delay
        return isinstance(delay, int) and delay > 0 and math.isfinite(delay)


def _uris(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(u for item in value for u in _uris(item))
    return ()


def _first(value: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if key in value:
            return value[key]
    return default


def spec_of(value: Mapping[str, Any]) -> ShovelSpec:
    """The ``ShovelSpec`` of a definition :func:`validate` accepted (rule 5)."""
    dest_x = value.get("dest-exchange")
    return ShovelSpec(
        src_uris=_uris(value["src-uri"]),
        dest_uris=_uris(value["dest-uri"]),
        src_queue=value.get("src-queue"),
        src_exchange=value.get("src-exchange"),
        src_exchange_key=value.get("src-exchange-key", ""),
        src_queue_args=dict(value.get("src-queue-args") or {}),
        src_consumer_args=dict(value.get("src-consumer-args") or {}),
        prefetch=_first(value, "src-prefetch-count", "prefetch-count", default=DEFAULT_PREFETCH),
        delete_after=_first(value, "src-delete-after", "delete-after", default="never"),
        dest_queue=value.get("dest-queue"),
        dest_exchange=dest_x,
        dest_exchange_key=value.get("dest-exchange-key"),
        dest_queue_args=dict(value.get("dest-queue-args") or {}),
        add_forward_headers=bool(
            _first(value, "dest-add-forward-headers", "add-forward-headers", default=False)
        ),
        add_timestamp_header=bool(
            _first(value, "dest-add-timestamp-header", "add-timestamp-header", default=False)
        ),
        publish_properties=dict(
            _first(value, "dest-publish-properties", "publish-properties", default={}) or {}
        ),
        ack_mode=value.get("ack-mode", "on-confirm"),
        reconnect_delay=value.get("reconnect-delay", DEFAULT_RECONNECT_DELAY),
    )
