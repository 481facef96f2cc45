"""Attribution patching is the first-order term of exact patching; direct logit attribution sums to the logit difference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from headlens.analyses.patching.attribution import agreement, run_attribution_patching
from headlens.analyses.patching.builtin import induction_task
from headlens.analyses.patching.dla import SUM_TOL, run_dla
from headlens.analyses.patching.pairs import pair_eval_sets
from headlens.analyses.patching.runs import cache_run, patched_values

#: Step of the finite difference (1e-3 leaves float32 rounding at ~3% of tiny_model's ~6e-3 slopes;
#: 1e-2 brings the largest error to ~0.3% of the largest slope), and how close (relative) the gradient must be to it.
EPS, FD_TOL = 1e-2, 2e-2
#: The estimate's largest error must be below this share of the largest slope (a zero estimator's is 1).
ZERO_BEAT = 0.1
#: A head's direct logit attribution computed by hand from a plain transformers forward.
DLA_HAND_TOL = 1e-4


def _matches(ours: np.ndarray, fd: np.ndarray) -> bool:
    """Close to the finite differences relative to their own size (tiny_model's slopes are ~1e-2,
    so an absolute floor would pass anything) and much closer than the zero estimator."""
    scale = float(np.abs(fd).max())
    return bool(np.allclose(ours, fd, rtol=FD_TOL, atol=FD_TOL * scale) and np.abs(ours - fd).max() < ZERO_BEAT * scale)


def test_attribution_is_the_derivative_of_exact_patching(tiny_model):
    model = tiny_model
    task = induction_task(model, n=4, T=8, seed=5)
    est = run_attribution_patching(model, task, n_resamples=0)
    clean_set, corrupt_set = pair_eval_sets(model, task)
    clean = cache_run(model, clean_set, z_layers=range(model.n_layers))
    corrupt = cache_run(model, corrupt_set, z_layers=range(model.n_layers))
    slopes = est.per_item - corrupt.values.numpy()[None, :]  # [head, item]
    checked = 0
    for layer in range(model.n_layers):
        step = corrupt.z[layer] + EPS * (clean.z[layer].double() - corrupt.z[layer].double()).float()
        patched = patched_values(model, corrupt_set, None, step, layer, [(h, None) for h in range(model.n_heads)])
        fd = ((patched - corrupt.values[None, :]) / EPS).numpy()
        ours = slopes[layer * model.n_heads : (layer + 1) * model.n_heads]
        assert _matches(ours, fd), f"layer {layer}: max error {np.abs(ours - fd).max():.3g}, max slope {np.abs(fd).max():.3g}"
        assert not _matches(np.zeros_like(fd), fd)  # the check can fail: a zero estimator does not pass it
        checked += int((np.abs(fd) > 1e-3).sum())
    assert checked > 0  # some slope is not zero


def test_agreement_counts_rank_correlation_and_top_k():
    exact = pd.DataFrame(
        {"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "name": ["0.0", "0.1", "1.0", "1.1"], "denoising": [0.9, 0.1, 0.5, -0.05]}
    )
    same = exact.rename(columns={"denoising": "attribution"})
    got = agreement(same, exact, k=2)
    assert {key: got[key] for key in ("spearman", "top_k", "top_k_overlap", "n_heads")} == {
        "spearman": pytest.approx(1.0),
        "top_k": 2,
        "top_k_overlap": 1.0,
        "n_heads": 4,
    }
    flipped = same.assign(attribution=[0.1, 0.9, -0.05, 0.5])
    got = agreement(flipped, exact, k=2)
    assert got["top_k_overlap"] == 0.0 and got["spearman"] < 0


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox"])
def test_direct_logit_attribution_sums_to_the_logit_difference(family, family_model):
    model = family_model(family)
    task = induction_task(model, n=5, T=8, seed=2)
    result = run_dla(model, task, batch_size=3)
    total = result.per_item.sum(0)
    assert np.abs(total - result.logit_diff).max() <= SUM_TOL * max(1.0, float(np.abs(result.logit_diff).max()))
    heads = result.table[result.table["kind"] == "head"]
    assert len(heads) == model.n_layers * model.n_heads
    assert heads["dla"].abs().max() > 1e-3  # heads do contribute


def test_one_heads_dla_by_hand_from_a_plain_transformers_forward(tiny_model, tiny_checkpoint):
    """z_h W_O^h through ln_f's frozen scale onto W_U[:, correct] - W_U[:, incorrect], from a plain
    GPT2LMHeadModel forward with hooks on c_proj's input and ln_f's input."""
    from transformers import GPT2LMHeadModel

    task = induction_task(tiny_model, n=5, T=8, seed=3)
    result = run_dla(tiny_model, task, batch_size=2)
    hf: Any = GPT2LMHeadModel.from_pretrained(str(tiny_checkpoint)).double().eval()  # submodules by name
    cfg = hf.config
    n_h, d_head = cfg.n_head, cfg.n_embd // cfg.n_head
    got: dict[str, torch.Tensor] = {}
    handles = [
        hf.transformer.h[l].attn.c_proj.register_forward_pre_hook(lambda m, args, l=l: got.__setitem__(f"z{l}", args[0].detach()))
        for l in range(cfg.n_layer)
    ]
    handles.append(hf.transformer.ln_f.register_forward_pre_hook(lambda m, args: got.__setitem__("resid", args[0].detach())))
    try:
        with torch.no_grad():
            hf(task.clean[:, : int(task.lengths.max())])
    finally:
        for h in handles:
            h.remove()
    idx = torch.arange(len(task))
    last = task.lengths - 1
    resid = got["resid"][idx, last]
    scale = (resid.var(-1, unbiased=False, keepdim=True) + cfg.layer_norm_epsilon).sqrt()
    w_u = hf.lm_head.weight.T  # [d_model, vocab]
    direction = w_u[:, task.correct] - w_u[:, task.incorrect]  # [d_model, item]
    checked = 0
    for layer, head in [(0, 1), (1, 2)]:
        z = got[f"z{layer}"][idx, last, head * d_head : (head + 1) * d_head]
        w_o = hf.transformer.h[layer].attn.c_proj.weight[head * d_head : (head + 1) * d_head]  # Conv1D: x @ W
        out = z @ w_o
        normed = (out - out.mean(-1, keepdim=True)) / scale * hf.transformer.ln_f.weight
        by_hand = (normed * direction.T).sum(-1).detach().numpy()
        row = 1 + layer * (n_h + 2) + head  # embeddings, then per layer: heads, attention bias, MLP
        assert result.table.iloc[row]["component"] == f"{layer}.{head}"
        assert np.abs(result.per_item[row] - by_hand).max() <= DLA_HAND_TOL, (result.per_item[row], by_hand)
        checked += int(np.abs(by_hand).max() > 10 * DLA_HAND_TOL)
    assert checked > 0  # the heads checked contribute more than the tolerance
