"""``headlens ioi`` and ``headlens.ioi``: every class printed, files and load, wide intervals called rough."""

from __future__ import annotations

from dataclasses import replace

import headlens
from headlens.analyses.patching.ioi import CLASSES
from headlens.reports.api.ioi import LABELS
from headlens.reports.cli.main import cli
from tests.reports.api.conftest import session_models


def test_the_command_prints_every_class(tiny_checkpoint, tiny_model, tmp_path, runner):
    out = tmp_path / "ioi"
    with session_models({str(tiny_checkpoint): tiny_model}):
        res = runner.invoke(cli, ["ioi", "-m", str(tiny_checkpoint), "--n-pairs", "4", "--n-resamples", "20", "-q", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("IOI on 4 pairs")
    for cls in CLASSES:
        assert f"\n{LABELS[cls]} (" in res.output
    assert "intervals from n=4 pairs" in res.output  # the small-sample note (stderr is mixed in)
    back = headlens.load(out)
    assert isinstance(back, headlens.IOIResult) and back.run.classes is back.classes  # the run rebuilt from the files
    lines = [line for line in res.output.splitlines() if not line.startswith(("headlens", "note", "  warning"))]
    assert all(line in lines for line in back.findings().lines)  # the loaded result states what the command printed
    assert list(back.classes["class"]) == list(CLASSES) and back.classes["reason"].str.len().gt(0).any()
    assert (out / "heads.csv").is_file() and (out / "classes.csv").is_file() and (out / "ioi_heads.png").is_file()


def test_wide_intervals_are_called_rough(tiny_model):
    result = headlens.ioi(tiny_model, n_pairs=4, n_resamples=20)
    heads = result.heads.copy()
    heads.loc[0, ["attn_io", "attn_io_low", "attn_io_high", "copying", "copying_low", "copying_high"]] = [0.5, 0.1, 0.9, 0.9, 0.8, 1.0]
    heads.loc[0, ["direct", "direct_low", "direct_high"]] = [0.1, 0.01, 0.5]
    classes = result.classes.copy()
    classes.loc[classes["class"] == "name mover", ["heads", "n_heads", "reason"]] = [heads.loc[0, "name"], 1, ""]
    edited = headlens.IOIResult(run=replace(result.run, heads=heads, classes=classes), manifest=result.manifest)
    notes = edited.findings().warnings
    assert any(n.startswith("name mover: direct interval wider than the value itself for 0.0") for n in notes)
    assert not any(n.startswith("name mover: copying") for n in notes)
    lines = edited.findings().lines
    assert any(line.startswith("  0.0  END->IO 0.50 [0.10, 0.90], copying 0.90 [0.80, 1.00], direct +0.10") for line in lines)
