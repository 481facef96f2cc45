"""Attribution patching is the first-order term of exact patching; direct logit attribution sums to the logit difference."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from headlens.analyses.patching.attribution import agreement, attribution_patch
from headlens.analyses.patching.builtin import induction_task
from headlens.analyses.patching.dla import SUM_TOL, direct_logit_attribution
from headlens.analyses.patching.pairs import pair_eval_sets
from headlens.analyses.patching.runs import cache_run, patched_values

#: Step of the finite difference, and how close (relative) the gradient must be to it.
EPS, FD_TOL = 1e-3, 2e-2


def test_attribution_is_the_derivative_of_exact_patching(tiny_model):
    model = tiny_model
    task = induction_task(model, n=4, T=8, seed=5)
    est = attribution_patch(model, task, n_resamples=0)
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
        assert np.allclose(ours, fd, rtol=FD_TOL, atol=FD_TOL * max(1.0, float(np.abs(fd).max())))
        checked += int((np.abs(fd) > 1e-3).sum())
    assert checked > 0  # some slope is not zero


def test_agreement_counts_rank_correlation_and_top_k():
    exact = pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "name": ["0.0", "0.1", "1.0", "1.1"], "denoising": [0.9, 0.1, 0.5, -0.05]})
    same = exact.rename(columns={"denoising": "attribution"})
    assert agreement(same, exact, k=2) == {"spearman": pytest.approx(1.0), "top_k": 2, "top_k_overlap": 1.0, "n_heads": 4}
    flipped = same.assign(attribution=[0.1, 0.9, -0.05, 0.5])
    got = agreement(flipped, exact, k=2)
    assert got["top_k_overlap"] == 0.0 and got["spearman"] < 0


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox"])
def test_direct_logit_attribution_sums_to_the_logit_difference(family, family_model):
    model = family_model(family)
    task = induction_task(model, n=5, T=8, seed=2)
    result = direct_logit_attribution(model, task, batch_size=3)
    total = result.per_item.sum(0)
    assert np.abs(total - result.logit_diff).max() <= SUM_TOL * max(1.0, float(np.abs(result.logit_diff).max()))
    heads = result.table[result.table["kind"] == "head"]
    assert len(heads) == model.n_layers * model.n_heads
    assert heads["dla"].abs().max() > 1e-3  # heads do contribute
