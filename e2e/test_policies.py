"""Policies and operator policies (issue 15), set over the management API and observed through pika.

Every test not marked ``extension`` also passes against RabbitMQ 3.10 (``AMQP_URL``/``MANAGEMENT_URL``).
RabbitMQ applies a policy change to its queues asynchronously and shows queue fields after its 5 s
statistics interval, so effects are polled. Policy patterns are anchored on unique names so that
tests never touch each other's queues; every policy made is deleted afterwards.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest

from .polling import poll_until
from .test_management_write import call, q

TIMEOUT = 20

# the one poll helper, at this file's pace: RabbitMQ shows policy effects after its 5 s statistics interval
eventually = functools.partial(poll_until, timeout=TIMEOUT, interval=0.2)


@pytest.fixture
def policies(broker) -> Iterator[Callable[..., tuple[int, Any]]]:
    """``put(name, body, operator=False) -> (status, body)``; everything put is deleted afterwards."""
    made: list[str] = []

    def put(name: str, body: dict[str, Any], operator: bool = False) -> tuple[int, Any]:
        path = f"/api/{'operator-policies' if operator else 'policies'}/{q(broker.vhost)}/{q(name)}"
        made.append(path)
        status, _, answer = call(broker, path, "PUT", body)
        return status, answer

    yield put
    for path in made:
        call(broker, path, "DELETE")


@pytest.fixture
def prefix(broker) -> Iterator[str]:
    """A unique name prefix; queues and exchanges named with it are deleted afterwards."""
    made = f"e2e.pol.{uuid.uuid4().hex[:8]}"
    yield made
    vh = q(broker.vhost)
    for kind in ("queues", "exchanges"):
        for item in call(broker, f"/api/{kind}/{vh}")[2] or []:
            if str(item.get("name", "")).startswith(made):
                call(broker, f"/api/{kind}/{vh}/{q(item['name'])}", "DELETE")


def queue_info(broker, name: str) -> dict[str, Any]:
    return dict(call(broker, f"/api/queues/{q(broker.vhost)}/{q(name)}")[2] or {})


def depth(channel, name: str) -> int:
    return int(channel.queue_declare(name, passive=True).method.message_count)


def test_put_get_list_delete(broker, policies, prefix):
    name = f"{prefix}.crud"
    body = {
        "pattern": f"^{prefix}\\.",
        "definition": {"message-ttl": 5000},
        "apply-to": "queues",
        "priority": 3,
    }
    assert policies(name, body) == (201, None)
    path = f"/api/policies/{q(broker.vhost)}/{q(name)}"
    assert call(broker, path)[0::2] == (
        200,
        {
            "vhost": broker.vhost,
            "name": name,
            "pattern": body["pattern"],
            "apply-to": "queues",
            "definition": {"message-ttl": 5000},
            "priority": 3,
        },
    )
    assert policies(name, {**body, "priority": 4}) == (204, None)
    assert name in [p["name"] for p in call(broker, "/api/policies")[2]]
    assert name in [p["name"] for p in call(broker, f"/api/policies/{q(broker.vhost)}")[2]]
    assert call(broker, path, "DELETE")[0] == 204
    assert call(broker, path)[0] == 404
    assert call(broker, path, "DELETE")[0] == 404


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            {"pattern": "x", "definition": {"message-ttl": -1}},
            "Validation failed\n\n-1 is not a valid message TTL\n",
        ),
        (
            {"pattern": "x", "definition": {"message-ttl": "x"}},
            'Validation failed\n\n&lt;&lt;"x"&gt;&gt; is not a valid message TTL\n',
        ),
        (
            {"pattern": "x", "definition": {"nope": 1}},
            'Validation failed\n\n[{&lt;&lt;"nope"&gt;&gt;,1}] are not recognised policy settings\n',
        ),
        ({"pattern": "x", "definition": {}}, "Validation failed\n\nno policy provided\n"),
        (
            {"pattern": "x", "definition": {"expires": 0}},
            "Validation failed\n\n0 is not a valid queue expiry\n",
        ),
        (
            {"pattern": "x", "definition": {"max-length": 1}, "apply-to": "bogus"},
            "Validation failed\n\napply-to 'bogus' unrecognised; should be 'queues', 'exchanges' or 'all'\n",
        ),
        ({"definition": {"max-length": 1}}, "[{key_missing,pattern}]"),
        ({"pattern": "x"}, "[{key_missing,definition}]"),
    ],
)
def test_invalid_policies_get_rabbitmqs_400(policies, prefix, body, reason):
    assert policies(f"{prefix}.bad", body) == (400, {"error": "bad_request", "reason": reason})


def test_operator_policy_errors_are_not_escaped(policies, prefix):
    body = {"pattern": "x", "definition": {"dead-letter-exchange": "dlx"}}
    assert policies(f"{prefix}.op", body, operator=True) == (
        400,
        {
            "error": "bad_request",
            "reason": 'Validation failed\n\n[{<<"dead-letter-exchange">>,<<"dlx">>}]'
            " are not recognised policy settings\n",
        },
    )


def test_ttl_and_dead_lettering_from_a_policy(broker, channel, policies, prefix):
    queue, dlq = f"{prefix}.work", f"{prefix}.dlq"
    channel.queue_declare(dlq)
    channel.queue_declare(queue)
    definition = {"message-ttl": 200, "dead-letter-exchange": "", "dead-letter-routing-key": dlq}
    assert policies(f"{prefix}.ttl", {"pattern": f"^{prefix}\\.work$", "definition": definition})[0] == 201
    eventually(lambda: queue_info(broker, queue).get("policy") == f"{prefix}.ttl", what="policy shown")
    channel.basic_publish("", queue, b"expires")
    method, props, body = eventually(lambda: _get(channel, dlq), what="dead letter")
    assert body == b"expires"
    death = props.headers["x-death"][0]
    assert (death["reason"], death["queue"]) == ("expired", queue)


def _get(channel, queue: str) -> Any:
    got = channel.basic_get(queue, auto_ack=True)
    return got if got[0] is not None else None


def test_a_lower_max_length_trims_a_live_queue(broker, channel, policies, prefix):
    queue = f"{prefix}.trim"
    channel.queue_declare(queue)
    for i in range(5):
        channel.basic_publish("", queue, f"m{i}".encode())
    eventually(lambda: depth(channel, queue) == 5, what="5 queued")
    body = {"pattern": f"^{prefix}\\.trim$", "definition": {"max-length": 2}}
    assert policies(f"{prefix}.len", body)[0] == 201
    eventually(lambda: depth(channel, queue) == 2, what="trimmed to 2")
    assert _get(channel, queue)[2] == b"m3"  # drop-head: the oldest went


def test_highest_priority_policy_wins(broker, channel, policies, prefix):
    queue = f"{prefix}.prio"
    channel.queue_declare(queue)
    pattern = f"^{prefix}\\.prio"
    low = {"pattern": pattern, "definition": {"max-length": 9}, "priority": 1}
    high = {"pattern": pattern, "definition": {"max-length": 3}, "priority": 5}
    assert policies(f"{prefix}.low", low)[0] == 201 and policies(f"{prefix}.high", high)[0] == 201
    shown = eventually(lambda: (i := queue_info(broker, queue)).get("policy") == f"{prefix}.high" and i)
    assert shown["effective_policy_definition"] == {"max-length": 3}


def test_a_policy_with_a_stream_key_does_not_apply_to_a_classic_queue(broker, channel, policies, prefix):
    """RabbitMQ skips such a policy for classic queues (even at a higher priority): the next one applies."""
    queue = f"{prefix}.cq"
    channel.queue_declare(queue)
    low = {"pattern": f"^{prefix}\\.cq", "definition": {"max-length": 9}, "priority": 1}
    streams = {"pattern": f"^{prefix}\\.cq$", "definition": {"max-length": 3, "max-age": "1D"}, "priority": 5}
    assert policies(f"{prefix}.low", low)[0] == 201 and policies(f"{prefix}.stream", streams)[0] == 201
    shown = eventually(lambda: (i := queue_info(broker, queue)).get("policy") == f"{prefix}.low" and i)
    assert shown["effective_policy_definition"] == {"max-length": 9}


@pytest.mark.extension  # RabbitMQ 3.10 skips a delivery-limit policy for classic queues
def test_delivery_limit_policy_on_a_classic_queue(broker, channel, policies, prefix):
    queue, dlq = f"{prefix}.dl", f"{prefix}.dl.dlq"
    channel.queue_declare(dlq)
    channel.queue_declare(queue, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    body = {"pattern": f"^{prefix}\\.dl$", "definition": {"delivery-limit": 1}}
    assert policies(f"{prefix}.dl", body)[0] == 201
    channel.basic_publish("", queue, b"poison")
    for _ in range(2):  # returned twice: over the limit of 1
        method, props, _ = eventually(lambda: _get_ack(channel, queue), what="redelivery")
        channel.basic_nack(method.delivery_tag, requeue=True)
    _, props, body = eventually(lambda: _get(channel, dlq), what="dead letter")
    assert body == b"poison" and props.headers["x-death"][0]["reason"] == "delivery_limit"


def _get_ack(channel, queue: str) -> Any:
    got = channel.basic_get(queue)
    return got if got[0] is not None else None


def test_queue_argument_and_policy_lower_length_wins_argument_dlx_wins(broker, channel, policies, prefix):
    queue, arg_dlq, pol_dlq = f"{prefix}.args", f"{prefix}.argdlq", f"{prefix}.poldlq"
    for name in (arg_dlq, pol_dlq):
        channel.queue_declare(name)
    channel.queue_declare(
        queue,
        arguments={
            "x-max-length": 10,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": arg_dlq,
        },
    )
    definition = {"max-length": 2, "dead-letter-exchange": "", "dead-letter-routing-key": pol_dlq}
    assert policies(f"{prefix}.args", {"pattern": f"^{prefix}\\.args$", "definition": definition})[0] == 201
    eventually(lambda: queue_info(broker, queue).get("policy") == f"{prefix}.args", what="policy shown")
    for i in range(4):
        channel.basic_publish("", queue, f"m{i}".encode())
    eventually(lambda: depth(channel, queue) == 2, what="policy max-length 2 below the argument's 10")
    eventually(lambda: depth(channel, arg_dlq) == 2, what="dropped heads to the argument's DLX")
    assert depth(channel, pol_dlq) == 0


def test_operator_policy_caps_the_user_policy(broker, channel, policies, prefix):
    queue = f"{prefix}.cap"
    channel.queue_declare(queue)
    pattern = f"^{prefix}\\.cap$"
    user = {"pattern": pattern, "definition": {"max-length": 5, "message-ttl": 60000}}
    assert policies(f"{prefix}.user", user)[0] == 201
    oper = f"{prefix}.oper"
    assert policies(oper, {"pattern": pattern, "definition": {"max-length": 2}}, operator=True)[0] == 201
    shown = eventually(lambda: (i := queue_info(broker, queue)).get("operator_policy") == oper and i)
    assert shown["policy"] == f"{prefix}.user"
    assert shown["effective_policy_definition"] == {"max-length": 2, "message-ttl": 60000}
    for i in range(4):
        channel.basic_publish("", queue, f"m{i}".encode())
    eventually(lambda: depth(channel, queue) == 2, what="operator's max-length 2")


def test_deleting_the_policy_lifts_it(broker, channel, policies, prefix):
    queue = f"{prefix}.lift"
    channel.queue_declare(queue)
    name = f"{prefix}.lift"
    assert policies(name, {"pattern": f"^{prefix}\\.lift$", "definition": {"max-length": 1}})[0] == 201
    eventually(lambda: queue_info(broker, queue).get("policy") == name, what="policy shown")
    assert call(broker, f"/api/policies/{q(broker.vhost)}/{q(name)}", "DELETE")[0] == 204
    eventually(
        lambda: "policy" in (i := queue_info(broker, queue)) and i["policy"] is None, what="policy gone"
    )
    for i in range(3):
        channel.basic_publish("", queue, f"m{i}".encode())
    assert eventually(lambda: depth(channel, queue) == 3, what="no limit any more")


def test_alternate_exchange_from_a_policy(broker, channel, policies, prefix):
    exchange, ae, caught = f"{prefix}.x", f"{prefix}.ae", f"{prefix}.caught"
    channel.exchange_declare(exchange, "direct")
    channel.exchange_declare(ae, "fanout")
    channel.queue_declare(caught)
    channel.queue_bind(caught, ae)
    body = {"pattern": f"^{prefix}\\.x$", "definition": {"alternate-exchange": ae}, "apply-to": "exchanges"}
    assert policies(f"{prefix}.ae", body)[0] == 201

    def routed() -> bool:
        channel.basic_publish(exchange, "nowhere", b"u")
        return depth(channel, caught) > 0

    eventually(routed, what="unroutable message caught by the policy's alternate exchange")
    try:
        channel.exchange_delete(exchange)
        channel.exchange_delete(ae)
    finally:
        channel.queue_delete(caught)


@pytest.mark.extension  # a restart of the broker under test
def test_policies_survive_a_restart(broker_process, tmp_path):
    process = broker_process(data_dir=tmp_path / "data")
    b = process.start()
    body = {"pattern": "^kept$", "definition": {"max-length": 1}, "priority": 2}
    assert call(b, "/api/policies/%2F/kept", "PUT", body)[0] == 201
    conn = pika.BlockingConnection(b.params())
    conn.channel().queue_declare("kept", durable=True)
    conn.close()
    process.stop()
    b = process.start()
    assert call(b, "/api/policies/%2F/kept")[2]["priority"] == 2
    assert call(b, "/api/queues/%2F/kept")[2]["policy"] == "kept"


@pytest.mark.extension  # RabbitMQ 3.12's apply-to values; 3.10 refuses them with 400
def test_queue_type_apply_to_values(broker, channel, policies, prefix):
    queue = f"{prefix}.typed"
    channel.queue_declare(queue)
    pattern = f"^{prefix}\\.typed$"
    assert (
        policies(
            f"{prefix}.quorum",
            {"pattern": pattern, "definition": {"max-length": 1}, "apply-to": "quorum_queues", "priority": 9},
        )[0]
        == 201
    )
    assert (
        policies(
            f"{prefix}.classic",
            {"pattern": pattern, "definition": {"max-length": 2}, "apply-to": "classic_queues"},
        )[0]
        == 201
    )
    assert queue_info(broker, queue)["policy"] == f"{prefix}.classic"


@pytest.mark.extension  # ottermq's exact TTL; RabbitMQ refuses the key as not recognised
def test_exact_ttl_policy_expires_a_message_behind_a_long_lived_head(
    broker, channel, policies, prefix, nothing_for
):
    queue, dlq = f"{prefix}.exact", f"{prefix}.exact.dlq"
    channel.queue_declare(dlq)
    channel.queue_declare(queue, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    channel.basic_publish("", queue, b"head", pika.BasicProperties(expiration="600000"))
    channel.basic_publish("", queue, b"behind", pika.BasicProperties(expiration="100"))
    nothing_for(channel, dlq, 0.3)  # head-only expiry: "behind" waits for the head
    assert (
        policies(
            f"{prefix}.exact", {"pattern": f"^{prefix}\\.exact$", "definition": {"ottermq-exact-ttl": True}}
        )[0]
        == 201
    )
    _, props, body = eventually(lambda: _get(channel, dlq), what="dead letter")
    assert body == b"behind" and props.headers["x-death"][0]["reason"] == "expired"
    assert depth(channel, queue) == 1
    info = queue_info(broker, queue)
    assert info["effective_policy_definition"] == {"ottermq-exact-ttl": True}
