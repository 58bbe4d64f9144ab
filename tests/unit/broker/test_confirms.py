"""Coalescing of publisher confirms (RabbitMQ's coalesce_and_send), one case per rule."""

from __future__ import annotations

from ottermq.broker.server.confirms import Confirms


def settle(
    confirms: Confirms, acks: tuple[int, ...] | list[int] = (), nacks: tuple[int, ...] | list[int] = ()
) -> list[tuple[int, bool, bool]]:
    for seq in acks:
        confirms.settle(seq, True)
    for seq in nacks:
        confirms.settle(seq, False)
    return confirms.take()


def test_nothing_settled_sends_nothing():
    confirms = Confirms()
    assert not confirms.settled
    assert confirms.take() == []


def test_a_lone_ack_is_not_multiple_as_rabbitmq_sends_it():
    assert settle(Confirms(), acks=[1]) == [(1, False, True)]


def test_a_lone_nack_is_coalesced_like_any_nacks():
    assert settle(Confirms(), nacks=[1]) == [(1, True, False)]


def test_a_run_of_acks_is_one_multiple_frame():
    assert settle(Confirms(), acks=[3, 1, 2, 4]) == [(4, True, True)]


def test_a_waiting_publish_stops_the_multiple_ack():
    confirms = Confirms()
    confirms.wait(3)
    assert settle(confirms, acks=[1, 2, 4, 5]) == [(2, True, True), (4, False, True), (5, False, True)]
    assert settle(confirms, acks=[3]) == [(3, False, True)]


def test_a_nack_in_the_same_turn_is_a_barrier_for_acks_and_the_reverse():
    frames = settle(Confirms(), acks=[1, 2, 4, 5], nacks=[3])
    assert frames == [(2, True, True), (4, False, True), (5, False, True), (3, False, False)]


def test_nacks_below_the_first_ack_coalesce():
    frames = settle(Confirms(), acks=[4, 5], nacks=[1, 2, 3])
    assert frames == [(4, False, True), (5, False, True), (3, True, False)]


def test_nacks_behind_an_ack_go_one_by_one():
    frames = settle(Confirms(), acks=[1], nacks=[2, 3])
    assert frames == [(1, False, True), (2, False, False), (3, False, False)]


def test_commits_settling_out_of_order_are_removed_from_waiting():
    confirms = Confirms()
    for seq in (1, 2, 3):
        confirms.wait(seq)
    confirms.settle(2, True)  # never happens with an in-order store, but must not corrupt the state
    assert confirms.take() == [(2, False, True)]
    assert settle(confirms, acks=[1, 3]) == [(3, True, True)]


def test_take_resets():
    confirms = Confirms()
    confirms.settle(1, True)
    assert confirms.settled
    confirms.take()
    assert not confirms.settled
    assert confirms.take() == []
