"""The parts a queue is made of (``vhost/queue_type.py``), each on its own: limits, returns (delivery limit
and delayed retry), expiry, the paging window, and the queue types' choices."""

from __future__ import annotations

from typing import Any

import pytest
from ottermq.amqp.errors import PreconditionFailed
from ottermq.vhost import classic, quorum
from ottermq.vhost.arguments import parse_queue_args
from ottermq.vhost.consumers import SingleActiveConsumers
from ottermq.vhost.expiry import Expiry
from ottermq.vhost.limits import ADMIT, REFUSE, REFUSE_DEAD_LETTER, Limits, SoftLimits, make_limits
from ottermq.vhost.message import GONE, HELD, OUT, READY, Entry, Message
from ottermq.vhost.paging import SHRINK_SLICE, UNBOUNDED, Paging, Window
from ottermq.vhost.queue_types import QUEUE_TYPES, queue_type
from ottermq.vhost.quorum import QuorumReady
from ottermq.vhost.ready import PriorityReady, Ready
from ottermq.vhost.retry import Returns

pytestmark = pytest.mark.hot_path


def entry(seq: int, deadline: int | None = None, body: bytes = b"x") -> Entry:
    return Entry(Message("", "q", b"", body, False), seq, deadline)


# -- limits ----------------------------------------------------------------------------------
def test_no_limit_no_part() -> None:
    assert make_limits(None, None, "reject-publish", soft=False) is None
    assert isinstance(make_limits(3, None, "drop-head", soft=False), Limits)
    assert isinstance(make_limits(None, 10, "drop-head", soft=True), SoftLimits)


@pytest.mark.parametrize(
    ("overflow", "count", "nbytes", "size", "answer"),
    [
        ("drop-head", 5, 0, 1, ADMIT),  # drop-head admits, then drops heads
        ("reject-publish", 1, 0, 1, ADMIT),
        ("reject-publish", 2, 0, 1, REFUSE),  # a third would be over 2
        ("reject-publish-dlx", 2, 0, 1, REFUSE_DEAD_LETTER),
        ("reject-publish", 0, 95, 5, ADMIT),  # exactly at the byte limit
        ("reject-publish", 0, 95, 6, REFUSE),
    ],
)
def test_hard_limits(overflow: str, count: int, nbytes: int, size: int, answer: int) -> None:
    limits = Limits(2 if count <= 5 and nbytes == 0 else None, 100 if nbytes else None, overflow)
    assert limits.admit(count, nbytes, size) == answer


def test_soft_limit_blocks_after_going_over_and_opens_at_80_percent() -> None:
    limits = SoftLimits(10, None, "reject-publish")
    assert limits.admit(10, 0, 1) == ADMIT  # the publish that goes over is accepted
    limits.added(11, 0)
    assert limits.blocked
    assert limits.admit(9, 0, 1) == REFUSE  # 9 > 8: still blocked
    assert limits.admit(8, 0, 1) == ADMIT and not limits.blocked
    limits.blocked = True
    limits.returning(8, 0)  # a return into a queue at 80 % opens it
    assert not limits.blocked


def test_a_policy_keeps_a_soft_limit_in_force() -> None:
    old = SoftLimits(10, None, "reject-publish")
    old.blocked = True
    new = SoftLimits(10, None, "reject-publish")
    new.carry(old)
    assert new.blocked and new.admit(9, 0, 1) == REFUSE
    hard = Limits(10, None, "reject-publish")
    hard.carry(old)  # nothing to carry
    assert hard.admit(9, 0, 1) == ADMIT


def test_soft_reject_publish_dlx_is_drop_head() -> None:
    assert SoftLimits(1, None, "reject-publish-dlx").drops_head
    assert not Limits(1, None, "reject-publish-dlx").drops_head


# -- returns ---------------------------------------------------------------------------------
def args(**arguments: Any) -> Any:
    return parse_queue_args(arguments, "q")


def test_returns_count_only_where_asked() -> None:
    plain = Returns(args())
    back, held, over = plain.sort([entry(1)], 0, counts_all=False, retry=False)
    assert [e.delivery_count for e in back] == [0] and back[0].redelivered and not held and not over
    back, _, _ = plain.sort([entry(1)], 0, counts_all=True, retry=False)
    assert back[0].delivery_count == 1


def test_delivery_limit_dead_letters_past_it_but_not_an_expired_entry() -> None:
    returns = Returns(args(**{"x-delivery-limit": 1}))
    once, twice, expired = entry(1), entry(2), entry(3, deadline=5)
    twice.delivery_count = 1
    expired.delivery_count = 1
    back, _, over = returns.sort([once, twice, expired], 10, counts_all=False, retry=False)
    assert over == [twice] and back == [once, expired] and expired.delivery_count == 1
    assert returns.over_limit([once, twice]) == [twice]


def test_delayed_retry_holds_and_releases_in_due_order() -> None:
    returns = Returns(
        args(**{"x-delayed-retry-type": "failed", "x-delayed-retry-min": 100, "x-delayed-retry-max": 250})
    )
    timers: list[tuple[int, Any]] = []

    def call_at(at: int, callback: Any) -> Any:
        timers.append((at, callback))
        return type("Handle", (), {"cancel": lambda self: None})()

    assert returns.applies(True, call_at) and not returns.applies(False, call_at)
    assert not returns.applies(None, call_at) and not returns.applies(True, None)
    assert [returns.delay(n) for n in (0, 1, 2, 3)] == [100, 100, 200, 250]
    first, second = entry(1), entry(2)
    second.delivery_count = 2
    _, held, _ = returns.sort([first, second], 0, counts_all=False, retry=True)
    returns.hold(held, 1000, call_at, lambda: None)
    assert first.state == HELD and len(returns) == 2 and timers[-1][0] == 1100  # the earliest
    assert returns.due(1099) == []
    assert returns.due(1100) == [first] and returns.due(1300) == [second] and len(returns) == 0


