"""The chaos checker (e2e/chaos/checker.py) on hand-made histories: it catches what it must catch (a lost
confirmed message, a phantom, a split brain, a nacked message that was stored, a dead-letter move that
lost its message), explains every duplicate, and measures fault windows right. No broker, no sockets."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .chaos.checker import check, load

pytestmark = pytest.mark.extension

A = "amqp://guest:guest@10.0.0.1:5672/%2F"
B = "amqp://guest:guest@10.0.0.2:5672/%2F"
DEATH = [{"queue": "q", "reason": "rejected", "count": 1}]


def send(i: int, t: float, url: str = A) -> dict[str, Any]:
    return {"op": "send", "client": "p", "id": f"p-{i}", "queue": "q", "t0": t, "t": t, "url": url}


def publish(
    i: int, t0: float, outcome: str = "confirmed", t: float | None = None, url: str = A
) -> dict[str, Any]:
    t = t0 + 0.01 if t is None else t
    return {
        "op": "publish",
        "client": "p",
        "id": f"p-{i}",
        "queue": "q",
        "outcome": outcome,
        "t0": t0,
        "t": t,
        "url": url,
    }


def deliver(i: int | str, t: float, queue: str = "q", **fields: Any) -> dict[str, Any]:
    record = {
        "op": "deliver",
        "client": "c",
        "id": i if isinstance(i, str) else f"p-{i}",
        "queue": queue,
        "t": t,
        "redelivered": False,
        "xdeath": [],
        "action": "ack",
        "phase": "run",
        "url": A,
    }
    record.update(fields)
    return record


def epoch(broker: str, number: int, t: float, url: str = A) -> dict[str, Any]:
    return {"op": "epoch", "broker": broker, "url": url, "epoch": number, "t": t}


def fault(name: str, phase: str, t: float) -> dict[str, Any]:
    return {"op": "fault", "name": name, "phase": phase, "t": t}


def history(n: int = 5) -> list[dict[str, Any]]:
    """``n`` confirmed publishes, each acked from q, except p-5 rejected there and acked from q.dlq."""
    records: list[dict[str, Any]] = [epoch("a", 1, 0.5)]
    for i in range(1, n + 1):
        records += [send(i, float(i)), publish(i, float(i))]
        if i == 5:
            records += [deliver(i, i + 0.1, action="reject"), deliver(i, i + 0.2, "q.dlq", xdeath=DEATH)]
        else:
            records.append(deliver(i, i + 0.1))
    return records


def without(records: list[dict[str, Any]], op: str, message_id: str) -> list[dict[str, Any]]:
    return [r for r in records if not (r["op"] == op and r.get("id") == message_id)]


def test_a_clean_history_is_ok():
    report = check(history())
    assert report.ok, report.summary()
    assert (report.published, report.confirmed, report.delivered, report.deliveries) == (5, 5, 5, 6)
    assert report.dead_lettered == {"rejected": ["p-5"]}
    assert report.duplicates == [] and report.split_brain == [] and report.windows == []
    assert report.summary().startswith("OK: 5 attempts, 5 confirmed")


def test_a_confirmed_message_never_delivered_is_lost():
    report = check(without(history(), "deliver", "p-3"))
    assert report.lost == ["p-3"] and not report.ok
    assert "lost 1 (e.g. p-3)" in report.summary()


def test_a_rejected_message_must_reach_the_dead_letter_queue():
    records = [r for r in history() if not (r.get("queue") == "q.dlq")]
    report = check(records)
    assert report.lost == ["p-5"] and report.rejected_not_dead_lettered == ["p-5"] and not report.ok
    # an unconfirmed publish delivered before its commit, rejected, then dropped (a fenced broker's
    # refused commit): reported, not a failure, as it may never have been stored
    records = [*history(), send(6, 6.0), deliver(6, 6.1, action="reject"), publish(6, 6.0, "unknown", t=6.2)]
    report = check(records)
    assert report.lost == [] and report.rejected_not_dead_lettered == ["p-6"] and report.ok
    # a reject that did not reach the broker: the message came back and was acked in the drain
    report = check([*records, deliver(6, 7.0, redelivered=True, phase="drain")])
    assert report.rejected_not_dead_lettered == [] and report.ok, report.summary()


def test_unknown_and_nacked_publishes_never_delivered_are_only_informative():
    records = [*history(), send(6, 6.0), publish(6, 6.0, "unknown"), send(7, 7.0), publish(7, 7.0, "nacked")]
    records.append(send(8, 8.0))  # the publisher was killed before the outcome: unknown
    report = check(records)
    assert report.ok, report.summary()
    assert (report.lost_unknown, report.lost_nacked, report.unknown, report.nacked) == (
        ["p-6", "p-8"],
        ["p-7"],
        2,
        1,
    )


def test_a_delivery_nobody_published_is_a_phantom():
    report = check([*history(), deliver("ghost-1", 9.0)])
    assert report.phantoms == ["ghost-1"] and not report.ok


def test_a_nacked_message_that_was_delivered_is_reported_with_when():
    records = [*history(), send(6, 6.0), publish(6, 6.0, "nacked", t=6.5), deliver(6, 6.2)]
    records += [send(7, 7.0), publish(7, 7.0, "nacked", t=7.1), deliver(7, 7.3)]
    report = check(records)
    assert report.nacked_but_stored == {
        "p-6": "delivered 0.300 s before the nack",
        "p-7": "delivered 0.200 s after the nack",
    }
    assert report.ok  # the docs' nack semantics is reported, not judged here


def test_two_brokers_with_one_epoch_is_split_brain():
    report = check([*history(), epoch("b", 1, 3.0, url=B)])
    assert report.split_brain == ["epoch 1 reported by 2 brokers: a, b"] and not report.ok
    assert report.epochs == {1: ["a", "b"]}


def test_one_broker_with_two_epochs_is_split_brain():
    report = check([*history(), epoch("a", 2, 3.0)])
    assert report.split_brain == ["broker a reported 2 epochs: [1, 2]"]


def test_traffic_from_an_address_no_broker_reported_is_split_brain():
    records = [*history(), send(6, 6.0, url=B), publish(6, 6.0, url=B), deliver(6, 6.1, url=B)]
    report = check(records)
    assert report.split_brain == [
        "1 confirms and 1 deliveries from 10.0.0.2:5672, an address no broker ever reported as active"
    ]


def test_a_confirm_from_the_old_active_after_the_next_epoch_is_not_flagged():
    """The old active committed before the take-over: its confirm may arrive after epoch 2 began."""
    records = [
        *history(),
        epoch("b", 2, 6.0, url=B),
        send(6, 5.9),
        publish(6, 5.9, t=6.2),
        deliver(6, 7.0, url=B),
    ]
    report = check(records)
    assert report.ok, report.summary()


def test_every_duplicate_is_classified():
    records = history(n=5)
    records += [deliver(1, 1.5, redelivered=True)]  # an ack lost: flagged redelivered
    records += [deliver(5, 5.5, "q.dlq", xdeath=DEATH)]  # the dead-letter move happened twice
    records += [epoch("a#2", 2, 3.0), deliver(2, 3.5)]  # no flag, an epoch began in between
    records += [deliver(4, 4.5)]  # no flag, no epoch change
    records += [deliver(5, 5.7, "q.dlq", xdeath=DEATH, redelivered=True)]  # the flag comes first
    report = check(records)
    found = {(d.id, d.queue, d.t): d.category for d in report.duplicates}
    assert found == {
        ("p-1", "q", 1.5): "redelivered",
        ("p-2", "q", 3.5): "after failover",
        ("p-4", "q", 4.5): "unexplained",
        ("p-5", "q.dlq", 5.5): "dead-letter copy",
        ("p-5", "q.dlq", 5.7): "redelivered",
    }
    assert report.duplicate_counts == {
        "redelivered": 2,
        "dead-letter copy": 1,
        "after failover": 1,
        "unexplained": 1,
    }
    failover = next(d for d in report.duplicates if d.category == "after failover")
    assert (failover.previous_t, failover.detail) == (2.1, "epoch 2 (a#2) began")
    assert report.ok  # duplicates are at-least-once, not a failure; "unexplained" is for a person to read


def test_a_dead_letter_copy_with_another_count_is_not_a_copy():
    again = [{"queue": "q", "reason": "rejected", "count": 2}]
    report = check([*history(), deliver(5, 5.5, "q.dlq", xdeath=again)])
    assert [d.category for d in report.duplicates] == ["unexplained"]


def test_an_acked_message_that_was_also_dead_lettered_is_reported():
    expired = [{"queue": "q", "reason": "expired", "count": 1}]
    report = check([*history(), deliver(2, 2.5, "q.dlq", xdeath=expired)])
    assert report.acked_and_dead_lettered == {"p-2": ["expired"]}
    assert report.dead_lettered == {"expired": ["p-2"], "rejected": ["p-5"]}


def test_fault_window_metrics_on_a_hand_made_timeline():
    """Confirms at 1, 2, 3, [inject 3.5], 8, 8.5, [heal 7; settle 2 → window ends at 9], 9.5, 12."""
    records: list[dict[str, Any]] = [epoch("a", 1, 0.0)]
    for i, t0 in enumerate((0.9, 1.9, 2.9, 4.0, 4.1, 8.4, 9.4, 11.9), start=1):
        decided = {4: 8.0, 5: 4.2}.get(i, t0 + 0.1)
        outcome = "unknown" if i == 5 else "confirmed"
        records += [send(i, t0), publish(i, t0, outcome, t=decided)]
        if i != 4:  # p-4, sent in the window and confirmed at 8, is never delivered
            records.append(deliver(i, decided + 0.05))
    records += [deliver(6, 8.6), deliver(1, 1.2)]  # duplicates: p-6 sent in the window, p-1 before it
    records += [fault("db-partition", "inject", 3.5), fault("db-partition", "heal", 7.0)]
    records += [fault("kill-9", "inject", 10.0)]  # never healed
    report = check(records, settle=2.0)
    partition, kill = report.windows
    assert (partition.name, partition.inject, partition.heal, partition.end) == (
        "db-partition",
        3.5,
        7.0,
        9.0,
    )
    assert partition.longest_no_confirm == pytest.approx(4.5)  # 3.5 → 8.0
    assert partition.first_confirm_after_heal == pytest.approx(1.0)
    assert partition.confirms == 2
    assert partition.lost == ["p-4"] and report.lost == ["p-4"]
    assert [(d.id, d.category) for d in partition.duplicates] == [("p-6", "unexplained")]
    # the unhealed fault lasts to the end of the records; confirms at 12 only: 10 → 12
    assert (kill.heal, kill.first_confirm_after_heal, kill.lost, kill.confirms) == (None, None, [], 1)
    assert kill.longest_no_confirm == pytest.approx(2.0)
    assert report.table().splitlines() == [
        "| fault | lost | duplicated | longest without a confirm | first confirm after heal |",
        "|---|---:|---:|---:|---:|",
        "| db-partition (+3.5 s, healed +7.0 s) | 1 | 1 | 4.50 s | 1.00 s |",
        "| kill-9 (+10.0 s, not healed) | 0 | 0 | 2.00 s | none |",
    ]


def test_load_reads_several_files_sorted_and_skips_a_torn_last_line(tmp_path):
    clients = tmp_path / "p.jsonl"
    clients.write_text(json.dumps(send(1, 2.0)) + "\n" + json.dumps(publish(1, 2.0)) + "\n" + '{"op": "deliv')
    runner = tmp_path / "runner.jsonl"
    runner.write_text(json.dumps(epoch("a", 1, 1.0)) + "\n\n")
    records = load([clients, str(runner)])
    assert [r["op"] for r in records] == ["epoch", "send", "publish"]
    assert check(records).lost == ["p-1"]
