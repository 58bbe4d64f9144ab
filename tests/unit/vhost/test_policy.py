"""Policy validation, matching and merging (``vhost/policy.py``): tables of cases per key, with the texts
RabbitMQ 3.10 answers (checked against it over HTTP)."""

from __future__ import annotations

import pytest
from ottermq.vhost.arguments import parse_queue_args
from ottermq.vhost.policy import PolicyError, choose, consumer_timeout, effective_args, make_policy, merge


def policy(name="p", pattern=".*", definition=None, apply_to="all", priority=0, operator=False):
    definition = definition or {"max-length": 1}
    return make_policy("/", name, pattern, definition, apply_to, priority, operator=operator)


@pytest.mark.parametrize(
    ("definition", "reason"),
    [
        ({"message-ttl": -1}, "-1 is not a valid message TTL"),
        ({"message-ttl": "x"}, '<<"x">> is not a valid message TTL'),
        ({"message-ttl": 1.5}, "1.5 is not a valid message TTL"),
        ({"message-ttl": True}, "true is not a valid message TTL"),
        ({"expires": 0}, "0 is not a valid queue expiry"),
        ({"max-length": -1}, "-1 is not a valid maximum length"),
        ({"max-length-bytes": -1}, "-1 is not a valid maximum length in bytes"),
        ({"dead-letter-exchange": 5}, "5 is not a valid dead letter exchange name"),
        ({"dead-letter-routing-key": 5}, "5 is not a valid dead letter routing key"),
        ({"overflow": "bad"}, '<<"bad">> is not a valid overflow value'),
        ({"delivery-limit": -1}, "-1 is not a valid delivery limit"),
        ({"alternate-exchange": 5}, "5 is not a valid alternate exchange name"),
        ({"ottermq-exact-ttl": "yes"}, '<<"yes">> is not a valid exact TTL setting (true or false)'),
        ({"dead-letter-strategy": "bogus"}, '<<"bogus">> is not a valid dead letter strategy'),
        ({"max-in-memory-length": -1}, "-1 is not a valid maximum memory in bytes"),
        ({"max-in-memory-bytes": "x"}, '<<"x">> is not a valid maximum memory in bytes'),
        ({"queue-leader-locator": "x"}, '<<"x">> is not a valid queue leader locator value'),
        ({"nope": 1}, '[{<<"nope">>,1}] are not recognised policy settings'),
        (
            {"message-ttl": 5, "other": 2, "bogus": 1},
            '[{<<"bogus">>,1},{<<"other">>,2}] are not recognised policy settings',
        ),
        ({}, "no policy provided"),
    ],
)
def test_invalid_definitions_get_rabbitmqs_reason(definition, reason):
    with pytest.raises(PolicyError) as info:
        make_policy("/", "p", "x", definition)
    assert str(info.value) == reason


def test_other_checks():
    with pytest.raises(PolicyError, match="^apply-to 'bogus' unrecognised; should be 'queues', 'exch"):
        policy(apply_to="bogus")
    with pytest.raises(PolicyError, match=r'^priority should be a number, actually was <<"high">>$'):
        policy(priority="high")
    with pytest.raises(PolicyError, match="^pattern should be regular expression but is invalid: "):
        policy(pattern="(")
    with pytest.raises(PolicyError, match=r'^\[\{<<"dead-letter-exchange">>,<<"x">>\}\] are not recognised'):
        policy(definition={"dead-letter-exchange": "x"}, operator=True)
    with pytest.raises(PolicyError, match=r'^\[\{<<"ottermq-exact-ttl">>,true\}\] are not recognised'):
        policy(definition={"ottermq-exact-ttl": True}, operator=True)


def test_accepted_keys_of_other_features():
    accepted = policy(definition={"ha-mode": "all", "queue-mode": "lazy", "max-age": "1D"})
    assert accepted.definition["ha-mode"] == "all"


def test_choose_highest_priority_matching_kind_and_searched_pattern():
    low = policy("low", "^orders", priority=1)
    high = policy("high", "ders", priority=5)
    exchanges = policy("xs", ".*", apply_to="exchanges", priority=9)
    assert choose([low, high, exchanges], "queue", "orders.eu") is high
    assert choose([low, high, exchanges], "queue", "my-orders") is high
    assert choose([low, exchanges], "queue", "other") is None
    assert choose([low, high, exchanges], "exchange", "orders") is exchanges
    tie_b, tie_a = policy("b", "q", priority=1), policy("a", "q", priority=1)
    assert choose([tie_b, tie_a], "queue", "q") is tie_a


