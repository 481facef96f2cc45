"""The commodity parts of the CLI: the progress adapter, the Markdown table, the --heads type."""

from __future__ import annotations

import io

import click
import pandas as pd
import pytest

from headlens.reports.cli.common import HEADS
from headlens.reports.render.markdown import markdown_table
from headlens.reports.render.progress import ProgressBars, ReportBars


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    with ProgressBars("census", stream=out) as bars:
        for i in range(1, 21):
            bars("induction", i, 20)
        for i in range(1, 4):
            bars(i, 3)
        bars("single", 1, 1)  # one-step passes show nothing
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["census: induction: 2/20", "census: induction: 4/20"] and len(lines) == 10 + 3
    assert lines[-1] == "census: 3/3" and "\r" not in out.getvalue()


def test_quiet_is_silent_and_tty_draws_a_bar():
    out = io.StringIO()
    with ReportBars(stream=out, quiet=True) as bars:
        bars.message("stage 1/6 census: running")
        bars.step("census", "prompts", 2, 2)
    assert out.getvalue() == ""
    with ProgressBars("x", stream=out, tty=True) as bars:
        for i in range(1, 6):
            bars("a", i, 5)
        bars.write("hello")
    text = out.getvalue()
    assert "x: a: 100%" in text and "5/5" in text and "hello\n" in text


def test_markdown_table_escapes_cells():
    df = pd.DataFrame({"head": ["0.1", "a|b"], "token": ["x\ny", "z"], "alpha": [0.12345, 1.0]})
    assert markdown_table(df).splitlines() == [
        "| head | token | alpha |",
        "|---|---|---|",
        "| 0.1 | x\\ny | 0.123 |",
        "| a\\|b | z | 1.000 |",
    ]
    assert markdown_table([["**1**", ""]], ["", ""], escape=False) == "| | |\n|---|---|\n| **1** | |"
    with pytest.raises(ValueError):
        markdown_table([[1]], ["a", "b"])


def test_heads_type():
    assert HEADS.convert("5.1, 5.5", None, None) == ((5, 1), (5, 5))
    for bad in ("zero", "5.1,,2", "5", "-1.2"):
        with pytest.raises(click.BadParameter, match=r"LAYER\.HEAD"):
            HEADS.convert(bad, None, None)
