"""Symfony Messenger's AMQP transport (Debian's ``php-symfony-amqp-messenger`` 5.4, on the php-amqp
extension) retrying a failing handler through the broker's TTL and dead-lettering.

The client program is ``e2e/php/messenger_e2e.php`` (one scenario per run, JSON on stdout; see its header):
a bus, a Worker with the retry (``MultiplierRetryStrategy``: 3 retries, 200 ms, x2) and failure-transport
listeners, built without the framework. Without PHP, the extension, the bridge or Symfony's EventDispatcher
the tests fail with the command to run (``make clients`` runs ``.ci/install-php.sh``; the Worker's events
also need ``php-symfony-event-dispatcher``).

What the broker has to get right is the bridge's delay mechanism (``Connection::publishWithDelay``): for
each delay it declares a durable queue ``delay_<exchange>_<routing key>_<ms>_<delay|retry>`` with
``x-message-ttl`` = the delay, ``x-expires`` = delay + 10000 and a dead-letter exchange and routing key,
binds it to the delay exchange under its own name and publishes there; the broker must hold the message for
the TTL, then dead-letter it back, where the Worker's ``basic.get`` finds it. A retry dead-letters through
the default exchange with the work queue's name; a ``DelayStamp`` on a new message dead-letters to the
transport's exchange (direct here, so only the right routing key reaches the queue).

Reference values are RabbitMQ 3.10's: attempts come no sooner than their delay (200, 400, 800 ms) and
within 1.5 s of it; each received message names its last delay queue first in ``x-death`` (count 1, reason
``expired``, exchange the delay exchange, routing-keys the delay queue's name), followed by the entries the
bridge copied from the message it received before, in reverse order: ``rabbit_dead_letter`` groups the
existing entries by queue and reason with a ``lists:foldl`` that reverses them, then puts the new entry in
front (the php-amqp extension keeps an array's order, so the reversal is the broker's). The failed message
reaches the failure transport with RedeliveryStamps 1, 2, 3, 0 and one ErrorDetailsStamp per attempt.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import client_programs as programs
from .client_programs import ProgramRun
from .polling import poll_until

PROGRAM = Path(__file__).parent / "php" / "messenger_e2e.php"
NEEDED = (
    Path("/usr/share/php/Symfony/Component/Messenger/Bridge/Amqp/autoload.php"),
    Path("/usr/share/php/Symfony/Component/EventDispatcher/autoload.php"),
)
INSTALL = "bash .ci/install-php.sh && apt-get install php-symfony-event-dispatcher"
ROUTING_KEY = "otter"  # the transport's default publish routing key and its queue's binding key
RETRY_DELAYS = [200, 400, 800]  # MultiplierRetryStrategy(3, 200, 2)
SLACK_MS = 1500  # how much later than its delay a retry may come on a loaded machine
DELAY_QUEUE_EXPIRY_MS = 10000  # the bridge's x-expires: delay + 10 s


@dataclass(frozen=True)
class Names:
    """The run's names: the transport's exchange and queue (``work``), the failure transport's exchange and
    queue (``failed``) and the delay exchange (``delays``)."""

    work: str
    failed: str
    delays: str

    def delay_queue(self, delay: int, routing_key: str, kind: str) -> str:
        """The bridge's delay queue name (``delay_%exchange_name%_%routing_key%_%delay%`` + ``_<kind>``)."""
        return f"delay_{self.work}_{routing_key}_{delay}_{kind}"

    def retry_queue(self, delay: int) -> str:
        return self.delay_queue(delay, self.work, "retry")

    def death(self, delay_queue: str) -> dict[str, Any]:
        """The ``x-death`` entry (without ``time``) of a message that expired in ``delay_queue``."""
        return {
            "count": 1,
            "exchange": self.delays,
            "queue": delay_queue,
            "reason": "expired",
            "routing-keys": [delay_queue],
        }


@pytest.fixture(scope="session")
def messenger_php() -> str:
    found = shutil.which("php")
    has_extension = (
        found is not None
        and subprocess.run([found, "-r", "exit(extension_loaded('amqp') ? 0 : 1);"]).returncode == 0
    )
    missing = [str(path) for path in NEEDED if not path.exists()]
    if found is None or not has_extension or missing:
        pytest.fail(
            f"Symfony Messenger tests need php, the php-amqp extension, the AMQP bridge and Symfony's "
            f"EventDispatcher (missing: {missing or 'php or the amqp extension'}): run `{INSTALL}`"
        )
    assert found is not None
    return found


@pytest.fixture
def names(unique: Callable[[str], str], broker: Any) -> Iterator[Names]:
    """Unique names for one run; afterwards the run's delay queues go too (``unique`` removes the rest)."""
    run = Names(work=unique("msgr"), failed=unique("msgr-failed"), delays=unique("msgr-delays"))
    yield run
    for queue in delay_queues(broker, run):
        broker.api(f"/api/queues/{quote(broker.vhost)}/{quote(queue['name'])}", "DELETE")


@pytest.fixture
def run_messenger(messenger_php: str, broker: Any, names: Names) -> Callable[[str], ProgramRun]:
    def run(scenario: str) -> ProgramRun:
        argv = [messenger_php, str(PROGRAM), scenario, broker.url, names.work, names.failed, names.delays]
        return programs.run(argv, scenario)

    return run


def quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def delay_queues(broker: Any, names: Names) -> list[dict[str, Any]]:
    """The delay queues of this run's exchange, as ``GET /api/queues/<vhost>`` lists them."""
    status, queues = broker.api(f"/api/queues/{quote(broker.vhost)}")
    assert status == 200, queues
    return [q for q in queues if q["name"].startswith(f"delay_{names.work}_")]


