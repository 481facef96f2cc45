"""Every Python code block of the manual (``docs/**/*.md``) runs as written.

Each page's blocks run in order in one namespace, in a temporary working folder, offline, one test
per page (so the workers share them out).  A block whose fence says ```` ```python skip="why" ````
is compiled but not run; such blocks stay rare (a skip needs a reason, and this file caps how many
there are).  ``tests/meta/code_blocks.py`` holds the parser; the README's blocks are run by
``tests/meta/test_readme_blocks.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from headlens import Result
from tests.meta.code_blocks import markdown_blocks, run_blocks
from tests.paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"
#: The column tables of the study pages (``docs/gen_columns.py`` writes it, ``docs/hooks.py`` renders it).
COLUMNS = json.loads((DOCS / "columns.json").read_text(encoding="utf-8"))
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
    """Every column of every table a page's results hold, for the tables the pages document, is in
    ``docs/columns.json`` with the same dtype (a column added, renamed or retyped fails here)."""
    wrong = []
    for value in namespace.values():
        if not isinstance(value, Result):
            continue
        for spec, documented in COLUMNS.items():
            cls, table = spec.split(".")
            frame = getattr(value, table, None) if type(value).__name__ == cls else None
            if frame is None:
                continue
            dtypes = dict(documented)
            wrong += [f"{spec}.{name}: {dtype}" for name, dtype in frame.dtypes.astype(str).items() if dtypes.get(str(name)) != dtype]
    assert not wrong, "columns not in docs/columns.json as produced (run `python docs/gen_columns.py`): " + ", ".join(wrong)


def test_a_changed_column_is_caught() -> None:
    import pandas as pd

    class FakeResult(Result):
        pass

    spec = next(iter(COLUMNS))
    cls, table = spec.split(".")
    documented = pd.DataFrame({name: pd.Series(dtype="float64") for name, _ in COLUMNS[spec]})
    fake = type(cls, (FakeResult,), {table: documented.assign(renamed=1.0)})
    with pytest.raises(AssertionError, match="renamed"):
        undocumented_columns({"x": fake.__new__(fake)})
