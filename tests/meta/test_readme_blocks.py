"""The README's Python code blocks run as written.

Every Python block of ``README.md`` is executed in order, in one namespace (a later block may use
what an earlier one made), in a temporary working folder, offline.  A block whose fence says
```` ```python skip="why" ```` is compiled but not run (``tests/meta/code_blocks.py``).  The pages of
the manual are run by ``tests/meta/test_docs_blocks.py`` the same way.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from tests.meta.code_blocks import python_blocks, run_blocks
from tests.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
#: The README is the front door: at most this many lines (the manual is docs/).
README_MAX_LINES = 250


def test_parser_finds_blocks_lines_and_skip_options() -> None:
    md = '# t\n\n```bash\nls\n```\n\n```python\nx = 1\n```\ntext\n```python skip="needs the Hugging Face Hub"\ny = 2\n```\n'
    blocks = python_blocks(md)
    assert [b.line for b in blocks] == [8, 12]
    assert [b.skip for b in blocks] == [None, "needs the Hugging Face Hub"]
    assert blocks[0].source == "x = 1\n"
    indented = python_blocks("- item:\n\n  ```py\n  if True:\n      z = 3\n  ```\n")
    assert [(b.line, b.source) for b in indented] == [(4, "if True:\n    z = 3\n")]


def test_parser_refuses_unknown_options_and_reasonless_skips() -> None:
    with pytest.raises(ValueError, match="unknown fence option skp"):
        python_blocks('```python skp="typo"\nx = 1\n```\n')
    with pytest.raises(ValueError, match="gives no reason"):
        python_blocks('```python skip=""\nx = 1\n```\n')


def test_a_failing_block_fails_with_its_file_and_line() -> None:
    blocks = python_blocks("```python\nx = 1\n```\n\n```python\nraise ValueError(x)\n```\n")
    with pytest.raises(ValueError) as caught:
        run_blocks(blocks, {})
    assert caught.traceback[-1].frame.code.raw.co_filename == "README.md, block at line 6"
    with pytest.raises(SyntaxError):  # a skipped block is still compiled
        run_blocks(python_blocks('```python skip="a GPU"\nx = (\n```\n'), {})


def test_readme_is_a_front_door() -> None:
    text = README.read_text(encoding="utf-8")
    n_lines = text.count("\n")
    assert n_lines <= README_MAX_LINES, f"README.md has {n_lines} lines; at most {README_MAX_LINES} (the manual is docs/)"
    blocks = python_blocks(text)
    assert blocks and all(b.skip is None for b in blocks), "the README's Python example must run as written"


@pytest.mark.slow
def test_readme_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict = {"__name__": "__readme__"}
    try:
        ran = run_blocks(blocks, namespace)
    finally:
        plt.close("all")
    assert ran, "the README has no Python block that runs offline"
