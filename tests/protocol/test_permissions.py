"""Permissions over the mock transport: which AMQP method needs which permission, in which order, and
RabbitMQ 3.10.8's exact refusals.

The restricted user may configure names containing ``-PC-``, write names containing ``-PW-`` and read
names containing ``-PR-`` (RabbitMQ searches the regex in the name, unanchored); ``empty`` has an
all-empty entry (opens the vhost, allows nothing) and ``none`` has no entry at all. ``guest`` (the
``admin`` client) creates what the restricted user finds.
"""

from __future__ import annotations

import re

import pytest
from pamqp import commands as spec

C, W, R = "-PC-", "-PW-", "-PR-"
DEFAULT_403 = "ACCESS_REFUSED - operation not permitted on the default exchange"


def refused(kind: str, name: str, user: str = "restricted") -> str:
    return f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '/' refused for user '{user}'"


@pytest.fixture
def users(add_user):
    add_user("restricted", "pw", (C, W, R))
    add_user("empty", "pw", ("", "", ""))
    add_user("none", "pw")


@pytest.fixture
def admin(client):
    return client


@pytest.fixture
def login(make_client, users):
    """``login(user)`` -> a client of that user with channel 1 open."""

    def _login(user: str = "restricted"):
        c = make_client()
        c.handshake(user, "pw")
        c.open_channel(1)
        return c

    return _login


@pytest.fixture
def restricted(login):
    return login("restricted")


def x_declare(c, name, kind="direct", **kw):
    return c.rpc(1, spec.Exchange.Declare(exchange=name, exchange_type=kind, **kw), spec.Exchange.DeclareOk)


def q_declare(c, name, **kw):
    return c.rpc(1, spec.Queue.Declare(queue=name, **kw), spec.Queue.DeclareOk)


def reopen(c):
    c.send(1, spec.Channel.CloseOk())
    c.open_channel(1)


def publish(c, exchange, routing_key="k"):
    c.publish(1, exchange, routing_key, b"m")
    closes = [f for _, f in c.methods() if isinstance(f, spec.Channel.Close)]
    return (
        (closes[0].reply_code, closes[0].reply_text, (closes[0].class_id, closes[0].method_id))
        if closes
        else None
    )


# -- the vhost --------------------------------------------------------------------------------------------
def test_any_permission_entry_opens_the_vhost(make_client, users):
    for user in ("restricted", "empty"):
        make_client().handshake(user, "pw")


def test_a_user_without_an_entry_is_refused_the_vhost_530(make_client, users):
    c = make_client()
    c.send_raw(b"AMQP\x00\x00\x09\x01")
    c.send(0, spec.Connection.StartOk(mechanism="PLAIN", response="\0none\0pw"))
    c.send(
        0, spec.Connection.TuneOk(channel_max=2047, frame_max=131072), spec.Connection.Open(virtual_host="/")
    )
    close = c.expect(spec.Connection.Close, 0)
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        530,
        "NOT_ALLOWED - access to vhost '/' refused for user 'none'",
        10,
        40,
    )


# -- an all-empty entry -----------------------------------------------------------------------------------
def test_empty_permissions_refuse_a_declare(login):
    c = login("empty")
    name = f"q{C}{W}{R}"
    assert c.refused(1, spec.Queue.Declare(queue=name)) == (403, refused("queue", name, "empty"), (50, 10))


def test_passive_declares_need_no_permission(admin, login):
    q_declare(admin, "existing")
    x_declare(admin, "existing-x")
    c = login("empty")
    q_declare(c, "existing", passive=True)
    x_declare(c, "existing-x", passive=True)


def test_empty_permissions_refuse_publishing_to_the_default_exchange_named_amq_default(admin, login):
    q_declare(admin, "existing")
    c = login("empty")
    assert publish(c, "", "existing") == (403, refused("exchange", "amq.default", "empty"), (60, 40))


def test_empty_permissions_refuse_a_get(admin, login):
    q_declare(admin, "existing")
    c = login("empty")
    assert c.refused(1, spec.Basic.Get(queue="existing")) == (
        403,
        refused("queue", "existing", "empty"),
        (60, 70),
    )


