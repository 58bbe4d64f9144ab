"""No module of the broker's packages imports another module's private name: ``from .worker import
_start_message`` or ``from ottermq.persistence.archive.files import _pid_alive`` reach past what a
module offers. A name another module needs is public (no leading underscore, a docstring), so a
reader of the module sees that it is used elsewhere. Every import counts: module level, inside
functions and under ``if TYPE_CHECKING``.

``KNOWN`` lists the exceptions, each with its reason; there are none.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("broker", "amqp", "vhost", "ttl", "dlx", "persistence", "spark_jobs")

KNOWN: dict[str, str] = {}  # "path: from module import _name" -> why


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(source: str, where: str) -> list[str]:
    """The imports in ``source`` of a private name of ours (a relative import, or one of
    ``ottermq.``), as ``"<where>: from <module> import <name>"``."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            ours = node.level > 0 or module == "ottermq" or module.startswith("ottermq.")
            path = module.lstrip(".").split(".") if module.strip(".") else []
            if not ours:
                continue
            for part in path:
                if _private(part):
                    found.append(f"{where}: from {module} import ...")
            found += [f"{where}: from {module} import {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "ottermq" and any(_private(p) for p in parts):
                    found.append(f"{where}: import {alias.name}")
    return found


def all_private_imports() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += private_imports(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    return found


def test_no_module_imports_a_private_name_of_ours() -> None:
    assert [f for f in all_private_imports() if f not in KNOWN] == []


def test_every_known_exception_still_exists() -> None:
    assert sorted(set(KNOWN) - set(all_private_imports())) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from .worker import _start_message", ["m.py: from .worker import _start_message"]),
        ("from ..node import wiring, _helper as helper", ["m.py: from ..node import _helper"]),
        (
            "from ottermq.persistence.archive.files import _pid_alive",
            ["m.py: from ottermq.persistence.archive.files import _pid_alive"],
        ),
        ("def f():\n    from . import _private_module", ["m.py: from . import _private_module"]),
        ("if TYPE_CHECKING:\n    from .x._y import Z", ["m.py: from .x._y import ..."]),
        ("import ottermq.amqp._build_info", ["m.py: import ottermq.amqp._build_info"]),
        ("from .worker import start as _start", []),  # a public name, bound privately here
        ("from __future__ import annotations", []),
        ("from typing import _SpecialForm", []),  # another library's: test_private_attributes.py's concern
        ("from .messages import Start, __all__", []),
    ],
)
def test_the_checker_sees_private_imports(source: str, expected: list[str]) -> None:
    assert private_imports(source, "m.py") == expected
