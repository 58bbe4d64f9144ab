"""The damage and the stalls issue 38 found, as fixed cases with the pinger (``make attack`` runs them
with the property tests of ``e2e/test_attack_headers.py``).

Each test starts its own broker (ottermq with a dead-letter archive; under ``AMQP_URL`` the broker
there) with ``e2e/pinger.py`` round-tripping beside it, does one thing the issue reproduced, and then
checks the invariant of ``e2e/attack_case.py``: every confirmed message once in a queue, consumed or
archived; no 5xx; the pinger's worst round trip under 250 ms (the 100 MB publish: under
``BIG_BODY_LIMIT_MS``, RabbitMQ's own stall with room for a loaded machine); no 541.

    x-death count 2^63-1 + expiration, with 20 ordinary   RabbitMQ dead-letters all 21 and wraps the
                                                          count to -2^63
    headers nested 15,000 deep, the same                  RabbitMQ dead-letters all 21
    that message among 21 nacked (multiple, no requeue)   RabbitMQ dead-letters all 21, the consumer
                                                          stays connected
    a max-length queue whose head is that message         the publisher stays connected, the head is
                                                          dead-lettered
    policy ^(a|aa)+(?=b) over 500 queues 'a'*60+'!NNNN'    RabbitMQ: 52.8 ms worst for a client
    40 dead-letter moves of 115,000 ids (extension)       the broker keeps answering, later moves too
    one 100 MB persistent message                         published, confirmed and fetched while the
                                                          pinger waits no longer than on RabbitMQ
"""

from __future__ import annotations

import json
import os
import random
import time
import urllib.parse
from collections.abc import Callable, Iterator

import pytest

from .attack_case import Case, Target, once_more_if_slow, open_target
from .attack_checks import http, settle
from .attack_client import x_death_counts
from .hostile import (
    LONG_MAX,
    LONG_MIN,
    Field,
    deep_chain,
    headers_table,
    long_long,
    long_str,
    table,
    x_death,
    x_death_entry,
)

ORDINARY = 20
# RabbitMQ 3.10.8 holds other clients 0.31 s while it takes a 100 MB message (issue 38), up to 0.59 s
# measured on this 2-core machine (see test_a_100_mb_persistent_message)
BIG_BODY_LIMIT_MS = float(os.environ.get("ATTACK_BIG_BODY_LIMIT_MS", "400"))


@pytest.fixture
def target(tmp_path) -> Iterator[Target]:  # type: ignore[no-untyped-def]
    with open_target(tmp_path) as t:
        yield t


def dlx(dlq: str) -> list[tuple[bytes, Field]]:
    return [(b"x-dead-letter-exchange", long_str("")), (b"x-dead-letter-routing-key", long_str(dlq))]


def count_at_max(queue: str, reason: str = "expired") -> bytes:
    return headers_table(table(x_death(x_death_entry(queue, reason, long_long(LONG_MAX)))))


def judged(run: Callable[[], Case]) -> None:
    """Run a scenario (once more when only the pinger complained, see ``once_more_if_slow``) and
    fail with everything that broke the invariant."""
    cases: list[Case] = []

    def attempt() -> list[str]:
        cases.append(run())
        return cases[-1].problems

    problems = once_more_if_slow(attempt)
    case = cases[-1]
    assert not problems, f"{case.label}: {problems}\nconnections closed: {case.closes}\nlag: {case.lag}"


def expire_with_ordinary(case: Case, hostile: bytes) -> tuple[str, str]:
    """The issue's reproduction: a queue with a dead-letter exchange; one persistent message with
    ``hostile`` headers and ``expiration`` 1000, then 20 ordinary persistent ones with 100."""
    dlq = case.queue("dlq", durable=True)
    src = case.queue("src", dlx(dlq), durable=True)
    case.publish(src, hostile, expiration="1000")
    case.confirm()
    for _ in range(ORDINARY):
        case.publish(src, None, expiration="100")
    case.confirm()
    settle(lambda: case.counts(src, dlq) == (0, ORDINARY + 1), 6)
    return src, dlq


