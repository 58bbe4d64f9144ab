"""RabbitMQ definitions files (``rabbitmqctl export_definitions`` or ``GET /api/definitions`` JSON) ->
``Definitions`` to apply, and an ``ImportReport`` of what was skipped and why (``report.py``).

Reading, as RabbitMQ 3.10's ``rabbit_definitions`` import:

- ``users``: ``name``; ``password_hash`` (base64) with ``hashing_algorithm`` (when missing, md5
  for files from RabbitMQ 3.0-3.5, sha256 otherwise), or a cleartext ``password`` (hashed here;
  an empty one is stored too, and never logs in), or neither (a random password, as RabbitMQ
  3.10 gives it). ``"password_hash": ""`` is a user without a password (certificate login only),
  exported the same way. ``tags`` as a list (3.9+) or a
  comma-separated string (older files; the legacy ``administrator`` flag too).
- ``vhosts``: ``name``; ``description``/``tags`` at the top level or under ``metadata``; a
  ``default_queue_type`` is reported skipped (the vhost is created without it).
- ``permissions``: ``user``, ``vhost``, ``configure``, ``write``, ``read`` (regexes, checked).
- ``topic_permissions``: skipped, each reported (not supported).
- ``queues``/``exchanges``: names starting with ``amq.`` and the default exchange are skipped
  (RabbitMQ skips those too), and so are streams and exchange types ottermq does not have, each
  reported, as is an exchange name longer than 255 octets (RabbitMQ's HTTP API lets one through; no
  AMQP client can name it). Unless ``transient``, non-durable ones are skipped too (a start-up or
  offline import keeps durable entities only). Classic and quorum queues keep their type
  (``x-queue-type``).
  Arguments are validated the way ``queue.declare``/``exchange.declare`` would.
- ``bindings``: ``source``, ``vhost``, ``destination``, ``destination_type``, ``routing_key``,
  ``arguments``; a binding whose endpoint is skipped above is skipped too, with that reason.
- ``policies``, ``parameters`` (operator policies, vhost limits, and the components ottermq does
  not have), users' and vhosts' ``limits``, ``global_parameters``: ``components.py``.
- Arguments: JSON objects <-> AMQP field tables with RabbitMQ's type choices (``arguments.py``).
- Other keys are ignored.

An invalid item (RabbitMQ refuses the whole file for it) raises ``DefinitionsError``, naming it:
``queues[2] (queue 'q' in vhost '/'): 'durable' must be a boolean``.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ottermq.amqp.errors import AMQPError
from ottermq.persistence.arguments import decode_arguments
from ottermq.persistence.store import (
    BindingRecord,
    Definitions,
    ExchangeRecord,
    PermissionRecord,
    QueueRecord,
    UserRecord,
    VHostRecord,
)
from ottermq.vhost.arguments import parse_exchange_args, parse_queue_args
from ottermq.vhost.exchange import EXCHANGE_TYPES
from ottermq.vhost.patterns import PatternError, compile_pattern

from ..auth import DEFAULT_HASHING_ALGORITHM, HASHING_ALGORITHMS, hash_password
from .arguments import DefinitionsError, Unencodable, arguments_from_json
from .components import read_global_parameters, read_parameters, read_policies
from .entry import Entry, entries
from .report import ImportReport

log = logging.getLogger(__name__)

_MD5_VERSIONS = re.compile(r"^3\.[0-5]\.")
Key = tuple[str, str, str]  # (kind, vhost, name) of an exchange or a queue
MAX_NAME = 255  # octets: an AMQP short string


def _default_algorithm(data: Mapping[str, Any]) -> str:
    version = data.get("rabbit_version") or data.get("rabbitmq_version") or ""
    if isinstance(version, str) and _MD5_VERSIONS.match(version):
        return "rabbit_password_hashing_md5"
    return DEFAULT_HASHING_ALGORITHM


def _read_user(entry: Entry, default_algorithm: str) -> UserRecord:
    name = entry.string("name", non_empty=True)
    entry.label(f"user '{name}'")
    item = entry.item
    algorithm = entry.string("hashing_algorithm", default_algorithm)
    if algorithm not in HASHING_ALGORITHMS:
        raise entry.fail(f"unsupported hashing_algorithm '{algorithm}'")
    has_password, has_hash = "password" in item, "password_hash" in item
    if has_password and has_hash:
        raise entry.fail("both 'password' and 'password_hash' are given")
    if has_password:
        password_hash = hash_password(entry.string("password"), DEFAULT_HASHING_ALGORITHM)
        algorithm = DEFAULT_HASHING_ALGORITHM
    elif not has_hash:  # RabbitMQ 3.10: a random password nobody knows
        password_hash = hash_password(secrets.token_urlsafe(24), DEFAULT_HASHING_ALGORITHM)
        algorithm = DEFAULT_HASHING_ALGORITHM
    else:
        password_hash = entry.string("password_hash")
        try:
            base64.b64decode(password_hash, validate=True)
        except (binascii.Error, ValueError):
            raise entry.fail("'password_hash' is not valid base64") from None
    if "tags" in item:
        tags = entry.tags(item["tags"])
    else:
        tags = ["administrator"] if str(item.get("administrator", "")).lower() == "true" else []
    return UserRecord(name, password_hash, algorithm, tags)


def _read_vhost(entry: Entry, report: ImportReport) -> VHostRecord:
    name = entry.string("name", non_empty=True)
    entry.label(f"vhost '{name}'")
    metadata = entry.item.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise entry.fail(f"'metadata' must be an object, got {metadata!r}")
    description = entry.item.get("description", metadata.get("description", ""))
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise entry.fail(f"'description' must be a string, got {description!r}")
    entry.text("description", description)
    tags = entry.tags(entry.item.get("tags", metadata.get("tags")))
    queue_type = metadata.get("default_queue_type", entry.item.get("default_queue_type"))
    if queue_type not in (None, "undefined", "classic"):
        report.skip(
            "vhosts",
            f"default queue type '{queue_type}' is not supported: the vhost is created, and a queue"
            " declared there without x-queue-type is a classic queue",
            name=name,
        )
    return VHostRecord(name, description, tags)


def _read_permission(entry: Entry) -> PermissionRecord:
    user = entry.string("user", non_empty=True)
    vhost = entry.string("vhost", non_empty=True)
    entry.label(f"user '{user}' in vhost '{vhost}'")
    regexes = [entry.string(key) for key in ("configure", "write", "read")]
    for key, regex in zip(("configure", "write", "read"), regexes, strict=True):
        try:
            compile_pattern(regex or "^$")
        except PatternError as exc:
            raise entry.fail(f"'{key}' regular expression '{regex}' is invalid: {exc}") from None
    return PermissionRecord(user, vhost, *regexes)


def _skip_reason(entry: Entry, kind: str, name: str, transient: bool) -> str | None:
    """Why a queue or an exchange is not imported (None: it is)."""
    if kind == "exchange" and name == "":
        return "the default exchange is not imported"
    if name.startswith("amq."):
        return f"a {kind} whose name begins with 'amq.' is not imported"
    if not entry.boolean("durable", True) and not transient:
        return (
            f"a non-durable {kind}: a definitions file read at start-up or imported offline keeps only"
            " durable queues and exchanges (the HTTP API imports non-durable ones)"
        )
    return None


def _read_exchange(entry: Entry, transient: bool) -> ExchangeRecord | str:
    """The record, or why the exchange is skipped."""
    name = entry.string("name")
    vhost = entry.string("vhost", non_empty=True)
    entry.label(f"exchange '{name}' in vhost '{vhost}'")
    type_ = entry.string("type")
    auto_delete = entry.boolean("auto_delete", False)
    internal = entry.boolean("internal", False)
    reason = _skip_reason(entry, "exchange", name, transient)
    if reason is not None:
        return reason
    try:
        arguments = arguments_from_json(entry.item.get("arguments"), entry.where)
    except Unencodable as exc:
        return exc.reason
    if type_ not in EXCHANGE_TYPES:
        return f"exchange type '{type_}' is not supported (supported: {', '.join(EXCHANGE_TYPES)})"
    if len(name.encode()) > MAX_NAME:  # RabbitMQ's HTTP API accepts one; AMQP cannot carry it
        return f"an exchange name longer than {MAX_NAME} octets cannot be used over AMQP"
    try:
        parse_exchange_args(decode_arguments(arguments), name, vhost)
    except AMQPError as exc:
        raise entry.fail(exc.text) from None
    return ExchangeRecord(vhost, name, type_, auto_delete, internal, arguments)


def _read_queue(entry: Entry, transient: bool) -> QueueRecord | str:
    """The record, or why the queue is skipped."""
    name = entry.string("name", non_empty=True)
    vhost = entry.string("vhost", non_empty=True)
    entry.label(f"queue '{name}' in vhost '{vhost}'")
    auto_delete = entry.boolean("auto_delete", False)
    reason = _skip_reason(entry, "queue", name, transient)
    if reason is not None:
        return reason
    try:
        arguments = arguments_from_json(entry.item.get("arguments"), entry.where)
    except Unencodable as exc:
        return exc.reason
    args = decode_arguments(arguments)
    if args.get("x-queue-type", entry.item.get("type")) == "stream":
        return "stream queues are not supported (ottermq has classic and quorum queues)"
    try:
        parse_queue_args(args, name, vhost)
    except AMQPError as exc:
        raise entry.fail(exc.text) from None
    return QueueRecord(vhost, name, auto_delete, arguments)


def _read_binding(entry: Entry) -> tuple[BindingRecord, str | None]:
    """The record, and why it is skipped (None: it is not)."""
    vhost = entry.string("vhost", non_empty=True)
    source = entry.string("source")
    destination = entry.string("destination")
    kind = entry.string("destination_type")
    entry.label(f"binding of {kind} '{destination}' to exchange '{source}' in vhost '{vhost}'")
    if kind not in ("queue", "exchange"):
        raise entry.fail(f"'destination_type' must be 'queue' or 'exchange', got {kind!r}")
    routing_key = entry.string("routing_key", "")
    try:
        arguments = arguments_from_json(entry.item.get("arguments"), entry.where)
    except Unencodable as exc:
        return BindingRecord(vhost, source, kind, destination, routing_key, b""), exc.reason
    return BindingRecord(vhost, source, kind, destination, routing_key, arguments), None


def binding_names(b: BindingRecord) -> dict[str, str]:
    """What names a binding in a report."""
    return {
        "vhost": b.vhost,
        "source": b.source,
        "destination": b.destination,
        "destination_type": b.destination_kind,
        "routing_key": b.routing_key,
    }


def binding_key(b: BindingRecord) -> tuple[str, str, str, str, str, bytes]:
    """What makes two bindings the same binding."""
    return (b.vhost, b.source, b.destination_kind, b.destination, b.routing_key, b.arguments)


def _read_topology(data: Mapping[str, Any], defs: Definitions, transient: bool, report: ImportReport) -> None:
    skipped: dict[Key, str] = {}  # left out on purpose, with why
    seen: set[Key] = set()
    for entry in entries(data, "exchanges"):
        exchange = _read_exchange(entry, transient)
        key = ("exchange", entry.item["vhost"], entry.item["name"])
        if isinstance(exchange, str):
            skipped[key] = exchange
            report.skip("exchanges", exchange, vhost=key[1], name=key[2])
        elif key in seen:
            log.warning("%s: duplicate exchange; the first definition is kept", entry.where)
        else:
            seen.add(key)
            defs.exchanges.append(exchange)
    for entry in entries(data, "queues"):
        queue = _read_queue(entry, transient)
        key = ("queue", entry.item["vhost"], entry.item["name"])
        if isinstance(queue, str):
            skipped[key] = queue
            report.skip("queues", queue, vhost=key[1], name=key[2])
        elif key in seen:
            log.warning("%s: duplicate queue; the first definition is kept", entry.where)
        else:
            seen.add(key)
            defs.queues.append(queue)
    bindings: set[tuple[str, str, str, str, str, bytes]] = set()
    for entry in entries(data, "bindings"):
        binding, unencodable = _read_binding(entry)
        source = ("exchange", binding.vhost, binding.source)
        destination = (binding.destination_kind, binding.vhost, binding.destination)
        if binding.source == "":
            report.skip(
                "bindings", "a binding of the default exchange is not imported", **binding_names(binding)
            )
            continue
        if unencodable is not None:
            report.skip("bindings", unencodable, **binding_names(binding))
            continue
        for end, what in ((source, "source"), (destination, "destination")):
            if end in skipped:
                reason = f"its {what} {end[0]} '{end[2]}' is skipped"
                report.skip("bindings", reason, **binding_names(binding))
                break
        else:
            identity = binding_key(binding)
            if identity not in bindings:
                bindings.add(identity)
                defs.bindings.append(binding)


def definitions_from_json(
    data: Mapping[str, Any], transient: bool = False, report: ImportReport | None = None
) -> Definitions:
    """Validate a parsed definitions file and turn it into store records (see the module rules).
    ``transient=True`` keeps non-durable queues and exchanges (for a live import, which declares
    them; the records do not say which were durable). What is skipped goes to ``report``.

    Raises:
        DefinitionsError: the first invalid entry, named (``users[1] (user 'bob'): ...``).
    """
    if not isinstance(data, Mapping):
        raise DefinitionsError(f"definitions must be a JSON object, got {type(data).__name__}")
    report = report if report is not None else ImportReport()
    defs = Definitions()
    algorithm = _default_algorithm(data)
    users = {u.name: u for u in (_read_user(entry, algorithm) for entry in entries(data, "users"))}
    vhosts = {v.name: v for v in (_read_vhost(entry, report) for entry in entries(data, "vhosts"))}
    perms = {
        (p.user, p.vhost): p for p in (_read_permission(entry) for entry in entries(data, "permissions"))
    }
    defs.users, defs.vhosts, defs.permissions = (
        list(users.values()),
        list(vhosts.values()),
        list(perms.values()),
    )
    for entry in entries(data, "topic_permissions"):
        names = {key: str(entry.item.get(key)) for key in ("user", "vhost", "exchange")}
        report.skip("topic_permissions", "topic permissions are not supported", **names)
    read_global_parameters(data, report)
    _read_topology(data, defs, transient, report)
    read_policies(data, defs, report)
    read_parameters(data, defs, report)
    return defs


@dataclass(slots=True)
class DefinitionsFile:
    """A definitions file read for a start-up or an offline import: what to apply, and the report
    of its import (what the reading skipped so far; the applier adds the rest)."""

    path: str
    definitions: Definitions
    report: ImportReport = field(default_factory=ImportReport)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.path, **self.report.to_json()}


def load_definitions_file(path: str | Path) -> DefinitionsFile:
    """Read and validate a definitions JSON file (e.g. ``OTTERMQ_DEFINITIONS_FILE``).

    Raises:
        DefinitionsError: unreadable file, invalid JSON or invalid definitions (path in message).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise DefinitionsError(f"cannot read definitions file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise DefinitionsError(f"definitions file {path} is not valid JSON: {exc}") from None
    report = ImportReport()
    try:
        return DefinitionsFile(str(path), definitions_from_json(data, report=report), report)
    except DefinitionsError as exc:
        raise DefinitionsError(f"definitions file {path}: {exc}") from None
