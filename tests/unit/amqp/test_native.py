"""The compiled hot path (``ottermq.amqp.native``, setup.py): built when it can be, used unless told not to.

- Where a C compiler and the Python headers are, the install must have compiled every module of
  ``native.MODULES`` (mypyc): a build that silently fell back to pure Python fails here, as does an
  editable install whose hot-path sources were edited since it was built (re-run ``make install``).
- ``OTTERMQ_PURE_PYTHON=1`` runs the ``.py`` sources, all of them (checked in a fresh interpreter).
- ``native.MODULES`` names modules that exist, in packages whose ``__init__`` calls ``native.install()``
  before the modules can be imported.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import ottermq.amqp
from ottermq.amqp import native

ROOT = Path(__file__).resolve().parents[3]


def _compiler_and_headers() -> str | None:
    """Why the build could compile (the compiler and the header found), or None when it could not."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    compiler = shutil.which(shlex.split(cc)[0])
    header = Path(sysconfig.get_paths()["include"], "Python.h")
    return f"{compiler} and {header}" if compiler and header.is_file() else None


def test_the_hot_path_is_compiled_where_a_compiler_is() -> None:
    if native.pure_requested():
        assert not ottermq.amqp.compiled(), native.status()
        return
    found = _compiler_and_headers()
    if found is None:  # the build had nothing to compile with: the pure modules are installed
        assert "pure Python" in native.status()
        return
    assert ottermq.amqp.compiled(), (
        f"{found} are here, but {native.status()}: run `make install` (pip install -e .) and read its "
        "'ottermq build:' lines"
    )
    for name in native.MODULES:
        module = sys.modules[name]
        assert isinstance(module.__loader__, importlib.machinery.ExtensionFileLoader), name


def test_pure_python_is_used_when_asked() -> None:
    script = (
        "import json, sys, ottermq.amqp, ottermq.broker.server.connection;"
        "from ottermq.amqp import native;"
        "print(json.dumps([ottermq.amqp.compiled(), native.status(),"
        " {n: sys.modules[n].__file__ for n in native.MODULES}]))"
    )
    env = {**os.environ, native.PURE_ENV: "1", "PYTHONSAFEPATH": "1"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True, cwd=ROOT
    )
    compiled, status, files = json.loads(out.stdout)
    assert compiled is False
    assert status == f"hot path in pure Python: {native.PURE_ENV} is set"
    assert sorted(files) == sorted(native.MODULES)
    assert all(path.endswith(".py") for path in files.values()), files


def test_the_compiled_modules_exist_and_are_guarded() -> None:
    for name in native.MODULES:
        assert importlib.util.find_spec(name) is not None, name
        package = Path(ROOT, *name.split(".")[1:-1], "__init__.py")
        assert "native.install()" in package.read_text(encoding="utf-8"), package


def test_the_status_line_says_what_runs() -> None:
    status = native.status()
    if ottermq.amqp.compiled():
        assert status == f"hot path compiled with mypyc ({len(native.MODULES)} modules)"
    else:
        assert status.startswith("hot path in pure Python: ")
