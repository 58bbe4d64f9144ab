"""Management API and Prometheus answers checked against RabbitMQ 3.10.8 (issue "One front door",
fidelity findings): who may see and close which connection, a connection's channels, a queue's
``consumer_details``, 401 for a vhost the user has no permissions in, the TCP socket limit gauge, and
dead letters not counted as published. Every test not marked ``extension`` passes on both brokers
(``AMQP_URL``); RabbitMQ's statistics lag by its 5 s emission interval, hence the polls.
"""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from unittest.mock import ANY

import pika
import pika.exceptions
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .test_management_write import call, connection_named, q

STATS_TIMEOUT = 20  # RabbitMQ's collect_statistics_interval is 5 s
NOT_YOURS = (401, {"error": "not_authorised", "reason": "User not authorised to access object"})
NO_VHOST = (401, {"error": "not_authorised", "reason": "User not authorised to access virtual host"})
NOT_FOUND = (404, {"error": "Object Not Found", "reason": "Not Found"})
CHANNEL_FIELDS = {
    "name",
    "number",
    "node",
    "user",
    "vhost",
    "state",
    "connection_details",
    "consumer_count",
    "messages_unacknowledged",
    "prefetch_count",
    "global_prefetch_count",
    "confirm",
    "transactional",
}


@pytest.fixture
def make_user(broker) -> Iterator[Callable[..., str]]:
    """``make_user(tags, *vhosts) -> name``: a user (password ``pw``) with full permissions in those
    vhosts; deleted after the test."""
    made: list[str] = []

    def _make(tags: str, *vhosts: str) -> str:
        name = f"e2e-fid-{tags or 'none'}-{uuid.uuid4().hex[:8]}"
        assert call(broker, f"/api/users/{q(name)}", "PUT", {"password": "pw", "tags": tags})[0] == 201
        made.append(name)
        full = {"configure": ".*", "write": ".*", "read": ".*"}
        for vhost in vhosts:
            assert call(broker, f"/api/permissions/{q(vhost)}/{q(name)}", "PUT", full)[0] == 201
        return name

    yield _make
    for name in made:
        call(broker, f"/api/users/{q(name)}", "DELETE")


@pytest.fixture
def other_vhost(broker) -> Iterator[str]:
    """A vhost besides the test one (the admin gets permissions there as its creator)."""
    name = f"e2e-fid-vhost-{uuid.uuid4().hex[:8]}"
    assert call(broker, f"/api/vhosts/{q(name)}", "PUT", {})[0] == 201
    yield name
    call(broker, f"/api/vhosts/{q(name)}", "DELETE")


def named_connection(broker, connect, poll_until, unique, **params: Any) -> tuple[Any, str]:
    """A pika connection with a unique client name, and its management API name."""
    client_name = unique("conn")
    conn = connect(client_properties={"connection_name": client_name}, **params)
    name = poll_until(lambda: connection_named(broker, client_name), timeout=STATS_TIMEOUT, interval=0.2)
    return conn, str(name)


def as_user(user: str, **params: Any) -> dict[str, Any]:
    return {"credentials": pika.PlainCredentials(user, "pw"), **params}


# -- 1. GET /api/connections/{name}/channels -----------------------------------------------------


def test_connection_channels_lists_its_channels_like_api_channels(broker, connect, poll_until, unique):
    conn, name = named_connection(broker, connect, poll_until, unique)
    conn.channel()
    conn.channel().basic_qos(prefetch_count=5)
    path = f"/api/connections/{q(name)}/channels"

    def both() -> Any:
        status, _, body = call(broker, path)
        return body if status == 200 and len(body) == 2 else None

    channels = poll_until(both, timeout=STATS_TIMEOUT, interval=0.5)
    assert [c["name"] for c in channels] == [f"{name} (1)", f"{name} (2)"]
    assert [c["number"] for c in channels] == [1, 2]
    assert all(CHANNEL_FIELDS <= set(c) for c in channels)
    assert channels[1]["prefetch_count"] == 5
    assert all(c["connection_details"]["name"] == name and c["user"] == broker.user for c in channels)
    listed = [c["name"] for c in call(broker, "/api/channels")[2] if c["connection_details"]["name"] == name]
    assert sorted(listed) == [c["name"] for c in channels]
    assert call(broker, f"{path}?columns=name,number")[2] == [
        {"name": c["name"], "number": c["number"]} for c in channels
    ]


