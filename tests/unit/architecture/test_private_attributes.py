"""Never a dependency's private attributes (the house style: "Use the well-kept library ... Never a
dependency's private attributes"): in every module of the broker's packages that uses a driver or
client library whose objects it holds (asyncpg for now), no attribute whose name starts with ``_`` is
read from anything but ``self``, ``cls``, ``super()`` or a class of the module itself. A private
attribute of asyncpg's (a connection's ``_addr`` or ``_params``) changes without notice between
releases."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("broker", "amqp", "vhost", "ttl", "dlx", "persistence", "spark_jobs")
DRIVERS = ("asyncpg",)


def driver_modules() -> list[Path]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                if any(name.split(".")[0] in DRIVERS for name in names):
                    found.append(path)
                    break
    return found


def private_reads(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own_classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    allowed = {"self", "cls", *own_classes}
    reads = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in allowed:
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        reads.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return reads


def test_the_driver_modules_are_found() -> None:
    names = {p.name for p in driver_modules()}
    assert {"postgres.py", "postgres_conn.py", "lease.py"} <= names


@pytest.mark.parametrize("path", driver_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_attribute_of_another_object_is_read(path: Path) -> None:
    assert private_reads(path) == []
