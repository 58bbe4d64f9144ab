"""Docs that cannot drift from the code: every repository path a docs page, the README, the Makefile or a
docstring or comment of the broker's packages names exists, every module a docstring names by file name
exists somewhere in the tree, and every ``make`` target the docs name is in the Makefile.

What counts as a name:
- a path starting with one of the repository's folders (``broker/node/wiring.py``, ``e2e/test_ttl.py``,
  ``docs/policies.md``; a folder or a module without ``.py``, as the architecture diagram writes them);
- in Python docstrings and comments and the Makefile's comments, a bare ``name.py`` or ``name.md``
  (``queue.py``): some file of the tree has that name;
- in the Makefile, the files its ``$(addprefix ...)`` lists name (the CI passes' test files);
- a ``make <target>`` in backquotes, or at the start of a line of a code block.

``NOT_IN_TREE`` lists the few names that are not files of this tree on purpose (built or written by a
command, or another project's file cited as a model), each with its reason.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FOLDERS = (
    "broker",
    "amqp",
    "vhost",
    "ttl",
    "dlx",
    "persistence",
    "spark_jobs",
    "e2e",
    "tests",
    "benchmarks",
    "docs",
    ".ci",
)
PACKAGES = ("broker", "amqp", "vhost", "ttl", "dlx", "persistence", "spark_jobs")
SKIP = {".venv", "build", "node_modules", ".git", "site", "data", "__pycache__"}

NOT_IN_TREE = {
    "benchmarks/cgen/ottermq-cgen": "built by `make bench` (go build)",
    "amqp/_build_info.py": "written by pip install beside the compiled modules (setup.py)",
    "report.md": "written by the Spark report and the chaos harness",
    "flow_control.py": "uvicorn's, the model of broker/server/flow.py",
    "_state.py": "h11's, the model of broker/server/states.py",
    "_events.py": "h11's, the model of broker/workers/messages.py",
    "amqp/ssl": "a protocol pair (amqp and amqp/ssl listeners), not a path",
    "vhost/name": "a resource pair in prose, not a path",
}

_PATH = re.compile(
    r"(?<![\w./-])((?:" + "|".join(re.escape(f) for f in FOLDERS) + r")(?:/[\w.-]+)+)(?![\w*,{$(])"
)
_BARE = re.compile(r"(?<![\w./-])([A-Za-z_][\w-]*\.(?:py|md))(?![\w/])")
_MAKE = re.compile(r"`make ([a-z][\w-]*)|^\s*(?:\$ )?make ([a-z][\w-]*)", re.M)
_ADDPREFIX = re.compile(r"\$\(addprefix ([^,()]+),([^()]*)\)")


def tree() -> set[Path]:
    found = set()
    for path in ROOT.rglob("*"):
        relative = path.relative_to(ROOT)
        if not SKIP.intersection(relative.parts) and path.is_file():
            found.add(relative)
    return found


def _docstrings_and_comments(source: str) -> str:
    parts = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT or (
            tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU").startswith(('"""', "'''"))
        ):
            parts.append(tok.string)
    return "\n".join(parts)


def texts(files: set[Path]) -> Iterator[tuple[Path, str, bool]]:
    """(file, the text to read, whether it is Python)."""
    for relative in sorted(files):
        if relative.suffix == ".md" or relative.name == "Makefile":
            yield relative, (ROOT / relative).read_text(encoding="utf-8"), False
        elif relative.suffix == ".py" and relative.parts[0] in PACKAGES:
            yield relative, _docstrings_and_comments((ROOT / relative).read_text(encoding="utf-8")), True


def _exists(path: str) -> bool:
    return (ROOT / path).exists() or (ROOT / f"{path}.py").exists()


def stale_names() -> list[str]:
    files = tree()
    names = {p.name for p in files}
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))
    stale = []
    for relative, text, python in texts(files):
        for match in _PATH.finditer(text):
            path = match.group(1).rstrip(".,:;")
            if "*" not in path and path not in NOT_IN_TREE and not _exists(path):
                stale.append(f"{relative}: {path}")
        if python or relative.name == "Makefile":
            comments = (
                text if python else "\n".join(x for x in text.splitlines() if x.lstrip().startswith("#"))
            )
            for match in _BARE.finditer(comments):
                name = match.group(1)
                if name not in names and name not in NOT_IN_TREE:
                    stale.append(f"{relative}: {name}")
        if relative.name == "Makefile":
            for prefix, words in _ADDPREFIX.findall(text.replace("\\\n", " ")):
                prefix = prefix.strip().removeprefix("--ignore=")
                stale += [f"Makefile: {prefix}{w}" for w in words.split() if not _exists(prefix + w)]
        for match in _MAKE.finditer(text):
            target = match.group(1) or match.group(2)
            if target not in targets:
                stale.append(f"{relative}: make {target}")
    return stale


def test_every_named_path_and_target_exists() -> None:
    assert stale_names() == []


def test_the_check_sees_a_stale_name(tmp_path: Path) -> None:
    text = "see ``broker/wiring.py`` and ``gone.py``; run `make nothing-here`"
    assert _PATH.search(text) and not _exists("broker/wiring.py")
    assert _BARE.findall(text) == ["gone.py"]
    assert [m.group(1) for m in _MAKE.finditer(text)] == ["nothing-here"]
    assert _ADDPREFIX.findall("$(addprefix e2e/test_,ttl.py nope.py)") == [("e2e/test_", "ttl.py nope.py")]