def delay_queue_arguments(delay: int, dead_letter_exchange: str, routing_key: str) -> dict[str, Any]:
    return {
        "x-message-ttl": delay,
        "x-expires": delay + DELAY_QUEUE_EXPIRY_MS,
        "x-dead-letter-exchange": dead_letter_exchange,
        "x-dead-letter-routing-key": routing_key,
    }


def check_delay_queues(broker: Any, names: Names, expected: dict[str, dict[str, Any]]) -> None:
    """The run's delay queues are exactly ``expected`` (name -> arguments): durable, not auto-delete, and
    each bound to the delay exchange under its own name."""

    def all_listed() -> dict[str, dict[str, Any]]:
        listed = {q["name"]: q for q in delay_queues(broker, names)}
        return listed if listed.keys() == expected.keys() else {}

    listed = poll_until(all_listed, what=f"the delay queues {sorted(expected)} in GET /api/queues")
    assert {name: q["arguments"] for name, q in listed.items()} == expected
    assert {(q["durable"], q["auto_delete"]) for q in listed.values()} == {(True, False)}
    status, bindings = broker.api(
        f"/api/exchanges/{quote(broker.vhost)}/{quote(names.delays)}/bindings/source"
    )
    assert status == 200, bindings
    assert sorted((b["destination"], b["destination_type"], b["routing_key"]) for b in bindings) == sorted(
        (name, "queue", name) for name in expected
    )


def check_gaps(gaps_ms: list[int], delays: list[int]) -> None:
    assert len(gaps_ms) == len(delays)
    for gap, delay in zip(gaps_ms, delays, strict=True):
        assert delay <= gap < delay + SLACK_MS, (gaps_ms, delays)


def check_retry_receipts(receipts: list[dict[str, Any]], names: Names) -> None:
    """Receipts 2.. came from the work queue after a retry: dead-lettered through the default exchange with
    the work queue's name, with the retry's delay queue first in ``x-death`` and then the entries the
    message had when it was received before, in reverse order (as RabbitMQ 3.10 rewrites them)."""
    for retry, receipt in enumerate(receipts[1:], start=1):
        last = names.retry_queue(RETRY_DELAYS[retry - 1])
        where = (receipt["retry_count"], receipt["exchange"], receipt["routing_key"])
        assert where == (retry, "", names.work)
        assert receipt["x_death"] == [names.death(last), *reversed(receipts[retry - 1]["x_death"])]


def test_always_failing_handler_is_retried_three_times_then_failed(
    run_messenger: Callable[[str], ProgramRun], names: Names, broker: Any
) -> None:
    run = run_messenger("always-fails")
    data = run.data
    assert data["attempts"] == 4
    check_gaps(data["gaps_ms"], RETRY_DELAYS)
    receipts = data["receipts"]
    assert len(receipts) == 4
    first = receipts[0]
    assert (first["retry_count"], first["exchange"], first["routing_key"], first["x_death"]) == (
        0,
        names.work,
        ROUTING_KEY,
        [],
    )
    check_retry_receipts(receipts, names)
    assert data["work_queue_left"] == 0

    [failed] = data["failed"]
    assert failed["message"] == "otter-1"
    assert failed["redelivery_stamps"] == [1, 2, 3, 0]
    assert failed["delay_stamps"] == [*RETRY_DELAYS, 0]
    assert failed["error_details"] == [
        {"class": "RuntimeException", "code": 40 + n, "message": f"attempt {n} of otter-1 failed"}
        for n in range(1, 5)
    ]
    assert failed["sent_to_failure_from"] == "main"
    # the failure transport's fanout exchange, with the routing key a retry uses (the work queue's name);
    # the bridge copied the last receipt's headers, x-death included
    assert (failed["exchange"], failed["routing_key"]) == (names.failed, names.work)
    assert failed["x_death"] == receipts[-1]["x_death"]

    check_delay_queues(
        broker,
        names,
        {names.retry_queue(d): delay_queue_arguments(d, "", names.work) for d in RETRY_DELAYS},
    )
    run.self_check()
    # nothing deletes the delay queues but their x-expires (delay + 10 s after the bridge declared them)
    poll_until(
        lambda: not delay_queues(broker, names),
        timeout=(max(RETRY_DELAYS) + DELAY_QUEUE_EXPIRY_MS) / 1000 + 5,
        interval=0.2,
        what="the delay queues to expire (x-expires)",
    )


def test_handler_failing_twice_succeeds_on_the_third_attempt(
    run_messenger: Callable[[str], ProgramRun], names: Names, broker: Any
) -> None:
    run = run_messenger("fails-twice")
    data = run.data
    assert data["attempts"] == 3
    # dispatched with a 300 ms DelayStamp
    assert 300 <= data["first_attempt_ms"] < 300 + SLACK_MS
    check_gaps(data["gaps_ms"], RETRY_DELAYS[:2])
    receipts = data["receipts"]
    assert len(receipts) == 3
    # the DelayStamp's queue dead-letters to the transport's direct exchange with the message's routing key
    first_delay = names.delay_queue(300, ROUTING_KEY, "delay")
    first = receipts[0]
    assert (first["retry_count"], first["exchange"], first["routing_key"], first["x_death"]) == (
        0,
        names.work,
        ROUTING_KEY,
        [names.death(first_delay)],
    )
    check_retry_receipts(receipts, names)
    assert (data["work_queue_left"], data["failed"]) == (0, [])

    expected = {names.retry_queue(d): delay_queue_arguments(d, "", names.work) for d in RETRY_DELAYS[:2]}
    expected[first_delay] = delay_queue_arguments(300, names.work, ROUTING_KEY)
    check_delay_queues(broker, names, expected)
    run.self_check()
