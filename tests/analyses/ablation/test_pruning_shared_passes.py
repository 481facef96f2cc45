"""Pruning's shared passes (issue 23 item 4) give the numbers of the naive sweep.

The naive sweep: every step's ranking from its own gradient pass (``head_importance`` on the
model as pruned so far), every value (step and random order) from its own full forward
(``ablated_values``).  The fast sweep reads a step's value off the gradient pass that ranks the
next step, and continues each random order's next mask from the last one's residuals.
"""

from __future__ import annotations

import pytest
import torch

import headlens.analyses.ablation.pruning as pruning_mod
from headlens.analyses.ablation.gradients import gate_gradients, gate_gradients_and_values, head_importance
from headlens.analyses.ablation.incremental import MaskSequence
from headlens.analyses.ablation.pruning import PruneConfig, _pick, run_pruning
from headlens.analyses.ablation.runs import ablated_values
from headlens.analyses.measure.evalset import text_eval_set
from headlens.analyses.measure.masks import HeadMask
from headlens.analyses.stimuli import eval_text

#: The same computation continued from a stored residual, or gated by 1: float rounding only.
VALUE_TOL = 1e-6


@pytest.fixture(scope="module")
def deep_model(tmp_path_factory):
    """4 layers x 3 heads (d_model 48): masks that differ from layer 1, 2 or 3 on."""
    from headlens.analyses.synthetic.tiny import TinySpec, build_tiny_checkpoint
    from headlens.probes.loading import load_model

    path = build_tiny_checkpoint(tmp_path_factory.mktemp("deep"), TinySpec(n_layer=4, n_head=3, d_model=48, n_ctx=64, seed=1))
    return load_model(model=str(path), device="cpu")


@pytest.fixture(scope="module")
def windows(deep_model):
    return text_eval_set(deep_model.tokenizer, eval_text(), n_windows=3, window=16, prepend_bos=True, n_ctx=deep_model.n_ctx)


def _mask(model, heads):
    return HeadMask.from_heads(sorted(heads), n_layers=model.n_layers, n_heads=model.n_heads) if heads else None


def test_gated_pass_values_equal_the_plain_forward(deep_model, windows):
    mask = _mask(deep_model, {(0, 1), (2, 0), (3, 2)})
    grads, values = gate_gradients_and_values(deep_model, windows, mask=mask, batch_size=2)
    plain = ablated_values(deep_model, windows, [], mask=mask, batch_size=2)
    assert (values - plain).abs().max() <= VALUE_TOL
    ref = gate_gradients(deep_model, windows, mask=mask, batch_size=2)
    assert torch.allclose(grads, ref, equal_nan=True, atol=0, rtol=0)


def test_mask_sequence_equals_a_full_forward_per_mask(deep_model, windows):
    order = [(3, 0), (2, 1), (3, 2), (1, 0), (0, 2), (2, 2), (1, 1)]
    seq = MaskSequence(deep_model, windows, batch_size=2)
    assert seq.reuse
    for n in range(1, len(order) + 1):
        fast = seq.values(set(order[:n]))
        naive = ablated_values(deep_model, windows, [], mask=_mask(deep_model, order[:n]), batch_size=2)
        assert (fast - naive).abs().max() <= VALUE_TOL, n
    # the first run is a full forward; later runs start at the first layer with an added head
    assert seq.runs == {0: 2, 1: 2, 2: 2, 3: 1}


