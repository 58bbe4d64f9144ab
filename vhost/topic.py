"""Topic-exchange pattern trie with RabbitMQ 3.x matching rules.

Rules (each checked against RabbitMQ 3.10.8, see ``tests/unit/vhost/test_topic.py``):
- Routing keys and binding patterns are split on ``.``; empty words are words (``"a..b"`` has three
  words, ``"."`` has two empty words) but the empty string has *no* words: ``"*"`` does not match
  ``""`` while ``"#"`` and ``""`` do.
- ``*`` matches exactly one word, ``#`` matches zero or more words. Only a whole word is a wildcard:
  ``"a*"``, ``"##"`` and ``"a.#b"`` are literal words.
- Matching simulates the trie as an NFA: the set of active nodes is deduplicated at every word, so
  patterns such as ``"#.#.#.#"`` cost O(words x nodes) instead of backtracking exponentially.
"""

from __future__ import annotations

__all__ = ["Destination", "TopicTrie", "split_words"]

Destination = tuple[str, str]
"""``("queue", name)`` or ``("exchange", name)``."""


def split_words(key: str) -> list[str]:
    """Split a routing key or binding pattern into words (``""`` has none)."""
    return key.split(".") if key else []


class _Node:
    __slots__ = ("children", "dests", "is_hash")

    def __init__(self, is_hash: bool = False) -> None:
        self.children: dict[str, _Node] = {}
        self.dests: set[Destination] = set()
        self.is_hash = is_hash


class TopicTrie:
    """Binding patterns indexed by word, matched against routing keys.

    One ``(pattern, dest)`` pair is stored once; reference counting of duplicate bindings (same
    pattern and destination, different arguments) is the caller's job.
    """

    __slots__ = ("_root",)

    def __init__(self) -> None:
        self._root = _Node()

    def __bool__(self) -> bool:
        return bool(self._root.children) or bool(self._root.dests)

    def add(self, pattern: str, dest: Destination) -> None:
        """Bind ``dest`` with ``pattern`` (idempotent)."""
        node = self._root
        for word in split_words(pattern):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node(word == "#")
            node = child
        node.dests.add(dest)

    def remove(self, pattern: str, dest: Destination) -> None:
        """Unbind ``dest`` from ``pattern`` (absent pairs are ignored) and prune empty nodes."""
        words = split_words(pattern)
        path: list[_Node] = [self._root]
        node = self._root
        for word in words:
            child = node.children.get(word)
            if child is None:
                return
            path.append(child)
            node = child
        node.dests.discard(dest)
        for depth in range(len(words), 0, -1):
            node = path[depth]
            if node.dests or node.children:
                break
            del path[depth - 1].children[words[depth - 1]]

    def match(self, routing_key: str) -> set[Destination]:
        """Destinations whose pattern matches ``routing_key`` (a new set the caller owns)."""
        states = _closure([self._root])
        for word in split_words(routing_key):
            step: list[_Node] = []
            seen: set[int] = set()
            for node in states:
                if node.is_hash and id(node) not in seen:  # '#' consumes this word too
                    seen.add(id(node))
                    step.append(node)
                children = node.children
                if children:
                    child = children.get(word)
                    if child is not None and id(child) not in seen:
                        seen.add(id(child))
                        step.append(child)
                    child = children.get("*")
                    if child is not None and id(child) not in seen:
                        seen.add(id(child))
                        step.append(child)
            if not step:
                return set()
            states = _closure(step)
        result: set[Destination] = set()
        for node in states:
            if node.dests:
                result |= node.dests
        return result


def _closure(states: list[_Node]) -> list[_Node]:
    """Add the ``#`` children reachable without consuming a word (``#`` matching zero words)."""
    hashed = [node.children["#"] for node in states if "#" in node.children]
    if not hashed:
        return states
    seen = {id(node) for node in states}
    out = list(states)
    while hashed:
        node = hashed.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        child = node.children.get("#")
        if child is not None:
            hashed.append(child)
    return out