def test_connection_channels_are_the_owners_or_a_monitors(broker, connect, poll_until, unique, make_user):
    manager = make_user("management", broker.vhost)
    monitor = make_user("monitoring")
    theirs, their_name = named_connection(broker, connect, poll_until, unique)
    theirs.channel()
    mine, my_name = named_connection(broker, connect, poll_until, unique, **as_user(manager))
    mine.channel()

    def channels(name: str, user: str) -> tuple[int, Any]:
        status, _, body = call(broker, f"/api/connections/{q(name)}/channels", auth=(user, "pw"))
        return status, body

    poll_until(lambda: channels(my_name, manager)[1], timeout=STATS_TIMEOUT, interval=0.5)
    assert channels(their_name, manager) == NOT_YOURS
    assert [c["user"] for c in channels(my_name, manager)[1]] == [manager]
    assert [c["user"] for c in poll_until(lambda: channels(their_name, monitor)[1])] == [broker.user]
    # the connection itself and one of its channels follow the same rule
    assert call(broker, f"/api/connections/{q(their_name)}", auth=(manager, "pw"))[0::2] == NOT_YOURS
    assert call(broker, f"/api/connections/{q(their_name)}", auth=(monitor, "pw"))[0] == 200
    channel = f"/api/channels/{q(their_name + ' (1)')}"
    assert call(broker, channel, auth=(manager, "pw"))[0::2] == NOT_YOURS
    shown = call(broker, channel, auth=(monitor, "pw"))[2]
    assert (shown["name"], shown["consumer_details"]) == (f"{their_name} (1)", [])
    # lists leave other users' connections out for a management user
    assert {c["user"] for c in call(broker, "/api/connections", auth=(manager, "pw"))[2]} == {manager}
    assert {c["user"] for c in call(broker, "/api/channels", auth=(manager, "pw"))[2]} == {manager}


# -- 2. consumer_details of one queue ------------------------------------------------------------


def test_queue_shows_one_consumer_details_entry_per_consumer(broker, connect, poll_until, unique):
    conn, name = named_connection(broker, connect, poll_until, unique)
    ch = conn.channel()
    queue = unique("consumed")
    ch.queue_declare(queue)
    ch.basic_qos(prefetch_count=7)
    ch.basic_consume(queue, lambda *a: None, consumer_tag="fid-acked")
    priority = {"x-priority": 3}
    ch.basic_consume(queue, lambda *a: None, consumer_tag="fid-auto", auto_ack=True, arguments=priority)
    path = f"/api/queues/{q(broker.vhost)}/{q(queue)}"

    def details() -> Any:
        status, _, body = call(broker, path)
        found = body.get("consumer_details", []) if status == 200 else []
        return found if len(found) == 2 else None

    shown = sorted(poll_until(details, timeout=STATS_TIMEOUT, interval=0.5), key=lambda c: c["consumer_tag"])
    channel_details = {
        "connection_name": name,
        "name": f"{name} (1)",
        "node": ANY,
        "number": 1,
        "peer_host": ANY,
        "peer_port": ANY,
        "user": broker.user,
    }
    common = {
        "arguments": {},
        "active": True,
        "activity_status": "up",
        "exclusive": False,
        "prefetch_count": 7,
        "queue": {"name": queue, "vhost": broker.vhost},
        "channel_details": channel_details,
    }
    assert shown == [
        {**common, "consumer_tag": "fid-acked", "ack_required": True},
        {**common, "consumer_tag": "fid-auto", "ack_required": False, "arguments": {"x-priority": 3}},
    ]
    assert shown[0]["channel_details"]["peer_port"] == int(name.split(" -> ")[0].rsplit(":", 1)[1])
    on_api = [c for c in call(broker, "/api/consumers")[2] if c["queue"]["name"] == queue]
    assert sorted(on_api, key=lambda c: c["consumer_tag"]) == shown  # the same JSON as /api/consumers
    listed = [item for item in call(broker, f"/api/queues/{q(broker.vhost)}")[2] if item["name"] == queue]
    assert listed and "consumer_details" not in listed[0]  # only the single queue has them


