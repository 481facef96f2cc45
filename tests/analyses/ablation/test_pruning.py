"""Head pruning: KV-cache arithmetic, the planted model's circuit survives, resume, the CLI."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
import torch

import headlens.analyses.ablation.pruning as pruning_mod
from headlens.analyses.ablation.pruning import CURVE_COLUMNS, PruneConfig, kv_bytes_saved, run_pruning
from headlens.analyses.measure.evalset import repeated_tokens_eval_set, text_eval_set
from headlens.analyses.measure.masks import read_mask
from headlens.analyses.stimuli import eval_text
from headlens.probes.errors import InputError
from headlens.reports.api.journal import Journal
from headlens.reports.cli.main import cli

SMALL = ["--n-windows", "3", "--window", "24"]


def _fake(n_layers, n_heads, d_head, dtype, n_kv=None) -> Any:  # the few LoadedModel fields kv_bytes_saved reads
    return SimpleNamespace(n_layers=n_layers, n_heads=n_heads, d_head=d_head, dtype=dtype, n_kv_heads=n_kv or n_heads)


def test_kv_cache_bytes_formula():
    # GPT-2 small, float32: one head = 2 (K and V) x 64 x 1000 tokens x 4 bytes = 512,000 bytes
    gpt2 = _fake(12, 12, 64, torch.float32)
    assert kv_bytes_saved(gpt2, {(0, 0)}) == (1, 512_000)
    assert kv_bytes_saved(gpt2, {(l, h) for l in range(12) for h in range(12)}) == (144, 144 * 512_000)
    # grouped-query attention, bfloat16: 8 query heads share 2 KV heads (groups of 4)
    gqa = _fake(2, 8, 128, torch.bfloat16, n_kv=2)
    assert kv_bytes_saved(gqa, {(0, 0), (0, 1), (0, 2)}) == (0, 0)  # group 0 still has a query head
    assert kv_bytes_saved(gqa, {(0, 0), (0, 1), (0, 2), (0, 3), (1, 4)}) == (1, 2 * 128 * 1000 * 2)


@pytest.mark.slow
def test_planted_pruning_removes_the_no_role_heads_first_and_keeps_the_induction_circuit(planted_model):
    data = repeated_tokens_eval_set(n=3, T=10, seed=1, vocab_size=int(planted_model.bridge.cfg.d_vocab), bos_id=planted_model.bos_id)
    result = run_pruning(planted_model, data, PruneConfig(step=0.25, random_seeds=2, seed=0))
    curve = result.curve
    assert list(curve.columns) == CURVE_COLUMNS
    # importance order: the previous-token (0.0) and induction (1.0) heads go last
    last_two = curve["removed_this_step"].iloc[-2:].tolist()
    assert sorted(last_two) == ["0.0", "1.0"]
    assert set(result.pruned.removed).isdisjoint({(0, 0), (1, 0)})
    assert result.removable_fraction == 0.75 and len(result.pruned) == 6
    # the random control breaks the circuit much earlier: at 25% removed its mean loss is far higher
    row = curve.iloc[1]
    assert row["random_mean"] > row["value"] + 1.0
    imp = result.importance.set_index(["layer", "head"])["importance"]
    assert imp.loc[(0, 0)] > 0.99 and imp.loc[(1, 0)] > 0.99  # per-layer L2 normalised


def test_prune_resume_after_an_exception_is_identical(tiny_model, tmp_path, monkeypatch):
    data = text_eval_set(tiny_model.tokenizer, eval_text(), n_windows=2, window=20, prepend_bos=True, n_ctx=tiny_model.n_ctx)
    cfg = PruneConfig(step=0.5, random_seeds=2, seed=3, max_fraction=0.75)
    reference = run_pruning(tiny_model, data, cfg)
    real = pruning_mod.ablated_values  # the last step's value (earlier steps' come from the ranking passes)
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated crash")
        return real(*args, **kwargs)

    monkeypatch.setattr(pruning_mod, "ablated_values", flaky)
    path = tmp_path / "p.jsonl"
    with pytest.raises(RuntimeError), Journal(path, "prune", {"k": 1}, resume=False, overwrite=False) as j:
        run_pruning(tiny_model, data, cfg, journal=j)
    monkeypatch.setattr(pruning_mod, "ablated_values", real)
    with Journal(path, "prune", {"k": 1}, resume=True, overwrite=False) as j:
        assert sum(r["kind"] == "step" for r in j.records) == 2
        resumed = run_pruning(tiny_model, data, cfg, journal=j)
    assert resumed.curve["n_removed"].tolist() == [0, 4, 6]
    pd.testing.assert_frame_equal(resumed.curve, reference.curve, check_exact=True)
    pd.testing.assert_frame_equal(resumed.random, reference.random, check_exact=True)
    assert resumed.pruned == reference.pruned
    with pytest.raises(InputError, match="step must be in"):  # the library names its parameter; the CLI says --step
        PruneConfig(step=0)


@pytest.mark.all_figure_formats  # reads the SVG files (or the file list naming them)
def test_prune_cli_outputs_and_mask_round_trip_into_ablate(tiny_checkpoint, tmp_path, runner):
    out = tmp_path / "prune"
    res = runner.invoke(
        cli,
        ["prune", "-m", str(tiny_checkpoint), *SMALL, "--step", "0.5", "--max-fraction", "0.75", "--random-seeds", "2", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    names = {p.name for p in out.iterdir()}
    assert names == {
        "curve.csv",
        "random_orders.csv",
        "importance.csv",
        "pruned_heads.json",
        "manifest.json",
        "pruning_curve.png",
        "pruning_curve.svg",
    }
    curve = pd.read_csv(out / "curve.csv")
    assert list(curve.columns) == CURVE_COLUMNS
    assert curve["n_removed"].tolist() == [0, 4, 6]
    assert (curve["kv_bytes_saved_per_1k_tokens"] == 2 * curve["n_removed"] * 16 * 1000 * 4).all()
    assert curve["random_std"].iloc[1:].gt(0).all() and curve["random_std"].iloc[0] == 0
    manifest = json.loads((out / "manifest.json").read_text())
    pr = manifest["pruning"]
    assert pr["unablated_value"] == pytest.approx(curve["value"].iloc[0])
    mask = read_mask(out / "pruned_heads.json", n_layers=2, n_heads=4)
    assert mask.fraction == pr["removable_fraction"] and mask.info["source"] == "headlens prune"
    assert "removable within +5%" in res.output and "KV cache saved" in res.output
    # the pruned set goes back into ablate
    res = runner.invoke(
        cli,
        [
            "ablate",
            "-m",
            str(tiny_checkpoint),
            *SMALL,
            "--mask",
            str(out / "pruned_heads.json"),
            "--out",
            str(tmp_path / "a.csv"),
            "--no-attribution",
        ],
    )
    assert res.exit_code == 0, res.output
    assert len(pd.read_csv(tmp_path / "a.csv")) == 8 - len(mask)
    # re-running into the same folder is refused; bad options are one-line errors
    res = runner.invoke(cli, ["prune", "-m", str(tiny_checkpoint), *SMALL, "--out", str(out)])
    assert res.exit_code == 4 and "--overwrite" in res.output
    for bad, needle in ((["--step", "0"], "--step"), (["--max-fraction", "1.5"], "--max-fraction"), (["--metric", "logit-diff"], "--task")):
        res = runner.invoke(cli, ["prune", "-m", str(tiny_checkpoint), *SMALL, *bad, "--out", str(tmp_path / "x")])
        assert res.exit_code == 2 and needle in res.output and res.output.startswith("headlens: error:"), res.output
        assert not (tmp_path / "x").exists()


def test_figures_are_deterministic(tmp_path):
    from headlens.reports.render.figures.ablation import ablation_heatmap, pruning_curve

    table = pd.DataFrame({"layer": [0, 0, 1], "head": [0, 1, 1], "method": "zero", "metric": "loss", "delta": [0.1, -0.2, 0.05]})
    a = ablation_heatmap(table, tmp_path / "a", n_layers=2, n_heads=2, baseline=3.0)
    b = ablation_heatmap(table, tmp_path / "b", n_layers=2, n_heads=2, baseline=3.0)
    assert [p.suffix for p in a] == [".png", ".svg"]
    assert a[1].read_bytes() == b[1].read_bytes()
    curve = pd.DataFrame(
        {
            "fraction_removed": [0, 0.5, 1],
            "value": [3.0, 3.1, 5.0],
            "random_mean": [3.0, 4.0, 5.0],
            "random_std": [0, 0.3, 0],
            "random_min": [3.0, 3.6, 5.0],
            "random_max": [3.0, 4.4, 5.0],
            "kv_bytes_saved_per_1k_tokens": [0, 1000, 2000],
        }
    )
    paths = pruning_curve(curve, tmp_path / "c", metric="loss", baseline=3.0, max_increase=0.05, removable=0.5)
    assert all(p.stat().st_size > 1000 for p in paths)
