"""One case of the adversarial suite, from set-up to verdict (``e2e/test_attack_*.py``).

A :class:`Case` declares its queues and exchanges under unique names, publishes with confirms
through a :class:`~e2e.attack_kit.RawClient` (a broker that closes the connection is answered, noted,
and a new connection is opened, so the case goes on), and :meth:`Case.verdict` then checks the one
invariant of issue 38 item 7:

* every confirmed message is in a queue of the case, was consumed by the test, or is recorded by the
  dead-letter archive as dropped, exactly once (:func:`~e2e.attack_kit.account`);
* no management or Prometheus read answers 5xx (:func:`~e2e.attack_kit.http_sweep`);
* the pinger's worst round trip stays under the limit and so does the broker's loop-lag histogram
  when it has one (:class:`~e2e.attack_kit.LagProbe`);
* and no connection was closed with 541 INTERNAL_ERROR (an exception that escaped the broker; a
  refusal with another code is the broker's right).

:class:`Findings` keeps what failed, for the report at the end of a test and for ``make attack``'s
findings file (``ATTACK_FINDINGS``).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .attack_checks import LAG_FAULT, LagProbe, Ledger, account, http_sweep
from .attack_client import BrokerClosed, RawClient, drain, properties
from .conftest import Broker, BrokerProcess, _broker_from_url
from .hostile import Field

FINDINGS_FILE = os.environ.get("ATTACK_FINDINGS")
INTERNAL_ERROR = 541


@dataclass
class Target:
    """The broker a module attacks: ``archive`` is its dead-letter archive directory (None when
    it has none, as RabbitMQ), ``probe`` the pinger on it."""

    broker: Broker
    archive: Path | None
    probe: LagProbe
    process: BrokerProcess | None = None

    def client(self, **overrides: Any) -> RawClient:
        b = self.broker
        kwargs: dict[str, Any] = {"user": b.user, "password": b.password, "vhost": b.vhost, **overrides}
        return RawClient(b.host, b.port, **kwargs)

    def alive(self) -> bool:
        return self.process is None or (self.process.proc is not None and self.process.proc.poll() is None)


@contextlib.contextmanager
def open_target(tmp: Path, env: dict[str, str] | None = None) -> Iterator[Target]:
    """The broker under ``AMQP_URL``, else a private ottermq with a dead-letter archive (bodies
    kept, so that a dropped dead letter is found by its id) and ``env``; with the pinger on it."""
    url = os.environ.get("AMQP_URL")
    process = None
    archive: Path | None = None
    if url:
        broker = _broker_from_url(url)
    else:
        archive = tmp / "archive"
        process = BrokerProcess(
            {
                "OTTERMQ_DLX_ARCHIVE_DIR": str(archive),
                "OTTERMQ_DLX_ARCHIVE_BODY_BYTES": "256",
                **(env or {}),
            }
        )
        broker = process.start()
    probe = LagProbe(
        broker.host, broker.port, broker.user, broker.password, broker.vhost, broker.prometheus_url
    )
    try:
        yield Target(broker, archive, probe, process)
    finally:
        probe.close()
        if process is not None:
            process.close()


@dataclass
class Case:
    """One attack: names, a connection that survives the broker closing it, the ledger, and what
    went wrong along the way (``problems``)."""

    target: Target
    label: str
    ledger: Ledger = field(init=False)
    client: RawClient = field(init=False)
    queues: list[str] = field(default_factory=list)
    exchanges: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    closes: list[str] = field(default_factory=list)
    pending: dict[int, str] = field(default_factory=dict)
    lag: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ledger = Ledger("attack-" + uuid.uuid4().hex[:10])
        self.target.probe.window()  # the window starts now
        self.client = self.target.client()

    # -- names and declarations -----------------------------------------------------------------
    def name(self, role: str) -> str:
        return f"{self.ledger.case}.{role}"

    def queue(self, role: str, arguments: list[tuple[bytes, Field]] | bytes = b"\0\0\0\0", **kw: Any) -> str:
        name = self.name(role)
        self.queues.append(name)
        self.do(lambda: self.client.queue_declare(name, arguments, **kw))
        return name

    def exchange(
        self, role: str, kind: str, arguments: list[tuple[bytes, Field]] | bytes = b"\0\0\0\0"
    ) -> str:
        name = self.name(role)
        self.exchanges.append(name)
        self.do(lambda: self.client.exchange_declare(name, kind, arguments))
        return name

    # -- a connection that goes on --------------------------------------------------------------
    def do(self, step: Callable[[], Any]) -> Any:
        """Run one step; a close from the broker is noted (a 541 is a problem), unconfirmed
        publishes become unsure, and a new connection takes over. Returns the step's value or None."""
        try:
            return step()
        except BrokerClosed as closed:
            self._closed(
                f"{'connection' if closed.connection else 'channel'} closed {closed.code} {closed.text}"
            )
            if closed.code == INTERNAL_ERROR:
                self.problems.append(self.closes[-1])
        except (ConnectionError, TimeoutError, OSError) as exc:
            self._closed(f"connection failed: {exc!r}")
            self.problems.append(self.closes[-1])
        return None

    def _closed(self, what: str) -> None:
        self.closes.append(what)
        self.ledger.unsure.update(self.pending.values())
        self.pending.clear()
        with contextlib.suppress(OSError):
            self.client.sock.close()
        self.client = self.target.client()

    def publish(
        self,
        queue: str,
        headers: bytes | None = None,
        *,
        expiration: str | None = None,
        persistent: bool = True,
        exchange: str = "",
        body: bytes | None = None,
    ) -> str:
        """Publish one message whose body is a new id (followed by ``body``) and return the id."""
        mid = self.ledger.new_id()
        props = properties(headers, persistent=persistent, expiration=expiration)
        seq = self.do(lambda: self.client.publish(exchange, queue, props, mid.encode() + (body or b"")))
        if seq is not None:
            self.pending[seq] = mid
        else:
            self.ledger.unsure.add(mid)
        return mid

    def confirm(self, timeout: float = 30.0) -> None:
        """Wait for the confirms of everything published since the last call."""
        if not self.pending:
            return
        client = self.client
        self.do(lambda: client.wait_confirms(self.pending, timeout))
        for seq, mid in self.pending.items():
            if seq in client.confirmed:
                self.ledger.confirmed.add(mid)
            elif seq in client.nacked:
                self.ledger.refused.add(mid)
            else:
                self.ledger.unsure.add(mid)
        self.pending.clear()

    def count(self, queue: str) -> int | None:
        return self.do(lambda: self.client.queue_declare(queue, passive=True))

    def counts(self, *queues: str) -> tuple[int | None, ...]:
        return tuple(self.count(q) for q in queues)

    # -- verdict --------------------------------------------------------------------------------
    def verdict(self) -> list[str]:
        """The invariant after the case (see the module docstring), then the case's objects are
        deleted. Returns every problem, those met along the way first."""
        self.confirm()
        b = self.target.broker
        self.problems += http_sweep(b.management_url, b.prometheus_url, b.vhost, self.queues, self.exchanges)
        self.lag = self.target.probe.window()
        self.problems += self.target.probe.problems(self.lag)
        seen: Counter[str] = Counter()
        for queue in self.queues:
            found = self.do(lambda q=queue: drain(self.client, [q]))  # type: ignore[misc]
            seen.update(found or {})
        self.problems += account(self.ledger, seen, self.target.archive)
        if not self.target.alive():
            self.problems.append("the broker died")
        self.cleanup()
        return self.problems

    def cleanup(self) -> None:
        """Delete the case's queues and exchanges (a slow broker gets a minute for each, and a
        second try on a new connection), so that nothing hostile is left for the next case."""
        self.client.timeout = 60
        for kind, names in (("queue", self.queues), ("exchange", self.exchanges)):
            for name in names:
                for _ in range(2):
                    before = len(self.closes)
                    self.do(lambda n=name, k=kind: getattr(self.client, f"{k}_delete")(n))  # type: ignore[misc]
                    if len(self.closes) == before:
                        break
                    self.client.timeout = 60
        self.client.close()


