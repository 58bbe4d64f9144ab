""".env.example points people at the documentation: every page and section it names exists.

Its comments once sent readers to README sections that had moved to docs/ (issue 41); a reference is
either ``docs/PAGE.md`` or ``docs/PAGE.md#anchor`` (MkDocs' anchor of a heading on that page), or
``README "Section"`` naming a heading the README still has.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / ".env.example"
DOC_LINK = re.compile(r"docs/([\w.-]+\.md)(?:#([\w-]+))?")
README_SECTION = re.compile(r'README\s+(?:#\s+)?"([^"]+)"')


def slug(heading: str) -> str:
    """The anchor MkDocs' table of contents gives a heading (``toc``'s default ``slugify``)."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def headings(page: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in page.read_text().splitlines() if re.match(r"#{1,6} ", line)]


def comments() -> str:
    """The comment text of .env.example, a comment wrapped over lines joined into one."""
    lines = [line[1:].strip() for line in EXAMPLE.read_text().splitlines() if line.startswith("#")]
    return " ".join(lines)


def test_slug_is_mkdocs_anchor() -> None:
    assert slug("TLS (AMQPS, HTTPS)") == "tls-amqps-https"
    assert slug("Which limit killed it (schema 2)") == "which-limit-killed-it-schema-2"


def test_every_documentation_link_resolves() -> None:
    links = DOC_LINK.findall(comments())
    assert links, "no docs/ link found: the pattern is wrong"
    missing = []
    for page, anchor in links:
        path = ROOT / "docs" / page
        if not path.is_file():
            missing.append(f"docs/{page}")
        elif anchor and anchor not in {slug(h) for h in headings(path)}:
            missing.append(f"docs/{page}#{anchor}")
    assert missing == []


def test_every_readme_section_named_exists() -> None:
    readme = set(headings(ROOT / "README.md"))
    assert [name for name in README_SECTION.findall(comments()) if name not in readme] == []


def test_a_readme_section_that_moved_is_found() -> None:
    """The check itself: the reference the issue found is caught."""
    assert README_SECTION.findall('see README "Changing a password"') == ["Changing a password"]
    assert "Changing a password" not in set(headings(ROOT / "README.md"))
