"""The hot-path modules' tests run twice: on the installed modules (compiled by mypyc when the build had a C
compiler, see setup.py) and on their pure-Python sources, against the same expected bytes.

A test module opts in with ``pytestmark = pytest.mark.hot_path``: each of its tests runs as ``[installed]``
and ``[source]``. For ``[source]`` the names the test module imported from a compiled module (the module
itself, its functions and classes) and such values among the test's parameters are replaced, for that
test, by those of the sources. The sources of all
of ``ottermq.amqp.native.MODULES`` are loaded together, once, outside ``sys.modules``: compiled modules
check the classes of each other's objects, so pure ones must only see each other.
"""

from __future__ import annotations

import functools
import importlib
import sys
from types import ModuleType
from typing import Any

import pytest
from ottermq.amqp import native

BUILDS = ("installed", "source")


@functools.cache
def source_modules() -> dict[str, ModuleType]:
    """Every module of ``native.MODULES`` executed from its ``.py``, by name; ``sys.modules`` and the
    packages' attributes are left (or put back) as they were."""
    installed = {name: importlib.import_module(name) for name in native.MODULES}  # and all they import
    parents = {name: sys.modules[name.rpartition(".")[0]] for name in native.MODULES}
    for name in native.MODULES:
        del sys.modules[name]
        delattr(parents[name], name.rpartition(".")[2])  # else `from package import module` finds it
    finder = native.SourceFinder(native.MODULES)
    sys.meta_path.insert(0, finder)
    try:
        sources = {name: importlib.import_module(name) for name in native.MODULES}
    finally:
        sys.meta_path.remove(finder)
        for name, module in installed.items():
            sys.modules[name] = module
            setattr(parents[name], name.rpartition(".")[2], module)
    for name, module in sources.items():
        assert module.__file__ is not None and module.__file__.endswith(".py"), (name, module.__file__)
    return sources


def _source_twin(value: Any, sources: dict[str, ModuleType]) -> Any:
    """What ``value`` (imported from an installed module) is in the sources, or None."""
    if isinstance(value, ModuleType):
        return sources.get(value.__name__)
    module = sources.get(getattr(value, "__module__", None) or "")
    name = getattr(value, "__qualname__", None)
    if module is None or not isinstance(name, str) or "." in name:
        return None
    return getattr(module, name, None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("hot_path") is not None:
        metafunc.parametrize("hot_path_build", BUILDS, indirect=True)


@pytest.fixture(autouse=True)
def hot_path_build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """``installed`` or ``source`` in ``hot_path`` test modules (None elsewhere)."""
    build: str | None = getattr(request, "param", None)
    if build == "source":
        sources = source_modules()
        module = request.module
        for name, value in list(vars(module).items()):
            twin = _source_twin(value, sources)
            if twin is not None:
                monkeypatch.setattr(module, name, twin)
        params = request.node.callspec.params  # parametrize values, not yet passed to the test
        for name, value in list(params.items()):
            twin = _source_twin(value, sources)
            if twin is not None:
                params[name] = twin
    return build