VALID = {
    "initial-cluster-size": 3,
    "dead-letter-strategy": "at-least-once",
    "queue-leader-locator": "balanced",
}


@pytest.mark.parametrize(
    "key",
    [
        "max-age",
        "stream-max-segment-size-bytes",
        "initial-cluster-size",
        "dead-letter-strategy",
        "queue-leader-locator",
    ],
)
def test_a_policy_with_a_quorum_or_stream_key_is_skipped_for_classic_queues(key):
    lower = policy("lower", "^q", {"max-length": 5})
    other = policy(
        "other",
        "^q$",
        {"max-length": 1, key: VALID.get(key, "x")},
        apply_to="all",
        priority=9,
    )
    assert choose([lower, other], "queue", "q") is lower  # as RabbitMQ 3.10 (is_policy_applicable)
    assert choose([lower, other], "exchange", "q") is other


def test_delivery_limit_policies_apply_to_classic_queues_here():
    lower = policy("lower", "^q", {"max-length": 5})
    limit = policy("limit", "^q$", {"delivery-limit": 2}, priority=9)
    assert choose([lower, limit], "queue", "q") is limit  # RabbitMQ skips it for classic queues


@pytest.mark.parametrize(
    ("user", "operator", "merged"),
    [
        ({"message-ttl": 100}, {"message-ttl": 50}, {"message-ttl": 50}),
        ({"message-ttl": 10}, {"message-ttl": 50}, {"message-ttl": 10}),
        (
            {"expires": 1000, "dead-letter-exchange": "dlx"},
            {"expires": 5000},
            {"expires": 1000, "dead-letter-exchange": "dlx"},
        ),
        ({"max-length": 5}, {"max-length-bytes": 100}, {"max-length": 5, "max-length-bytes": 100}),
        ({"overflow": "reject-publish"}, {"overflow": "drop-head"}, {"overflow": "drop-head"}),
        ({"delivery-limit": 3}, {"delivery-limit": 9}, {"delivery-limit": 3}),
        (None, {"max-length": 2}, {"max-length": 2}),
        ({"max-length": 2}, None, {"max-length": 2}),
    ],
)
def test_user_and_operator_merge(user, operator, merged):
    u = policy("u", definition=user) if user else None
    o = policy("o", definition=operator, operator=True) if operator else None
    assert merge(u, o) == merged


@pytest.mark.parametrize(
    ("arguments", "definition", "expected"),
    [
        ({"x-message-ttl": 100}, {"message-ttl": 50}, {"message_ttl": 50}),
        ({"x-message-ttl": 10}, {"message-ttl": 50}, {"message_ttl": 10}),
        ({}, {"message-ttl": 50}, {"message_ttl": 50}),
        ({"x-expires": 1000}, {"expires": 5000}, {"expires": 1000}),
        ({"x-max-length": 10}, {"max-length": 5}, {"max_length": 5}),
        ({"x-max-length-bytes": 10}, {"max-length-bytes": 50}, {"max_length_bytes": 10}),
        ({"x-dead-letter-exchange": "arg"}, {"dead-letter-exchange": "pol"}, {"dead_letter_exchange": "arg"}),
        ({}, {"dead-letter-exchange": "pol"}, {"dead_letter_exchange": "pol"}),
        (
            {"x-dead-letter-exchange": "d", "x-dead-letter-routing-key": "a"},
            {"dead-letter-routing-key": "p"},
            {"dead_letter_routing_key": "a"},
        ),
        ({"x-overflow": "reject-publish"}, {"overflow": "drop-head"}, {"overflow": "reject-publish"}),
        ({}, {"overflow": "reject-publish"}, {"overflow": "reject-publish"}),
        ({"x-delivery-limit": 5}, {"delivery-limit": 2}, {"delivery_limit": 2}),
        ({}, {"ottermq-exact-ttl": True}, {"exact_ttl": True}),
        ({"x-ottermq-exact-ttl": False}, {"ottermq-exact-ttl": True}, {"exact_ttl": False}),
        ({"x-ottermq-exact-ttl": True}, {"ottermq-exact-ttl": False}, {"exact_ttl": True}),
    ],
)
def test_policy_against_queue_arguments(arguments, definition, expected):
    declared = parse_queue_args(arguments, "q")
    result = effective_args(declared, definition)
    for attribute, value in expected.items():
        assert getattr(result, attribute) == value
    assert result.raw == declared.raw  # declare-equivalence still compares what was declared