# -- configure --------------------------------------------------------------------------------------------
def test_declaring_a_new_exchange_needs_configure(restricted):
    assert restricted.refused(1, spec.Exchange.Declare(exchange="x-new", exchange_type="direct")) == (
        403,
        refused("exchange", "x-new"),
        (40, 10),
    )
    reopen(restricted)
    x_declare(restricted, f"x{C}")


def test_redeclaring_an_existing_exchange_needs_configure(admin, restricted):
    x_declare(admin, "x-none")
    method = spec.Exchange.Declare(exchange="x-none", exchange_type="direct")
    assert restricted.refused(1, method)[:2] == (403, refused("exchange", "x-none"))


@pytest.mark.parametrize("exists", [True, False], ids=["existing", "missing"])
def test_deleting_an_exchange_needs_configure_whether_or_not_it_exists(admin, restricted, exists):
    if exists:
        x_declare(admin, "x-none")
    assert restricted.refused(1, spec.Exchange.Delete(exchange="x-none")) == (
        403,
        refused("exchange", "x-none"),
        (40, 20),
    )


def test_configure_allows_declare_and_delete_of_an_exchange(restricted):
    x_declare(restricted, f"x{C}")
    restricted.rpc(1, spec.Exchange.Delete(exchange=f"x{C}"), spec.Exchange.DeleteOk)


def test_declaring_a_new_queue_needs_configure(restricted):
    assert restricted.refused(1, spec.Queue.Declare(queue="q-new")) == (
        403,
        refused("queue", "q-new"),
        (50, 10),
    )
    reopen(restricted)
    q_declare(restricted, f"q{C}")


def test_redeclaring_an_existing_queue_needs_configure(admin, restricted):
    q_declare(admin, "q-none")
    assert restricted.refused(1, spec.Queue.Declare(queue="q-none"))[:2] == (403, refused("queue", "q-none"))


@pytest.mark.parametrize("exists", [True, False], ids=["existing", "missing"])
def test_deleting_a_queue_needs_configure_whether_or_not_it_exists(admin, restricted, exists):
    if exists:
        q_declare(admin, "q-none")
    assert restricted.refused(1, spec.Queue.Delete(queue="q-none")) == (
        403,
        refused("queue", "q-none"),
        (50, 40),
    )


def test_configure_allows_declare_and_delete_of_a_queue(restricted):
    q_declare(restricted, f"q{C}")
    restricted.rpc(1, spec.Queue.Delete(queue=f"q{C}"), spec.Queue.DeleteOk)


def test_a_server_named_queue_is_refused_by_its_generated_name(restricted):
    code, text, _ = restricted.refused(1, spec.Queue.Declare(queue="", exclusive=True))
    pattern = re.escape(refused("queue", "@")).replace("@", r"amq\.gen-[A-Za-z0-9_-]{22}")
    assert code == 403 and re.fullmatch(pattern, text), text


# -- bindings ---------------------------------------------------------------------------------------------
@pytest.fixture
def bindables(admin):
    for queue in ("q-none", f"q{W}"):
        q_declare(admin, queue)
    for exchange in ("x-none", f"x{R}", f"x{W}"):
        x_declare(admin, exchange)


@pytest.mark.parametrize("verb", [spec.Queue.Bind, spec.Queue.Unbind], ids=["bind", "unbind"])
def test_queue_binding_checks_write_on_the_queue_then_read_on_the_exchange(restricted, bindables, verb):
    ids = (50, 20) if verb is spec.Queue.Bind else (50, 50)
    assert restricted.refused(1, verb(queue="q-none", exchange="x-none", routing_key="k")) == (
        403,
        refused("queue", "q-none"),
        ids,
    )
    reopen(restricted)
    assert restricted.refused(1, verb(queue=f"q{W}", exchange="x-none", routing_key="k"))[:2] == (
        403,
        refused("exchange", "x-none"),
    )
    reopen(restricted)
    restricted.send(1, verb(queue=f"q{W}", exchange=f"x{R}", routing_key="k"))
    assert not [f for _, f in restricted.methods() if isinstance(f, spec.Channel.Close)]


