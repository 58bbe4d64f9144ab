"""setup.py's one compile per clone: the compiled hot path is kept under a hash of what it depends on,
and an install of the same sources copies it instead of compiling.

- The key changes with a hot-path source, with ``setup.py`` or ``amqp/native.py``, and with the compiler
  settings; not with other files.
- A cache folder counts only when its manifest and every library it names are there.
- ``setup.py build_ext --inplace`` in a copy of the tree (what a fresh clone has) given this clone's
  cache copies the libraries into place: mypyc generates nothing and no compiler runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from ottermq.amqp import native

ROOT = Path(__file__).resolve().parents[3]


def _setup_module(root: Path) -> ModuleType:
    """setup.py of ``root`` as a module (its ``setup()`` call runs only as ``__main__``)."""
    spec = importlib.util.spec_from_file_location("ottermq_setup_under_test", root / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _copy_tree(dest: Path) -> Path:
    """The tracked files of this clone (what a fresh clone has), without build/."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(
        b"\0"
    )
    for name in filter(None, files):
        source = ROOT / name.decode()
        if source.is_file():
            (dest / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name.decode())
    return dest


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return _copy_tree(tmp_path / "clone")


def test_the_key_follows_what_the_libraries_depend_on(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = _setup_module(tree)._cache_key()
    assert key == _setup_module(tree)._cache_key()

    (tree / "README.md").write_text("not compiled\n")
    assert _setup_module(tree)._cache_key() == key

    queue = tree / "vhost" / "queue.py"
    queue.write_text(queue.read_text() + "\n# edited\n")
    edited = _setup_module(tree)._cache_key()
    assert edited != key

    native_py = tree / "amqp" / "native.py"
    native_py.write_text(native_py.read_text() + "\n# edited\n")
    assert _setup_module(tree)._cache_key() not in (key, edited)

    monkeypatch.setenv("CFLAGS", "-O0")
    assert _setup_module(tree)._cache_key() not in (key, edited)


def test_a_cache_folder_counts_only_when_whole(tmp_path: Path) -> None:
    from setuptools import Distribution

    setup_py = _setup_module(ROOT)
    folder = tmp_path / "key"
    folder.mkdir()
    build = setup_py.BuildHotPath(Distribution())
    assert build._from_cache(folder) == ([], "")  # no manifest
    (folder / setup_py.MANIFEST).write_text(json.dumps({"extensions": ["ottermq.amqp.reader"], "info": "I"}))
    assert build._from_cache(folder) == ([], "")  # a library missing
    (folder / "ottermq.amqp.reader").write_bytes(b"\x7fELF")
    extensions, info = build._from_cache(folder)
    assert [e.name for e in extensions] == ["ottermq.amqp.reader"] and info == "I"
    assert build.cached == folder
    (folder / setup_py.MANIFEST).write_text("{not json")
    assert setup_py.BuildHotPath(Distribution())._from_cache(folder) == ([], "")


def test_an_install_of_the_same_sources_copies_instead_of_compiling(tree: Path) -> None:
    setup_py = _setup_module(ROOT)
    kept = ROOT / "build" / "hot-path" / setup_py._cache_key()
    if not native.compiled():
        pytest.skip(f"this install is not compiled ({native.status()}): nothing was kept to copy")
    assert (kept / setup_py.MANIFEST).is_file(), (
        f"{native.status()}, but setup.py kept nothing in {kept}: run `make install` again"
    )
    shutil.copytree(kept, tree / "build" / "hot-path" / kept.name)
    env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    run = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert f"taken from build/hot-path/{kept.name}" in run.stderr, run.stderr
    assert "compiled 26 modules" not in run.stderr
    assert not (tree / "build" / "mypyc").exists()  # mypyc generated nothing
    manifest = json.loads((kept / setup_py.MANIFEST).read_text())
    for name in manifest["extensions"]:
        package, _, leaf = name.rpartition(".")
        folder = tree.joinpath(*setup_py._source_of(name).relative_to(ROOT).parts[:-1])
        assert list(folder.glob(f"{leaf}.*.so")) or list(folder.glob(f"{leaf}.*.pyd")), name
