"""Definitions that always import (issue 41, item 2): a RabbitMQ 3.10.8 export holding every kind of object
it exports, and the odd ones its HTTP API lets through, imported through every way in.

``build`` makes the objects on a running RabbitMQ, through its HTTP API and AMQP: users with every hashing
algorithm and none, tags; vhosts (one with a description, tags and a default queue type, one named with
``/``, ``%`` and Unicode); permissions and topic permissions; policies and an operator policy; vhost and
user limits; global parameters; shovel and federation parameters; classic, quorum and stream queues;
every exchange type the node has (the plugins' random, JMS topic, recent-history, modulus-hash and
consistent-hash too), internal, transient and auto-delete exchanges; exchange-to-exchange bindings; and
what the HTTP API lets through: argument keys over 255 octets on queues, exchanges and bindings, an
exchange name and a routing key over 255 octets, empty and Unicode routing keys, a 2^64 integer,
``1.5e300``, long strings, nested values, AMQP-typed arguments (decimals, timestamps, byte arrays, void)
declared over AMQP. The two exports of it (``GET /api/definitions`` and ``rabbitmqctl
export_definitions``, cut to these objects) are checked in as ``tests/unit/broker/rabbitmq_3_10_8_
everything*.json``; ``test_rabbitmq_exports_the_fixture`` builds and exports it live on RabbitMQ and
compares (``DEFS_WRITE_FIXTURE=1`` writes the files instead).

The shared tests import the fixture into the broker under test and find every object in its export or
named in the answer's ``skipped`` list (RabbitMQ: 204, everything imported). The extension tests check
ottermq's report item by item through every way in (HTTP, ``/api/definitions/{vhost}``, the command line
offline and over HTTP, the start-up file with its log and the overview), and the round trips of
ottermq's own export through ottermq and through RabbitMQ.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import decimal
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from .polling import poll_until
from .test_management_write import q

DATA = Path(__file__).resolve().parents[1] / "tests" / "unit" / "broker"
FIXTURE = DATA / "rabbitmq_3_10_8_everything.json"  # GET /api/definitions
FIXTURE_CTL = DATA / "rabbitmq_3_10_8_everything_rabbitmqctl.json"  # rabbitmqctl export_definitions

V1, V2, V3 = "defs-all", "defs-all/odd %2F ü☃", "defs-all-dqt"
VHOSTS = (V1, V2, V3)
ADMIN, SHA512, MD5, NOPW, UNICODE = (
    "defs-all-admin",
    "defs-all-sha512",
    "defs-all-md5",
    "defs-all-nopw",
    "defs-all-ünï ☃",
)
USERS = (ADMIN, SHA512, MD5, NOPW, UNICODE)
GLOBALS = ("cluster_name", "defs-all-global", "internal_cluster_id")
LONG_KEY = "k" * 300
LONG_NAME = "e" * 300
TYPED = {  # declared over AMQP: types JSON does not have
    "dec": decimal.Decimal("1.25"),
    "ts": datetime.datetime(2020, 1, 2, 3, 4, 5),
    "bytes": b"\x00\xffraw",
    "void": None,
    "nested": {"ts": datetime.datetime(2021, 1, 1)},
    "arr": [decimal.Decimal("2.5"), b"ab"],
}
ODD_VALUES = {
    "big": 2**63 - 1,
    "neg": -(2**63),
    "float": 1.5e300,
    "tiny": 5e-324,
    "text": "x" * 10000,
    "list": [1, "a", True, [2, {"k": "v"}], 1.5],
    "obj": {"a": {"b": 1}},
    "bool": False,
    "": "empty key",
    "empty_list": [],
    "empty_obj": {},
}


def rabbit_hash(password: str, algorithm: str = "sha256") -> str:
    """RabbitMQ's ``rabbit_password_hashing_*`` hash: base64(salt + H(salt + password))."""
    salt = os.urandom(4)
    return base64.b64encode(salt + hashlib.new(algorithm, salt + password.encode()).digest()).decode()


Api = Callable[..., tuple[int, Any]]


def _ok(answer: tuple[int, Any], what: str) -> None:
    assert answer[0] in (200, 201, 204), (what, answer)


