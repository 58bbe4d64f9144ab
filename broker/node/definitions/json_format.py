"""RabbitMQ definitions files (``rabbitmqctl export_definitions`` JSON) <-> ``Definitions``.

Reading (``definitions_from_json``), as RabbitMQ 3.10's ``rabbit_definitions`` import:

- ``users``: ``name``; ``password_hash`` (base64) with ``hashing_algorithm`` (when missing, md5
  for files from RabbitMQ 3.0-3.5, sha256 otherwise), or a cleartext ``password`` (hashed here;
  an empty one is stored too, and never logs in), or neither (a random password, as RabbitMQ
  3.10 gives it). ``"password_hash": ""`` is a user without a password (certificate login only),
  exported the same way. ``tags`` as a list (3.9+) or a
  comma-separated string (older files; the legacy ``administrator`` flag too). ``limits`` ignored.
- ``vhosts``: ``name``; ``description``/``tags`` at the top level or under ``metadata``.
- ``permissions``: ``user``, ``vhost``, ``configure``, ``write``, ``read`` (regexes, checked).
- ``queues``/``exchanges``: only durable entities are stored, so non-durable ones are skipped
  with a warning; so are names starting with ``amq.`` and the default exchange (RabbitMQ skips
  those too) and streams. Classic and quorum queues keep their type (``x-queue-type``). Arguments
  are validated the way ``queue.declare``/``exchange.declare`` would; exchange types must be built in.
- ``bindings``: ``source``, ``vhost``, ``destination``, ``destination_type``, ``routing_key``,
  ``arguments``; a binding whose endpoint is skipped above is skipped too.
- ``policies``: ``vhost``, ``name``, ``pattern``, ``apply-to``, ``priority``, ``definition``, validated
  as the management API does (``vhost/policy.py``); operator policies are the ``parameters`` of
  component ``operator_policy`` (their ``value`` holds the policy), as RabbitMQ exports them.
- Limits: users' ``limits`` (an object), vhosts' ``limits`` (an object, or 3.10's list of pairs)
  and ``vhost-limits`` parameters, validated as the API does (``broker/node/limits.py``); exported in
  all three of RabbitMQ's places.
- ``parameters`` of component ``shovel``: ``vhost``, ``name`` and ``value`` (validated when applied,
  by the shovel component: ``broker/node/parameters.py``); exported as RabbitMQ does.
- ``topic_permissions``, ``global_parameters`` and other ``parameters``: accepted and ignored with
  a warning (not implemented); other unknown keys are ignored.
- Arguments: JSON objects <-> AMQP field tables with RabbitMQ's type choices (``arguments.py``).

Writing (``definitions_to_json``) uses RabbitMQ 3.10's key names and shapes, so
``rabbitmqctl import_definitions`` accepts the result. One deliberate difference: RabbitMQ 3.10
leaves internal exchanges out of its exports (while keeping bindings to them); we export them
with ``"internal": true`` (a key RabbitMQ's import reads), so a round trip loses nothing.

Errors name the entry: ``queues[2] (queue 'q' in vhost '/'): 'durable' must be a boolean``.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ottermq.amqp.errors import AMQPError
from ottermq.persistence.arguments import decode_arguments
from ottermq.persistence.store import (
    BindingRecord,
    Definitions,
    ExchangeRecord,
    LimitRecord,
    ParameterRecord,
    PermissionRecord,
    PolicyRecord,
    QueueRecord,
    UserRecord,
    VHostRecord,
)
from ottermq.vhost.arguments import parse_exchange_args, parse_queue_args
from ottermq.vhost.exchange import EXCHANGE_TYPES
from ottermq.vhost.patterns import PatternError, compile_pattern
from ottermq.vhost.policy import PolicyError, make_policy

from ..auth import DEFAULT_HASHING_ALGORITHM, HASHING_ALGORITHMS, hash_password
from ..limits import LimitError
from ..limits import validate as validate_limit
from .arguments import DefinitionsError, arguments_from_json, arguments_to_json

log = logging.getLogger(__name__)

IGNORED_SECTIONS = {
    "topic_permissions": "topic permissions are not implemented",
    "global_parameters": "global parameters are not implemented",
}
OPERATOR_POLICY = "operator_policy"  # the ``parameters`` component of operator policies
VHOST_LIMITS = "vhost-limits"  # the ``parameters`` component of vhost limits
COMPONENTS = ("shovel",)  # the ``parameters`` components read into ``Definitions.parameters``
_MD5_VERSIONS = re.compile(r"^3\.[0-5]\.")


# ---------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------
class _Entry:
    """One item of a section, with a label for error messages."""

    def __init__(self, section: str, index: int, item: Any) -> None:
        if not isinstance(item, dict):
            raise DefinitionsError(f"{section}[{index}]: must be an object, got {item!r}")
        self.item: dict[str, Any] = item
        self.where = f"{section}[{index}]"

    def label(self, text: str) -> None:
        self.where = f"{self.where} ({text})"

    def fail(self, problem: str) -> DefinitionsError:
        return DefinitionsError(f"{self.where}: {problem}")

    def string(self, key: str, default: str | None = None, *, non_empty: bool = False) -> str:
        value = self.item.get(key, default)
        if value is None:
            raise self.fail(f"missing '{key}'")
        if not isinstance(value, str):
            raise self.fail(f"'{key}' must be a string, got {value!r}")
        if non_empty and not value:
            raise self.fail(f"'{key}' must not be empty")
        return self.text(key, value)

    def text(self, key: str, value: str) -> str:
        """``value`` if it can be stored: Unicode text, not a lone surrogate escape such as ``"\\ud800"``
        (which JSON allows and no name, key or password is encoded from)."""
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise self.fail(f"'{key}' is not valid Unicode (a lone surrogate)") from None
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.item.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(f"'{key}' must be a boolean, got {value!r}")
        return value

    def tags(self, value: Any) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            return [self.text("tags", tag.strip()) for tag in value.split(",") if tag.strip()]
        if isinstance(value, list) and all(isinstance(tag, str) for tag in value):
            return [self.text("tags", tag.strip()) for tag in value if tag.strip()]
        raise self.fail(f"'tags' must be a list of strings or a comma-separated string, got {value!r}")


def _section(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise DefinitionsError(f"'{key}' must be a list, got {type(value).__name__}")
    return value


def _default_algorithm(data: Mapping[str, Any]) -> str:
    version = data.get("rabbit_version") or data.get("rabbitmq_version") or ""
    if isinstance(version, str) and _MD5_VERSIONS.match(version):
        return "rabbit_password_hashing_md5"
    return DEFAULT_HASHING_ALGORITHM


def _read_user(entry: _Entry, default_algorithm: str) -> UserRecord:
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


def _read_limits(entry: _Entry, kind: str, owner: str, raw: Any) -> list[LimitRecord]:
    """``limits`` of a user (an object) or of a vhost (an object, or RabbitMQ 3.10's list of pairs)."""
    if raw in (None, [], {}):
        return []
    pairs = raw.items() if isinstance(raw, dict) else raw
    try:
        items = [(str(k), v) for k, v in pairs]
    except (TypeError, ValueError):
        raise entry.fail(f"'limits' must be an object, got {raw!r}") from None
    try:
        return [LimitRecord(kind, owner, name, validate_limit(kind, name, value)) for name, value in items]
    except LimitError as exc:
        raise entry.fail(str(exc)) from None


def _read_vhost(entry: _Entry) -> VHostRecord:
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
    return VHostRecord(name, description, tags)


def _read_permission(entry: _Entry) -> PermissionRecord:
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


def _skip_reserved(entry: _Entry, kind: str, name: str, transient: bool) -> bool:
    if kind == "exchange" and name == "":
        log.warning("%s: not importing the default exchange", entry.where)
        return True
    if name.startswith("amq."):
        log.warning("%s: skipping a %s whose name begins with 'amq.'", entry.where, kind)
        return True
    if not entry.boolean("durable", True) and not transient:
        log.warning("%s: skipping a non-durable %s (only durable entities are stored)", entry.where, kind)
        return True
    return False


def _read_exchange(entry: _Entry, transient: bool) -> ExchangeRecord | None:
    name = entry.string("name")
    vhost = entry.string("vhost", non_empty=True)
    entry.label(f"exchange '{name}' in vhost '{vhost}'")
    type_ = entry.string("type")
    auto_delete = entry.boolean("auto_delete", False)
    internal = entry.boolean("internal", False)
    arguments = arguments_from_json(entry.item.get("arguments"), entry.where)
    if _skip_reserved(entry, "exchange", name, transient):
        return None
    if type_ not in EXCHANGE_TYPES:
        raise entry.fail(f"unsupported exchange type '{type_}' (supported: {', '.join(EXCHANGE_TYPES)})")
    try:
        parse_exchange_args(decode_arguments(arguments), name, vhost)
    except AMQPError as exc:
        raise entry.fail(exc.text) from None
    return ExchangeRecord(vhost, name, type_, auto_delete, internal, arguments)


def _read_queue(entry: _Entry, transient: bool) -> QueueRecord | None:
    name = entry.string("name", non_empty=True)
    vhost = entry.string("vhost", non_empty=True)
    entry.label(f"queue '{name}' in vhost '{vhost}'")
    auto_delete = entry.boolean("auto_delete", False)
    arguments = arguments_from_json(entry.item.get("arguments"), entry.where)
    if _skip_reserved(entry, "queue", name, transient):
        return None
    args = decode_arguments(arguments)
    queue_type = args.get("x-queue-type", "classic")
    if queue_type == "stream":
        log.warning("%s: skipping a stream (ottermq has classic and quorum queues only)", entry.where)
        return None
    try:
        parse_queue_args(args, name, vhost)
    except AMQPError as exc:
        raise entry.fail(exc.text) from None
    return QueueRecord(vhost, name, auto_delete, arguments)


def _read_binding(entry: _Entry) -> BindingRecord:
    vhost = entry.string("vhost", non_empty=True)
    source = entry.string("source")
    destination = entry.string("destination")
    kind = entry.string("destination_type")
    entry.label(f"binding of {kind} '{destination}' to exchange '{source}' in vhost '{vhost}'")
    if kind not in ("queue", "exchange"):
        raise entry.fail(f"'destination_type' must be 'queue' or 'exchange', got {kind!r}")
    routing_key = entry.string("routing_key", "")
    arguments = arguments_from_json(entry.item.get("arguments"), entry.where)
    return BindingRecord(vhost, source, kind, destination, routing_key, arguments)


def _read_policy(
    entry: _Entry, value: Mapping[str, Any], vhost: str, name: str, operator: bool
) -> PolicyRecord:
    """A policy (``policies`` item, or the ``value`` of an ``operator_policy`` parameter), validated as
    the management API validates it."""
    entry.label(f"{'operator policy' if operator else 'policy'} '{name}' in vhost '{vhost}'")
    try:
        policy = make_policy(
            vhost,
            name,
            value.get("pattern"),
            value.get("definition"),
            value.get("apply-to", "all"),
            value.get("priority", 0),
            operator=operator,
        )
    except PolicyError as exc:
        raise entry.fail(str(exc)) from None
    return PolicyRecord(
        vhost, name, policy.pattern, policy.apply_to, policy.priority, json.dumps(policy.definition), operator
    )


def _read_policies(data: Mapping[str, Any]) -> list[PolicyRecord]:
    """``policies`` and the operator policies among ``parameters`` (other parameters are ignored)."""
    found: dict[tuple[str, str, bool], PolicyRecord] = {}
    for i, item in enumerate(_section(data, "policies")):
        entry = _Entry("policies", i, item)
        vhost, name = entry.string("vhost", non_empty=True), entry.string("name", non_empty=True)
        found[(vhost, name, False)] = _read_policy(entry, item, vhost, name, False)
    ignored = 0
    for i, item in enumerate(_section(data, "parameters")):
        entry = _Entry("parameters", i, item)
        if item.get("component") == VHOST_LIMITS or item.get("component") in COMPONENTS:
            continue  # read by _read_all_limits, _read_parameters
        if item.get("component") != OPERATOR_POLICY:
            ignored += 1
            continue
        vhost, name = entry.string("vhost", non_empty=True), entry.string("name", non_empty=True)
        value = item.get("value")
        if not isinstance(value, dict):
            raise entry.fail(f"'value' must be an object, got {value!r}")
        found[(vhost, name, True)] = _read_policy(entry, value, vhost, name, True)
    if ignored:
        log.warning(
            "definitions: ignoring %d item(s) in 'parameters': runtime parameters other than"
            " operator policies (federation, shovel, vhost limits...) are not implemented",
            ignored,
        )
    return list(found.values())


def policies_to_json(policies: list[PolicyRecord]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(policies, parameters)`` sections in RabbitMQ's export shapes: user policies, and operator
    policies as ``operator_policy`` runtime parameters."""
    users, operators = [], []
    for p in policies:
        value = {
            "pattern": p.pattern,
            "definition": json.loads(p.definition),
            "priority": p.priority,
            "apply-to": p.apply_to,
        }
        if p.operator:
            operators.append({"value": value, "vhost": p.vhost, "component": OPERATOR_POLICY, "name": p.name})
        else:
            users.append(
                {
                    "vhost": p.vhost,
                    "name": p.name,
                    "pattern": p.pattern,
                    "apply-to": p.apply_to,
                    "definition": value["definition"],
                    "priority": p.priority,
                }
            )
    return users, operators


def binding_key(b: BindingRecord) -> tuple[str, str, str, str, str, bytes]:
    """What makes two bindings the same binding."""
    return (b.vhost, b.source, b.destination_kind, b.destination, b.routing_key, b.arguments)


def definitions_from_json(data: Mapping[str, Any], transient: bool = False) -> Definitions:
    """Validate a parsed definitions file and turn it into store records (see the module rules).
    ``transient=True`` keeps non-durable queues and exchanges (for a live import, which declares
    them; the records do not say which were durable).

    Raises:
        DefinitionsError: the first invalid entry, named (``users[1] (user 'bob'): ...``).
    """
    if not isinstance(data, Mapping):
        raise DefinitionsError(f"definitions must be a JSON object, got {type(data).__name__}")
    for section, reason in IGNORED_SECTIONS.items():
        count = len(_section(data, section))
        if count:
            log.warning("definitions: ignoring %d item(s) in '%s': %s", count, section, reason)
    defs = Definitions()
    algorithm = _default_algorithm(data)
    users: dict[str, UserRecord] = {}
    for i, item in enumerate(_section(data, "users")):
        user = _read_user(_Entry("users", i, item), algorithm)
        users[user.name] = user
    vhosts: dict[str, VHostRecord] = {}
    for i, item in enumerate(_section(data, "vhosts")):
        vhost = _read_vhost(_Entry("vhosts", i, item))
        vhosts[vhost.name] = vhost
    perms: dict[tuple[str, str], PermissionRecord] = {}
    for i, item in enumerate(_section(data, "permissions")):
        perm = _read_permission(_Entry("permissions", i, item))
        perms[(perm.user, perm.vhost)] = perm
    defs.users = list(users.values())
    defs.vhosts = list(vhosts.values())
    defs.permissions = list(perms.values())

    skipped: set[tuple[str, str, str]] = set()  # (kind, vhost, name) left out on purpose
    seen: set[tuple[str, str, str]] = set()
    for i, item in enumerate(_section(data, "exchanges")):
        entry = _Entry("exchanges", i, item)
        exchange = _read_exchange(entry, transient)
        key = ("exchange", entry.item["vhost"], entry.item["name"])
        if exchange is None:
            skipped.add(key)
        elif key in seen:
            log.warning("%s: duplicate exchange; the first definition is kept", entry.where)
        else:
            seen.add(key)
            defs.exchanges.append(exchange)
    for i, item in enumerate(_section(data, "queues")):
        entry = _Entry("queues", i, item)
        queue = _read_queue(entry, transient)
        key = ("queue", entry.item["vhost"], entry.item["name"])
        if queue is None:
            skipped.add(key)
        elif key in seen:
            log.warning("%s: duplicate queue; the first definition is kept", entry.where)
        else:
            seen.add(key)
            defs.queues.append(queue)
    bindings: set[tuple[str, str, str, str, str, bytes]] = set()
    for i, item in enumerate(_section(data, "bindings")):
        entry = _Entry("bindings", i, item)
        binding = _read_binding(entry)
        if binding.source == "":
            log.warning("%s: skipping a binding of the default exchange", entry.where)
            continue
        source = ("exchange", binding.vhost, binding.source)
        destination = (binding.destination_kind, binding.vhost, binding.destination)
        if source in skipped or destination in skipped:
            log.warning("%s: skipped with its source or destination", entry.where)
            continue
        identity = binding_key(binding)
        if identity not in bindings:
            bindings.add(identity)
            defs.bindings.append(binding)
    defs.policies = _read_policies(data)
    defs.limits = _read_all_limits(data)
    defs.parameters = _read_parameters(data)
    return defs


def _read_parameters(data: Mapping[str, Any]) -> list[ParameterRecord]:
    """The ``parameters`` of ``COMPONENTS``; the last one of a name wins."""
    found: dict[tuple[str, str, str], ParameterRecord] = {}
    for i, item in enumerate(_section(data, "parameters")):
        if item.get("component") not in COMPONENTS:
            continue
        entry = _Entry("parameters", i, item)
        vhost, name = entry.string("vhost", non_empty=True), entry.string("name", non_empty=True)
        entry.label(f"{item['component']} '{name}' in vhost '{vhost}'")
        if "value" not in item:
            raise entry.fail("'value' is missing")
        found[(vhost, item["component"], name)] = ParameterRecord(
            vhost, item["component"], name, json.dumps(item["value"], separators=(",", ":"))
        )
    return list(found.values())


def parameter_json(p: ParameterRecord) -> dict[str, Any]:
    """A component's parameter in RabbitMQ's export shape."""
    return {"value": json.loads(p.value), "vhost": p.vhost, "component": p.component, "name": p.name}


def _read_all_limits(data: Mapping[str, Any]) -> list[LimitRecord]:
    """Users' ``limits``, vhosts' ``limits`` and ``vhost-limits`` parameters; the last one given wins."""
    found: dict[tuple[str, str, str], LimitRecord] = {}
    for i, item in enumerate(_section(data, "users")):
        entry = _Entry("users", i, item)
        for r in _read_limits(entry, "user", str(item.get("name")), item.get("limits")):
            found[(r.kind, r.owner, r.name)] = r
    for i, item in enumerate(_section(data, "vhosts")):
        entry = _Entry("vhosts", i, item)
        for r in _read_limits(entry, "vhost", str(item.get("name")), item.get("limits")):
            found[(r.kind, r.owner, r.name)] = r
    for i, item in enumerate(_section(data, "parameters")):
        if item.get("component") != VHOST_LIMITS:
            continue
        entry = _Entry("parameters", i, item)
        vhost = entry.string("vhost", non_empty=True)
        entry.label(f"limits of vhost '{vhost}'")
        for r in _read_limits(entry, "vhost", vhost, item.get("value")):
            found[(r.kind, r.owner, r.name)] = r
    return list(found.values())


def limits_of(defs_limits: list[LimitRecord], kind: str, owner: str) -> dict[str, int]:
    return {r.name: r.value for r in defs_limits if r.kind == kind and r.owner == owner}


def vhost_limit_parameters(limits: list[LimitRecord]) -> list[dict[str, Any]]:
    """``vhost-limits`` runtime parameters, as RabbitMQ exports them."""
    owners = sorted({r.owner for r in limits if r.kind == "vhost"})
    return [
        {"value": limits_of(limits, "vhost", v), "vhost": v, "component": VHOST_LIMITS, "name": "limits"}
        for v in owners
    ]


def load_definitions_file(path: str | Path) -> Definitions:
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
    try:
        return definitions_from_json(data)
    except DefinitionsError as exc:
        raise DefinitionsError(f"definitions file {path}: {exc}") from None


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------
def definitions_to_json(defs: Definitions, version: str) -> dict[str, Any]:
    """RabbitMQ 3.10's export shape for ``defs`` (all queues and exchanges are durable).

    Args:
        defs: what to export.
        version: written as ``rabbit_version`` and ``rabbitmq_version``.
    """
    return {
        "rabbit_version": version,
        "rabbitmq_version": version,
        "users": [
            {
                "name": u.name,
                "password_hash": u.password_hash,
                "hashing_algorithm": u.hashing_algorithm,
                "tags": list(u.tags),
                "limits": limits_of(defs.limits, "user", u.name),
            }
            for u in defs.users
        ],
        "vhosts": [
            {
                "name": v.name,
                "limits": [list(kv) for kv in limits_of(defs.limits, "vhost", v.name).items()],
                "metadata": {"description": v.description, "tags": list(v.tags)},
            }
            for v in defs.vhosts
        ],
        "permissions": [
            {"user": p.user, "vhost": p.vhost, "configure": p.configure, "write": p.write, "read": p.read}
            for p in defs.permissions
        ],
        "topic_permissions": [],
        "parameters": policies_to_json(defs.policies)[1]
        + vhost_limit_parameters(defs.limits)
        + [parameter_json(p) for p in defs.parameters],
        "global_parameters": [],
        "policies": policies_to_json(defs.policies)[0],
        "queues": [_queue_json(q) for q in defs.queues],
        "exchanges": [
            {
                "name": x.name,
                "vhost": x.vhost,
                "type": x.type,
                "durable": True,
                "auto_delete": x.auto_delete,
                "internal": x.internal,
                "arguments": arguments_to_json(x.arguments),
            }
            for x in defs.exchanges
        ],
        "bindings": [
            {
                "source": b.source,
                "vhost": b.vhost,
                "destination": b.destination,
                "destination_type": b.destination_kind,
                "routing_key": b.routing_key,
                "arguments": arguments_to_json(b.arguments),
            }
            for b in defs.bindings
        ],
    }


def _queue_json(q: QueueRecord) -> dict[str, Any]:
    arguments = arguments_to_json(q.arguments)
    queue_type = arguments.get("x-queue-type", "classic")
    return {
        "name": q.name,
        "vhost": q.vhost,
        "durable": True,
        "auto_delete": q.auto_delete,
        "arguments": arguments,
        "type": queue_type if isinstance(queue_type, str) else "classic",
    }