@pytest.mark.parametrize("verb", [spec.Exchange.Bind, spec.Exchange.Unbind], ids=["bind", "unbind"])
def test_exchange_binding_checks_write_on_the_destination_then_read_on_the_source(
    restricted, bindables, verb
):
    assert restricted.refused(1, verb(destination=f"x{R}", source="x-none", routing_key="k"))[:2] == (
        403,
        refused("exchange", f"x{R}"),
    )
    reopen(restricted)
    assert restricted.refused(1, verb(destination=f"x{W}", source="x-none", routing_key="k"))[:2] == (
        403,
        refused("exchange", "x-none"),
    )
    reopen(restricted)
    restricted.send(1, verb(destination=f"x{W}", source=f"x{R}", routing_key="k"))
    assert not [f for _, f in restricted.methods() if isinstance(f, spec.Channel.Close)]


def test_binding_permissions_are_checked_before_existence(restricted, bindables):
    method = spec.Queue.Bind(queue="q-missing", exchange=f"x{R}", routing_key="k")
    assert restricted.refused(1, method)[:2] == (403, refused("queue", "q-missing"))
    reopen(restricted)
    method = spec.Queue.Bind(queue=f"q{W}", exchange="x-missing", routing_key="k")
    assert restricted.refused(1, method)[:2] == (403, refused("exchange", "x-missing"))


def test_unbind_checks_the_default_exchange_between_write_and_read(restricted):
    method = spec.Queue.Unbind(queue="q-none", exchange="", routing_key="k")
    assert restricted.refused(1, method)[:2] == (403, refused("queue", "q-none"))
    reopen(restricted)
    for verb in (spec.Queue.Bind, spec.Queue.Unbind):  # before read on amq.default
        assert restricted.refused(1, verb(queue=f"q{W}", exchange="", routing_key="k"))[:2] == (
            403,
            DEFAULT_403,
        )
        reopen(restricted)


def test_unbind_answers_ok_for_what_is_missing_once_permitted(admin, restricted):
    method = spec.Queue.Unbind(queue=f"q{W}", exchange="x-none", routing_key="k")
    assert restricted.refused(1, method)[:2] == (403, refused("exchange", "x-none"))
    reopen(restricted)
    unbind = spec.Queue.Unbind(queue=f"q{W}", exchange=f"x{R}", routing_key="k")
    restricted.rpc(1, unbind, spec.Queue.UnbindOk)  # neither exists
    x_declare(admin, f"x{R}")
    restricted.rpc(1, unbind, spec.Queue.UnbindOk)


# -- publish, consume, get, purge -------------------------------------------------------------------------
def test_publishing_needs_write_on_the_exchange(admin, restricted):
    x_declare(admin, "x-none")
    x_declare(admin, f"x{W}")
    assert publish(restricted, "x-none") == (403, refused("exchange", "x-none"), (60, 40))
    reopen(restricted)
    assert publish(restricted, f"x{W}") is None


@pytest.mark.parametrize("exchange", ["", "amq.default"], ids=["empty-name", "amq.default"])
def test_publishing_to_the_default_exchange_is_checked_as_amq_default(admin, restricted, exchange):
    q_declare(admin, f"q{R}")
    assert publish(restricted, exchange, f"q{R}")[:2] == (403, refused("exchange", "amq.default"))


def test_publishing_to_a_missing_exchange_is_403_before_404(restricted):
    assert publish(restricted, "x-missing")[:2] == (403, refused("exchange", "x-missing"))
    reopen(restricted)
    assert publish(restricted, f"x{W}-missing")[:2] == (
        404,
        f"NOT_FOUND - no exchange 'x{W}-missing' in vhost '/'",
    )


@pytest.mark.parametrize(
    "method,ids",
    [
        (spec.Basic.Consume(queue="q-none"), (60, 20)),
        (spec.Basic.Get(queue="q-none"), (60, 70)),
        (spec.Basic.Get(queue="q-missing"), (60, 70)),
        (spec.Queue.Purge(queue=f"q{C}"), (50, 30)),  # purge needs read, not configure
    ],
    ids=["consume", "get", "get-missing", "purge"],
)
def test_consume_get_and_purge_need_read(admin, restricted, method, ids):
    q_declare(admin, "q-none")
    q_declare(admin, f"q{C}")
    assert restricted.refused(1, method) == (403, refused("queue", method.queue), ids)


def test_read_allows_purge_get_and_consume(admin, restricted):
    q_declare(admin, f"q{R}")
    admin.publish(1, "", f"q{R}", b"m")
    assert restricted.rpc(1, spec.Queue.Purge(queue=f"q{R}"), spec.Queue.PurgeOk).message_count == 1
    assert restricted.get(f"q{R}") is None
    restricted.rpc(1, spec.Basic.Consume(queue=f"q{R}"), spec.Basic.ConsumeOk)