def build(api: Api, params: Callable[..., pika.ConnectionParameters]) -> None:
    """Every object of the fixture, made on RabbitMQ (see the module docstring)."""
    v1, v2 = q(V1), q(V2)

    def put(path: str, body: Any) -> None:
        _ok(api(path, "PUT", body), path)

    # vhosts: the default queue type is set only by a definitions import in 3.10.8 (not by PUT)
    metadata = {"description": "default queue type quorum", "tags": ["dqt"], "default_queue_type": "quorum"}
    _ok(api("/api/definitions", "POST", {"vhosts": [{"name": V3, "metadata": metadata}]}), "vhost " + V3)
    put(f"/api/vhosts/{v1}", {"description": "every kind of object", "tags": "a,b"})
    put(f"/api/vhosts/{v2}", {})
    # users: every hashing algorithm, no password, tags
    put(f"/api/users/{ADMIN}", {"password": "admin-pw", "tags": "administrator"})
    put(
        f"/api/users/{SHA512}",
        {
            "password_hash": rabbit_hash("sha512-pw", "sha512"),
            "hashing_algorithm": "rabbit_password_hashing_sha512",
            "tags": "monitoring,policymaker",
        },
    )
    md5 = {"password_hash": rabbit_hash("md5-pw", "md5"), "hashing_algorithm": "rabbit_password_hashing_md5"}
    put(f"/api/users/{MD5}", {**md5, "tags": "management"})
    put(f"/api/users/{NOPW}", {"password_hash": "", "tags": ""})
    put(f"/api/users/{q(UNICODE)}", {"password": "ü-pw", "tags": "impersonator,custom-tag"})
    for vhost in VHOSTS:
        put(f"/api/permissions/{q(vhost)}/{ADMIN}", {"configure": ".*", "write": ".*", "read": ".*"})
    put(f"/api/permissions/{v1}/{SHA512}", {"configure": "^$", "write": "^defs\\.(a|b)$", "read": ".*"})
    put(f"/api/permissions/{v2}/{q(UNICODE)}", {"configure": "", "write": "ü", "read": "^$"})
    put(f"/api/topic-permissions/{v1}/{SHA512}", {"exchange": "amq.topic", "write": "^a", "read": ".*"})
    put(f"/api/topic-permissions/{v1}/{ADMIN}", {"exchange": "topic", "write": ".*", "read": "^x"})
    # limits and global parameters
    put(f"/api/user-limits/{SHA512}/max-connections", {"value": 5})
    put(f"/api/user-limits/{SHA512}/max-channels", {"value": 10})
    put(f"/api/vhost-limits/{v1}/max-connections", {"value": 100})
    put(f"/api/vhost-limits/{v1}/max-queues", {"value": 1000})
    put("/api/global-parameters/cluster_name", {"name": "cluster_name", "value": "defs-all-cluster"})
    put("/api/global-parameters/defs-all-global", {"name": "defs-all-global", "value": {"n": [1, "two", {}]}})
    # queues
    classic = {
        "x-message-ttl": 60000,
        "x-expires": 86400000,
        "x-max-length": 1000,
        "x-max-length-bytes": 1048576,
        "x-overflow": "reject-publish",
        "x-dead-letter-exchange": "direct",
        "x-dead-letter-routing-key": "dead",
        "x-max-priority": 10,
        "x-queue-mode": "lazy",
        "x-single-active-consumer": True,
        "x-queue-master-locator": "min-masters",
    }
    quorum = {
        "x-queue-type": "quorum",
        "x-delivery-limit": 5,
        "x-dead-letter-exchange": "direct",
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-max-in-memory-length": 10,
    }
    stream = {"x-queue-type": "stream", "x-max-age": "1D", "x-stream-max-segment-size-bytes": 1000000}
    queues: list[tuple[str, str, dict[str, Any]]] = [
        (V1, "classic.args", {"durable": True, "arguments": classic}),
        (V1, "classic.transient", {"durable": False}),
        (V1, "classic.autodelete", {"durable": True, "auto_delete": True}),
        (V1, "quorum", {"durable": True, "arguments": quorum}),
        (V1, "stream", {"durable": True, "arguments": stream}),
        (V1, "dé.ü ☃/%2F", {"durable": True}),
        (V1, "long-key", {"durable": True, "arguments": {LONG_KEY: "v", "x-message-ttl": 1000}}),
        (V1, "odd-values", {"durable": True, "arguments": ODD_VALUES}),
        (V1, "huge-int", {"durable": True, "arguments": {"huge": 2**64}}),
        (V1, "shovel.src", {"durable": True}),
        (V1, "shovel.dst", {"durable": True}),
        (V2, "q/ü%2F", {"durable": True, "arguments": {"x-max-length": 7}}),
        (V3, "plain", {"durable": True}),  # quorum: the vhost's default queue type
    ]
    for vhost, name, body in queues:
        put(f"/api/queues/{q(vhost)}/{q(name)}", body)
    # exchanges: every type the node has, internal, transient, auto-delete, odd names and arguments
    exchanges: list[tuple[str, str, dict[str, Any]]] = [
        (V1, "direct", {"type": "direct"}),
        (V1, "fanout", {"type": "fanout"}),
        (V1, "topic", {"type": "topic", "arguments": {"alternate-exchange": "fanout"}}),
        (V1, "headers", {"type": "headers"}),
        (V1, "transient", {"type": "direct", "durable": False}),
        (V1, "autodelete", {"type": "fanout", "auto_delete": True}),
        (V1, "internal", {"type": "topic", "internal": True}),
        (V1, "chash", {"type": "x-consistent-hash", "arguments": {"hash-header": "h"}}),
        (V1, "random", {"type": "x-random"}),
        (V1, "jms", {"type": "x-jms-topic"}),
        (V1, "recent", {"type": "x-recent-history", "arguments": {"x-recent-history-length": 10}}),
        (V1, "modulus", {"type": "x-modulus-hash"}),
        (V1, "long-key-x", {"type": "direct", "arguments": {LONG_KEY: 1}}),
        (V1, "é/x%2F ☃", {"type": "topic"}),
        (V1, LONG_NAME, {"type": "direct"}),
        (V2, "x/ü%2F", {"type": "direct"}),
    ]
    for vhost, name, body in exchanges:
        put(f"/api/exchanges/{q(vhost)}/{q(name)}", {"durable": True, **body})
    # bindings
    bindings: list[tuple[str, str, str, str, str, dict[str, Any]]] = [
        (V1, "direct", "q", "classic.args", "rk", {}),
        (V1, "direct", "q", "dé.ü ☃/%2F", "", {}),
        (V1, "direct", "q", "dé.ü ☃/%2F", "ü☃/%2F", {}),
        (V1, "direct", "q", "classic.args", "r" * 300, {}),
        (V1, "direct", "q", "long-key", "long", {LONG_KEY: True}),
        (V1, "topic", "q", "quorum", "a.#", {}),
        (V1, "fanout", "q", "stream", "", {}),
        (V1, "headers", "q", "classic.transient", "", {"x-match": "any", "h": "v", "n": 1}),
        (V1, "topic", "e", "fanout", "e2e.#", {}),
        (V1, "topic", "e", "internal", "to.internal", {}),
        (V1, "internal", "q", "odd-values", "#", {}),
        (V1, "chash", "q", "classic.args", "10", {}),
        (V1, "random", "q", "classic.args", "", {}),
        (V1, "jms", "q", "classic.args", "", {}),
        (V1, "recent", "q", "classic.args", "", {}),
        (V1, "modulus", "q", "classic.args", "", {}),
        (V1, "amq.direct", "q", "classic.args", "from-amq", {}),
        (V1, "autodelete", "q", "classic.args", "", {}),
        (V1, "long-key-x", "e", "direct", "", {}),
        (V1, LONG_NAME, "q", "classic.args", "", {}),
        (V2, "x/ü%2F", "q", "q/ü%2F", "ü", {}),
    ]
    for vhost, source, kind, destination, key, arguments in bindings:
        path = f"/api/bindings/{q(vhost)}/e/{q(source)}/{kind}/{q(destination)}"
        _ok(api(path, "POST", {"routing_key": key, "arguments": arguments}), path)
    # over AMQP: arguments of the types JSON does not have
    with pika.BlockingConnection(params(virtual_host=V1)) as connection:
        channel = connection.channel()
        channel.queue_declare("amqp-typed", durable=True, arguments=TYPED)
        channel.exchange_declare("amqp-typed-x", "headers", durable=True, arguments=TYPED)
        binding = {
            "x-match": "all",
            "ts": datetime.datetime(2020, 1, 2),
            "dec": decimal.Decimal("3.5"),
            "v": None,
        }
        channel.queue_bind("amqp-typed", "amqp-typed-x", "", arguments=binding)
    # policies, an operator policy, runtime parameters of every component the node has
    policies = [
        ("ttl-dlx", "^classic\\.", "queues", {"message-ttl": 1000, "dead-letter-exchange": "direct"}, 1),
        ("ae", "^topic$", "exchanges", {"alternate-exchange": "fanout"}, 0),
        ("all-max", "^nothing-matches$", "all", {"max-length": 5, "queue-mode": "lazy"}, 2),
        ("federated", "^defs-none$", "all", {"federation-upstream-set": "all"}, 0),
        ("sharded", "^defs-none$", "exchanges", {"shards-per-node": 1, "routing-key": "k"}, 0),
        ("quorum", "^quorum$", "queues", {"delivery-limit": 10, "max-length": 100}, 3),
        ("stream", "^stream$", "queues", {"max-age": "2D"}, 4),
    ]
    for name, pattern, apply_to, definition, priority in policies:
        body = {"pattern": pattern, "apply-to": apply_to, "definition": definition, "priority": priority}
        put(f"/api/policies/{v1}/{name}", body)
    put(
        f"/api/policies/{v2}/{q('ü-policy')}",
        {"pattern": "ü", "definition": {"max-length": 1}, "apply-to": "queues"},
    )
    cap = {"max-length": 10000, "message-ttl": 3600000}
    put(
        f"/api/operator-policies/{v1}/op-cap",
        {"pattern": "^classic", "definition": cap, "apply-to": "queues"},
    )
    shovel = {
        "src-uri": "amqp://",
        "src-queue": "shovel.src",
        "dest-uri": "amqp://",
        "dest-queue": "shovel.dst",
    }
    put(f"/api/parameters/shovel/{v1}/to-dst", {"value": shovel})
    upstream = {"uri": "amqp://127.0.0.1:5672", "expires": 3600000, "max-hops": 2}
    put(f"/api/parameters/federation-upstream/{v1}/upstream", {"value": upstream})


