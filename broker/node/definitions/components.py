"""Policies, limits and runtime parameters in definitions files.

Rules:

1. ``policies``: validated as the management API validates them (``vhost/policy.py``; a definition
   may be a list of ``[key, value]`` pairs, as ``rabbitmqctl export_definitions`` writes an operator
   policy's); a policy
   holding a key of a RabbitMQ plugin ottermq does not have (``PLUGIN_POLICY_KEYS``: sharding's) is
   skipped with that reason. Any other invalid policy makes the file invalid (RabbitMQ refuses it).
2. ``parameters`` (``vhost``, ``component``, ``name``, ``value``) go through one table,
   ``COMPONENTS``: ``{component: handler}``. A handler reads one parameter into the definitions to
   apply (``operator_policy``: an operator policy; ``vhost-limits``: the vhost's limits), raises
   ``DefinitionsError`` for an invalid value, or ``Unsupported(reason)`` to have it skipped with
   that reason (``federation-upstream``, ``federation-upstream-set``: their plugin is not here). A
   component missing from the table is skipped as unknown (RabbitMQ refuses the whole file for a
   component whose plugin is not enabled; ottermq applies the rest and says so). ``shovel``: the
   parameter as it is (``Definitions.parameters``), validated by the shovel component when applied
   (``broker/node/parameters.py``; a refused one refuses the file, as RabbitMQ's import fails).
3. Limits: users' ``limits`` (an object), vhosts' ``limits`` (an object, or RabbitMQ 3.10's list of
   pairs) and ``vhost-limits`` parameters, validated as the API does (``broker/node/limits.py``);
   the last one given wins.
4. ``global_parameters``: ottermq has none to set. ``cluster_name`` and any other are skipped with
   the reason; those named ``internal...`` (RabbitMQ's ``internal_cluster_id``, the exporting
   cluster's own identity, which ``rabbitmqctl export_definitions`` leaves out as internal) are
   counted as unchanged: this broker keeps its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ottermq.persistence.store import Definitions, LimitRecord, ParameterRecord, PolicyRecord
from ottermq.vhost.policy import PolicyError, make_policy

from ..limits import LimitError
from ..limits import validate as validate_limit
from .entry import Entry, entries
from .report import ImportReport

OPERATOR_POLICY = "operator_policy"  # the ``parameters`` component of operator policies
VHOST_LIMITS = "vhost-limits"  # the ``parameters`` component of vhost limits
PLUGIN_POLICY_KEYS = {"shards-per-node": "sharding", "routing-key": "sharding"}
"""Policy keys of RabbitMQ plugins ottermq does not have (rule 1)."""


class Unsupported(Exception):
    """A parameter (or policy) ottermq cannot apply: skipped with ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Parameter:
    """One item of ``parameters``; ``entry`` makes errors name it."""

    entry: Entry
    vhost: str
    component: str
    name: str
    value: Any


Handler = Callable[[Parameter, Definitions], None]


def read_policy(
    entry: Entry, value: Mapping[str, Any], vhost: str, name: str, operator: bool
) -> PolicyRecord:
    """Rule 1 for a policy (a ``policies`` item, or an ``operator_policy`` parameter's ``value``).

    Raises:
        Unsupported: a key of a plugin ottermq does not have.
        DefinitionsError: any other invalid policy.
    """
    entry.label(f"{'operator policy' if operator else 'policy'} '{name}' in vhost '{vhost}'")
    definition = value.get("definition")
    if isinstance(definition, list) and all(isinstance(p, list) and len(p) == 2 for p in definition):
        definition = {str(k): v for k, v in definition}  # rabbitmqctl's export of an operator policy
    if isinstance(definition, dict):
        for key in sorted(definition):
            if key in PLUGIN_POLICY_KEYS:
                raise Unsupported(
                    f"the {PLUGIN_POLICY_KEYS[key]} plugin's policy key '{key}' is not supported"
                )
    try:
        policy = make_policy(
            vhost,
            name,
            value.get("pattern"),
            definition,
            value.get("apply-to", "all"),
            value.get("priority", 0),
            operator=operator,
        )
    except PolicyError as exc:
        raise entry.fail(str(exc)) from None
    return PolicyRecord(
        vhost, name, policy.pattern, policy.apply_to, policy.priority, json.dumps(policy.definition), operator
    )


