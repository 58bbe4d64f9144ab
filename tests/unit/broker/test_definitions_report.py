"""What a definitions import reports (``broker/node/definitions/report.py``): each kind of item ottermq
cannot import, skipped with its reason while the rest is applied; the ``parameters`` component table;
the counts; the report's JSON, lines and the joining of workers' reports.

The whole RabbitMQ 3.10.8 export (``rabbitmq_3_10_8_everything*.json``, built by
``e2e/test_definitions_everything.py``) is checked end to end there; here each case is one item."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from ottermq.broker.config import Settings
from ottermq.broker.node.definitions import (
    DefinitionsError,
    ImportReport,
    Skipped,
    arguments_from_json,
    definitions_from_json,
)
from ottermq.broker.node.definitions.arguments import Unencodable
from ottermq.broker.node.definitions.components import COMPONENTS, Parameter
from ottermq.broker.node.node import Node
from ottermq.persistence.archive import NullArchive
from ottermq.persistence.memory import MemoryStore
from ottermq.persistence.store import Definitions

HERE = Path(__file__).parent
V = {"vhosts": [{"name": "v"}]}


def queue(name: str = "q", **fields: Any) -> dict[str, Any]:
    return {"name": name, "vhost": "v", "durable": True, "auto_delete": False, "arguments": {}, **fields}


def exchange(name: str = "x", **fields: Any) -> dict[str, Any]:
    return {"name": name, "vhost": "v", "type": "direct", "durable": True, "arguments": {}, **fields}


def binding(source: str = "x", destination: str = "q", **fields: Any) -> dict[str, Any]:
    names = {"source": source, "vhost": "v", "destination": destination, "destination_type": "queue"}
    return {**names, "routing_key": "k", "arguments": {}, **fields}


def parameter(component: str, name: str = "p", value: Any = None) -> dict[str, Any]:
    return {"vhost": "v", "component": component, "name": name, "value": value or {}}


def skipped_of(data: dict[str, Any], transient: bool = True) -> list[dict[str, str]]:
    report = ImportReport()
    definitions_from_json({**V, **data}, transient, report)
    return [item.to_json() for item in report.skipped]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {
                "topic_permissions": [
                    {"user": "u", "vhost": "v", "exchange": "amq.topic", "write": "", "read": ""}
                ]
            },
            [
                (
                    "topic_permissions",
                    {"user": "u", "vhost": "v", "exchange": "amq.topic"},
                    "topic permissions",
                )
            ],
        ),
        (
            {"global_parameters": [{"name": "cluster_name", "value": "c"}, {"name": "g", "value": 1}]},
            [
                ("global_parameters", {"name": "cluster_name"}, "global parameters are not supported: the"),
                ("global_parameters", {"name": "g"}, "global parameters are not supported"),
            ],
        ),
        ({"global_parameters": [{"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-x"}]}, []),
        (
            {"vhosts": [{"name": "v", "metadata": {"default_queue_type": "quorum"}}]},
            [("vhosts", {"name": "v"}, "default queue type 'quorum' is not supported: the vhost is created")],
        ),
        ({"vhosts": [{"name": "v", "metadata": {"default_queue_type": "classic"}}]}, []),
        (
            {"exchanges": [exchange(type="x-random")]},
            [("exchanges", {"vhost": "v", "name": "x"}, "exchange type 'x-random' is not supported")],
        ),
        (
            {"queues": [queue(arguments={"x-queue-type": "stream"})]},
            [("queues", {"vhost": "v", "name": "q"}, "stream queues are not supported")],
        ),
        (
            {"queues": [queue(type="stream")]},  # rabbitmqctl's export names the type
            [("queues", {"vhost": "v", "name": "q"}, "stream queues are not supported")],
        ),
        (
            {"queues": [queue(arguments={"huge": 2**64})]},
            [
                (
                    "queues",
                    {"vhost": "v", "name": "q"},
                    "arguments 'huge' 18446744073709551616 is out of range",
                )
            ],
        ),
        (
            {"exchanges": [exchange(arguments={"deep": 1.5, "n": [[[[{"a": 2**63}]]]]})]},
            [
                (
                    "exchanges",
                    {"vhost": "v", "name": "x"},
                    "arguments 'n'[0][0][0][0].a 9223372036854775808 is",
                )
            ],
        ),
        (
            {
                "exchanges": [exchange()],
                "queues": [queue()],
                "bindings": [binding(arguments={"b": -(2**64)})],
            },
            [
                (
                    "bindings",
                    {
                        "vhost": "v",
                        "source": "x",
                        "destination": "q",
                        "destination_type": "queue",
                        "routing_key": "k",
                    },
                    "arguments 'b' -18446744073709551616 is out of range",
                )
            ],
        ),
        (
            {"policies": [{"vhost": "v", "name": "s", "pattern": ".", "definition": {"shards-per-node": 2}}]},
            [("policies", {"vhost": "v", "name": "s"}, "the sharding plugin's policy key 'shards-per-node'")],
        ),
        (
            {"parameters": [parameter("federation-upstream", "u", {"uri": "amqp://"})]},
            [
                (
                    "parameters",
                    {"vhost": "v", "component": "federation-upstream", "name": "u"},
                    "federation is not",
                )
            ],
        ),
        (
            {"parameters": [parameter("federation-upstream-set", "s", [{"upstream": "u"}])]},
            [
                (
                    "parameters",
                    {"vhost": "v", "component": "federation-upstream-set", "name": "s"},
                    "federation",
                )
            ],
        ),
        (
            {"parameters": [parameter("mqtt-port-to-vhost-mapping", "m")]},
            [
                (
                    "parameters",
                    {"vhost": "v", "component": "mqtt-port-to-vhost-mapping", "name": "m"},
                    "unknown component 'mqtt-port-to-vhost-mapping'",
                )
            ],
        ),
    ],
)
def test_what_is_skipped_and_why(
    data: dict[str, Any], expected: list[tuple[str, dict[str, str], str]]
) -> None:
    found = skipped_of(data)
    assert [
        (item["section"], {k: v for k, v in item.items() if k not in ("section", "reason")}) for item in found
    ] == [(section, names) for section, names, _reason in expected]
    for item, (_section, _names, reason) in zip(found, expected, strict=True):
        assert item["reason"].startswith(reason), item["reason"]


def test_invalid_items_still_refuse_the_file() -> None:
    """What RabbitMQ refuses the whole file for is refused whole (nothing is applied)."""
    for data in (
        {"queues": [queue(arguments={"x-max-length": "ten"})]},
        {"queues": [queue(arguments={"k": "\ud800"})]},  # not Unicode text: not a value RabbitMQ keeps
        {
            "parameters": [
                parameter("operator_policy", "p", {"pattern": ".", "definition": {"ha-mode": "all"}})
            ]
        },
        {"parameters": [{"vhost": "v", "component": 5, "name": "p", "value": {}}]},
        {"topic_permissions": ["not an object"]},
    ):
        with pytest.raises(DefinitionsError):
            definitions_from_json({**V, **data}, True, ImportReport())


def test_unencodable_arguments_are_told_apart_from_invalid_ones() -> None:
    with pytest.raises(Unencodable) as info:
        arguments_from_json({"n": 2**64}, "here")
    assert info.value.reason.endswith("(AMQP cannot carry it)")
    with pytest.raises(DefinitionsError) as bad:
        arguments_from_json([1], "here")
    assert not isinstance(bad.value, Unencodable)


def test_an_operator_policy_as_rabbitmqctl_exports_it() -> None:
    """``rabbitmqctl export_definitions`` writes its definition as ``[key, value]`` pairs."""
    value = {"pattern": "^a", "definition": [["max-length", 10], ["message-ttl", 5]], "apply-to": "queues"}
    defs = definitions_from_json({**V, "parameters": [parameter("operator_policy", "op", value)]})
    [policy] = defs.policies
    assert (policy.name, policy.operator, json.loads(policy.definition)) == (
        "op",
        True,
        {"max-length": 10, "message-ttl": 5},
    )


def test_the_component_table_is_where_a_component_plugs_in(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Parameter] = []

    def shovel(param: Parameter, defs: Definitions) -> None:
        seen.append(param)

    monkeypatch.setitem(COMPONENTS, "shovel", shovel)
    report = ImportReport()
    definitions_from_json(
        {**V, "parameters": [parameter("shovel", "s", {"src-uri": "amqp://"})]}, True, report
    )
    assert [(p.vhost, p.component, p.name, p.value) for p in seen] == [
        ("v", "shovel", "s", {"src-uri": "amqp://"})
    ]
    assert report.complete


def test_a_shovel_parameter_is_read_as_it_is_for_the_shovel_component_to_validate() -> None:
    report = ImportReport()
    defs = definitions_from_json(
        {**V, "parameters": [parameter("shovel", "s", {"src-uri": "amqp://"})]}, True, report
    )
    assert [(p.vhost, p.component, p.name, json.loads(p.value)) for p in defs.parameters] == [
        ("v", "shovel", "s", {"src-uri": "amqp://"})
    ]
    assert report.complete


def test_internal_global_parameters_count_as_unchanged() -> None:
    report = ImportReport()
    definitions_from_json(
        {"global_parameters": [{"name": "internal_cluster_id", "value": "x"}]}, True, report
    )
    assert (report.unchanged["global_parameters"], report.complete) == (1, True)


def apply(data: dict[str, Any]) -> ImportReport:
    """``data`` read and applied to a fresh node, as a start-up file is."""
    report = ImportReport()
    defs = definitions_from_json(data, True, report)

    async def run() -> None:
        settings = Settings(_env_file=None, vhosts=[])  # type: ignore[call-arg]
        node = Node(settings, asyncio.get_running_loop(), MemoryStore(), NullArchive())
        try:
            await node.open(defs, report=report)
        finally:
            node.stop()

    asyncio.run(run())
    return report


def test_a_refused_binding_is_skipped_and_the_rest_applied() -> None:
    """As RabbitMQ's import skips a binding it refuses; ottermq names it."""
    chash = exchange("h", type="x-consistent-hash")
    report = apply(
        {
            **V,
            "exchanges": [exchange("e" * 256), exchange("x"), chash],
            "queues": [queue("q")],
            "bindings": [
                binding("e" * 256, "q"),
                binding("x", "q"),
                binding("x", "nowhere"),
                binding("h", "q"),
            ],
        }
    )
    assert [(s.section, s.reason) for s in report.skipped] == [
        ("exchanges", "an exchange name longer than 255 octets cannot be used over AMQP"),
        ("bindings", f"its source exchange '{'e' * 256}' is skipped"),
        ("bindings", "no such queue 'nowhere'"),
        ("bindings", 'The binding key must be an integer: <<"k">>'),
    ]
    assert {k: n for k, n in report.applied.items() if n} == {
        "vhosts": 1,
        "exchanges": 2,
        "queues": 1,
        "bindings": 1,
    }


