"""The broker-side paths the adversarial suite sends hostile headers and arguments down, and the
Hypothesis machinery that runs them (``e2e/test_attack_headers.py``, ``e2e/test_attack_extension.py``).

Each path takes a :class:`~e2e.attack_case.Case`, a ``hostile(source queue, *extra entries)`` that
encodes the example's headers table for that queue (``x-death`` entries drawn "for this queue and
reason" name it), and a small ``variant`` number; it publishes the hostile message first (confirmed
before the rest, so it is the head), then ``ORDINARY`` ordinary ones, does what the path does, and
waits (``SETTLE``) until every message is where it belongs. :func:`run_examples` then draws
``ATTACK_EXAMPLES`` values (seed ``ATTACK_SEED``) after the two fixed ones and records every example
that breaks the invariant as a finding.

    expired_message   per-message ``expiration`` into a dead-letter queue
    expired_queue     ``x-message-ttl``
    rejected          ``basic.reject`` requeue=false, one by one
    nacked            ``basic.nack`` multiple=true requeue=false
    drop_head         ``x-max-length`` 1, ``drop-head``, the hostile message at the head
    reject_publish    ``x-max-length`` 1, ``reject-publish-dlx`` (the publisher is nacked; refused
                      messages are dead-lettered, and are owed at most once)
    delivery_limit    a quorum queue's ``x-delivery-limit``
    headers_exchange  routed by a headers exchange matching on the message's headers
    consistent_hash   routed by an ``x-consistent-hash`` exchange hashing a header of the message
                      (``x-death`` or an ordinary one), all buckets one queue's
    requeued          ``basic.nack`` requeue=true, back into the queue
    ottermq only:     delayed_retry (``x-delayed-retry-*``), moves (``POST
                      /api/dead-letters/{vhost}/{queue}/moves`` back to a queue), dropped (a
                      dead-letter exchange without bindings: the archive must hold them),
                      delayed_exchange (``x-delayed-message``)
"""

from __future__ import annotations

import base64
import os
import random
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st

from .attack_case import Case, Findings, Target, once_more_if_slow
from .attack_checks import http, read_archive, settle
from .hostile import (
    LONG_MAX,
    REASON,
    SOURCE,
    Field,
    argument_values,
    deep_chain,
    deep_depth_fitting,
    headers_table,
    hostile_headers,
    long_long,
    long_str,
    table,
    x_death,
    x_death_entry,
)

EXAMPLES = int(os.environ.get("ATTACK_EXAMPLES", "3"))
SEED_SETTING = os.environ.get("ATTACK_SEED", "0")
SEED = random.SystemRandom().randrange(2**32) if SEED_SETTING == "random" else int(SEED_SETTING)
ORDINARY = int(os.environ.get("ATTACK_ORDINARY", "5"))
SETTLE = 3.0  # seconds a path may take to put every message where it belongs
REPRO_LIMIT = 16_384  # a finding's headers up to this size are saved encoded (base64), to replay it
Hostile = Callable[..., bytes]  # hostile(source queue, *extra entries) -> encoded headers


def dlx(dlq: str, exchange: str = "") -> list[tuple[bytes, Field]]:
    return [(b"x-dead-letter-exchange", long_str(exchange)), (b"x-dead-letter-routing-key", long_str(dlq))]


def publish_all(case: Case, queue: str, hostile: bytes | None, *, exchange: str = "", **props: str) -> None:
    """The hostile message first (confirmed before the rest, so it is the head), then the ordinary."""
    case.publish(queue, hostile, exchange=exchange, **props)
    case.confirm()
    for _ in range(ORDINARY):
        case.publish(queue, None, exchange=exchange, **props)
    case.confirm()


def fetch_all(case: Case, queue: str) -> list[int]:
    """Delivery tags of everything in ``queue``, taken with ``basic.get`` and not acknowledged."""
    tags: list[int] = []
    while (got := case.do(lambda: case.client.get(queue, no_ack=False))) is not None:
        tags.append(got.delivery_tag)
    return tags


def landed(case: Case, expected: dict[str, Callable[[], int]]) -> Callable[[], bool]:
    return lambda: all(case.count(q) == n() for q, n in expected.items())