def read_limits(entry: Entry, kind: str, owner: str, raw: Any) -> list[LimitRecord]:
    """``limits`` of a user (an object) or of a vhost (an object, or RabbitMQ 3.10's list of pairs).

    Raises:
        DefinitionsError: not an object, an unknown limit or a value that is no integer.
    """
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


def _operator_policy(param: Parameter, defs: Definitions) -> None:
    if not isinstance(param.value, dict):
        raise param.entry.fail(f"'value' must be an object, got {param.value!r}")
    defs.policies.append(read_policy(param.entry, param.value, param.vhost, param.name, True))


def _vhost_limits(param: Parameter, defs: Definitions) -> None:
    param.entry.label(f"limits of vhost '{param.vhost}'")
    defs.limits += read_limits(param.entry, "vhost", param.vhost, param.value)


def _component(param: Parameter, defs: Definitions) -> None:
    """A parameter applied by its component (``shovel``): kept as it is."""
    if param.value is None:
        raise param.entry.fail("'value' is missing")
    value = json.dumps(param.value, separators=(",", ":"))
    defs.parameters.append(ParameterRecord(param.vhost, param.component, param.name, value))


def _not_here(reason: str) -> Handler:
    def handler(_param: Parameter, _defs: Definitions) -> None:
        raise Unsupported(reason)

    return handler


COMPONENTS: dict[str, Handler] = {
    OPERATOR_POLICY: _operator_policy,
    VHOST_LIMITS: _vhost_limits,
    "shovel": _component,
    "federation-upstream": _not_here("federation is not supported"),
    "federation-upstream-set": _not_here("federation is not supported"),
}
"""Rule 2: how each ``parameters`` component is imported."""


def read_policies(data: Mapping[str, Any], defs: Definitions, report: ImportReport) -> None:
    """Rule 1 for the ``policies`` section, into ``defs.policies``."""
    for entry in entries(data, "policies"):
        vhost, name = entry.string("vhost", non_empty=True), entry.string("name", non_empty=True)
        try:
            defs.policies.append(read_policy(entry, entry.item, vhost, name, False))
        except Unsupported as exc:
            report.skip("policies", exc.reason, vhost=vhost, name=name)


def read_parameters(data: Mapping[str, Any], defs: Definitions, report: ImportReport) -> None:
    """Rules 2 and 3: users' and vhosts' limits, then every parameter through ``COMPONENTS``; then
    the last policy and the last limit given of each name are kept."""
    for kind, key in (("user", "users"), ("vhost", "vhosts")):
        for entry in entries(data, key):
            defs.limits += read_limits(entry, kind, str(entry.item.get("name")), entry.item.get("limits"))
    for entry in entries(data, "parameters"):
        param = Parameter(
            entry,
            entry.string("vhost", non_empty=True),
            entry.string("component", non_empty=True),
            entry.string("name"),
            entry.item.get("value"),
        )
        handler = COMPONENTS.get(param.component)
        try:
            if handler is None:
                raise Unsupported(f"unknown component '{param.component}'")
            handler(param, defs)
        except Unsupported as exc:
            report.skip(
                "parameters", exc.reason, vhost=param.vhost, component=param.component, name=param.name
            )
    policies = {(p.vhost, p.name, p.operator): p for p in defs.policies}
    defs.policies = list(policies.values())
    limits = {(r.kind, r.owner, r.name): r for r in defs.limits}
    defs.limits = list(limits.values())
    parameters = {(p.vhost, p.component, p.name): p for p in defs.parameters}
    defs.parameters = list(parameters.values())


def read_global_parameters(data: Mapping[str, Any], report: ImportReport) -> None:
    """Rule 4."""
    for entry in entries(data, "global_parameters"):
        name = entry.string("name", non_empty=True)
        if name.startswith("internal"):
            report.kept("global_parameters")
        elif name == "cluster_name":
            report.skip(
                "global_parameters",
                "global parameters are not supported: the cluster name is the node's name",
                name=name,
            )
        else:
            report.skip("global_parameters", "global parameters are not supported", name=name)
