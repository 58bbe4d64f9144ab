"""TopicTrie against RabbitMQ 3.10.8: the table below was read back from a real broker with pika
(one queue per pattern bound to a topic exchange, every key published once)."""

from __future__ import annotations

import itertools
import random
import time
from functools import cache

import pytest
from ottermq.vhost.topic import TopicTrie, split_words

# Publish keys used against every pattern below.
KEYS = [
    "",
    "a",
    "a.b",
    "a..b",
    ".",
    "b",
    "a.b.c",
    "a.c.b",
    "a.x.y.b",
    "..",
    "a.",
    ".a",
    "b.a",
    "x.a.b",
    "a.##",
    "a*",
    "a.#b",
    "#",
    "*",
    "a.b.a.b",
]
EVERY_KEY = KEYS
EVERY_NONEMPTY = [k for k in KEYS if k]

# pattern -> keys RabbitMQ 3.10.8 delivered through a binding with that pattern
RABBITMQ_TOPIC_TABLE: dict[str, list[str]] = {
    "#": EVERY_KEY,
    "*": ["a", "b", "a*", "#", "*"],
    "a.#.b": ["a.b", "a..b", "a.c.b", "a.x.y.b", "a.b.a.b"],
    "#.#": EVERY_KEY,
    "*.#": EVERY_NONEMPTY,
    "": [""],
    "a.": ["a."],
    ".a": [".a"],
    "a.*": ["a.b", "a.", "a.##", "a.#b"],
    "*.a": [".a", "b.a"],
    "a.#": ["a", "a.b", "a..b", "a.b.c", "a.c.b", "a.x.y.b", "a.", "a.##", "a.#b", "a.b.a.b"],
    "#.a": ["a", ".a", "b.a"],
    "#.*": EVERY_NONEMPTY,
    "*.*": ["a.b", ".", "a.", ".a", "b.a", "a.##", "a.#b"],
    "a.b": ["a.b"],
    "a..b": ["a..b"],
    "a.*.b": ["a..b", "a.c.b"],
    "#.b": ["a.b", "a..b", "b", "a.c.b", "a.x.y.b", "x.a.b", "a.b.a.b"],
    ".": ["."],
    "*.": [".", "a."],
    ".*": [".", ".a"],
    "#.": [".", "..", "a."],
    ".#": [".", "..", ".a"],
    "a.#.#.b": ["a.b", "a..b", "a.c.b", "a.x.y.b", "a.b.a.b"],
    "*.*.#": [
        "a.b",
        "a..b",
        ".",
        "a.b.c",
        "a.c.b",
        "a.x.y.b",
        "..",
        "a.",
        ".a",
        "b.a",
        "x.a.b",
        "a.##",
        "a.#b",
        "a.b.a.b",
    ],
    "#.#.#": EVERY_KEY,
    "..": [".."],
    "*.#.*": [
        "a.b",
        "a..b",
        ".",
        "a.b.c",
        "a.c.b",
        "a.x.y.b",
        "..",
        "a.",
        ".a",
        "b.a",
        "x.a.b",
        "a.##",
        "a.#b",
        "a.b.a.b",
    ],
    "a.#.*": ["a.b", "a..b", "a.b.c", "a.c.b", "a.x.y.b", "a.", "a.##", "a.#b", "a.b.a.b"],
    "#.a.#": [
        "a",
        "a.b",
        "a..b",
        "a.b.c",
        "a.c.b",
        "a.x.y.b",
        "a.",
        ".a",
        "b.a",
        "x.a.b",
        "a.##",
        "a.#b",
        "a.b.a.b",
    ],
    "*..*": ["a..b", ".."],
    "a.##": ["a.##"],
    "a*": ["a*"],
    "a.#b": ["a.#b"],
    "#.#.a.#.#": [
        "a",
        "a.b",
        "a..b",
        "a.b.c",
        "a.c.b",
        "a.x.y.b",
        "a.",
        ".a",
        "b.a",
        "x.a.b",
        "a.##",
        "a.#b",
        "a.b.a.b",
    ],
}