# --------------------------------------------------------------------------------------------------------
# the paths
# --------------------------------------------------------------------------------------------------------
def expired_message(case: Case, hostile: Hostile, variant: int) -> None:
    dlq = case.queue("dlq")
    src = case.queue("src", dlx(dlq))
    case.publish(src, hostile(src), expiration="80")
    case.confirm()
    for _ in range(ORDINARY):
        case.publish(src, None, expiration="30")
    case.confirm()
    settle(landed(case, {src: lambda: 0, dlq: lambda: len(case.ledger.confirmed)}), SETTLE)


def expired_queue(case: Case, hostile: Hostile, variant: int) -> None:
    dlq = case.queue("dlq")
    src = case.queue("src", [*dlx(dlq), (b"x-message-ttl", long_long(30))])
    publish_all(case, src, hostile(src))
    settle(landed(case, {src: lambda: 0, dlq: lambda: len(case.ledger.confirmed)}), SETTLE)


def rejected(case: Case, hostile: Hostile, variant: int) -> None:
    dlq = case.queue("dlq")
    src = case.queue("src", dlx(dlq))
    publish_all(case, src, hostile(src))
    for tag in fetch_all(case, src):
        case.do(lambda t=tag: case.client.reject(t, requeue=False))  # type: ignore[misc]
    case.do(lambda: case.client.sync())
    settle(landed(case, {src: lambda: 0, dlq: lambda: len(case.ledger.confirmed)}), SETTLE)


def nacked(case: Case, hostile: Hostile, variant: int) -> None:
    dlq = case.queue("dlq")
    src = case.queue("src", dlx(dlq))
    publish_all(case, src, hostile(src))
    tags = fetch_all(case, src)
    if tags:
        case.do(lambda: case.client.nack(tags[-1], multiple=True, requeue=False))
        case.do(lambda: case.client.sync())
    settle(landed(case, {src: lambda: 0, dlq: lambda: len(case.ledger.confirmed)}), SETTLE)


def drop_head(case: Case, hostile: Hostile, variant: int) -> None:
    dlq = case.queue("dlq")
    src = case.queue(
        "src", [*dlx(dlq), (b"x-max-length", long_long(1)), (b"x-overflow", long_str("drop-head"))]
    )
    publish_all(case, src, hostile(src))
    settle(landed(case, {src: lambda: 1, dlq: lambda: len(case.ledger.confirmed) - 1}), SETTLE)


def reject_publish(case: Case, hostile: Hostile, variant: int) -> None:
    dlq = case.queue("dlq")
    overflow = [(b"x-max-length", long_long(1)), (b"x-overflow", long_str("reject-publish-dlx"))]
    src = case.queue("src", [*dlx(dlq), *overflow])
    case.publish(src, None)  # fills the queue; the hostile one and the rest are refused
    case.confirm()
    publish_all(case, src, hostile(src))
    settle(landed(case, {src: lambda: 1, dlq: lambda: len(case.ledger.refused)}), SETTLE)


def _return_until_dead(case: Case, src: str, dlq: str) -> Callable[[], bool]:
    """One ``basic.get`` + reject(requeue=true) per poll, until every confirmed message is dead."""

    def step() -> bool:
        got = case.do(lambda: case.client.get(src, no_ack=False))
        if got is not None:
            case.do(lambda: case.client.reject(got.delivery_tag, requeue=True))
        return case.count(dlq) == len(case.ledger.confirmed)

    return step


def delivery_limit(case: Case, hostile: Hostile, variant: int) -> None:
    dlq = case.queue("dlq", durable=True)
    quorum = [(b"x-queue-type", long_str("quorum")), (b"x-delivery-limit", long_long(1))]
    src = case.queue("src", [*dlx(dlq), *quorum], durable=True)
    publish_all(case, src, hostile(src))
    settle(_return_until_dead(case, src, dlq), SETTLE * 2)


def headers_exchange(case: Case, hostile: Hostile, variant: int) -> None:
    hx = case.exchange("hx", "headers")
    dest = case.queue("dest")
    match = "any" if variant % 2 else "all"
    case.do(
        lambda: case.client.queue_bind(
            dest, hx, "", [(b"x-match", long_str(match)), (b"route", long_str("y"))]
        )
    )
    route = (b"route", long_str("y"))
    case.publish("", hostile(dest, route), exchange=hx)
    case.confirm()
    for _ in range(ORDINARY):
        case.publish("", headers_table([route]), exchange=hx)
    case.confirm()
    settle(landed(case, {dest: lambda: len(case.ledger.confirmed)}), SETTLE)


