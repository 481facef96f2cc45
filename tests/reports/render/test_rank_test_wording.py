"""The ablation's attribution line: the rank correlation with its permutation p-value, and what a large p means."""

from __future__ import annotations

import math

from headlens.reports.render.finding_lines import RANK_ALPHA, _rank_test


def test_rank_test_wording():
    assert _rank_test(None) == "" and _rank_test(math.nan) == ""  # no attribution, or a folder saved before the p-value
    assert _rank_test(0.0002) == " (permutation p < 0.001, two-sided)"
    assert _rank_test(0.025) == " (permutation p = 0.025, two-sided)"
    assert _rank_test(RANK_ALPHA) == " (permutation p = 0.050, two-sided)"
    weak = _rank_test(0.084)
    assert weak == " (permutation p = 0.084: not distinguishable from no association at this number of heads)"