def add_upstream_set(api: Api) -> None:
    """A federation upstream set: after ``rabbitmqctl export_definitions``, which fails on one in 3.10.8
    (``badarg`` in ``maps:from_list``: the value is a list)."""
    _ok(
        api(
            f"/api/parameters/federation-upstream-set/{q(V1)}/set",
            "PUT",
            {"value": [{"upstream": "upstream"}]},
        ),
        "set",
    )


def ours(definitions: dict[str, Any]) -> dict[str, Any]:
    """Only the fixture's objects of an export (another broker holds other things too)."""
    kept: dict[str, Any] = {}
    for key, value in definitions.items():
        if not isinstance(value, list):
            kept[key] = value
        elif key in ("users",):
            kept[key] = [u for u in value if u["name"] in USERS]
        elif key == "vhosts":
            kept[key] = [v for v in value if v["name"] in VHOSTS]
        elif key in ("permissions", "topic_permissions"):
            kept[key] = [p for p in value if p["user"] in USERS and p["vhost"] in VHOSTS]
        elif key == "global_parameters":
            kept[key] = [p for p in value if p["name"] in GLOBALS]
        else:
            kept[key] = [item for item in value if item.get("vhost") in VHOSTS]
    return kept


def normal(definitions: dict[str, Any]) -> dict[str, Any]:
    """What must be equal between two exports of the same objects: each section as a sorted list of
    canonical JSON, with salted password hashes and the cluster's own id left out."""
    out: dict[str, Any] = {}
    for key, value in definitions.items():
        if not isinstance(value, list):
            continue
        items = []
        for item in value:
            item = dict(item)
            if key == "users":
                item["password_hash"] = "" if item.get("password_hash") == "" else "(hash)"
            if key == "global_parameters" and item.get("name") == "internal_cluster_id":
                item["value"] = "(id)"
            items.append(json.dumps(item, sort_keys=True))
        out[key] = sorted(items)
    return out


