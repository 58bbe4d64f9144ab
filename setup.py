"""Build ottermq; compile the message hot path with mypyc when it can, else install it as pure Python.

Everything but the extension modules is in pyproject.toml. The modules to compile are
``ottermq.amqp.native.MODULES`` (amqp/native.py, loaded from its file). They are compiled when

- ``OTTERMQ_PURE_PYTHON`` is not set (``OTTERMQ_PURE_PYTHON=1 pip install .`` builds pure Python),
- mypyc (the build requirement ``mypy``) turns them into C, and
- a C compiler and the Python headers (Debian: gcc, python3-dev) build that C.

When the C cannot be generated or compiled the build says why on stderr and goes on with the pure
modules (``CC=/bin/false pip install .`` installs a working broker); it never installs some of the
modules compiled and others not. The C is generated in ``build_ext``, not when this file is loaded:
pip loads it several times per install.

The sources are compiled from a link tree ``build/mypyc/src/ottermq/<package>`` (the package-dir
mapping of pyproject.toml: ``amqp/reader.py`` is ``ottermq.amqp.reader``), so mypyc names the
modules as they are installed. Next to the modules, ``ottermq/amqp/_build_info.py`` records the
SHA-256 of every compiled source: ``ottermq.amqp.native`` runs the sources instead of stale
compiled modules when an editable install's ``.py`` was edited after the build.

One compile per clone: the built libraries are kept in ``build/hot-path/<key>/``, the key being a hash of
what the C depends on (the sources, this file, amqp/native.py, mypy's version, the interpreter and the
compiler settings). Every later install of the same sources (``make run``, ``make analytics``, ``make
install``, ``pip install -e '.[postgresql]'``, in any order) copies them instead of compiling again;
``make clean`` (or removing ``build/``) drops them. mypyc writes one C file per module (``multi_file``),
and they are compiled in parallel, one compiler per CPU.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import sysconfig
import tomllib
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
CACHE = HERE / "build" / "hot-path"
MANIFEST = "manifest.json"
GROUP = "ottermq.amqp.hot_path"
COMPILER_ENV = ("CC", "CFLAGS", "CPPFLAGS", "LDFLAGS", "LDSHARED")


def _load_native() -> ModuleType:
    """amqp/native.py, loaded from its file (it imports the standard library only; the package itself
    is not importable while it is being built): its ``MODULES``, ``BUILD_INFO`` and
    ``pure_requested`` are what the broker reads at run time too."""
    spec = importlib.util.spec_from_file_location("_ottermq_native", HERE / "amqp" / "native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


native = _load_native()


def _package_dirs() -> dict[str, str]:
    with open(HERE / "pyproject.toml", "rb") as f:
        mapping: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return mapping


def _source_of(module: str) -> Path:
    """``ottermq.broker.server.channel`` -> ``broker/server/channel.py`` (through package-dir)."""
    package, _, leaf = module.rpartition(".")
    for prefix, folder in sorted(_package_dirs().items(), key=lambda item: -len(item[0])):
        if package == prefix or package.startswith(prefix + "."):
            rest = package[len(prefix) :].lstrip(".").split(".") if package != prefix else []
            return HERE.joinpath(folder, *rest, f"{leaf}.py")
    raise RuntimeError(f"{module} is in no package of pyproject.toml's package-dir")


def _say(message: str) -> None:
    print(f"ottermq build: {message}", file=sys.stderr, flush=True)


def _cache_key() -> str:
    """A hash of everything the compiled libraries depend on: equal keys, equal libraries."""
    try:
        mypy_version = importlib.metadata.version("mypy")
    except importlib.metadata.PackageNotFoundError:
        mypy_version = "none"
    digest = hashlib.sha256()
    parts = [
        mypy_version,
        sys.version,
        sysconfig.get_platform(),
        str(sysconfig.get_config_var("EXT_SUFFIX")),
        *(f"{name}={os.environ.get(name, '')}" for name in COMPILER_ENV),
        (HERE / "setup.py").read_text(encoding="utf-8"),
        (HERE / "amqp" / "native.py").read_text(encoding="utf-8"),
        *(f"{m}:{_source_of(m).read_text(encoding='utf-8')}" for m in native.MODULES),
    ]
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def _parallel(compile_one: Callable[..., list[str]], jobs: int) -> Callable[..., list[str]]:
    """A compiler's ``compile`` that runs one compiler per source file, ``jobs`` at a time (the compilers
    are processes: threads only wait for them). The object files come back in the sources' order."""

    def compile_all(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
        if len(sources) < 2 or jobs < 2:
            return compile_one(sources, *args, **kwargs)
        largest_first = sorted(sources, key=lambda s: -os.path.getsize(s) if os.path.exists(s) else 0)
        with ThreadPoolExecutor(jobs) as pool:
            done = {s: pool.submit(compile_one, [s], *args, **kwargs) for s in largest_first}
            return [obj for s in sources for obj in done[s].result()]

    return compile_all


class BuildHotPath(build_ext):
    """``build_ext`` that generates the mypyc extensions on the fly and falls back to pure Python."""

    cached: Path | None = None
    """The cache folder the libraries are copied from, or None when they are compiled."""

    def run(self) -> None:
        self.extensions = []
        if not self.distribution.ext_modules:  # OTTERMQ_PURE_PYTHON at configuration time
            return
        key = _cache_key()
        extensions, info = self._from_cache(CACHE / key)
        if not extensions:
            try:
                extensions, info = self._generate()
            except Exception:  # mypy missing or failing: the pure modules still work
                _say("mypyc could not generate C, installing the pure-Python hot path:")
                traceback.print_exc(file=sys.stderr)
                return
        self.extensions = extensions
        self.check_extensions_list(self.extensions)
        for ext in extensions:  # what setuptools' finalize_options sets on the extensions it was given
            ext._full_name = self.get_ext_fullname(ext.name)  # type: ignore[attr-defined]
            ext._links_to_dynamic = ext._needs_stub = False  # type: ignore[attr-defined]
            ext._file_name = self.get_ext_filename(ext._full_name)  # type: ignore[attr-defined]
            self.ext_map[ext._full_name] = ext  # type: ignore[attr-defined]
        try:
            super().run()
        except Exception as exc:  # no compiler, no Python.h, ...: CompileError, LinkError, ...
            _say(f"cannot compile the hot path ({type(exc).__name__}: {exc}); installing it in pure Python")
            self._remove_outputs()
            self.extensions = []
            return
        self._write_info(info)
        if self.cached is not None:
            where = self.cached.relative_to(HERE)
            _say(f"the hot path's {len(extensions) - 1} compiled modules taken from {where}")
        else:
            self._keep(CACHE / key, info)
            _say(f"compiled {len(extensions) - 1} modules with mypyc")

    def _from_cache(self, folder: Path) -> tuple[list[Extension], str]:
        """The extensions of an earlier build of the same sources (built by copying), or none."""
        try:
            manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
            names: list[str] = manifest["extensions"]
            info: str = manifest["info"]
        except (OSError, ValueError, KeyError, TypeError):
            return [], ""
        if not all((folder / name).is_file() for name in names):
            return [], ""
        self.cached = folder
        return [Extension(name, sources=[]) for name in names], info

    def _keep(self, folder: Path, info: str) -> None:
        """Copy the libraries just built to the cache; the manifest, written last, makes it whole."""
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for ext in self.extensions:
                shutil.copy2(self.get_ext_fullpath(ext.name), folder / ext.name)
            manifest = {"extensions": [ext.name for ext in self.extensions], "info": info}
            (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
        except OSError as exc:  # a read-only tree: the next install compiles again
            _say(f"cannot keep the compiled hot path in {folder} ({exc})")

    def build_extension(self, ext: Extension) -> None:
        target = Path(self.get_ext_fullpath(ext.name))
        if self.cached is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.cached / ext.name, target)
            return
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        compile_one = self.compiler.compile
        self.compiler.compile = _parallel(compile_one, jobs)  # type: ignore[method-assign]
        try:
            super().build_extension(ext)
        finally:
            self.compiler.compile = compile_one  # type: ignore[method-assign]

    def _generate(self) -> tuple[list[Extension], str]:
        from mypyc.build import mypycify

        modules = native.MODULES
        work = HERE / "build" / "mypyc"
        src = work / "src" / "ottermq"
        if src.exists():
            shutil.rmtree(src)
        src.mkdir(parents=True)
        for package, folder in _package_dirs().items():
            top = package.split(".")
            if len(top) == 2:  # ottermq.<part> -> <part>/
                (src / top[1]).symlink_to(HERE / folder, target_is_directory=True)
        paths = [str(Path(*m.split(".")).with_suffix(".py")) for m in modules]
        digests = {m: hashlib.sha256(_source_of(m).read_bytes()).hexdigest() for m in modules}
        info = "".join(
            [
                '"""Written by setup.py: the SHA-256 of each source compiled by mypyc."""\n\n',
                "SOURCES = {\n",
                *(f"    {m!r}: {d!r},\n" for m, d in digests.items()),
                "}\n",
            ]
        )
        cwd = os.getcwd()
        os.chdir(work / "src")  # module names from the paths: ottermq/amqp/reader.py
        try:
            extensions: list[Extension] = mypycify(
                [
                    "--explicit-package-bases",
                    "--ignore-missing-imports",  # pamqp & co. are not in the build environment
                    "--config-file=",
                    f"--cache-dir={work / 'mypy_cache'}",
                    *paths,
                ],
                target_dir=str(work / "c"),
                # the shared library of all the modules, inside a package (ottermq/amqp/hot_path__mypyc*.so)
                # so that every kind of install finds it, editable ones included
                group_name=GROUP,
                # one C file per module, compiled in parallel (build_extension)
                multi_file=True,
            )
        finally:
            os.chdir(cwd)
        # mypyc writes the group's headers beside its name (ottermq/amqp/__native_hot_path.h) and the
        # modules' C files at the top, which include them by their bare names
        headers = work / "c" / Path(*GROUP.split(".")[:-1])
        for ext in extensions:
            ext.include_dirs.append(str(headers))
        return extensions, info

    def _info_files(self) -> list[Path]:
        build_py = self.get_finalized_command("build_py")
        parts = native.BUILD_INFO.split(".")
        files = [Path(self.build_lib, *parts).with_suffix(".py")]
        if self.inplace:
            files.append(Path(build_py.get_package_dir(".".join(parts[:-1])), parts[-1] + ".py"))
        return files

    def _write_info(self, info: str) -> None:
        for path in self._info_files():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(info, encoding="utf-8")

    def _remove_outputs(self) -> None:
        """Leave no compiled module behind: a module without its shared library cannot be imported."""
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            inplace, regular = self._get_inplace_equivalent(build_py, ext)
            for path in (inplace, regular) if self.inplace else (regular,):  # not an editable install's
                Path(path).unlink(missing_ok=True)
        for path in self._info_files():
            path.unlink(missing_ok=True)

    def get_outputs(self) -> list[str]:
        outputs = super().get_outputs()
        if self.extensions and not self.inplace:
            outputs.append(str(self._info_files()[0]))
        return outputs

    def get_output_mapping(self) -> dict[str, str]:
        mapping = super().get_output_mapping()
        if self.extensions and self.inplace:
            regular, inplace = self._info_files()
            mapping[str(regular)] = str(inplace)
        return mapping


# Placeholders with the modules' names: they make the wheel platform-specific; BuildHotPath.run
# replaces them with mypyc's extensions (or none).
# (setuptools runs this file as __main__; tests import it for its functions.)
if __name__ == "__main__":
    placeholders = [] if native.pure_requested() else [Extension(m, sources=[]) for m in native.MODULES]
    setup(ext_modules=placeholders, cmdclass={"build_ext": BuildHotPath})
