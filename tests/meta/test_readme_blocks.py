"""The README's Python code blocks run as written.

Every ```` ```python ```` block of ``README.md`` is executed in order, in one namespace (a later
block may use what an earlier one made), in a temporary working folder, offline.  A block that
cannot run here (it needs the Hugging Face Hub, a GPU or a checkpoint folder of your own) starts
with a comment line ``# needs: <what>``: it is compiled (so it cannot rot into a syntax error)
but not run.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
README = ROOT / "README.md"
#: The first line of a block that the test compiles but does not run, e.g. ``# needs: the Hugging Face Hub``.
NEEDS_MARK = "# needs:"
#: A Python fence (```` ```python ````, ```` ```py ````, ```` ```python3 ````), also indented (in a list item).
FENCE = re.compile(r"^([ \t]*)```(?:python3?|py)[ \t]*\n(.*?)^\1```[ \t]*$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the block's first code line in the Markdown file
    source: str
    needs: str | None  # what a block marked with NEEDS_MARK needs; None: it runs

    @property
    def filename(self) -> str:
        return f"README.md, block at line {self.line}"


def python_blocks(markdown: str) -> list[Block]:
    """The ```` ```python ```` blocks of ``markdown``, in order."""
    blocks = []
    for m in FENCE.finditer(markdown):
        source = textwrap.dedent(m.group(2))
        first = source.lstrip("\n").split("\n", 1)[0].strip()
        needs = (first[len(NEEDS_MARK) :].strip() or "unspecified") if first.startswith(NEEDS_MARK) else None
        blocks.append(Block(line=markdown.count("\n", 0, m.start(2)) + 1, source=source, needs=needs))
    return blocks


def run_blocks(blocks: list[Block], namespace: dict) -> list[Block]:
    """Compile every block and run those without ``# needs:``, in order, in ``namespace``; return the ones run."""
    ran = []
    for block in blocks:
        code = compile(block.source, block.filename, "exec")
        if block.needs is None:
            exec(code, namespace)  # running the README's own code is the point of this test
            ran.append(block)
    return ran


def test_parser_finds_blocks_lines_and_marks() -> None:
    md = "# t\n\n```bash\nls\n```\n\n```python\nx = 1\n```\ntext\n```python\n# needs: the Hugging Face Hub\ny = 2\n```\n"
    blocks = python_blocks(md)
    assert [b.line for b in blocks] == [8, 12]
    assert [b.needs for b in blocks] == [None, "the Hugging Face Hub"]
    assert blocks[0].source == "x = 1\n"
    indented = python_blocks("- item:\n\n  ```py\n  if True:\n      z = 3\n  ```\n")
    assert [(b.line, b.source) for b in indented] == [(4, "if True:\n    z = 3\n")]


def test_a_failing_block_fails_with_its_readme_line() -> None:
    blocks = python_blocks("```python\nx = 1\n```\n\n```python\nraise ValueError(x)\n```\n")
    with pytest.raises(ValueError) as caught:
        run_blocks(blocks, {})
    assert caught.traceback[-1].frame.code.raw.co_filename == "README.md, block at line 6"
    with pytest.raises(SyntaxError):  # a marked block is still compiled
        run_blocks(python_blocks("```python\n# needs: a GPU\nx = (\n```\n"), {})


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