def rabbitmqctl(*args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        ["rabbitmqctl", *args], input=stdin, text=True, capture_output=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"rabbitmqctl {' '.join(args)}: {result.stderr or result.stdout}"
    return result.stdout


def delete_everything(api: Api) -> None:
    """The fixture's objects gone from a broker (what is not there answers 404)."""
    for vhost in VHOSTS:
        api(f"/api/vhosts/{q(vhost)}", "DELETE")
    for user in USERS:
        api(f"/api/users/{q(user)}", "DELETE")


@pytest.fixture
def rabbitmq(broker) -> Iterator[Api]:
    """The local RabbitMQ (``make conformance``), kept clean (``kept_clean``)."""
    if broker.is_ottermq or shutil.which("rabbitmqctl") is None:
        pytest.skip("builds the fixture on a local RabbitMQ with rabbitmqctl (make conformance)")
    with kept_clean(broker.api):
        yield broker.api


def test_rabbitmq_exports_the_fixture(rabbitmq, broker):
    build(rabbitmq, broker.params)
    by_ctl = ours(json.loads(rabbitmqctl("export_definitions", "-")))
    add_upstream_set(rabbitmq)
    exported = ours(rabbitmq("/api/definitions")[1])
    if os.environ.get("DEFS_WRITE_FIXTURE"):
        for path, data in ((FIXTURE, exported), (FIXTURE_CTL, by_ctl)):
            path.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    assert normal(exported) == normal(json.loads(FIXTURE.read_text()))
    assert normal(by_ctl) == normal(json.loads(FIXTURE_CTL.read_text()))


# ---------------------------------------------------------------------------------------------------------
# the fixture imported into the broker under test
# ---------------------------------------------------------------------------------------------------------
NAMES = {  # what names an item of each section (and a skipped item of it)
    "users": ("name",),
    "vhosts": ("name",),
    "permissions": ("user", "vhost"),
    "topic_permissions": ("user", "vhost", "exchange"),
    "parameters": ("vhost", "component", "name"),
    "global_parameters": ("name",),
    "policies": ("vhost", "name"),
    "queues": ("vhost", "name"),
    "exchanges": ("vhost", "name"),
    "bindings": ("vhost", "source", "destination", "destination_type", "routing_key"),
}


def comparable(section: str, item: dict[str, Any]) -> dict[str, str]:
    """An item's fields as canonical JSON, without what differs between two brokers holding the same
    object (each cluster's own id), an operator policy's definition as an object (``rabbitmqctl`` writes
    it as a list of pairs)."""
    item = copy.deepcopy(item)
    if section == "global_parameters" and item.get("name") == "internal_cluster_id":
        item["value"] = "(each cluster's own)"
    value = item.get("value")
    if section == "parameters" and isinstance(value, dict) and isinstance(value.get("definition"), list):
        value["definition"] = dict(value["definition"])
    return {key: json.dumps(field, sort_keys=True) for key, field in item.items()}


def unaccounted(
    fixture: dict[str, Any], exported: dict[str, Any], skipped: list[dict[str, Any]]
) -> list[str]:
    """The fixture's items neither in ``exported`` as they were (in every field both exports have: the
    HTTP API's leaves out a queue's ``type`` and a vhost's metadata, ``rabbitmqctl``'s has them) nor named
    in ``skipped``."""
    problems = []
    for section, fields in NAMES.items():
        there = [comparable(section, e) for e in exported.get(section) or []]
        for item in fixture.get(section) or []:
            mine = comparable(section, item)
            if any(
                all(e[k] == v for k, v in mine.items() if k in e) for e in there if set(fields) <= e.keys()
            ):
                continue
            named = {k: item.get(k) for k in fields}
            if any(s["section"] == section and all(s.get(k) == v for k, v in named.items()) for s in skipped):
                continue
            problems.append(f"{section}: {json.dumps(named, ensure_ascii=False)[:300]}")
    return problems


@contextlib.contextmanager
def kept_clean(api: Api) -> Iterator[None]:
    """The fixture's objects removed from a broker before and after, and the global parameters an
    import sets put back (RabbitMQ's; ottermq has none: those answers are 404)."""
    kept = {name: api(f"/api/global-parameters/{name}") for name in GLOBALS}
    delete_everything(api)
    try:
        yield
    finally:
        delete_everything(api)
        for name, (status, answer) in kept.items():
            if status == 200:
                api(f"/api/global-parameters/{name}", "PUT", {"name": name, "value": answer["value"]})
            else:
                api(f"/api/global-parameters/{name}", "DELETE")


@pytest.fixture
def clean(broker) -> Iterator[None]:
    """``kept_clean`` around a test, on the broker under test."""
    with kept_clean(broker.api):
        yield


def imported(broker, fixture: Path, path: str = "/api/definitions") -> list[dict[str, Any]]:
    """``fixture`` posted to ``path``; what the answer says was skipped (each with a reason), after
    checking that every other object of it is in the broker's export."""
    data = json.loads(fixture.read_text())
    status, answer = broker.api(path, "POST", data)
    assert status in (200, 204), answer
    skipped: list[dict[str, Any]] = answer["skipped"] if status == 200 else []
    assert all(item["reason"] for item in skipped)
    problems = unaccounted(data, broker.api("/api/definitions")[1], skipped)
    assert not problems, "\n".join(problems)
    return skipped


def test_every_object_is_imported_or_named_in_the_answer(broker, clean):
    """RabbitMQ imports its own export whole (204); ottermq applies what it can and names the rest,
    each with a reason, in a 200 answer."""
    imported(broker, FIXTURE)


@pytest.mark.extension  # RabbitMQ 3.10.8 refuses it: 400 an operator policy "definition must be a dictionary"
def test_rabbitmqctl_s_export_imports_too(broker, clean):
    """``rabbitmqctl export_definitions`` writes an operator policy's definition as a list of pairs,
    which RabbitMQ's own import then refuses; ottermq reads it."""
    skipped = imported(broker, FIXTURE_CTL)
    assert {(s["section"], s.get("name")) for s in skipped} >= {
        ("vhosts", V3),
        ("global_parameters", "cluster_name"),
    }


# ---------------------------------------------------------------------------------------------------------
# ottermq's answer, through every way in
# ---------------------------------------------------------------------------------------------------------
TYPES = "direct, fanout, topic, headers, x-delayed-message, x-message-deduplication, x-consistent-hash"
FEDERATION = "federation is not supported"


def _x(name: str, reason: str) -> dict[str, str]:
    return {"section": "exchanges", "vhost": V1, "name": name, "reason": reason}


def _b(source: str, destination: str, reason: str) -> dict[str, str]:
    names = {"source": source, "destination": destination, "destination_type": "queue", "routing_key": ""}
    return {"section": "bindings", "vhost": V1, **names, "reason": reason}


SKIPPED = [  # what ottermq cannot import of FIXTURE, in the answer's order (reading, then applying)
    {
        **{"section": "topic_permissions", "user": ADMIN, "vhost": V1, "exchange": "topic"},
        "reason": "topic permissions are not supported",
    },
    {
        **{"section": "topic_permissions", "user": SHA512, "vhost": V1, "exchange": "amq.topic"},
        "reason": "topic permissions are not supported",
    },
    {
        "section": "global_parameters",
        "name": "cluster_name",
        "reason": "global parameters are not supported: the cluster name is the node's name",
    },
    {
        "section": "global_parameters",
        "name": "defs-all-global",
        "reason": "global parameters are not supported",
    },
    _x("random", f"exchange type 'x-random' is not supported (supported: {TYPES})"),
    _x("jms", f"exchange type 'x-jms-topic' is not supported (supported: {TYPES})"),
    _x(LONG_NAME, "an exchange name longer than 255 octets cannot be used over AMQP"),
    _x("modulus", f"exchange type 'x-modulus-hash' is not supported (supported: {TYPES})"),
    _x("recent", f"exchange type 'x-recent-history' is not supported (supported: {TYPES})"),
    {
        "section": "queues",
        "vhost": V1,
        "name": "huge-int",
        "reason": "arguments 'huge' 18446744073709551616 is out of range: at most 9223372036854775807"
        " (AMQP cannot carry it)",
    },
    {
        "section": "queues",
        "vhost": V1,
        "name": "stream",
        "reason": "stream queues are not supported (ottermq has classic and quorum queues)",
    },
    _b(LONG_NAME, "classic.args", f"its source exchange '{LONG_NAME}' is skipped"),
    _b("fanout", "stream", "its destination queue 'stream' is skipped"),
    _b("modulus", "classic.args", "its source exchange 'modulus' is skipped"),
    _b("random", "classic.args", "its source exchange 'random' is skipped"),
    _b("recent", "classic.args", "its source exchange 'recent' is skipped"),
    {
        "section": "policies",
        "vhost": V1,
        "name": "sharded",
        "reason": "the sharding plugin's policy key 'routing-key' is not supported",
    },
    {
        "section": "parameters",
        "vhost": V1,
        "component": "federation-upstream",
        "name": "upstream",
        "reason": FEDERATION,
    },
    {
        "section": "parameters",
        "vhost": V1,
        "component": "federation-upstream-set",
        "name": "set",
        "reason": FEDERATION,
    },
]
APPLIED = {
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
    "global_parameters": 0,
}
NOTHING = dict.fromkeys(APPLIED, 0)
UNCHANGED = {**NOTHING, "global_parameters": 1}  # internal_cluster_id: each broker keeps its own


@pytest.mark.extension
def test_the_answer_counts_what_was_applied_and_names_what_was_skipped(broker, clean):
    status, answer = broker.api("/api/definitions", "POST", json.loads(FIXTURE.read_text()))
    assert status == 200
    assert answer == {"applied": APPLIED, "unchanged": UNCHANGED, "skipped": SKIPPED}
    status, again = broker.api("/api/definitions", "POST", json.loads(FIXTURE.read_text()))
    assert (status, again["unchanged"]) == (200, {**UNCHANGED, "exchanges": 12, "queues": 12})
    assert again["skipped"] == SKIPPED  # the long-named exchange's binding: still no such exchange


@pytest.mark.extension
def test_nothing_skipped_is_a_204_and_report_true_asks_for_the_counts(broker, clean):
    body = {"vhosts": [{"name": V1}], "queues": [{"name": "q", "vhost": V1, "durable": True}]}
    assert broker.api("/api/definitions", "POST", body) == (204, None)
    counts = {**NOTHING, "vhosts": 1}
    assert broker.api("/api/definitions?report=true", "POST", body) == (
        200,
        {"applied": counts, "unchanged": {**NOTHING, "queues": 1}, "skipped": []},
    )


def test_a_vhost_import_applies_or_names_every_object(broker, clean):
    """``POST /api/definitions/{vhost}``: every queue, exchange, binding, policy and parameter of the
    file is put in that vhost (RabbitMQ 3.10.8: 204)."""
    assert broker.api(f"/api/vhosts/{q(V1)}", "PUT", {})[0] in (201, 204)
    data = json.loads(FIXTURE.read_text())
    scoped = {
        key: [{**item, "vhost": V1} for item in data[key]] for key in ("queues", "exchanges", "bindings")
    }
    scoped |= {key: [{**item, "vhost": V1} for item in data[key]] for key in ("policies", "parameters")}
    scoped["parameters"] = [p for p in scoped["parameters"] if p["component"] != "vhost-limits"]
    status, answer = broker.api(f"/api/definitions/{q(V1)}", "POST", scoped)
    assert status in (200, 204), answer
    skipped = answer["skipped"] if status == 200 else []
    problems = unaccounted(scoped, broker.api("/api/definitions")[1], skipped)
    assert not problems, "\n".join(problems)


def cli(*args: str, data_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``ottermq ARGS`` (``python -m ottermq.broker``), on ``data_dir`` when given."""
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    if data_dir is not None:
        env["OTTERMQ_DATA_DIR"] = str(data_dir)
    done = subprocess.run(
        [sys.executable, "-m", "ottermq.broker", *args], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def printed(skipped: list[dict[str, str]]) -> list[str]:
    """How the command line prints skipped items (``ImportReport.lines``)."""
    lines = []
    for item in skipped:
        named = " ".join(f"{k} '{v}'" for k, v in item.items() if k not in ("section", "reason"))
        lines.append(f"  skipped {item['section']}: {named}: {item['reason']}")
    return lines


SUMMARY = (
    "applied 5 users, 3 vhosts, 5 permissions, 7 policies, 1 operator policies, 4 limits, 1 parameters,"
    " {x} exchanges,"
    " {q} queues, {b} bindings; unchanged 1 global parameters; skipped {n} item(s)"
)
NON_DURABLE = (
    "a non-durable {}: a definitions file read at start-up or imported offline keeps only durable queues"
    " and exchanges (the HTTP API imports non-durable ones)"
)
# read at start-up or offline: the transient exchange and queue too, and the binding to that queue
DURABLE_ONLY = [
    *SKIPPED[:4],
    _x("transient", NON_DURABLE.format("exchange")),
    *SKIPPED[4:10],
    {"section": "queues", "vhost": V1, "name": "classic.transient", "reason": NON_DURABLE.format("queue")},
    *SKIPPED[10:13],
    {
        "section": "bindings",
        "vhost": V1,
        "source": "headers",
        "destination": "classic.transient",
        "destination_type": "queue",
        "routing_key": "",
        "reason": "its destination queue 'classic.transient' is skipped",
    },
    *SKIPPED[13:],
]


@pytest.mark.extension
def test_the_command_line_prints_the_answer(broker, clean, tmp_path):
    """Over HTTP (``--url``), and offline into a stopped broker's store."""
    url = ("--url", broker.management_url, "--user", broker.user, "--password", broker.password)
    done = cli("definitions", "import", str(FIXTURE), *url)
    summary = SUMMARY.format(x=12, q=12, b=16, n=len(SKIPPED))
    assert done.stdout.splitlines() == [f"Imported definitions from {FIXTURE}: {summary}", *printed(SKIPPED)]
    data_dir = tmp_path / "data"
    done = cli("definitions", "import", str(FIXTURE), data_dir=data_dir)
    summary = SUMMARY.format(x=11, q=11, b=15, n=len(DURABLE_ONLY))
    first = f"Imported definitions from {FIXTURE} into {data_dir}: {summary}"
    assert done.stdout.splitlines() == [first, *printed(DURABLE_ONLY)]
    assert "skipped" not in done.stderr  # the report is the answer, not a log


@pytest.mark.extension
def test_the_start_up_file_reports_in_the_log_and_the_overview(broker_process):
    process = broker_process({"OTTERMQ_DEFINITIONS_FILE": str(FIXTURE)})
    started = process.start()
    summary = SUMMARY.format(x=11, q=11, b=15, n=len(DURABLE_ONLY))
    log = poll_until(lambda: "imported definitions" in started.log_tail(400) and started.log_tail(400))
    assert f"imported definitions from {FIXTURE}: {summary}" in log
    for item in printed(DURABLE_ONLY):
        assert "definitions: skipped " + item.removeprefix("  skipped ")[:200] in log
    admin = (ADMIN, "admin-pw")  # the file's administrator (with users in it, no default user is made)
    overview = started.api("/api/overview", auth=admin)[1]
    applied = {**APPLIED, "exchanges": 11, "queues": 11, "bindings": 15}
    assert overview["definitions_file"] == {
        "file": str(FIXTURE),
        "applied": applied,
        "unchanged": UNCHANGED,
        "skipped": DURABLE_ONLY,
    }
    monitor = {"password": "m", "tags": "monitoring"}
    assert started.api("/api/users/defs-e2e-monitor", "PUT", monitor, auth=admin)[0] == 201
    assert "definitions_file" not in started.api("/api/overview", auth=("defs-e2e-monitor", "m"))[1]


# ---------------------------------------------------------------------------------------------------------
# ottermq's own export, imported again into ottermq and into RabbitMQ
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.extension
def test_ottermq_s_export_imports_into_ottermq_whole(broker_process, clean, broker):
    assert broker.api("/api/definitions", "POST", json.loads(FIXTURE.read_text()))[0] == 200
    exported = ours(broker.api("/api/definitions")[1])
    other = broker_process().start()
    assert other.api("/api/definitions", "POST", exported) == (204, None)
    assert normal(ours(other.api("/api/definitions")[1])) == normal(exported)


def test_ottermq_s_export_imports_into_rabbitmq_whole(rabbitmq, broker_process):
    """The fixture into a private ottermq, its export into RabbitMQ: 204, and every object there."""
    ottermq = broker_process().start()
    assert ottermq.api("/api/definitions", "POST", json.loads(FIXTURE.read_text()))[0] == 200
    exported = ours(ottermq.api("/api/definitions")[1])
    assert rabbitmq("/api/definitions", "POST", exported) == (204, None)
    problems = unaccounted(exported, ours(rabbitmq("/api/definitions")[1]), [])
    assert not problems, "\n".join(problems)