def consistent_hash(case: Case, hostile: Hostile, variant: int) -> None:
    header = ("x-death", "route")[variant % 2]
    cx = case.exchange("cx", "x-consistent-hash", [(b"hash-header", long_str(header))])
    dest = case.queue("dest")
    case.do(lambda: case.client.queue_bind(dest, cx, "2"))  # two buckets: the value is hashed
    route = (b"route", long_str("y"))
    case.publish("", hostile(dest, route), exchange=cx)
    case.confirm()
    for _ in range(ORDINARY):
        case.publish("", headers_table([route]), exchange=cx)
    case.confirm()
    settle(landed(case, {dest: lambda: len(case.ledger.confirmed)}), SETTLE)


def requeued(case: Case, hostile: Hostile, variant: int) -> None:
    src = case.queue("src")
    publish_all(case, src, hostile(src))
    tags = fetch_all(case, src)
    if tags:
        case.do(lambda: case.client.nack(tags[-1], multiple=True, requeue=True))
        case.do(lambda: case.client.sync())
    settle(landed(case, {src: lambda: len(case.ledger.confirmed)}), SETTLE)


def delayed_retry(case: Case, hostile: Hostile, variant: int) -> None:
    dlq = case.queue("dlq")
    retry = [
        (b"x-delayed-retry-type", long_str(["all", "failed"][variant % 2])),
        (b"x-delayed-retry-min", long_long(5)),
        (b"x-delayed-retry-max", long_long(20)),
        (b"x-delivery-limit", long_long(1)),
    ]
    src = case.queue("src", [*dlx(dlq), *retry])
    publish_all(case, src, hostile(src))
    settle(_return_until_dead(case, src, dlq), SETTLE * 2)


def moves(case: Case, hostile: Hostile, variant: int) -> None:
    rejected(case, hostile, variant)
    dlq, back = case.queues[0], case.queue("back")
    b = case.target.broker
    v, q = (urllib.parse.quote(x, safe="") for x in (b.vhost, dlq))
    body = {
        "all": True,
        "target": {"exchange": "", "routing_key": back},
        "keep_death_headers": variant % 2 == 0,
    }
    status, answer = http(b.management_url, f"/api/dead-letters/{v}/{q}/moves", "POST", body)
    if status != 201:
        case.problems.append(f"POST moves -> {status}: {answer[:200]!r}")
        return
    settle(landed(case, {dlq: lambda: 0, back: lambda: len(case.ledger.confirmed)}), SETTLE)


def dropped(case: Case, hostile: Hostile, variant: int) -> None:
    sink = case.exchange("sink", "fanout")  # no bindings: every dead letter is dropped, and archived
    src = case.queue("src", [*dlx("nowhere", sink), (b"x-message-ttl", long_long(30))])
    publish_all(case, src, hostile(src))
    archive = case.target.archive

    def archived() -> bool:
        return sum(read_archive(archive, case.ledger.case + "#").values()) >= len(case.ledger.confirmed)

    settle(archived, SETTLE * 2)  # the archive writes at least every 0.5 s


def delayed_exchange(case: Case, hostile: Hostile, variant: int) -> None:
    dx = case.exchange("dx", "x-delayed-message", [(b"x-delayed-type", long_str("direct"))])
    dest = case.queue("dest")
    case.do(lambda: case.client.queue_bind(dest, dx, dest))
    case.publish(dest, hostile(dest, (b"x-delay", long_long(40))), exchange=dx)
    case.confirm()
    for _ in range(ORDINARY):
        case.publish(dest, headers_table([(b"x-delay", long_long(20))]), exchange=dx)
    case.confirm()
    settle(landed(case, {dest: lambda: len(case.ledger.confirmed)}), SETTLE)


@dataclass(frozen=True)
class BrokerPath:
    run: Callable[[Case, Hostile, int], None]
    reason: str  # why its messages die, for x-death entries about this very death
    rabbitmq: bool = True  # RabbitMQ 3.10 has the path

    @property
    def name(self) -> str:
        return self.run.__name__


