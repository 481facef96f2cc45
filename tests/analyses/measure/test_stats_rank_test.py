"""spearman_p: the permutation test of a rank correlation, against every re-pairing counted by brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import rankdata

from headlens.analyses.measure.stats import SPEARMAN_PERMUTATIONS, spearman, spearman_p

#: A drawn p-value against the exact one: 4 standard errors of a proportion near 0.5 over SPEARMAN_PERMUTATIONS draws.
DRAW_ATOL = 4 * 0.5 / np.sqrt(SPEARMAN_PERMUTATIONS)
#: rho of a re-pairing against the observed one (both from the same ranks): ties decided in float64.
RHO_RTOL = 1e-12


def _exact_p(x, y) -> float:
    """Two-sided p by brute force: the share of all n! re-pairings whose |rho| reaches the observed one's
    (scipy.stats.spearmanr); each re-pairing's rho is numpy's Pearson correlation of the average ranks."""
    observed = abs(spearman(x, y))  # scipy.stats.spearmanr
    rx, ry = rankdata(x), rankdata(y)
    perms = rx[np.array(list(itertools.permutations(range(len(x)))))]  # [n!, n]
    assert abs(np.corrcoef(rx, ry)[0, 1]) == pytest.approx(observed, rel=RHO_RTOL)  # the same rho as scipy's
    pc, yc = perms - perms.mean(1, keepdims=True), ry - ry.mean()
    rhos = (pc @ yc) / (np.linalg.norm(pc, axis=1) * np.linalg.norm(yc))
    return float(np.mean(np.abs(rhos) >= observed * (1 - RHO_RTOL)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spearman_p_is_exact_at_a_few_heads(seed):
    """n = 6 (720 re-pairings, all enumerated by scipy): equal to the brute-force count, ties on one side or both."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=6)
    y = np.round(x + rng.normal(size=6), 0)  # rounded: tied ranks on one side
    assert spearman_p(x, y) == pytest.approx(_exact_p(x, y), abs=1e-12)
    x2 = np.round(x, 0)  # and on both (heads whose delta and attribution are both 0, say)
    assert spearman_p(x2, y) == pytest.approx(_exact_p(x2, y), abs=1e-12)


def test_spearman_p_counts_both_tails_with_ties_on_both_sides():
    """A case where doubling the smaller one-sided p (0.8) is not the share of re-pairings reaching |rho| (7/15)."""
    x, y = [0, 0, 2, 0, 0, 2], [2, 0, 2, 0, 2, 2]
    assert _exact_p(x, y) == pytest.approx(7 / 15)
    assert spearman_p(x, y) == pytest.approx(7 / 15, abs=1e-12)


def test_spearman_p_draws_re_pairings_past_the_budget():
    """n = 8 (40,320 re-pairings > SPEARMAN_PERMUTATIONS): drawn, within DRAW_ATOL of the exact count, seeded."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=8)
    y = x + 1.5 * rng.normal(size=8)
    exact = _exact_p(x, y)
    assert 0.02 < exact < 0.98  # not a comparison at the floor or the ceiling
    assert spearman_p(x, y, seed=0) == pytest.approx(exact, abs=DRAW_ATOL)
    assert spearman_p(x, y, seed=0) == spearman_p(x, y, seed=0)


def test_spearman_p_small_and_undefined_cases():
    assert spearman_p([1, 2, 3], [1, 2, 3]) == pytest.approx(2 / 6)  # only the pairing and its reverse reach |rho| = 1
    assert spearman_p([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(2 / 24)
    assert np.isnan(spearman_p([1, 2, np.nan], [3, np.nan, 4])) and np.isnan(spearman_p([1, 1, 1], [1, 2, 3]))
    assert spearman_p([1, 2, np.nan, 4, 5], [2, 1, 7, 4, 3]) == spearman_p([1, 2, 4, 5], [2, 1, 4, 3])  # NaN pairs dropped
    assert np.isnan(spearman([1, 1], [1, 2])) and np.isnan(spearman_p([1, 1], [1, 2]))
