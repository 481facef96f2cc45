"""The IOI class analysis: the rules on a constructed heads table (each rule can fail), the run on
the tiny GPT-2 (tables, reasons, what is measured where), OV copying's sign."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import headlens
from headlens.analyses.patching.ioi import (
    ATTENTION_MIN,
    CLASS_COLUMNS,
    CLASSES,
    HEAD_COLUMNS,
    SCREEN_ATTENTION,
    IOIConfig,
    class_masks,
    class_table,
    run_ioi,
)
from headlens.analyses.patching.ioi_measure import copying_shares, measure_attention
from headlens.analyses.patching.ioi_task import ioi_pairs
from headlens.probes.loading import load_model

#: name -> the figures that differ from a head that meets no rule
HEADS = {
    "1.0": {"attn_io_low": 0.3, "copying_low": 0.8, "direct_low": 0.1},  # name mover
    "1.1": {"attn_io_low": 0.3, "copying_low": 0.4, "direct_low": 0.1},  # copies too rarely
    "1.2": {"attn_io_low": 0.1, "copying_low": 0.9, "direct_low": 0.1},  # attends too little
    "1.3": {"attn_io_low": 0.3, "negative_copying_low": 0.9, "direct_high": -0.1},  # negative name mover
    "0.0": {"sinh_path": 0.1, "sinh_path_low": 0.02},  # S-inhibition
    "0.1": {"sinh_path": 0.1, "sinh_path_low": -0.01},  # interval reaches 0
    "0.2": {"attn_ind_low": 0.3, "feed_path": 0.2, "feed_path_low": 0.1},  # induction
    "0.3": {"attn_dup_low": 0.3, "feed_path": 0.04, "feed_path_low": 0.01},  # path below PATH_MIN
}


def _table(heads: dict[str, dict[str, float]]) -> pd.DataFrame:
    rows = []
    for name, figures in heads.items():
        row: dict = {c: 0.0 for c in HEAD_COLUMNS}
        row |= {"name": name, "layer": int(name.split(".")[0]), "head": int(name.split(".")[1]), "direct_high": 0.5, "classes": ""}
        row |= {c: np.nan for c in HEAD_COLUMNS if c.startswith(("sinh_path", "feed_path"))}
        rows.append(row | figures)
    return pd.DataFrame(rows, columns=HEAD_COLUMNS)


def test_each_rule_needs_all_its_evidence():
    table = _table(HEADS)
    masks = class_masks(table)
    found = {cls: list(table.loc[masks[cls], "name"]) for cls in CLASSES}
    assert found == {
        "name mover": ["1.0"],
        "negative name mover": ["1.3"],
        "S-inhibition": ["0.0"],
        "induction": ["0.2"],
        "duplicate-token": [],
    }


def test_an_empty_class_says_why():
    table = _table({k: v for k, v in HEADS.items() if k in ("1.1", "1.2", "0.3")})
    classes = class_table(table, class_masks(table), nm=[], si=[])
    assert list(classes.columns) == CLASS_COLUMNS and list(classes["class"]) == list(CLASSES)
    assert (classes["n_heads"] == 0).all() and (classes["reason"] != "").all()
    reason = classes.set_index("class")["reason"]
    assert reason["name mover"].startswith("1 heads attend from END to IO") and "0 of them copy IO" in reason["name mover"]
    assert reason["S-inhibition"] == "no name mover to path-patch into"
    assert "by attention alone: 0.3 (not shown to feed the circuit)" in reason["duplicate-token"]


def test_an_empty_pattern_class_names_its_own_best_path():
    """The duplicate-token reason names the best path among heads with that pattern, not an induction head's."""
    table = _table({k: v for k, v in HEADS.items() if k in ("0.2", "0.3")})
    table.loc[table["name"] == "0.3", "feed_path_low"] = -0.01
    classes = class_table(table, class_masks(table), nm=[(1, 0)], si=[(1, 1)]).set_index("class")
    assert list(classes.loc["induction", "heads"].split()) == ["0.2"]
    reason = classes.loc["duplicate-token", "reason"]
    assert reason.startswith("1 heads have the attention pattern, 1 of them path-patched") and "(largest: 0.3 +0.040" in reason


def test_run_on_the_tiny_model(tiny_model):
    run = run_ioi(tiny_model, IOIConfig(n_pairs=6, n_resamples=50))
    heads, classes = run.heads, run.classes
    assert list(heads.columns) == HEAD_COLUMNS and len(heads) == tiny_model.n_layers * tiny_model.n_heads
    for key in ("attn_io", "attn_s2", "attn_dup", "attn_ind"):
        assert heads[key].between(0, 1).all() and (heads[f"{key}_low"] <= heads[f"{key}_high"]).all()
    measured = heads["copying"].notna()
    assert (measured == (heads["attn_io"] >= SCREEN_ATTENTION)).all()
    assert (heads["classes"] == "").all() == (classes["n_heads"] == 0).all()
    assert ((classes["n_heads"] > 0) | (classes["reason"] != "")).all()
    assert run.info["n_pairs"] == 6 and run.info["task"]["orders"] == {"ABBA": 3, "BABA": 3}
    assert run.info["thresholds"]["attention_min"] == ATTENTION_MIN


def test_ov_copying_changes_sign_with_the_output_projection(tiny_checkpoint):
    model = load_model(model=str(tiny_checkpoint), device="cpu")
    pairs = ioi_pairs(model, n=8, seed=0)
    resid = measure_attention(model, pairs).resid_io
    heads = [(0, h) for h in range(model.n_heads)]
    copying, negative = copying_shares(model, pairs, resid, heads)
    assert np.isnan(copying[:, 1]).all()  # layer 1 not asked for
    proj = model.bridge.original_model.transformer.h[0].attn.c_proj.weight
    with torch.no_grad():
        proj.neg_()
    flipped, flipped_negative = copying_shares(model, pairs, resid, heads)
    assert np.array_equal(flipped[:, 0], negative[:, 0]) and np.array_equal(flipped_negative[:, 0], copying[:, 0])


@pytest.mark.parametrize("bad", [{"n_pairs": 1}, {"n_resamples": 0}])
def test_bad_settings_are_refused(bad):
    with pytest.raises(headlens.HeadlensError):
        IOIConfig(**bad)


def test_paths_run_in_the_noising_direction(tiny_model):
    """The swapped pairs make the clean prompt the run patched into and ``logit(S) - logit(IO)`` the
    metric, so that an effect is the share of the clean - ABC gap a path removes."""
    from headlens.analyses.patching.ioi import _noising

    task = ioi_pairs(tiny_model, n=4).task
    swapped = _noising(task)
    assert torch.equal(swapped.clean, task.corrupt) and torch.equal(swapped.corrupt, task.clean)
    assert torch.equal(swapped.correct, task.incorrect) and torch.equal(swapped.incorrect, task.correct)
    assert swapped.source["path_direction"] == "noising" and "path_direction" not in task.source


def test_a_name_mover_in_layer_0_is_no_receiver(tiny_model):
    from headlens.analyses.patching.ioi import _paths

    pairs = ioi_pairs(tiny_model, n=4)
    assert _paths(tiny_model, pairs, [(0, 1)], "q", None, IOIConfig(n_pairs=4, n_resamples=10)) is None
    table = _paths(tiny_model, pairs, [(0, 1), (1, 2)], "q", None, IOIConfig(n_pairs=4, n_resamples=10))
    assert table is not None and set(table["receiver"]) == {"1.2"} and len(table) == tiny_model.n_heads
