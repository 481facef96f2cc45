"""The Python code blocks of a Markdown file, and how the docs' tests run them.

A block is a ```` ```python ```` fence (also ```` ```py ````, ```` ```python3 ````, indented in a list
item). Its fence may carry options after the language, ```` ```python skip="why" ````: a block
marked ``skip`` is compiled (so it cannot rot into a syntax error) but not run, and ``why`` must
say what it needs (the Hugging Face Hub, a GPU, a checkpoint of your own, minutes of work).
The mkdocs hook (``docs/hooks.py``) drops the options before rendering; GitHub shows them as a
Python block. The blocks of one file run in order in one namespace, so a later block may use what
an earlier one made.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

#: A Python fence with optional key="value" options, and its body up to the closing fence at the same indent.
FENCE = re.compile(r'^([ \t]*)```(?:python3?|py)((?:[ \t]+[\w-]+="[^"]*")*)[ \t]*\n(.*?)^\1```[ \t]*$', re.MULTILINE | re.DOTALL)
#: Fence options a block may carry (anything else is a typo that would silently run the block).
KNOWN_OPTIONS = {"skip"}


@dataclass(frozen=True)
class Block:
    file: str  # the Markdown file's name, as a traceback shows it
    line: int  # 1-based line of the block's first code line
    source: str
    skip: str | None  # why the block is not run; None: it runs

    @property
    def filename(self) -> str:
        return f"{self.file}, block at line {self.line}"


def python_blocks(markdown: str, file: str = "README.md") -> list[Block]:
    """The Python blocks of ``markdown``, in order; a fence option other than ``skip`` is an error."""
    blocks = []
    for m in FENCE.finditer(markdown):
        options = dict(item.split("=", 1) for item in shlex.split(m.group(2)))
        line = markdown.count("\n", 0, m.start(3)) + 1
        unknown = set(options) - KNOWN_OPTIONS
        if unknown:
            raise ValueError(f"{file}:{line - 1}: unknown fence option {', '.join(sorted(unknown))} (known: {', '.join(KNOWN_OPTIONS)})")
        if "skip" in options and not options["skip"].strip():
            raise ValueError(f'{file}:{line - 1}: skip="" gives no reason')
        blocks.append(Block(file=file, line=line, source=textwrap.dedent(m.group(3)), skip=options.get("skip")))
    return blocks


def run_blocks(blocks: list[Block], namespace: dict) -> list[Block]:
    """Compile every block and run those not marked ``skip``, in order, in ``namespace``; return the ones run."""
    ran = []
    for block in blocks:
        code = compile(block.source, block.filename, "exec")
        if block.skip is None:
            exec(code, namespace)  # running the documentation's own code is the point of these tests
            ran.append(block)
    return ran


def markdown_blocks(path: Path, root: Path) -> list[Block]:
    return python_blocks(path.read_text(encoding="utf-8"), str(path.relative_to(root)))