def test_consumer_timeout_lowest_wins():
    declared = parse_queue_args({}, "q")
    assert consumer_timeout(declared, {}, 1_800_000) == 1_800_000
    assert consumer_timeout(declared, {"consumer-timeout": 5000}, 1_800_000) == 5000
    assert consumer_timeout(declared, {}, None) is None


def test_queue_type_apply_to_values_of_rabbitmq_3_12():
    classic = policy("c", apply_to="classic_queues")
    assert classic.applies("queue", "q") and not classic.applies("exchange", "q")
    assert not classic.applies("queue", "q", "quorum")
    quorum = policy("qq", apply_to="quorum_queues")
    assert quorum.applies("queue", "q", "quorum")
    assert not quorum.applies("queue", "q") and not quorum.applies("exchange", "q")
    streams = policy("s", apply_to="streams")
    for queue_type in ("classic", "quorum"):
        assert not streams.applies("queue", "q", queue_type) and not streams.applies("exchange", "q")
    for apply_to in ("all", "queues"):
        assert policy(apply_to=apply_to).applies("queue", "q", "quorum")


# ---------------------------------------------------------------------------------------------
# quorum queues (measured on RabbitMQ 3.10.8 through the effect of each policy on a quorum queue)
# ---------------------------------------------------------------------------------------------
QUORUM = {"x-queue-type": "quorum"}


@pytest.mark.parametrize(
    ("key", "value", "applies"),
    [
        ("queue-mode", "lazy", False),
        ("ha-mode", "all", False),
        ("max-age", "1D", False),
        ("queue-master-locator", "min-masters", False),
        ("initial-cluster-size", 3, False),
        ("stream-max-segment-size-bytes", 5, False),
        ("dead-letter-strategy", "at-least-once", True),
        ("queue-leader-locator", "balanced", True),
        ("delivery-limit", 3, True),
        ("max-in-memory-length", 1, True),
    ],
)
def test_a_policy_with_a_key_quorum_queues_lack_is_skipped_for_them(key, value, applies):
    """``rabbit_quorum_queue``'s ``unsupported_policies``: such a policy does not apply, the next
    matching one does (RabbitMQ 3.10.8 showed ``policy`` and ``effective_policy_definition`` of the
    lower one)."""
    lower = policy("lower", "^q", {"max-length-bytes": 1000000})
    other = policy("other", "^q$", {"max-length": 2, key: value}, priority=9)
    assert choose([lower, other], "queue", "q", "quorum") is (other if applies else lower)


def test_quorum_queue_precedence():
    """A quorum queue takes the policy's ``overflow`` and ``expires`` over its arguments, the lower
    ``delivery-limit``, ``max-length``, ``message-ttl``, and its own dead-letter exchange."""
    declared = parse_queue_args(
        {
            **QUORUM,
            "x-overflow": "reject-publish",
            "x-expires": 1000,
            "x-delivery-limit": 1,
            "x-max-length": 5,
            "x-message-ttl": 100,
            "x-dead-letter-exchange": "mine",
        },
        "q",
    )
    definition = {
        "overflow": "drop-head",
        "expires": 5000,
        "delivery-limit": 5,
        "max-length": 2,
        "message-ttl": 500,
        "dead-letter-exchange": "theirs",
    }
    args = effective_args(declared, definition)
    assert (args.overflow, args.expires, args.delivery_limit, args.max_length, args.message_ttl) == (
        "drop-head",
        5000,
        1,
        2,
        100,
    )
    assert args.dead_letter_exchange == "mine"
    classic = effective_args(
        parse_queue_args({"x-overflow": "reject-publish", "x-expires": 1000}, "q"), definition
    )
    assert (classic.overflow, classic.expires) == ("reject-publish", 1000)  # the argument wins


def test_quorum_default_delivery_limit_is_opt_in():
    """``OTTERMQ_QUORUM_DELIVERY_LIMIT`` (RabbitMQ 4's 20) applies to quorum queues with no limit of
    their own, argument or policy; classic queues never get it."""
    bare = parse_queue_args(QUORUM, "q")
    assert effective_args(bare, {}).delivery_limit is None  # unset: RabbitMQ 3.10's none
    assert effective_args(bare, {}, 20).delivery_limit == 20
    assert effective_args(bare, {"delivery-limit": 50}, 20).delivery_limit == 50  # the policy's
    own = parse_queue_args({**QUORUM, "x-delivery-limit": 30}, "q")
    assert effective_args(own, {}, 20).delivery_limit == 30
    assert effective_args(parse_queue_args({}, "q"), {}, 20).delivery_limit is None
