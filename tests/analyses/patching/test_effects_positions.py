"""Per-position patching normalises a position only some pairs have by those pairs' own gap, so
that subset must meet the task-gap rule itself (issue 22 review, F2): a position two pairs with
gaps 0.02 and 0.01 share is NaN, not 33.3 at the top of the list."""

from __future__ import annotations

import numpy as np
import pytest

from headlens.analyses.measure.verdicts import MIN_ITEMS
from headlens.analyses.patching.effects import normalised_effects, subset_counts, task_gap

#: The full-set effect is the plain ratio of means.
RATIO_TOL = 1e-12


def test_a_position_few_pairs_have_is_not_normalised_by_their_tiny_gap():
    rng = np.random.default_rng(0)
    n = 20
    clean, corrupt = rng.normal(3, 0.5, n), rng.normal(0, 0.5, n)
    clean[:2] = corrupt[:2] + np.array([0.02, 0.01])  # the two long pairs barely do the task
    gap = task_gap("logit-diff", clean, corrupt, n_resamples=200)
    assert gap.defined
    full = (clean + corrupt) / 2
    few = np.full(n, np.nan)
    few[:2] = corrupt[:2] + 0.5  # only the two long pairs have this position
    some = np.full(n, np.nan)
    some[2 : 2 + MIN_ITEMS] = (clean + corrupt)[2 : 2 + MIN_ITEMS] / 2  # enough pairs, a clear gap
    tiny_gap_many = np.full(n, np.nan)
    eff, low, high = normalised_effects(np.stack([full, few, some]), clean, corrupt, gap, n_resamples=200)
    assert eff[0] == pytest.approx(np.mean(full - corrupt) / np.mean(clean - corrupt), abs=RATIO_TOL)
    assert np.isnan([eff[1], low[1], high[1]]).all()
    assert eff[2] == pytest.approx(0.5) and np.isfinite([low[2], high[2]]).all()
    n_ok, why = subset_counts(np.stack([full, few, some, tiny_gap_many]), clean, corrupt, gap)
    assert list(n_ok) == [n, 2, MIN_ITEMS, 0]
    assert why[0] == "" and why[2] == ""
    assert f"only 2 of {n} pairs" in why[1] and str(MIN_ITEMS) in why[1]
    assert "no pair" in why[3]


def test_a_subset_with_enough_pairs_but_no_gap_is_nan():
    rng = np.random.default_rng(1)
    n = 30
    clean, corrupt = rng.normal(3, 0.5, n), rng.normal(0, 0.5, n)
    clean[:MIN_ITEMS] = corrupt[:MIN_ITEMS] + rng.normal(0, 0.01, MIN_ITEMS)  # these pairs do not do the task
    gap = task_gap("logit-diff", clean, corrupt, n_resamples=200)
    part = np.full(n, np.nan)
    part[:MIN_ITEMS] = corrupt[:MIN_ITEMS] + 1.0
    eff, _, _ = normalised_effects(part[None], clean, corrupt, gap, n_resamples=200)
    assert np.isnan(eff).all()
    _, why = subset_counts(part[None], clean, corrupt, gap)
    assert "task" in why[0] or "not distinguishable" in why[0]


def test_per_position_table_counts_the_pairs_of_each_row(tiny_model):
    from headlens.analyses.patching.activation import PatchConfig, run_patching
    from headlens.analyses.patching.builtin import induction_task

    task = induction_task(tiny_model, n=4, T=6, seed=1)
    result = run_patching(tiny_model, task, PatchConfig(heads=((0, 0),), per_position=True, directions=("denoising",), n_resamples=50))
    assert (result.table["n_pairs"] == len(task)).all() and len(result.table) == int(task.lengths.max())