def test_prune_study_equals_the_naive_sweep(deep_model, windows):
    cfg = PruneConfig(step=0.3, random_seeds=2, seed=5, batch_size=2)
    result = run_pruning(deep_model, windows, cfg)
    curve = result.curve
    total = deep_model.n_layers * deep_model.n_heads
    removed: set = set()
    for st in range(1, len(curve)):
        imp = head_importance(deep_model, windows, mask=_mask(deep_model, removed), batch_size=2)
        n = int(curve["n_removed"].iloc[st]) - len(removed)
        added = _pick(imp, removed, n)
        assert " ".join(f"{layer}.{h}" for layer, h in added) == curve["removed_this_step"].iloc[st], st
        removed |= set(added)
        naive = float(ablated_values(deep_model, windows, [], mask=_mask(deep_model, removed), batch_size=2).double().mean())
        assert abs(curve["value"].iloc[st] - naive) <= VALUE_TOL, st
    assert len(removed) == total
    heads_all = [(layer, h) for layer in range(deep_model.n_layers) for h in range(deep_model.n_heads)]
    for s in range(cfg.random_seeds):
        gen = torch.Generator().manual_seed(cfg.seed * 1000 + s)
        order = [heads_all[i] for i in torch.randperm(total, generator=gen).tolist()]
        for r in result.random[result.random["seed"] == s].itertuples():
            if r.n_removed == 0:
                continue
            naive = float(
                ablated_values(deep_model, windows, [], mask=_mask(deep_model, order[: r.n_removed]), batch_size=2).double().mean()
            )
            assert abs(r.value - naive) <= VALUE_TOL, (s, r.step)
    assert sum(result.info["random_runs_from_layer"].values()) == cfg.random_seeds * (len(curve) - 1)
    assert set(result.info["random_runs_from_layer"]) - {"0"}, "no random-order run continued from a stored residual"


def test_prune_resume_reads_the_stored_ranking(deep_model, windows, tmp_path, monkeypatch):
    from headlens.reports.api.journal import Journal

    cfg = PruneConfig(step=0.3, random_seeds=1, seed=2, batch_size=2)
    reference = run_pruning(deep_model, windows, cfg)
    real = pruning_mod.gate_gradients_and_values
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated crash")
        return real(*args, **kwargs)

    monkeypatch.setattr(pruning_mod, "gate_gradients_and_values", flaky)
    path = tmp_path / "p.jsonl"
    with pytest.raises(RuntimeError), Journal(path, "prune", {"k": 1}, resume=False, overwrite=False) as j:
        run_pruning(deep_model, windows, cfg, journal=j)
    counted = {"n": 0}

    def counting(*args, **kwargs):
        counted["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(pruning_mod, "gate_gradients_and_values", counting)
    with Journal(path, "prune", {"k": 1}, resume=True, overwrite=False) as j:
        assert sum(r["kind"] == "step" for r in j.records) == 2
        resumed = run_pruning(deep_model, windows, cfg, journal=j)
    assert counted["n"] == len(reference.curve) - 1 - 2  # steps 2.. only: the stored steps' rankings are read, not recomputed
    import pandas as pd

    pd.testing.assert_frame_equal(resumed.curve, reference.curve, check_exact=True)
    pd.testing.assert_frame_equal(resumed.random, reference.random, check_exact=True)


def test_prune_study_embedding_metric_values_equal_full_forwards(deep_model):
    """The embedding change: exact ranking; each step's value is the exact table's baseline pass."""
    from headlens.analyses.ablation.pruning import exact_importance
    from headlens.analyses.measure.embedding import embedding_eval_set, split_sentences

    data = embedding_eval_set(deep_model, split_sentences(eval_text(), complete_only=True), n_sentences=3, max_tokens=12, prepend_bos=True)
    cfg = PruneConfig(step=0.25, random_seeds=1, seed=1, batch_size=2, max_fraction=0.75)
    result = run_pruning(deep_model, data, cfg)
    removed: set = set()
    for st in range(1, len(result.curve)):
        imp = exact_importance(deep_model, data, mask=_mask(deep_model, removed), batch_size=2)
        n = int(result.curve["n_removed"].iloc[st]) - len(removed)
        added = _pick(imp, removed, n)
        assert " ".join(f"{layer}.{h}" for layer, h in added) == result.curve["removed_this_step"].iloc[st], st
        removed |= set(added)
        naive = float(ablated_values(deep_model, data, [], mask=_mask(deep_model, removed), batch_size=2).double().mean())
        assert abs(result.curve["value"].iloc[st] - naive) <= VALUE_TOL, st
    assert len(result.curve) >= 3