def test_x_death_count_at_max_with_expiring_messages(target: Target) -> None:
    """RabbitMQ dead-letters all 21 and wraps the count: 2^63-1 + 1 = -2^63 (measured, 3.10.8)."""
    counts: list[list[int]] = []

    def run() -> Case:
        case = Case(target, "x-death count 2^63-1, expiring")
        _, dlq = expire_with_ordinary(case, count_at_max(case.name("src")))
        while (got := case.do(lambda: case.client.get(dlq))) is not None:
            case.ledger.consumed[got.body.decode()] += 1
            if got.body.endswith(b"#1"):  # the first published: the hostile one
                counts.append(x_death_counts(got))
        case.verdict()
        return case

    judged(run)
    assert counts[-1:] == [[LONG_MIN]]


def test_headers_nested_15000_deep_with_expiring_messages(target: Target) -> None:
    def run() -> Case:
        case = Case(target, "headers nested 15,000 deep, expiring")
        expire_with_ordinary(case, headers_table(table((b"deep", deep_chain(15_000)))))
        case.verdict()
        return case

    judged(run)


@pytest.mark.extension
def test_x_death_count_at_max_survives_a_crash_after_expiry(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The rows the expiry moved are in the store: a kill -9 right after finds all 21 in the dead-letter
    queue (today the batch's deletes commit alone, and the queues are empty after the restart)."""
    with open_target(tmp_path) as target:
        case = Case(target, "x-death count 2^63-1, expiring, kill -9")
        _, dlq = expire_with_ordinary(case, count_at_max(case.name("src")))
        assert target.process is not None
        case.client.close()
        target.process.kill()
        target.process.start()
        client = target.client()
        try:
            assert client.queue_declare(dlq, durable=True, passive=True) == ORDINARY + 1
        finally:
            client.close()


def test_nack_multiple_of_21_with_the_hostile_message(target: Target) -> None:
    """Another consumer nacks all 21 (multiple=true, requeue=false): RabbitMQ dead-letters all 21 and
    the consumer's connection stays open."""

    def run() -> Case:
        case = Case(target, "nack multiple of 21 with x-death count 2^63-1")
        dlq = case.queue("dlq", durable=True)
        src = case.queue("src", dlx(dlq), durable=True)
        case.publish(src, count_at_max(src, "rejected"))
        for _ in range(ORDINARY):
            case.publish(src, None)
        case.confirm()
        consumer = target.client(confirms=False)
        try:
            tags = [d.delivery_tag for d in iter(lambda: consumer.get(src, no_ack=False), None)]
            assert len(tags) == ORDINARY + 1
            consumer.nack(tags[-1], multiple=True, requeue=False)
            consumer.sync()  # raises if the broker closed the consumer's connection
        finally:
            consumer.close()
        settle(lambda: case.counts(src, dlq) == (0, ORDINARY + 1), 6)
        case.verdict()
        return case

    judged(run)


def test_max_length_queue_whose_head_is_the_hostile_message(target: Target) -> None:
    """``x-max-length`` 1 with a dead-letter exchange: each publish pushes the head out. The hostile
    message at the head is dead-lettered like any other and the publisher stays connected."""

    def run() -> Case:
        case = Case(target, "max-length head with x-death count 2^63-1")
        dlq = case.queue("dlq", durable=True)
        src = case.queue("src", [*dlx(dlq), (b"x-max-length", long_long(1))], durable=True)
        case.publish(src, count_at_max(src, "maxlen"))
        case.confirm()
        for _ in range(ORDINARY):
            case.publish(src, None)
        case.confirm()
        case.problems += [
            f"the publisher's {c}" for c in case.closes if "541" not in c
        ]  # 541s are in already
        settle(lambda: case.counts(src, dlq) == (1, ORDINARY), 6)
        case.verdict()
        return case

    judged(run)


def test_a_catastrophic_policy_pattern_over_500_queues(target: Target) -> None:
    """``^(a|aa)+(?=b)`` against 500 names of 60 a's and a '!': exponential backtracking per name.
    RabbitMQ keeps other clients waiting 52.8 ms at worst (issue 38); so must we (under 250 ms). The
    PUT itself may take its time: RabbitMQ 3.10.8 has not answered it after 60 s (measured)."""
    b = target.broker

    def run() -> Case:
        case = Case(target, "policy ^(a|aa)+(?=b) over 500 queues")
        vhost = f"{case.ledger.case}.policy"
        v = urllib.parse.quote(vhost, safe="")
        assert http(b.management_url, f"/api/vhosts/{v}", "PUT", {})[0] in (201, 204)
        try:
            everything = {"configure": ".*", "write": ".*", "read": ".*"}
            assert http(b.management_url, f"/api/permissions/{v}/{b.user}", "PUT", everything)[0] in (
                201,
                204,
            )
            client = target.client(vhost=vhost, confirms=False)
            try:
                for n in range(500):
                    client.queue_declare("a" * 60 + f"!{n:04d}")
            finally:
                client.close()
            target.probe.window()
            started = time.monotonic()
            policy = {"pattern": "^(a|aa)+(?=b)", "definition": {"max-length": 1000}, "apply-to": "queues"}
            status, answer = http(b.management_url, f"/api/policies/{v}/evil", "PUT", policy, timeout=15)
            took = time.monotonic() - started
            # no answer (0) is allowed: RabbitMQ 3.10.8 takes over a minute to answer
            assert status < 500, answer
            case.lag = target.probe.window()
            case.problems += [f"{p} (PUT policy took {took:.2f} s)" for p in target.probe.problems(case.lag)]
        finally:
            http(b.management_url, f"/api/vhosts/{v}", "DELETE")
        case.cleanup()
        return case

    judged(run)


@pytest.mark.extension
def test_forty_dead_letter_moves_of_115000_ids(target: Target) -> None:
    """40 move requests naming 115,000 ids each (none there): the broker keeps answering everyone
    under 250 ms meanwhile, and a legitimate move afterwards does too. Each request is started (201)
    or refused whole (400). Sending stops after 30 s: a broker that slow has already failed."""
    b = target.broker
    ids = random.Random(38).sample(range(1, 10**6), 115_000)  # under the 1 MB request body limit
    body = json.dumps({"ids": ids}, separators=(",", ":")).encode()

    def run() -> Case:
        case = Case(target, "40 moves of 115,000 ids")
        dlq = case.queue("dlq", durable=True)
        v, q = (urllib.parse.quote(x, safe="") for x in (b.vhost, dlq))
        statuses = []
        deadline = time.monotonic() + 30
        for _ in range(40):
            statuses.append(http(b.management_url, f"/api/dead-letters/{v}/{q}/moves", "POST", body)[0])
            if time.monotonic() > deadline:
                break
        lag = target.probe.window()
        assert len(statuses) == 40, f"40 requests did not go out in 30 s ({len(statuses)} did); pinger: {lag}"
        assert set(statuses) <= {201, 400}, statuses  # started, or refused as a whole
        case.problems += [f"during the 40 requests: {p}" for p in target.probe.problems(lag)]
        # then a legitimate move: ten rejected messages back to a queue
        src = case.queue("src", dlx(dlq), durable=True)
        back = case.queue("back", durable=True)
        for _ in range(10):
            case.publish(src, None)
        case.confirm()
        for got in iter(lambda: case.client.get(src, no_ack=False), None):
            case.client.reject(got.delivery_tag, requeue=False)
        settle(lambda: case.count(dlq) == 10, 5)
        move = {"all": True, "target": {"exchange": "", "routing_key": back}}
        status, answer = http(b.management_url, f"/api/dead-letters/{v}/{q}/moves", "POST", move)
        assert status == 201, answer
        settle(lambda: case.count(back) == 10, 10)
        case.verdict()
        return case

    judged(run)


def test_a_100_mb_persistent_message(target: Target) -> None:
    """A 100 MB persistent message published, confirmed and fetched back: the other clients wait no
    longer than RabbitMQ makes them (``BIG_BODY_LIMIT_MS``). Measured here with this test's pinger,
    RabbitMQ 3.10.8: 46-362 ms while publishing, 107-589 ms while fetching (three rounds); issue 38
    measured 0.31 s."""
    probe, limit = target.probe, BIG_BODY_LIMIT_MS / 1000

    def run() -> Case:
        case = Case(target, "100 MB persistent publish")
        dest = case.queue("dest", durable=True)
        case.publish(dest, None, body=b"\0" * (100 * 2**20))
        case.confirm(timeout=120)
        case.problems += [f"publishing: {p}" for p in probe.problems(probe.window(), limit)]
        got = case.do(lambda: case.client.get(dest))
        assert got is not None and len(got.body) > 100 * 2**20
        case.ledger.consumed[got.body[: got.body.index(b"\0")].decode()] += 1
        del got
        case.problems += [f"fetching: {p}" for p in probe.problems(probe.window(), limit)]
        case.verdict()
        return case

    judged(run)