# -- 3. a vhost without permissions: 401 ---------------------------------------------------------


def test_another_vhost_is_401_for_users_without_permissions_there(broker, other_vhost, make_user):
    manager = make_user("management", broker.vhost)
    monitor = make_user("monitoring", broker.vhost)
    other = q(other_vhost)
    assert call(broker, f"/api/queues/{other}/fid-q", "PUT", {"durable": False})[0] == 201
    for user in (manager, monitor):
        auth = (user, "pw")
        for path in (
            f"/api/queues/{other}",
            f"/api/queues/{other}/fid-q",
            f"/api/queues/{other}/no-such-q",
            f"/api/queues/{other}/fid-q/bindings",
            f"/api/exchanges/{other}",
            f"/api/exchanges/{other}/amq.direct",
            f"/api/bindings/{other}",
            f"/api/vhosts/{other}/connections",
            f"/api/vhosts/{other}/channels",
        ):
            assert call(broker, path, auth=auth)[0::2] == NO_VHOST, (user, path)
        for method, path in (
            ("PUT", f"/api/queues/{other}/fid-new"),
            ("DELETE", f"/api/queues/{other}/fid-q"),
            ("DELETE", f"/api/queues/{other}/fid-q/contents"),
            ("PUT", f"/api/exchanges/{other}/fid-x"),
        ):
            assert call(broker, path, method, {}, auth=auth)[0::2] == NO_VHOST, (user, method, path)
        assert call(broker, "/api/queues/e2e-fid-no-such-vhost", auth=auth)[0::2] == NOT_FOUND
        assert call(broker, f"/api/consumers/{other}", auth=auth)[0::2] == (200, [])  # filtered, not refused
        assert call(broker, f"/api/queues/{q(broker.vhost)}", auth=auth)[0] == 200
    assert call(broker, f"/api/queues/{other}/fid-q")[0] == 200  # still there, and the admin's to see


def test_lists_leave_out_vhosts_without_permissions_even_for_monitoring(
    broker, other_vhost, make_user, poll_until
):
    monitor = make_user("monitoring", broker.vhost)
    assert call(broker, f"/api/queues/{q(other_vhost)}/fid-q", "PUT", {"durable": False})[0] == 201

    def vhosts_of(path: str, auth: tuple[str, str] | None = None) -> set[str]:
        return {item["vhost"] for item in call(broker, path, auth=auth)[2]}

    poll_until(lambda: other_vhost in vhosts_of("/api/queues"), timeout=STATS_TIMEOUT, interval=0.5)
    assert other_vhost in vhosts_of("/api/exchanges")
    for path in ("/api/queues", "/api/exchanges", "/api/bindings"):
        assert other_vhost not in vhosts_of(path, (monitor, "pw")), path
    # monitoring still sees every vhost itself
    assert other_vhost in {v["name"] for v in call(broker, "/api/vhosts", auth=(monitor, "pw"))[2]}


# -- 4. closing a connection: administrator, or its own user -------------------------------------


