"""The percentile bootstrap's under-coverage over few items, and the one note that says so
(:func:`headlens.analyses.measure.stats.small_sample_note`, bound :data:`headlens.analyses.measure.verdicts.MIN_ITEMS`)."""

from __future__ import annotations

import re

import numpy as np

from headlens.analyses.measure.stats import bootstrap_mean_ci, percentile_coverage, small_sample_note
from headlens.analyses.measure.verdicts import MIN_ITEMS

#: Trials of this test's own coverage simulation (a few hundred: fast; sd of a coverage near 0.8 about 0.02).
TRIALS = 300
#: How far the note's figure may lie from this test's simulation (about 3 sd of the two together).
COVERAGE_TOL = 0.08


def _simulated_coverage(n: int, *, trials: int = TRIALS, seed: int = 1234) -> float:
    """One sample of ``n`` standard-normal items per trial, each with its own bootstrap (own seed): how often the 95% interval holds 0."""
    rng = np.random.default_rng(seed)
    hits = 0
    for t in range(trials):
        low, high = bootstrap_mean_ci(rng.standard_normal((n, 1)), n_resamples=400, seed=t)
        hits += bool(low[0] <= 0.0 <= high[0])
    return hits / trials


def test_the_percentile_bootstrap_under_covers_over_four_items():
    small, large = _simulated_coverage(4), _simulated_coverage(32)
    assert small < 0.9, small  # a nominal 95% interval over 4 items holds the mean about 4 times in 5
    assert large > small + 0.05, (small, large)  # and the shortfall shrinks with the items


def test_the_note_gives_the_coverage_measured_at_that_size():
    note = small_sample_note(4, items="windows")
    assert note is not None
    assert note.startswith("intervals from n=4 windows: a percentile bootstrap covers about ")
    assert note.endswith("% at this size, not 95%: read them as rough")
    said = int(re.search(r"about (\d+)%", note).group(1)) / 100  # type: ignore[union-attr]
    assert abs(said - _simulated_coverage(4)) < COVERAGE_TOL, (said, note)
    assert said == round(percentile_coverage(4), 2)
    assert "not 90%" in (small_sample_note(4, items="pairs", level=0.9) or "")


def test_the_note_is_given_below_min_items_only():
    assert small_sample_note(16) is None
    assert small_sample_note(MIN_ITEMS) is None  # the same bound as a finding's (one notion of "too few")
    assert small_sample_note(MIN_ITEMS - 1) is not None
    assert small_sample_note(1) is None and small_sample_note(None) is None  # no interval at all: nothing to warn about