def test_a_user_id_other_than_the_login_is_406(admin, restricted):
    x_declare(admin, f"x{W}")
    restricted.publish(1, f"x{W}", "k", b"m", spec.Basic.Properties(user_id="restricted"))
    restricted.publish(1, f"x{W}", "k", b"m", spec.Basic.Properties(user_id="guest"))
    close = restricted.expect(spec.Channel.Close, 1)
    assert (close.reply_code, close.reply_text) == (
        406,
        "PRECONDITION_FAILED - user_id property set to 'guest' but authenticated user was 'restricted'",
    )


# -- alternate and dead-letter exchanges ------------------------------------------------------------------
@pytest.fixture
def targets(admin):
    for exchange in ("ae-none", f"ae{W}"):
        x_declare(admin, exchange, "fanout")


def test_an_exchange_with_an_alternate_needs_read_on_itself_first(restricted, targets):
    method = spec.Exchange.Declare(
        exchange=f"x{C}", exchange_type="direct", arguments={"alternate-exchange": "ae-none"}
    )
    assert restricted.refused(1, method)[:2] == (403, refused("exchange", f"x{C}"))


def test_an_exchange_with_an_alternate_needs_write_on_the_alternate(restricted, targets):
    args = {"alternate-exchange": "ae-none"}
    method = spec.Exchange.Declare(exchange=f"x{C}{R}", exchange_type="direct", arguments=args)
    assert restricted.refused(1, method)[:2] == (403, refused("exchange", "ae-none"))
    reopen(restricted)
    x_declare(restricted, f"x{C}{R}", arguments={"alternate-exchange": f"ae{W}"})


def test_a_queue_with_a_dead_letter_exchange_needs_read_on_itself_first(restricted, targets):
    method = spec.Queue.Declare(queue=f"q{C}", arguments={"x-dead-letter-exchange": "ae-none"})
    assert restricted.refused(1, method)[:2] == (403, refused("queue", f"q{C}"))


@pytest.mark.parametrize("dlx,shown", [("ae-none", "ae-none"), ("", "amq.default")], ids=["named", "default"])
def test_a_queue_with_a_dead_letter_exchange_needs_write_on_it(restricted, targets, dlx, shown):
    method = spec.Queue.Declare(queue=f"q{C}{R}", arguments={"x-dead-letter-exchange": dlx})
    assert restricted.refused(1, method)[:2] == (403, refused("exchange", shown))
    reopen(restricted)
    q_declare(restricted, f"q{C}{R}", arguments={"x-dead-letter-exchange": f"ae{W}"})


def test_dead_lettering_checks_no_permission(admin, restricted):
    x_declare(admin, "dlx", "fanout")
    q_declare(admin, "dlq")
    admin.rpc(1, spec.Queue.Bind(queue="dlq", exchange="dlx"), spec.Queue.BindOk)
    q_declare(admin, f"src{R}", arguments={"x-dead-letter-exchange": "dlx"})
    admin.publish(1, "", f"src{R}", b"dead")
    got_ok, _, body = restricted.get(f"src{R}", no_ack=False)  # may read the source, not write the DLX
    assert body == b"dead"
    restricted.send(1, spec.Basic.Reject(delivery_tag=got_ok.delivery_tag, requeue=False))
    assert admin.drain("dlq") == [b"dead"]


def test_a_reply_consumer_needs_no_permission(login):
    c = login("empty")
    consume = spec.Basic.Consume(queue="amq.rabbitmq.reply-to", consumer_tag="rc", no_ack=True)
    assert c.rpc(1, consume, spec.Basic.ConsumeOk).consumer_tag == "rc"


def test_a_permitted_get_of_a_missing_queue_is_404(restricted):
    assert restricted.refused(1, spec.Basic.Get(queue=f"q{R}-missing")) == (
        404,
        f"NOT_FOUND - no queue 'q{R}-missing' in vhost '/'",
        (60, 70),
    )


def test_a_permitted_delete_of_a_missing_queue_is_ok(restricted):
    assert restricted.rpc(1, spec.Queue.Delete(queue=f"q{C}-missing"), spec.Queue.DeleteOk).message_count == 0