def test_only_an_administrator_closes_another_users_connection(
    broker, connect, poll_until, unique, make_user
):
    manager = make_user("management", broker.vhost)
    monitor = make_user("monitoring", broker.vhost)
    theirs, their_name = named_connection(broker, connect, poll_until, unique)
    mine, my_name = named_connection(broker, connect, poll_until, unique, **as_user(manager))
    for user in (monitor, manager):
        status = call(broker, f"/api/connections/{q(their_name)}", "DELETE", auth=(user, "pw"))[0::2]
        assert status == NOT_YOURS, user
    theirs.process_data_events(time_limit=0.2)
    assert theirs.is_open
    assert call(broker, f"/api/connections/{q(my_name)}", "DELETE", auth=(manager, "pw"))[0] == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        for _ in range(100):
            mine.process_data_events(time_limit=0.1)
    assert info.value.reply_code == 320
    # channels cannot be closed over the API
    status, headers, _ = call(broker, f"/api/channels/{q(their_name + ' (1)')}", "DELETE")
    assert status == 405 and "GET" in headers["allow"]


# -- 5. dead-letter moves: pausing and cancelling need the move's permissions (ottermq) -----------


@pytest.mark.extension
def test_pausing_or_cancelling_a_move_needs_its_permissions(
    broker, channel, unique, with_dlq, make_user, poll_until
):
    work, dlq = with_dlq(channel)
    for i in range(30):
        channel.basic_publish("", dlq, f"m{i}".encode())
    monitor = make_user("monitoring")  # sees every vhost's moves, has no permissions
    reader = make_user("management")  # may read nothing in the vhost
    perms = {"configure": "", "write": "", "read": "^$"}
    assert call(broker, f"/api/permissions/{q(broker.vhost)}/{q(reader)}", "PUT", perms)[0] == 201
    body = {"all": True, "target": {"exchange": "", "routing_key": work}, "rate": 2}
    status, _, job = call(broker, f"/api/dead-letters/{q(broker.vhost)}/{q(dlq)}/moves", "POST", body)
    assert status == 201, job
    path = f"/api/dead-letter-moves/{job['id']}"

    def refused(user: str) -> tuple[int, dict[str, str]]:  # the operations layer's queue access check
        where = f"queue '{dlq}' in vhost '{broker.vhost}'"
        reason = f"ACCESS_REFUSED - access to {where} refused for user '{user}'"
        return 401, {"error": "not_authorised", "reason": reason}

    for user in (monitor, reader):
        assert (
            call(
                broker, f"/api/dead-letters/{q(broker.vhost)}/{q(dlq)}/moves", "POST", body, auth=(user, "pw")
            )[0]
            == 401
        )
        assert call(broker, path, "PUT", {"state": "paused"}, auth=(user, "pw"))[0::2] == refused(user)
        assert call(broker, path, "DELETE", auth=(user, "pw"))[0::2] == refused(user)
    assert call(broker, path, auth=(monitor, "pw"))[2]["state"] == "running"  # seen, not controlled
    assert call(broker, path, "PUT", {"state": "paused"})[2]["state"] == "paused"
    assert call(broker, path, "PUT", {"state": "running"}, auth=(reader, "pw"))[0::2] == refused(reader)
    assert call(broker, path, "DELETE")[0] == 204
    assert call(broker, path)[2]["state"] == "cancelled"


# -- 6. Prometheus -------------------------------------------------------------------------------


def families(broker, path: str = "/metrics") -> dict[str, Any]:
    with urllib.request.urlopen(broker.prometheus_url + path, timeout=10) as response:
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_max_tcp_sockets_is_rabbitmqs_share_of_the_fd_limit(broker):
    found = families(broker)
    family = found["rabbitmq_process_max_tcp_sockets"]
    assert (family.type, family.documentation) == ("gauge", "Open TCP sockets limit")
    fds = found["rabbitmq_process_max_fds"].samples[0].value
    # RabbitMQ 3.10's file_handle_cache: max(2, fds - 97) handles, sockets get trunc(90 % - 2)
    assert [s.value for s in family.samples] == [max(0, int(max(2, fds - 100 + 3) * 0.9 - 2))]