@dataclass
class Findings:
    """What failed in a test, kept (not raised) so that one run reports every distinct finding."""

    test: str
    items: list[dict[str, Any]] = field(default_factory=list)

    def add(self, case: str, value: str, problems: list[str], **more: Any) -> None:
        seed = os.environ.get("ATTACK_SEED", "0")
        entry = {"test": self.test, "seed": seed, "case": case, "value": value, "problems": problems, **more}
        self.items.append(entry)
        if FINDINGS_FILE:
            with open(FINDINGS_FILE, "a", encoding="utf-8") as out:
                out.write(json.dumps(entry) + "\n")

    def report(self) -> str:
        lines = [f"{len(self.items)} case(s) broke the invariant in {self.test}:"]
        for item in self.items[:30]:
            lines.append(f"- {item['case']} with {item['value'][:300]}")
            lines += [f"    {p}" for p in item["problems"]]
        return "\n".join(lines)


def once_more_if_slow(run: Callable[[], list[str]]) -> list[str]:
    """``run()``'s problems; when all of them are the pinger's, ``run()`` once more and only what it
    finds again counts: a hostile value or request costs the same every time, a busy machine's
    hiccup does not (issue 38's own findings were each reproduced twice)."""
    problems = run()
    if problems and all(LAG_FAULT in p for p in problems):
        again = run()
        return [*problems, *(f"again: {p}" for p in again)] if again else []
    return problems
