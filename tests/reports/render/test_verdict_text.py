"""The attribution lines (ablation, patching): a rank correlation's permutation p-value, and what a large p means."""

from __future__ import annotations

import math

from headlens.analyses.measure.stats import CHANCE_P
from headlens.reports.render.verdict_text import rank_test_words


def test_rank_test_wording():
    assert rank_test_words(None) == "" and rank_test_words(math.nan) == ""  # no attribution, or a folder saved before the p-value
    assert rank_test_words(0.0002) == " (permutation p < 0.001, two-sided)"
    assert rank_test_words(0.025) == " (permutation p = 0.025, two-sided)"
    assert rank_test_words(CHANCE_P - 1e-6) == " (permutation p = 0.050, two-sided)"
    assert rank_test_words(CHANCE_P).startswith(" (permutation p = 0.050: not distinguishable")  # at chance, as the overlap's rule
    weak = rank_test_words(0.084)
    assert weak == " (permutation p = 0.084: not distinguishable from no association at this number of heads)"
