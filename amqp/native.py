"""Which code runs on the message hot path: the modules compiled by mypyc, or their pure-Python sources.

``pip install`` compiles the modules in :data:`MODULES` with mypyc when a C compiler and the Python
headers are there (``setup.py``); without them, or with ``OTTERMQ_PURE_PYTHON=1`` while building, it
installs the pure-Python modules only. Both behave the same and are tested against the same bytes.

At run time the compiled modules are used when they are installed, unless

* ``OTTERMQ_PURE_PYTHON=1`` is set: :func:`install` (run by the ``__init__`` of every package with
  compiled modules, before any of them is imported) puts an import hook first on ``sys.meta_path``
  that loads the ``.py`` sources instead, all of them: compiled modules check the types of each other's
  classes, so a mix of compiled and pure modules does not work;
* a source is no longer the one that was compiled (an editable install whose ``.py`` was edited
  since ``pip install``): then the sources are loaded too, with a warning to re-run the install.

This module itself is never compiled; :func:`compiled` says what is in use.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["MODULES", "PURE_ENV", "compiled", "install", "pure_requested", "status"]

log = logging.getLogger(__name__)

PURE_ENV = "OTTERMQ_PURE_PYTHON"
"""Set to ``1`` (``true``, ``yes``) to run the pure-Python modules, or to build without compiling."""

# Read by setup.py, and by the Makefile with sed (one name per line). All of them or none is compiled.
MODULES = (
    "ottermq.amqp.reader",
    "ottermq.amqp.fastpath",
    "ottermq.amqp.props",
    "ottermq.vhost.paging",
    "ottermq.vhost.ready",
    "ottermq.vhost.message",
    "ottermq.vhost.consumers",
    "ottermq.vhost.expiry",
    "ottermq.vhost.limits",
    "ottermq.vhost.retry",
    "ottermq.vhost.queue_type",
    "ottermq.vhost.classic",
    "ottermq.vhost.quorum",
    "ottermq.vhost.queue_types",
    "ottermq.vhost.queue_api",
    "ottermq.vhost.queue",
    "ottermq.vhost.exchange",
    "ottermq.vhost.chash",
    "ottermq.vhost.erlhash",
    "ottermq.vhost.publish_result",
    "ottermq.vhost.vhost",
    "ottermq.broker.server.output",
    "ottermq.broker.server.consumers",
    "ottermq.broker.server.publisher",
    "ottermq.broker.server.channel",
    "ottermq.broker.server.connection",
)

BUILD_INFO = "ottermq.amqp._build_info"
"""Written by setup.py next to the compiled modules: ``SOURCES = {module: sha256 of its source}``."""


def pure_requested(environ: dict[str, str] | None = None) -> bool:
    """Whether ``OTTERMQ_PURE_PYTHON`` asks for the pure-Python modules."""
    value = (os.environ if environ is None else environ).get(PURE_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


class SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the ``.py`` source of the compiled modules, ahead of the extension modules beside it."""

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = frozenset(modules)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules or not path:
            return None
        leaf = fullname.rpartition(".")[2]
        for folder in path:
            source = Path(folder) / f"{leaf}.py"
            if source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None


_state: dict[str, str] = {}


def _package_path(name: str) -> list[str]:
    """The folders of the package of module ``name``; imports that package (whose ``__init__`` only
    calls :func:`install`, which returns at once while the first call is deciding)."""
    try:
        spec = importlib.util.find_spec(name.rpartition(".")[0])
    except ImportError:
        return []
    return list(spec.submodule_search_locations or []) if spec is not None else []


def _extension_installed(name: str) -> bool:
    """Whether an extension module file for ``name`` is installed (without importing it)."""
    leaf = name.rpartition(".")[2]
    return any(
        (Path(folder) / f"{leaf}{suffix}").is_file()
        for folder in _package_path(name)
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )


def _stale_sources() -> list[str]:
    """Compiled modules whose ``.py`` differs from the source that was compiled (editable installs)."""
    try:
        info = importlib.import_module(BUILD_INFO)
    except ImportError:
        return []
    built: dict[str, str] = getattr(info, "SOURCES", {})
    stale = []
    for name, digest in built.items():
        spec = SourceFinder([name]).find_spec(name, _package_path(name))
        origin = spec.origin if spec is not None else None
        if origin is None or hashlib.sha256(Path(origin).read_bytes()).hexdigest() != digest:
            stale.append(name)
    return stale


def install() -> None:
    """Choose once per process between the compiled modules and their sources (see the module doc).

    Called by the ``__init__`` of ``ottermq.amqp``, ``ottermq.vhost`` and ``ottermq.broker.server``;
    the first call decides.
    """
    if _state:
        return
    _state["mode"] = "deciding"
    if pure_requested():
        _state["mode"], _state["reason"] = "pure", f"{PURE_ENV} is set"
    else:
        stale = _stale_sources()
        if stale:
            _state["mode"] = "pure"
            _state["reason"] = f"sources changed since they were compiled: {', '.join(stale)}"
            log.warning(
                "running the pure-Python hot path: %s; re-run `pip install` (make install) to compile them",
                _state["reason"],
            )
        else:
            _state["mode"], _state["reason"] = "auto", ""
    if _state["mode"] == "pure":
        sys.meta_path.insert(0, SourceFinder(MODULES))


def compiled() -> bool:
    """True when every module of :data:`MODULES` runs compiled (importing them)."""
    install()
    for name in MODULES:
        module = importlib.import_module(name)
        if not isinstance(getattr(module, "__loader__", None), importlib.machinery.ExtensionFileLoader):
            return False
    return True


def status() -> str:
    """One line for the start-up log: compiled or pure, and why."""
    if compiled():
        return f"hot path compiled with mypyc ({len(MODULES)} modules)"
    reason = _state.get("reason") or (
        "compiled modules are installed but not used"
        if any(_extension_installed(name) for name in MODULES)
        else "installed without compiled modules (built without a C compiler or the Python headers, "
        f"or with {PURE_ENV}=1)"
    )
    return f"hot path in pure Python: {reason}"
