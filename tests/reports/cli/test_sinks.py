"""``headlens sinks`` through click's CliRunner, on the planted model."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from headlens.reports.cli.main import cli
from tests.reports.api.conftest import session_models

SMALL = ["--n-prompts", "2", "--batch-size", "8", "--long-tokens", "32", "--attn-windows", "4,16", "--keep-first", "1", "-q"]


@pytest.fixture()
def planted_loaded(planted_checkpoint, planted_model):
    """``-m PLANTED`` gets the session's planted model (a load is half a second of CPU) in the tests
    that check what ``sinks`` prints, writes or refuses, not how it loads (the end-to-end test loads
    it for real; a missing folder is still loaded, and refused, for real)."""
    with session_models({str(planted_checkpoint): planted_model}):
        yield


@pytest.mark.all_figure_formats  # reads the SVG files (or the file list naming them)
def test_sinks_end_to_end(runner, planted_checkpoint, tmp_path):
    out = tmp_path / "sinks"
    res = runner.invoke(cli, ["sinks", "--model", str(planted_checkpoint), "--out", str(out), *SMALL])
    assert res.exit_code == 0, res.output
    assert "no BOS: sink rate 0.125 (uniform attention 0.000)" in res.output
    assert "sink heads: 0.1" in res.output
    tables = [
        "census",
        "sink_rates",
        "sink_rate_by_layer",
        "sink_targets",
        "sink_targets_by_layer",
        "secondary_positions",
        "secondary_tokens",
        "secondary_tokens_overall",
        "value_norm",
        "content",
        "content_verdicts",
        "removal",
        "windowed",
    ]
    figures = ["sink_alpha_heatmap", "sink_rate_by_layer", "value_norm_heatmap", "content_heatmap", "windowed_loss"]
    expected = {f"{t}.csv" for t in tables} | {f"{f}.{ext}" for f in figures for ext in ("png", "svg")} | {"summary.md", "manifest.json"}
    assert {p.name for p in out.iterdir()} == expected
    census = pd.read_csv(out / "census.csv")
    assert census[census["is_sink"]][["layer", "head"]].drop_duplicates().values.tolist() == [[0, 1]]
    windowed = pd.read_csv(out / "windowed.csv")
    assert sorted(set(windowed["keep_first"])) == [0, 1] and sorted(set(windowed["window"])) == [4, 16, 32]
    assert windowed["full_attention"].sum() == 2
    summary = (out / "summary.md").read_text()
    assert "Sink heads (no BOS, mean alpha > 0.3): 0.1" in summary and "| 0 | 1 | position |" in summary
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["sinks"]["eps"] == 0.3 and manifest["sinks"]["bos_settings"] == [False, True]
    assert manifest["prepend_bos"] is None and "census.csv" in manifest["sinks"]["files"]
    assert (out / "sink_alpha_heatmap.svg").read_text().lstrip().startswith("<?xml")


def test_sinks_text_prints_the_seed_measurement(runner, planted_checkpoint, tmp_path, planted_loaded):
    res = runner.invoke(cli, ["sinks", "-m", str(planted_checkpoint), "--text", "Apple raised its price target", "--top", "2"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("BOS: 6 tokens") and "1/6 = 16.7%" in lines[0]
    assert lines[2].split()[0] == "0.1" and lines[2].split()[1] == "100.0%"
    assert "... 6 more heads" in res.output and any(line.startswith("no BOS: 5 tokens") for line in lines)
    out = tmp_path / "seed"
    res = runner.invoke(
        cli, ["sinks", "-m", str(planted_checkpoint), "--text", "Apple raised its price target", "--no-bos", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out / "seed_text.csv")
    assert len(table) == 8 and (table.iloc[0]["layer"], table.iloc[0]["head"]) == (0, 1) and not table["bos"].any()
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "seed_text.csv"]


def test_sinks_bad_input_one_line_error_and_nothing_overwritten(runner, planted_checkpoint, tmp_path, planted_loaded):
    m = ["sinks", "--model", str(planted_checkpoint)]
    fresh = ["--out", str(tmp_path / "fresh")]
    cases = [
        ([*m, *fresh, "--eps", "1.5"], 2, "--eps must be strictly between 0 and 1"),
        ([*m, *fresh, "--eps", "0"], 2, "--eps must be strictly between 0 and 1"),
        ([*m, *fresh, "--eps", "-0.3"], 2, "--eps must be strictly between 0 and 1"),
        ([*m, *fresh, "--window", "1000"], 2, "larger than the model's context of 256"),
        ([*m, *fresh, "--attn-windows", "300"], 2, "larger than the context"),
        ([*m, *fresh, "--long-tokens", "512"], 2, "larger than the model's context"),
        ([*m, *fresh, "--keep-first", "-1"], 2, "--keep-first must hold non-negative numbers"),
        ([*m, *fresh, "--keep-first", "1,-4"], 2, "--keep-first must hold non-negative numbers"),
        ([*m, *fresh, "--keep-first", "one"], 2, "comma-separated whole numbers"),
        ([*m, *fresh, "--heads", "2.0"], 2, "layers 0..1"),
        ([*m, *fresh, "--n-prompts", "5000"], 2, "holds only"),
        ([*m, *fresh, "--skip", "everything"], 2, "cannot skip"),
        ([*m], 2, "give --out DIR"),
        ([*m, "--text", ""], 2, "--text is empty"),
        (["sinks", "--model", str(tmp_path / "missing"), *fresh], 3, "no such folder"),
    ]
    for args, code, needle in cases:
        res = runner.invoke(cli, args)
        assert res.exit_code == code, (args, res.output)
        lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("headlens: error:"), (args, res.output)
        assert needle in lines[0], (args, lines[0])
        assert "Traceback" not in res.output
        assert not (tmp_path / "fresh").exists(), args
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("precious")
    res = runner.invoke(cli, [*m, "--out", str(existing)])
    assert res.exit_code == 4 and "--overwrite" in res.output
    assert sorted(p.name for p in existing.iterdir()) == ["keep.txt"] and (existing / "keep.txt").read_text() == "precious"
