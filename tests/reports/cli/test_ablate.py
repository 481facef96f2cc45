"""``headlens ablate`` through click's CliRunner: outputs, formats, masks, bad input."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from headlens.analyses.measure.masks import HeadMask
from headlens.probes.outputs import write_json
from headlens.reports.cli.main import cli
from tests.reports.api.conftest import session_models

SMALL = ["--n-windows", "3", "--window", "24"]


@pytest.fixture()
def tiny_loaded(tiny_checkpoint, tiny_model):
    """``-m TINY`` gets the session's tiny model (a load is half a second of CPU): for the tests
    that check what ``ablate`` writes and refuses, not how it loads (the first test loads it for
    real; a missing folder is still loaded, and refused, for real)."""
    with session_models({str(tiny_checkpoint): tiny_model}):
        yield


@pytest.mark.all_figure_formats  # reads the SVG files (or the file list naming them)
def test_ablate_writes_table_manifest_heatmap(runner, tiny_checkpoint, tmp_path):
    out = tmp_path / "abl.csv"
    res = runner.invoke(
        cli, ["ablate", "-m", str(tiny_checkpoint), *SMALL, "--method", "mean", "--heads", "1.2,0.1,1.0", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out)
    assert list(table.columns) == ["layer", "head", "name", "method", "metric", "value", "delta", "ci_low", "ci_high", "n", "attribution"]
    assert list(pd.read_csv(out, dtype={"name": str})["name"]) == ["0.1", "1.0", "1.2"]  # as the census's and patching's tables
    assert list(zip(table["layer"], table["head"], strict=True)) == [(0, 1), (1, 0), (1, 2)]
    assert set(table["method"]) == {"mean"} and set(table["metric"]) == {"loss"} and set(table["n"]) == {3}
    manifest = json.loads((tmp_path / "abl.manifest.json").read_text())
    abl = manifest["ablation"]
    assert abl["unablated_value"] == pytest.approx(table["value"].iloc[0] - table["delta"].iloc[0], abs=1e-9)
    assert abl["data"]["kind"] == "text" and abl["data"]["window"] == 24 and manifest["prepend_bos"] is True
    assert manifest["config"]["ablation"]["method"] == "mean" and manifest["seed"] == 0
    assert -1 <= abl["spearman_attribution_vs_exact"] <= 1 and "Spearman" in res.output
    # the rank correlation of 3 heads comes with its exact permutation p-value (at least 1/3 with 3 heads: no finding)
    assert 1 / 3 - 1e-12 <= abl["spearman_p_attribution_vs_exact"] <= 1
    assert "permutation p = " in res.output and "not distinguishable from no association" in res.output
    for name in ("abl.heatmap.png", "abl.heatmap.svg"):
        assert (tmp_path / name).stat().st_size > 1000
    assert not (tmp_path / "abl.csv.journal.jsonl").exists()
    assert "unablated loss" in res.output


def test_ablate_formats_task_metric_and_mask(runner, tiny_checkpoint, tmp_path, tiny_loaded):
    task = tmp_path / "ioi.jsonl"
    task.write_text(
        "\n".join(
            json.dumps(d)
            for d in (
                {"prompt": "When Mary and John went to the store, John gave a drink to", "correct": " Mary", "incorrect": " John"},
                {"prompt": "When Sarah and David went to the park, David gave a ball to", "correct": " Sarah", "incorrect": " David"},
            )
        )
        + "\n"
    )
    mask = tmp_path / "mask.json"
    write_json(mask, HeadMask.from_heads([(0, 0), (1, 3)], n_layers=2, n_heads=4).to_json())
    out = tmp_path / "t.json"
    res = runner.invoke(
        cli,
        [
            "ablate",
            "-m",
            str(tiny_checkpoint),
            "--task",
            str(task),
            "--mask",
            str(mask),
            "--method",
            "resample",
            "--no-attribution",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())
    assert len(rows) == 6 and {(r["layer"], r["head"]) for r in rows}.isdisjoint({(0, 0), (1, 3)})
    assert rows[0]["metric"] == "logit-diff" and rows[0]["n"] == 2
    abl = json.loads((tmp_path / "t.manifest.json").read_text())["ablation"]
    assert abl["mask"]["removed"] == ["0.0", "1.3"] and abl["baseline_value"] != abl["unablated_value"]
    assert abl["spearman_attribution_vs_exact"] is None and abl["spearman_p_attribution_vs_exact"] is None
    out_pq = tmp_path / "p.parquet"
    res = runner.invoke(cli, ["ablate", "-m", str(tiny_checkpoint), *SMALL, "--heads", "0.0", "--no-attribution", "--out", str(out_pq)])
    assert res.exit_code == 0, res.output
    assert pd.read_parquet(out_pq).shape == (1, 11)  # name among the columns


def _bad_cases(ckpt, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    short = tmp_path / "short.txt"
    short.write_text("Just a few words here.")
    multi = tmp_path / "multi.jsonl"
    multi.write_text(json.dumps({"prompt": "The capital of France is", "correct": " Paris, France", "incorrect": " Rome"}) + "\n")
    nofield = tmp_path / "nofield.jsonl"
    nofield.write_text(json.dumps({"prompt": "x", "correct": " a"}) + "\n")
    ghost = tmp_path / "ghost.json"
    ghost.write_text(json.dumps({"format": "headlens.head_mask", "version": 1, "n_layers": 2, "n_heads": 4, "removed": ["0.1", "7.2"]}))
    notmask = tmp_path / "notmask.json"
    notmask.write_text("[1, 2]")
    m = ["ablate", "-m", str(ckpt), *SMALL]
    return [
        ([*m, "--method", "gaussian"], 2, "--method"),
        ([*m, "--metric", "accuracy"], 2, "--metric"),
        ([*m, "--text-file", str(empty)], 2, "is empty"),
        ([*m, "--text-file", str(short)], 2, "tokens"),
        ([*m, "--text-file", str(tmp_path / "missing.txt")], 2, "does not exist"),
        ([*m, "--task", str(multi)], 2, "not one"),
        ([*m, "--task", str(nofield)], 2, '"incorrect"'),
        ([*m, "--metric", "logit-diff"], 2, "--task"),
        ([*m, "--mask", str(ghost)], 2, "7.2"),
        ([*m, "--mask", str(notmask)], 2, "not a headlens head mask"),
        ([*m, "--heads", "0.9"], 2, "heads 0..3"),
        (["ablate", "-m", str(ckpt), "--window", "500"], 2, "context"),
        (["ablate", "-m", str(tmp_path / "nomodel")], 3, "no such folder"),
    ]


def test_bad_input_one_line_error_and_nothing_overwritten(runner, tiny_checkpoint, tmp_path, tiny_loaded):
    out = tmp_path / "keep.csv"
    out.write_text("precious")
    for args, code, needle in _bad_cases(tiny_checkpoint, tmp_path):
        res = runner.invoke(cli, [*args, "--out", str(out), "--overwrite"])
        assert res.exit_code == code, (args, res.output)
        lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("headlens: error:"), (args, res.output)
        assert needle in lines[0], (args, lines[0])
        assert out.read_text() == "precious"
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("keep")) == ["keep.csv"], args
    res = runner.invoke(cli, ["ablate", "-m", str(tiny_checkpoint), *SMALL, "--out", str(out)])
    assert res.exit_code == 4 and "--overwrite" in res.output and out.read_text() == "precious"
    res = runner.invoke(cli, ["ablate", "-m", str(tiny_checkpoint), *SMALL, "--out", str(tmp_path / "t.txt")])
    assert res.exit_code == 2 and ".parquet" in res.output
