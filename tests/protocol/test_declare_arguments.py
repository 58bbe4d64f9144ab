"""Declare equivalence beyond the flags, argument validation and ``nowait`` over the mock transport,
each reply read back from RabbitMQ 3.10.8 first."""

from __future__ import annotations

import pytest
from pamqp import commands as spec

VHOST = "vhost '/'"


def x_declare(c, name, kind="direct", **kw):
    return c.rpc(1, spec.Exchange.Declare(exchange=name, exchange_type=kind, **kw), spec.Exchange.DeclareOk)


def invalid_arg(key, term, queue="q"):
    return f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{queue}' in {VHOST}: {term}"


# -- exchanges --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["auto_delete", "internal"])
def test_redeclaring_an_exchange_with_another_flag_is_406(client, flag):
    x_declare(client, "x")
    method = spec.Exchange.Declare(exchange="x", exchange_type="direct", **{flag: True})
    assert client.refused(1, method) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg '{flag}' for exchange 'x' in {VHOST}: "
        "received 'true' but current is 'false'",
        (40, 10),
    )


def test_redeclaring_an_exchange_with_another_alternate_is_406(client):
    x_declare(client, "x", arguments={"alternate-exchange": "ae1"})
    method = spec.Exchange.Declare(
        exchange="x", exchange_type="direct", arguments={"alternate-exchange": "ae2"}
    )
    assert client.refused(1, method)[:2] == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange 'x' in {VHOST}: "
        "received 'ae2' but current is 'ae1'",
    )


def test_redeclaring_an_exchange_without_its_alternate_is_406_naming_the_type(client):
    x_declare(client, "x", arguments={"alternate-exchange": "ae1"})
    assert client.refused(1, spec.Exchange.Declare(exchange="x", exchange_type="direct"))[:2] == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange 'x' in {VHOST}: "
        "received none but current is the value 'ae1' of type 'longstr'",
    )


def test_exchange_declare_and_delete_with_nowait_answer_nothing(client):
    client.send(1, spec.Exchange.Declare(exchange="x", exchange_type="direct", nowait=True))
    assert client.methods() == []
    x_declare(client, "x", passive=True)
    client.send(1, spec.Exchange.Delete(exchange="x", nowait=True))
    assert client.methods() == []
    assert client.refused(1, spec.Exchange.Declare(exchange="x", passive=True))[0] == 404


def test_an_invalid_x_match_is_406_at_bind(client):
    x_declare(client, "h", "headers")
    client.rpc(1, spec.Queue.Declare(queue="q"), spec.Queue.DeclareOk)
    method = spec.Queue.Bind(queue="q", exchange="h", arguments={"x-match": "foo", "a": 1})
    assert client.refused(1, method) == (
        406,
        'PRECONDITION_FAILED - Invalid x-match field value <<"foo">>; expected all, any, all-with-x, '
        "or any-with-x",
        (50, 20),
    )


def test_headers_any_ignores_x_headers_and_any_with_x_matches_them(client):
    x_declare(client, "h", "headers")
    for queue, match in (("with-x", "any-with-x"), ("plain", "any")):
        client.rpc(1, spec.Queue.Declare(queue=queue), spec.Queue.DeclareOk)
        bind = spec.Queue.Bind(queue=queue, exchange="h", arguments={"x-match": match, "x-a": 1})
        client.rpc(1, bind, spec.Queue.BindOk)
    client.publish(1, "h", "", b"xa", spec.Basic.Properties(headers={"x-a": 1}))
    assert (client.drain("with-x"), client.drain("plain")) == ([b"xa"], [])


# -- queues -----------------------------------------------------------------------------------------------
def test_queue_methods_with_nowait_answer_nothing(client):
    client.send(1, spec.Queue.Declare(queue="q", nowait=True))
    assert client.methods() == []
    client.rpc(1, spec.Queue.Declare(queue="q", passive=True), spec.Queue.DeclareOk)
    for method in (
        spec.Queue.Purge(queue="q", nowait=True),
        spec.Queue.Bind(queue="q", exchange="amq.direct", routing_key="k", nowait=True),
        spec.Queue.Unbind(queue="q", exchange="amq.direct", routing_key="k"),
        spec.Queue.Delete(queue="q", nowait=True),
    ):
        client.send(1, method)
        frames = [type(f) for _, f in client.methods()]
        assert frames in ([], [spec.Queue.UnbindOk])  # unbind has no nowait
    assert client.refused(1, spec.Queue.Declare(queue="q", passive=True))[0] == 404


def test_a_dead_letter_routing_key_without_a_dead_letter_exchange_is_406(client):
    method = spec.Queue.Declare(queue="q", arguments={"x-dead-letter-routing-key": "k"})
    assert client.refused(1, method) == (
        406,
        invalid_arg("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined"),
        (50, 10),
    )


def test_a_dead_letter_exchange_that_is_no_string_is_406_naming_its_type(client):
    method = spec.Queue.Declare(queue="q", arguments={"x-dead-letter-exchange": 100000})
    assert client.refused(1, method)[:2] == (
        406,
        "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' "
        f"in queue 'q' in {VHOST}",
    )


@pytest.mark.parametrize(
    "arguments,key,term",
    [
        ({"x-queue-type": "bogus"}, "x-queue-type", "\"unsupported queue type 'bogus'\""),
        ({"x-queue-mode": "bogus"}, "x-queue-mode", "\"unsupported queue mode 'bogus'\""),
        ({"x-single-active-consumer": "yes"}, "x-single-active-consumer", "{unacceptable_type,longstr}"),
    ],
    ids=["queue-type", "queue-mode", "single-active-consumer"],
)
def test_invalid_queue_arguments_are_406(client, arguments, key, term):
    assert client.refused(1, spec.Queue.Declare(queue="q", arguments=arguments)) == (
        406,
        invalid_arg(key, term),
        (50, 10),
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {"x-queue-type": "classic"},
        {"x-queue-mode": "lazy"},
        {"x-message-ttl": 0},
        {"x-expires": 315360000000},
        {"x-max-length": 0},
    ],
    ids=["classic", "lazy", "ttl-0", "expires-max", "max-length-0"],
)
def test_valid_edge_arguments_are_accepted(client, arguments):
    client.rpc(1, spec.Queue.Declare(queue="q", arguments=arguments), spec.Queue.DeclareOk)