def published(broker, queue: str) -> float:
    """``rabbitmq_queue_messages_published_total`` of one queue on /metrics/per-object (RabbitMQ
    labels it per channel and exchange too: summed)."""
    family = families(broker, "/metrics/per-object").get("rabbitmq_queue_messages_published")
    samples = family.samples if family is not None else []
    return sum(s.value for s in samples if s.name.endswith("_total") and s.labels.get("queue") == queue)


def test_dead_letters_are_not_counted_as_published_to_their_queue(broker, channel, with_dlq, poll_until):
    work, dlq = with_dlq(channel)
    channel.confirm_delivery()
    for i in range(3):
        channel.basic_publish("", work, f"d{i}".encode())
    for _ in range(3):
        method, _, _ = channel.basic_get(work)
        channel.basic_reject(method.delivery_tag, requeue=False)
    channel.basic_publish("", dlq, b"direct")
    poll_until(lambda: channel.queue_declare(dlq, passive=True).method.message_count == 4)
    # the publishing channel stays open: RabbitMQ drops a channel's per-queue counters with it
    poll_until(
        lambda: published(broker, work) == 3 and published(broker, dlq) >= 1,
        timeout=STATS_TIMEOUT,
        interval=0.5,
    )
    assert published(broker, dlq) == 1

    def publish_stat(queue: str) -> Any:
        body = call(broker, f"/api/queues/{q(broker.vhost)}/{q(queue)}")[2]
        return body.get("message_stats", {}).get("publish")

    poll_until(lambda: publish_stat(work) == 3 and publish_stat(dlq), timeout=STATS_TIMEOUT, interval=0.5)
    assert publish_stat(dlq) == 1


def test_policies_of_a_vhost_without_permissions_are_401(broker):
    name, password = f"e2e-nop-{uuid.uuid4().hex[:6]}", "p"
    user = {"password": password, "tags": "policymaker"}
    assert call(broker, f"/api/users/{name}", "PUT", user)[0] in (201, 204)
    try:
        vh, auth = q(broker.vhost), (name, password)
        vhost_refused = {"error": "not_authorised", "reason": "User not authorised to access virtual host"}
        assert call(broker, f"/api/policies/{vh}", auth=auth)[::2] == (401, vhost_refused)
        obj = {"error": "not_authorised", "reason": "User not authorised to access object"}
        assert call(broker, f"/api/policies/{vh}/x", auth=auth)[::2] == (401, obj)
        put = {"pattern": "^nothing$", "definition": {"max-length": 1}}
        assert call(broker, f"/api/policies/{vh}/x", "PUT", put, auth=auth)[::2] == (401, obj)
        assert call(broker, f"/api/policies/{vh}/x", "DELETE", auth=auth)[::2] == (401, obj)
    finally:
        call(broker, f"/api/users/{name}", "DELETE")


# -- 7. one vhost, one policy: whose (the matrix measured on RabbitMQ 3.10.8) ----------------------

NOT_ADMIN = (401, {"error": "not_authorised", "reason": "Not administrator user"})
TAGS = ("", "management", "policymaker", "monitoring", "administrator")
# path -> status for each tag, (without, with) permissions on the vhost; the 401s' bodies below
SINGLES = {
    "vhost": {"": (401, 401), "management": (401, 401), "policymaker": (401, 401), "monitoring": (401, 401)},
    "no-vhost": {
        "": (401, 401),
        "management": (401, 401),
        "policymaker": (401, 401),
        "monitoring": (401, 401),
    },
    "policy": {"": (401, 401), "management": (401, 401), "policymaker": (401, 200), "monitoring": (401, 401)},
    "no-policy": {
        "": (401, 401),
        "management": (401, 401),
        "policymaker": (401, 404),
        "monitoring": (401, 401),
    },
    "policy-of-no-vhost": {
        "": (401, 401),
        "management": (401, 401),
        "policymaker": (404, 404),
        "monitoring": (401, 401),
    },
    "operator-policy": {
        "": (401, 401),
        "management": (401, 401),
        "policymaker": (401, 401),
        "monitoring": (401, 401),
    },
    "no-operator-policy": {
        "": (401, 401),
        "management": (401, 401),
        "policymaker": (401, 401),
        "monitoring": (401, 401),
    },
}
ADMIN = {"vhost": 200, "no-vhost": 404, "policy": 200, "no-policy": 404, "policy-of-no-vhost": 404}
ADMIN |= {"operator-policy": 200, "no-operator-policy": 404}


