"""Bounded regular expressions (vhost/patterns.py): RE2 first, ``regex`` with a timeout for PCRE syntax."""

from __future__ import annotations

import time

import pytest
from ottermq.vhost import patterns
from ottermq.vhost.patterns import TIMEOUT, Pattern, PatternError, PatternTimeout, compile_pattern
from ottermq.vhost.policy import PolicyError, make_policy


def test_catastrophic_pattern_is_linear_on_re2() -> None:
    pattern = compile_pattern("(a+)+$")
    assert pattern.bounded
    start = time.perf_counter()
    assert pattern.search("a" * 10_000 + "!") is False  # Python's re takes ~2^10000 steps here
    assert time.perf_counter() - start < 1  # a generous wall-clock bound; it takes microseconds
    assert pattern.search("aaaa") is True


def test_pcre_only_syntax_falls_back_with_a_time_bound() -> None:
    look = compile_pattern(r"^(?!amq\.)")
    assert not look.bounded
    assert look.search("orders") and not look.search("amq.gen-1")
    backref = compile_pattern(r"^(\w)\1")
    assert backref.search("aab") and not backref.search("abb")
    slow = compile_pattern(r"(?=a)(a+)+$")
    with pytest.raises(PatternTimeout):
        slow.search("a" * 10_000 + "!")
    assert slow.matches("a" * 10_000 + "!") is False  # out of time: no match


def test_case_and_invalid_patterns() -> None:
    assert compile_pattern("ORDERS", ignore_case=True).search("my-orders")
    assert not compile_pattern("ORDERS").search("my-orders")
    with pytest.raises(PatternError, match="missing"):
        compile_pattern("(")
    assert TIMEOUT <= 0.05


def test_policies_use_bounded_patterns() -> None:
    policy = make_policy("/", "p", "(a+)+$", {"max-length": 1})
    assert policy.applies("queue", "a" * 200) and not policy.applies("queue", "a" * 254 + "!")
    with pytest.raises(PolicyError, match="pattern should be regular expression but is invalid"):
        make_policy("/", "p", "(", {"max-length": 1})


@pytest.fixture(autouse=True)
def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no remembered answers (they are shared by all patterns)."""
    monkeypatch.setattr(patterns, "_KNOWN", {})


EVIL = "^(a|aa)+(?=b)"  # look-ahead: regex only, exponential on a run of a's without a b


def evil_names(count: int) -> list[str]:
    return ["a" * 60 + f"!{i:04d}" for i in range(count)]


def test_a_name_costs_its_timeout_once_then_its_answer_is_remembered() -> None:
    pattern = Pattern(EVIL)
    name = evil_names(1)[0]
    with pytest.raises(PatternTimeout):
        pattern.search(name)
    start = time.perf_counter()
    for _ in range(100):
        with pytest.raises(PatternTimeout):
            pattern.search(name)  # remembered: no 20 ms each
    assert time.perf_counter() - start < TIMEOUT * 10
    assert pattern.search("aab") and not pattern.search("ccc")  # real answers are remembered too
    assert pattern.search("aab") and not pattern.search("ccc")


def test_prepare_matches_many_names_within_a_total_budget() -> None:
    pattern = Pattern(EVIL)
    names = [*evil_names(200), "aab", "zzz"]  # 200 x 20 ms would be 4 s
    start = time.perf_counter()
    skipped = pattern.prepare(names, budget=0.3)
    took = time.perf_counter() - start
    assert took < 0.3 + TIMEOUT + 1.0  # the budget, one name's timeout and a loaded machine's slack
    assert skipped > 0  # the budget ran out before the end of the list
    # every name now has a remembered answer: on the event loop nothing is matched again
    start = time.perf_counter()
    assert [pattern.matches(n) for n in names[:200]] == [False] * 200
    assert pattern.matches("zzz") is False
    assert time.perf_counter() - start < 0.05


def test_prepare_keeps_the_answers_it_reaches_in_time() -> None:
    pattern = Pattern(r"^(?!amq\.)")
    assert pattern.prepare(["orders", "amq.gen-1", "jobs"], budget=1.0) == 0
    assert pattern.matches("orders") and not pattern.matches("amq.gen-1") and pattern.matches("jobs")
    assert compile_pattern("orders").prepare(["x"] * 10) == 0  # RE2 needs nothing


def test_the_memory_of_the_answers_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(patterns, "KNOWN_MAX", 10)
    for source in (r"^(?!amq\.)", r"^(?!x)"):  # two patterns share the one memory
        Pattern(source).prepare([f"q{i}" for i in range(25)])
        assert len(patterns._KNOWN) <= 10
    assert Pattern(r"^(?!amq\.)").matches("q3")  # forgotten or not, the answer is the same


def test_a_declared_name_shares_one_budget_across_every_policy() -> None:
    """30 costly policies: a name that takes each one to its 20 ms timeout would hold the loop 0.6 s
    per declare; under ``name_budget`` they share 50 ms, and what was cut short is not remembered."""
    from ottermq.vhost.policy import choose

    policies = [
        make_policy("/", f"p{i:02d}", f"^(a|aa)+(?=b{i})", {"max-length": 1}, "queues") for i in range(30)
    ]
    name = evil_names(1)[0]
    start = time.perf_counter()
    with patterns.name_budget(0.05):
        assert choose(policies, "queue", name) is None
    assert time.perf_counter() - start < 0.3  # 50 ms, one pattern's overshoot, a loaded machine
    assert len(patterns._KNOWN) <= 3  # the ones that had their full 20 ms (at most two) and no more
    with patterns.name_budget(5.0):  # a name matched quickly is unaffected
        assert choose(policies, "queue", "aab7") is policies[7]