# -- expiry ----------------------------------------------------------------------------------
def test_head_only_expiry_waits_behind_a_live_head() -> None:
    ready = Ready()
    for e in (entry(1, 50), entry(2, 10), entry(3, 60)):
        ready.append(e)
    expiry = Expiry(exact=False)
    assert expiry.next_deadline(ready) == 50
    out: list[Entry] = []
    assert expiry.collect(40, ready, out) == 0 and out == []  # seq 2 is due but waits for the head
    expiry.collect(55, ready, out)
    assert [e.seq for e in out] == [1, 2] and len(ready) == 1


def test_exact_expiry_takes_due_entries_wherever_they_are() -> None:
    ready = Ready()
    expiry = Expiry(exact=True)
    for e in (entry(1, 50), entry(2, 10, b"abc"), entry(3)):
        ready.append(e)
        expiry.track(e)
    assert expiry.next_deadline(ready) == 10
    out: list[Entry] = []
    assert expiry.collect(20, ready, out) == 3  # the body bytes that left
    assert [e.seq for e in out] == [2] and out[0].state == GONE and len(ready) == 2
    assert expiry.next_deadline(ready) == 50


def test_exact_expiry_switched_on_watches_what_is_there() -> None:
    ready = Ready()
    for e in (entry(1), entry(2, 10)):
        ready.append(e)
    expiry = Expiry(exact=False)
    assert expiry.set_exact(True, ready) and expiry.exact
    assert not expiry.set_exact(False, ready) and not expiry.exact


# -- paging window ---------------------------------------------------------------------------
class FakeReady:
    def __init__(self, entries: int) -> None:
        self.entries = entries
        self.window: tuple[object, int] | None = None

    def set_paging(self, factory: object, window: int) -> None:
        self.window = (factory, window)

    def shrink(self, limit: int, keep: int) -> int:
        moved = min(limit, self.entries - keep)
        self.entries -= moved
        return moved


def test_lazy_window_is_zero_and_pages_out_in_slices() -> None:
    soon: list[Any] = []
    factory = object()
    paging = Paging(factory, 1000, 1 << 20)  # type: ignore[arg-type]
    ready = FakeReady(2 * SHRINK_SLICE + 1)
    window = Window()
    window.apply(ready, paging, lazy=True, exact=False, call_soon=soon.append)
    assert ready.window == (factory, 0) and window.bytes == 0
    assert ready.entries == SHRINK_SLICE + 1 and len(soon) == 1
    while soon:
        soon.pop()()
    assert ready.entries == 0


def test_default_window_and_no_paging() -> None:
    paging = Paging(object(), 1000, 4096)  # type: ignore[arg-type]
    ready = FakeReady(10)
    window = Window()
    window.apply(ready, paging, lazy=False, exact=False, call_soon=None)
    assert (
        ready.window is not None and ready.window[1] == 1000 and window.bytes == 4096 and ready.entries == 10
    )
    window.apply(ready, paging, lazy=True, exact=True, call_soon=None)  # exact TTL keeps all in memory
    assert ready.window == (None, UNBOUNDED) and window.bytes == UNBOUNDED


# -- queue types -----------------------------------------------------------------------------
def test_registry() -> None:
    assert set(QUEUE_TYPES) == {"classic", "quorum"}
    assert queue_type("quorum") is quorum.QUORUM and queue_type("classic") is classic.CLASSIC


def test_types_choose_their_parts() -> None:
    assert type(classic.CLASSIC.ready(args())) is Ready
    assert isinstance(classic.CLASSIC.ready(args(**{"x-max-priority": 5})), PriorityReady)
    assert isinstance(quorum.QUORUM.ready(args(**{"x-queue-type": "quorum"})), QuorumReady)
    assert isinstance(classic.CLASSIC.consumers(True), SingleActiveConsumers)
    assert type(classic.CLASSIC.limits(1, None, "reject-publish")) is Limits
    assert type(quorum.QUORUM.limits(1, None, "reject-publish")) is SoftLimits
    assert quorum.QUORUM.stores_every_message and not classic.CLASSIC.stores_every_message
    assert quorum.QUORUM.hands_over_at_once() and not classic.CLASSIC.hands_over_at_once()


def test_where_a_return_goes() -> None:
    for kind, first, order in (
        (classic.CLASSIC, False, [1, 2, 3]),
        (quorum.QUORUM, True, [1, 2, 3]),
        (quorum.QUORUM, False, [2, 3, 1]),
    ):
        ready = kind.ready(args(**{"x-queue-type": kind.name}))
        one = entry(1)
        for e in (entry(2), entry(3)):
            ready.append(e)
        one.state = READY
        kind.put_back(ready, [one], first)
        assert [ready.popleft().seq for _ in range(3)] == order, (kind, first)


def test_quorum_declare_flags() -> None:
    with pytest.raises(PreconditionFailed, match="invalid property 'non-durable' for queue 'q' in vhost 'v'"):
        quorum.QUORUM.check_properties("q", False, False, False, "v")
    classic.CLASSIC.check_properties("q", False, True, True, "v")  # anything goes
    assert OUT != READY  # (states are distinct ints: the parts compare them)