def test_one_vhost_or_policy_is_shown_to_the_tags_rabbitmq_shows_it_to(broker, other_vhost, make_user):
    """``GET /api/vhosts/{v}`` is the administrator's alone, and one policy the policymaker's with access to
    its vhost (and the administrator's), whatever permissions a management or monitoring user has there."""
    vh = q(other_vhost)
    policy = {"pattern": "^e2e-nothing$", "definition": {"max-length": 5}, "apply-to": "queues"}
    assert call(broker, f"/api/policies/{vh}/fid-p", "PUT", policy)[0] == 201
    assert call(broker, f"/api/operator-policies/{vh}/fid-op", "PUT", policy)[0] == 201
    missing = "e2e-fid-no-such-vhost"
    paths = {
        "vhost": f"/api/vhosts/{vh}",
        "no-vhost": f"/api/vhosts/{missing}",
        "policy": f"/api/policies/{vh}/fid-p",
        "no-policy": f"/api/policies/{vh}/fid-none",
        "policy-of-no-vhost": f"/api/policies/{missing}/fid-p",
        "operator-policy": f"/api/operator-policies/{vh}/fid-op",
        "no-operator-policy": f"/api/operator-policies/{vh}/fid-none",
    }
    for tag in TAGS:
        for with_permissions in (False, True):
            user = make_user(tag, *([other_vhost] if with_permissions else []))
            for what, path in paths.items():
                status, _, body = call(broker, path, auth=(user, "pw"))
                expected = ADMIN[what] if tag == "administrator" else SINGLES[what][tag][with_permissions]
                assert status == expected, (tag, with_permissions, what, body)
                if status != 401 or not tag:
                    continue  # (no management tag at all: RabbitMQ's "Not management user")
                if what in ("vhost", "no-vhost", "operator-policy", "no-operator-policy"):
                    assert (status, body) == NOT_ADMIN, (tag, what)
                else:
                    assert (status, body) == NOT_YOURS, (tag, what)


def test_writing_one_policy_is_refused_as_reading_it(broker, other_vhost, make_user):
    """PUT and DELETE of a policy answer a management user as GET does (RabbitMQ's text, not "Not
    policymaker user"); a PUT into a vhost that does not exist is RabbitMQ's ``vhost_not_found``."""
    vh = q(other_vhost)
    policy = {"pattern": "^e2e-nothing$", "definition": {"max-length": 5}}
    manager, maker = make_user("management", other_vhost), make_user("policymaker", other_vhost)
    for method, body in (("PUT", policy), ("DELETE", None)):
        assert (
            call(broker, f"/api/policies/{vh}/fid-p", method, body, auth=(manager, "pw"))[0::2] == NOT_YOURS
        )
    missing = "/api/policies/e2e-fid-no-such-vhost/fid-p"
    vhost_not_found = (404, {"error": "not_found", "reason": "vhost_not_found"})
    assert call(broker, missing, "PUT", policy, auth=(maker, "pw"))[0::2] == vhost_not_found
    assert call(broker, missing, "DELETE", auth=(maker, "pw"))[0::2] == NOT_FOUND
    assert call(broker, f"/api/policies/{vh}/fid-p", "PUT", policy, auth=(maker, "pw"))[0] == 201
    assert call(broker, f"/api/policies/{vh}/fid-p", "DELETE", auth=(maker, "pw"))[0] == 204