def test_a_refused_declare_refuses_the_file() -> None:
    """RabbitMQ's import fails on an exchange or queue it cannot declare; so does ottermq's."""
    chash = exchange("h", type="x-consistent-hash", arguments={"hash-property": "app_id"})
    with pytest.raises(DefinitionsError, match="Unsupported property: app_id"):
        apply({**V, "exchanges": [chash]})


def test_the_rabbitmq_export_applies_with_its_report() -> None:
    report = apply(json.loads((HERE / "rabbitmq_3_10_8_everything.json").read_text()))
    assert {k: n for k, n in report.applied.items() if n} == {
        "users": 5,
        "vhosts": 3,
        "permissions": 5,
        "policies": 7,
        "operator_policies": 1,
        "limits": 4,
        "parameters": 1,
        "exchanges": 12,
        "queues": 12,
        "bindings": 16,
    }
    assert len(report.skipped) == 19 and all(item.reason for item in report.skipped)


def test_report_json_lines_and_workers_joined() -> None:
    mine = ImportReport()
    mine.done("users", 2)
    mine.done("exchanges")
    mine.kept("queues")
    mine.skip("queues", "stream queues are not supported\n", vhost="v", name="s")
    assert mine.to_json() == {
        "applied": {**dict.fromkeys(mine.applied, 0), "users": 2, "exchanges": 1},
        "unchanged": {**dict.fromkeys(mine.unchanged, 0), "queues": 1},
        "skipped": [
            {"section": "queues", "vhost": "v", "name": "s", "reason": "stream queues are not supported"}
        ],
    }
    assert mine.lines() == [
        "applied 2 users, 1 exchanges; unchanged 1 queues; skipped 1 item(s)",
        "  skipped queues: vhost 'v' name 's': stream queues are not supported",
    ]
    assert ImportReport.from_json(mine.to_json()) == mine
    theirs = ImportReport()  # another worker: the same metadata, its own vhosts' topology
    theirs.done("users", 2)
    theirs.done("queues", 3)
    theirs.skip("queues", "stream queues are not supported", vhost="v", name="s")
    theirs.skip("bindings", "no such queue 'q'", vhost="w", source="x")
    mine.add_topology(ImportReport.from_json(theirs.to_json()))
    assert (mine.applied["users"], mine.applied["queues"], mine.applied["exchanges"]) == (2, 3, 1)
    assert mine.skipped == [
        Skipped("queues", (("vhost", "v"), ("name", "s")), "stream queues are not supported"),
        Skipped("bindings", (("vhost", "w"), ("source", "x")), "no such queue 'q'"),
    ]
    assert ImportReport.from_json({"applied": {"users": True}, "skipped": [1]}) == ImportReport()
    assert ImportReport().summary() == "applied nothing; skipped nothing"
