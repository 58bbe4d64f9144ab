"""Bounded regular expressions (vhost/patterns.py): RE2 first, ``regex`` with a timeout for PCRE syntax."""

from __future__ import annotations

import time

import pytest
from ottermq.vhost.patterns import TIMEOUT, PatternError, PatternTimeout, compile_pattern
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
