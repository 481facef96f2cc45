"""Every Python code block of the manual (``docs/**/*.md``) runs as written.

Each page's blocks run in order in one namespace, in a temporary working folder, offline, one test
per page (so the workers share them out).  A block whose fence says ```` ```python skip="why" ````
is compiled but not run; such blocks stay rare (a skip needs a reason, and this file caps how many
there are).  ``tests/meta/code_blocks.py`` holds the parser; the README's blocks are run by
``tests/meta/test_readme_blocks.py``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from headlens import Result
from tests.meta.code_blocks import markdown_blocks, run_blocks
from tests.paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
#: At most this many blocks of the manual may be skipped (each says why in its fence).
MAX_SKIPPED = 3


def test_the_manual_has_python_blocks_and_few_skips() -> None:
    blocks = [b for page in PAGES for b in markdown_blocks(page, REPO_ROOT)]
    skipped = [f"{b.filename}: {b.skip}" for b in blocks if b.skip is not None]
    assert len(blocks) >= 10, f"only {len(blocks)} Python blocks in docs/"
    assert len(skipped) <= MAX_SKIPPED, "too many skipped blocks:\n" + "\n".join(skipped)


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if markdown_blocks(p, REPO_ROOT)], ids=lambda p: str(p.relative_to(DOCS)))
def test_page_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = markdown_blocks(page, REPO_ROOT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict = {"__name__": "__docs__"}
    try:
        ran = run_blocks(blocks, namespace)
    finally:
        plt.close("all")
    assert ran or all(b.skip for b in blocks)
    undocumented_columns(namespace)


def undocumented_columns(namespace: dict) -> None:
    """Every result a page's examples made has the columns its page documents: the tables of its
    schema (``headlens.X.schema()``, which ``docs/hooks.py`` renders), same order and dtypes."""
    wrong = [f"{name}: {m}" for name, value in namespace.items() if isinstance(value, Result) for m in value.schema_mismatches()]
    assert not wrong, "results differ from the columns their pages document:\n" + "\n".join(wrong)
