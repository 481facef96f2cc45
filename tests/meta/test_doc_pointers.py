"""Pointers from the code and the manual to a section of the documentation lead to a section that
exists: the README is a short front door, so nothing points into it by section, and a pointer
written ``(docs/methods.md, 'The referent rule')`` names a page holding that heading or bold lead."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Where user-facing text and the comments that cite the manual live.
SCANNED = ("reports", "analyses", "probes", "docs", "examples")
SUFFIXES = {".py", ".md", ".j2", ".html", ".ipynb", ".txt"}
#: A pointer into the README by section or by what it documents (it holds neither now).
README_POINTER = re.compile(r"README, ['\"]|README ['\"]|README's|see the README|(?:defined|documented|described) in the README", re.I)
#: ``docs/PAGE.md, 'Section'`` or ``docs/PAGE.md ("Section")``.
DOCS_POINTER = re.compile(r"docs/([\w/.-]+\.md),? \(?['\"]([^'\"]+)['\"]")


def _files() -> list[Path]:
    return [p for top in SCANNED for p in sorted((ROOT / top).rglob("*")) if p.suffix in SUFFIXES and p.is_file()]


def test_nothing_points_to_a_section_of_the_readme():
    hits = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p in _files() for m in README_POINTER.finditer(p.read_text(encoding="utf-8"))]
    assert not hits, "pointers into the README, whose sections moved to docs/: " + "; ".join(hits)


def test_every_pointer_to_a_docs_section_finds_it():
    found, broken = 0, []
    for p in _files():
        for m in DOCS_POINTER.finditer(p.read_text(encoding="utf-8")):
            page, section = ROOT / "docs" / m.group(1), m.group(2)
            found += 1
            text = page.read_text(encoding="utf-8") if page.is_file() else ""
            if not re.search(rf"^#+ {re.escape(section)}\s*$|\*\*{re.escape(section)}\b", text, re.M):
                broken.append(f"{p.relative_to(ROOT)} -> docs/{m.group(1)} {section!r}")
    assert found >= 3, f"only {found} pointers found: the pattern no longer matches how the code cites the manual"
    assert not broken, "pointers to sections that do not exist: " + "; ".join(broken)