PATHS = [
    BrokerPath(expired_message, "expired"),
    BrokerPath(expired_queue, "expired"),
    BrokerPath(rejected, "rejected"),
    BrokerPath(nacked, "rejected"),
    BrokerPath(drop_head, "maxlen"),
    BrokerPath(reject_publish, "maxlen"),
    BrokerPath(delivery_limit, "delivery_limit"),
    BrokerPath(headers_exchange, "expired"),
    BrokerPath(consistent_hash, "expired"),
    BrokerPath(requeued, "rejected"),
    BrokerPath(delayed_retry, "delivery_limit", rabbitmq=False),
    BrokerPath(moves, "rejected", rabbitmq=False),
    BrokerPath(dropped, "expired", rabbitmq=False),
    BrokerPath(delayed_exchange, "expired", rabbitmq=False),
]

# the two stalls, tried first on every path
COUNT_AT_MAX = table(
    x_death(x_death_entry(SOURCE, REASON, long_long(LONG_MAX))), label="x-death count 2^63-1"
)
NESTED_15000 = table((b"deep", deep_chain(15_000)), label="table nested 15,000 deep")
ARRAY_DEATH = table(
    (b"x-death", deep_chain(deep_depth_fitting(120_000, "A"), "A")), label="x-death array nested deep"
)


def attack(target: Target, path: BrokerPath, headers: Field, variant: int, findings: Findings) -> None:
    """One example: the path with this hostile table, then the verdict; a failure is a finding."""
    cases: list[Case] = []

    def run() -> list[str]:
        cases.append(run_case(target, path, headers, variant))
        return cases[-1].problems

    problems = once_more_if_slow(run)
    if problems:
        encoded = headers_table(headers)  # x-death entries "for this queue" name the empty queue here
        repro = base64.b64encode(encoded).decode() if len(encoded) <= REPRO_LIMIT else None
        findings.add(
            path.name,
            headers.describe(),
            problems,
            closes=cases[0].closes,
            lag=cases[-1].lag,
            headers_b64=repro,
        )


def run_case(target: Target, path: BrokerPath, headers: Field, variant: int) -> Case:
    if not target.alive():
        pytest.fail(f"the broker died before this example:\n{target.broker.log_tail()}")
    case = Case(target, path.name)

    def hostile(source: str, *extra: tuple[bytes, Field]) -> bytes:
        replace = {SOURCE: source.encode(), REASON: path.reason.encode()}
        return headers_table(Field("F", (*headers.value, *extra)), replace)

    path.run(case, hostile, variant)
    case.verdict()
    return case


def run_examples(
    target: Target, path: BrokerPath, rabbit_safe: bool, findings: Findings, extra: list[Field]
) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @seed(SEED)
    @example(headers=COUNT_AT_MAX, variant=0)
    @example(headers=NESTED_15000, variant=1)
    @given(headers=hostile_headers(rabbit_safe), variant=st.integers(0, 3))
    def examples(headers: Field, variant: int) -> None:
        attack(target, path, headers, variant, findings)

    examples()
    for value in extra:
        attack(target, path, value, 0, findings)
    print(f"\n{path.name}: seed {SEED}, {EXAMPLES} drawn examples + {2 + len(extra)} fixed")
    assert not findings.items, findings.report()


# --------------------------------------------------------------------------------------------------------
# hostile arguments
# --------------------------------------------------------------------------------------------------------
def argued(target: Target, value: Field) -> Case:
    """A queue, an exchange and a binding carrying ``value`` under a key of our own; one message
    through them; then the verdict (definitions export and the listings read the arguments)."""
    case = Case(target, "arguments")
    arguments = [(b"attack-arg", value), (b"x" * 255, Field("l", LONG_MAX))]
    ex = case.exchange("x", "direct", arguments)
    dest = case.queue("dest", arguments, durable=True)
    case.do(lambda: case.client.queue_bind(dest, ex, "k", arguments))
    case.publish("k", None, exchange=ex)
    case.confirm()
    settle(landed(case, {dest: lambda: len(case.ledger.confirmed)}), SETTLE)
    case.verdict()
    return case


def argument_examples(target: Target, rabbit_safe: bool, first: Field) -> None:
    findings = Findings("arguments" + ("" if rabbit_safe else "+"))

    @settings(
        max_examples=EXAMPLES * 2,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @seed(SEED)
    @example(value=first)
    @given(value=argument_values(rabbit_safe))
    def examples(value: Field) -> None:
        problems = once_more_if_slow(lambda: argued(target, value).problems)
        if problems:
            findings.add("arguments", value.describe(), problems)

    examples()
    assert not findings.items, findings.report()
