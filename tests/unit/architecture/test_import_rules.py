"""The import rules between ottermq's parts, read from the source with ``ast``.

Every import counts: module level, inside functions, and under ``if TYPE_CHECKING`` (a type-only
import is still a dependency a reader has to follow). A part may import only the parts listed for
it in ``ALLOWED``; the order below is the layering, top to bottom:

- ``broker.cli``: the command-line programs; nothing imports them.
- ``broker.workers``: several worker processes around the composition root (worker 0's supervisor,
  the other workers' main program).
- ``broker.runtime``: the composition root: builds the node, the AMQP server and the management
  plugin, starts and stops them (``serve``).
- ``broker.management``: the HTTP API, Prometheus and the web UI; reads the node (its services and
  the connections' ``info()`` snapshots), never the AMQP server's classes.
- ``broker.server``: the AMQP server: connections and channels.
- ``broker.node``: node services: auth, limits, TLS, alarms, the operations layer, definitions,
  recovery, delayed delivery, dead-letter moves, runtime parameters.
- ``broker.shovel``: dynamic shovels (an AMQP client of this and other brokers, aiormq); the node
  builds and drives them, they import nothing of the node.
- ``broker.config`` and ``broker`` itself (``VERSION``): settings, read by everyone in ``broker``.
- the domain packages: ``dlx`` and ``persistence`` over ``vhost`` over ``ttl`` and ``amqp``;
  ``spark_jobs`` stands alone (the archive's schema is its contract).
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("broker", "amqp", "vhost", "ttl", "dlx", "persistence", "spark_jobs")

DOMAIN = {"amqp", "ttl", "vhost", "dlx", "persistence"}
ALLOWED: dict[str, set[str]] = {
    "amqp": set(),
    "ttl": set(),
    "vhost": {"amqp", "ttl"},
    "dlx": {"vhost", "amqp", "ttl"},
    "persistence": {"vhost", "amqp", "ttl", "dlx"},
    "spark_jobs": set(),
    "broker": set(),
    "broker.config": {"broker"},
    "broker.shovel": {"broker", "broker.config", "amqp"},
    "broker.node": {"broker", "broker.config", "broker.shovel"} | DOMAIN,
    "broker.server": {"broker", "broker.config", "broker.node", "broker.shovel"} | DOMAIN,
    "broker.management": {"broker", "broker.config", "broker.node", "broker.shovel"} | DOMAIN,
    "broker.runtime": {
        "broker",
        "broker.config",
        "broker.node",
        "broker.shovel",
        "broker.server",
        "broker.management",
    }
    | DOMAIN,
    "broker.workers": {
        "broker",
        "broker.config",
        "broker.node",
        "broker.shovel",
        "broker.server",
        "broker.management",
        "broker.runtime",
    }
    | DOMAIN,
    "broker.cli": {
        "broker",
        "broker.config",
        "broker.node",
        "broker.shovel",
        "broker.runtime",
        "broker.workers",
    }
    | DOMAIN,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def part_of(module: str) -> str:
    """``broker.server.channel`` -> ``broker.server``; ``vhost.queue`` -> ``vhost``."""
    parts = module.split(".")
    if parts[0] != "broker" or len(parts) == 1:
        return parts[0]
    if parts[1] == "__main__":
        return "broker.cli"
    return f"broker.{parts[1]}"


def imports_of(path: Path) -> set[str]:
    """Our modules ``path`` imports (``ottermq.`` stripped), relative imports resolved."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            name = name.removeprefix("ottermq.")
            if name.split(".")[0] in PACKAGES and (ROOT / name.replace(".", "/")).with_suffix(".py").exists():
                found.add(name)
            elif name.split(".")[0] in PACKAGES and (ROOT / name.replace(".", "/") / "__init__.py").exists():
                found.add(name)
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            edges[module_name(path)] |= imports_of(path) - {module_name(path)}
    return edges


def test_every_part_has_a_rule() -> None:
    assert {part_of(m) for m in graph()} <= set(ALLOWED)


def violations(edges: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} -> {target}"
        for module, targets in edges.items()
        for target in targets
        if part_of(target) != part_of(module) and part_of(target) not in ALLOWED[part_of(module)]
    )


def test_parts_import_only_what_their_rule_allows() -> None:
    assert violations(graph()) == []


def test_a_tangle_is_caught() -> None:
    edges = {
        "broker.management.queues": {"broker.server.channel", "broker.node.info"},
        "broker.node.node": {"broker.runtime"},
        "vhost.queue": {"persistence.store", "amqp.props"},
    }
    assert violations(edges) == [
        "broker.management.queues -> broker.server.channel",
        "broker.node.node -> broker.runtime",
        "vhost.queue -> persistence.store",
    ]


# Modules that still import each other (type-only imports included), inside one part: none since
# the channel was split by responsibility (broker/server/interfaces.py holds the Protocols its parts
# and the connection meet through). A new cycle fails the test.
KNOWN_TANGLES: list[set[str]] = []


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module (Tarjan); a package's ``__init__``
    importing its own submodules does not count."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(edges.get(module, ())):
            if target.startswith(module + "."):
                continue
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(group)

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_no_cycle_crosses_parts() -> None:
    assert [sorted(g) for g in cycles(graph()) if len({part_of(m) for m in g}) > 1] == []


def test_no_new_cycle_inside_a_part() -> None:
    new = [sorted(g) for g in cycles(graph()) if not any(g <= known for known in KNOWN_TANGLES)]
    assert new == []


def test_cycle_finder_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_rules_name_real_parts(part: str) -> None:
    assert {part_of(m) for m in graph()} >= {part} | ALLOWED[part]


def layering_table() -> str:
    """``ALLOWED`` as the Markdown table docs/architecture.md shows (top of the layering first)."""
    order = list(ALLOWED)
    rows = ["| part | may import |", "|---|---|"]
    for part in reversed(order):
        allowed = sorted(ALLOWED[part], key=order.index, reverse=True)
        rows.append(f"| `{part}` | {', '.join(f'`{a}`' for a in allowed) or 'nothing of ours'} |")
    return "\n".join(rows)


def test_the_architecture_page_shows_these_rules() -> None:
    """docs/architecture.md's layering table is ``ALLOWED`` (regenerate it with ``layering_table``), and
    its diagram names every part."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = "<!-- layering: ALLOWED in tests/unit/architecture/test_import_rules.py -->"
    end = "<!-- /layering -->"
    assert start in page and end in page
    assert page.split(start, 1)[1].split(end, 1)[0].strip() == layering_table()
    diagram = page.split("```text", 1)[1].split("```", 1)[0]
    assert [p for p in ALLOWED if p.replace(".", "/") not in diagram and p != "broker"] == []