@pytest.mark.parametrize("pattern", list(RABBITMQ_TOPIC_TABLE))
def test_pattern_matches_like_rabbitmq(pattern: str) -> None:
    trie = TopicTrie()
    trie.add(pattern, ("queue", "q"))
    got = [key for key in KEYS if trie.match(key)]
    assert got == RABBITMQ_TOPIC_TABLE[pattern]


def test_all_patterns_in_one_trie() -> None:
    trie = TopicTrie()
    for pattern in RABBITMQ_TOPIC_TABLE:
        trie.add(pattern, ("queue", pattern))
    for key in KEYS:
        expected = {("queue", p) for p, keys in RABBITMQ_TOPIC_TABLE.items() if key in keys}
        assert trie.match(key) == expected, key


def test_split_words() -> None:
    assert split_words("") == []
    assert split_words(".") == ["", ""]
    assert split_words("a..b") == ["a", "", "b"]


@cache
def _reference(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    """Obviously-correct recursive definition of RabbitMQ's topic matching."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(_reference(rest, words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    return (head == "*" or head == words[0]) and _reference(rest, words[1:])


def test_random_patterns_against_reference() -> None:
    rng = random.Random(7)
    alphabet = ["a", "b", "", "*", "#"]
    patterns = {".".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5))) for _ in range(300)}
    trie = TopicTrie()
    for pattern in patterns:
        trie.add(pattern, ("queue", pattern))
    keys = {".".join(w) for n in range(5) for w in itertools.product(["a", "b", ""], repeat=n)}
    for key in keys:
        expected = {
            ("queue", p) for p in patterns if _reference(tuple(split_words(p)), tuple(split_words(key)))
        }
        assert trie.match(key) == expected, key


def test_no_exponential_blowup() -> None:
    trie = TopicTrie()
    trie.add(".".join(["#"] * 50) + ".z", ("queue", "never"))
    trie.add(".".join(["#", "*"] * 25), ("queue", "yes"))
    start = time.perf_counter()
    assert trie.match(".".join(["a"] * 300)) == {("queue", "yes")}
    assert time.perf_counter() - start < 1.0


def test_remove_prunes_and_keeps_others() -> None:
    trie = TopicTrie()
    trie.add("a.b.c", ("queue", "1"))
    trie.add("a.b", ("queue", "2"))
    trie.add("a.#", ("queue", "3"))
    trie.remove("a.b.c", ("queue", "1"))
    assert trie.match("a.b.c") == {("queue", "3")}
    assert trie.match("a.b") == {("queue", "2"), ("queue", "3")}
    trie.remove("a.b", ("queue", "2"))
    trie.remove("a.#", ("queue", "3"))
    assert not trie
    assert trie.match("a.b") == set()


def test_remove_absent_is_ignored() -> None:
    trie = TopicTrie()
    trie.add("a.*", ("queue", "1"))
    trie.remove("a.b", ("queue", "1"))
    trie.remove("a.*", ("queue", "2"))
    trie.remove("x.y.z", ("queue", "1"))
    assert trie.match("a.x") == {("queue", "1")}


def test_add_is_idempotent_and_dests_are_independent() -> None:
    trie = TopicTrie()
    trie.add("#", ("queue", "1"))
    trie.add("#", ("queue", "1"))
    trie.add("#", ("exchange", "x"))
    assert trie.match("") == {("queue", "1"), ("exchange", "x")}
    trie.remove("#", ("queue", "1"))
    assert trie.match("anything") == {("exchange", "x")}


def test_match_returns_a_fresh_set() -> None:
    trie = TopicTrie()
    trie.add("a", ("queue", "1"))
    result = trie.match("a")
    result.add(("queue", "intruder"))
    assert trie.match("a") == {("queue", "1")}
