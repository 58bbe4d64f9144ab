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
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import tomllib
import traceback
from pathlib import Path
from types import ModuleType

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


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


class BuildHotPath(build_ext):
    """``build_ext`` that generates the mypyc extensions on the fly and falls back to pure Python."""

    def run(self) -> None:
        self.extensions = []
        if not self.distribution.ext_modules:  # OTTERMQ_PURE_PYTHON at configuration time
            return
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
        _say(f"compiled {len(extensions) - 1} modules with mypyc")

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
                group_name="ottermq.amqp.hot_path",
            )
        finally:
            os.chdir(cwd)
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
placeholders = [] if native.pure_requested() else [Extension(m, sources=[]) for m in native.MODULES]
setup(ext_modules=placeholders, cmdclass={"build_ext": BuildHotPath})
